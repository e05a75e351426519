/* A stand-in for libcupti and libcuda.so.1, for tests only: exports the CUPTI and driver entry
 * points cprof resolves (csrc/cuda_loader.c) with their real signatures (csrc/cupti_abi.h), and
 * fake_cupti_* control functions that tests call through ctypes to queue synthetic activity
 * records, inject errors and read counters. Point cprof at it with CPROF_CUPTI_PATH and
 * CPROF_LIBCUDA_PATH (one .so serves as both).
 *
 * How it behaves like CUPTI:
 *  - a record is created only if its kind is enabled when it is added (API records: only while
 *    the RUNTIME / DRIVER kind is enabled, and only for call ids not switched off one by one
 *    after it; the per-id switch alone, without the kind, creates none, as measured on CUPTI
 *    13.0.1; kernels, copies and sets that belong to a graph are replaced by the graph record
 *    while GRAPH_TRACE is enabled);
 *    with no buffer callbacks registered a record is counted as dropped, as CUPTI does;
 *  - records reach the client only through its bufferRequested / bufferCompleted callbacks: on
 *    cuptiActivityFlushAll (on the calling thread, partly filled buffers included), and from a
 *    background thread (CUPTI's worker) each time a buffer fills up, unless
 *    fake_cupti_set_async(0) or FAKE_CUPTI_ASYNC=0;
 *  - each thread that makes records fills a buffer of its own (CUPTI 13's default,
 *    CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER = 1), unless the client set that attribute
 *    to 0; a flush completes the partly filled buffers in no chronological order;
 *  - a buffer the client handed over is CUPTI's until it comes back through bufferCompleted
 *    (cupti_activity.h: "After this call CUPTI relinquished ownership of the buffer"): one
 *    handed out again while held, or whose records changed under CUPTI (zeroed by the client),
 *    is counted (fake_cupti_buffers_misused);
 *  - cuptiActivityGetNextRecord walks a buffer and ends with CUPTI_ERROR_MAX_LIMIT_REACHED;
 *  - timestamps are whatever the test gave (tests pass cprof-clock ns), used verbatim while a
 *    timestamp callback is registered (CUPTI then stamps with it); with none they are moved
 *    to CUPTI's own clock (CLOCK_REALTIME, as cuptiGetTimestamp), as the real one stamps
 *    them, unless fake_cupti_set_own_clock(0) (tests of the fake that read times back);
 *  - one subscriber at a time: a second cuptiSubscribe fails with
 *    CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, as does any while
 *    fake_cupti_set_other_subscriber() pretends another tool holds CUPTI.
 * The driver part: one device "Fake GPU (cprof tests)", compute 9.0, 132 SMs, 80 GiB; events
 * stamp CLOCK_MONOTONIC when recorded and cuEventElapsedTime gives the difference in ms.
 * Contexts as the real driver checks them: FAKE_CTXS primary contexts, the one current on a
 * thread chosen by fake_cuda_set_current(i); a new thread has none (the process's main thread
 * starts with 0, as if PyTorch had made device 0's current there; see cur_ctx); an event belongs to the context current when it was created, a stream handle to
 * context 0 unless fake_cuda_stream_ctx() said otherwise (stream 0: the current one), and
 * cuEventRecord / cuEventElapsedTime refuse events of another context with
 * CUDA_ERROR_INVALID_HANDLE, as documented in cuda.h.
 * Control functions and entry points may be called from any thread. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cupti_abi.h"

#define FAKE_EXPORT __attribute__((visibility("default")))
#define FAKE_API_BITS 2048 /* > every runtime and driver call id of CUDA 13 */
#define FAKE_MAX_ERRORS 32
#define FAKE_EXT_KINDS 6   /* CUPTI_EXTERNAL_CORRELATION_KIND_SIZE */
#define FAKE_EXT_DEPTH 64
#define FAKE_REC_MAX 256   /* largest record (CUpti_ActivityKernel10 is 216 bytes) */

/* ---------------------------------------------------------------- function names */

#define FAKE_FUNCS(X) \
    X(cuptiGetVersion) \
    X(cuptiGetResultString) \
    X(cuptiGetErrorMessage) \
    X(cuptiSubscribe) \
    X(cuptiSubscribe_v2) \
    X(cuptiUnsubscribe) \
    X(cuptiActivityRegisterCallbacks) \
    X(cuptiActivityRegisterTimestampCallback) \
    X(cuptiActivityEnable) \
    X(cuptiActivityDisable) \
    X(cuptiActivityEnableRuntimeApi) \
    X(cuptiActivityEnableDriverApi) \
    X(cuptiActivityFlushAll) \
    X(cuptiActivitySetAttribute) \
    X(cuptiActivityGetNextRecord) \
    X(cuptiActivityGetNumDroppedRecords) \
    X(cuptiGetTimestamp) \
    X(cuptiFinalize) \
    X(cuptiEnableDomain) \
    X(cuptiActivityPushExternalCorrelationId) \
    X(cuptiActivityPopExternalCorrelationId) \
    X(cuptiGetDeviceId) \
    X(cuptiGetContextId) \
    X(cuptiGetStreamIdEx) \
    X(cuptiSetThreadIdType) \
    X(cuInit) \
    X(cuDriverGetVersion) \
    X(cuDeviceGetCount) \
    X(cuDeviceGet) \
    X(cuDeviceGetName) \
    X(cuDeviceTotalMem_v2) \
    X(cuDeviceGetAttribute) \
    X(cuCtxGetCurrent) \
    X(cuCtxPushCurrent_v2) \
    X(cuCtxPopCurrent_v2) \
    X(cuStreamGetCtx) \
    X(cuDevicePrimaryCtxGetState) \
    X(cuDevicePrimaryCtxRetain) \
    X(cuEventCreate) \
    X(cuEventDestroy_v2) \
    X(cuEventRecord) \
    X(cuEventQuery) \
    X(cuEventSynchronize) \
    X(cuEventElapsedTime_v2) \
    X(cuEventElapsedTime) \
    X(cuStreamSynchronize) \
    X(cuGetErrorString)

#define FAKE_ENUM(f) FN_##f,
#define FAKE_NAME(f) #f,
enum { FAKE_FUNCS(FAKE_ENUM) FN_COUNT };
static const char *const fn_names[FN_COUNT] = {FAKE_FUNCS(FAKE_NAME)};

static int fn_index(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < FN_COUNT; i++)
        if (strcmp(fn_names[i], name) == 0) return i;
    return -1;
}

/* ---------------------------------------------------------------- state */

struct CUpti_Subscriber_st {
    int unused;
};
struct CUctx_st {
    int unused;
};
struct CUevent_st {
    unsigned int flags;
    int ctx;    /* index of the context current at its creation */
    int recorded;
    int waited; /* a cuEventSynchronize since its record: the next returns at once */
    uint64_t t_ns;
};

typedef struct fake_error {
    int fn;
    int result;
    int once;
    int skip; /* calls that still succeed before the error begins */
} fake_error;

/* The client's buffer being filled; persists between deliveries like CUPTI's own. */
typedef struct fake_buffer {
    uint8_t *buf;
    size_t size, used, max_records, nrecords;
    uint8_t first[8]; /* the first record's first bytes, to see the client write into it */
} fake_buffer;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;         /* all state below */
static pthread_mutex_t g_deliver_lock = PTHREAD_MUTEX_INITIALIZER; /* one delivery at a time */
static _Thread_local int tls_delivering;

static uint64_t g_calls[FN_COUNT];
static fake_error g_errors[FAKE_MAX_ERRORS];
static int g_nerrors;

static struct CUpti_Subscriber_st g_subscriber;
static int g_subscribed;
static CUpti_CallbackFunc g_callback; /* the subscriber's callback and the domains it enabled */
static void *g_userdata;
static uint32_t g_domains;
static char g_subscriber_name[CUPTI_SUBSCRIBER_NAME_MAX_LEN + 1];
static char g_other_holder[128];

static CUpti_BuffersCallbackRequestFunc g_req;
static CUpti_BuffersCallbackCompleteFunc g_comp;
static CUpti_TimestampCallbackFunc g_timestamp;
static int g_own_clock = 1; /* fake_cupti_set_own_clock */
static uint64_t g_kinds; /* bit per enabled CUpti_ActivityKind */
static uint8_t g_runtime_api[FAKE_API_BITS / 8], g_driver_api[FAKE_API_BITS / 8];
static int g_thread_id_type;
static uint8_t g_zeroed_attr;    /* CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER */
static uint64_t g_dirty_buffers; /* buffers handed out not zeroed although the client said so */
static uint64_t g_misused_buffers; /* held buffers handed out again, or written by the client */
static uint64_t g_zeroed_requests; /* buffers handed out while the attribute was on */
/* "CUPTI maintains a stack of external correlation IDs per CPU thread" (CUPTI docs, External
 * Correlation): a push on one thread names only that thread's API records */
static _Thread_local uint64_t g_ext_stack[FAKE_EXT_KINDS][FAKE_EXT_DEPTH];
static _Thread_local int g_ext_depth[FAKE_EXT_KINDS];

/* created, undelivered records: each a queue_hdr then the record, padded to 8 bytes */
typedef struct queue_hdr {
    uint32_t slot; /* the activity buffer it goes to (per_thread_slot) */
    uint32_t size; /* the record's bytes, padded */
} queue_hdr;
static uint8_t *g_queue;
static size_t g_qhead, g_qlen, g_qcap;
/* CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER: "By default, CUPTI requests activity buffers
 * separately for each thread that generates activity records" (CUPTI 13 docs, Activity API;
 * the attribute's default is 1). Each thread making records fills a buffer of its own, so the
 * client holds one per such thread, and buffers are completed in no particular order. The
 * client may set it to 0 (one shared buffer) before registering callbacks. */
#define FAKE_ATTR_PER_THREAD 9
#define FAKE_THREAD_BUFS 64 /* threads beyond it share buffers */
static uint8_t g_per_thread = 1;
/* the attribute's default: 1 as CUPTI 13's; FAKE_CUPTI_PER_THREAD_DEFAULT=0 models a CUPTI
 * whose default is shared buffers (12.x) */
static uint8_t per_thread_default(void) {
    const char *e = getenv("FAKE_CUPTI_PER_THREAD_DEFAULT");
    return !(e && !strcmp(e, "0"));
}
__attribute__((constructor)) static void per_thread_init(void) { g_per_thread = per_thread_default(); }
static int g_next_slot;
static _Thread_local int tls_slot = -1;
static fake_buffer g_bufs[FAKE_THREAD_BUFS]; /* the client's buffers being filled, per slot */
static uint64_t g_dropped, g_discarded, g_completed_buffers, g_delivered_records;
static int64_t g_next_grid_id = 1;

static pthread_t g_worker;
static pthread_cond_t g_kick_cv = PTHREAD_COND_INITIALIZER;
static int g_async, g_kick, g_worker_stop;
/* CUPTI delivers full buffers from a worker thread of its own ("CUPTI offloads ... delivery of
 * the activity buffers to the client using the buffer completed callback" to it: CUPTI docs,
 * CUPTI Threads), so the fake starts its worker with the first record unless
 * fake_cupti_set_async(0) or FAKE_CUPTI_ASYNC=0 said not to (then only flushes deliver). */
