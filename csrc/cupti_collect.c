/* GPU activity collection with CUPTI: the subscriber (held only while a window is open), the
 * bounded pool of activity buffers, the kinds and API ids enabled; at stop, the completed
 * buffers are walked and handed to the decoder (cupti_decode.c).
 * Threads: start/stop from one thread at a time (the binding). CUPTI calls the buffer callbacks
 * from any thread, the application's included: they only move a buffer pointer between two
 * arrays under a mutex, allocate nothing and make no CUPTI call while holding it. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_loader.h"
#include "cupti_cbids.h"
#include "cupti_decode.h"
#include "gpu.h"

#define DEFAULT_BUFFER_BYTES (8ull << 20)
#define DEFAULT_POOL_CAP (128ull << 20)
/* places in the completed list beyond the pool's own buffers: for buffers of another client
 * CUPTI still held (Kineto's) completed into a window, so a few never cost cprof's own */
#define FOREIGN_SLACK 4

typedef struct {
    uint8_t *buf;
    size_t valid;
} completed_buf;

static const cprof_cuda_api *api;
static int timestamp_callback_ok;  /* CUPTI stamps with cprof_clock_now_ns */
static int64_t cupti_clock_offset; /* cprof clock = CUPTI clock - offset (when no callback) */
static CUpti_SubscriberHandle subscriber;
static int shared;                 /* this window runs without the subscriber (config.share) */
static char shared_holder[64];     /* the holder CUPTI named when shared ("" if none) */
static int active;
static uint64_t window_start_ns;
static cprof_gpu_config config;
static int per_api_enable;         /* cuptiActivityEnableRuntimeApi/DriverApi used */
static int kinds_enabled[64];
static char last_error[512];
/* how this window enabled API records (trace metadata: cprof.gpu.api_records) */
static const char *api_mode = "";  /* "kinds+filter", "kinds", "ids", "driver+filter", "none" */
static uint32_t api_ids_off;       /* ids switched off after enabling the whole kinds */
static uint64_t enable_cost_ns;

/* the buffer pool */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t **pool_all;         /* every buffer we own (mmap'ed: zero until written) */
static uint8_t *pool_dirty;        /* handed to CUPTI since it was last zeroed */
static uint8_t *pool_out;          /* handed to CUPTI and not given back (completed) yet */
static size_t pool_n;
static uint64_t pool_buffer_bytes;
static size_t *pool_free;          /* indices into pool_all */
static size_t pool_free_n;
static int prezeroed;              /* CUPTI told our buffers come zeroed (it skips its memset) */
static uint64_t zero_cost_ns;
static completed_buf *pool_done;
static size_t pool_done_n;
static size_t pool_done_cap;       /* pool_n, and the buffers of earlier pools CUPTI held */
static size_t pool_stray;          /* buffers of earlier pools CUPTI held when those were freed */
static _Atomic uint64_t dropped_cupti;
static _Atomic uint64_t drop_count_errors; /* buffers whose drop count CUPTI would not give */
static _Atomic uint64_t no_buffer_requests;
static _Atomic uint64_t buffers_used;
static _Atomic uint64_t foreign_completions; /* buffers completed that cprof never handed out */
static _Atomic uint64_t unkept_completions;  /* completions with no room left in pool_done */

const char *cprof_cupti_last_error(void) { return last_error; }

static void set_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
}

static const char *cupti_str(CUptiResult r) {
    const char *s = NULL;
    if (api && api->cuptiGetResultString) api->cuptiGetResultString(r, &s);
    return s ? s : "unknown CUPTI error";
}

/* ---- callbacks (any thread) ---- */

static uint64_t timestamp_cb(void) { return cprof_clock_now_ns(); }

static void buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    uint8_t *b = NULL;
    pthread_mutex_lock(&pool_lock);
    if (pool_free_n) {
        size_t i = pool_free[--pool_free_n];
        b = pool_all[i];
        pool_dirty[i] = 1;
        pool_out[i] = 1;
    }
    pthread_mutex_unlock(&pool_lock);
    *max_records = 0;
    if (!b) {
        /* CUPTI drops what it cannot store and counts it; we count the refusals too */
        atomic_fetch_add(&no_buffer_requests, 1);
        *buffer = NULL;
        *size = 0;
        return;
    }
    atomic_fetch_add(&buffers_used, 1);
    *buffer = b;
    *size = pool_buffer_bytes;
}

static void buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                             size_t valid) {
    (void)size;
    size_t dropped = 0;
    if (api && api->cuptiActivityGetNumDroppedRecords) {
        CUptiResult r = api->cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped);
        if (r != CUPTI_SUCCESS) /* CUPTI's drops for this buffer are unknown: counted, said */
            atomic_fetch_add(&drop_count_errors, 1);
        else if (dropped)
            atomic_fetch_add(&dropped_cupti, dropped);
    }
    if (!buffer) return;
    pthread_mutex_lock(&pool_lock);
    size_t i = 0;
    for (; i < pool_n; i++) /* CUPTI gives it back: ours again (cuptiActivity.h) */
        if (pool_all[i] == buffer) {
            pool_out[i] = 0;
            break;
        }
    if (i == pool_n) {
        if (pool_stray) pool_stray--; /* one an earlier pool left to CUPTI */
        else atomic_fetch_add(&foreign_completions, 1); /* another client's CUPTI still held
                                                          * (Kineto's): its records are read */
    }
    /* room for every buffer of this pool and the strays; a foreign one can take the last
     * place: the completion that finds none is lost, counted (never silent) */
    if (pool_done_n < pool_done_cap) pool_done[pool_done_n++] = (completed_buf){buffer, valid};
    else atomic_fetch_add(&unkept_completions, 1);
    pthread_mutex_unlock(&pool_lock);
}

