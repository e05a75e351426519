/* Decoding CUPTI activity records (kernels, copies, sets, API calls, syncs, overhead, memory,
 * NVTX markers) into cprof_gpu_records after a window has stopped: window bounds, clock
 * conversion, demangled kernel names, drop counting. Runs with the GIL released, on the
 * thread that stopped the window; makes no CUPTI call. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cprof.h"
#include "cupti_cbids.h"
#include "cupti_decode.h"

static cprof_gpu_record *new_record(cprof_cupti_decoder *d) {
    if (!d->tail || d->tail->count == CPROF_GPU_CHUNK_RECORDS) {
        cprof_gpu_chunk *c = malloc(sizeof *c);
        if (!c) return NULL;
        c->next = NULL;
        c->count = 0;
        if (d->tail) d->tail->next = c;
        else d->snap->chunks = c;
        d->tail = c;
    }
    cprof_gpu_record *r = &d->tail->rec[d->tail->count++];
    memset(r, 0, sizeof *r);
    return r;
}

static uint64_t to_cprof(const cprof_cupti_decoder *d, uint64_t t) {
    return !t ? t : (uint64_t)((int64_t)t - d->clock_offset);
}

static uint32_t intern(const char *s) {
    uint32_t id = CPROF_NAME_INVALID;
    if (s && cprof_names_intern(s, strlen(s), &id) != CPROF_OK) /* full: the marker, as ranges */
        cprof_names_intern(CPROF_NAME_FULL_MARKER, sizeof CPROF_NAME_FULL_MARKER - 1, &id);
    return id;
}

/* Kernel names arrive mangled; traces show them demangled (as Kineto does) with the mangled
 * one kept in args. Each distinct name is demangled once per decode. */
static void kernel_names(cprof_cupti_decoder *d, const char *mangled, uint32_t *name, uint32_t *aux) {
    uint32_t mid = intern(mangled ? mangled : "<unnamed kernel>");
    *name = *aux = mid;
    if (!mangled || mangled[0] != '_' || mangled[1] != 'Z' || !d->demangle) return;
    if (mid >= d->demangled_cap) {
        uint32_t ncap = d->demangled_cap ? d->demangled_cap : 1024;
        while (ncap <= mid) ncap *= 2;
        uint32_t *n = realloc(d->demangled_of, ncap * sizeof *n);
        if (!n) return;
        memset(n + d->demangled_cap, 0, (ncap - d->demangled_cap) * sizeof *n);
        d->demangled_of = n;
        d->demangled_cap = ncap;
    }
    if (!d->demangled_of[mid]) {
        int status = 0;
        char *dem = d->demangle(mangled, NULL, NULL, &status);
        d->demangled_of[mid] = (status == 0 && dem ? intern(dem) : mid) + 1;
        free(dem);
    }
    *name = d->demangled_of[mid] - 1;
}

