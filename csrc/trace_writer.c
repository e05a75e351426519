/* Streams a window's records as Kineto-compatible Chrome trace JSON into a sink.
 * Pure C, no Python, no globals: run it with the GIL released, on any one thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"

#define FLUSH_AT (256u << 10)

typedef struct {
    cprof_sink *sink;
    cprof_buf b;
    int err;
    uint64_t events;
    size_t replaced;
    uint64_t last_ext;         /* the highest External id given: ids past it are free */
    /* escaped names, cached per id for this write: most names repeat many times */
    uint64_t *name_cache;      /* (offset << 24 | len) + 1 into names_esc; 0 = not yet */
    uint32_t name_cache_n;
    cprof_buf names_esc;
} writer;

static const char *const cat_names[CPROF_CAT_COUNT] = {
    [CPROF_CAT_USER_ANNOTATION] = "user_annotation",
    [CPROF_CAT_CPU_OP] = "cpu_op",
    [CPROF_CAT_PYTHON_FUNCTION] = "python_function",
    [CPROF_CAT_STEP] = "user_annotation",
};

static void maybe_flush(writer *w) {
    if (w->b.oom && !w->err) w->err = CPROF_E_NOMEM;
    if (w->err || w->b.len < FLUSH_AT) return;
    int rc = cprof_sink_write(w->sink, w->b.data, w->b.len);
    if (rc) w->err = rc;
    w->b.len = 0;
}

static void put_name(writer *w, uint32_t id) {
    if (id < w->name_cache_n && w->name_cache[id]) {
        uint64_t v = w->name_cache[id] - 1;
        cprof_buf_put(&w->b, w->names_esc.data + (v >> 24), (size_t)(v & 0xFFFFFF));
        return;
    }
    size_t len;
    const char *s = cprof_names_get(id, &len);
    if (id < w->name_cache_n && len < (1u << 22)) {
        size_t off = w->names_esc.len;
        w->replaced += cprof_buf_json_str(&w->names_esc, s, len);
        size_t elen = w->names_esc.len - off;
        if (!w->names_esc.oom) {
            w->name_cache[id] = (((uint64_t)off << 24) | elen) + 1;
            cprof_buf_put(&w->b, w->names_esc.data + off, elen);
            return;
        }
    }
    w->replaced += cprof_buf_json_str(&w->b, s, len);
}

static void put_str(writer *w, const char *s) {
    w->replaced += cprof_buf_json_str(&w->b, s, strlen(s));
}

/* name_id's escaped name with prefix (plain JSON-safe text) inside the same quotes. */
static void put_name_prefixed(writer *w, const char *prefix, uint32_t name_id) {
    cprof_buf *b = &w->b;
    cprof_buf_puts(b, "\"");
    cprof_buf_puts(b, prefix);
    size_t at = b->len, replaced = w->replaced;
    put_name(w, name_id); /* "escaped": its opening quote is dropped below */
    w->replaced = replaced; /* the name is counted where it is written whole */
    if (!b->oom && b->len > at) {
        memmove(b->data + at, b->data + at + 1, b->len - at - 1);
        b->len--;
    }
}

/* {"ph":"X","cat":<cat>,"name":<prefix + name>,"pid":..,"tid":..,"ts":..,"dur":..,"args":{
 * (name_prefix NULL: the name alone); event_tail closes it. */
static void event_head(writer *w, const char *cat, const char *name_prefix, uint32_t name_id,
                       int64_t pid, int64_t tid, int64_t ts_ns, int64_t dur_ns) {
    cprof_buf *b = &w->b;
    cprof_buf_puts(b, "{\"ph\":\"X\",\"cat\":\"");
    cprof_buf_puts(b, cat);
    cprof_buf_puts(b, "\",\"name\":");
    if (name_prefix) put_name_prefixed(w, name_prefix, name_id);
    else put_name(w, name_id);
    cprof_buf_puts(b, ",\"pid\":");
    cprof_buf_i64(b, pid);
    cprof_buf_puts(b, ",\"tid\":");
    cprof_buf_i64(b, tid);
    cprof_buf_puts(b, ",\"ts\":");
    cprof_buf_us3(b, ts_ns);
    cprof_buf_puts(b, ",\"dur\":");
    cprof_buf_us3(b, dur_ns > 0 ? dur_ns : 0);
    cprof_buf_puts(b, ",\"args\":{");
}

static void event_tail(writer *w) {
    cprof_buf_puts(&w->b, "}},\n");
    w->events++;
    maybe_flush(w);
}

/* {"ph":"M","name":<what>,"ts":0,"pid":P,"tid":T,"args":{<key>:<value>}} ; value pre-rendered */
static void meta_event(writer *w, const char *what, int64_t pid, int64_t tid, const char *key,
                       const char *value_json, size_t value_len) {
    cprof_buf *b = &w->b;
    cprof_buf_puts(b, "{\"ph\":\"M\",\"name\":\"");
    cprof_buf_puts(b, what);
    cprof_buf_puts(b, "\",\"ts\":0.000,\"pid\":");
    cprof_buf_i64(b, pid);
    cprof_buf_puts(b, ",\"tid\":");
    cprof_buf_i64(b, tid);
    cprof_buf_puts(b, ",\"args\":{\"");
    cprof_buf_puts(b, key);
    cprof_buf_puts(b, "\":");
    cprof_buf_put(b, value_json, value_len);
    cprof_buf_puts(b, "}},\n");
    w->events++;
    maybe_flush(w);
}

