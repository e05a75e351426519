/* GPU activity: the decoded record layout, the collector's API (cupti_collect.c) and the
 * linking of GPU work to CPU ranges (link.c). Core header: no Python. */
#ifndef CPROF_GPU_H
#define CPROF_GPU_H

#include "cprof.h"

enum cprof_gpu_kind {
    CPROF_GPU_KERNEL = 0,
    CPROF_GPU_MEMCPY = 1,
    CPROF_GPU_MEMSET = 2,
    CPROF_GPU_RUNTIME = 3,   /* a CUDA runtime call (host side) */
    CPROF_GPU_DRIVER = 4,    /* a CUDA driver call (host side) */
    CPROF_GPU_SYNC = 5,      /* CUPTI synchronization record (host side wait) */
    CPROF_GPU_OVERHEAD = 6,  /* CUPTI's own cost */
    CPROF_GPU_MEMORY = 7,    /* an allocation or release (MEMORY2 / MEMORY_POOL) */
    CPROF_GPU_MARKER = 8,    /* an NVTX range (start/end paired at decode) */
    CPROF_GPU_CUDA_EVENT = 9,/* a cudaEventRecord's record (no time): where event waits wait */
    CPROF_GPU_KIND_COUNT
};

/* One decoded record, 96 bytes. Times are on the cprof clock (CUPTI's timestamp callback is
 * cprof_clock_now_ns, or CUPTI's own clock shifted by the offset measured at start). */
/* a memcpy record's sub for peer-to-peer copies (CUPTI_ACTIVITY_MEMCPY_KIND_PTOP) */
#define CPROF_COPY_PTOP 10

typedef struct cprof_gpu_record {
    uint64_t start_ns, end_ns;  /* MEMORY: start = end = the event's time */
    uint32_t name_id;           /* kernel (demangled), API, copy kind or marker name */
    uint8_t kind;               /* enum cprof_gpu_kind */
    uint8_t sub;                /* memcpy: CUpti_ActivityMemcpyKind; sync: type; api: cprof_api_cat;
                                   memory: 1 alloc / 2 release, pool 3 created / 4
                                   destroyed / 5 trimmed; overhead: 1 CUPTI's own
                                   cost, 0 the driver's (compiler, lazy loading) */
    uint8_t src_kind, dst_kind; /* memcpy: CUpti_ActivityMemoryKind of each side */
    uint32_t correlation;
    uint32_t device, context, stream;
    uint32_t tid;               /* host records: the OS thread id (system thread id type) */
    uint32_t pid;
    uint32_t aux_id;            /* kernel: mangled name id; api: cbid; marker: domain name id */
    union {
        struct {
            int32_t grid[3], block[3];
            int32_t smem_static, smem_dynamic;
            uint16_t regs;
            uint16_t pad;
            uint32_t graph_id;
            uint64_t graph_node_id;
            uint64_t queued_ns;  /* 0 when CUPTI did not report it */
        } k;
        struct {
            uint64_t bytes;
            uint32_t graph_id, src_device, dst_device, pad;
            uint64_t graph_node_id;
        } m;
        struct {
            int64_t bytes;       /* memory: positive for alloc, negative for release; pool
                                  * (sub 3-5): the pool's size after the operation */
            uint64_t address;
            uint32_t memory_kind; /* pool: CUpti_ActivityMemoryPoolType */
            uint32_t pad;
            uint64_t utilized;    /* pool: bytes of it in use */
        } mem;
        struct {
            uint32_t ret;        /* api: return code */
        } api;
        struct {
            uint64_t sync_id;    /* CUPTI's cudaEventSyncId (both kinds; 0 / ~0: none) */
            uint32_t event_id;   /* the CUDA event (CUPTI_SYNCHRONIZATION_INVALID_VALUE: none) */
            int32_t wait_stream; /* sync on an event: the stream the event was recorded on,
                                    -1 unknown (cuda_events.c) */
            int64_t wait_corr;   /* ... and the correlation id of that record call, -1 unknown */
        } ev;                    /* sync and cuda event records */
    } u;
} cprof_gpu_record;

#define CPROF_GPU_CHUNK_RECORDS 4096u
typedef struct cprof_gpu_chunk {
    struct cprof_gpu_chunk *next;
    uint32_t count;
    uint32_t pad;
    cprof_gpu_record rec[CPROF_GPU_CHUNK_RECORDS];
} cprof_gpu_chunk;

/* A device's limits as the occupancy calculator needs them (cuDeviceGetAttribute; 0 where the
 * driver did not say). */
typedef struct cprof_device_limits {
    int cc_major, cc_minor;
    int sms;                    /* multiprocessors */
    int max_threads_per_block, max_threads_per_sm, warp_size;
    int regs_per_block, regs_per_sm;
    int smem_per_block, smem_per_block_optin, smem_per_sm, smem_reserved_per_block;
} cprof_device_limits;

