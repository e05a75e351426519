/* Reading Chrome traces (cprof's and torch.profiler's, plain or gzip) for `cprof report` and
 * `cprof merge`: the loader/parser (trace_read.c), the analysis (trace_analyse.c, gaps in
 * trace_gaps.c) and the rank merger (trace_merge.c). Core header: no Python. Every function
 * is pure C work on data owned by the caller: any thread, the GIL released. */
#ifndef CPROF_TRACE_READ_H
#define CPROF_TRACE_READ_H

#include "cprof.h"

/* What an event is, from its "cat" (case-insensitive; Kineto's old capitalised names too). */
enum cprof_tkind {
    CPROF_TK_OTHER = 0,
    CPROF_TK_KERNEL,
    CPROF_TK_MEMCPY,
    CPROF_TK_MEMSET,
    CPROF_TK_RUNTIME,
    CPROF_TK_DRIVER,
    CPROF_TK_SYNC,
    CPROF_TK_CPU_OP,
    CPROF_TK_USER_ANNOTATION,
    CPROF_TK_PYTHON_FUNCTION,
    CPROF_TK_GPU_USER_ANNOTATION,
    CPROF_TK_FLOW, /* ac2g and other flow categories */
    CPROF_TK_COUNT
};

/* A string-valued pid/tid is stored as CPROF_TEV_STR(id of the string). */
#define CPROF_TEV_STR(id) (INT64_MIN + (int64_t)(id))
#define CPROF_TEV_IS_STR(v) ((v) < INT64_MIN + (int64_t)(1u << 31))
#define CPROF_TEV_NONE INT64_MIN /* absent numeric field (correlation, bytes, ...) */
#define CPROF_TEV_NO_OCC 0xFFu   /* absent occupancy */

/* Span of a value inside the event's raw JSON text (offset from the event's first byte). */
typedef struct cprof_tspan {
    uint32_t off;
    uint32_t len;
} cprof_tspan;

/* One trace event; 128 bytes. Times in ns relative to the trace's time base (ts is µs). */
typedef struct cprof_tev {
    int64_t ts_ns, dur_ns;      /* dur_ns: -1 when absent */
    int64_t pid, tid;           /* CPROF_TEV_NONE when absent */
    int64_t correlation;        /* args.correlation; CPROF_TEV_NONE when absent */
    int64_t external_id;        /* args["External id"] */
    int64_t bytes;              /* args.bytes; memory counters ("C" CPU / GPU memory, torch's
                                 * "[memory]"): the value in bytes (trace_memory.c) */
    int64_t flow_id;            /* "id" of a flow event (numeric only) */
    uint64_t raw_off;           /* the event's JSON text: buffer offset and length */
    uint32_t raw_len;
    uint32_t name, cat;         /* string ids (0: absent) */
    uint32_t arg_name;          /* metadata events: args.name / args.labels */
    int32_t device, stream;     /* args.device / args.stream; -1 absent; torch's "[memory]":
                                 * "Device Id" / "Device Type" */
    int32_t sort_index;         /* metadata sort_index; -1 absent */
    cprof_tspan pid_at, ts_at, id_at; /* where those values sit in the raw text (len 0: absent) */
    uint8_t ph;                 /* 'X', 'B', 'E', 'i', 'I', 's', 't', 'f', 'M', 'C', ... 0: none */
    uint8_t kind;               /* enum cprof_tkind */
    uint8_t occupancy;          /* kernels: args["est. achieved occupancy %"] (0-100, rounded);
                                 * CPROF_TEV_NO_OCC when absent or out of range */
    uint8_t skip;               /* enum cprof_tskip: why the analysis leaves the event out */
} cprof_tev;

/* A timed event the analysis cannot place or weigh: the reader keeps it (its raw text, for
 * cprof merge) with ph 0 and kind OTHER, so every figure leaves it out, and the report counts
 * it by reason ("skipped" in the trace facts, and a warning): a guess (ts 0, dur 0, name "")
 * would change a figure silently. */
