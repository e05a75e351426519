/* The single time base of cprof: nanoseconds on CLOCK_MONOTONIC, plus the offset to Unix time.
 * Any thread may call these; the reads take no lock and allocate nothing.
 *
 * Two sources (decision 69). CLOCK_MONOTONIC through the vDSO (~22 ns a read on the dev VM,
 * ~34 ns on the H200 VM) is the truth. Where the kernel itself times with the TSC (x86-64,
 * clocksource "tsc": invariant and synchronised across CPUs), cprof reads the TSC instead
 * (~10 / ~20 ns) and scales it: ns = ns0 + (tsc - tsc0) * mult / 2^32, a "segment". The first
 * segment starts once the TSC rate has been measured against CLOCK_MONOTONIC over at least
 * CALIBRATE_NS; before that the clock is CLOCK_MONOTONIC itself. The first read after each
 * MAINTAIN_NS (a compare on the TSC value just read) runs maintain(): it compares the two
 * clocks and starts a new segment whose rate steers their difference to zero over the next
 * SLEW_NS. So the TSC clock never jumps (a new segment starts where the old one is), never runs
 * backwards, and stays within a few hundred ns of CLOCK_MONOTONIC (NTP's corrections
 * included), whatever thread reads it and however long a window is. CUPTI stamps GPU records with the same function
 * (cupti_collect.c), so CPU and GPU share the base either way. CPROF_CLOCK=monotonic keeps the
 * vDSO clock. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "cprof.h"

#define CALIBRATE_NS 50000000ull   /* rate measured over at least 50 ms before the TSC is used */
#define MAINTAIN_NS 100000000ull   /* compare with CLOCK_MONOTONIC at most every 100 ms */
#define SLEW_NS 1000000000ll       /* steer a difference away over the next second */
#define SLEW_MAX_PPM 500           /* never steer faster than NTP does */
#define BRACKET_TRIES 5

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#if defined(__x86_64__)
/* the current segment, under a sequence lock: written by maintain() (one writer at a time:
 * busy), read by any thread without a lock; last_tsc (the last maintenance) on the same line */
static struct {
    _Atomic uint32_t seq;          /* odd while being written */
    _Atomic uint64_t tsc0, ns0, mult, last_tsc;
} seg;
static _Atomic int tsc_on;         /* 1 once the first segment is set */
static _Atomic int tsc_usable;     /* decided by cprof_clock_init; 0 again if calibration fails */
static _Atomic int busy;           /* maintain() running; reset in a forked child */
static const char *_Atomic clock_why = "not initialised";
/* set before tsc_on is published, read-only after */
static uint64_t anchor_tsc, anchor_ns, ticks_per_maintain;
static _Atomic uint64_t n_segments, n_checks;
static _Atomic int64_t last_diff_ns, max_abs_diff_ns;

static void maintain(void);

static inline uint64_t seg_ns(uint64_t tsc, uint64_t tsc0, uint64_t ns0, uint64_t mult) {
    /* a TSC read on another CPU an instant before the segment began: no negative delta */
    uint64_t d = tsc > tsc0 ? tsc - tsc0 : 0;
    return ns0 + (uint64_t)(((unsigned __int128)d * mult) >> 32);
}

/* A read that found the segment due for maintenance: maintains, then gives the read's time on
 * the segment it read (as if maintain() had come after). Out of line, so the fast path below
 * calls nothing and saves no registers (~8 instructions of a read's ~34). */
static CPROF_NOINLINE uint64_t tsc_clock_maintain(uint64_t tsc, uint64_t tsc0, uint64_t ns0,
                                                  uint64_t mult) {
    maintain();
    return seg_ns(tsc, tsc0, ns0, mult);
}

static inline uint64_t tsc_clock(void) {
    uint64_t tsc0, ns0, mult, last, tsc;
    uint32_t s;
    for (;;) {
        s = atomic_load_explicit(&seg.seq, memory_order_acquire);
        if (CPROF_UNLIKELY(s & 1)) continue;
        tsc0 = atomic_load_explicit(&seg.tsc0, memory_order_relaxed);
        ns0 = atomic_load_explicit(&seg.ns0, memory_order_relaxed);
        mult = atomic_load_explicit(&seg.mult, memory_order_relaxed);
        last = atomic_load_explicit(&seg.last_tsc, memory_order_relaxed);
        tsc = __rdtsc();
        atomic_thread_fence(memory_order_acquire);
        if (CPROF_LIKELY(atomic_load_explicit(&seg.seq, memory_order_relaxed) == s)) break;
    }
    if (CPROF_UNLIKELY(tsc > last && tsc - last >= ticks_per_maintain))
        return tsc_clock_maintain(tsc, tsc0, ns0, mult);
    return seg_ns(tsc, tsc0, ns0, mult);
}