typedef struct cprof_gpu_snapshot {
    cprof_gpu_chunk *chunks;
    uint64_t nrecords;
    uint64_t per_kind[CPROF_GPU_KIND_COUNT];
    uint64_t dropped_cupti;     /* records CUPTI dropped (no buffer / buffer full) */
    uint64_t dropped_incomplete;/* records without an end time (work still running at stop) */
    uint64_t dropped_outside;   /* records entirely outside the window */
    uint64_t dropped_decode;    /* records cprof could not store (out of memory) */
    uint64_t open_markers;      /* NVTX ranges pushed and never popped in the window (counted
                                   in dropped_incomplete too) */
    int flush_error;            /* CUPTI's result of the last flush at stop (0: flushed); a
                                   failed flush leaves records in CUPTI, lost to this window */
    uint64_t buffers_undecoded; /* completed buffers whose walk ended on an error before their
                                   end (records after that point lost, in unknown numbers) */
    int undecoded_error;        /* CUPTI's result that ended the last such walk */
    uint64_t drop_count_errors; /* completed buffers whose dropped-record count CUPTI refused:
                                   its drops for them are unknown, not 0 */
    int disable_error;          /* CUPTI's result when a kind would not be disabled at stop
                                   (it went on collecting between windows) */
    int unsubscribe_error;      /* CUPTI's result when cprof's subscriber would not be released
                                   (kept, and taken back by the next window) */
    uint64_t toggled_off;       /* records left out on request: launched while CUDA collection
                                   was toggled off (gpu_toggle.c) */
    uint64_t foreign_buffers;   /* completed buffers cprof never handed out (another client's
                                   CUPTI still held, e.g. Kineto's): decoded as cprof's */
    uint64_t buffers_unkept;    /* completed buffers with no room left in the completed list
                                   (foreign ones took it): their records lost, uncounted */
    uint64_t buffers_refused;   /* CUPTI's requests for a buffer refused (pool full): records
                                   were lost from then on, in numbers CUPTI may not report */
    uint64_t pool_cap_bytes;    /* the pool's cap in this window */
    uint64_t overhead_ns;       /* sum of the overhead records of CUPTI's own cost */
    uint64_t buffers;           /* CUPTI buffers used */
    int cupti_shared;           /* collected without the subscriber (another client held it) */
    char cupti_holder[64];      /* the holder CUPTI named then ("" if it named none) */
    const char *api_mode;       /* how API records were enabled: "kinds+filter" (default),
                                   "kinds", "ids" or "none" (diagnostic modes) */
    uint64_t api_delivered;     /* runtime + driver records CUPTI delivered (before filtering) */
    uint32_t api_ids_off;       /* call ids switched off after enabling the kinds */
    uint32_t enable_us;         /* time spent enabling kinds and ids at start */
    int buffers_prezeroed;      /* cprof zeroed the buffers (at start), not CUPTI mid-window */
    uint32_t prezero_us;        /* time spent zeroing the last window's buffers at start */
    uint64_t event_waits_resolved;   /* event syncs / stream waits paired with their record */
    uint64_t event_waits_unresolved; /* ... left without one (wait_on_stream -1) */
    int cuda_events;            /* CUDA_EVENT records were enabled in this window */
    char *device_props_json;    /* deviceProperties array (malloc'd), or NULL */
    cprof_device_limits *devices; /* each device's limits by ordinal (malloc'd), or NULL */
    int ndevices;               /* entries in devices */
} cprof_gpu_snapshot;

/* Collector configuration for one window. */
typedef struct cprof_gpu_config {
    int memory;                 /* MEMORY2 + MEMORY_POOL */
    int nvtx;                   /* MARKER */
    uint64_t buffer_bytes;      /* size of one CUPTI buffer (default 8 MiB) */
    uint64_t pool_cap_bytes;    /* most memory for CUPTI buffers (default 128 MiB) */
    int share;                  /* another client holds the subscriber but is idle (Kineto after
                                   its session): collect through the activity API alone */
} cprof_gpu_config;

/* Error codes specific to GPU collection (below the core's). */
enum {
    CPROF_E_CUPTI_BUSY = -20,       /* another CUPTI client (profiler) holds the subscriber */
    CPROF_E_CUPTI_PRIVILEGES = -21, /* CUPTI_ERROR_INSUFFICIENT_PRIVILEGES */
    CPROF_E_CUPTI = -22,            /* any other CUPTI error: cprof_cupti_last_error() */
    CPROF_E_NO_DEVICE = -23         /* no driver / no GPU / driver too old */
};

/* Opens GPU collection for a window: loads CUPTI, subscribes (to detect another CUPTI client;
 * with cfg->share a busy subscriber is tolerated), registers the timestamp and buffer callbacks
 * (every window: Kineto takes them over in its sessions) and enables the kinds cprof records.
 * On any failure everything done so far is undone.
 * Returns 0 or a CPROF_E_* code; cprof_cupti_last_error() holds the message. Caller: one
 * thread at a time (the binding, GIL held). */
