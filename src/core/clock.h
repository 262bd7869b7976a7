/* Monotonic wall-clock time for measurements (benchmarks, phase timings, profiles). */
#ifndef TS_CORE_CLOCK_H
#define TS_CORE_CLOCK_H
#include <time.h>

static inline double ts_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#endif
