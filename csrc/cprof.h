/* cprof core API: error codes, record layout and the contracts of every core unit.
 * Core files include this header and never Python.h; only the binding (module.c, py_*.c) sees Python.
 * Threading: see each unit's header comment; the event store relies on the GIL (see events.c). */
#ifndef CPROF_H
#define CPROF_H

#include <stddef.h>
#include <stdint.h>

#define CPROF_VERSION "0.1.0"

#if defined(__GNUC__)
#define CPROF_LIKELY(x) __builtin_expect(!!(x), 1)
#define CPROF_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define CPROF_INLINE static inline __attribute__((always_inline))
#define CPROF_NOINLINE __attribute__((noinline))
#define CPROF_EXPORT __attribute__((visibility("default")))
#else
#define CPROF_LIKELY(x) (x)
#define CPROF_UNLIKELY(x) (x)
#define CPROF_INLINE static inline
#define CPROF_NOINLINE
#define CPROF_EXPORT
#endif

/* ---- error codes: 0 is success, every failure is a negative CPROF_E_* ---- */
enum {
    CPROF_OK = 0,
    CPROF_E_NOMEM = -1,      /* malloc failed */
    CPROF_E_ARG = -2,        /* invalid argument */
    CPROF_E_STATE = -3,      /* call not valid in the current state (e.g. window already open) */
    CPROF_E_EMPTY = -4,      /* pop without a matching push on this thread */
    CPROF_E_DEPTH = -5,      /* range nesting deeper than CPROF_MAX_DEPTH */
    CPROF_E_IO = -6,         /* open/write/rename failed: errno is kept for the message */
    CPROF_E_ZLIB = -7,       /* zlib reported an error */
    CPROF_E_FULL = -8,       /* a bounded table is full (names) */
    CPROF_E_JSON = -9,       /* a JSON document given to the core does not parse */
    CPROF_E_EXISTS = -10,    /* could not find a free output name */
    CPROF_E_UNAVAILABLE = -11, /* a library or device is not there */
    CPROF_E_FORMAT = -12     /* an input trace is not readable JSON / Chrome trace (message says where) */
};

/* A short static description of an error code (never NULL). */
const char *cprof_strerror(int code);

/* ---- clock.c: the single time base ---- */
/* Nanoseconds on CLOCK_MONOTONIC's base: the vDSO clock, or the TSC scaled and steered to it
 * where the kernel times with the TSC (decision 69). Every record cprof makes uses it. */
uint64_t cprof_clock_now_ns(void);
/* Decides the source (CPROF_CLOCK, the kernel's clocksource) and takes the calibration
 * anchor; the binding calls it once at import. Before it, the clock is CLOCK_MONOTONIC. */
void cprof_clock_init(void);
typedef struct cprof_clock_state {
    int tsc;                     /* 1: the TSC source is in use */
    const char *why;             /* "tsc", "calibrating", or why the TSC is not used */
    double tsc_hz;               /* the current segment's rate (0 without the TSC) */
    uint64_t segments, checks;   /* segments started; comparisons with CLOCK_MONOTONIC */
    int64_t last_diff_ns;        /* TSC clock - CLOCK_MONOTONIC at the last comparison */
    int64_t max_abs_diff_ns;     /* the largest |difference| seen */
} cprof_clock_state;
int cprof_clock_info(cprof_clock_state *out);
/* Offset to add to a cprof_clock_now_ns() value to get Unix (CLOCK_REALTIME) ns, sampled
 * now with the tightest bracket of a few tries. */
int64_t cprof_clock_unix_offset_ns(void);

/* ---- names.c: interned strings, append-only, readable without locks ---- */
#define CPROF_NAME_INVALID 0u /* id 0 is reserved: the empty / unknown name */
/* The name a record gets when its own could not be interned (the table is full): interned at
 * import, so looking it up never needs room; names_refused counts the refusals. */