/* ---- teardown (CPROF_CUPTI_TEARDOWN=1): detach CUPTI from the process after a window ----
 * Unsubscribing leaves CUPTI attached to the process (its driver hooks stay in every later CUDA
 * call); cuptiFinalize detaches it, and NVIDIA documents it as safe only at the exit of a CUDA
 * API call. So stop leaves the subscriber holding the runtime and driver callback domains with
 * the state PENDING; the first API exit on any thread moves PENDING to FINALIZING (one thread
 * wins), unsubscribes, finalizes and sets IDLE. A window that starts while PENDING (no CUDA
 * call in between) cancels it and keeps the subscriber; one that starts while FINALIZING waits
 * for IDLE (cuptiFinalize is bounded). The next window re-registers everything CUPTI forgot. */
enum { TD_IDLE = 0, TD_PENDING = 1, TD_FINALIZING = 2 };
static _Atomic int td_state;
static CUpti_SubscriberHandle td_subscriber; /* written before PENDING is published */
static _Atomic uint64_t td_finalized;        /* detaches done */
static _Atomic int td_last_result;           /* cuptiFinalize's last result */

static int teardown_wanted(void) {
    const char *v = getenv("CPROF_CUPTI_TEARDOWN");
    return v && !strcmp(v, "1");
}

static void subscriber_cb(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                          const void *data) {
    /* no callback is enabled while a window is open: cprof subscribes to hold CUPTI (and to
     * detect other clients); only a pending teardown enables the API domains */
    (void)userdata, (void)cbid;
    if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
    const CUpti_CallbackData *cb = data;
    if (!cb || cb->callbackSite != CUPTI_API_EXIT) return;
    int expect = TD_PENDING;
    if (!atomic_compare_exchange_strong(&td_state, &expect, TD_FINALIZING)) return;
    api->cuptiUnsubscribe(td_subscriber);
    atomic_store(&td_last_result, (int)api->cuptiFinalize());
    td_subscriber = NULL;
    atomic_fetch_add(&td_finalized, 1);
    atomic_store(&td_state, TD_IDLE);
}

/* At window start: a pending teardown is cancelled and its subscriber returned (the caller
 * keeps it); a running one is waited for. NULL when there is nothing to take over. */
static CUpti_SubscriberHandle teardown_cancel(void) {
    int expect = TD_PENDING;
    if (atomic_compare_exchange_strong(&td_state, &expect, TD_IDLE)) {
        CUpti_SubscriberHandle s = td_subscriber;
        td_subscriber = NULL;
        api->cuptiEnableDomain(0, s, CUPTI_CB_DOMAIN_RUNTIME_API);
        api->cuptiEnableDomain(0, s, CUPTI_CB_DOMAIN_DRIVER_API);
        return s;
    }
    while (atomic_load(&td_state) == TD_FINALIZING) sched_yield();
    return NULL;
}

/* At window stop, instead of unsubscribing: arm the teardown. 0 when it could not be armed
 * (the caller unsubscribes as usual). */
static int teardown_arm(CUpti_SubscriberHandle s) {
    if (!s || !api->cuptiEnableDomain) return 0;
    td_subscriber = s;
    atomic_store(&td_state, TD_PENDING);
    if (api->cuptiEnableDomain(1, s, CUPTI_CB_DOMAIN_RUNTIME_API) == CUPTI_SUCCESS &&
        api->cuptiEnableDomain(1, s, CUPTI_CB_DOMAIN_DRIVER_API) == CUPTI_SUCCESS)
        return 1;
    /* not armed: take it back unless an API exit already finalized (then nothing is left) */
    CUpti_SubscriberHandle back = teardown_cancel();
    if (back) api->cuptiUnsubscribe(back);
    return 1;
}

/* The stop's subscriber, kept for the teardown: armed, or unsubscribed if it cannot be. */
static void release_held(CUpti_SubscriberHandle s) {
    if (!teardown_arm(s)) api->cuptiUnsubscribe(s);
}

void cprof_cupti_teardown_info(int *state, uint64_t *finalized, int *last_result) {
    *state = atomic_load(&td_state);
    *finalized = atomic_load(&td_finalized);
    *last_result = atomic_load(&td_last_result);
}

/* ---- the pool ---- */

/* A buffer CUPTI still holds (handed out, never completed: a flush at stop that failed) stays
 * mapped, left to CUPTI: unmapping it would have CUPTI write into freed memory. */