static const char *const copy_kind_names[] = {"Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                              "AtoD",    "DtoA", "DtoD", "HtoH", "PtoP"};
static const char *const mem_kind_names[] = {"Unknown", "Pageable", "Pinned", "Device", "Array",
                                             "Managed", "Device Static", "Managed Static"};

static const char *copy_kind_name(unsigned k) { return k < 11 ? copy_kind_names[k] : "Unknown"; }
static const char *mem_kind_name(unsigned k) { return k < 8 ? mem_kind_names[k] : "Unknown"; }

/* Nothing launched in the window starts before it: a record starting more than this before
 * the window's start is another window's or a bad timestamp (one of them stretched a trace's
 * timeline to 5 hours), dropped and counted as Kineto drops what starts before its capture;
 * within it, clock conversion error is tolerated. */
#define EARLY_START_NS 1000000ull

static int outside(cprof_cupti_decoder *d, uint64_t start, uint64_t end) {
    return end < d->window_start_ns || start > d->stop_ns ||
           start + EARLY_START_NS < d->window_start_ns;
}

/* The checks every timed record goes through: an end time, inside the window, room to store
 * it. Returns the record to fill (times set) or NULL after counting why not. */
static cprof_gpu_record *timed_record(cprof_cupti_decoder *d, uint64_t raw_start, uint64_t raw_end,
                                      int need_end) {
    cprof_gpu_snapshot *s = d->snap;
    uint64_t st = to_cprof(d, raw_start), en = to_cprof(d, raw_end);
    /* a zero start or end: CUPTI could not collect the timestamp */
    if ((need_end && (!raw_end || !raw_start)) || en < st) {
        s->dropped_incomplete++;
        return NULL;
    }
    if (outside(d, st, en)) {
        s->dropped_outside++;
        return NULL;
    }
    cprof_gpu_record *r = new_record(d);
    if (!r) {
        s->dropped_decode++;
        return NULL;
    }
    r->start_ns = st;
    r->end_ns = en;
    return r;
}

/* The fields MEMCPY and MEMCPY2 (peer) records share, by name. */
_Static_assert(CPROF_COPY_PTOP == CUPTI_ACTIVITY_MEMCPY_KIND_PTOP, "gpu.h's PtoP kind");

#define FILL_COPY(r, m, kind_)                                                             \
    do {                                                                                   \
        (r)->kind = CPROF_GPU_MEMCPY;                                                      \
        (r)->sub = (kind_);                                                                \
        (r)->src_kind = (m)->srcKind;                                                      \
        (r)->dst_kind = (m)->dstKind;                                                      \
        (r)->correlation = (m)->correlationId;                                             \
        (r)->device = (m)->deviceId;                                                       \
        (r)->context = (m)->contextId;                                                     \
        (r)->stream = (m)->streamId;                                                       \
        (r)->u.m.bytes = (m)->bytes;                                                       \
        (r)->u.m.graph_id = (m)->graphId;                                                  \
        (r)->u.m.graph_node_id = (m)->graphNodeId;                                         \
    } while (0)

void cprof_cupti_decode_one(cprof_cupti_decoder *d, const CUpti_Activity *a) {
    cprof_gpu_snapshot *s = d->snap;
    char name[160];
    cprof_gpu_record *r;
    switch (a->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const cprof_cupti_kernel_t *k = (const void *)a;
        if (!(r = timed_record(d, k->start, k->end, 1))) return;
        r->kind = CPROF_GPU_KERNEL;
        kernel_names(d, k->name, &r->name_id, &r->aux_id);
        r->correlation = k->correlationId;
        r->device = k->deviceId;
        r->context = k->contextId;
        r->stream = k->streamId;
        r->u.k.grid[0] = k->gridX, r->u.k.grid[1] = k->gridY, r->u.k.grid[2] = k->gridZ;
        r->u.k.block[0] = k->blockX, r->u.k.block[1] = k->blockY, r->u.k.block[2] = k->blockZ;
        r->u.k.smem_static = k->staticSharedMemory;
        r->u.k.smem_dynamic = k->dynamicSharedMemory;
        r->u.k.regs = k->registersPerThread;
        r->u.k.graph_id = k->graphId;
        r->u.k.graph_node_id = k->graphNodeId;
        r->u.k.queued_ns = k->queued && k->queued != (uint64_t)CUPTI_TIMESTAMP_UNKNOWN
                               ? to_cprof(d, k->queued) : 0;
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const cprof_cupti_memcpy_t *m = (const void *)a;
        if (!(r = timed_record(d, m->start, m->end, 1))) return;
        snprintf(name, sizeof name, "Memcpy %s (%s -> %s)", copy_kind_name(m->copyKind),
                 mem_kind_name(m->srcKind), mem_kind_name(m->dstKind));
        FILL_COPY(r, m, m->copyKind);
        r->name_id = intern(name);
        r->u.m.src_device = r->u.m.dst_device = m->deviceId;
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY2: {
        const cprof_cupti_memcpy_p2p_t *m = (const void *)a;
        if (!(r = timed_record(d, m->start, m->end, 1))) return;
        snprintf(name, sizeof name, "Memcpy PtoP (%s -> %s)", mem_kind_name(m->srcKind),
                 mem_kind_name(m->dstKind));
        FILL_COPY(r, m, CPROF_COPY_PTOP);
        r->name_id = intern(name);
        r->u.m.src_device = m->srcDeviceId;
        r->u.m.dst_device = m->dstDeviceId;
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const cprof_cupti_memset_t *m = (const void *)a;
        if (!(r = timed_record(d, m->start, m->end, 1))) return;
        snprintf(name, sizeof name, "Memset (%s)", mem_kind_name(m->memoryKind));
        r->kind = CPROF_GPU_MEMSET;
        r->dst_kind = (uint8_t)m->memoryKind;
        r->name_id = intern(name);
        r->correlation = m->correlationId;
        r->device = m->deviceId;
        r->context = m->contextId;
        r->stream = m->streamId;
        r->u.m.bytes = m->bytes;
        r->u.m.graph_id = m->graphId;
        r->u.m.graph_node_id = m->graphNodeId;
        break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
        const cprof_cupti_api_t *p = (const void *)a;
        int is_driver = a->kind == CUPTI_ACTIVITY_KIND_DRIVER;
        const cprof_cbid_info *info = cprof_cbid_lookup(is_driver, p->cbid);
        if (!info) return; /* an id cprof does not record (switched off too late, newer id) */
        if (to_cprof(d, p->start) > d->host_stop_ns) { s->dropped_outside++; return; }
        if (!(r = timed_record(d, p->start, p->end, 0))) return;
        r->kind = is_driver ? CPROF_GPU_DRIVER : CPROF_GPU_RUNTIME;
        r->sub = info->cat;
        r->name_id = intern(info->name);
        r->aux_id = p->cbid;
        r->correlation = p->correlationId;
        r->tid = p->threadId;
        r->pid = p->processId;
        r->u.api.ret = p->returnValue;
        break;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
        static const char *const sync_names[] = {"Unknown Sync", "Event Sync", "Stream Wait Event",
                                                 "Stream Sync", "Context Sync"};
        const cprof_cupti_sync_t *y = (const void *)a;
        if (to_cprof(d, y->start) > d->host_stop_ns) { s->dropped_outside++; return; }
        if (!(r = timed_record(d, y->start, y->end, 1))) return;
        r->kind = CPROF_GPU_SYNC;
        r->sub = (uint8_t)(y->type < 5 ? y->type : 0);
        r->name_id = intern(sync_names[r->sub]);
        r->correlation = y->correlationId;
        r->context = y->contextId;
        r->stream = y->streamId;
        r->u.ev.event_id = y->cudaEventId;
        r->u.ev.sync_id = y->cudaEventSyncId;
        break;
    }
    case CUPTI_ACTIVITY_KIND_CUDA_EVENT: {
        /* a cudaEventRecord: no time, kept whatever the window (only event waits read it) */
        const cprof_cupti_cuda_event_t *e = (const void *)a;
        if (!(r = new_record(d))) { s->dropped_decode++; return; }
        r->kind = CPROF_GPU_CUDA_EVENT;
        r->correlation = e->correlationId;
        r->context = e->contextId;
        r->stream = e->streamId;
        r->device = e->deviceId;
        r->u.ev.event_id = e->eventId;
        r->u.ev.sync_id = e->cudaEventSyncId;
        break;
    }
    case CUPTI_ACTIVITY_KIND_OVERHEAD: {
        const cprof_cupti_overhead_t *o = (const void *)a;
        uint64_t st = to_cprof(d, o->start), en = to_cprof(d, o->end);
        /* CUPTI reports the driver's costs (JIT compiling, lazy loading, a full command
         * buffer) in the same kind as its own: only its own count as CUPTI's cost */
        const char *what = "CUPTI overhead";
        int cuptis_own = 1;
        switch ((unsigned)o->overheadKind) {
        case CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER:
            what = "Driver compiler", cuptis_own = 0;
            break;
        case CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH: what = "CUPTI buffer flush"; break;
        case CUPTI_ACTIVITY_OVERHEAD_CUPTI_INSTRUMENTATION: what = "CUPTI instrumentation"; break;
        case CUPTI_ACTIVITY_OVERHEAD_CUPTI_RESOURCE: what = "CUPTI resource"; break;
        case CUPTI_ACTIVITY_OVERHEAD_RUNTIME_TRIGGERED_MODULE_LOADING:
            what = "Module loading", cuptis_own = 0;
            break;
        case CUPTI_ACTIVITY_OVERHEAD_LAZY_FUNCTION_LOADING:
            what = "Lazy function loading", cuptis_own = 0;
            break;
        case CUPTI_ACTIVITY_OVERHEAD_COMMAND_BUFFER_FULL:
            what = "Command buffer full", cuptis_own = 0;
            break;
        case CUPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST: what = "CUPTI buffer request"; break;
        case CUPTI_ACTIVITY_OVERHEAD_UVM_ACTIVITY_INIT: what = "CUPTI UVM activity init"; break;
        default: break;
        }
        /* CUPTI's whole cost, in the window or not */
        if (cuptis_own && en >= st) s->overhead_ns += en - st;
        if (!(r = timed_record(d, o->start, o->end, 0))) return;
        r->sub = (uint8_t)cuptis_own;
        r->kind = CPROF_GPU_OVERHEAD;
        r->name_id = intern(what);
        r->correlation = o->correlationId;
        if (o->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ||
            o->objectKind == CUPTI_ACTIVITY_OBJECT_PROCESS) {
            r->pid = o->objectId.pt.processId;
            r->tid = o->objectId.pt.threadId;
        }
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMORY2: {
        const cprof_cupti_memory_t *m = (const void *)a;
        uint64_t t = to_cprof(d, m->timestamp);
        if (outside(d, t, t)) { s->dropped_outside++; return; }
        if (!(r = new_record(d))) { s->dropped_decode++; return; }
        int release = m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE;
        r->kind = CPROF_GPU_MEMORY;
        r->sub = release ? 2 : 1;
        r->start_ns = r->end_ns = t;
        r->name_id = intern(release ? "GPU memory release" : "GPU memory allocation");
        r->correlation = m->correlationId;
        r->device = m->deviceId;
        r->context = m->contextId;
        r->stream = m->streamId;
        r->pid = m->processId;
        r->u.mem.bytes = release ? -(int64_t)m->bytes : (int64_t)m->bytes;
        r->u.mem.address = m->address;
        r->u.mem.memory_kind = m->memoryKind;
        break;
    }
    case CUPTI_ACTIVITY_KIND_MARKER: {
        const cprof_cupti_marker_t *m = (const void *)a;
        uint64_t t = to_cprof(d, m->timestamp);
        if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_START) {
            if (d->nmarkers == d->markers_cap) {
                size_t ncap = d->markers_cap ? d->markers_cap * 2 : 64;
                struct open_marker *n = realloc(d->markers, ncap * sizeof *n);
                if (!n) { s->dropped_decode++; return; }
                d->markers = n;
                d->markers_cap = ncap;
            }
            struct open_marker *o = &d->markers[d->nmarkers++];
            o->id = m->id;
            o->name_id = intern(m->name ? m->name : "");
            o->domain_id = m->domain ? intern(m->domain) : CPROF_NAME_INVALID;
            o->pid = m->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ? m->objectId.pt.processId : 0;
            o->tid = m->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ? m->objectId.pt.threadId : 0;
            o->start = t;
        } else if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_END) {
            for (size_t i = d->nmarkers; i-- > 0;) {
                if (d->markers[i].id != m->id) continue;
                struct open_marker o = d->markers[i];
                d->markers[i] = d->markers[--d->nmarkers];
                if (outside(d, o.start, t)) { s->dropped_outside++; return; }
                if (!(r = new_record(d))) { s->dropped_decode++; return; }
                r->kind = CPROF_GPU_MARKER;
                r->start_ns = o.start;
                r->end_ns = t >= o.start ? t : o.start;
                r->name_id = o.name_id;
                r->aux_id = o.domain_id;
                r->tid = o.tid;
                r->pid = o.pid;
                s->nrecords++;
                s->per_kind[CPROF_GPU_MARKER]++;
                break;
            }
        }
        return; /* a START alone is counted once its END pairs it */
    }
    case CUPTI_ACTIVITY_KIND_MEMORY_POOL: {
        /* a stream-ordered allocator's pool (cudaMallocAsync) created, trimmed, destroyed */
        const cprof_cupti_mempool_t *m = (const void *)a;
        uint64_t t = to_cprof(d, m->timestamp);
        if (outside(d, t, t)) { s->dropped_outside++; return; }
        if (!(r = new_record(d))) { s->dropped_decode++; return; }
        int op = m->memoryPoolOperationType;
        r->kind = CPROF_GPU_MEMORY;
        r->sub = op == CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_DESTROYED ? 4
                 : op == CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_TRIMMED ? 5 : 3;
        r->start_ns = r->end_ns = t;
        r->name_id = intern(r->sub == 4   ? "GPU memory pool destroyed"
                            : r->sub == 5 ? "GPU memory pool trimmed"
                                          : "GPU memory pool created");
        r->correlation = m->correlationId;
        r->device = m->deviceId;
        r->pid = m->processId;
        r->u.mem.bytes = r->sub == 4 ? 0 : (int64_t)m->size;
        r->u.mem.address = m->address;
        r->u.mem.memory_kind = m->memoryPoolType;
        r->u.mem.utilized = r->sub == 4 ? 0 : m->utilizedSize;
        break;
    }
    default:
        return; /* kinds not enabled by cprof */
    }
    s->nrecords++;
    s->per_kind[r->kind]++;
}

void cprof_cupti_decoder_init(cprof_cupti_decoder *d) {
    d->demangle = (cxa_demangle_fn)dlsym(RTLD_DEFAULT, "__cxa_demangle");
    if (!d->demangle) {
        void *h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
        if (h) d->demangle = (cxa_demangle_fn)dlsym(h, "__cxa_demangle");
    }
}

void cprof_cupti_decoder_done(cprof_cupti_decoder *d) {
    d->snap->dropped_incomplete += d->nmarkers; /* NVTX ranges never closed in the window */
    d->snap->open_markers = d->nmarkers;
    free(d->demangled_of);
    free(d->markers);
    d->demangled_of = NULL;
    d->markers = NULL;
}