int cprof_cupti_start(const cprof_gpu_config *cfg, uint64_t window_start_ns);
/* 1 while collecting. */
int cprof_cupti_active(void);
/* Flushes, disables every kind, unsubscribes, and decodes what was collected into *out
 * (records outside [window_start_ns, stop_ns] are dropped and counted, and so are API calls and
 * waits that begin after host_stop_ns: the caller's own synchronize before stopping). Call with the GIL
 * released: it waits for CUPTI and decodes. */
int cprof_cupti_stop(uint64_t stop_ns, uint64_t host_stop_ns, cprof_gpu_snapshot **out);
void cprof_gpu_snapshot_free(cprof_gpu_snapshot *snap);
/* The last collector error message ("" if none). Per process; read it right after a failure. */
const char *cprof_cupti_last_error(void);
/* CPROF_CUPTI_TEARDOWN=1 (cupti_collect.c): the teardown state (0 idle, 1 pending until the
 * next CUDA API exit, 2 finalizing), detaches done so far, cuptiFinalize's last result. */
void cprof_cupti_teardown_info(int *state, uint64_t *finalized, int *last_result);
/* deviceProperties JSON for every visible device (malloc'd), or NULL when the driver is
 * unavailable. Calls cuInit. */
char *cprof_cuda_device_props_json(void);
/* The limits of every visible device by ordinal (*out malloc'd; fields 0 where unknown): the
 * number of devices, 0 (and *out NULL) when the driver is unavailable. Calls cuInit. */
int cprof_cuda_device_limits(cprof_device_limits **out);
/* cuInit's result (0: success, -1: no driver library) and, on success, the device count; on
 * failure *what is the driver's description of the error (static) or NULL. Any thread. */
int cprof_cuda_init_status(int *count, const char **what);

/* ---- occupancy.c: a kernel's estimated achieved occupancy ---- */
/* The blocks of a kernel (registers per thread, static and dynamic shared memory per block,
 * threads per block) that fit on one SM of device d at once (CUDA's occupancy calculator);
 * -1 for an architecture it does not know or limits it cannot use. */
int cprof_occupancy_blocks(const cprof_device_limits *d, int regs, int smem_static,
                           int smem_dynamic, int block_threads);
/* Kineto's "est. achieved occupancy %": min(those blocks, the grid's blocks per SM) times the
 * block's threads over the SM's thread slots, as an integer percentage; -1 when unknown. */
int cprof_occupancy_percent(const cprof_device_limits *d, int regs, int smem_static,
                            int smem_dynamic, const int32_t block[3], const int32_t grid[3]);

/* ---- cuda_events.c: which event record each event wait waits on ---- */
/* Fills u.ev.wait_stream / wait_corr of every Event Sync and Stream Wait Event record from the
 * CUDA event records (the latest record of the same event, in the same context, before the
 * wait; CUPTI's cudaEventSyncId decides where it pairs them). Counts the waits it resolved
 * and those it could not (the event recorded before the window, or the kind unavailable) in
 * snap->event_waits_resolved / _unresolved. Pure C, at stop. */
int cprof_gpu_resolve_event_waits(cprof_gpu_snapshot *snap);

/* ---- gpu_toggle.c: toggle_collection_dynamic's CUDA side ---- */
/* Takes out of snap the records whose work was asked for while CUDA collection was toggled off:
 * iv holds n [off, on) intervals on the cprof clock as 2n values (sorted, not overlapping; on =
 * UINT64_MAX while still off). A record's time is the start of the runtime / driver call with
 * its correlation id, else its own start; memory records are kept (a running total). Counts
 * them in snap->toggled_off; keeps the order.
 * CPROF_E_ARG for intervals out of order. Pure C, at stop. */
int cprof_gpu_drop_toggled_off(cprof_gpu_snapshot *snap, const uint64_t *iv, size_t n);

/* ---- link.c: GPU work -> CPU ranges ---- */
/* The result of linking: per GPU record index (in chunk order), the External id of the innermost
 * cprof range open on the launching thread at launch time (0 = none), and per correlation
 * id the launching API record's index (for ac2g flows). */
typedef struct cprof_links {
    uint64_t *external_id;      /* one per GPU record, chunk order */
    uint64_t *launch_of;        /* one per GPU record: index+1 of its API record, 0 = none */
    size_t n;
} cprof_links;

/* Links gpu records to cpu ranges (External ids as trace_writer assigns them: 1 + the global
 * index of a range in thread, then chunk order), skipping the ranges `skip` names. Pure C, GIL
 * released. */
#define CPROF_LINK_SKIP_OPS 1u     /* with_modules: operators are no link target */
#define CPROF_LINK_SKIP_MODULES 2u /* module calls written as Python events only */
int cprof_links_build(const cprof_snapshot *cpu, const cprof_gpu_snapshot *gpu, unsigned skip,
                      cprof_links *out);
void cprof_links_free(cprof_links *l);

#endif /* CPROF_GPU_H */