static void pool_free_all(void) {
    for (size_t i = 0; i < pool_n; i++) {
        if (!pool_out || !pool_out[i]) munmap(pool_all[i], pool_buffer_bytes);
        else pool_stray++; /* completed later: a place in pool_done is kept for it */
    }
    free(pool_all);
    free(pool_dirty);
    free(pool_out);
    free(pool_free);
    free(pool_done);
    pool_all = NULL;
    pool_dirty = NULL;
    pool_out = NULL;
    pool_free = NULL;
    pool_done = NULL;
    pool_n = pool_free_n = pool_done_n = pool_done_cap = 0;
}

/* Allocates the whole pool up front (mmap'ed pages cost nothing until CUPTI writes them, and
 * read as zero), so the request callback never allocates. Kept across windows while the sizes
 * stay the same; a buffer CUPTI wrote is zeroed here, at window start, so that CUPTI can skip
 * zeroing it on the application thread that asks for it mid-window (8 MiB, ~1 ms). */
static int pool_setup(uint64_t buffer_bytes, uint64_t cap) {
    /* two buffers at least (CUPTI fills one while the other is delivered); a cap under two
     * buffers makes them smaller, so the pool stays within what was asked for */
    if (cap < 2 * buffer_bytes) {
        buffer_bytes = cap / 2 / 4096 * 4096;
        if (buffer_bytes < (64u << 10)) buffer_bytes = 64u << 10;
    }
    size_t n = (size_t)(cap / buffer_bytes);
    if (n < 2) n = 2;
    if (pool_n == n && pool_buffer_bytes == buffer_bytes) {
        uint64_t t0 = cprof_clock_now_ns();
        pthread_mutex_lock(&pool_lock);
        pool_free_n = 0;
        for (size_t i = pool_n; i-- > 0;) {
            /* CUPTI holds it still (the last stop's flush failed): writing into it, zeroing it
             * or handing it out again would corrupt the records CUPTI goes on adding to it.
             * It stays out of the free list until CUPTI completes it (then decoded as usual:
             * the older window's records in it fall outside this one) */
            if (pool_out[i]) continue;
            if (pool_dirty[i] && prezeroed) {
                memset(pool_all[i], 0, buffer_bytes);
                pool_dirty[i] = 0; /* else CUPTI zeroes it and it stays dirty for us */
            }
            pool_free[pool_free_n++] = i;
        }
        pool_done_n = 0; /* anything delivered after the last window is discarded */
        pthread_mutex_unlock(&pool_lock);
        zero_cost_ns = cprof_clock_now_ns() - t0;
        return CPROF_OK;
    }
    /* under the lock: a buffer of the old pool CUPTI still held may be completed on CUPTI's
     * thread meanwhile, and buffer_completed reads these arrays */
    pthread_mutex_lock(&pool_lock);
    pool_free_all();
    pool_all = calloc(n, sizeof *pool_all);
    pool_dirty = calloc(n, 1);
    pool_out = calloc(n, 1);
    pool_free = calloc(n, sizeof *pool_free);
    /* room for every completion of a window: this pool's buffers and those CUPTI still holds
     * of earlier ones (it fills them first); one more would have been dropped in silence */
    pool_done = calloc(n + pool_stray + FOREIGN_SLACK, sizeof *pool_done);
    pool_done_cap = n + pool_stray + FOREIGN_SLACK;
    pool_buffer_bytes = buffer_bytes;
    if (!pool_all || !pool_dirty || !pool_out || !pool_free || !pool_done) goto oom;
    for (size_t i = 0; i < n; i++) {
        /* page-aligned (CUPTI needs 8 bytes) and zero-filled by the kernel */
        void *m = mmap(NULL, buffer_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        if (m == MAP_FAILED) goto oom;
        pool_all[i] = m;
        pool_n = i + 1;
    }
    for (size_t i = n; i-- > 0;) pool_free[pool_free_n++] = i; /* lowest index handed out first */
    pool_done_n = 0;
    pthread_mutex_unlock(&pool_lock);
    zero_cost_ns = 0;
    return CPROF_OK;
oom:
    pool_free_all();
    pthread_mutex_unlock(&pool_lock);
    set_error("cannot allocate %zu CUPTI buffers of %llu bytes", n,
              (unsigned long long)buffer_bytes);
    return CPROF_E_NOMEM;
}

/* The zeroed-buffer attribute is process-wide: once a window ends (or fails to start) the next
 * client, a torch.profiler session say, hands out buffers of its own that nobody zeroed. */
static void zeroed_attr_off(void) {
    if (!prezeroed) return;
    uint8_t off = 0;
    size_t off_size = sizeof off;
    api->cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, &off_size, &off);
}

/* ---- enabling ---- */

typedef struct {
    CUpti_ActivityKind kind;
    int required;
    const char *name;
} kind_spec;

