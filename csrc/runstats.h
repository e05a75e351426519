/* The run/step Profiler's C side: bucket timers (CUDA events through the driver API, or the
 * host clock) and the per-step store that turns steps into exact statistics.
 * Core header: no Python. Callers hold the GIL (the Profiler is driven from Python). */
#ifndef CPROF_RUNSTATS_H
#define CPROF_RUNSTATS_H

#include "cprof.h"

enum cprof_domain {
    CPROF_DOMAIN_MODEL = 0,
    CPROF_DOMAIN_ENGINE = 1,
    CPROF_DOMAIN_COUNT,
    CPROF_DOMAIN_STEP = 255 /* a region timing a whole step: sets the step's latency */
};

/* ---- cuda_timers.c ---- */
/* Loads the driver and finds the context timers record in: the one current on this thread, else
 * device's primary context when it is already active (a thread that has made no CUDA call yet,
 * in a process that has: the driver binds no context to a new thread). 0, or
 * CPROF_E_UNAVAILABLE with the reason in cprof_timers_error(); then callers use host timing. */
int cprof_timers_cuda_init(int device);
const char *cprof_timers_error(void);
/* Opens a timed region on stream (a CUstream as an integer; 0 = the legacy default stream):
 * its start event recorded now, or the stream's last event when that was recorded less than
 * cprof_timers_share_ns() ago (one event per boundary). cuda=0 uses the host clock instead.
 * *slot identifies the region for cprof_timer_end. No sync. */
int cprof_timer_begin(int cuda, uintptr_t stream, uint32_t *slot);
/* Records the region's end and files it under (domain, bucket) of step (an index from
 * cprof_rs_step_begin); CPROF_DOMAIN_STEP makes it the step's latency. */
int cprof_timer_end(uint32_t slot, uintptr_t stream, uint8_t domain, uint32_t bucket_id,
                    uint64_t step);
/* Regions begun and not ended (a timer left open by an exception). */
uint32_t cprof_timers_open(void);

/* A region of `step` could not be recorded (cprof_timer_begin / _end gave
 * CPROF_E_UNAVAILABLE): the step is marked unmeasured, and the next cprof_timers_resolve counts
 * it in *unmeasured with the record's error as its reason. GIL held. */
void cprof_timers_lost(uint64_t step);
/* Forgets the steps cprof_timers_lost marked and no resolve has counted yet: the step store was
 * emptied (cprof_rs_release gave 1), so their indices will name other Profilers' steps. */
void cprof_timers_lost_forget(void);
/* Resolves every ended region (waits for its end event: one wait for the last event of each
 * stream in practice) and files its time in the step store. Events go back to the pool.
 * A region whose time CUDA cannot give makes its step unmeasured (cprof_rs_step_unmeasured),
 * never a time of 0: CPROF_E_UNAVAILABLE, *unmeasured (may be NULL) = steps newly made
 * unmeasured, and cprof_timers_resolve_error() says what CUDA returned. GIL held, like every
 * call here: the wait for the GPU is done before, without it, by cprof_timers_wait on the
 * events cprof_timers_ends copied. */
int cprof_timers_resolve(uint64_t *unmeasured);
/* A malloc'ed copy of the end events of the ended CUDA regions (*n of them; NULL when none),
 * to wait on with the GIL released: the regions and the pool may change meanwhile (another
 * thread's timers), the copy does not. CPROF_E_NOMEM: resolve waits itself. */
int cprof_timers_ends(void **events, size_t *n);
/* Waits until each event has completed (stops at the first CUDA error: resolve reports it).
 * No GIL needed: touches nothing of the timers' state. */
void cprof_timers_wait(void *events, size_t n);
const char *cprof_timers_resolve_error(void);
/* Events held by the pool, regions pending resolution, events recorded and boundaries that
 * reused the previous event, since the process started (tests, leak checks, benchmarks). */
void cprof_timers_counts(uint32_t *pool_events, uint32_t *pending, uint64_t *records,
                         uint64_t *shared);
/* The sharing window in ns (0: every boundary records its own event); set >= 0 changes it.
 * Returns the previous value. */