enum cprof_tskip {
    CPROF_TSKIP_NONE = 0,
    CPROF_TSKIP_NO_TS,      /* a timed event ('X', 'B', 'E', 'i', 'I', 'C') without "ts" */
    CPROF_TSKIP_NO_DUR,     /* a complete event ('X') without "dur" */
    CPROF_TSKIP_NEG_DUR,    /* a complete event with a negative "dur" */
    CPROF_TSKIP_BAD_NAME,   /* a complete event whose "name" is absent or not a string */
    CPROF_TSKIP_DUPLICATE,  /* an exact repeat of an earlier range or flow (trace_dedup.c) */
    CPROF_TSKIP_COUNT
};

typedef struct cprof_trace cprof_trace;

/* Loads path (gzip or plain, detected from the bytes) and parses it. keep_text keeps the
 * decompressed text after parsing (cprof merge copies events from it). On CPROF_E_FORMAT,
 * CPROF_E_IO (errno in *errno_out) or CPROF_E_ZLIB, err (cap errcap) says what and where
 * (byte offset, line, column). Returns 0 and *out, or a negative code. */
int cprof_trace_load(const char *path, int keep_text, cprof_trace **out, char *err,
                     size_t errcap, int *errno_out);
/* Parses len bytes of JSON text (copied). Same contract as cprof_trace_load. */
CPROF_EXPORT int cprof_trace_parse(const char *text, size_t len, int keep_text,
                                   cprof_trace **out, char *err, size_t errcap);
void cprof_trace_free(cprof_trace *t);

/* Read access. */
size_t cprof_trace_nevents(const cprof_trace *t);
const cprof_tev *cprof_trace_events(const cprof_trace *t);
/* The bytes of string id (not NUL-terminated); id 0 and unknown ids give "". */
const char *cprof_trace_str(const cprof_trace *t, uint32_t id, size_t *len);
/* String id as a JSON string literal, quotes included (malloc'd, NUL-terminated; NULL when
 * out of memory), for cJSON_AddRawToObject: a C string would cut or replace an embedded NUL,
 * and the report keeps the trace's names exactly (decision 160). */
char *cprof_trace_json(const cprof_trace *t, uint32_t id);
/* Flags of a string: CPROF_TSTR_MODULE when the trace's cprof metadata lists it as a module. */
#define CPROF_TSTR_MODULE 1u
unsigned cprof_trace_str_flags(const cprof_trace *t, uint32_t id);
/* The kept text (keep_text), or NULL. */
const char *cprof_trace_text(const cprof_trace *t, size_t *len);

/* An open-addressing index from int64 keys (correlation ids) to dense slots 0..n-1, for the
 * analysis' per-correlation tables. */
typedef struct cprof_keyidx {
    int64_t *keys;  /* CPROF_TEV_NONE: empty */
    uint32_t *slot;
    size_t mask;
    uint32_t n;     /* slots handed out */
} cprof_keyidx;
/* Room for up to expected keys. 0 or CPROF_E_NOMEM. */
int cprof_keyidx_init(cprof_keyidx *m, size_t expected);
/* The slot of key, a new one when absent (*added = 1); -1 when full or key is CPROF_TEV_NONE. */
int64_t cprof_keyidx_put(cprof_keyidx *m, int64_t key, int *added);
/* The slot of key, or -1. */
int64_t cprof_keyidx_get(const cprof_keyidx *m, int64_t key);
void cprof_keyidx_free(cprof_keyidx *m);

/* `cprof merge` puts rank R's numeric pids at R * CPROF_MERGE_PID_STRIDE + pid (Linux pids stay
 * below 2^22) and prefixes its string pids with "rank R ". */
#define CPROF_MERGE_PID_STRIDE 10000000LL

/* One input of a merged trace, from its cprof.merged list. */
typedef struct cprof_merged_input {
    int64_t rank, pid_offset;
    int partial;
    int ranked; /* 0: the input had no rank of its own ("ranked": false; labelled "trace i") */
    uint32_t end_reason;  /* the input's cprof.end (string id; 0: none) */
    cprof_tspan dropped;  /* the input's raw cprof.dropped object (len 0: none) */
    int64_t first_event;  /* index in traceEvents of the input's first event (merges since
                           * decision 118); CPROF_TEV_NONE: not said */
} cprof_merged_input;

