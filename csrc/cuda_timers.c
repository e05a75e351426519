/* Bucket timers: a region is two CUDA events (driver API) recorded on a stream, or two host
 * clock reads when CUDA is not usable. Events come from a pool that only grows while warming
 * up; ended regions are resolved in batch at step end (cprof_timers_resolve), never with a sync
 * per timer. Callers hold the GIL, resolve too: the wait for the GPU happens before it, with
 * the GIL released, on a copy of the end events (cprof_timers_ends / cprof_timers_wait), since
 * other threads' timers may begin (grow the region array) or resolve meanwhile. After that
 * wait, resolve's own cuEventSynchronize calls return at once.
 *
 * One event per boundary: a record asked for on the same stream within share_ns of the end of
 * the previous record call reuses that event instead of recording another (the end of one
 * region and the start of the next, an outer and an inner start). No launch fits in that gap
 * (a launch costs more host time than share_ns), so the two would mark the same place in the
 * stream; on an idle GPU the shared stamp is at most share_ns early. A record is ~1.3 us of
 * driver time on an H200 VM, so adjacent regions cost one record each instead of two.
 *
 * Contexts: an event can only be recorded on a stream of the context it was created in
 * (CUDA_ERROR_INVALID_HANDLE otherwise), and a process may time regions on several devices (a
 * bucket timer given another device's stream, a thread whose current device differs). So each
 * pooled event keeps the context current when it was made, a record takes one made in the
 * context current now, and an event whose record fails is destroyed, never pooled again: put
 * back on top of the pool it was handed out first to every later region, which all failed.
 * A thread with no current context (a worker that has made no CUDA call yet) borrows the
 * stream's context (the context cuda_init saw when the stream is a special handle) for the
 * create and record, pushed and popped: nothing of the thread's state changes.
 *
 * A region that cannot be recorded loses its step: the step is marked unmeasured, counted by
 * the next resolve with the reason (never silently short of a bucket). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_loader.h"
#include "runstats.h"

#define SLOT_INDEX_BITS 20u
#define SLOT_INDEX_MASK ((1u << SLOT_INDEX_BITS) - 1)

typedef struct {
    CUevent a, b;
    uint64_t host_a, host_b;
    uint64_t step;
    uint32_t bucket;
    uint8_t cuda, domain, state; /* state: 1 open, 2 ended */
} region;

static const cprof_cuda_api *api;
static int cuda_state = -1;        /* -1 unknown, 0 unusable, 1 usable */
static char err[256];
static char fail[256];             /* why the last resolve left a region unmeasured */
static char lost_why[256];         /* why the latest record failed (cprof_timers_lost) */
static uint64_t *lost;             /* steps with a failed record since the last resolve */
static uint32_t nlost, lost_cap;
static uint64_t lost_now;          /* steps marked at once (no room to wait for the resolve) */
static CUcontext init_ctx;         /* current where cuda_init ran: a stray thread's fallback */
static region *regions;
static uint32_t nregions, regions_cap, nopen;
static uint32_t generation;        /* bumps at each resolve: stale slots are ignored */
typedef struct {
    CUevent e;
    CUcontext ctx;                 /* current when it was created (cuEventCreate's context) */
} pooled;
static pooled *pool;
static uint32_t npool, pool_cap, pool_total;
static pooled *used;               /* events recorded since the last resolve (<= 2 per region) */
static uint32_t nused;
static struct {
    CUevent e;
    CUcontext ctx;
    uintptr_t stream;
    uint64_t t_after;              /* host clock when its cuEventRecord returned */
    int valid;
} last;
static uint64_t share_ns = CPROF_TIMER_SHARE_NS_DEFAULT;
static uint64_t n_records, n_shared;

const char *cprof_timers_error(void) { return err; }

/* "CUDA error N (the driver's description)" into buf: the number alone does not tell a sticky
 * error of the program (700, an illegal address) from a timer's own mistake. */
static const char *cuda_err(CUresult cr, char *buf, size_t cap) {
    const char *what = NULL;
    if (api->cuGetErrorString(cr, &what) != CUDA_SUCCESS) what = NULL;
    if (what) snprintf(buf, cap, "CUDA error %d (%s)", (int)cr, what);
    else snprintf(buf, cap, "CUDA error %d", (int)cr);
    return buf;
}