#define CPROF_TIMER_SHARE_NS_DEFAULT 1000u
uint64_t cprof_timers_share_ns(int64_t set);
/* Records one event on stream and waits for it (a sync of that stream only). */
int cprof_timers_sync_stream(uintptr_t stream);
/* Benchmarks: n pairs of bare cuEventRecord calls on stream (two pooled events), timed into
 * *ns_total: the driver's floor under a CUDA bucket-timer region. Then waits for the stream. */
int cprof_timers_event_floor(uint64_t n, uintptr_t stream, uint64_t *ns_total);

/* ---- runstats.c ---- */
typedef struct cprof_step_stats {
    uint64_t steps;
    double mean_ms, p50_ms, p90_ms, p99_ms, min_ms, max_ms;
    double time_ms;        /* sum of step latencies */
    uint64_t tokens;       /* the token total is tokens_hi * 2^64 + tokens: a sum of counts */
    uint64_t tokens_hi;    /* < 2^63 each passes 2^63 with two of them (never wraps) */
    double tok_per_s;      /* tokens / time; NaN when time is 0 */
} cprof_step_stats;

/* A new owner id (one per Profiler; never 0). */
uint32_t cprof_rs_new_owner(void);
/* Appends a step of owner's run `run`; *step is its index. Its latency is pending until set. */
int cprof_rs_step_begin(uint32_t owner, uint32_t run, uint64_t *step);
/* Completes step: latency (UINT64_MAX: pending, a CUDA region sets it later), tokens, KV
 * length (NaN: none). */
int cprof_rs_step_end(uint64_t step, uint64_t latency_ns, int64_t tokens, double kv_len);
/* Sets a completed step's accepted tokens later (set_step_tokens after the step). */
void cprof_rs_set_tokens(uint64_t step, int64_t tokens);
/* Sets a pending latency. */
void cprof_rs_set_latency(uint64_t step, uint64_t latency_ns);
/* Sets a step's KV length later (a device tensor reduced at run end, one copy per run). */
void cprof_rs_set_kv(uint64_t step, double kv_len);
/* Drops step and its bucket times, those filed already and those its pending timer regions
 * resolve to later: it raised, or was not completed. Its index is not reused. */
void cprof_rs_step_abort(uint64_t step);
/* Leaves step out of every statistic (its latency or a bucket time could not be measured):
 * 1 if it was counted until now, 0 if already left out, unknown, or released (no Profiler is
 * left to report it: it must not be counted in another's run). */
int cprof_rs_step_unmeasured(uint64_t step);
/* Adds ns to (domain, bucket) of step. */
void cprof_rs_add_bucket(uint64_t step, uint8_t domain, uint32_t bucket_id, uint64_t ns);
/* Releases owner's steps (its Profiler is gone); when no live owner has a step left and
 * may_compact (no CUDA region pending), the store is emptied. Returns 1 if it was. */
int cprof_rs_release(uint32_t owner, int may_compact);
/* Statistics over owner's completed steps whose run is in [run_lo, run_hi) and kv_len in
 * [kv_lo, kv_hi) (use -INFINITY / INFINITY for open ends). Percentiles are exact: linear interpolation
 * between the two nearest ranks of the sorted latencies (numpy's default). */
int cprof_rs_stats(uint32_t owner, uint32_t run_lo, uint32_t run_hi, double kv_lo, double kv_hi,
                   cprof_step_stats *out);
/* Per-bucket totals over the same step selection: *rows is set to a malloc'ed array (the
 * caller frees it) of one (domain, bucket, total_ns, steps_with_it) row per distinct bucket,
 * every one of them, in first-seen order; *n their number. */
typedef struct cprof_bucket_total {
    uint8_t domain;
    uint32_t bucket_id;
    uint64_t total_ns;
    uint64_t steps;
} cprof_bucket_total;
int cprof_rs_buckets(uint32_t owner, uint32_t run_lo, uint32_t run_hi, double kv_lo, double kv_hi,
                     cprof_bucket_total **rows, size_t *n);

#endif /* CPROF_RUNSTATS_H */
