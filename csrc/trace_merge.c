/* cprof merge: the rank traces of one job written as one trace. Events are copied from each
 * input's text with only their pid, ts and flow id rewritten (everything else, args included,
 * byte for byte), so the merge is as fast as the parse and loses nothing. Process names get a
 * "rank R: " prefix and processes are ordered by rank. Pure C: any thread, GIL released. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_read.h"

#define PID_STRIDE CPROF_MERGE_PID_STRIDE /* pid -> rank * PID_STRIDE + pid */
#define SORT_STRIDE 100000LL

/* a * m + b wrapping around instead of overflowing: pids, ranks, flow ids and time bases come
 * from the input files and can be any int64 (fuzzing found pid 2^63-1); signed overflow is
 * undefined behaviour, a wrapped number in a garbage trace is only a wrong number. */
static int64_t wrap_mad(int64_t a, int64_t m, int64_t b) {
    return (int64_t)((uint64_t)a * (uint64_t)m + (uint64_t)b);
}

/* ts moved onto the common time base, held within +-2^61 ns: the reader rejects times beyond
 * that (TIME_LIMIT_NS in trace_read.c), and inputs whose time bases lie over 73 years apart
 * (corrupt ones; found by fuzzing) made a merged trace that `cprof report` refused. */
#define MERGED_TIME_LIMIT_NS (INT64_C(1) << 61)
static int64_t shifted_ts(int64_t ts, int64_t shift) {
    int64_t r;
    if (__builtin_add_overflow(ts, shift, &r)) r = shift > 0 ? INT64_MAX : INT64_MIN;
    return r > MERGED_TIME_LIMIT_NS ? MERGED_TIME_LIMIT_NS
                                    : r < -MERGED_TIME_LIMIT_NS ? -MERGED_TIME_LIMIT_NS : r;
}

static int flush(cprof_sink *sink, cprof_buf *b) {
    if (b->oom) return CPROF_E_NOMEM;
    int rc = b->len ? cprof_sink_write(sink, b->data, b->len) : CPROF_OK;
    b->len = 0;
    return rc;
}

/* How input i's processes are labelled: "rank R" or, for an input without a rank of its own,
 * "trace i" (its position among the inputs). */
typedef struct label {
    const char *word;
    long long num;
} label;

static label label_of(const int64_t *ranks, const unsigned char *ranked, size_t i) {
    return (!ranked || ranked[i]) ? (label){"rank", (long long)ranks[i]}
                                  : (label){"trace", (long long)i};
}

static void put_pid(cprof_buf *b, const cprof_trace *t, int64_t pid, int64_t rank, label lb) {
    if (CPROF_TEV_IS_STR(pid)) {
        size_t n;
        const char *s = cprof_trace_str(t, (uint32_t)(pid - INT64_MIN), &n);
        char pre[48];
        int pn = snprintf(pre, sizeof pre, "%s %lld ", lb.word, lb.num);
        char *tmp = malloc((size_t)pn + n);
        if (!tmp) {
            b->oom = 1;
            return;
        }
        memcpy(tmp, pre, (size_t)pn);
        memcpy(tmp + pn, s, n);
        cprof_buf_json_str(b, tmp, (size_t)pn + n);
        free(tmp);
    } else {
        cprof_buf_i64(b, wrap_mad(rank, PID_STRIDE, pid));
    }
}