#define CPROF_NAME_FULL_MARKER "[cprof: name table full]"
/* Interns len bytes (any bytes, NUL allowed); returns its id (>0) in *id.
 * Thread-safe (a mutex); the same bytes always give the same id.
 * Returns 0, CPROF_E_NOMEM, or CPROF_E_FULL when the table holds CPROF_MAX_NAMES. */
int cprof_names_intern(const char *s, size_t len, uint32_t *id);
/* The bytes of a name (not NUL-terminated) and its length; unknown ids give "". Lock-free. */
const char *cprof_names_get(uint32_t id, size_t *len);
/* Number of ids handed out so far, plus one (ids are 1..count-1). */
uint32_t cprof_names_count(void);
/* How many interns were refused because the table was full (each recorded under a marker
 * name instead): windows compare it at start and stop, warn, and write the difference. */
uint64_t cprof_names_refused(void);
#define CPROF_MAX_NAMES (1u << 22)

/* ---- events.c: per-thread range buffers ---- */
enum cprof_cat {
    CPROF_CAT_USER_ANNOTATION = 0, /* cprof.range / push / pop */
    CPROF_CAT_CPU_OP = 1,
    CPROF_CAT_PYTHON_FUNCTION = 2,
    CPROF_CAT_STEP = 3,            /* ProfilerStep#N, written as user_annotation */
    CPROF_CAT_COUNT
};

enum cprof_record_flags {
    CPROF_REC_TRUNCATED = 1u << 0, /* still open when the window closed: end = window end */
    CPROF_REC_RAW_ARGS = 1u << 1,  /* reserved holds the name id of a JSON fragment of args
                                    * members ("k":v,...) that the writer pastes verbatim */
    CPROF_REC_MODULE = 1u << 2,    /* an nn.Module call (py_hooks.c): with with_stack, the
                                    * writer mirrors it as torch's "nn.Module: " python_function */
    CPROF_REC_ASYNC = 1u << 3      /* ended on another thread than the one it began on, or a
                                    * torch async RecordFunction (async_open): torch.profiler's
                                    * is_async, kept out of events()' CPU tree and self times */
};

/* One complete range. 64 bytes, fixed; records live in chunks and never move. */
typedef struct cprof_record {
    uint64_t begin_ns;
    uint64_t end_ns;       /* 0 while the range is open */
    uint32_t name_id;
    uint8_t cat;           /* enum cprof_cat */
    uint8_t flags;         /* enum cprof_record_flags */
    uint16_t depth;        /* nesting depth on its thread when pushed, 0 = outermost */
    uint32_t nargs;        /* number of valid (arg_key, arg_val) pairs, 0..2 */
    uint32_t arg_key[2];   /* interned names of small integer args */
    int64_t arg_val[2];
    uint64_t reserved;
} cprof_record;

#define CPROF_CHUNK_RECORDS 1024u
#define CPROF_MAX_DEPTH 65535u

typedef struct cprof_chunk {
    struct cprof_chunk *next;
    uint32_t count;
    uint32_t pad;
    cprof_record rec[CPROF_CHUNK_RECORDS];
} cprof_chunk;

/* A thread's data detached at window stop. */
typedef struct cprof_thread_data {
    uint64_t tid;          /* OS thread id (gettid) */
    uint64_t ident;        /* pthread_self(), what threading.get_ident() returns */
    uint64_t rf_tid;       /* torch's RecordFunction thread id (0: no op said), the key of
                            * its forward ops' fwdbwd links */
    uint32_t name_id;      /* thread name, interned (0 = unknown) */
    uint64_t nrecords;
    uint64_t dropped;      /* ranges not stored because the memory cap was reached */
    cprof_chunk *chunks;   /* oldest first */
} cprof_thread_data;