/* One (tsc, CLOCK_MONOTONIC) pair: the TSC read between two clock reads, the tightest of a few
 * tries; *ns is the later clock read, so the pair never puts the clock ahead of any read that
 * came before it. */
static void pair(uint64_t *tsc, uint64_t *ns) {
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < BRACKET_TRIES; i++) {
        uint64_t a = mono_ns();
        uint64_t t = __rdtsc();
        uint64_t b = mono_ns();
        if (b - a < best) {
            best = b - a;
            *tsc = t;
            *ns = b;
        }
    }
}

static void seg_publish(uint64_t tsc0, uint64_t ns0, uint64_t mult) {
    uint32_t s = atomic_load_explicit(&seg.seq, memory_order_relaxed);
    atomic_store_explicit(&seg.seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&seg.tsc0, tsc0, memory_order_relaxed);
    atomic_store_explicit(&seg.ns0, ns0, memory_order_relaxed);
    atomic_store_explicit(&seg.mult, mult, memory_order_relaxed);
    atomic_store_explicit(&seg.last_tsc, tsc0, memory_order_relaxed);
    atomic_store_explicit(&seg.seq, s + 2, memory_order_release);
    atomic_fetch_add_explicit(&n_segments, 1, memory_order_relaxed);
}

/* a fork while another thread held busy: the child has no such thread */
static void clock_atfork_child(void) { atomic_store(&busy, 0); }

static int read_clocksource(char *buf, size_t cap) {
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    if (!f) return -1;
    int ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    if (!ok) return -1;
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}
#endif

void cprof_clock_init(void) {
#if defined(__x86_64__)
    static int done;
    if (done) return;
    done = 1;
    const char *env = getenv("CPROF_CLOCK");
    char cs[64] = "";
    if (env && strcmp(env, "monotonic") == 0) {
        clock_why = "CPROF_CLOCK=monotonic";
    } else if (read_clocksource(cs, sizeof cs) != 0) {
        clock_why = "the kernel's clocksource cannot be read";
    } else if (strcmp(cs, "tsc") != 0) {
        clock_why = "the kernel's clocksource is not tsc";
    } else {
        pair(&anchor_tsc, &anchor_ns);
        pthread_atfork(NULL, NULL, clock_atfork_child);
        clock_why = "calibrating";
        atomic_store(&tsc_usable, 1);
    }
#endif
}

#if defined(__x86_64__)
/* CLOCK_MONOTONIC itself: before calibration ends, or for good where the TSC is not used.
 * Out of line for the same reason as tsc_clock_maintain. */
static CPROF_NOINLINE uint64_t mono_clock(void) {
    uint64_t ns = mono_ns();
    if (CPROF_UNLIKELY(atomic_load_explicit(&tsc_usable, memory_order_relaxed)) &&
        ns - anchor_ns >= CALIBRATE_NS)
        maintain();
    return ns;
}
#endif

uint64_t cprof_clock_now_ns(void) {
#if defined(__x86_64__)
    if (CPROF_LIKELY(atomic_load_explicit(&tsc_on, memory_order_acquire))) return tsc_clock();
    return mono_clock();
#else
    return mono_ns();
#endif
}

#if defined(__x86_64__)
/* The TSC rate and the first segment (calibration), or a comparison with CLOCK_MONOTONIC and
 * a new segment steering towards it. One thread at a time; the others go on reading. */