/* Device's primary context when it is active already, retained for the process (the timers'
 * fallback for threads with none current), else NULL. Never makes one active: that would create
 * a context (hundreds of MiB of GPU memory) in a process that has not used the device. */
static CUcontext active_primary(int device) {
    if (!api->cuDevicePrimaryCtxGetState || !api->cuDevicePrimaryCtxRetain) return NULL;
    CUdevice dev;
    unsigned int flags = 0;
    int on = 0;
    CUcontext ctx = NULL;
    if (api->cuDeviceGet(&dev, device < 0 ? 0 : device) != CUDA_SUCCESS ||
        api->cuDevicePrimaryCtxGetState(dev, &flags, &on) != CUDA_SUCCESS || !on ||
        api->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS)
        return NULL;
    return ctx;
}

int cprof_timers_cuda_init(int device) {
    if (cprof_cuda_load_driver(&api) != CPROF_OK) {
        snprintf(err, sizeof err, "no CUDA driver (%s)", cprof_cuda_driver_error());
        cuda_state = 0;
        return CPROF_E_UNAVAILABLE;
    }
    CUcontext ctx = NULL;
    int inited = api->cuInit(0) == CUDA_SUCCESS;
    if (inited && api->cuCtxGetCurrent(&ctx) != CUDA_SUCCESS) ctx = NULL;
    /* usable already (a Profiler made on another thread): a thread with no context of its own
     * records with init_ctx's, lent (record_ctx, lend_ctx); usable stays usable */
    if (!ctx && cuda_state == 1 && init_ctx) return CPROF_OK;
    /* the driver binds no context to a new thread: one that has made no CUDA call yet (a
     * training thread whose run begins before its first tensor op) has none, although PyTorch
     * made the device's primary context active on another; its first op binds that one */
    if (!ctx && inited && !init_ctx) ctx = active_primary(device);
    if (!ctx) {
        snprintf(err, sizeof err,
                 "no CUDA context is current on this thread (initialise CUDA first, e.g. by "
                 "putting a tensor on the GPU)");
        cuda_state = 0;
        return CPROF_E_UNAVAILABLE;
    }
    err[0] = '\0';
    if (!init_ctx) init_ctx = ctx;
    cuda_state = 1;
    return CPROF_OK;
}

/* An event of context ctx: the pool's latest of that context (one context: the top), else a
 * new one (warm-up only: the pool keeps every event it ever made). */
static int event_get(CUcontext ctx, pooled *out) {
    for (uint32_t i = npool; i-- > 0;) {
        if (pool[i].ctx != ctx) continue;
        *out = pool[i];
        pool[i] = pool[--npool];
        return CPROF_OK;
    }
    CUresult cr = api->cuEventCreate(&out->e, CU_EVENT_DEFAULT);
    if (cr != CUDA_SUCCESS) {
        char e[96];
        snprintf(lost_why, sizeof lost_why, "cuEventCreate returned %s", cuda_err(cr, e, sizeof e));
        return CPROF_E_UNAVAILABLE;
    }
    out->ctx = ctx;
    pool_total++;
    return CPROF_OK;
}

static void event_drop(CUevent e) {
    api->cuEventDestroy(e);
    pool_total--;
}

static void event_put(pooled p) {
    if (npool == pool_cap) {
        uint32_t ncap = pool_cap ? pool_cap * 2 : 64;
        pooled *np = realloc(pool, ncap * sizeof *np);
        if (!np) { /* cannot keep it: give it back to the driver */
            event_drop(p.e);
            return;
        }
        pool = np;
        pool_cap = ncap;
    }
    pool[npool++] = p;
}

/* The context current on this thread (NULL: none, or the driver would not say). */
static CUcontext current_ctx(void) {
    CUcontext ctx = NULL;
    if (api->cuCtxGetCurrent(&ctx) != CUDA_SUCCESS) ctx = NULL;
    return ctx;
}

/* The context an event marking `stream` must be made and recorded in (cuda.h: event and
 * stream of one context, else CUDA_ERROR_INVALID_HANDLE): an explicit stream's own, as torch's
 * events take the stream's device whatever device is current; for a special handle (0,
 * legacy, per-thread) the current context, or on a thread with none the one the timers were
 * made with. NULL with lost_why said where there is none. *cached: 1 when the answer is the
 * last boundary's (a stream asked once per change, not per region). */