/* Everything one window collected, owned by the caller until cprof_snapshot_free. */
typedef struct cprof_snapshot {
    uint64_t window_id;
    uint64_t start_ns, stop_ns; /* cprof clock */
    /* the window's end as the program saw it, before cprof's closing CUDA sync and CUPTI
     * flush (the trace's window span and metadata end there); 0: stop_ns */
    uint64_t span_stop_ns;
    int64_t unix_offset_ns;     /* add to cprof clock to get Unix ns */
    size_t nthreads;
    cprof_thread_data *threads;
    uint64_t nrecords;
    uint64_t dropped;
    uint64_t truncated;         /* ranges still open at stop, closed at stop time */
    uint64_t toggled_off;       /* pushes not recorded while CPU collection was toggled off */
} cprof_snapshot;

/* Memory cap for one window's range chunks (all threads; chunks held by snapshots, earlier
 * windows' results, are not counted). Default 256 MiB. Only valid while no window is open. */
int cprof_events_set_cap(uint64_t cap_bytes);
uint64_t cprof_events_cap(void);

/* The chunk pool (chunk_pool.c). get: a chunk, or NULL at the cap (over_cap: past it, for
 * ProfilerStep ranges). put: a list back (held: it was a snapshot's, see hold). hold: a
 * window's list now belongs to a snapshot. bytes: 0 allocated, 1 free, 2 held. */
cprof_chunk *cprof_pool_get(int over_cap);
void cprof_pool_put(cprof_chunk *list, int held);
void cprof_pool_hold(cprof_chunk *list);
int cprof_pool_set_cap(uint64_t bytes);
uint64_t cprof_pool_bytes(int which);
void cprof_pool_lock(void); /* around fork() (events.c's atfork handlers) */
void cprof_pool_unlock(void);

/* Opens a window, recording (cpu_on) or with CPU collection toggled off. CPROF_E_STATE if one
 * is open. Caller holds the GIL. */
int cprof_events_start(int cpu_on);
/* Non-zero while a window is open (2: CPU collection toggled off). */
int cprof_events_active(void);
/* The open window's start is now: once cprof's own set-up after cprof_events_start (enabling
 * CUPTI: milliseconds) is done, so the window's span does not cover it. CPROF_E_STATE
 * without a window. Caller holds the GIL. */
int cprof_events_mark_start(void);
/* The end of a snapshot's window span: span_stop_ns where set, else stop_ns. */
CPROF_INLINE uint64_t cprof_snapshot_span_stop(const cprof_snapshot *s) {
    return s->span_stop_ns ? s->span_stop_ns : s->stop_ns;
}
/* toggle_collection_dynamic's CPU side: while off, pushes record nothing (they still balance
 * their pops; ranges already open end normally) except ProfilerStep ranges, and are counted in
 * the snapshot's toggled_off. CPROF_E_STATE without a window. Caller holds the GIL. */
int cprof_events_toggle_cpu(int on);
/* 1 while a window is open and recording CPU ranges. */
int cprof_events_cpu_on(void);
/* Closes the window and moves its data into a new snapshot (*out).
 * Ranges still open are closed at stop time and flagged TRUNCATED. Caller holds the GIL. */
int cprof_events_stop(cprof_snapshot **out);
/* Gives a snapshot's chunks back to the pool. Any thread, GIL not needed. */
void cprof_snapshot_free(cprof_snapshot *snap);
/* In a child forked from this process (run by a pthread_atfork child handler, registered at
 * the first start, before any other code runs in the child): the parent's window is forgotten,
 * never written (no window is open here), its records go back to the pool, the open ranges of
 * the forking thread stay balanced for its later pops, other threads' states are freed at the
 * next start. GPU state is not touched. */
void cprof_events_fork_child(void);

/* Range push/pop on the calling thread. Caller holds the GIL.
 * push: 0 or CPROF_E_DEPTH / CPROF_E_NOMEM; outside a window only the depth is tracked.
 * pop: 0 or CPROF_E_EMPTY (no open range on this thread; nothing changes). */
int cprof_events_push(uint32_t name_id, uint8_t cat);
int cprof_events_pop(void);
/* A push whose range is closed by its token, wherever it sits on the thread's stack by then:
 * ranges that do not nest (a ProfilerStep ends inside a record_function opened in it) close
 * themselves, not the innermost range. pop_token: CPROF_E_EMPTY when no open range has it. */