/* A metadata event naming or ordering a process, rewritten for its rank. */
static int process_meta(cprof_buf *b, const cprof_trace *t, const cprof_tev *e, int64_t rank,
                        label lb) {
    size_t n, vn = 0;
    const char *name = cprof_trace_str(t, e->name, &n);
    const char *val = cprof_trace_str(t, e->arg_name, &vn);
    int is_name = n == 12 && memcmp(name, "process_name", 12) == 0;
    int is_labels = n == 14 && memcmp(name, "process_labels", 14) == 0;
    int is_sort = n == 18 && memcmp(name, "process_sort_index", 18) == 0;
    if (!is_name && !is_labels && !is_sort) return 0;
    cprof_buf_puts(b, "{\"ph\": \"M\", \"name\": ");
    cprof_buf_json_str(b, name, n);
    cprof_buf_puts(b, ", \"ts\": 0, \"pid\": ");
    put_pid(b, t, e->pid, rank, lb);
    cprof_buf_puts(b, ", \"tid\": 0, \"args\": {");
    if (is_sort) {
        int64_t orig = e->sort_index < 0 ? 0 : e->sort_index;
        if (orig >= SORT_STRIDE) orig = SORT_STRIDE - 1;
        cprof_buf_puts(b, "\"sort_index\": ");
        cprof_buf_i64(b, wrap_mad(rank, SORT_STRIDE, orig));
    } else {
        char pre[48];
        int pn = snprintf(pre, sizeof pre, is_name ? "%s %lld: " : "%s %lld, ", lb.word, lb.num);
        char *tmp = malloc((size_t)pn + vn);
        if (!tmp) {
            b->oom = 1;
            return 1;
        }
        memcpy(tmp, pre, (size_t)pn);
        memcpy(tmp + pn, val, vn);
        cprof_buf_puts(b, is_name ? "\"name\": " : "\"labels\": ");
        cprof_buf_json_str(b, tmp, vn ? (size_t)pn + vn : (size_t)pn - 2); /* no value: "rank R" */
        free(tmp);
    }
    cprof_buf_puts(b, "}}");
    return 1;
}

/* The numeric pids of one input and whether a process_name named each: a process the input
 * left unnamed still gets its "rank R: process P" label, or viewers would show it unlabelled
 * among the ranks. Bounded: pids past the cap stay as the input had them. */
#define NAMED_CAP 256

typedef struct pid_seen {
    int64_t pid[NAMED_CAP];
    unsigned char named[NAMED_CAP];
    size_t n;
} pid_seen;

static void note_pid(pid_seen *ps, const cprof_trace *t, const cprof_tev *e) {
    if (e->pid == CPROF_TEV_NONE || CPROF_TEV_IS_STR(e->pid)) return;
    size_t i = 0;
    while (i < ps->n && ps->pid[i] != e->pid) i++;
    if (i == ps->n) {
        if (ps->n == NAMED_CAP) return;
        ps->pid[i] = e->pid;
        ps->named[i] = 0;
        ps->n++;
    }
    size_t n;
    const char *name = cprof_trace_str(t, e->name, &n);
    if (e->ph == 'M' && n == 12 && memcmp(name, "process_name", 12) == 0) ps->named[i] = 1;
}

static void label_unnamed(cprof_buf *b, const pid_seen *ps, int64_t rank, label lb,
                          uint64_t *written) {
    for (size_t i = 0; i < ps->n; i++) {
        if (ps->named[i]) continue;
        if (*written) cprof_buf_puts(b, ",\n");
        (*written)++;
        char tmp[96];
        int tn = snprintf(tmp, sizeof tmp, "%s %lld: process %lld", lb.word, lb.num,
                          (long long)ps->pid[i]);
        cprof_buf_puts(b, "{\"ph\": \"M\", \"name\": \"process_name\", \"ts\": 0, \"pid\": ");
        cprof_buf_i64(b, wrap_mad(rank, PID_STRIDE, ps->pid[i]));
        cprof_buf_puts(b, ", \"tid\": 0, \"args\": {\"name\": ");
        cprof_buf_json_str(b, tmp, (size_t)tn);
        cprof_buf_puts(b, "}}");
    }
}

/* How many "process P" labels label_unnamed writes after input t's events. */
static uint64_t unnamed_pids(pid_seen *ps, const cprof_trace *t) {
    const cprof_tev *ev = cprof_trace_events(t);
    ps->n = 0;
    for (size_t k = 0, ne = cprof_trace_nevents(t); k < ne; k++) note_pid(ps, t, &ev[k]);
    uint64_t c = 0;
    for (size_t i = 0; i < ps->n; i++) c += !ps->named[i];
    return c;
}

typedef struct patch {
    cprof_tspan at;
    int what; /* 0 pid, 1 ts, 2 id */
} patch;