static int map_cupti_error(CUptiResult r, const char *what) {
    if (r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES) {
        set_error("%s: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: this user may not profile the GPU. "
                  "Run as root, or set the driver option NVreg_RestrictProfilingToAdminUsers=0 "
                  "(see NVIDIA's ERR_NVGPUCTRPERM page)", what);
        return CPROF_E_CUPTI_PRIVILEGES;
    }
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED ||
        r == CUPTI_ERROR_NOT_COMPATIBLE) {
        set_error("%s: %s: another profiler holds CUPTI in this process (likely torch.profiler / "
                  "Kineto, or Nsight Systems / Nsight Compute if the program runs under one). "
                  "Close the other profiler's session first, or use cprof with strict=False to "
                  "record CPU activity only", what, cupti_str(r));
        return CPROF_E_CUPTI_BUSY;
    }
    if (r == CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES) {
        set_error("%s: CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES: profiling is not "
                  "enabled for this vGPU; its hypervisor's administrator can enable it (NVIDIA "
                  "vGPU docs, 'Enabling Profiling')", what);
        return CPROF_E_CUPTI_PRIVILEGES;
    }
    if (r == CUPTI_ERROR_NOT_INITIALIZED || r == CUPTI_ERROR_INVALID_DEVICE) {
        set_error("%s: %s: no usable GPU or driver", what, cupti_str(r));
        return CPROF_E_NO_DEVICE;
    }
    /* the device or setup cannot be traced (decision 147): asking again next window would fail
     * the same way, so these end GPU collection for the profiler as no device does */
    if (r == CUPTI_ERROR_NOT_SUPPORTED || r == CUPTI_ERROR_API_NOT_IMPLEMENTED ||
        r == CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED ||
        (r >= CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED &&
         r <= CUPTI_ERROR_CUDA_COMPILER_NOT_COMPATIBLE) ||
        (r >= CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED &&
         r <= CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED)) {
        set_error("%s: %s (CUPTI error %d): CUPTI cannot trace this GPU or setup (a vGPU, MIG, "
                  "WSL, confidential computing, ...)", what, cupti_str(r), (int)r);
        return CPROF_E_NO_DEVICE;
    }
    set_error("%s: %s (CUPTI error %d)", what, cupti_str(r), (int)r);
    return CPROF_E_CUPTI;
}

/* What a stop could not undo, for its snapshot: CUPTI's result of the first kind it would not
 * disable, of the unsubscribe it refused (0: none). A refused subscriber is ours still: kept
 * in `leftover` and taken back by the next window instead of subscribing again (which would
 * fail, naming cprof as "another profiler"). */
static int disable_error, unsubscribe_error;
static CUpti_SubscriberHandle leftover;

/* Gives cprof's subscriber back to CUPTI; one CUPTI refuses stays ours (leftover), for the
 * next window to take. CUPTI's result (0 when released or none was held). */
static int release_subscriber(void) {
    int rc = 0;
    if (subscriber) {
        CUptiResult u = api->cuptiUnsubscribe(subscriber);
        if (u != CUPTI_SUCCESS) {
            rc = (int)u;
            leftover = subscriber;
        }
    }
    subscriber = NULL;
    return rc;
}

static void disable_all(void) {
    if (!api) return;
    if (per_api_enable) {
        for (size_t i = 0; i < CPROF_N_RUNTIME_CBIDS; i++)
            api->cuptiActivityEnableRuntimeApi(cprof_runtime_cbids[i].cbid, 0);
        for (size_t i = 0; i < CPROF_N_DRIVER_CBIDS; i++)
            api->cuptiActivityEnableDriverApi(cprof_driver_cbids[i].cbid, 0);
        per_api_enable = 0;
    }
    for (int k = 0; k < 64; k++) {
        if (kinds_enabled[k]) {
            CUptiResult r = api->cuptiActivityDisable((CUpti_ActivityKind)k);
            if (r != CUPTI_SUCCESS && !disable_error) disable_error = (int)r;
        }
        kinds_enabled[k] = 0;
    }
}

static int cuda_events_wanted(void) {
    const char *v = getenv("CPROF_CUPTI_CUDA_EVENTS");
    return !(v && !strcmp(v, "0"));
}