/* pop closes the innermost range opened by a plain push, passing over ranges that close by
 * token or by name (a pop() never ends a `with cprof.range` opened after its push()).
 * pop_to: closes this thread's plain ranges above depth (a region's exit unwinding what was
 * left open inside it); token and named ones stay for their owners to close. */
void cprof_events_pop_to(uint32_t depth);
/* A range closed by a key of its name and its category (`with cprof.range`, record_function,
 * bucket timers): pop_named closes the innermost open range pushed with that key and
 * category, wherever it sits, so interleaved ranges (asyncio tasks on one thread) each end
 * their own, recursion still ends the innermost, and nothing is kept in the range object (one
 * object may be entered by several threads). key: from the name object's address for ranges
 * (known without interning the name, which happens only in a window), the name id for timers.
 * name_id is recorded in a window and unused outside one (0 there). pop_named: CPROF_E_EMPTY
 * when none is open. */
int cprof_events_push_named(uint32_t name_id, uint8_t cat, uint32_t key);
int cprof_events_pop_named(uint32_t key, uint8_t cat);
/* Closes the innermost range as a point (end = begin: NVTX mark). 0 or CPROF_E_EMPTY (none
 * open, or the innermost closes by token or name). */
int cprof_events_pop_point(void);
int cprof_events_push_token(uint32_t name_id, uint8_t cat, uint64_t *token);
int cprof_events_pop_token(uint64_t token);
/* push_token for a range that does not nest (NVTX range_start); like every token range, plain
 * pops pass over it to the innermost plain range below, so it ends only by its token. */
int cprof_events_push_detached(uint32_t name_id, uint8_t cat, uint64_t *token);
/* pop_token on the thread whose pthread_self() is ident (the caller's or another's: NVTX
 * range_end may run on another thread than range_start). Caller holds the GIL. */
int cprof_events_pop_token_on(uint64_t ident, uint64_t token);
/* The Python tracer's ranges (py_tracer.c): a second stack per thread, so user push/pop and the
 * tracer never close each other's ranges; records share the thread's chunks and their depth
 * counts both stacks. Caller holds the GIL. The thread is given as a handle (the tracer keeps
 * it in its own per-thread state: one thread-local lookup per call event instead of two).
 * thread: the calling thread's handle (registered if new), valid until the thread exits; NULL:
 * no memory.
 * push_traced_on: as push. pop_traced_on: closes the tracer's innermost range; if it lasted
 * less than min_ns and is the thread's last record (always so when its children were all taken
 * back too; never when a child was kept) the record is taken back: returns 1; else 0;
 * CPROF_E_EMPTY if the tracer has no open range on this thread.
 * close_traced_all: closes every thread's open tracer ranges now (tracer stop; GIL held). */
void *cprof_events_thread(void);
int cprof_events_push_traced_on(void *thread, uint32_t name_id, uint8_t cat);
/* 1 while the thread has no record in the current window: the frames running when the tracer
 * first sees it may then be pushed (push_traced_on) as beginning now; under a record already
 * made they would begin after their own child. A tracer slot whose record a window's stop
 * closed is opened again at the thread's first record of the next window (window_enter). */
int cprof_events_thread_fresh(void *thread);
int cprof_events_pop_traced_on(void *thread, uint64_t min_ns);
void cprof_events_close_traced_all(void);
/* Torch operators (ops_itt.c): a third stack per thread, for ranges that begin and end in C++
 * on any thread with the GIL released. Each call takes the calling thread's own op lock (stop
 * takes it too while it detaches the thread), so no GIL is needed. Records share the thread's
 * chunks, so nesting with the other two stacks is exact. push_op: 0 or CPROF_E_DEPTH /
 * CPROF_E_NOMEM; outside a window only the depth is tracked. pop_op: 0 or CPROF_E_EMPTY.
 * A thread first seen here is named by its OS name until its first GIL-held record. */