static void thread_meta(writer *w, const cprof_trace_meta *m, const cprof_thread_data *t) {
    cprof_buf v;
    cprof_buf_init(&v);
    if (t->name_id != CPROF_NAME_INVALID) {
        size_t len;
        const char *s = cprof_names_get(t->name_id, &len);
        w->replaced += cprof_buf_json_str(&v, s, len);
    } else {
        /* the name Kineto gives CPU threads */
        cprof_buf raw;
        cprof_buf_init(&raw);
        cprof_buf_puts(&raw, "thread ");
        cprof_buf_u64(&raw, t->tid);
        cprof_buf_puts(&raw, " (");
        cprof_buf_puts(&raw, m->process_name ? m->process_name : "python");
        cprof_buf_puts(&raw, ")");
        w->replaced += cprof_buf_json_str(&v, raw.data, raw.len);
        cprof_buf_free(&raw);
    }
    if (v.oom) w->err = CPROF_E_NOMEM;
    else meta_event(w, "thread_name", m->pid, t->tid, "name", v.data, v.len);
    cprof_buf_free(&v);
    char num[24];
    cprof_buf nb = {num, 0, sizeof num, 0};
    cprof_buf_u64(&nb, t->tid);
    meta_event(w, "thread_sort_index", m->pid, t->tid, "sort_index", num, nb.len);
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Host threads seen only in CUPTI's records (a thread that launched GPU work but recorded no
 * range: autograd's device threads without operator capture, a C++ worker) get their metadata
 * too, so viewers name and sort their tracks: named as the OS names the thread now
 * (/proc/self/task/<tid>/comm, "pt_autograd_0"), else as Kineto names CPU threads. */
static void gpu_thread_meta(writer *w, const cprof_trace_meta *m, const cprof_snapshot *snap,
                            const cprof_gpu_snapshot *gpu) {
    uint32_t *tids = NULL;
    size_t n = 0, cap = 0;
    for (const cprof_gpu_chunk *c = gpu->chunks; c; c = c->next)
        for (uint32_t k = 0; k < c->count; k++) {
            const cprof_gpu_record *r = &c->rec[k];
            if (r->kind != CPROF_GPU_RUNTIME && r->kind != CPROF_GPU_DRIVER &&
                r->kind != CPROF_GPU_OVERHEAD && r->kind != CPROF_GPU_MARKER)
                continue;
            if (!r->tid || (n && tids[n - 1] == r->tid)) continue;
            if (n == cap && cprof_array_grow((void **)&tids, &cap, sizeof *tids, 16)) {
                w->err = CPROF_E_NOMEM;
                free(tids);
                return;
            }
            tids[n++] = r->tid;
        }
    if (n) qsort(tids, n, sizeof *tids, cmp_u32);
    for (size_t i = 0; i < n && !w->err; i++) {
        if (i && tids[i] == tids[i - 1]) continue;
        int known = 0;
        for (size_t j = 0; j < snap->nthreads && !known; j++)
            known = snap->threads[j].tid == tids[i];
        if (known) continue;
        cprof_thread_data t = {.tid = tids[i], .name_id = CPROF_NAME_INVALID};
        char path[64], comm[32] = {0};
        snprintf(path, sizeof path, "/proc/self/task/%u/comm", tids[i]);
        FILE *f = fopen(path, "r");
        if (f) {
            if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = 0;
            fclose(f);
        }
        uint32_t id;
        if (comm[0] && cprof_names_intern(comm, strlen(comm), &id) == CPROF_OK) t.name_id = id;
        thread_meta(w, m, &t);
    }
    free(tids);
}

/* event_head of a CPU range record on its thread's track (still open at stop: ends there). */
static void record_head(writer *w, const cprof_trace_meta *m, const cprof_snapshot *snap,
                        const cprof_thread_data *t, const cprof_record *r, const char *cat,
                        const char *name_prefix) {
    int64_t to_base = snap->unix_offset_ns - m->base_time_ns;
    uint64_t end = r->end_ns ? r->end_ns : snap->stop_ns;
    event_head(w, cat, name_prefix, r->name_id, m->pid, (int64_t)t->tid,
               (int64_t)r->begin_ns + to_base,
               end >= r->begin_ns ? (int64_t)(end - r->begin_ns) : 0);
}

/* py_parent: for a python_function, the Python id of the python_function enclosing it on its
 * thread (0: none); ignored for other categories. A python_function's Python id is its
 * External id (unique in the trace), as torch.profiler gives each Python event an id. */
static void range_event(writer *w, const cprof_trace_meta *m, const cprof_snapshot *snap,
                        const cprof_thread_data *t, const cprof_record *r, uint64_t external_id,
                        uint64_t py_parent) {
    cprof_buf *b = &w->b;
    record_head(w, m, snap, t, r, cat_names[r->cat < CPROF_CAT_COUNT ? r->cat : 0], NULL);
    cprof_buf_puts(b, "\"External id\":");
    cprof_buf_u64(b, external_id);
    if (r->cat == CPROF_CAT_PYTHON_FUNCTION) {
        cprof_buf_puts(b, ",\"Python id\":");
        cprof_buf_u64(b, external_id);
        cprof_buf_puts(b, ",\"Python parent id\":");
        if (py_parent) cprof_buf_u64(b, py_parent);
        else cprof_buf_puts(b, "null"); /* a root, as torch.profiler writes it */
    }
    for (uint32_t i = 0; i < r->nargs && i < 2; i++) {
        cprof_buf_puts(b, ",");
        put_name(w, r->arg_key[i]);
        cprof_buf_puts(b, ":");
        cprof_buf_i64(b, r->arg_val[i]);
    }
    if (r->flags & CPROF_REC_RAW_ARGS) {
        /* members made and interned by the binding (record_shapes): already valid JSON */
        size_t len;
        const char *raw = cprof_names_get((uint32_t)r->reserved, &len);
        if (len) {
            cprof_buf_puts(b, ",");
            cprof_buf_put(b, raw, len);
        }
    }
    if (r->flags & CPROF_REC_TRUNCATED) {
        cprof_buf_puts(b, ",\"cprof truncated\":1");
        /* an async RecordFunction (a collective) not done by the window's end: torch marks it so */
        if (r->flags & CPROF_REC_ASYNC) cprof_buf_puts(b, ",\"finished\":false");
    }
    event_tail(w);
}

/* The "nn.Module: <path>" python_function torch.profiler's Python tracer writes for a module
 * call (with_stack), mirroring module range r: TensorBoard's Module view is built from these
 * ("Python module id" marks them; their "Python id" / "Python parent id" give the hierarchy).
 * Its Python id is r's External id, which no python_function uses; the module id is the path's
 * name id. No External id of its own: the user_annotation range carries r's. */
static void module_twin(writer *w, const cprof_trace_meta *m, const cprof_snapshot *snap,
                        const cprof_thread_data *t, const cprof_record *r, uint64_t py_id,
                        uint64_t py_parent) {
    cprof_buf *b = &w->b;
    record_head(w, m, snap, t, r, "python_function", "nn.Module: ");
    cprof_buf_puts(b, "\"Python id\":");
    cprof_buf_u64(b, py_id);
    cprof_buf_puts(b, ",\"Python parent id\":");
    if (py_parent) cprof_buf_u64(b, py_parent);
    else cprof_buf_puts(b, "null");
    cprof_buf_puts(b, ",\"Python module id\":");
    cprof_buf_u64(b, r->name_id);
    if (r->flags & CPROF_REC_TRUNCATED) cprof_buf_puts(b, ",\"cprof truncated\":1");
    event_tail(w);
}

/* Whether module calls get their "nn.Module: " twins: when the window has python_function
 * records (with_stack was on), as torch.profiler writes them only with with_stack, unless
 * CPROF_MODULE_EVENTS=0 (a smaller trace, no TensorBoard Module view). Stops at the first. */
static int module_twins_wanted(const cprof_snapshot *snap) {
    const char *env = getenv("CPROF_MODULE_EVENTS");
    if (env && strcmp(env, "0") == 0) return 0;
    for (size_t i = 0; i < snap->nthreads; i++)
        for (const cprof_chunk *c = snap->threads[i].chunks; c; c = c->next)
            for (uint32_t k = 0; k < c->count; k++)
                if (c->rec[k].cat == CPROF_CAT_PYTHON_FUNCTION) return 1;
    return 0;
}

typedef struct ctx_device {
    uint32_t context, device;
} ctx_device;

/* The device of a context, from the map the GPU work built; 0 when unknown (as Kineto). */
static uint32_t device_of(const ctx_device *map, int n, uint32_t context) {
    for (int c = 0; c < n; c++)
        if (map[c].context == context) return map[c].device;
    return 0;
}

typedef struct track {
    uint32_t device, stream; /* stream UINT32_MAX: the device's process */
} track;
#define MAX_NAMED_TRACKS 512

#define NO_STREAM_TRACK 0xFFFFFFFEu /* named[]'s key for a device's tid -1 (stream-less syncs) */

static int track_named(const track *named, size_t n, uint32_t device, uint32_t stream) {
    for (size_t i = 0; i < n; i++)
        if (named[i].device == device && named[i].stream == stream) return 1;
    return 0;
}

/* "GPU N" process metadata for a device (and remembered in named, while there is room). */
static void device_meta(writer *w, uint32_t device, track *named, size_t *nnamed) {
    char num[64];
    cprof_buf nb = {num, 0, sizeof num, 0};
    cprof_buf_puts(&nb, "\"GPU ");
    cprof_buf_u64(&nb, device);
    cprof_buf_puts(&nb, "\"");
    meta_event(w, "process_name", device, 0, "name", num, nb.len);
    meta_event(w, "process_labels", device, 0, "labels", num, nb.len);
    nb = (cprof_buf){num, 0, sizeof num, 0};
    cprof_buf_u64(&nb, 5000000 + (uint64_t)device);
    meta_event(w, "process_sort_index", device, 0, "sort_index", num, nb.len);
    if (*nnamed < MAX_NAMED_TRACKS) named[(*nnamed)++] = (track){device, UINT32_MAX};
}

/* "stream S" thread metadata for a stream of a device. */
static void stream_meta(writer *w, uint32_t device, uint32_t stream, track *named,
                        size_t *nnamed) {
    char num[64];
    cprof_buf nb = {num, 0, sizeof num, 0};
    cprof_buf_puts(&nb, "\"stream ");
    cprof_buf_u64(&nb, stream);
    cprof_buf_puts(&nb, "\"");
    meta_event(w, "thread_name", device, stream, "name", num, nb.len);
    nb = (cprof_buf){num, 0, sizeof num, 0};
    cprof_buf_u64(&nb, stream);
    meta_event(w, "thread_sort_index", device, stream, "sort_index", num, nb.len);
    if (*nnamed < MAX_NAMED_TRACKS) named[(*nnamed)++] = (track){device, stream};
}

static void gpu_section(writer *w, const cprof_trace_meta *m, const cprof_snapshot *snap,
                        const cprof_gpu_snapshot *gpu);

/* One end of a flow arrow (ph "s" or "f"), as Kineto writes them: cat "ac2g" (launch -> GPU
 * work) or "fwdbwd" (forward op -> backward node), named as its category; the finish binds to
 * the enclosing slice ("bp":"e"). ts: base-relative ns. */
static void flow(writer *w, const char *cat, const char *ph, uint64_t id, int64_t pid,
                 uint64_t tid, int64_t ts) {
    cprof_buf *b = &w->b;
    cprof_buf_puts(b, "{\"ph\":\"");
    cprof_buf_puts(b, ph);
    cprof_buf_puts(b, "\",\"id\":");
    cprof_buf_u64(b, id);
    cprof_buf_puts(b, ",\"pid\":");
    cprof_buf_i64(b, pid);
    cprof_buf_puts(b, ",\"tid\":");
    cprof_buf_u64(b, tid);
    cprof_buf_puts(b, ",\"ts\":");
    cprof_buf_us3(b, ts);
    cprof_buf_puts(b, ",\"cat\":\"");
    cprof_buf_puts(b, cat);
    cprof_buf_puts(b, "\",\"name\":\"");
    cprof_buf_puts(b, cat);
    cprof_buf_puts(b, ph[0] == 'f' ? "\",\"bp\":\"e\"},\n" : "\"},\n");
    w->events++;
    maybe_flush(w);
}

int cprof_trace_write(cprof_sink *sink, const cprof_snapshot *snap, const cprof_gpu_snapshot *gpu,
                      const cprof_trace_meta *m, cprof_write_stats *stats) {
    if (!sink || !snap || !m) return CPROF_E_ARG;
    writer w;
    memset(&w, 0, sizeof w);
    w.sink = sink;
    cprof_buf_init(&w.b);
    cprof_buf_init(&w.names_esc);
    w.name_cache_n = cprof_names_count();
    w.name_cache = calloc(w.name_cache_n ? w.name_cache_n : 1, sizeof *w.name_cache);
    if (!w.name_cache) w.name_cache_n = 0; /* still correct, only slower */
    if (cprof_buf_reserve(&w.b, FLUSH_AT + 4096)) {
        free(w.name_cache);
        return CPROF_E_NOMEM;
    }
    cprof_buf *b = &w.b;

    cprof_buf_puts(b, "{\n\"schemaVersion\":1,\n\"deviceProperties\":");
    const char *props = m->device_props_json;
    if (!props && gpu && gpu->device_props_json) props = gpu->device_props_json;
    cprof_buf_puts(b, props ? props : "[]");
    cprof_buf_puts(b, ",\n\"distributedInfo\":{\"backend\":");
    if (m->backend) put_str(&w, m->backend);
    else cprof_buf_puts(b, "null");
    /* "rank": N with a space: HTA finds the rank with the regex "rank":\s+(\d+), first match
     * in the file, so this must be the first "rank" key and keep its space */
    cprof_buf_puts(b, ",\"rank\": ");
    cprof_buf_i64(b, m->rank);
    cprof_buf_puts(b, ",\"world_size\":");
    cprof_buf_i64(b, m->world_size);
    if (m->dist_json && *m->dist_json) {
        cprof_buf_puts(b, ",");
        cprof_buf_puts(b, m->dist_json);
    }
    cprof_buf_puts(b, "},\n");
    /* trace_id and the user's metadata, where Kineto writes them (after distributedInfo, so
     * the first "rank" key stays distributedInfo's) */
    if (m->top_json && *m->top_json) {
        cprof_buf_puts(b, m->top_json);
        cprof_buf_puts(b, ",\n");
    }
    cprof_buf_puts(b, "\"displayTimeUnit\":\"ms\",\n\"baseTimeNanoseconds\":");
    cprof_buf_i64(b, m->base_time_ns);
    if (m->cprof_json) {
        cprof_buf_puts(b, ",\n\"cprof\":");
        cprof_buf_puts(b, m->cprof_json);
    }
    cprof_buf_puts(b, ",\n\"traceEvents\":[\n");

    /* process metadata, as Kineto writes it for the host process */
    cprof_buf v;
    cprof_buf_init(&v);
    w.replaced += cprof_buf_json_str(&v, m->process_name ? m->process_name : "python",
                                     strlen(m->process_name ? m->process_name : "python"));
    if (!v.oom) meta_event(&w, "process_name", m->pid, 0, "name", v.data, v.len);
    cprof_buf_free(&v);
    meta_event(&w, "process_labels", m->pid, 0, "labels", "\"CPU\"", 5);
    char num[24];
    cprof_buf nb = {num, 0, sizeof num, 0};
    cprof_buf_i64(&nb, m->pid);
    meta_event(&w, "process_sort_index", m->pid, 0, "sort_index", num, nb.len);

    for (size_t i = 0; i < snap->nthreads && !w.err; i++) thread_meta(&w, m, &snap->threads[i]);
    if (gpu && !w.err) gpu_thread_meta(&w, m, snap, gpu);

    /* External ids are given here, in write order: ranges need no counter on the hot path.
     * A thread's records are in begin order (pushed as they open), so the python_function
     * enclosing the next one is the innermost of those still open at its begin: a stack of
     * (end, id) popped by end gives torch's "Python parent id" without a pass of its own. */
    uint64_t external_id = 0;
    struct py_open { uint64_t end, id; } *pys = NULL;
    size_t npy = 0, cap_py = 0;
    int twins = module_twins_wanted(snap); /* module calls as "nn.Module: " python_functions */
    for (size_t i = 0; i < snap->nthreads && !w.err; i++) {
        const cprof_thread_data *t = &snap->threads[i];
        npy = 0;
        for (const cprof_chunk *c = t->chunks; c && !w.err; c = c->next)
            for (uint32_t k = 0; k < c->count && !w.err; k++) {
                const cprof_record *r = &c->rec[k];
                uint64_t parent = 0;
                ++external_id;
                int twin = twins && (r->flags & CPROF_REC_MODULE);
                if (r->cat == CPROF_CAT_PYTHON_FUNCTION || twin) {
                    while (npy && pys[npy - 1].end <= r->begin_ns) npy--;
                    if (npy) parent = pys[npy - 1].id;
                    if (npy == cap_py &&
                        cprof_array_grow((void **)&pys, &cap_py, sizeof *pys, 64)) {
                        w.err = CPROF_E_NOMEM;
                        break;
                    }
                    pys[npy].end = r->end_ns ? r->end_ns : snap->stop_ns;
                    pys[npy].id = external_id;
                    npy++;
                }
                /* a module call without its range (with_stack without with_modules or
                 * record_shapes): its twin alone, as torch writes module calls then */
                if (m->module_ranges || !(r->flags & CPROF_REC_MODULE))
                    range_event(&w, m, snap, t, r, external_id, parent);
                if (twin) module_twin(&w, m, snap, t, r, external_id, parent);
            }
    }
    free(pys);
    w.last_ext = external_id;

    /* forward op -> backward node, as torch.profiler's "fwdbwd" flows (fwdbwd.c) */
    if (!w.err) {
        cprof_fwdbwd *fb = NULL;
        size_t nfb = 0;
        int frc = cprof_fwdbwd_build(snap, &fb, &nfb);
        if (frc) w.err = frc;
        int64_t to_base = snap->unix_offset_ns - m->base_time_ns;
        for (size_t i = 0; i < nfb && !w.err; i++) {
            flow(&w, "fwdbwd", "s", i + 1, m->pid, fb[i].fwd_tid, (int64_t)fb[i].fwd_ns + to_base);
            flow(&w, "fwdbwd", "f", i + 1, m->pid, fb[i].bwd_tid, (int64_t)fb[i].bwd_ns + to_base);
        }
        free(fb);
    }

    if (gpu && !w.err) gpu_section(&w, m, snap, gpu);

    /* profile_memory's CPU memory counter track (mem_sampler.c) */
    for (size_t i = 0; i < m->nmem && !w.err; i++) {
        const cprof_mem_sample *s = &m->mem[i];
        cprof_buf_puts(b, "{\"ph\":\"C\",\"name\":\"CPU memory\",\"pid\":");
        cprof_buf_i64(b, m->pid);
        cprof_buf_puts(b, ",\"tid\":0,\"ts\":");
        cprof_buf_us3(b, (int64_t)s->ts_ns + snap->unix_offset_ns - m->base_time_ns);
        cprof_buf_puts(b, ",\"args\":{\"resident bytes\":");
        cprof_buf_u64(b, s->rss_bytes);
        if (m->mem_has_heap) {
            cprof_buf_puts(b, ",\"malloc in use bytes\":");
            cprof_buf_u64(b, s->heap_bytes);
        }
        cprof_buf_puts(b, "}},\n");
        w.events++;
        maybe_flush(&w);
    }

    /* profile_memory's allocation events (mem_events.c), as torch.profiler's "[memory]" */
    for (size_t i = 0; i < m->nmev && !w.err; i++) {
        const cprof_mem_event *e = &m->mev[i];
        cprof_buf_puts(b, "{\"ph\":\"i\",\"cat\":\"cpu_instant_event\",\"s\":\"t\","
                          "\"name\":\"[memory]\",\"pid\":");
        cprof_buf_i64(b, m->pid);
        cprof_buf_puts(b, ",\"tid\":");
        cprof_buf_u64(b, e->tid);
        cprof_buf_puts(b, ",\"ts\":");
        cprof_buf_us3(b, (int64_t)e->ts_ns + snap->unix_offset_ns - m->base_time_ns);
        const struct {
            const char *key;
            int64_t v;
        } args[] = {{",\"args\":{\"Total Reserved\":", e->total_reserved},
                    {",\"Total Allocated\":", e->total_allocated},
                    {",\"Bytes\":", e->bytes},
                    {",\"Device Id\":", e->device_index},
                    {",\"Device Type\":", e->device_type}};
        for (size_t k = 0; k < sizeof args / sizeof *args; k++) {
            cprof_buf_puts(b, args[k].key);
            cprof_buf_i64(b, args[k].v);
        }
        cprof_buf_puts(b, ",\"Addr\":");
        cprof_buf_u64(b, e->addr);
        cprof_buf_puts(b, "}},\n");
        w.events++;
        maybe_flush(&w);
    }

    /* the window itself, as the span Kineto writes for a profiler session (its name and
     * track, which TensorBoard's plugin reads for the profile's extent) */
    int64_t to_base = snap->unix_offset_ns - m->base_time_ns;
    cprof_buf_puts(b, "{\"ph\":\"X\",\"cat\":\"Trace\",\"name\":\"PyTorch Profiler (0)\","
                      "\"pid\":\"Spans\",\"tid\":\"PyTorch Profiler\",\"ts\":");
    cprof_buf_us3(b, (int64_t)snap->start_ns + to_base);
    cprof_buf_puts(b, ",\"dur\":");
    cprof_buf_us3(b, (int64_t)(cprof_snapshot_span_stop(snap) - snap->start_ns));
    cprof_buf_puts(b, ",\"args\":{\"Op count\":");
    cprof_buf_u64(b, snap->nrecords);
    cprof_buf_puts(b, ",\"cprof window\":");
    cprof_buf_u64(b, snap->window_id);
    cprof_buf_puts(b, "}}\n],\n\"traceName\":");
    put_str(&w, m->trace_name ? m->trace_name : "");
    cprof_buf_puts(b, "\n}\n");
    w.events++;
    if (b->oom && !w.err) w.err = CPROF_E_NOMEM;
    if (!w.err && b->len) w.err = cprof_sink_write(sink, b->data, b->len);

    if (stats) {
        stats->events = w.events;
        stats->replaced_chars = w.replaced;
        stats->bytes = cprof_sink_bytes(sink);
    }
    free(w.name_cache);
    cprof_buf_free(&w.names_esc);
    cprof_buf_free(&w.b);
    return w.err;
}

/* ---------------------------------------------------------------------------------------------
 * GPU activity: kernels, copies and sets on (device, stream) tracks; runtime / driver calls,
 * syncs, CUPTI overhead and NVTX ranges on the host thread; ac2g flows from each launch to its
 * GPU work; gpu_user_annotation spans projecting cprof ranges onto streams; a memory counter.
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    const cprof_gpu_record *r;
    size_t idx;
} gpu_ref;

static void kv_u64(cprof_buf *b, const char *key, uint64_t v) {
    cprof_buf_puts(b, ",\"");
    cprof_buf_puts(b, key);
    cprof_buf_puts(b, "\":");
    cprof_buf_u64(b, v);
}

static void kv_i64(cprof_buf *b, const char *key, int64_t v) {
    cprof_buf_puts(b, ",\"");
    cprof_buf_puts(b, key);
    cprof_buf_puts(b, "\":");
    cprof_buf_i64(b, v);
}

/* ,"key":[x,y,z] */
static void kv_dim3(cprof_buf *b, const char *key, const int32_t v[3]) {
    cprof_buf_puts(b, ",\"");
    cprof_buf_puts(b, key);
    cprof_buf_puts(b, "\":[");
    for (int i = 0; i < 3; i++) {
        if (i) cprof_buf_puts(b, ",");
        cprof_buf_i64(b, v[i]);
    }
    cprof_buf_puts(b, "]");
}

/* The args every GPU-side event starts with, as Kineto writes them. */
static void gpu_common_args(cprof_buf *b, const cprof_gpu_record *r, uint64_t ext) {
    cprof_buf_puts(b, "\"External id\":");
    cprof_buf_u64(b, ext);
    kv_u64(b, "device", r->device);
    kv_u64(b, "context", r->context);
    kv_u64(b, "stream", r->stream);
    kv_u64(b, "correlation", r->correlation);
}

static int is_gpu_work(const cprof_gpu_record *r) {
    return r->kind == CPROF_GPU_KERNEL || r->kind == CPROF_GPU_MEMCPY ||
           r->kind == CPROF_GPU_MEMSET;
}

static int by_device_stream(const void *a, const void *b) {
    const cprof_gpu_record *x = ((const gpu_ref *)a)->r, *y = ((const gpu_ref *)b)->r;
    if (x->device != y->device) return x->device < y->device ? -1 : 1;
    if (x->stream != y->stream) return x->stream < y->stream ? -1 : 1;
    return 0;
}

static int by_time(const void *a, const void *b) {
    const cprof_gpu_record *x = ((const gpu_ref *)a)->r, *y = ((const gpu_ref *)b)->r;
    return x->start_ns < y->start_ns ? -1 : x->start_ns > y->start_ns;
}

typedef struct {
    uint64_t ext;
    uint32_t device, stream;
    uint64_t start, end;
} span;

static int by_span_key(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->ext != y->ext) return x->ext < y->ext ? -1 : 1;
    if (x->device != y->device) return x->device < y->device ? -1 : 1;
    if (x->stream != y->stream) return x->stream < y->stream ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

static void gpu_section(writer *w, const cprof_trace_meta *m, const cprof_snapshot *snap,
                        const cprof_gpu_snapshot *gpu) {
    cprof_links links;
    unsigned skip = (m->link_modules ? CPROF_LINK_SKIP_OPS : 0) |
                    (m->module_ranges ? 0 : CPROF_LINK_SKIP_MODULES);
    if (cprof_links_build(snap, gpu, skip, &links) != CPROF_OK) {
        w->err = CPROF_E_NOMEM;
        return;
    }
    size_t n = links.n;
    gpu_ref *refs = malloc((n ? n : 1) * sizeof *refs);
    span *spans = malloc((n ? n : 1) * sizeof *spans);
    const cprof_record **by_ext = calloc(snap->nrecords + 1, sizeof *by_ext);
    uint64_t *user_of = NULL, *anc = NULL;
    const cprof_gpu_record **by_index = malloc((n ? n : 1) * sizeof *by_index);
    if (!refs || !spans || !by_ext || !by_index) {
        w->err = CPROF_E_NOMEM;
        goto out;
    }
    size_t i = 0;
    for (const cprof_gpu_chunk *c = gpu->chunks; c; c = c->next)
        for (uint32_t k = 0; k < c->count && i < n; k++, i++) refs[i] = (gpu_ref){&c->rec[k], i};
    n = i;
    uint64_t e = 0;
    for (size_t t = 0; t < snap->nthreads; t++)
        for (const cprof_chunk *c = snap->threads[t].chunks; c; c = c->next)
            for (uint32_t k = 0; k < c->count && e < snap->nrecords; k++) by_ext[++e] = &c->rec[k];
    /* gpu_user_annotation spans belong to user ranges (cprof.range, record_function, module
     * ranges, ProfilerStep), as Kineto's do: user_of[ext] is the innermost user range around
     * record ext (itself when it is one), skipping the Python functions and C calls with_stack
     * records inside them. Records are stored in push order with their depth, so one pass per
     * thread with the nearest user range per depth finds it. */
    user_of = calloc(snap->nrecords + 1, sizeof *user_of);
    anc = calloc((size_t)CPROF_MAX_DEPTH + 1, sizeof *anc);
    if (!user_of || !anc) {
        w->err = CPROF_E_NOMEM;
        goto out;
    }
    e = 0;
    for (size_t t = 0; t < snap->nthreads; t++) {
        uint32_t top = 0; /* deepest depth written for this thread */
        for (const cprof_chunk *c = snap->threads[t].chunks; c; c = c->next)
            for (uint32_t k = 0; k < c->count && e < snap->nrecords; k++) {
                const cprof_record *r = &c->rec[k];
                uint32_t d = r->depth;
                if (d > top) { /* deeper than anything seen: ancestors opened before start */
                    memset(anc + top + 1, 0, (size_t)(d - top) * sizeof *anc);
                    top = d;
                }
                uint64_t up = d ? anc[d - 1] : 0;
                e++;
                anc[d] = (r->cat == CPROF_CAT_USER_ANNOTATION || r->cat == CPROF_CAT_STEP) ? e
                                                                                         : up;
                user_of[e] = anc[d];
            }
        if (top) memset(anc, 0, ((size_t)top + 1) * sizeof *anc);
        else anc[0] = 0;
    }

    int64_t to_base = snap->unix_offset_ns - m->base_time_ns;

    /* stream metadata: one process per device, a thread per stream */
    qsort(refs, n, sizeof *refs, by_device_stream);
    int64_t last_dev = -1, last_stream = -1;
    /* each context's device, from the GPU work it ran (syncs name a context only) */
    ctx_device ctx_dev[16];
    int nctx = 0;
    /* the tracks named so far, so that a stream seen only in its syncs is named once too */
    track named[MAX_NAMED_TRACKS];
    size_t nnamed = 0;
    for (i = 0; i < n && !w->err; i++) {
        const cprof_gpu_record *r = refs[i].r;
        if (!is_gpu_work(r)) continue;
        int c = 0;
        while (c < nctx && ctx_dev[c].context != r->context) c++;
        if (c == nctx && nctx < 16) {
            ctx_dev[nctx].context = r->context;
            ctx_dev[nctx++].device = r->device;
        }
        if ((int64_t)r->device != last_dev) {
            last_dev = r->device;
            last_stream = -1;
            device_meta(w, r->device, named, &nnamed);
        }
        if ((int64_t)r->stream != last_stream) {
            last_stream = r->stream;
            stream_meta(w, r->device, r->stream, named, &nnamed);
        }
    }
    for (i = 0; i < n && !w->err; i++) {
        const cprof_gpu_record *r = refs[i].r;
        /* a device seen only in its memory counters is named too */
        if (r->kind == CPROF_GPU_MEMORY && !track_named(named, nnamed, r->device, UINT32_MAX))
            device_meta(w, r->device, named, &nnamed);
        if (r->kind != CPROF_GPU_SYNC) continue;
        uint32_t dev = device_of(ctx_dev, nctx, r->context);
        if (!track_named(named, nnamed, dev, UINT32_MAX)) device_meta(w, dev, named, &nnamed);
        if (r->stream == 0xFFFFFFFFu) {
            /* context and event syncs wait on no stream: Kineto's tid -1, named here */
            if (!track_named(named, nnamed, dev, NO_STREAM_TRACK)) {
                static const char name[] = "\"syncs (no stream)\"";
                meta_event(w, "thread_name", dev, -1, "name", name, sizeof name - 1);
                meta_event(w, "thread_sort_index", dev, -1, "sort_index", "-1", 2);
                if (nnamed < MAX_NAMED_TRACKS) named[nnamed++] = (track){dev, NO_STREAM_TRACK};
            }
            continue;
        }
        if (!track_named(named, nnamed, dev, r->stream))
            stream_meta(w, dev, r->stream, named, &nnamed);
    }

    /* events, in time order; by_index finds a record from its chunk-order index */
    for (i = 0; i < n; i++) by_index[refs[i].idx] = refs[i].r;
    qsort(refs, n, sizeof *refs, by_time);
    size_t nspans = 0;
    /* the GPU memory counter counts what CUPTI saw: a window that frees memory allocated
     * before it would go below zero, so each device's series starts at the least it proves
     * was allocated at the window's start (the deepest dip of its running sum), never < 0 */
    int64_t mem_total[64] = {0}, mem_low[64] = {0};
    for (i = 0; i < n; i++) {
        const cprof_gpu_record *r = refs[i].r;
        if (r->kind != CPROF_GPU_MEMORY || r->sub >= 3) continue;
        uint32_t d = r->device < 64 ? r->device : 63;
        mem_total[d] += r->u.mem.bytes;
        if (mem_total[d] < mem_low[d]) mem_low[d] = mem_total[d];
    }
    for (int d = 0; d < 64; d++) mem_total[d] = -mem_low[d];
    /* memory pools (MEMORY_POOL): each pool's last size and use, summed per device */
    struct {
        uint64_t address, size, utilized;
        uint32_t device;
    } pools[64];
    size_t npools = 0;
    /* a launch may start several GPU records (a graph launch: one per node); a flow id binds one
     * start to one finish, so the second and later get ids above any CUPTI correlation id */
    uint8_t *flow_used = calloc(n ? n : 1, 1);
    uint64_t extra_flow_id = 1ull << 32;
    if (!flow_used) {
        w->err = CPROF_E_NOMEM;
        goto out;
    }
    for (i = 0; i < n && !w->err; i++) {
        const cprof_gpu_record *r = refs[i].r;
        size_t idx = refs[i].idx;
        uint64_t ext = links.external_id[idx];
        int64_t ts = (int64_t)r->start_ns + to_base, dur = (int64_t)(r->end_ns - r->start_ns);
        cprof_buf *b = &w->b;
        const cprof_gpu_record *launch =
            links.launch_of[idx] ? by_index[links.launch_of[idx] - 1] : NULL;
        switch (r->kind) {
        case CPROF_GPU_KERNEL:
            event_head(w, "kernel", NULL, r->name_id, r->device, r->stream, ts, dur);
            gpu_common_args(b, r, ext);
            kv_u64(b, "registers per thread", r->u.k.regs);
            kv_i64(b, "shared memory", (int64_t)r->u.k.smem_static + r->u.k.smem_dynamic);
            kv_dim3(b, "grid", r->u.k.grid);
            kv_dim3(b, "block", r->u.k.block);
            if (gpu && gpu->devices && r->device < (uint32_t)gpu->ndevices &&
                gpu->devices[r->device].sms > 0) {
                /* Kineto's: the grid's blocks over the device's SMs, and their warps of 32 */
                const cprof_device_limits *dev = &gpu->devices[r->device];
                double blocks = (double)r->u.k.grid[0] * r->u.k.grid[1] * r->u.k.grid[2] /
                                dev->sms;
                cprof_buf_puts(b, ",\"blocks per SM\":");
                cprof_buf_f6(b, blocks);
                cprof_buf_puts(b, ",\"warps per SM\":");
                cprof_buf_f6(b, blocks * ((double)r->u.k.block[0] * r->u.k.block[1] *
                                          r->u.k.block[2]) / 32.0);
                int occupancy = cprof_occupancy_percent(dev, r->u.k.regs, (int)r->u.k.smem_static,
                                                        (int)r->u.k.smem_dynamic, r->u.k.block,
                                                        r->u.k.grid);
                if (occupancy >= 0) kv_i64(b, "est. achieved occupancy %", occupancy);
            }
            cprof_buf_puts(b, ",\"queued\":");
            cprof_buf_us3(b, r->u.k.queued_ns && r->u.k.queued_ns <= r->start_ns
                                 ? (int64_t)(r->start_ns - r->u.k.queued_ns) : 0);
            if (r->u.k.graph_id) {
                kv_u64(b, "graph id", r->u.k.graph_id);
                kv_u64(b, "graph node id", r->u.k.graph_node_id);
            }
            if (r->aux_id != r->name_id) {
                cprof_buf_puts(b, ",\"mangled name\":");
                put_name(w, r->aux_id);
            }
            event_tail(w);
            break;
        case CPROF_GPU_MEMCPY:
        case CPROF_GPU_MEMSET:
            event_head(w, r->kind == CPROF_GPU_MEMCPY ? "gpu_memcpy" : "gpu_memset", NULL,
                       r->name_id, r->device, r->stream, ts, dur);
            gpu_common_args(b, r, ext);
            kv_u64(b, "bytes", r->u.m.bytes);
            cprof_buf_puts(b, ",\"memory bandwidth (GB/s)\":");
            cprof_buf_f3(b, dur > 0 ? (double)r->u.m.bytes / (double)dur : 0.0);
            if (r->kind == CPROF_GPU_MEMCPY && r->sub == CPROF_COPY_PTOP) { /* Kineto's devices */
                kv_u64(b, "fromDevice", r->u.m.src_device);
                kv_u64(b, "inDevice", r->device);
                kv_u64(b, "toDevice", r->u.m.dst_device);
            }
            if (r->u.m.graph_id) {
                kv_u64(b, "graph id", r->u.m.graph_id);
                kv_u64(b, "graph node id", r->u.m.graph_node_id);
            }
            event_tail(w);
            break;
        case CPROF_GPU_RUNTIME:
        case CPROF_GPU_DRIVER:
            event_head(w, r->kind == CPROF_GPU_RUNTIME ? "cuda_runtime" : "cuda_driver", NULL,
                       r->name_id, m->pid, r->tid, ts, dur);
            cprof_buf_puts(b, "\"External id\":");
            cprof_buf_u64(b, ext);
            kv_u64(b, "cbid", r->aux_id);
            kv_u64(b, "correlation", r->correlation);
            if (r->u.api.ret) kv_u64(b, "return code", r->u.api.ret);
            event_tail(w);
            break;
        case CPROF_GPU_SYNC: {
            /* Kineto's placement and args: on the device of its context (0 when the window
             * ran no GPU work there, as Kineto) and the stream waited for (-1 for a context
             * or event sync); event waits name the event record they wait on */
            uint32_t dev = device_of(ctx_dev, nctx, r->context);
            int64_t stream = r->stream == 0xFFFFFFFFu ? -1 : (int64_t)r->stream;
            event_head(w, "cuda_sync", NULL, r->name_id, dev, stream, ts, dur);
            cprof_buf_puts(b, "\"External id\":");
            cprof_buf_u64(b, ext);
            cprof_buf_puts(b, ",\"cuda_sync_kind\":");
            put_name(w, r->name_id);
            if (r->sub == 1 || r->sub == 2) { /* Event Sync, Stream Wait Event */
                kv_i64(b, "wait_on_stream", r->u.ev.wait_stream);
                kv_i64(b, "wait_on_cuda_event_record_corr_id", r->u.ev.wait_corr);
                kv_u64(b, "wait_on_cuda_event_id", r->u.ev.event_id);
            }
            kv_i64(b, "stream", stream);
            kv_u64(b, "correlation", r->correlation);
            kv_u64(b, "device", dev);
            kv_u64(b, "context", r->context);
            event_tail(w);
            break;
        }
        case CPROF_GPU_OVERHEAD:
            event_head(w, "overhead", NULL, r->name_id, m->pid, r->tid, ts, dur);
            cprof_buf_puts(b, r->sub ? "\"cprof\":\"CUPTI's own cost\""
                                     : "\"cprof\":\"the driver's cost, reported by CUPTI\"");
            event_tail(w);
            break;
        case CPROF_GPU_MARKER:
            /* an id of its own after the CPU ranges' (a user_annotation has one, as Kineto's) */
            event_head(w, "user_annotation", NULL, r->name_id, m->pid, r->tid, ts, dur);
            cprof_buf_puts(b, "\"External id\":");
            cprof_buf_u64(b, ext ? ext : ++w->last_ext);
            cprof_buf_puts(b, ",\"nvtx\":1");
            if (r->aux_id) {
                cprof_buf_puts(b, ",\"domain\":");
                put_name(w, r->aux_id);
            }
            event_tail(w);
            break;
        case CPROF_GPU_MEMORY: {
            uint32_t d = r->device < 64 ? r->device : 63;
            if (r->sub >= 3) { /* a pool created, trimmed or destroyed */
                size_t p = 0;
                while (p < npools && !(pools[p].address == r->u.mem.address &&
                                       pools[p].device == r->device))
                    p++;
                if (p == npools && npools < 64) pools[npools++].address = r->u.mem.address;
                if (p == npools) p = npools - 1; /* 64 pools: the last slot is shared */
                pools[p].device = r->device;
                pools[p].size = (uint64_t)r->u.mem.bytes;
                pools[p].utilized = r->u.mem.utilized;
                uint64_t size = 0, used = 0;
                for (size_t q = 0; q < npools; q++)
                    if (pools[q].device == r->device) {
                        size += pools[q].size;
                        used += pools[q].utilized;
                    }
                cprof_buf_puts(b, "{\"ph\":\"C\",\"name\":\"GPU memory pool (CUPTI)\",\"pid\":");
                cprof_buf_u64(b, r->device);
                cprof_buf_puts(b, ",\"tid\":0,\"ts\":");
                cprof_buf_us3(b, ts);
                cprof_buf_puts(b, ",\"args\":{\"pool bytes\":");
                cprof_buf_u64(b, size);
                cprof_buf_puts(b, ",\"utilized bytes\":");
                cprof_buf_u64(b, used);
                cprof_buf_puts(b, "}},\n");
                w->events++;
                maybe_flush(w);
                break;
            }
            mem_total[d] += r->u.mem.bytes;
            cprof_buf_puts(b, "{\"ph\":\"C\",\"name\":\"GPU memory (CUPTI)\",\"pid\":");
            cprof_buf_u64(b, r->device);
            cprof_buf_puts(b, ",\"tid\":0,\"ts\":");
            cprof_buf_us3(b, ts);
            cprof_buf_puts(b, ",\"args\":{\"allocated bytes\":");
            cprof_buf_i64(b, mem_total[d]);
            cprof_buf_puts(b, "}},\n");
            w->events++;
            maybe_flush(w);
            break;
        }
        default: break;
        }
        if (is_gpu_work(r) && launch) {
            /* ac2g: launch call -> GPU work, matched on the CUPTI correlation id */
            size_t li = links.launch_of[idx] - 1;
            uint64_t id = flow_used[li] ? extra_flow_id++ : r->correlation;
            flow_used[li] = 1;
            flow(w, "ac2g", "s", id, m->pid, launch->tid, (int64_t)launch->start_ns + to_base);
            flow(w, "ac2g", "f", id, r->device, r->stream, ts);
        }
        if (is_gpu_work(r) && ext && ext <= snap->nrecords && user_of[ext])
            spans[nspans++] = (span){user_of[ext], r->device, r->stream, r->start_ns, r->end_ns};
    }

    /* gpu_user_annotation: each range's GPU work, per stream, from first start to last end */
    qsort(spans, nspans, sizeof *spans, by_span_key);
    for (i = 0; i < nspans && !w->err;) {
        size_t j = i;
        uint64_t end = spans[i].end;
        while (j + 1 < nspans && spans[j + 1].ext == spans[i].ext &&
               spans[j + 1].device == spans[i].device && spans[j + 1].stream == spans[i].stream) {
            j++;
            if (spans[j].end > end) end = spans[j].end;
        }
        const cprof_record *owner = by_ext[spans[i].ext];
        event_head(w, "gpu_user_annotation", NULL, owner->name_id, spans[i].device, spans[i].stream,
                   (int64_t)spans[i].start + to_base, (int64_t)(end - spans[i].start));
        cprof_buf_puts(&w->b, "\"External id\":");
        cprof_buf_u64(&w->b, spans[i].ext);
        event_tail(w);
        i = j + 1;
    }
    free(flow_used);
out:
    free(user_of);
    free(anc);
    free(refs);
    free(spans);
    free(by_ext);
    free(by_index);
    cprof_links_free(&links);
}
