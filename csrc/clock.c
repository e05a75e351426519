/* The single time base of cprof: CLOCK_MONOTONIC nanoseconds, plus the offset to Unix time.
 * Any thread may call these; they take no lock and allocate nothing. */
#define _GNU_SOURCE
#include <time.h>

#include "cprof.h"

/* CLOCK_MONOTONIC rather than CLOCK_REALTIME: it never steps when NTP corrects the wall clock,
 * so durations inside a window stay true. It is read through the vDSO (no syscall, ~20 ns on
 * x86-64). CUPTI is told to use this same function for its timestamps (see cupti_collect.c), so
 * CPU and GPU events share one base; Unix time is recovered once per window with an offset. */
uint64_t cprof_clock_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int64_t realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + (int64_t)ts.tv_nsec;
}

/* The realtime read is bracketed by two monotonic reads; the tightest bracket of a few tries
 * bounds the error of the offset by half its width (tens of ns). */
int64_t cprof_clock_unix_offset_ns(void) {
    int64_t best_offset = 0;
    uint64_t best_width = UINT64_MAX;
    for (int i = 0; i < 5; i++) {
        uint64_t a = cprof_clock_now_ns();
        int64_t r = realtime_ns();
        uint64_t b = cprof_clock_now_ns();
        if (b - a < best_width) {
            best_width = b - a;
            best_offset = r - (int64_t)(a + (b - a) / 2);
        }
    }
    return best_offset;
}