int cprof_events_push_op(uint32_t name_id);
/* push_op whose record carries raw args frag_id (as cprof_events_set_raw_args; 0: none). */
int cprof_events_push_op_args(uint32_t name_id, uint32_t frag_id);
/* push_op_args of an op torch gave sequence number seq (>= 0) and forward thread fwd_tid (0 for
 * a forward op), on the thread whose RecordFunction id is rf_tid: the record's two int args. */
int cprof_events_push_op_seq(uint32_t name_id, uint32_t frag_id, int64_t seq, uint64_t fwd_tid,
                             uint64_t rf_tid);
/* the interned ids of "Sequence number" and "Fwd thread id" (0 before the first window) */
void cprof_events_seq_keys(uint32_t *seq_key, uint32_t *fwd_key);
int cprof_events_pop_op(void);
/* Ranges that begin on one thread and may end on another, with no GIL (torch's async
 * RecordFunctions: the ranges torch.distributed's process groups open around collectives,
 * "gloo:all_reduce"): a record on the opening thread's buffer (category cat) that is on none of
 * its stacks. async_open: 0 and *handle (0: nothing recorded: no window, toggled off, memory
 * cap), or CPROF_E_NOMEM. async_close (any thread): 0, or CPROF_E_EMPTY when the handle is not
 * open (a window's stop closed it at the window's end, marked truncated). */
int cprof_events_async_open(uint32_t name_id, uint8_t cat, uint64_t *handle);
int cprof_events_async_close(uint64_t handle);
/* Adds an integer arg to the innermost open range of this thread if it is recorded.
 * Returns 0, CPROF_E_EMPTY, or CPROF_E_FULL (already 2 args). */
int cprof_events_add_arg(uint32_t key_id, int64_t value);
/* Current nesting depth of this thread's user ranges (the tracer's are not counted). */
uint32_t cprof_events_depth(void);
/* Sets the name of the calling thread as it will appear in traces. */
int cprof_events_set_thread_name(uint32_t name_id);
/* Records that were stored for, and dropped by, the open window so far (all threads). */
void cprof_events_counts(uint64_t *stored, uint64_t *dropped);
/* Marks the innermost open range of this thread as carrying raw args: frag_id names interned
 * text of JSON object members (`"k":v,...`, valid JSON by the caller's construction) that the
 * writer pastes into the event's args. Caller holds the GIL. Returns 0 (also when the range
 * is not recorded) or CPROF_E_EMPTY. */
int cprof_events_set_raw_args(uint32_t frag_id);
/* ORs flags (enum cprof_record_flags) into the innermost open range of this thread. Caller holds
 * the GIL. Returns 0 (also when the range is not recorded) or CPROF_E_EMPTY. */
int cprof_events_mark(uint8_t flags);
/* hook() runs once per thread, on that thread, right after its first push / set_thread_name
 * registered it (GIL held): the binding names the thread there, so a thread that exits before
 * the window closes keeps its name. The hook may call cprof_events_set_thread_name. */
void cprof_events_set_new_thread_hook(void (*hook)(void));

/* ---- ops_itt.c: torch operators through torch's ITT hooks (the extension is the collector) ----
 * attach: makes this library (self_path) the ITT collector of the loaded torch library
 * torch_lib (libtorch_cpu.so). 0 when attached (now or before); CPROF_E_UNAVAILABLE with *why
 * (static text saying what to do) when torch has no ITT, another collector is attached, or
 * torch was loaded before INTEL_LIBITTNOTIFY64 named a collector. Any thread; idempotent.
 * Once attached, torch's emit_itt ranges become cpu_op records (cprof_events_push_op). */
int cprof_ops_itt_attach(const char *torch_lib, const char *self_path, const char **why);
int cprof_ops_itt_attached(void);
/* Whether ITT's task begin / end are operators (1: cprof turned torch's emit_itt state on for
 * its ITT capture) or not (0, the default: what reaches the collector then is the program's
 * own ITT annotations, torch.profiler.itt.range / mark, which torch.profiler records not,
 * so neither does cprof). Any thread. */