static int g_async_off;
static void *worker_main(void *arg);

static int g_cu_initialized;
static int g_events_pending;
static uint64_t g_live_events;
#define FAKE_CTXS 4
static struct CUctx_st g_ctxs[FAKE_CTXS];
/* the context current on this thread; -1: none; FAKE_CTX_UNSET: not yet decided (cur_ctx) */
#define FAKE_CTX_UNSET (-2)
static _Thread_local int tls_ctx = FAKE_CTX_UNSET;
static _Thread_local int tls_ctx_stack[8]; /* cuCtxPushCurrent's saved contexts */
static _Thread_local int tls_ctx_depth;
static struct {
    uintptr_t stream;
    int ctx;
} g_stream_ctx[32];
static int g_nstream_ctx;

/* The context current on this thread, as the real driver has it: none on a new thread (cuda.h,
 * cuCtxGetCurrent: "If no context is bound to the calling CPU thread then *pctx is set to NULL")
 * until something binds one (cuCtxSetCurrent / cuCtxPushCurrent, or the runtime's first call on
 * that thread: fake_cuda_set_current here). The process's main thread starts with context 0, as
 * if PyTorch had initialised CUDA on it. FAKE_CUDA_THREAD_CTX=all gives every new thread
 * context 0 (the fake's old, kinder behaviour). */
static int cur_ctx(void) {
    if (tls_ctx == FAKE_CTX_UNSET) {
        const char *all = getenv("FAKE_CUDA_THREAD_CTX");
        tls_ctx = (all && !strcmp(all, "all")) || gettid() == getpid() ? 0 : -1;
    }
    return tls_ctx;
}

/* Kernel names live for the whole process, as CUPTI's do until its module unloads. */
static char **g_names;
static size_t g_nnames, g_names_cap;

static uint64_t now_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Counts a call and returns the error injected for it, if any (0 = go on). */
static int fake_enter(int fn) {
    int result = 0;
    pthread_mutex_lock(&g_lock);
    g_calls[fn]++;
    for (int i = 0; i < g_nerrors; i++) {
        if (g_errors[i].fn != fn) continue;
        if (g_errors[i].skip > 0) {
            g_errors[i].skip--;
            break;
        }
        result = g_errors[i].result;
        if (g_errors[i].once) g_errors[i] = g_errors[--g_nerrors];
        break;
    }
    pthread_mutex_unlock(&g_lock);
    return result;
}

#define FAKE_ENTER(f, type) \
    do { \
        int injected_ = fake_enter(FN_##f); \
        if (injected_) return (type)injected_; \
    } while (0)

static const char *intern_name(const char *s) {
    if (!s) return NULL;
    for (size_t i = 0; i < g_nnames; i++)
        if (strcmp(g_names[i], s) == 0) return g_names[i];
    if (g_nnames == g_names_cap) {
        size_t cap = g_names_cap ? 2 * g_names_cap : 64;
        char **n = realloc(g_names, cap * sizeof *n);
        if (!n) return "";
        g_names = n;
        g_names_cap = cap;
    }
    char *copy = strdup(s);
    if (!copy) return "";
    g_names[g_nnames++] = copy;
    return copy;
}

static size_t record_size(CUpti_ActivityKind kind) {
    switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMCPY2: return sizeof(CUpti_ActivityMemcpyPtoP4);
    case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
    case CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API: return sizeof(CUpti_ActivityAPI);
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: return sizeof(CUpti_ActivitySynchronization2);
    case CUPTI_ACTIVITY_KIND_OVERHEAD: return sizeof(CUpti_ActivityOverhead3);
    case CUPTI_ACTIVITY_KIND_MEMORY2: return sizeof(CUpti_ActivityMemory4);
    case CUPTI_ACTIVITY_KIND_MEMORY_POOL: return sizeof(CUpti_ActivityMemoryPool3);
    case CUPTI_ACTIVITY_KIND_MARKER: return sizeof(CUpti_ActivityMarker2);
    case CUPTI_ACTIVITY_KIND_GRAPH_TRACE: return sizeof(CUpti_ActivityGraphTrace2);
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
        return sizeof(CUpti_ActivityExternalCorrelation);
    case CUPTI_ACTIVITY_KIND_CUDA_EVENT: return sizeof(CUpti_ActivityCudaEvent2);
    default: return 0;
    }
}

static size_t pad8(size_t n) { return (n + 7) & ~(size_t)7; }
static int kind_on(int kind) { return kind > 0 && kind < 64 && (g_kinds >> kind & 1); }
static int bit_get(const uint8_t *bits, uint32_t i) { return bits[i / 8] >> (i % 8) & 1; }
static void bit_set(uint8_t *bits, uint32_t i, int on) {
    if (on) bits[i / 8] |= (uint8_t)(1u << (i % 8));
    else bits[i / 8] &= (uint8_t) ~(1u << (i % 8));
}

/* ---------------------------------------------------------------- record creation */

/* Appends a created record to the queue (g_lock held). */
static void queue_push(const void *rec, size_t size) {
    if (!g_req || !g_comp) { /* nowhere to put it: CUPTI drops and counts it */
        g_dropped++;
        return;
    }
    size_t need = sizeof(queue_hdr) + pad8(size);
    if (g_qhead > 0 && g_qhead == g_qlen) g_qhead = g_qlen = 0;
    if (g_qlen + need > g_qcap) {
        if (g_qhead > 0) { /* compact before growing */
            memmove(g_queue, g_queue + g_qhead, g_qlen - g_qhead);
            g_qlen -= g_qhead;
            g_qhead = 0;
        }
        if (g_qlen + need > g_qcap) {
            size_t cap = g_qcap ? g_qcap : 4096;
            while (cap < g_qlen + need) cap *= 2;
            uint8_t *q = realloc(g_queue, cap);
            if (!q) {
                g_dropped++;
                return;
            }
            g_queue = q;
            g_qcap = cap;
        }
    }
    memset(g_queue + g_qlen, 0, need);
    if (g_per_thread && tls_slot < 0) tls_slot = g_next_slot++ % FAKE_THREAD_BUFS;
    queue_hdr h = {g_per_thread ? (uint32_t)tls_slot : 0u, (uint32_t)pad8(size)};
    memcpy(g_queue + g_qlen, &h, sizeof h);
    memcpy(g_queue + g_qlen + sizeof h, rec, size);
    g_qlen += need;
    if (!g_async && !g_async_off) {
        const char *env = getenv("FAKE_CUPTI_ASYNC");
        if (env && !strcmp(env, "0")) {
            g_async_off = 1;
        } else {
            g_worker_stop = 0;
            g_kick = 0;
            if (pthread_create(&g_worker, NULL, worker_main, NULL) == 0) g_async = 1;
            else g_async_off = 1;
        }
    }
    if (g_async) {
        g_kick = 1;
        pthread_cond_signal(&g_kick_cv);
    }
}

/* A time the test gave (cprof's clock, ~CLOCK_MONOTONIC) in CUPTI's own clock (CLOCK_REALTIME,
 * what cuptiGetTimestamp gives without a timestamp callback); 0 stays 0 (not collected). */
static void own_clock(uint64_t *t, int64_t delta) {
    if (*t) *t = (uint64_t)((int64_t)*t + delta);
}

/* fake_cupti_set_own_clock(1): with no timestamp callback registered, records are stamped in
 * CUPTI's own clock, as the real one does, instead of verbatim (g_lock held). */
static void stamp(void *rec) {
    if (!g_own_clock || g_timestamp) return;
    /* one offset for the process: two clocks read per record differ by a few ns each time,
     * which would reorder records CUPTI stamps in order */
    static int64_t d;
    if (!d) d = (int64_t)(now_ns(CLOCK_REALTIME) - now_ns(CLOCK_MONOTONIC));
    CUpti_Activity *a = rec;
    switch (a->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        CUpti_ActivityKernel10 *k = rec;
        own_clock(&k->start, d), own_clock(&k->end, d);
        own_clock(&k->queued, d), own_clock(&k->submitted, d), own_clock(&k->completed, d);
        break;
    }
#define SHIFT_SE(type) own_clock(&((type *)rec)->start, d), own_clock(&((type *)rec)->end, d)
    case CUPTI_ACTIVITY_KIND_MEMCPY: SHIFT_SE(CUpti_ActivityMemcpy6); break;
    case CUPTI_ACTIVITY_KIND_MEMCPY2: SHIFT_SE(CUpti_ActivityMemcpyPtoP4); break;
    case CUPTI_ACTIVITY_KIND_MEMSET: SHIFT_SE(CUpti_ActivityMemset4); break;
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: SHIFT_SE(CUpti_ActivityAPI); break;
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: SHIFT_SE(CUpti_ActivitySynchronization2); break;
    case CUPTI_ACTIVITY_KIND_OVERHEAD: SHIFT_SE(CUpti_ActivityOverhead3); break;
    case CUPTI_ACTIVITY_KIND_GRAPH_TRACE: SHIFT_SE(CUpti_ActivityGraphTrace2); break;
#undef SHIFT_SE
    case CUPTI_ACTIVITY_KIND_MEMORY2: own_clock(&((CUpti_ActivityMemory4 *)rec)->timestamp, d); break;
    case CUPTI_ACTIVITY_KIND_MEMORY_POOL:
        own_clock(&((CUpti_ActivityMemoryPool3 *)rec)->timestamp, d);
        break;
    case CUPTI_ACTIVITY_KIND_MARKER: own_clock(&((CUpti_ActivityMarker2 *)rec)->timestamp, d); break;
    default: break;
    }
}

/* Creates a record if CUPTI would (g_lock held): returns 1 if it was queued or dropped, 0 if its
 * kind (or call id) was not enabled so no record exists. */
static int emit(void *rec, size_t size) {
    CUpti_Activity *a = rec;
    stamp(rec);
    switch (a->kind) {
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
        CUpti_ActivityAPI *api = rec;
        const uint8_t *bits = a->kind == CUPTI_ACTIVITY_KIND_DRIVER ? g_driver_api : g_runtime_api;
        if (!kind_on(a->kind) || api->cbid >= FAKE_API_BITS || !bit_get(bits, api->cbid))
            goto discard;
        /* like CUPTI, an external id pushed on the calling thread is reported at API entry */
        if (kind_on(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION))
            for (int k = 0; k < FAKE_EXT_KINDS; k++) {
                if (!g_ext_depth[k]) continue;
                CUpti_ActivityExternalCorrelation x;
                memset(&x, 0, sizeof x);
                x.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
                x.externalKind = (CUpti_ExternalCorrelationKind)k;
                x.externalId = g_ext_stack[k][g_ext_depth[k] - 1];
                x.correlationId = api->correlationId;
                queue_push(&x, sizeof x);
            }
        break;
    }
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        CUpti_ActivityKernel10 *k = rec;
        if (k->graphId && kind_on(CUPTI_ACTIVITY_KIND_GRAPH_TRACE)) goto discard;
        if (kind_on(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) break;
        if (!kind_on(CUPTI_ACTIVITY_KIND_KERNEL)) goto discard;
        a->kind = CUPTI_ACTIVITY_KIND_KERNEL; /* the serialising kind, same record layout */
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY:
        if (((CUpti_ActivityMemcpy6 *)rec)->graphId && kind_on(CUPTI_ACTIVITY_KIND_GRAPH_TRACE))
            goto discard;
        if (!kind_on(a->kind)) goto discard;
        break;
    case CUPTI_ACTIVITY_KIND_MEMSET:
        if (((CUpti_ActivityMemset4 *)rec)->graphId && kind_on(CUPTI_ACTIVITY_KIND_GRAPH_TRACE))
            goto discard;
        if (!kind_on(a->kind)) goto discard;
        break;
    default:
        if (!kind_on(a->kind)) goto discard;
    }
    queue_push(rec, size);
    return 1;
discard:
    g_discarded++;
    return 0;
}