static CPROF_NOINLINE void maintain(void) {
    if (atomic_exchange_explicit(&busy, 1, memory_order_acquire)) return;
    uint64_t tsc, ns;
    pair(&tsc, &ns);
    if (!atomic_load_explicit(&tsc_on, memory_order_relaxed)) {
        if (!atomic_load_explicit(&tsc_usable, memory_order_relaxed)) {
            /* another thread found calibration impossible meanwhile */
        } else if (tsc > anchor_tsc && ns - anchor_ns >= CALIBRATE_NS) {
            uint64_t mult = (uint64_t)(((unsigned __int128)(ns - anchor_ns) << 32) /
                                       (tsc - anchor_tsc));
            /* a rate far from any real TSC (0.5-10 GHz) means the pair is wrong: stay off */
            if (mult >= (1ull << 32) / 10 && mult <= (1ull << 32) * 2) {
                ticks_per_maintain = (uint64_t)(((unsigned __int128)MAINTAIN_NS << 32) / mult);
                seg_publish(tsc, ns, mult); /* ns: the bracket's later read, never behind */
                atomic_store_explicit(&clock_why, "tsc", memory_order_relaxed);
                atomic_store_explicit(&tsc_on, 1, memory_order_release);
            } else {
                atomic_store_explicit(&clock_why, "the TSC rate measured against "
                                      "CLOCK_MONOTONIC is implausible", memory_order_relaxed);
                atomic_store_explicit(&tsc_usable, 0, memory_order_relaxed);
            }
        }
        atomic_store_explicit(&busy, 0, memory_order_release);
        return;
    }
    uint64_t tsc0 = atomic_load_explicit(&seg.tsc0, memory_order_relaxed);
    uint64_t ns0 = atomic_load_explicit(&seg.ns0, memory_order_relaxed);
    uint64_t mult = atomic_load_explicit(&seg.mult, memory_order_relaxed);
    uint64_t here = seg_ns(tsc, tsc0, ns0, mult);
    int64_t diff = (int64_t)(here - ns); /* > 0: the TSC clock is ahead */
    int64_t mag = diff < 0 ? -diff : diff;
    atomic_fetch_add_explicit(&n_checks, 1, memory_order_relaxed);
    atomic_store_explicit(&last_diff_ns, diff, memory_order_relaxed);
    if (mag > atomic_load_explicit(&max_abs_diff_ns, memory_order_relaxed))
        atomic_store_explicit(&max_abs_diff_ns, mag, memory_order_relaxed);
    /* the rate CLOCK_MONOTONIC ran at since the anchor, steered to absorb diff over SLEW_NS
     * (never faster than SLEW_MAX_PPM, as NTP) */
    long double rate = (long double)(ns - anchor_ns) / (long double)(tsc - anchor_tsc);
    long double steer = (long double)diff / (long double)SLEW_NS;
    long double lim = SLEW_MAX_PPM * 1e-6L;
    if (steer > lim) steer = lim;
    if (steer < -lim) steer = -lim;
    long double m = rate * (1.0L - steer) * 4294967296.0L;
    if (m > 0 && m < 8.0L * 4294967296.0L && tsc > tsc0) seg_publish(tsc, here, (uint64_t)m);
    else atomic_store_explicit(&seg.last_tsc, tsc, memory_order_relaxed);
    atomic_store_explicit(&busy, 0, memory_order_release);
}
#endif

int cprof_clock_info(cprof_clock_state *out) {
    if (!out) return CPROF_E_ARG;
    memset(out, 0, sizeof *out);
#if defined(__x86_64__)
    out->tsc = atomic_load_explicit(&tsc_on, memory_order_acquire);
    out->why = atomic_load_explicit(&clock_why, memory_order_relaxed);
    out->segments = atomic_load_explicit(&n_segments, memory_order_relaxed);
    out->checks = atomic_load_explicit(&n_checks, memory_order_relaxed);
    out->last_diff_ns = atomic_load_explicit(&last_diff_ns, memory_order_relaxed);
    out->max_abs_diff_ns = atomic_load_explicit(&max_abs_diff_ns, memory_order_relaxed);
    uint64_t mult = out->tsc ? atomic_load_explicit(&seg.mult, memory_order_relaxed) : 0;
    out->tsc_hz = mult ? (double)(1ull << 32) / (double)mult * 1e9 : 0.0;
#else
    out->why = "not x86-64";
#endif
    return CPROF_OK;
}

static int64_t realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + (int64_t)ts.tv_nsec;
}

/* The realtime read is bracketed by two cprof clock reads; the tightest bracket of a few tries
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
