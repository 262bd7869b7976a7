/* CPU feature detection (CPUID + XGETBV) and the kernel variant chosen from it once at
 * start-up. Tests can force a lower variant to check every one the machine supports. */
#ifndef TS_TARGET_CPU_FEATURES_H
#define TS_TARGET_CPU_FEATURES_H

typedef enum ts_cpu_variant {
    TS_CPU_SCALAR = 0,
    TS_CPU_AVX2 = 1,       /* AVX2 + FMA */
    TS_CPU_AVX512BF16 = 2, /* AVX-512F/BW/VL + BF16 (vdpbf16ps) */
    TS_CPU_VARIANT_COUNT
} ts_cpu_variant;

typedef struct ts_cpu_features {
    int avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512bf16, avx512vnni;
    int gfni; /* GF2P8AFFINEQB (CPUID 7.0 ECX bit 8): the Q4_0 decode's nibble split on AVX-512 */
    int amx_int8; /* AMX-TILE + AMX-INT8 listed and their state enabled in XCR0 (still needs arch_prctl) */
    char brand[64];
} ts_cpu_features;

const ts_cpu_features *ts_cpu_features_get(void);
/* Best variant this CPU supports that tessera implements. */
ts_cpu_variant ts_cpu_best_variant(void);
int ts_cpu_variant_supported(ts_cpu_variant v);
/* AMX-INT8 tiles usable: CPUID lists them, the OS enables their state (XCR0), the AVX-512
 * variant runs here, and Linux granted this process the tiles (arch_prctl, asked once). */
int ts_cpu_amx_usable(void);
const char *ts_cpu_variant_name(ts_cpu_variant v);

#endif