/* ---------------------------------------------------------------- delivery */

static void complete_buffer(fake_buffer *cur) {
    fake_buffer b = *cur;
    memset(cur, 0, sizeof *cur);
    pthread_mutex_lock(&g_lock);
    if (b.used && memcmp(b.buf, b.first, sizeof b.first)) g_misused_buffers++;
    CUpti_BuffersCallbackCompleteFunc comp = g_comp;
    g_completed_buffers++;
    g_delivered_records += b.nrecords;
    pthread_mutex_unlock(&g_lock);
    if (comp) comp(NULL, 0, b.buf, b.size, b.used);
}

/* Gets an empty buffer from the client for a record of need bytes. 0 if it gave none usable. */
static int request_buffer(fake_buffer *cur, size_t need) {
    pthread_mutex_lock(&g_lock);
    CUpti_BuffersCallbackRequestFunc req = g_req;
    pthread_mutex_unlock(&g_lock);
    if (!req) return 0;
    uint8_t *buf = NULL;
    size_t size = 0, max_records = 0;
    req(&buf, &size, &max_records);
    /* CUPTI wants 8-byte aligned buffers; anything else is as good as no buffer */
    if (!buf || size < need || ((uintptr_t)buf & 7)) return 0;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < FAKE_THREAD_BUFS; i++)
        if (g_bufs[i].buf == buf) g_misused_buffers++; /* still ours: two writers from now on */
    pthread_mutex_unlock(&g_lock);
    /* CUPTI zeroes the buffer on this (the application's) thread unless the client promised
     * zero-filled buffers; a promise broken would leave stale bytes among new records */
    int zeroed;
    pthread_mutex_lock(&g_lock);
    zeroed = g_zeroed_attr;
    pthread_mutex_unlock(&g_lock);
    if (!zeroed) {
        memset(buf, 0, size);
    } else {
        pthread_mutex_lock(&g_lock);
        g_zeroed_requests++;
        pthread_mutex_unlock(&g_lock);
        for (size_t i = 0; i < size; i++)
            if (buf[i]) {
                pthread_mutex_lock(&g_lock);
                g_dirty_buffers++;
                pthread_mutex_unlock(&g_lock);
                break;
            }
    }
    cur->buf = buf;
    cur->size = size;
    cur->used = 0;
    cur->max_records = max_records;
    cur->nrecords = 0;
    return 1;
}

/* Moves queued records into client buffers (the buffer of the thread that made each, see
 * g_per_thread), completing each buffer that fills up; with flush_all also completes the partly
 * filled ones, the last thread's first (CUPTI promises no order between buffers). Callbacks run
 * without g_lock. */
static void deliver(int flush_all) {
    pthread_mutex_lock(&g_deliver_lock);
    tls_delivering = 1;
    uint8_t rec[FAKE_REC_MAX];
    for (;;) {
        pthread_mutex_lock(&g_lock);
        if (g_qhead >= g_qlen) {
            pthread_mutex_unlock(&g_lock);
            break;
        }
        queue_hdr h;
        memcpy(&h, g_queue + g_qhead, sizeof h);
        CUpti_Activity *a = (CUpti_Activity *)(g_queue + g_qhead + sizeof h);
        size_t size = record_size(a->kind);
        if (!size) { /* cannot happen: only known kinds are queued; never spin on it */
            g_qhead = g_qlen;
            pthread_mutex_unlock(&g_lock);
            break;
        }
        memcpy(rec, a, size);
        g_qhead += sizeof h + h.size;
        pthread_mutex_unlock(&g_lock);

        fake_buffer *cur = &g_bufs[h.slot % FAKE_THREAD_BUFS];
        size_t need = pad8(size);
        if (cur->buf && (cur->used + need > cur->size ||
                         (cur->max_records && cur->nrecords >= cur->max_records)))
            complete_buffer(cur);
        if (!cur->buf && !request_buffer(cur, need)) {
            pthread_mutex_lock(&g_lock);
            g_dropped++;
            pthread_mutex_unlock(&g_lock);
            continue;
        }
        memset(cur->buf + cur->used, 0, need);
        memcpy(cur->buf + cur->used, rec, size);
        if (!cur->used) memcpy(cur->first, rec, sizeof cur->first);
        cur->used += need;
        cur->nrecords++;
        if (cur->used == cur->size || (cur->max_records && cur->nrecords >= cur->max_records))
            complete_buffer(cur);
    }
    if (flush_all)
        for (int i = FAKE_THREAD_BUFS; i-- > 0;)
            if (g_bufs[i].buf) complete_buffer(&g_bufs[i]);
    tls_delivering = 0;
    pthread_mutex_unlock(&g_deliver_lock);
}

static void *worker_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&g_lock);
    while (!g_worker_stop) {
        while (!g_kick && !g_worker_stop) pthread_cond_wait(&g_kick_cv, &g_lock);
        if (g_worker_stop) break;
        g_kick = 0;
        pthread_mutex_unlock(&g_lock);
        deliver(0);
        pthread_mutex_lock(&g_lock);
    }
    pthread_mutex_unlock(&g_lock);
    return NULL;
}

/* ================================================================ CUPTI entry points */

FAKE_EXPORT CUptiResult cuptiGetVersion(uint32_t *version) {
    FAKE_ENTER(cuptiGetVersion, CUptiResult);
    if (!version) return CUPTI_ERROR_INVALID_PARAMETER;
    /* read at each call so a test can pose as an older CUPTI before the loader looks */
    const char *env = getenv("FAKE_CUPTI_API_VERSION");
    *version = env && env[0] ? (uint32_t)strtoul(env, NULL, 10) : CPROF_CUPTI_ABI_VERSION;
    return CUPTI_SUCCESS;
}

#define RESULT_NAME(r) \
    case r: return #r;
static const char *result_name(CUptiResult r) {
    switch (r) {
        RESULT_NAME(CUPTI_SUCCESS)
        RESULT_NAME(CUPTI_ERROR_INVALID_PARAMETER)
        RESULT_NAME(CUPTI_ERROR_INVALID_DEVICE)
        RESULT_NAME(CUPTI_ERROR_INVALID_CONTEXT)
        RESULT_NAME(CUPTI_ERROR_INVALID_OPERATION)
        RESULT_NAME(CUPTI_ERROR_OUT_OF_MEMORY)
        RESULT_NAME(CUPTI_ERROR_HARDWARE)
        RESULT_NAME(CUPTI_ERROR_API_NOT_IMPLEMENTED)
        RESULT_NAME(CUPTI_ERROR_MAX_LIMIT_REACHED)
        RESULT_NAME(CUPTI_ERROR_NOT_READY)
        RESULT_NAME(CUPTI_ERROR_NOT_COMPATIBLE)
        RESULT_NAME(CUPTI_ERROR_NOT_INITIALIZED)
        RESULT_NAME(CUPTI_ERROR_QUEUE_EMPTY)
        RESULT_NAME(CUPTI_ERROR_INVALID_KIND)
        RESULT_NAME(CUPTI_ERROR_DISABLED)
        RESULT_NAME(CUPTI_ERROR_NOT_SUPPORTED)
        RESULT_NAME(CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED)
        RESULT_NAME(CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)
        RESULT_NAME(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
        RESULT_NAME(CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES)
        RESULT_NAME(CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED)
        RESULT_NAME(CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED)
        RESULT_NAME(CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED)
        RESULT_NAME(CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED)
        RESULT_NAME(CUPTI_ERROR_UNKNOWN)
    default: return NULL;
    }
}

FAKE_EXPORT CUptiResult cuptiGetResultString(CUptiResult result, const char **str) {
    FAKE_ENTER(cuptiGetResultString, CUptiResult);
    if (!str) return CUPTI_ERROR_INVALID_PARAMETER;
    *str = result_name(result);
    return *str ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
}

FAKE_EXPORT CUptiResult cuptiGetErrorMessage(CUptiResult result, const char **str) {
    FAKE_ENTER(cuptiGetErrorMessage, CUptiResult);
    if (!str) return CUPTI_ERROR_INVALID_PARAMETER;
    switch (result) {
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
        *str = "fake CUPTI: profiling is restricted to admin users "
               "(NVreg_RestrictProfilingToAdminUsers)";
        return CUPTI_SUCCESS;
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
        *str = "fake CUPTI: another CUPTI subscriber is active";
        return CUPTI_SUCCESS;
    default:
        *str = result_name(result);
        return *str ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
    }
}

/* Shared by both subscribe calls (g_lock not held). */
static CUptiResult subscribe(CUpti_SubscriberHandle *subscriber, CUpti_SubscriberParams *params) {
    if (!subscriber) return CUPTI_ERROR_INVALID_PARAMETER;
    if (params && params->structSize < CUpti_SubscriberParams_STRUCT_SIZE)
        return CUPTI_ERROR_INVALID_PARAMETER;
    CUptiResult r = CUPTI_SUCCESS;
    pthread_mutex_lock(&g_lock);
    if (g_subscribed || g_other_holder[0]) {
        r = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
        if (params && params->oldSubscriberName && params->oldSubscriberSize) {
            const char *holder = g_other_holder[0] ? g_other_holder : g_subscriber_name;
            size_t n = strlen(holder);
            if (n >= params->oldSubscriberSize) n = params->oldSubscriberSize - 1;
            memcpy(params->oldSubscriberName, holder, n);
            params->oldSubscriberName[n] = '\0';
        }
    } else {
        g_subscribed = 1;
        g_domains = 0;
        const char *name = params && params->subscriberName ? params->subscriberName : "";
        strcpy(g_subscriber_name, "CUPTI for ");
        strncat(g_subscriber_name, name, sizeof g_subscriber_name - strlen(g_subscriber_name) - 1);
        *subscriber = &g_subscriber;
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* The callback is called back only for the API domains enabled with cuptiEnableDomain, when a
 * test simulates a CUDA call (fake_cupti_api_call). */
static CUptiResult subscribed(CUptiResult r, CUpti_CallbackFunc callback, void *userdata) {
    if (r == CUPTI_SUCCESS) {
        pthread_mutex_lock(&g_lock);
        g_callback = callback;
        g_userdata = userdata;
        pthread_mutex_unlock(&g_lock);
    }
    return r;
}

/* FAKE_CUPTI_SLOW_US: each subscribe and each forced flush takes this long (a real CUPTI
 * takes milliseconds to attach and to flush: tests of what the window's span covers) */
static void slow_cupti(void) {
    static long us = -1;
    if (us < 0) {
        const char *e = getenv("FAKE_CUPTI_SLOW_US");
        us = e ? atol(e) : 0;
    }
    if (us > 0) usleep((useconds_t)us);
}

FAKE_EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *subscriber,
                                       CUpti_CallbackFunc callback, void *userdata) {
    FAKE_ENTER(cuptiSubscribe, CUptiResult);
    slow_cupti();
    return subscribed(subscribe(subscriber, NULL), callback, userdata);
}

FAKE_EXPORT CUptiResult cuptiSubscribe_v2(CUpti_SubscriberHandle *subscriber,
                                          CUpti_CallbackFunc callback, void *userdata,
                                          CUpti_SubscriberParams *pParams) {
    FAKE_ENTER(cuptiSubscribe_v2, CUptiResult);
    slow_cupti();
    return subscribed(subscribe(subscriber, pParams), callback, userdata);
}

FAKE_EXPORT CUptiResult cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                          CUpti_CallbackDomain domain) {
    FAKE_ENTER(cuptiEnableDomain, CUptiResult);
    if ((int)domain <= 0 || (int)domain >= CUPTI_CB_DOMAIN_SIZE) return CUPTI_ERROR_INVALID_PARAMETER;
    CUptiResult r = CUPTI_SUCCESS;
    pthread_mutex_lock(&g_lock);
    if (subscriber != &g_subscriber || !g_subscribed) r = CUPTI_ERROR_INVALID_PARAMETER;
    else if (enable) g_domains |= 1u << domain;
    else g_domains &= ~(1u << domain);
    pthread_mutex_unlock(&g_lock);
    return r;
}

FAKE_EXPORT CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
    FAKE_ENTER(cuptiUnsubscribe, CUptiResult);
    CUptiResult r = CUPTI_SUCCESS;
    pthread_mutex_lock(&g_lock);
    if (subscriber != &g_subscriber || !g_subscribed) r = CUPTI_ERROR_INVALID_PARAMETER;
    else g_subscribed = 0, g_domains = 0, g_callback = NULL;
    pthread_mutex_unlock(&g_lock);
    return r;
}