/* Top-level facts. Absent numbers are CPROF_TEV_NONE; absent spans have len 0. */
typedef struct cprof_trace_info {
    int64_t rank, world_size;
    uint32_t rank_invalid;      /* distributedInfo.rank / world_size given but no whole number */
    uint32_t world_size_invalid; /* (>= 0 / >= 1): its text (string id; 0: none); the value is
                                  * then absent */
    uint32_t dist_invalid;      /* distributedInfo given but no object (5, [1]): its text */
    int64_t base_time_ns;       /* baseTimeNanoseconds (ts values are relative to it) */
    uint32_t backend;           /* distributedInfo.backend string id */
    int partial;                /* cprof.partial: 1 true, 0 false, -1 absent */
    uint32_t end_reason;        /* cprof.end string id */
    int is_cprof;               /* a "cprof" metadata object is present */
    int is_torch;               /* Kineto's keys (schemaVersion + deviceProperties/trace_id...) */
    cprof_tspan device_props;   /* the raw deviceProperties value (offset from text start) */
    cprof_tspan meta;           /* the raw "cprof" metadata object (cprof_trace_losses) */
    const cprof_tspan *dropped_windows; /* a rank view: the cprof.dropped of each of the rank's */
    size_t ndropped_windows;            /* inputs (its windows), summed by the report */
    uint64_t text_bytes;        /* size of the decompressed JSON */
    size_t nmerged;             /* inputs listed in cprof.merged (a `cprof merge` output) */
} cprof_trace_info;
const cprof_trace_info *cprof_trace_get_info(const cprof_trace *t);
/* What a cprof trace's metadata says its window lost, as one new cJSON object of counts:
 * cprof.dropped's members, and names_refused, op_shape_errors (cprof.ops.shape_errors) and
 * allocation_events_dropped (cprof.memory.allocation_events_dropped) when nonzero. NULL when
 * the trace has no cprof metadata, it cannot be parsed, or no memory. In trace_analyse.c. */
struct cJSON *cprof_trace_losses(const cprof_trace *t);
/* The events of input k (k < info.nmerged) of a merged trace, as a trace of their own whose
 * info carries its rank, the number of distinct ranks as world size, and its partial flag,
 * end reason and dropped counts (dropped_windows): the analysis of a merged file runs per
 * input, as if the inputs had been named, so correlation ids and device numbers, which
 * repeat across ranks and windows, are never mixed, and the time between two windows of a
 * rank is no GPU idle time. Inputs are told apart by where their events lie (cprof.merged's
 * first_event). A merge written before that field shares one pid range among the inputs of
 * a rank (its windows): then the view is the rank's, with every window's flags, the same
 * for each of its inputs; take one per rank (cprof_trace_merged_view_starts). The view
 * shares t's strings and text: free it (cprof_trace_free) before t. */
int cprof_trace_rank_view(const cprof_trace *t, size_t k, cprof_trace **out);
/* 1 when input k's view is one of its own (k < info.nmerged): every input of a merge that
 * says where each input's events lie, else the first input of each rank; 0 otherwise. */
int cprof_trace_merged_view_starts(const cprof_trace *t, size_t k);

/* ---- trace_gaps.c: intervals ---- */
/* A time interval [s, e) in ns; cprof_ival_cmp orders them by start (for qsort). */
typedef struct cprof_ival {
    int64_t s, e;
} cprof_ival;
int cprof_ival_cmp(const void *a, const void *b);

/* ---- trace_dedup.c ---- */
/* Marks each range or flow event ('X', 'B', 'E', 's', 't', 'f') that repeats an earlier one
 * exactly (ph, name, ts, dur, pid, tid, ids, and the raw text when text, the buffer raw_off
 * points into, is given) as skipped: CPROF_TSKIP_DUPLICATE, ph 0, kind OTHER. The parser
 * calls it. Returns 0 or CPROF_E_NOMEM (nothing marked). */
int cprof_tevs_mark_duplicates(cprof_tev *ev, size_t n, const char *text);