static int enable_kinds(void) {
    kind_spec kinds[] = {
        {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, 1, "CONCURRENT_KERNEL"},
        {CUPTI_ACTIVITY_KIND_MEMCPY, 1, "MEMCPY"},
        {CUPTI_ACTIVITY_KIND_MEMSET, 1, "MEMSET"},
        {CUPTI_ACTIVITY_KIND_MEMCPY2, 0, "MEMCPY2"},
        {CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, 0, "SYNCHRONIZATION"},
        /* the event records event waits wait on (wait_on_stream); CPROF_CUPTI_CUDA_EVENTS=0
         * leaves them out (diagnostics: their cost) */
        {cuda_events_wanted() ? CUPTI_ACTIVITY_KIND_CUDA_EVENT : CUPTI_ACTIVITY_KIND_INVALID, 0,
         "CUDA_EVENT"},
        {CUPTI_ACTIVITY_KIND_OVERHEAD, 0, "OVERHEAD"},
        {config.memory ? CUPTI_ACTIVITY_KIND_MEMORY2 : CUPTI_ACTIVITY_KIND_INVALID, 0, "MEMORY2"},
        {config.memory ? CUPTI_ACTIVITY_KIND_MEMORY_POOL : CUPTI_ACTIVITY_KIND_INVALID, 0,
         "MEMORY_POOL"},
        {config.nvtx ? CUPTI_ACTIVITY_KIND_MARKER : CUPTI_ACTIVITY_KIND_INVALID, 0, "MARKER"},
    };
    /* CPROF_CUPTI_KINDS=minimal (diagnostics, A/B of CUPTI's cost): GPU work only, no API
     * calls, syncs or overhead records; nothing links to the CPU side */
    const char *kset = getenv("CPROF_CUPTI_KINDS");
    int minimal = kset && !strcmp(kset, "minimal");
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (kinds[i].kind == CUPTI_ACTIVITY_KIND_INVALID) continue;
        if (minimal && !kinds[i].required) continue;
        CUptiResult r = api->cuptiActivityEnable(kinds[i].kind);
        if (r == CUPTI_SUCCESS) {
            kinds_enabled[kinds[i].kind] = 1;
            continue;
        }
        if (kinds[i].required || r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES) {
            char what[64];
            snprintf(what, sizeof what, "enabling CUPTI activity kind %s", kinds[i].name);
            return map_cupti_error(r, what);
        }
    }
    /* The runtime and driver calls: whole kinds, then the ids cprof does not record switched
     * off one by one (enabling all of KIND_RUNTIME records a dozen calls per kernel,
     * cudaGetDevice and friends); decoding keeps only the ids in cupti_cbids.h whatever CUPTI
     * delivers. The other documented way, the per-id switch alone without the kind, returns
     * success for every id on CUPTI 13.0.1 and then records no call at all (measured on an
     * H200, driver 580.159.04): never used by default. CPROF_CUPTI_API_RECORDS=kinds skips the
     * switching off, =ids uses the per-id switch alone, =driver enables KIND_DRIVER alone
     * (filtered): the runtime's calls are then seen only through the driver calls they make
     * (diagnostics: is hooking the driver cheaper, and do kernels still link?). */
    api_ids_off = 0;
    api_mode = "none";
    if (minimal) return CPROF_OK;
    const char *mode = getenv("CPROF_CUPTI_API_RECORDS");
    int ids_only = mode && !strcmp(mode, "ids"), no_filter = mode && !strcmp(mode, "kinds");
    if (ids_only && api->cuptiActivityEnableRuntimeApi && api->cuptiActivityEnableDriverApi) {
        per_api_enable = 1;
        api_mode = "ids";
        for (size_t i = 0; i < CPROF_N_RUNTIME_CBIDS + CPROF_N_DRIVER_CBIDS; i++) {
            int drv = i >= CPROF_N_RUNTIME_CBIDS;
            CUptiResult r = drv ? api->cuptiActivityEnableDriverApi(
                                      cprof_driver_cbids[i - CPROF_N_RUNTIME_CBIDS].cbid, 1)
                                : api->cuptiActivityEnableRuntimeApi(cprof_runtime_cbids[i].cbid, 1);
            if (r != CUPTI_SUCCESS && r != CUPTI_ERROR_INVALID_PARAMETER)
                return map_cupti_error(r, drv ? "enabling CUDA driver API records"
                                              : "enabling CUDA runtime API records");
        }
        return CPROF_OK;
    }
    int driver_only = mode && !strcmp(mode, "driver");
    CUptiResult r;
    if (!driver_only) {
        r = api->cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME);
        if (r != CUPTI_SUCCESS) return map_cupti_error(r, "enabling CUDA runtime API records");
        kinds_enabled[CUPTI_ACTIVITY_KIND_RUNTIME] = 1;
    }
    r = api->cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER);
    if (r != CUPTI_SUCCESS) return map_cupti_error(r, "enabling CUDA driver API records");
    kinds_enabled[CUPTI_ACTIVITY_KIND_DRIVER] = 1;
    api_mode = "kinds";
    if (no_filter || !api->cuptiActivityEnableRuntimeApi || !api->cuptiActivityEnableDriverApi)
        return CPROF_OK;
    api_mode = driver_only ? "driver+filter" : "kinds+filter";
    /* ids past the table's end (a newer CUPTI) stay on; the decoder drops them. A refused
     * switch only means more records for the decoder to drop. */
    for (uint32_t id = 1; !driver_only && id < CPROF_RUNTIME_CBID_LIMIT; id++)
        if (!cprof_cbid_lookup(0, id) && api->cuptiActivityEnableRuntimeApi(id, 0) == CUPTI_SUCCESS)
            api_ids_off++;
    for (uint32_t id = 1; id < CPROF_DRIVER_CBID_LIMIT; id++)
        if (!cprof_cbid_lookup(1, id) && api->cuptiActivityEnableDriverApi(id, 0) == CUPTI_SUCCESS)
            api_ids_off++;
    return CPROF_OK;
}

int cprof_cupti_active(void) { return active; }

/* Holders CUPTI may name that are never an idle Kineto: a profiling tool attached to the
 * process, whose records cprof must not take (share) even when torch is loaded. */