static CUcontext record_ctx(uintptr_t stream, CUcontext cur, int *cached) {
    CUcontext ctx = NULL;
    *cached = stream > 2 && last.valid && last.stream == stream;
    if (*cached) return last.ctx;
    if (stream > 2) {
        if (api->cuStreamGetCtx && api->cuStreamGetCtx((CUstream)stream, &ctx) != CUDA_SUCCESS)
            ctx = NULL; /* gone: the record says so */
    }
    if (!ctx) ctx = cur ? cur : init_ctx;
    if (!ctx)
        snprintf(lost_why, sizeof lost_why,
                 "no CUDA context is current on the timing thread (make a CUDA call on that "
                 "thread first)");
    return ctx;
}

/* Makes ctx current for one record when it is not (*pushed = 1: pop it after). */
static int lend_ctx(CUcontext ctx, CUcontext cur, int *pushed) {
    *pushed = 0;
    if (ctx == cur) return CPROF_OK;
    if (!api->cuCtxPushCurrent || !api->cuCtxPopCurrent) {
        snprintf(lost_why, sizeof lost_why,
                 "the stream's CUDA context is not current on the timing thread and this "
                 "driver cannot lend it (make a CUDA call on that device first)");
        return CPROF_E_UNAVAILABLE;
    }
    CUresult cr = api->cuCtxPushCurrent(ctx);
    if (cr != CUDA_SUCCESS) {
        char e[96];
        snprintf(lost_why, sizeof lost_why,
                 "the stream's CUDA context is not current on the timing thread "
                 "(cuCtxPushCurrent returned %s)", cuda_err(cr, e, sizeof e));
        return CPROF_E_UNAVAILABLE;
    }
    *pushed = 1;
    return CPROF_OK;
}

/* Marked at resolve, not now: a step that raises after its record failed is discarded, and
 * counted once, as that. */
void cprof_timers_lost(uint64_t step) {
    if (nlost && lost[nlost - 1] == step) return;
    if (nlost == lost_cap) {
        uint32_t ncap = lost_cap ? lost_cap * 2 : 16;
        uint64_t *nl = ncap > lost_cap ? realloc(lost, ncap * sizeof *nl) : NULL;
        if (!nl) {
            lost_now += (uint64_t)cprof_rs_step_unmeasured(step);
            return;
        }
        lost = nl;
        lost_cap = ncap;
    }
    lost[nlost++] = step;
}

void cprof_timers_lost_forget(void) {
    nlost = 0;
    lost_now = 0;
}

uint64_t cprof_timers_share_ns(int64_t set) {
    uint64_t old = share_ns;
    if (set >= 0) share_ns = (uint64_t)set;
    return old;
}

/* An event marking the current end of `stream`: the last one when it is close enough (see the
 * top of the file), otherwise a pooled event recorded now. `used` has room: begin() grows it
 * with the regions, two entries per region. */
static int boundary(uintptr_t stream, CUevent *out) {
    uint64_t now = cprof_clock_now_ns();
    CUcontext cur = current_ctx();
    int cached;
    CUcontext ctx = record_ctx(stream, cur, &cached);
    if (!ctx) return CPROF_E_UNAVAILABLE;
    if (last.valid && last.stream == stream && last.ctx == ctx && now >= last.t_after &&
        now - last.t_after <= share_ns) {
        *out = last.e;
        n_shared++;
        return CPROF_OK;
    }
    int pushed;
    int rc = lend_ctx(ctx, cur, &pushed);
    if (rc != CPROF_OK) return rc;
    pooled p;
    rc = event_get(ctx, &p);
    CUresult cr = rc == CPROF_OK ? api->cuEventRecord(p.e, (CUstream)stream) : CUDA_SUCCESS;
    if (rc == CPROF_OK && cr != CUDA_SUCCESS) {
        /* the stream is gone, or the context is broken (a sticky error of the program): this
         * event is no use here (destroyed while its context is still current) */
        char e[96];
        snprintf(lost_why, sizeof lost_why, "cuEventRecord returned %s%s",
                 cuda_err(cr, e, sizeof e),
                 cr == CUDA_ERROR_INVALID_HANDLE ? ": a stream of another device, or gone" : "");
        event_drop(p.e);
        last.valid = 0;
        rc = CPROF_E_UNAVAILABLE;
    }
    if (pushed) {
        CUcontext popped;
        api->cuCtxPopCurrent(&popped);
    }
    /* a stream destroyed and its handle reused by another context since the cached answer:
     * asked again, once (last.valid is 0 now) */
    if (rc != CPROF_OK && cached && cr == CUDA_ERROR_INVALID_HANDLE) return boundary(stream, out);
    if (rc != CPROF_OK) return rc;
    used[nused++] = p;
    n_records++;
    last.e = p.e;
    last.ctx = ctx;
    last.stream = stream;
    last.t_after = cprof_clock_now_ns();
    last.valid = 1;
    *out = p.e;
    return CPROF_OK;
}