int cprof_trace_merge(cprof_trace *const *traces, const int64_t *ranks,
                      const unsigned char *ranked, size_t n, const char *const *paths,
                      const char *trace_name, cprof_sink *sink, uint64_t *events_out) {
    if (!traces || !ranks || !sink || n == 0) return CPROF_E_ARG;
    int64_t base = CPROF_TEV_NONE, world = CPROF_TEV_NONE;
    const cprof_trace *props = NULL, *backend = NULL;
    for (size_t i = 0; i < n; i++) {
        const cprof_trace_info *in = cprof_trace_get_info(traces[i]);
        if (!cprof_trace_text(traces[i], NULL)) return CPROF_E_ARG;
        if (in->base_time_ns != CPROF_TEV_NONE && (base == CPROF_TEV_NONE || in->base_time_ns < base))
            base = in->base_time_ns;
        if (!props && in->device_props.len) props = traces[i];
        if (!backend && in->backend) backend = traces[i];
        if (in->world_size != CPROF_TEV_NONE && in->world_size > 0 &&
            (world == CPROF_TEV_NONE || in->world_size > world))
            world = in->world_size;
    }
    pid_seen *seen = malloc(sizeof *seen);
    if (!seen) return CPROF_E_NOMEM;
    cprof_buf b;
    cprof_buf_init(&b);
    uint64_t written = 0;
    int rc;
    cprof_buf_puts(&b, "{\n  \"schemaVersion\": 1,\n");
    if (trace_name) {
        cprof_buf_puts(&b, "  \"traceName\": ");
        cprof_buf_json_str(&b, trace_name, strlen(trace_name));
        cprof_buf_puts(&b, ",\n");
    }
    /* the job's facts, but no "rank": the file holds several (cprof.merged lists them) */
    cprof_buf_puts(&b, "  \"distributedInfo\": {\"backend\": ");
    if (backend) {
        size_t bn;
        const char *bs = cprof_trace_str(backend, cprof_trace_get_info(backend)->backend, &bn);
        cprof_buf_json_str(&b, bs, bn);
    } else {
        cprof_buf_puts(&b, "null");
    }
    cprof_buf_puts(&b, ", \"world_size\": ");
    if (world != CPROF_TEV_NONE) cprof_buf_i64(&b, world);
    else cprof_buf_puts(&b, "null");
    cprof_buf_puts(&b, "},\n  \"deviceProperties\": ");
    if (props) {
        const cprof_trace_info *in = cprof_trace_get_info(props);
        cprof_buf_put(&b, cprof_trace_text(props, NULL) + in->device_props.off, in->device_props.len);
    } else {
        cprof_buf_puts(&b, "[]");
    }
    cprof_buf_puts(&b, ",\n  \"displayTimeUnit\": \"ms\",\n");
    if (base != CPROF_TEV_NONE) {
        cprof_buf_puts(&b, "  \"baseTimeNanoseconds\": ");
        cprof_buf_i64(&b, base);
        cprof_buf_puts(&b, ",\n");
    }
    cprof_buf_puts(&b, "  \"cprof\": {\"merged\": [");
    uint64_t first = 0; /* where input i's events start in traceEvents: a report of the
                         * merged file analyses each input apart (trace_read.h) */
    for (size_t i = 0; i < n; i++) {
        const cprof_trace_info *in = cprof_trace_get_info(traces[i]);
        cprof_buf_puts(&b, i ? ", {\"rank\": " : "{\"rank\": ");
        cprof_buf_i64(&b, ranks[i]);
        cprof_buf_puts(&b, ", \"pid_offset\": ");
        cprof_buf_i64(&b, wrap_mad(ranks[i], PID_STRIDE, 0));
        cprof_buf_puts(&b, ", \"events\": ");
        cprof_buf_u64(&b, cprof_trace_nevents(traces[i]));
        cprof_buf_puts(&b, ", \"first_event\": ");
        cprof_buf_u64(&b, first);
        first += cprof_trace_nevents(traces[i]) + unnamed_pids(seen, traces[i]);
        cprof_buf_puts(&b, ", \"partial\": ");
        cprof_buf_puts(&b, in->partial == 1 ? "true" : "false");
        if (ranked && !ranked[i]) cprof_buf_puts(&b, ", \"ranked\": false");
        if (in->end_reason) { /* how the input's window ended, and what it dropped: a report on
                               * the merged file says what one on the input would */
            size_t en;
            const char *es = cprof_trace_str(traces[i], in->end_reason, &en);
            cprof_buf_puts(&b, ", \"end\": ");
            cprof_buf_json_str(&b, es, en);
        }
        cJSON *lost = cprof_trace_losses(traces[i]); /* with the losses kept elsewhere in
                                                       * the input's metadata (names refused) */
        char *lost_text = lost && lost->child ? cJSON_PrintUnformatted(lost) : NULL;
        cJSON_Delete(lost);
        if (lost_text) {
            cprof_buf_puts(&b, ", \"dropped\": ");
            cprof_buf_puts(&b, lost_text);
            cJSON_free(lost_text);
        }
        if (paths && paths[i]) {
            cprof_buf_puts(&b, ", \"path\": ");
            cprof_buf_json_str(&b, paths[i], strlen(paths[i]));
        }
        cprof_buf_puts(&b, "}");
    }
    cprof_buf_puts(&b, "]},\n  \"traceEvents\": [\n");
    for (size_t i = 0; i < n; i++) {
        const cprof_trace *t = traces[i];
        const cprof_trace_info *in = cprof_trace_get_info(t);
        const char *text = cprof_trace_text(t, NULL);
        const cprof_tev *ev = cprof_trace_events(t);
        size_t ne = cprof_trace_nevents(t);
        label lb = label_of(ranks, ranked, i);
        seen->n = 0;
        int64_t shift = 0; /* >= 0: base is the earliest; saturated when over 2^63 ns */
        if (base != CPROF_TEV_NONE && in->base_time_ns != CPROF_TEV_NONE &&
            __builtin_sub_overflow(in->base_time_ns, base, &shift))
            shift = INT64_MAX;
        for (size_t k = 0; k < ne; k++) {
            const cprof_tev *e = &ev[k];
            note_pid(seen, t, e);
            if (written) cprof_buf_puts(&b, ",\n");
            written++;
            if (e->ph == 'M' && e->pid != CPROF_TEV_NONE && process_meta(&b, t, e, ranks[i], lb))
                goto next;
            patch p[3];
            int np = 0;
            if (e->pid_at.len) p[np++] = (patch){e->pid_at, 0};
            if (e->ts_at.len && shift) p[np++] = (patch){e->ts_at, 1};
            if (e->id_at.len && e->flow_id != CPROF_TEV_NONE) p[np++] = (patch){e->id_at, 2};
            for (int x = 1; x < np; x++) /* in text order */
                for (int y = x; y > 0 && p[y].at.off < p[y - 1].at.off; y--) {
                    patch tmp = p[y];
                    p[y] = p[y - 1];
                    p[y - 1] = tmp;
                }
            const char *raw = text + e->raw_off;
            uint32_t pos = 0;
            for (int x = 0; x < np; x++) {
                cprof_buf_put(&b, raw + pos, p[x].at.off - pos);
                if (p[x].what == 0) put_pid(&b, t, e->pid, ranks[i], lb);
                else if (p[x].what == 1) cprof_buf_us3(&b, shifted_ts(e->ts_ns, shift));
                else cprof_buf_i64(&b, wrap_mad(e->flow_id, (int64_t)n, (int64_t)i));
                pos = p[x].at.off + p[x].at.len;
            }
            cprof_buf_put(&b, raw + pos, e->raw_len - pos);
        next:
            if (b.len > (1u << 20) && (rc = flush(sink, &b))) goto out;
        }
        label_unnamed(&b, seen, ranks[i], lb, &written);
    }
    cprof_buf_puts(&b, "\n  ]\n}\n");
    rc = flush(sink, &b);
out:
    free(seen);
    cprof_buf_free(&b);
    if (events_out) *events_out = written;
    return rc;
}
