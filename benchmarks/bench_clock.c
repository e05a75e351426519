/* Cost of one read of cprof's time base, cprof_clock_now_ns (csrc/clock.c: the TSC scaled and
 * steered to CLOCK_MONOTONIC where the kernel times with the TSC, decision 69), beside its two
 * ingredients: clock_gettime(CLOCK_MONOTONIC) through the vDSO and a bare rdtsc. Build and run:
 *   gcc -O2 -Icsrc benchmarks/bench_clock.c csrc/clock.c -lpthread -o /tmp/bench_clock && /tmp/bench_clock
 * Prints the median of 7 rounds of 10M reads each, and how far the cprof clock was from
 * CLOCK_MONOTONIC at its checks (one every 100 ms). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

#include "cprof.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void) {
    enum { N = 10000000, ROUNDS = 7 };
    double g[ROUNDS], r[ROUNDS], c[ROUNDS];
    volatile uint64_t sink = 0;
    cprof_clock_init();
    double t0 = now();
    while (now() - t0 < 60e6) sink += cprof_clock_now_ns(); /* past calibration (50 ms) */
    for (int k = 0; k < ROUNDS; k++) {
        struct timespec t;
        double a = now();
        for (int i = 0; i < N; i++) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            sink += (uint64_t)t.tv_nsec;
        }
        g[k] = (now() - a) / N;
        a = now();
        for (int i = 0; i < N; i++) sink += __rdtsc();
        r[k] = (now() - a) / N;
        a = now();
        for (int i = 0; i < N; i++) sink += cprof_clock_now_ns();
        c[k] = (now() - a) / N;
    }
    qsort(g, ROUNDS, sizeof g[0], cmp);
    qsort(r, ROUNDS, sizeof r[0], cmp);
    qsort(c, ROUNDS, sizeof c[0], cmp);
    printf("clock_gettime(CLOCK_MONOTONIC): %.1f ns/read (median of %d x %d)\n", g[ROUNDS / 2],
           ROUNDS, N);
    printf("rdtsc:                          %.1f ns/read\n", r[ROUNDS / 2]);
    cprof_clock_state st;
    cprof_clock_info(&st);
    printf("cprof_clock_now_ns (source %s): %.1f ns/read; %.0f Hz TSC, %llu checks, "
           "|clock - CLOCK_MONOTONIC| <= %lld ns\n", st.tsc ? "tsc" : "vdso", c[ROUNDS / 2],
           st.tsc_hz, (unsigned long long)st.checks, (long long)st.max_abs_diff_ns);
    return (int)(sink & 0);
}