void cprof_ops_itt_set_recording(int on);
/* Distinct operator names seen so far. */
uint64_t cprof_ops_itt_names(void);
/* The name id of an operator's name through the collector's handle cache (per-thread pointer
 * cache, text checked; interned on a miss), for the RecordFunction observer (op_api.h) too.
 * CPROF_NAME_INVALID when the name table fails. Any thread, no GIL. */
uint32_t cprof_ops_name_id(const char *name);

/* ---- sink.c: buffered output to a file, plain or gzip, temp file + rename ---- */
typedef struct cprof_sink cprof_sink;
/* Opens a new temporary file in the directory of final_path (which must exist), named
 * ".<basename>.<pid>.<n>.tmp" (of a long basename its first 200 bytes, so the name fits
 * NAME_MAX) so a reader never sees a half-written file under the final name;
 * an existing final_path that is neither a regular file nor a directory (/dev/null, a FIFO) is
 * opened and written directly, and commit then moves nothing.
 * gzip_level: 0 plain, 1..9 zlib level. On failure *errno_out (if given) holds errno. */
int cprof_sink_open(cprof_sink **out, const char *final_path, int gzip_level, int *errno_out);
/* Appends bytes (compressing if gzip). CPROF_E_IO / CPROF_E_ZLIB on failure, sticky. */
int cprof_sink_write(cprof_sink *s, const void *data, size_t len);
/* Ends the stream and closes the file (once; later calls only rename). */
int cprof_sink_finish(cprof_sink *s, int *errno_out);
/* Moves the finished temp file to path. replace=0 never replaces an existing file:
 * CPROF_E_EXISTS then, and the temp file stays for another try with another path.
 * On success the sink no longer owns a temp file; free it with cprof_sink_abort. */
int cprof_sink_commit(cprof_sink *s, const char *path, int replace, int *errno_out);
/* Removes the temporary file if still there and frees the sink. */
void cprof_sink_abort(cprof_sink *s);
/* Bytes written to the file so far (compressed size when gzip). */
uint64_t cprof_sink_bytes(const cprof_sink *s);

/* ---- jsonw.c: JSON text building into a growable buffer ---- */
typedef struct cprof_buf {
    char *data;
    size_t len, cap;
    int oom;               /* set once an allocation failed; later appends are ignored */
} cprof_buf;
void cprof_buf_init(cprof_buf *b);
void cprof_buf_free(cprof_buf *b);
int cprof_buf_reserve(cprof_buf *b, size_t extra);
/* Doubles an array of elem-byte items (*cap 0: to first items); *arr and *cap change only on
 * success. 0 or CPROF_E_NOMEM. For the writer-side passes' growing lists. */
int cprof_array_grow(void **arr, size_t *cap, size_t elem, size_t first);
void cprof_buf_put(cprof_buf *b, const void *data, size_t len);
void cprof_buf_puts(cprof_buf *b, const char *s);
void cprof_buf_u64(cprof_buf *b, uint64_t v);
void cprof_buf_i64(cprof_buf *b, int64_t v);
/* A signed nanosecond count written as microseconds with exactly 3 decimals ("12.345"). */
void cprof_buf_us3(cprof_buf *b, int64_t ns);
/* A double with up to 3 decimals, finite only (non-finite writes null). */
void cprof_buf_f3(cprof_buf *b, double v);
/* One character, inline where there is room (hot builders: record_shapes' fragments). */
static inline void cprof_buf_putc(cprof_buf *b, char c) {
    if (b->len < b->cap) b->data[b->len++] = c;
    else cprof_buf_put(b, &c, 1);
}
/* v with six decimals (null when not finite). */
void cprof_buf_f6(cprof_buf *b, double v);
/* A JSON string literal with quotes: escapes ", \ and control characters, replaces invalid
 * UTF-8 (including encoded surrogates) with U+FFFD. Returns bytes replaced. */