static int never_shared(const char *holder) {
    static const char *const tools[] = {"nsight",  "nsys",    "ncu",      "hpctoolkit",
                                        "score-p", "scorep", "caliper", "omnitrace"};
    for (size_t i = 0; i < sizeof tools / sizeof *tools; i++)
        if (strcasestr(holder, tools[i])) return 1;
    return 0;
}

/* ---- fork ----
 * CUDA does not survive fork(): a child of a process that has used it cannot use it at all
 * (every driver call fails; CUPTI's may hang). So a child forked after cprof's first GPU
 * window has no collector running (its copy of the parent's state is dropped) and is refused
 * GPU collection with a message that says why, instead of "already active". */
static int cuda_touched;      /* this process started GPU collection once (cuInit done) */
static int forked_after_cuda; /* set in the child of such a process */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void atfork_child(void) {
    if (!cuda_touched) return;
    forked_after_cuda = 1;
    active = 0;
    shared = 0;
    subscriber = NULL;
    leftover = NULL;
    /* a CUPTI thread may have held it at the fork; that thread does not exist here */
    pthread_mutex_init(&pool_lock, NULL);
    pool_done_n = 0;
}

static void atfork_register(void) { pthread_atfork(NULL, NULL, atfork_child); }

int cprof_cupti_start(const cprof_gpu_config *cfg, uint64_t start_ns) {
    last_error[0] = '\0';
    if (active) {
        set_error("GPU collection is already active");
        return CPROF_E_STATE;
    }
    if (forked_after_cuda) {
        set_error("this process was forked from one that had used CUDA, and CUDA cannot be "
                  "used after fork(): profile the GPU in the parent, or start the child with "
                  "multiprocessing's 'spawn' start method");
        return CPROF_E_UNAVAILABLE;
    }
    if (cprof_cuda_load_cupti(&api) != CPROF_OK) {
        set_error("CUPTI is not available: %s", cprof_cupti_error());
        return CPROF_E_UNAVAILABLE;
    }
    pthread_once(&atfork_once, atfork_register);
    cuda_touched = 1; /* the driver is initialised from here on */
    config = *cfg;
    if (!config.buffer_bytes) config.buffer_bytes = DEFAULT_BUFFER_BYTES;
    if (!config.pool_cap_bytes) config.pool_cap_bytes = DEFAULT_POOL_CAP;
    if (config.buffer_bytes < (64u << 10) || config.buffer_bytes % 8) {
        set_error("the CUPTI buffer size must be a multiple of 8 bytes, at least 64 KiB");
        return CPROF_E_ARG;
    }

    /* Hold CUPTI for the window. Another subscriber (torch.profiler, Nsight) makes this fail:
     * better a clear error now than a trace silently missing GPU events. */
    CUptiResult r;
    char holder[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 1] = "";
    shared = 0;
    CUpti_SubscriberHandle kept = teardown_cancel(); /* the last window's, not yet detached */
    if (!kept && leftover) { /* the one a stop could not release: still ours */
        kept = leftover;
        leftover = NULL;
    }
    if (kept) {
        subscriber = kept;
        r = CUPTI_SUCCESS;
    } else if (api->cuptiSubscribe_v2) {
        CUpti_SubscriberParams params = {CUpti_SubscriberParams_STRUCT_SIZE, "cprof", holder,
                                         sizeof holder - 1};
        r = api->cuptiSubscribe_v2(&subscriber, subscriber_cb, NULL, &params);
    } else {
        r = api->cuptiSubscribe(&subscriber, subscriber_cb, NULL);
    }
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED && config.share &&
        !never_shared(holder)) {
        /* Kineto subscribes at its first session and never lets go; once its session is over
         * the activity API is free, and the subscriber is not needed to collect */
        r = CUPTI_SUCCESS;
        subscriber = NULL;
        shared = 1;
        snprintf(shared_holder, sizeof shared_holder, "%.*s", (int)sizeof shared_holder - 1,
                 holder);
    }
    if (r != CUPTI_SUCCESS) {
        int rc = map_cupti_error(r, "subscribing to CUPTI");
        if (rc == CPROF_E_CUPTI_BUSY && holder[0]) {
            char msg[sizeof last_error];
            /* last_error cut short so the holder's name always fits (an unbounded %s here
             * trips -Wformat-truncation, fatal in CPROF_SANITIZE=1 CPROF_WERROR=1 builds) */
            int keep = (int)(sizeof msg - sizeof " [CUPTI names the holder: ]" - sizeof holder + 1);
            snprintf(msg, sizeof msg, "%.*s [CUPTI names the holder: %s]", keep, last_error,
                     holder);
            memcpy(last_error, msg, sizeof last_error);
        }
        subscriber = NULL;
        return rc;
    }

    /* Every window, before the first kind is enabled: a torch.profiler session in between
     * registers Kineto's own buffer callbacks (and sets its thread id type), which would take
     * this window's records. With the timestamp callback CUPTI stamps records with cprof's
     * clock, so CPU and GPU events share one time base with no conversion. */
    if (api->cuptiSetThreadIdType) api->cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
    const char *ts_mode = getenv("CPROF_CUPTI_TIMESTAMP"); /* =cupti: diagnostics (A/B) */
    timestamp_callback_ok =
        !(ts_mode && !strcmp(ts_mode, "cupti")) && api->cuptiActivityRegisterTimestampCallback &&
        api->cuptiActivityRegisterTimestampCallback(timestamp_cb) == CUPTI_SUCCESS;
    /* Our buffers come zeroed (mmap'ed, or zeroed at window start in pool_setup): CUPTI need not
     * zero each one on the application thread. Set every window (another client may have set it
     * otherwise); if it cannot be set, CUPTI zeroes them as before. CPROF_CUPTI_ZEROED=0: A/B. */
    const char *zeroed_env = getenv("CPROF_CUPTI_ZEROED");
    uint8_t zeroed = !(zeroed_env && !strcmp(zeroed_env, "0"));
    size_t zeroed_size = sizeof zeroed;
    prezeroed = api->cuptiActivitySetAttribute &&
                api->cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER,
                                               &zeroed_size, &zeroed) == CUPTI_SUCCESS &&
                zeroed;
    /* One shared set of buffers, not CUPTI 13's default of a buffer per thread that makes
     * records: the pool is a fixed budget (pool_setup: two buffers at least, one filled while
     * the other is delivered), and per-thread buffers make every thread with one CUDA call in
     * the window hold a buffer of its own until the stop's flush, so a process with more such
     * threads than pool buffers lost those threads' records whole, reported as a pool that
     * "filled up". Set before the callbacks are registered, as CUPTI asks; a CUPTI without the
     * attribute has shared buffers anyway. CPROF_CUPTI_PER_THREAD_BUFFERS=1 keeps CUPTI's
     * default, set explicitly (diagnostics: A/B of the contention it saves; set, not left
     * alone, so that the A/B means the same where a CUPTI's default differs, or after a
     * window of the other mode in the process). */
    const char *pt_env = getenv("CPROF_CUPTI_PER_THREAD_BUFFERS");
    uint8_t per_thread = pt_env && !strcmp(pt_env, "1");
    size_t per_thread_size = sizeof per_thread;
    if (api->cuptiActivitySetAttribute)
        (void)api->cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER,
                                             &per_thread_size, &per_thread);
    r = api->cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) {
        int rc = map_cupti_error(r, "registering CUPTI buffer callbacks");
        zeroed_attr_off();
        release_subscriber();
        return rc;
    }
    int rc = pool_setup(config.buffer_bytes, config.pool_cap_bytes);
    if (rc == CPROF_OK) {
        atomic_store(&dropped_cupti, 0);
        atomic_store(&drop_count_errors, 0);
        atomic_store(&no_buffer_requests, 0);
        atomic_store(&buffers_used, 0);
        atomic_store(&foreign_completions, 0);
        atomic_store(&unkept_completions, 0);
        if (!timestamp_callback_ok) {
            uint64_t t = 0;
            uint64_t a = cprof_clock_now_ns();
            CUptiResult tr = api->cuptiGetTimestamp(&t);
            uint64_t b = cprof_clock_now_ns();
            /* no clock to convert by: every record would land outside the window, lost in
             * silence; this window goes without GPU records, said (decision 147) */
            if (tr != CUPTI_SUCCESS || t == 0)
                rc = map_cupti_error(tr != CUPTI_SUCCESS ? tr : CUPTI_ERROR_UNKNOWN,
                                     "reading CUPTI's clock (its timestamp callback was refused "
                                     "too)");
            else
                cupti_clock_offset = (int64_t)t - (int64_t)(a + (b - a) / 2);
        }
    }
    if (rc == CPROF_OK) {
        window_start_ns = start_ns;
        uint64_t t0 = cprof_clock_now_ns();
        rc = enable_kinds();
        enable_cost_ns = cprof_clock_now_ns() - t0;
    }
    if (rc != CPROF_OK) {
        int began = per_api_enable;
        for (int k = 0; k < 64; k++) began |= kinds_enabled[k];
        disable_all();
        if (began) {
            /* CUPTI may be writing a pool buffer already (another thread's kernel): it keeps
             * it until flushed, and the next window's pool_setup would hand it out again as
             * free (two writers in one buffer; gpurev2 F2). Flushed and discarded, as stop's */
            (void)api->cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
            pthread_mutex_lock(&pool_lock);
            pool_done_n = 0;
            pthread_mutex_unlock(&pool_lock);
        }
        zeroed_attr_off();
        release_subscriber();
        return rc;
    }
    active = 1;
    return CPROF_OK;
}