/* ---- trace_implicit.c (the parser calls both, after cprof_tevs_mark_duplicates) ---- */
/* GPU ops and launch calls ('X') without args.correlation get one through Kineto's ac2g flow
 * arrows: a flow's start ('s') at a launch call's thread and ts, its end ('f') at a GPU op's
 * pid / tid (device, stream) and ts; the op takes the launch's correlation (the id of the
 * launch's first flow). Events that have a correlation are left alone. 0 or CPROF_E_NOMEM. */
int cprof_tevs_link_flows(const cprof_trace *t, cprof_tev *ev, size_t n);
/* Each 'E' ends the latest 'B' still open on its pid / tid (at one ts, in the order written):
 * the B becomes a complete range ('X', dur = E.ts - B.ts) and the E ph 0. A B left open, an E
 * with none open, and a B without a name stay 'B' / 'E': the analysis counts them unpaired.
 * A pair that repeats the range around it exactly (the same name, times, and B and E text
 * when text is given) is marked skipped, CPROF_TSKIP_DUPLICATE, both its events, where the
 * trace reads as written twice: other events were marked repeats (call it after
 * cprof_tevs_mark_duplicates), or every pair has such a twin and there are two or more.
 * 0 or CPROF_E_NOMEM. */
int cprof_tevs_pair_begin_end(cprof_tev *ev, size_t n, const char *text);

/* ---- trace_analyse.c ---- */
typedef struct cprof_report_opts {
    int top;                    /* rows kept per table (kernels, api, ranges, modules, gaps) */
    int64_t short_gap_ns;       /* idle gaps shorter than this count as "short" */
    int64_t small_copy_bytes;   /* copies below this many bytes count as "small" */
    int bins;                   /* utilisation timeline bins per device */
    const char *step_name;      /* ranges of this exact name are the steps (numbered in time
                                   order); NULL: torch's ProfilerStep#N */
} cprof_report_opts;

/* The report of one trace as JSON text (malloc'd, NUL-terminated; the caller frees it):
 * kernel / API / memory summaries, utilisation, idle breakdown and largest gaps, GPU time
 * attributed to ranges, modules and steps, compiled-region nesting. Layout: docs/usage.md
 * ("cprof report") and cprof/_cli_report.py. path is echoed into the report. */
int cprof_report_build(const cprof_trace *t, const cprof_report_opts *opts, const char *path,
                       char **json_out);

/* ---- trace_gaps.c ---- */
struct cJSON;
/* Adds "devices" (busy time per device and stream, idle time by cause: host / sync / short /
 * other, a binned busy timeline) and "gaps" (the largest idle gaps, with the CPU events
 * covering them) to root, over the window [win0, win1). */
int cprof_gaps_report(const cprof_trace *t, const cprof_report_opts *o, int64_t win0,
                      int64_t win1, struct cJSON *root);
/* A kernel, copy or set on a GPU (complete event). */
int cprof_trace_is_gpu_op(const cprof_tev *e);
/* A CPU-side wait for the GPU: a CUPTI sync record or a *Synchronize API call. */
int cprof_trace_is_sync(const cprof_trace *t, const cprof_tev *e);

/* ---- trace_memory.c ---- */
/* Adds "memory_track" to root: one row per memory series (cprof's CPU / CUPTI GPU counters,
 * torch's "[memory]" events by device) with start, min, peak, end, growth, and the growth
 * from step to step measured at the nsteps step_starts (any order). */
int cprof_memory_report(const cprof_trace *t, const int64_t *step_starts, size_t nsteps,
                        struct cJSON *root);

/* ---- trace_merge.c ---- */
/* Writes the traces of one job (already loaded with keep_text) as one trace through sink:
 * each input's processes become "rank R" process groups (pid -> R*10^7+pid, string pids
 * prefixed), timestamps moved onto the earliest time base, flow ids made unique
 * (id*n+index), metadata kept. ranks[i] places input i; ranked[i] == 0 (ranked may be NULL:
 * all ranked) says input i carries no rank of its own (a torch.profiler trace outside a
 * distributed job): its processes are labelled "trace i" instead. trace_name (or NULL): the
 * merged file's traceName. *events_out: events written. */
int cprof_trace_merge(cprof_trace *const *traces, const int64_t *ranks,
                      const unsigned char *ranked, size_t n, const char *const *paths,
                      const char *trace_name, cprof_sink *sink, uint64_t *events_out);

#endif