FAKE_EXPORT CUptiResult cuptiActivitySetAttribute(CUpti_ActivityAttribute attr,
                                                  size_t *valueSize, void *value) {
    FAKE_ENTER(cuptiActivitySetAttribute, CUptiResult);
    if (!valueSize || !value) return CUPTI_ERROR_INVALID_PARAMETER;
    if (attr != CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER && (int)attr != FAKE_ATTR_PER_THREAD)
        return CUPTI_ERROR_NOT_SUPPORTED;
    if (*valueSize != sizeof(uint8_t)) return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&g_lock);
    if (attr == CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER) g_zeroed_attr = *(uint8_t *)value;
    else g_per_thread = *(uint8_t *)value != 0;
    pthread_mutex_unlock(&g_lock);
    return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult cuptiActivityRegisterCallbacks(
    CUpti_BuffersCallbackRequestFunc funcBufferRequested,
    CUpti_BuffersCallbackCompleteFunc funcBufferCompleted) {
    FAKE_ENTER(cuptiActivityRegisterCallbacks, CUptiResult);
    if (!funcBufferRequested || !funcBufferCompleted) return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&g_lock);
    g_req = funcBufferRequested;
    g_comp = funcBufferCompleted;
    pthread_mutex_unlock(&g_lock);
    return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult
cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc funcTimestamp) {
    FAKE_ENTER(cuptiActivityRegisterTimestampCallback, CUptiResult);
    if (!funcTimestamp) return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&g_lock);
    g_timestamp = funcTimestamp;
    pthread_mutex_unlock(&g_lock);
    return CUPTI_SUCCESS;
}

static CUptiResult set_kind(CUpti_ActivityKind kind, int on) {
    if ((int)kind <= 0 || kind > CUPTI_ACTIVITY_KIND_CONFIDENTIAL_COMPUTE_ROTATION)
        return CUPTI_ERROR_INVALID_KIND;
    pthread_mutex_lock(&g_lock);
    if (on) g_kinds |= 1ull << kind;
    else g_kinds &= ~(1ull << kind);
    /* the whole kind overrides the per-call-id settings made before it */
    if (kind == CUPTI_ACTIVITY_KIND_RUNTIME)
        memset(g_runtime_api, on ? 0xff : 0, sizeof g_runtime_api);
    if (kind == CUPTI_ACTIVITY_KIND_DRIVER)
        memset(g_driver_api, on ? 0xff : 0, sizeof g_driver_api);
    pthread_mutex_unlock(&g_lock);
    return CUPTI_SUCCESS;
}

/* fake_cupti_enable_fails_at / fake_cupti_kernel_on_enable (a start that fails half way) */
static int g_enable_fail_nth, g_enable_fail_result;
static char g_on_enable_name[64];
static uint64_t g_on_enable_start, g_on_enable_end;

FAKE_EXPORT int fake_cupti_add_kernel(const char *name, uint64_t start, uint64_t end,
                                      uint32_t stream, uint32_t correlation);

FAKE_EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
    FAKE_ENTER(cuptiActivityEnable, CUptiResult);
    pthread_mutex_lock(&g_lock);
    int fail = g_enable_fail_nth > 0 && --g_enable_fail_nth == 0;
    pthread_mutex_unlock(&g_lock);
    if (fail) return (CUptiResult)g_enable_fail_result;
    CUptiResult r = set_kind(kind, 1);
    if (r == CUPTI_SUCCESS && kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
        g_on_enable_name[0]) {
        /* another thread's kernel, recorded the moment the kind is on: CUPTI writes it into a
         * buffer it requests and keeps until it is full or flushed */
        fake_cupti_add_kernel(g_on_enable_name, g_on_enable_start, g_on_enable_end, 7, 0);
        g_on_enable_name[0] = '\0';
        deliver(0);
    }
    return r;
}

/* The nth cuptiActivityEnable from now returns result (once). */
FAKE_EXPORT void fake_cupti_enable_fails_at(int nth, int result) {
    pthread_mutex_lock(&g_lock);
    g_enable_fail_nth = nth;
    g_enable_fail_result = result;
    pthread_mutex_unlock(&g_lock);
}

/* At the next enabling of the kernel kind, a kernel `name` (start, end) is recorded into the
 * buffer CUPTI holds, not delivered (a launch on another thread as collection begins). */
FAKE_EXPORT void fake_cupti_kernel_on_enable(const char *name, uint64_t start, uint64_t end) {
    g_on_enable_name[0] = '\0';
    if (name) strncat(g_on_enable_name, name, sizeof g_on_enable_name - 1);
    g_on_enable_start = start;
    g_on_enable_end = end;
}

FAKE_EXPORT CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
    FAKE_ENTER(cuptiActivityDisable, CUptiResult);
    return set_kind(kind, 0);
}

static CUptiResult set_api(uint8_t *bits, CUpti_CallbackId cbid, uint8_t enable) {
    if (cbid == 0 || cbid >= FAKE_API_BITS) return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&g_lock);
    bit_set(bits, cbid, enable != 0);
    pthread_mutex_unlock(&g_lock);
    return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult cuptiActivityEnableRuntimeApi(CUpti_CallbackId cbid, uint8_t enable) {
    FAKE_ENTER(cuptiActivityEnableRuntimeApi, CUptiResult);
    return set_api(g_runtime_api, cbid, enable);
}

FAKE_EXPORT CUptiResult cuptiActivityEnableDriverApi(CUpti_CallbackId cbid, uint8_t enable) {
    FAKE_ENTER(cuptiActivityEnableDriverApi, CUptiResult);
    return set_api(g_driver_api, cbid, enable);
}

FAKE_EXPORT CUptiResult cuptiActivityFlushAll(uint32_t flag) {
    FAKE_ENTER(cuptiActivityFlushAll, CUptiResult);
    (void)flag; /* every fake record is complete, so a forced flush returns the same */
    if (tls_delivering) return CUPTI_ERROR_INVALID_OPERATION; /* from inside a buffer callback */
    slow_cupti();
    deliver(1);
    return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t validBufferSizeBytes,
                                                   CUpti_Activity **record) {
    FAKE_ENTER(cuptiActivityGetNextRecord, CUptiResult);
    if (!buffer || !record) return CUPTI_ERROR_INVALID_PARAMETER;
    size_t off = 0;
    if (*record) {
        size_t prev = record_size((*record)->kind);
        if (!prev) return CUPTI_ERROR_INVALID_KIND;
        off = (size_t)((uint8_t *)*record - buffer) + pad8(prev);
    }
    if (off + sizeof(CUpti_Activity) > validBufferSizeBytes) return CUPTI_ERROR_MAX_LIMIT_REACHED;
    CUpti_Activity *next = (CUpti_Activity *)(buffer + off);
    size_t size = record_size(next->kind);
    if (!size || off + size > validBufferSizeBytes) return CUPTI_ERROR_INVALID_KIND;
    *record = next;
    return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t streamId,
                                                          size_t *dropped) {
    FAKE_ENTER(cuptiActivityGetNumDroppedRecords, CUptiResult);
    (void)context;
    (void)streamId;
    if (!dropped) return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&g_lock);
    *dropped = (size_t)g_dropped; /* read and reset, as CUPTI does */
    g_dropped = 0;
    pthread_mutex_unlock(&g_lock);
    return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult cuptiGetTimestamp(uint64_t *timestamp) {
    FAKE_ENTER(cuptiGetTimestamp, CUptiResult);
    if (!timestamp) return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&g_lock);
    CUpti_TimestampCallbackFunc ts = g_timestamp;
    pthread_mutex_unlock(&g_lock);
    *timestamp = ts ? ts() : now_ns(CLOCK_REALTIME); /* CUPTI's default clock on Linux */
    return CUPTI_SUCCESS;
}

/* Everything activity-related back to its initial state (g_lock held); records not yet
 * delivered are lost, as with CUPTI. */
static void clear_activity_state(void) {
    g_req = NULL;
    g_comp = NULL;
    g_timestamp = NULL;
    g_kinds = 0;
    memset(g_runtime_api, 0, sizeof g_runtime_api);
    memset(g_driver_api, 0, sizeof g_driver_api);
    memset(g_ext_depth, 0, sizeof g_ext_depth);
    g_qhead = g_qlen = 0;
    memset(g_bufs, 0, sizeof g_bufs); /* the client's buffers: forgotten, not freed */
    g_per_thread = per_thread_default();
    g_thread_id_type = 0;
}

FAKE_EXPORT CUptiResult cuptiFinalize(void) {
    FAKE_ENTER(cuptiFinalize, CUptiResult);
    pthread_mutex_lock(&g_deliver_lock);
    pthread_mutex_lock(&g_lock);
    clear_activity_state();
    /* CUPTI detaches from the process: subscribers and their callbacks are gone too */
    g_subscribed = 0;
    g_domains = 0;
    g_callback = NULL;
    pthread_mutex_unlock(&g_lock);
    pthread_mutex_unlock(&g_deliver_lock);
    return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                               uint64_t id) {
    FAKE_ENTER(cuptiActivityPushExternalCorrelationId, CUptiResult);
    if ((int)kind <= 0 || kind >= FAKE_EXT_KINDS) return CUPTI_ERROR_INVALID_PARAMETER;
    CUptiResult r = CUPTI_SUCCESS;
    pthread_mutex_lock(&g_lock);
    if (g_ext_depth[kind] == FAKE_EXT_DEPTH) r = CUPTI_ERROR_MAX_LIMIT_REACHED;
    else g_ext_stack[kind][g_ext_depth[kind]++] = id;
    pthread_mutex_unlock(&g_lock);
    return r;
}