int cprof_cupti_stop(uint64_t stop_ns, uint64_t host_stop_ns, cprof_gpu_snapshot **out) {
    if (!out) return CPROF_E_ARG;
    if (!active) {
        set_error("GPU collection is not active");
        return CPROF_E_STATE;
    }
    /* forced: also the buffers CUPTI is still filling, so nothing of this window is left
     * behind to leak into the next one */
    int had_shared = shared, had_events = kinds_enabled[CUPTI_ACTIVITY_KIND_CUDA_EVENT];
    disable_error = unsubscribe_error = 0;
    (void)api->cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); /* see flush2 */
    disable_all();
    CUptiResult flush2 = api->cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    /* the second flush catches what the first left (a failed first flush loses nothing when
     * it goes through); a failed second one leaves behind what came between the two, work
     * that finished while the kinds were being switched off, however the first went */
    int flush_error = flush2 != CUPTI_SUCCESS ? (int)flush2 : 0;
    /* CUPTI's drop count is read (and reset) with each completed buffer; records it dropped
     * once no buffer could be had (the pool run dry) complete none, so they went uncounted:
     * read it once more now that the last buffer is in. Every record goes to the global
     * queue (the context argument is NULL for every buffer since CUDA 6). */
    if (api->cuptiActivityGetNumDroppedRecords) {
        size_t late = 0;
        CUptiResult dr = api->cuptiActivityGetNumDroppedRecords(NULL, 0, &late);
        if (dr != CUPTI_SUCCESS) atomic_fetch_add(&drop_count_errors, 1);
        else if (late) atomic_fetch_add(&dropped_cupti, late);
    }
    zeroed_attr_off();
    /* with CPROF_CUPTI_TEARDOWN=1 the subscriber is kept until the buffers are decoded (any
     * thread's next CUDA call would detach CUPTI), then armed for the teardown */
    int td = subscriber && teardown_wanted();
    CUpti_SubscriberHandle held = subscriber;
    if (!td) unsubscribe_error = release_subscriber();
    subscriber = NULL;
    active = 0;

    cprof_gpu_snapshot *snap = calloc(1, sizeof *snap);
    if (!snap) {
        if (td) release_held(held);
        return CPROF_E_NOMEM;
    }
    cprof_cupti_decoder d = {
        .snap = snap, .window_start_ns = window_start_ns, .stop_ns = stop_ns,
        .host_stop_ns = host_stop_ns && host_stop_ns < stop_ns ? host_stop_ns : stop_ns,
        .clock_offset = timestamp_callback_ok ? 0 : cupti_clock_offset};
    cprof_cupti_decoder_init(&d);
    pthread_mutex_lock(&pool_lock);
    size_t ndone = pool_done_n;
    completed_buf *done = malloc((ndone ? ndone : 1) * sizeof *done);
    if (done) {
        memcpy(done, pool_done, ndone * sizeof *done);
        pool_done_n = 0;
    }
    pthread_mutex_unlock(&pool_lock);
    if (!done) {
        free(snap);
        if (td) release_held(held);
        return CPROF_E_NOMEM;
    }
    uint64_t raw[64] = {0};
    for (size_t i = 0; i < ndone; i++) {
        CUpti_Activity *rec = NULL;
        CUptiResult r;
        while ((r = api->cuptiActivityGetNextRecord(done[i].buf, done[i].valid, &rec)) ==
               CUPTI_SUCCESS) {
            raw[(unsigned)rec->kind & 63]++;
            cprof_cupti_decode_one(&d, rec);
        }
        if (r != CUPTI_ERROR_MAX_LIMIT_REACHED) { /* not the buffer's end: the rest is lost */
            snap->buffers_undecoded++;
            snap->undecoded_error = (int)r;
        }
    }
    snap->flush_error = flush_error;
    /* the buffers go back to the pool (zeroed) when the next window starts: pool_setup */
    free(done);
    cprof_cupti_decoder_done(&d);
    snap->cuda_events = had_events;
    cprof_gpu_resolve_event_waits(snap); /* out of memory: the waits stay unresolved, counted */
    snap->dropped_cupti = atomic_load(&dropped_cupti);
    snap->drop_count_errors = atomic_load(&drop_count_errors);
    snap->disable_error = disable_error;
    snap->unsubscribe_error = unsubscribe_error;
    snap->buffers_refused = atomic_load(&no_buffer_requests);
    snap->pool_cap_bytes = (uint64_t)pool_n * pool_buffer_bytes; /* what the pool really held */
    snap->buffers = atomic_load(&buffers_used);
    snap->foreign_buffers = atomic_load(&foreign_completions);
    snap->buffers_unkept = atomic_load(&unkept_completions);
    snap->cupti_shared = had_shared;
    if (had_shared)
        snprintf(snap->cupti_holder, sizeof snap->cupti_holder, "%.*s",
                 (int)sizeof snap->cupti_holder - 1, shared_holder);
    snap->api_mode = api_mode;
    snap->api_delivered = raw[CUPTI_ACTIVITY_KIND_RUNTIME] + raw[CUPTI_ACTIVITY_KIND_DRIVER];
    snap->api_ids_off = api_ids_off;
    snap->enable_us = (uint32_t)(enable_cost_ns / 1000);
    snap->buffers_prezeroed = prezeroed;
    snap->prezero_us = (uint32_t)(zero_cost_ns / 1000);
    snap->device_props_json = cprof_cuda_device_props_json();
    snap->ndevices = cprof_cuda_device_limits(&snap->devices);
    if (td) release_held(held);
    *out = snap;
    return CPROF_OK;
}

void cprof_gpu_snapshot_free(cprof_gpu_snapshot *snap) {
    if (!snap) return;
    for (cprof_gpu_chunk *c = snap->chunks, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    free(snap->device_props_json);
    free(snap->devices);
    free(snap);
}