size_t cprof_buf_json_str(cprof_buf *b, const char *s, size_t len);
/* Exposed for tests (ctypes): escapes into out (cap bytes). Returns length needed. */
CPROF_EXPORT size_t cprof_json_escape(const char *s, size_t len, char *out, size_t cap);

/* ---- trace_writer.c: the Kineto-compatible Chrome trace ---- */
/* ---- CPU memory samples (mem_sampler.c): profile_memory's counter track ---- */
/* ---- mem_events.c: profile_memory's allocation events (torch's "[memory]") ---- */
typedef struct cprof_mem_event {
    uint64_t ts_ns;          /* cprof clock */
    uint64_t addr;
    int64_t bytes;           /* > 0 allocated, < 0 released */
    int64_t total_allocated; /* the allocator's totals after it */
    int64_t total_reserved;
    uint32_t tid;            /* OS thread id */
    int8_t device_type;      /* c10::DeviceType: 0 CPU, 1 CUDA */
    int8_t device_index;     /* -1: none (CPU) */
    uint16_t pad;
} cprof_mem_event;
/* start (GIL): a new, empty array of at most max events. add: any thread, no GIL: 0,
 * CPROF_E_STATE (not started) or CPROF_E_FULL (at max: counted as dropped). stop (GIL): hands
 * over the array (free() it; NULL when empty), its length and the drops; CPROF_E_STATE when
 * not started. */
int cprof_mem_events_start(size_t max);
int cprof_mem_events_add(uint64_t addr, int64_t bytes, int64_t total_allocated,
                         int64_t total_reserved, int device_type, int device_index);
int cprof_mem_events_stop(cprof_mem_event **out, size_t *n, uint64_t *dropped);
int cprof_mem_events_active(void);

typedef struct cprof_mem_sample {
    uint64_t ts_ns;        /* cprof clock */
    uint64_t rss_bytes;    /* resident set of the process */
    uint64_t heap_bytes;   /* malloc's bytes in use (arenas + mmapped chunks); 0 if unknown */
} cprof_mem_sample;

typedef struct cprof_mem_samples {
    cprof_mem_sample *s;   /* oldest first; the caller frees it with free() */
    size_t n;
    uint64_t interval_ns;  /* the interval at the end (doubled at each halving) */
    uint32_t halvings;     /* times the array was full and halved */
    int has_heap;          /* mallinfo2 was found: heap_bytes are real */
    uint64_t peak_rss_bytes, peak_heap_bytes; /* over every sample taken */
} cprof_mem_samples;

/* Starts the sampler thread: one sample now, then one every interval_ns (>= 10 us), into an
 * array of cap (>= 16) samples. 0, CPROF_E_STATE (running), CPROF_E_ARG, CPROF_E_IO (no
 * /proc/self/statm) or CPROF_E_NOMEM. Caller holds the GIL. */
int cprof_memsamp_start(uint64_t interval_ns, size_t cap);
/* Stops it, takes a last sample and hands the samples over. 0 or CPROF_E_STATE (not running). */
int cprof_memsamp_stop(cprof_mem_samples *out);
int cprof_memsamp_running(void);
/* One sample now, from the calling thread (a step boundary, so each step's start value is
 * exact whatever the interval). 0 or CPROF_E_STATE (not running). Caller holds the GIL. */
int cprof_memsamp_sample_now(void);