int cprof_timer_begin(int cuda, uintptr_t stream, uint32_t *slot) {
    if (cuda && cuda_state != 1) return CPROF_E_UNAVAILABLE;
    if (nregions > SLOT_INDEX_MASK) return CPROF_E_FULL;
    if (nregions == regions_cap) {
        uint32_t ncap = regions_cap ? regions_cap * 2 : 256;
        region *nr = realloc(regions, ncap * sizeof *nr);
        if (!nr) return CPROF_E_NOMEM;
        regions = nr;
        pooled *nu = realloc(used, 2 * (size_t)ncap * sizeof *nu);
        if (!nu) return CPROF_E_NOMEM; /* regions grew: harmless, capacity stays as it was */
        used = nu;
        regions_cap = ncap;
    }
    region *r = &regions[nregions];
    memset(r, 0, sizeof *r);
    r->cuda = (uint8_t)(cuda != 0);
    if (cuda) {
        if (boundary(stream, &r->a) != CPROF_OK) return CPROF_E_UNAVAILABLE;
    } else {
        r->host_a = cprof_clock_now_ns();
    }
    r->state = 1;
    nopen++;
    *slot = ((generation & 0xFFFu) << SLOT_INDEX_BITS) | nregions;
    nregions++;
    return CPROF_OK;
}

int cprof_timer_end(uint32_t slot, uintptr_t stream, uint8_t domain, uint32_t bucket_id,
                    uint64_t step) {
    uint32_t idx = slot & SLOT_INDEX_MASK;
    if ((slot >> SLOT_INDEX_BITS) != (generation & 0xFFFu) || idx >= nregions ||
        regions[idx].state != 1)
        return CPROF_E_STATE; /* resolved (or abandoned) since it began */
    region *r = &regions[idx];
    if (r->cuda) {
        if (boundary(stream, &r->b) != CPROF_OK) return CPROF_E_UNAVAILABLE;
    } else {
        r->host_b = cprof_clock_now_ns();
    }
    r->domain = domain;
    r->bucket = bucket_id;
    r->step = step;
    r->state = 2;
    nopen--;
    return CPROF_OK;
}

uint32_t cprof_timers_open(void) { return nopen; }

