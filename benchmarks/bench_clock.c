/* Cost of one read of cprof's time base (clock_gettime(CLOCK_MONOTONIC), vDSO) beside rdtsc,
 * the alternative docs/design.md decision 1 weighs. Build and run:
 *   gcc -O2 benchmarks/bench_clock.c -o /tmp/bench_clock && /tmp/bench_clock
 * Prints the median of 7 rounds of 10M reads each. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

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
    double g[ROUNDS], r[ROUNDS];
    volatile uint64_t sink = 0;
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
    }
    qsort(g, ROUNDS, sizeof g[0], cmp);
    qsort(r, ROUNDS, sizeof r[0], cmp);
    printf("clock_gettime(CLOCK_MONOTONIC): %.1f ns/read (median of %d x %d)\n", g[ROUNDS / 2],
           ROUNDS, N);
    printf("rdtsc:                          %.1f ns/read\n", r[ROUNDS / 2]);
    return (int)(sink & 0);
}