typedef struct cprof_trace_meta {
    int64_t pid;
    const char *process_name;    /* e.g. "python" */
    int rank, world_size;
    const char *backend;         /* distributed backend or NULL */
    const char *dist_json;       /* more distributedInfo members `"k":v,...` (torch's pg_count,
                                  * pg_config; JSON the binding's caller made), or NULL */
    const char *trace_name;      /* written as traceName (the final path) */
    const char *cprof_json;      /* the "cprof" metadata object as JSON text (cJSON), or NULL */
    const char *device_props_json; /* JSON array for deviceProperties, or NULL for [] */
    int64_t base_time_ns;        /* Unix ns that ts values are relative to */
    const char *top_json;        /* top-level members `"k":v,...` (trace_id, the user's
                                  * add_metadata), checked by cprof_meta_members_check, or NULL */
    const cprof_mem_sample *mem;  /* the CPU memory counter track (profile_memory), or NULL */
    size_t nmem;
    int mem_has_heap;
    int link_modules;            /* with_modules: GPU work links to the innermost module or
                                  * user range, not to an operator inside it (link.c) */
    int module_ranges;           /* module calls (CPROF_REC_MODULE) written as user_annotation
                                  * ranges too, not only as their "nn.Module: " twins */
    const cprof_mem_event *mev;  /* profile_memory's allocation events ("[memory]"), or NULL */
    size_t nmev;
} cprof_trace_meta;

typedef struct cprof_write_stats {
    uint64_t events;             /* trace events written (X + metadata) */
    uint64_t bytes;              /* bytes in the file */
    size_t replaced_chars;       /* invalid UTF-8 sequences replaced in names */
} cprof_write_stats;

/* ---- fwdbwd.c: forward op -> its autograd backward node (torch's "fwdbwd" flows) ---- */
typedef struct cprof_fwdbwd {
    uint64_t fwd_tid, bwd_tid; /* OS thread ids of the two ranges */
    uint64_t fwd_ns, bwd_ns;   /* their begin times, cprof clock */
} cprof_fwdbwd;
/* Pairs each backward node (cpu_op "XxxBackward<N>") with the forward op that made it, by name
 * (see fwdbwd.c). *out is malloc'd (free()), NULL when *n is 0. 0 or CPROF_E_NOMEM. */
int cprof_fwdbwd_build(const cprof_snapshot *snap, cprof_fwdbwd **out, size_t *n);

struct cprof_gpu_snapshot; /* gpu.h */
/* Streams the snapshot as a trace into sink, with the GPU activity of the same window when gpu
 * is not NULL (linked to the ranges here). Pure C: call with the GIL released. */
int cprof_trace_write(cprof_sink *sink, const cprof_snapshot *snap,
                      const struct cprof_gpu_snapshot *gpu, const cprof_trace_meta *meta,
                      cprof_write_stats *stats);

/* ---- meta.c: the "cprof" metadata object of a trace (cJSON) ---- */
/* Builds {"version", "window": {...}, "counts": {...}, "dropped": {...}, ...} merged with the
 * members of extra_json (an object given by the caller: config, partial, ...). *out is a
 * malloc'd NUL-terminated JSON text the caller frees with free().
 * CPROF_E_JSON if extra_json is not a JSON object. */
int cprof_meta_json(const cprof_snapshot *snap, const char *extra_json, char **out);
/* CPROF_OK if members is the inside of a JSON object (`"k":v,"k2":v2`, or empty), else
 * CPROF_E_JSON (CPROF_E_NOMEM if the check itself ran out of memory). */
int cprof_meta_members_check(const char *members);

/* ---- summary.c: per-name aggregates of a snapshot ---- */
typedef struct cprof_summary_row {
    uint32_t name_id;
    uint8_t cat;
    uint64_t count;
    uint64_t total_ns;     /* sum of durations */
    uint64_t self_ns;      /* total minus the time of ranges directly nested in it */
    uint64_t min_ns, max_ns;
} cprof_summary_row;

/* Aggregates every range of snap by (name, category), sorted by total_ns descending.
 * *rows is malloc'd (caller frees), *nrows its length. Pure C: call with the GIL released. */
int cprof_summary_build(const cprof_snapshot *snap, cprof_summary_row **rows, size_t *nrows);
/* Merges each row i with into[i] != i into row into[i] (an earlier row with into[j] == j),
 * drops the merged ones and sorts again: rows whose names read the same once invalid UTF-8 is
 * replaced (py_snapshot.c decides which). Pure C. */
void cprof_summary_merge(cprof_summary_row *rows, size_t *nrows, const size_t *into);

#endif /* CPROF_H */