FAKE_EXPORT CUptiResult cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                              uint64_t *lastId) {
    FAKE_ENTER(cuptiActivityPopExternalCorrelationId, CUptiResult);
    if ((int)kind <= 0 || kind >= FAKE_EXT_KINDS) return CUPTI_ERROR_INVALID_PARAMETER;
    CUptiResult r = CUPTI_SUCCESS;
    pthread_mutex_lock(&g_lock);
    if (!g_ext_depth[kind]) {
        r = CUPTI_ERROR_QUEUE_EMPTY;
    } else {
        uint64_t id = g_ext_stack[kind][--g_ext_depth[kind]];
        if (lastId) *lastId = id;
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

FAKE_EXPORT CUptiResult cuptiGetDeviceId(CUcontext context, uint32_t *deviceId) {
    FAKE_ENTER(cuptiGetDeviceId, CUptiResult);
    (void)context;
    if (!deviceId) return CUPTI_ERROR_INVALID_PARAMETER;
    *deviceId = 0;
    return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult cuptiGetContextId(CUcontext context, uint32_t *contextId) {
    FAKE_ENTER(cuptiGetContextId, CUptiResult);
    (void)context;
    if (!contextId) return CUPTI_ERROR_INVALID_PARAMETER;
    *contextId = 1;
    return CUPTI_SUCCESS;
}

/* The NULL (legacy default) stream is stream 7 here, as in the basic script; any other handle
 * maps to its own low 32 bits, so a test can pass 13 and get stream 13. */
FAKE_EXPORT CUptiResult cuptiGetStreamIdEx(CUcontext context, CUstream stream,
                                           uint8_t perThreadStream, uint32_t *streamId) {
    FAKE_ENTER(cuptiGetStreamIdEx, CUptiResult);
    (void)context;
    (void)perThreadStream;
    if (!streamId) return CUPTI_ERROR_INVALID_PARAMETER;
    *streamId = stream ? (uint32_t)(uintptr_t)stream : 7u;
    return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult cuptiSetThreadIdType(CUpti_ActivityThreadIdType type) {
    FAKE_ENTER(cuptiSetThreadIdType, CUptiResult);
    if (type != CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT &&
        type != CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)
        return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&g_lock);
    g_thread_id_type = (int)type;
    pthread_mutex_unlock(&g_lock);
    return CUPTI_SUCCESS;
}

/* ================================================================ driver entry points */

#define DRIVER_NEEDS_INIT() \
    do { \
        if (!__atomic_load_n(&g_cu_initialized, __ATOMIC_ACQUIRE)) \
            return CUDA_ERROR_NOT_INITIALIZED; \
    } while (0)

FAKE_EXPORT CUresult cuInit(unsigned int Flags) {
    FAKE_ENTER(cuInit, CUresult);
    if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    __atomic_store_n(&g_cu_initialized, 1, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDriverGetVersion(int *driverVersion) {
    FAKE_ENTER(cuDriverGetVersion, CUresult);
    if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
    const char *env = getenv("FAKE_CUDA_DRIVER_VERSION");
    *driverVersion = env && env[0] ? atoi(env) : CPROF_CUDA_ABI_VERSION;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetCount(int *count) {
    FAKE_ENTER(cuDeviceGetCount, CUresult);
    DRIVER_NEEDS_INIT();
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = 1;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    FAKE_ENTER(cuDeviceGet, CUresult);
    DRIVER_NEEDS_INIT();
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
    *device = 0;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    FAKE_ENTER(cuDeviceGetName, CUresult);
    DRIVER_NEEDS_INIT();
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    static const char fake_name[] = "Fake GPU (cprof tests)";
    size_t n = strlen(fake_name);
    if (n >= (size_t)len) n = (size_t)len - 1;
    memcpy(name, fake_name, n);
    name[n] = '\0';
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    FAKE_ENTER(cuDeviceTotalMem_v2, CUresult);
    DRIVER_NEEDS_INIT();
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = (size_t)80 << 30;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
    FAKE_ENTER(cuDeviceGetAttribute, CUresult);
    DRIVER_NEEDS_INIT();
    if (!pi) return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    switch (attrib) { /* an H100-like device */
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = 132; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *pi = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *pi = 2048; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: *pi = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *pi = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *pi = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *pi = 49152; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *pi = 233472; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *pi = 232448; break;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: *pi = 1024; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *pi = 52428800; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *pi = 1980000; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *pi = 2619000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *pi = 5120; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *pi = 0x1b; break;
    default: *pi = 0; break;
    }
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx) {
    FAKE_ENTER(cuCtxGetCurrent, CUresult);
    DRIVER_NEEDS_INIT();
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    /* as if PyTorch had made a primary context current, unless a test said none is */
    *pctx = cur_ctx() < 0 ? NULL : &g_ctxs[tls_ctx];
    return CUDA_SUCCESS;
}

static int ctx_index(CUcontext c) {
    for (int i = 0; i < FAKE_CTXS; i++)
        if (c == &g_ctxs[i]) return i;
    return -1;
}

FAKE_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
    FAKE_ENTER(cuCtxPushCurrent_v2, CUresult);
    DRIVER_NEEDS_INIT();
    int i = ctx_index(ctx);
    if (i < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (tls_ctx_depth == 8) return CUDA_ERROR_INVALID_VALUE;
    tls_ctx_stack[tls_ctx_depth++] = cur_ctx();
    tls_ctx = i;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx) {
    FAKE_ENTER(cuCtxPopCurrent_v2, CUresult);
    DRIVER_NEEDS_INIT();
    if (cur_ctx() < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (pctx) *pctx = &g_ctxs[tls_ctx];
    tls_ctx = tls_ctx_depth ? tls_ctx_stack[--tls_ctx_depth] : -1;
    return CUDA_SUCCESS;
}

/* Makes context i (0 .. FAKE_CTXS-1) current on the calling thread (cudaSetDevice(i)); -1:
 * none (a thread that has made no CUDA call yet). */
FAKE_EXPORT int fake_cuda_set_current(int i) {
    if (i < -1 || i >= FAKE_CTXS) return -1;
    tls_ctx = i;
    return 0;
}

/* cuCtxPushCurrent calls not popped yet on this thread (a test checks they are balanced). */
FAKE_EXPORT int fake_cuda_ctx_depth(void) { return tls_ctx_depth; }

/* Says that stream handle `stream` belongs to context i (a stream of device i). */
FAKE_EXPORT int fake_cuda_stream_ctx(uint64_t stream, int i) {
    if (i < 0 || i >= FAKE_CTXS || !stream) return -1;
    pthread_mutex_lock(&g_lock);
    int k = 0;
    while (k < g_nstream_ctx && g_stream_ctx[k].stream != (uintptr_t)stream) k++;
    if (k == g_nstream_ctx) {
        if (k == 32) {
            pthread_mutex_unlock(&g_lock);
            return -1;
        }
        g_nstream_ctx++;
    }
    g_stream_ctx[k].stream = (uintptr_t)stream;
    g_stream_ctx[k].ctx = i;
    pthread_mutex_unlock(&g_lock);
    return 0;
}

static int stream_ctx(CUstream s) {
    /* the special handles (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD): the current context's */
    if ((uintptr_t)s <= 2) return cur_ctx();
    int ctx = 0;
    pthread_mutex_lock(&g_lock);
    for (int k = 0; k < g_nstream_ctx; k++)
        if (g_stream_ctx[k].stream == (uintptr_t)s) ctx = g_stream_ctx[k].ctx;
    pthread_mutex_unlock(&g_lock);
    return ctx;
}

/* Device 0's primary context is context 0: active (PyTorch made it so) unless a test said
 * otherwise with fake_cuda_set_primary_active(0); retains are counted. */
static int g_primary_inactive;
static uint64_t g_primary_retains;

FAKE_EXPORT void fake_cuda_set_primary_active(int on) {
    __atomic_store_n(&g_primary_inactive, !on, __ATOMIC_RELEASE);
}

FAKE_EXPORT uint64_t fake_cuda_primary_retains(void) {
    return __atomic_load_n(&g_primary_retains, __ATOMIC_RELAXED);
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
    FAKE_ENTER(cuDevicePrimaryCtxGetState, CUresult);
    DRIVER_NEEDS_INIT();
    if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    *flags = 0;
    *active = !__atomic_load_n(&g_primary_inactive, __ATOMIC_ACQUIRE);
    return CUDA_SUCCESS;
}

/* Makes the primary context active if it was not (as the real one does: a context created). */
FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    FAKE_ENTER(cuDevicePrimaryCtxRetain, CUresult);
    DRIVER_NEEDS_INIT();
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    __atomic_store_n(&g_primary_inactive, 0, __ATOMIC_RELEASE);
    __atomic_add_fetch(&g_primary_retains, 1, __ATOMIC_RELAXED);
    *pctx = &g_ctxs[0];
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx) {
    FAKE_ENTER(cuStreamGetCtx, CUresult);
    DRIVER_NEEDS_INIT();
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    /* the special handles (NULL, legacy, per-thread) name the current context */
    int i = stream_ctx(hStream);
    if (i < 0) return CUDA_ERROR_INVALID_CONTEXT;
    *pctx = &g_ctxs[i];
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags) {
    FAKE_ENTER(cuEventCreate, CUresult);
    DRIVER_NEEDS_INIT();
    if (!phEvent) return CUDA_ERROR_INVALID_VALUE;
    if (cur_ctx() < 0) return CUDA_ERROR_INVALID_CONTEXT;
    CUevent e = calloc(1, sizeof *e);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    e->flags = Flags;
    e->ctx = tls_ctx;
    __atomic_add_fetch(&g_live_events, 1, __ATOMIC_RELAXED);
    *phEvent = e;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventDestroy_v2(CUevent hEvent) {
    FAKE_ENTER(cuEventDestroy_v2, CUresult);
    DRIVER_NEEDS_INIT();
    if (!hEvent) return CUDA_ERROR_INVALID_HANDLE;
    free(hEvent);
    __atomic_sub_fetch(&g_live_events, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

/* cuEventRecord calls per stream handle, for tests of timers on a stream passed in */
static struct {
    uintptr_t stream;
    uint64_t n;
} g_record_streams[32];

FAKE_EXPORT uint64_t fake_cuda_records_on(uint64_t stream) {
    for (int i = 0; i < 32; i++)
        if (g_record_streams[i].n && g_record_streams[i].stream == (uintptr_t)stream)
            return g_record_streams[i].n;
    return 0;
}

FAKE_EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
    FAKE_ENTER(cuEventRecord, CUresult);
    DRIVER_NEEDS_INIT();
    if (!hEvent) return CUDA_ERROR_INVALID_HANDLE;
    if ((uintptr_t)hStream <= 2 && cur_ctx() < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (hEvent->ctx != stream_ctx(hStream)) return CUDA_ERROR_INVALID_HANDLE; /* cuda.h */
    for (int i = 0; i < 32; i++)
        if (!g_record_streams[i].n || g_record_streams[i].stream == (uintptr_t)hStream) {
            g_record_streams[i].stream = (uintptr_t)hStream;
            g_record_streams[i].n++;
            break;
        }
    hEvent->t_ns = now_ns(CLOCK_MONOTONIC); /* the work before it is "done" at once */
    hEvent->recorded = 1;
    hEvent->waited = 0;
    return CUDA_SUCCESS;
}

static int events_pending(void) { return __atomic_load_n(&g_events_pending, __ATOMIC_ACQUIRE); }

FAKE_EXPORT CUresult cuEventQuery(CUevent hEvent) {
    FAKE_ENTER(cuEventQuery, CUresult);
    DRIVER_NEEDS_INIT();
    if (!hEvent) return CUDA_ERROR_INVALID_HANDLE;
    return hEvent->recorded && events_pending() ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventSynchronize(CUevent hEvent) {
    FAKE_ENTER(cuEventSynchronize, CUresult);
    DRIVER_NEEDS_INIT();
    if (!hEvent) return CUDA_ERROR_INVALID_HANDLE;
    /* FAKE_CUDA_SYNC_US: a GPU still busy, so the first wait for a recorded event takes this
     * long (tests of what other threads do meanwhile) */
    static long sync_us = -1;
    if (sync_us < 0) {
        const char *e = getenv("FAKE_CUDA_SYNC_US");
        sync_us = e ? atol(e) : 0;
    }
    if (sync_us > 0 && hEvent->recorded && !hEvent->waited) usleep((useconds_t)sync_us);
    hEvent->waited = 1;
    return CUDA_SUCCESS;
}

static CUresult elapsed(float *ms, CUevent a, CUevent b) {
    DRIVER_NEEDS_INIT();
    if (!ms) return CUDA_ERROR_INVALID_VALUE;
    if (!a || !b || !a->recorded || !b->recorded || a->ctx != b->ctx)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
    if (events_pending()) return CUDA_ERROR_NOT_READY;
    *ms = (float)((double)((int64_t)(b->t_ns - a->t_ns)) / 1e6);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
    FAKE_ENTER(cuEventElapsedTime_v2, CUresult);
    return elapsed(pMilliseconds, hStart, hEnd);
}

FAKE_EXPORT CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
    FAKE_ENTER(cuEventElapsedTime, CUresult);
    return elapsed(pMilliseconds, hStart, hEnd);
}

FAKE_EXPORT CUresult cuStreamSynchronize(CUstream hStream) {
    FAKE_ENTER(cuStreamSynchronize, CUresult);
    DRIVER_NEEDS_INIT();
    /* a special handle names the current context's stream: none current, no stream */
    if ((uintptr_t)hStream <= 2 && cur_ctx() < 0) return CUDA_ERROR_INVALID_CONTEXT;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGetErrorString(CUresult error, const char **pStr) {
    FAKE_ENTER(cuGetErrorString, CUresult);
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
    case CUDA_SUCCESS: *pStr = "no error"; break;
    case CUDA_ERROR_INVALID_VALUE: *pStr = "invalid argument"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *pStr = "out of memory"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *pStr = "initialization error"; break;
    case CUDA_ERROR_NO_DEVICE: *pStr = "no CUDA-capable device is detected"; break;
    case CUDA_ERROR_INVALID_DEVICE: *pStr = "invalid device ordinal"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *pStr = "invalid device context"; break;
    case CUDA_ERROR_INVALID_HANDLE: *pStr = "invalid resource handle"; break;
    case CUDA_ERROR_ILLEGAL_ADDRESS: *pStr = "an illegal memory access was encountered"; break;
    case CUDA_ERROR_LAUNCH_FAILED: *pStr = "unspecified launch failure"; break;
    case CUDA_ERROR_NOT_READY: *pStr = "device not ready"; break;
    case CUDA_ERROR_UNKNOWN: *pStr = "unknown error"; break;
    default: *pStr = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* ================================================================ test controls */

/* Everything back to the start, except cuInit having been called (a process initialises the
 * driver once) and events still alive. Stops the async thread first. */
FAKE_EXPORT void fake_cupti_set_async(int on);
FAKE_EXPORT void fake_cupti_reset(void) {
    fake_cupti_set_async(0);
    pthread_mutex_lock(&g_deliver_lock);
    pthread_mutex_lock(&g_lock);
    clear_activity_state();
    memset(g_calls, 0, sizeof g_calls);
    g_nerrors = 0;
    g_subscribed = 0;
    g_domains = 0;
    g_callback = NULL;
    g_subscriber_name[0] = '\0';
    g_other_holder[0] = '\0';
    g_dropped = g_discarded = g_completed_buffers = g_delivered_records = 0;
    g_zeroed_attr = 0;
    g_own_clock = 1;
    g_dirty_buffers = 0;
    g_misused_buffers = 0;
    g_zeroed_requests = 0;
    g_next_grid_id = 1;
    g_enable_fail_nth = 0;
    g_on_enable_name[0] = '\0';
    __atomic_store_n(&g_events_pending, 0, __ATOMIC_RELEASE);
    g_async_off = 0; /* the worker starts again with the next record */
    pthread_mutex_unlock(&g_lock);
    pthread_mutex_unlock(&g_deliver_lock);
}

static int add_error(const char *function_name, int result, int once, int skip) {
    int fn = fn_index(function_name);
    if (fn < 0) return -1;
    pthread_mutex_lock(&g_lock);
    int i = 0;
    while (i < g_nerrors && g_errors[i].fn != fn) i++;
    if (result == 0) { /* clears */
        if (i < g_nerrors) g_errors[i] = g_errors[--g_nerrors];
    } else if (i < g_nerrors || g_nerrors < FAKE_MAX_ERRORS) {
        if (i == g_nerrors) g_nerrors++;
        g_errors[i].fn = fn;
        g_errors[i].result = result;
        g_errors[i].once = once;
        g_errors[i].skip = skip;
    }
    pthread_mutex_unlock(&g_lock);
    return 0;
}

/* Every later call of function_name (a CUPTI or driver entry point) returns result, until reset
 * or set again with result 0. Returns 0, or -1 for a name the fake does not export. */
FAKE_EXPORT int fake_cupti_set_error(const char *function_name, int result) {
    return add_error(function_name, result, 0, 0);
}

/* Only the next call of function_name returns result. */
FAKE_EXPORT int fake_cupti_set_error_once(const char *function_name, int result) {
    return add_error(function_name, result, 1, 0);
}

/* The next `skip` calls of function_name succeed, every later one returns result (a stop's
 * second flush refused after its first went through). */
FAKE_EXPORT int fake_cupti_set_error_after(const char *function_name, int skip, int result) {
    return add_error(function_name, result, 0, skip);
}

/* Pretends another tool (name, e.g. "CUPTI for Nsight Systems") holds CUPTI: subscribing fails
 * and cuptiSubscribe_v2 reports that name. NULL or "" lets go. */
FAKE_EXPORT void fake_cupti_set_other_subscriber(const char *name) {
    pthread_mutex_lock(&g_lock);
    g_other_holder[0] = '\0';
    if (name) strncat(g_other_holder, name, sizeof g_other_holder - 1);
    pthread_mutex_unlock(&g_lock);
}

/* Deliver full buffers from a background thread as records are added (1, the default from
 * the first record on), or only on flush (0). */
FAKE_EXPORT void fake_cupti_set_async(int on) {
    pthread_mutex_lock(&g_lock);
    g_async_off = !on;
    if (on && !g_async) {
        g_worker_stop = 0;
        g_kick = 0;
        if (pthread_create(&g_worker, NULL, worker_main, NULL) == 0) g_async = 1;
        pthread_mutex_unlock(&g_lock);
        return;
    }
    if (!on && g_async) {
        g_worker_stop = 1;
        g_async = 0;
        pthread_cond_signal(&g_kick_cv);
        pthread_mutex_unlock(&g_lock);
        pthread_join(g_worker, NULL);
        return;
    }
    pthread_mutex_unlock(&g_lock);
}

/* Moves the records made so far into the client's buffers now, on this thread (as CUPTI
 * writes a record into the buffer it holds when it is made), completing only full ones. */
FAKE_EXPORT void fake_cupti_deliver(void) { deliver(0); }

/* Completes, through the client's callback, a buffer the client never handed out, holding
 * one kernel (start, end): what CUPTI does with a buffer of another client (Kineto's) it
 * still held when the client's callbacks replaced that client's. The buffer is leaked: its
 * owner (the other client) is gone, as Kineto's would be. */
FAKE_EXPORT void fake_cupti_complete_foreign(const char *name, uint64_t start, uint64_t end) {
    size_t size = 1 << 16;
    uint8_t *buf = aligned_alloc(8, size);
    if (!buf) return;
    memset(buf, 0, size);
    CUpti_ActivityKernel10 k;
    memset(&k, 0, sizeof k);
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.start = start;
    k.end = k.completed = end;
    k.queued = k.submitted = CUPTI_TIMESTAMP_UNKNOWN;
    k.contextId = 1;
    k.streamId = 7;
    k.gridX = k.gridY = k.gridZ = k.blockX = k.blockY = k.blockZ = 1;
    pthread_mutex_lock(&g_lock);
    k.name = intern_name(name);
    CUpti_BuffersCallbackCompleteFunc comp = g_comp;
    pthread_mutex_unlock(&g_lock);
    memcpy(buf, &k, sizeof k);
    if (comp) comp(NULL, 0, buf, size, pad8(sizeof k));
}

/* Sets the count cuptiActivityGetNumDroppedRecords reports next (reading resets it). */
FAKE_EXPORT void fake_cupti_set_dropped(uint64_t n) {
    pthread_mutex_lock(&g_lock);
    g_dropped = n;
    pthread_mutex_unlock(&g_lock);
}

/* cuEventQuery / cuEventElapsedTime answer CUDA_ERROR_NOT_READY while on (recorded events). */
FAKE_EXPORT void fake_cuda_set_events_pending(int on) {
    __atomic_store_n(&g_events_pending, on != 0, __ATOMIC_RELEASE);
}

/* ---- counters ---- */

/* A counter or flag of the fake, read under g_lock (tests). */
#define FAKE_LOCKED_GETTER(type, name, var) \
    FAKE_EXPORT type name(void) { \
        pthread_mutex_lock(&g_lock); \
        type v_ = (type)(var); \
        pthread_mutex_unlock(&g_lock); \
        return v_; \
    }

FAKE_LOCKED_GETTER(int, fake_cupti_subscribers, g_subscribed + (g_other_holder[0] != '\0'))

FAKE_LOCKED_GETTER(uint64_t, fake_cupti_enabled_kinds_mask, g_kinds)

/* 1 if API records for this call id would be created now. */
FAKE_EXPORT int fake_cupti_api_enabled(int is_driver, uint32_t cbid) {
    if (cbid >= FAKE_API_BITS) return 0;
    pthread_mutex_lock(&g_lock);
    int on = bit_get(is_driver ? g_driver_api : g_runtime_api, cbid);
    pthread_mutex_unlock(&g_lock);
    return on;
}

/* Calls of an entry point since the last reset; -1 for a name the fake does not export. */
/* Simulates one CUDA runtime (is_driver 0) or driver call on the calling thread: the
 * subscriber's callback runs at its entry and exit if that domain is enabled (no lock held, as
 * CUPTI calls it: it may unsubscribe or finalize). Returns how many callbacks ran. */
FAKE_EXPORT int fake_cupti_api_call(int is_driver, uint32_t cbid) {
    CUpti_CallbackDomain domain = is_driver ? CUPTI_CB_DOMAIN_DRIVER_API
                                            : CUPTI_CB_DOMAIN_RUNTIME_API;
    int ran = 0;
    for (int site = CUPTI_API_ENTER; site <= CUPTI_API_EXIT; site++) {
        pthread_mutex_lock(&g_lock);
        CUpti_CallbackFunc cb = g_subscribed && (g_domains >> domain & 1) ? g_callback : NULL;
        void *ud = g_userdata;
        pthread_mutex_unlock(&g_lock);
        if (!cb) continue;
        CUpti_CallbackData data;
        memset(&data, 0, sizeof data);
        data.callbackSite = (CUpti_ApiCallbackSite)site;
        data.functionName = is_driver ? "cuLaunchKernel" : "cudaLaunchKernel";
        cb(ud, domain, cbid, &data);
        ran++;
    }
    return ran;
}

/* Whether a subscriber is held now, and the callback domains it enabled (a bit per domain). */
FAKE_EXPORT int fake_cupti_subscribed(uint32_t *domains) {
    pthread_mutex_lock(&g_lock);
    int r = g_subscribed;
    if (domains) *domains = g_domains;
    pthread_mutex_unlock(&g_lock);
    return r;
}

FAKE_EXPORT int64_t fake_cupti_calls(const char *fn) {
    int i = fn_index(fn);
    if (i < 0) return -1;
    pthread_mutex_lock(&g_lock);
    int64_t n = (int64_t)g_calls[i];
    pthread_mutex_unlock(&g_lock);
    return n;
}

FAKE_LOCKED_GETTER(int, fake_cupti_has_timestamp_callback, g_timestamp != NULL)

FAKE_LOCKED_GETTER(int, fake_cupti_thread_id_type, g_thread_id_type)

/* Records created but not yet handed to the client. */
FAKE_EXPORT uint64_t fake_cupti_pending(void) {
    pthread_mutex_lock(&g_lock);
    uint64_t n = 0;
    for (size_t off = g_qhead; off < g_qlen;) {
        queue_hdr h;
        memcpy(&h, g_queue + off, sizeof h);
        off += sizeof h + h.size;
        n++;
    }
    pthread_mutex_unlock(&g_lock);
    return n;
}

/* Records never created because their kind or call id was not enabled. */
FAKE_LOCKED_GETTER(uint64_t, fake_cupti_discarded, g_discarded)

/* Buffers handed to the fake not zero-filled while the zeroed-buffer attribute was on. */
FAKE_LOCKED_GETTER(uint64_t, fake_cupti_dirty_buffers, g_dirty_buffers)

FAKE_LOCKED_GETTER(uint64_t, fake_cupti_zeroed_requests, g_zeroed_requests)

/* Buffers the client touched while CUPTI held them (handed out again, or written into). */
FAKE_LOCKED_GETTER(uint64_t, fake_cupti_buffers_misused, g_misused_buffers)

FAKE_LOCKED_GETTER(int, fake_cupti_zeroed_attr, g_zeroed_attr)

FAKE_LOCKED_GETTER(int, fake_cupti_per_thread_attr, g_per_thread)

FAKE_LOCKED_GETTER(uint64_t, fake_cupti_buffers_completed, g_completed_buffers)

FAKE_LOCKED_GETTER(uint64_t, fake_cupti_records_delivered, g_delivered_records)

FAKE_EXPORT uint64_t fake_cuda_live_events(void) {
    return __atomic_load_n(&g_live_events, __ATOMIC_RELAXED);
}

/* ---- records: each add_* returns 1 if CUPTI would have created the record, else 0 ---- */

FAKE_EXPORT void fake_cupti_set_own_clock(int on) {
    pthread_mutex_lock(&g_lock);
    g_own_clock = on != 0;
    pthread_mutex_unlock(&g_lock);
}

static int add(void *rec, size_t size) {
    pthread_mutex_lock(&g_lock);
    int r = emit(rec, size);
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* A kernel with every field cprof might show; graph_id 0 = not part of a graph. */
FAKE_EXPORT int fake_cupti_add_kernel_ex(const char *name, uint64_t start, uint64_t end,
                                         uint32_t device, uint32_t context, uint32_t stream,
                                         uint32_t correlation, int32_t grid_x, int32_t grid_y,
                                         int32_t grid_z, int32_t block_x, int32_t block_y,
                                         int32_t block_z, uint16_t registers,
                                         int32_t static_smem, int32_t dynamic_smem,
                                         uint32_t graph_id, uint64_t graph_node_id) {
    CUpti_ActivityKernel10 k;
    memset(&k, 0, sizeof k);
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.registersPerThread = registers;
    k.start = start;
    k.end = end;
    k.completed = end;
    k.queued = k.submitted = CUPTI_TIMESTAMP_UNKNOWN;
    k.deviceId = device;
    k.contextId = context;
    k.streamId = stream;
    k.gridX = grid_x;
    k.gridY = grid_y;
    k.gridZ = grid_z;
    k.blockX = block_x;
    k.blockY = block_y;
    k.blockZ = block_z;
    k.staticSharedMemory = static_smem;
    k.dynamicSharedMemory = dynamic_smem;
    k.correlationId = correlation;
    k.graphId = graph_id;
    k.graphNodeId = graph_node_id;
    k.channelType = CUPTI_CHANNEL_TYPE_COMPUTE;
    pthread_mutex_lock(&g_lock);
    k.name = intern_name(name);
    k.gridId = g_next_grid_id++;
    int r = emit(&k, sizeof k);
    pthread_mutex_unlock(&g_lock);
    return r;
}

FAKE_EXPORT int fake_cupti_add_kernel(const char *name, uint64_t start, uint64_t end,
                                      uint32_t stream, uint32_t correlation) {
    return fake_cupti_add_kernel_ex(name, start, end, 0, 1, stream, correlation, 128, 1, 1, 256,
                                    1, 1, 32, 0, 0, 0, 0);
}

/* A kernel launched as node graph_node_id of graph graph_id: it carries the correlation id of
 * the graph launch, and is not created while GRAPH_TRACE is enabled. */
FAKE_EXPORT int fake_cupti_add_graph_kernel(const char *name, uint64_t start, uint64_t end,
                                            uint32_t stream, uint32_t correlation,
                                            uint32_t graph_id, uint64_t graph_node_id) {
    return fake_cupti_add_kernel_ex(name, start, end, 0, 1, stream, correlation, 64, 1, 1, 128, 1,
                                    1, 32, 0, 0, graph_id, graph_node_id);
}

/* copy_kind: CUpti_ActivityMemcpyKind; src_kind / dst_kind: CUpti_ActivityMemoryKind. */
FAKE_EXPORT int fake_cupti_add_memcpy(int copy_kind, int src_kind, int dst_kind, uint64_t bytes,
                                      uint64_t start, uint64_t end, uint32_t stream,
                                      uint32_t correlation, int is_async) {
    CUpti_ActivityMemcpy6 m;
    memset(&m, 0, sizeof m);
    m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    m.copyKind = (uint8_t)copy_kind;
    m.srcKind = (uint8_t)src_kind;
    m.dstKind = (uint8_t)dst_kind;
    m.flags = is_async ? CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC : 0;
    m.bytes = bytes;
    m.start = start;
    m.end = end;
    m.deviceId = 0;
    m.contextId = 1;
    m.streamId = stream;
    m.correlationId = correlation;
    m.channelType = CUPTI_CHANNEL_TYPE_ASYNC_MEMCPY;
    m.copyCount = 1;
    return add(&m, sizeof m);
}

FAKE_EXPORT int fake_cupti_add_memcpy_p2p(uint64_t bytes, uint64_t start, uint64_t end,
                                          uint32_t src_device, uint32_t dst_device,
                                          uint32_t stream, uint32_t correlation) {
    CUpti_ActivityMemcpyPtoP4 m;
    memset(&m, 0, sizeof m);
    m.kind = CUPTI_ACTIVITY_KIND_MEMCPY2;
    m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_PTOP;
    m.srcKind = m.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    m.flags = CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC;
    m.bytes = bytes;
    m.start = start;
    m.end = end;
    m.deviceId = src_device;
    m.contextId = 1;
    m.streamId = stream;
    m.srcDeviceId = src_device;
    m.srcContextId = 1;
    m.dstDeviceId = dst_device;
    m.dstContextId = 2;
    m.correlationId = correlation;
    m.channelType = CUPTI_CHANNEL_TYPE_ASYNC_MEMCPY;
    return add(&m, sizeof m);
}

/* memory_kind: CUpti_ActivityMemoryKind of the memory set. */
FAKE_EXPORT int fake_cupti_add_memset(uint32_t value, uint64_t bytes, uint64_t start, uint64_t end,
                                      uint32_t stream, uint32_t correlation, int memory_kind) {
    CUpti_ActivityMemset4 m;
    memset(&m, 0, sizeof m);
    m.kind = CUPTI_ACTIVITY_KIND_MEMSET;
    m.value = value;
    m.bytes = bytes;
    m.start = start;
    m.end = end;
    m.deviceId = 0;
    m.contextId = 1;
    m.streamId = stream;
    m.correlationId = correlation;
    m.flags = CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC;
    m.memoryKind = (uint16_t)memory_kind;
    m.channelType = CUPTI_CHANNEL_TYPE_COMPUTE;
    return add(&m, sizeof m);
}

/* A runtime (is_driver 0) or driver API call on thread tid. */
FAKE_EXPORT int fake_cupti_add_api(int is_driver, int cbid, uint64_t start, uint64_t end,
                                   uint32_t tid, uint32_t correlation) {
    CUpti_ActivityAPI a;
    memset(&a, 0, sizeof a);
    a.kind = is_driver ? CUPTI_ACTIVITY_KIND_DRIVER : CUPTI_ACTIVITY_KIND_RUNTIME;
    a.cbid = (CUpti_CallbackId)cbid;
    a.start = start;
    a.end = end;
    a.processId = (uint32_t)getpid();
    a.threadId = tid;
    a.correlationId = correlation;
    a.returnValue = 0;
    return add(&a, sizeof a);
}

/* type: CUpti_ActivitySynchronizationType; event_id CUPTI_SYNCHRONIZATION_INVALID_VALUE if none;
 * sync_id: CUPTI's cudaEventSyncId (0: none). Context and event syncs name no stream, as in
 * CUPTI. */
FAKE_EXPORT int fake_cupti_add_sync_ex(int type, uint64_t start, uint64_t end, uint32_t stream,
                                       uint32_t correlation, uint32_t event_id, uint32_t context,
                                       uint64_t sync_id) {
    CUpti_ActivitySynchronization2 s;
    memset(&s, 0, sizeof s);
    s.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
    s.type = (CUpti_ActivitySynchronizationType)type;
    s.start = start;
    s.end = end;
    s.correlationId = correlation;
    s.contextId = context;
    s.streamId = type == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE ||
                         type == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE
                     ? CUPTI_SYNCHRONIZATION_INVALID_VALUE
                     : stream;
    s.cudaEventId = event_id;
    s.cudaEventSyncId = sync_id;
    s.returnValue = 0;
    return add(&s, sizeof s);
}

/* The record CUPTI writes for a cudaEventRecord (CUDA_EVENT kind; no timestamps). */
FAKE_EXPORT int fake_cupti_add_cuda_event(uint32_t stream, uint32_t correlation,
                                          uint32_t event_id, uint32_t context, uint32_t device,
                                          uint64_t sync_id) {
    CUpti_ActivityCudaEvent2 e;
    memset(&e, 0, sizeof e);
    e.kind = CUPTI_ACTIVITY_KIND_CUDA_EVENT;
    e.correlationId = correlation;
    e.contextId = context;
    e.streamId = stream;
    e.eventId = event_id;
    e.deviceId = device;
    e.cudaEventSyncId = sync_id;
    return add(&e, sizeof e);
}

/* fake_cupti_add_sync_ex in context 1 without a sync id. */
FAKE_EXPORT int fake_cupti_add_sync(int type, uint64_t start, uint64_t end, uint32_t stream,
                                    uint32_t correlation, uint32_t event_id) {
    return fake_cupti_add_sync_ex(type, start, end, stream, correlation, event_id, 1, 0);
}

/* The whole-graph record CUPTI writes for a graph launch while GRAPH_TRACE is enabled. */
FAKE_EXPORT int fake_cupti_add_graph_trace(uint64_t start, uint64_t end, uint32_t stream,
                                           uint32_t graph_id, uint32_t correlation) {
    CUpti_ActivityGraphTrace2 g;
    memset(&g, 0, sizeof g);
    g.kind = CUPTI_ACTIVITY_KIND_GRAPH_TRACE;
    g.correlationId = correlation;
    g.start = start;
    g.end = end;
    g.deviceId = g.endDeviceId = 0;
    g.contextId = g.endContextId = 1;
    g.graphId = graph_id;
    g.streamId = stream;
    return add(&g, sizeof g);
}

/* An NVTX range on thread tid: a START record (with name and domain) and an END record (with
 * neither), both with id. Returns the number of records created (0 or 2). */
FAKE_EXPORT int fake_cupti_add_marker(const char *name, const char *domain, uint32_t id,
                                      uint64_t start, uint64_t end, uint32_t tid) {
    CUpti_ActivityMarker2 m;
    memset(&m, 0, sizeof m);
    m.kind = CUPTI_ACTIVITY_KIND_MARKER;
    m.id = id;
    m.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
    m.objectId.pt.processId = (uint32_t)getpid();
    m.objectId.pt.threadId = tid;
    pthread_mutex_lock(&g_lock);
    m.flags = CUPTI_ACTIVITY_FLAG_MARKER_START;
    m.timestamp = start;
    m.name = intern_name(name);
    m.domain = intern_name(domain);
    int n = emit(&m, sizeof m);
    if (end) { /* end 0: a range pushed and never popped */
        m.flags = CUPTI_ACTIVITY_FLAG_MARKER_END;
        m.timestamp = end;
        m.name = NULL;
        m.domain = NULL;
        n += emit(&m, sizeof m);
    }
    pthread_mutex_unlock(&g_lock);
    return n;
}

/* overhead_kind: CUpti_ActivityOverheadKind, on thread tid. */
FAKE_EXPORT int fake_cupti_add_overhead(int overhead_kind, uint64_t start, uint64_t end,
                                        uint32_t tid) {
    CUpti_ActivityOverhead3 o;
    memset(&o, 0, sizeof o);
    o.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
    o.overheadKind = (CUpti_ActivityOverheadKind)overhead_kind;
    o.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
    o.objectId.pt.processId = (uint32_t)getpid();
    o.objectId.pt.threadId = tid;
    o.start = start;
    o.end = end;
    return add(&o, sizeof o);
}

/* A MEMORY2 record: op_type CUpti_ActivityMemoryOperationType, memory_kind
 * CUpti_ActivityMemoryKind. */
FAKE_EXPORT int fake_cupti_add_memory(int op_type, int memory_kind, uint64_t address,
                                      uint64_t bytes, uint64_t timestamp, uint32_t stream,
                                      uint32_t correlation) {
    CUpti_ActivityMemory4 m;
    memset(&m, 0, sizeof m);
    m.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
    m.memoryOperationType = (CUpti_ActivityMemoryOperationType)op_type;
    m.memoryKind = (CUpti_ActivityMemoryKind)memory_kind;
    m.correlationId = correlation;
    m.address = address;
    m.bytes = bytes;
    m.timestamp = timestamp;
    m.processId = (uint32_t)getpid();
    m.deviceId = 0;
    m.contextId = 1;
    m.streamId = stream;
    m.isAsync = stream != 0;
    return add(&m, sizeof m);
}

/* A MEMORY_POOL record: op_type CUpti_ActivityMemoryPoolOperationType, pool_type
 * CUpti_ActivityMemoryPoolType. */
FAKE_EXPORT int fake_cupti_add_mempool(int op_type, int pool_type, uint64_t address,
                                       uint64_t size, uint64_t utilized, uint64_t timestamp) {
    CUpti_ActivityMemoryPool3 m;
    memset(&m, 0, sizeof m);
    m.kind = CUPTI_ACTIVITY_KIND_MEMORY_POOL;
    m.memoryPoolOperationType = (CUpti_ActivityMemoryPoolOperationType)op_type;
    m.memoryPoolType = (CUpti_ActivityMemoryPoolType)pool_type;
    m.address = address;
    m.size = size;
    m.utilizedSize = utilized;
    m.releaseThreshold = 0;
    m.timestamp = timestamp;
    m.processId = (uint32_t)getpid();
    m.deviceId = 0;
    return add(&m, sizeof m);
}

FAKE_EXPORT int fake_cupti_add_external_correlation(int external_kind, uint64_t external_id,
                                                    uint32_t correlation) {
    CUpti_ActivityExternalCorrelation x;
    memset(&x, 0, sizeof x);
    x.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
    x.externalKind = (CUpti_ExternalCorrelationKind)external_kind;
    x.externalId = external_id;
    x.correlationId = correlation;
    return add(&x, sizeof x);
}

/* ---- the canonical scene ---- */

#define FAKE_TRITON_KERNEL "triton_poi_fused_add_0"
#define FAKE_FILL_KERNEL \
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEE" \
    "viT0_T1_"
#define FAKE_GEMM_KERNEL "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_cublas"
#define FAKE_REDUCE_KERNEL \
    "_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_14func_wrapper_tIfNS0_11sum_" \
    "functorIfffEEEEjfLi4ELi4EEEEEvT1_"
#define FAKE_SOFTMAX_KERNEL "_Z20softmax_warp_forwardIfffLi10ELb0EEvPT0_PKT_iiiPKb"

/* Queues one step of a small program, all on thread tid, times in µs after t0_ns:
 *   corr 1-4  cudaLaunchKernel @10,40,70,100 (5 µs each); kernels on streams 7,13,7,13:
 *             fill [20,30] s7, gemm [45,90] s13, reduce [75,95] s7, softmax [105,125] s13
 *   corr 5    cudaMemcpyAsync [130,150]: HtoD pageable 4 MiB [152,160] s7
 *   corr 6    cudaMemcpyAsync [170,175]: DtoH pinned 1 MiB [180,200] s13 (async)
 *   corr 7    cudaMemsetAsync [210,214]: 1 MiB device memory to 0 [216,220] s7
 *   corr 8    cudaStreamSynchronize [230,300] + STREAM_SYNCHRONIZE record [231,299] s13
 *   corr 9    cudaGraphLaunch [310,320]: graph 1 on s7, nodes 100 [325,340] and 101 [341,360]
 *             (both with corr 9), or one GRAPH_TRACE record [325,360] if that kind is enabled
 *   corr 10   cuLaunchKernel (driver) [380,384]: triton_poi_fused_add_0 [390,395] s7
 * GPU work always starts after its launch returned. Returns the number of records created. */
FAKE_EXPORT int fake_cupti_script_basic(uint64_t t0_ns, uint32_t tid) {
#define US(x) (t0_ns + (uint64_t)(x) * 1000u)
    static const struct {
        const char *name;
        uint32_t stream;
        int start, end;
    } kernels[4] = {{FAKE_FILL_KERNEL, 7, 20, 30},
                    {FAKE_GEMM_KERNEL, 13, 45, 90},
                    {FAKE_REDUCE_KERNEL, 7, 75, 95},
                    {FAKE_SOFTMAX_KERNEL, 13, 105, 125}};
    int n = 0;
    for (uint32_t i = 0; i < 4; i++) {
        int launch = 10 + 30 * (int)i;
        n += fake_cupti_add_api(0, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, US(launch),
                                US(launch + 5), tid, i + 1);
        n += fake_cupti_add_kernel_ex(kernels[i].name, US(kernels[i].start), US(kernels[i].end), 0,
                                      1, kernels[i].stream, i + 1, 128 * (int32_t)(i + 1), 1, 1,
                                      256, 1, 1, (uint16_t)(32 + 8 * i), 0, 1024 * (int32_t)i, 0,
                                      0);
    }
    n += fake_cupti_add_api(0, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, US(130), US(150),
                            tid, 5);
    n += fake_cupti_add_memcpy(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE,
                               CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 4u << 20, US(152), US(160), 7, 5,
                               0);
    n += fake_cupti_add_api(0, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, US(170), US(175),
                            tid, 6);
    n += fake_cupti_add_memcpy(CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE,
                               CUPTI_ACTIVITY_MEMORY_KIND_PINNED, 1u << 20, US(180), US(200), 13, 6,
                               1);
    n += fake_cupti_add_api(0, CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020, US(210), US(214),
                            tid, 7);
    n += fake_cupti_add_memset(0, 1u << 20, US(216), US(220), 7, 7,
                               CUPTI_ACTIVITY_MEMORY_KIND_DEVICE);
    n += fake_cupti_add_api(0, CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, US(230),
                            US(300), tid, 8);
    n += fake_cupti_add_sync(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE, US(231),
                             US(299), 13, 8, CUPTI_SYNCHRONIZATION_INVALID_VALUE);
    n += fake_cupti_add_api(0, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, US(310), US(320),
                            tid, 9);
    n += fake_cupti_add_graph_kernel(FAKE_FILL_KERNEL, US(325), US(340), 7, 9, 1, 100);
    n += fake_cupti_add_graph_kernel(FAKE_GEMM_KERNEL, US(341), US(360), 7, 9, 1, 101);
    n += fake_cupti_add_graph_trace(US(325), US(360), 7, 1, 9);
    n += fake_cupti_add_api(1, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, US(380), US(384), tid, 10);
    n += fake_cupti_add_kernel(FAKE_TRITON_KERNEL, US(390), US(395), 7, 10);
    return n;
#undef US
}
