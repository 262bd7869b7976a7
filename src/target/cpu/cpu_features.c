/* CPUID-based detection. AVX/AVX-512 state must also be enabled by the OS (XCR0), or the
 * instructions fault even though CPUID lists them. */
#define _GNU_SOURCE /* syscall() */
#include "target/cpu/cpu_features.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static unsigned long long xgetbv0(void) {
    unsigned int eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}

static void detect(ts_cpu_features *f) {
    unsigned a, b, c, d;
    memset(f, 0, sizeof *f);
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    f->fma = (c >> 12) & 1;
    f->f16c = (c >> 29) & 1;
    unsigned long long xcr0 = osxsave ? xgetbv0() : 0;
    int ymm_ok = (xcr0 & 0x6) == 0x6, zmm_ok = (xcr0 & 0xe6) == 0xe6;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        f->avx2 = avx && ymm_ok && ((b >> 5) & 1);
        f->avx512f = zmm_ok && ((b >> 16) & 1);
        f->avx512bw = zmm_ok && ((b >> 30) & 1);
        f->avx512vl = zmm_ok && ((b >> 31) & 1);
        f->avx512vnni = zmm_ok && ((c >> 11) & 1);
        f->gfni = zmm_ok && ((c >> 8) & 1); /* used only by AVX-512 kernels */
        f->amx_int8 = (xcr0 & 0x60000) == 0x60000 && ((d >> 24) & 1) && ((d >> 25) & 1); /* XTILECFG/XTILEDATA */
    }
    if (f->avx512f && __get_cpuid_count(7, 1, &a, &b, &c, &d)) f->avx512bf16 = (a >> 5) & 1;
    if (!ymm_ok) f->fma = f->f16c = 0;
    unsigned brand[12];
    if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000004) {
        for (unsigned i = 0; i < 3; i++)
            __get_cpuid(0x80000002 + i, &brand[4 * i], &brand[4 * i + 1], &brand[4 * i + 2],
                        &brand[4 * i + 3]);
        memcpy(f->brand, brand, 48);
        f->brand[48] = 0;
    }
}
#else
static void detect(ts_cpu_features *f) { memset(f, 0, sizeof *f); }
#endif

const ts_cpu_features *ts_cpu_features_get(void) {
    static ts_cpu_features f;
    static int done;
    if (!done) { /* idempotent: a race at worst detects twice with the same result */
        detect(&f);
        done = 1;
    }
    return &f;
}

static int g_amx;

/* Here, not in gemm_q_amx.c: this file has no ISA flags, so the check itself runs anywhere. */
static void amx_init(void) {
#if defined(__linux__) && defined(__x86_64__)
    /* Linux keeps the 8 KiB tile state off until a process asks for it (the first tile
     * instruction faults without the grant). The grant is process-wide and makes signal frames
     * larger: a later sigaltstack smaller than that is refused. */
    const ts_cpu_features *f = ts_cpu_features_get();
    g_amx = f->amx_int8 && f->avx512vnni && ts_cpu_variant_supported(TS_CPU_AVX512BF16) &&
            syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#endif
}

int ts_cpu_amx_usable(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, amx_init);
    return g_amx;
}

int ts_cpu_variant_supported(ts_cpu_variant v) {
    const ts_cpu_features *f = ts_cpu_features_get();
    switch (v) {
    case TS_CPU_SCALAR: return 1;
    /* F16C too: the variants' files are built with -mf16c (F16 KV cache rows, Q8_0/Q4_0 scales);
     * every AVX2 CPU made has it, but a hypervisor may hide it */
    case TS_CPU_AVX2: return f->avx2 && f->fma && f->f16c;
    case TS_CPU_AVX512BF16:
        return f->avx512f && f->avx512bw && f->avx512vl && f->avx512bf16 && f->avx2 && f->fma && f->f16c;
    default: return 0;
    }
}

/* TESSERA_CPU_VARIANT=scalar|avx2+fma|avx512bf16 caps the choice (side-by-side measurements
 * of the variants on one machine); a name this CPU cannot run, or an unknown one, is ignored. */
static int variant_cap(void) {
    const char *e = getenv("TESSERA_CPU_VARIANT");
    if (!e) return TS_CPU_VARIANT_COUNT - 1;
    for (int v = 0; v < TS_CPU_VARIANT_COUNT; v++)
        if (!strcmp(e, ts_cpu_variant_name((ts_cpu_variant)v))) return v;
    return TS_CPU_VARIANT_COUNT - 1;
}

ts_cpu_variant ts_cpu_best_variant(void) {
    for (int v = variant_cap(); v > 0; v--)
        if (ts_cpu_variant_supported((ts_cpu_variant)v)) return (ts_cpu_variant)v;
    return TS_CPU_SCALAR;
}

const char *ts_cpu_variant_name(ts_cpu_variant v) {
    static const char *names[] = {"scalar", "avx2+fma", "avx512bf16"};
    return (unsigned)v < TS_CPU_VARIANT_COUNT ? names[v] : "?";
}