int cprof_timers_resolve(uint64_t *unmeasured) {
    int rc = CPROF_OK;
    uint64_t failed_steps = 0;
    for (uint32_t i = 0; i < nregions; i++) {
        region *r = &regions[i];
        if (r->state == 2) {
            uint64_t ns = 0;
            if (r->cuda) {
                float ms = 0.0f;
                /* in record order: after the first wait the rest are already complete */
                CUresult cr = api->cuEventSynchronize(r->b);
                if (cr == CUDA_SUCCESS) cr = api->cuEventElapsedTime(&ms, r->a, r->b);
                if (cr != CUDA_SUCCESS || !(ms >= 0.0f)) {
                    /* no time, not a time of 0: the step leaves every figure (counted) */
                    if (rc == CPROF_OK && cr == CUDA_SUCCESS)
                        snprintf(fail, sizeof fail, "cuEventElapsedTime gave %g ms, not a time",
                                 (double)ms);
                    else if (rc == CPROF_OK) {
                        char e[96];
                        snprintf(fail, sizeof fail, "cuEventSynchronize / cuEventElapsedTime "
                                 "returned %s", cuda_err(cr, e, sizeof e));
                    }
                    rc = CPROF_E_UNAVAILABLE;
                    failed_steps += (uint64_t)cprof_rs_step_unmeasured(r->step);
                    continue;
                }
                ns = (uint64_t)llround((double)ms * 1e6);
            } else {
                ns = r->host_b - r->host_a;
            }
            if (r->domain == CPROF_DOMAIN_STEP) cprof_rs_set_latency(r->step, ns);
            else cprof_rs_add_bucket(r->step, r->domain, r->bucket, ns);
        }
        /* an open region (its timer raised before ending) is abandoned: a late end() sees a
         * stale slot */
    }
    /* regions that could not be recorded: their steps, with the reason */
    uint64_t lost_steps = lost_now;
    for (uint32_t i = 0; i < nlost; i++) lost_steps += (uint64_t)cprof_rs_step_unmeasured(lost[i]);
    if (lost_steps) {
        failed_steps += lost_steps;
        if (rc == CPROF_OK) snprintf(fail, sizeof fail, "%s", lost_why);
        rc = CPROF_E_UNAVAILABLE;
    }
    nlost = 0;
    lost_now = 0;
    for (uint32_t i = 0; i < nused; i++) event_put(used[i]);
    nused = 0;
    last.valid = 0;
    nregions = 0;
    nopen = 0;
    generation++;
    if (unmeasured) *unmeasured = failed_steps;
    return rc;
}

const char *cprof_timers_resolve_error(void) { return fail; }

int cprof_timers_ends(void **events, size_t *n) {
    *events = NULL;
    *n = 0;
    size_t k = 0;
    for (uint32_t i = 0; i < nregions; i++) k += regions[i].state == 2 && regions[i].cuda;
    if (!k) return CPROF_OK;
    CUevent *ev = malloc(k * sizeof *ev);
    if (!ev) return CPROF_E_NOMEM;
    k = 0;
    for (uint32_t i = 0; i < nregions; i++)
        if (regions[i].state == 2 && regions[i].cuda) ev[k++] = regions[i].b;
    *events = ev;
    *n = k;
    return CPROF_OK;
}

void cprof_timers_wait(void *events, size_t n) {
    CUevent *ev = events;
    /* in record order: after the first waits the rest are already complete. An event another
     * thread's resolve has put back and recorded again meanwhile is only waited for longer */
    for (size_t i = 0; i < n; i++)
        /* a failed one (an event recorded in a CUDA graph capture: error 907) is said at
         * resolve; the rest are still waited for here, without the GIL */
        (void)api->cuEventSynchronize(ev[i]);
}

void cprof_timers_counts(uint32_t *pool_events, uint32_t *pending, uint64_t *records,
                         uint64_t *shared) {
    if (pool_events) *pool_events = pool_total;
    if (pending) *pending = nregions;
    if (records) *records = n_records;
    if (shared) *shared = n_shared;
}

int cprof_timers_sync_stream(uintptr_t stream) {
    if (cuda_state != 1) return CPROF_E_UNAVAILABLE;
    return api->cuStreamSynchronize((CUstream)stream) == CUDA_SUCCESS ? CPROF_OK
                                                                      : CPROF_E_UNAVAILABLE;
}

int cprof_timers_event_floor(uint64_t n, uintptr_t stream, uint64_t *ns_total) {
    if (cuda_state != 1) return CPROF_E_UNAVAILABLE;
    CUcontext ctx = current_ctx();
    pooled a, b;
    if (event_get(ctx, &a) != CPROF_OK) return CPROF_E_UNAVAILABLE;
    if (event_get(ctx, &b) != CPROF_OK) {
        event_put(a);
        return CPROF_E_UNAVAILABLE;
    }
    int rc = CPROF_OK;
    uint64_t t0 = cprof_clock_now_ns();
    for (uint64_t i = 0; i < n && rc == CPROF_OK; i++)
        if (api->cuEventRecord(a.e, (CUstream)stream) != CUDA_SUCCESS ||
            api->cuEventRecord(b.e, (CUstream)stream) != CUDA_SUCCESS)
            rc = CPROF_E_UNAVAILABLE;
    *ns_total = cprof_clock_now_ns() - t0;
    if (api->cuStreamSynchronize((CUstream)stream) != CUDA_SUCCESS) rc = CPROF_E_UNAVAILABLE;
    event_put(a);
    event_put(b);
    return rc;
}
