/* The Snapshot and GpuSnapshot types of cprof._C: what one window collected (CPU ranges; CUPTI's
 * records, decoded), held in C memory until written (trace write with the GIL released),
 * read back (records(), summary(), threads()) or released (close()). cprof_events_stop and
 * cprof_cupti_stop make them; module.c wraps them here (py_binding.h). */
/* CPython fixes the signatures of method and getter callbacks: many ignore an argument. */
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "py_binding.h"
#include "gpu.h"

static PyTypeObject *gpu_snapshot_type; /* strong references (the objects need their type) */
static PyTypeObject *snapshot_type;

/* ---- GPU snapshots: what CUPTI collected in a window, decoded ---- */

typedef struct {
    PyObject_HEAD
    cprof_gpu_snapshot *snap;
} GpuSnapshotObject;

static void gpu_snapshot_dealloc(GpuSnapshotObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    cprof_gpu_snapshot_free(self->snap);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static const char *const gpu_kind_names[CPROF_GPU_KIND_COUNT] = {
    "kernel", "memcpy", "memset", "runtime", "driver", "sync", "overhead", "memory", "marker",
    "cuda_event"};

/* Who held CUPTI's subscriber in the window, for the trace's metadata. */
static PyObject *subscriber_text(const cprof_gpu_snapshot *g) {
    if (!g->cupti_shared) return PyUnicode_FromString("held by cprof");
    return PyUnicode_FromFormat("shared: another client (%s) holds it; collected through the "
                                "activity API alone",
                                g->cupti_holder[0] ? g->cupti_holder : "unnamed: Kineto, "
                                                                       "presumably");
}

static PyObject *gpu_snapshot_counts(GpuSnapshotObject *self, PyObject *unused) {
    if (!self->snap) Py_RETURN_NONE;
    cprof_gpu_snapshot *g = self->snap;
    PyObject *kinds = PyDict_New();
    for (int k = 0; kinds && k < CPROF_GPU_KIND_COUNT; k++) {
        PyObject *v = PyLong_FromUnsignedLongLong(g->per_kind[k]);
        if (!v || PyDict_SetItemString(kinds, gpu_kind_names[k], v) < 0) Py_CLEAR(kinds);
        Py_XDECREF(v);
    }
    if (!kinds) return NULL;
    PyObject *counts = Py_BuildValue("{sNsKs{sKsKsKsKsK}sKsKsKsNs{sssKsI}sIsNsI}", "records", kinds,
                         "total", (unsigned long long)g->nrecords, "dropped", "cupti",
                         (unsigned long long)g->dropped_cupti, "incomplete",
                         (unsigned long long)g->dropped_incomplete, "outside_window",
                         (unsigned long long)g->dropped_outside, "decode",
                         (unsigned long long)g->dropped_decode, "buffers_refused",
                         (unsigned long long)g->buffers_refused, "pool_bytes",
                         (unsigned long long)g->pool_cap_bytes, "cupti_overhead_ns",
                         (unsigned long long)g->overhead_ns, "buffers",
                         (unsigned long long)g->buffers, "cupti_subscriber",
                         subscriber_text(g),
                         "api_records", "mode", g->api_mode ? g->api_mode : "",
                         "delivered", (unsigned long long)g->api_delivered, "ids_switched_off",
                         (unsigned)g->api_ids_off, "enable_us", (unsigned)g->enable_us,
                         "buffers_prezeroed", PyBool_FromLong(g->buffers_prezeroed),
                         "prezero_us", (unsigned)g->prezero_us);
    /* event syncs / stream waits paired with the event record they wait on (wait_on_stream) */
    PyObject *waits = counts ? Py_BuildValue("{sKsKsN}", "resolved",
                                             (unsigned long long)g->event_waits_resolved,
                                             "unresolved",
                                             (unsigned long long)g->event_waits_unresolved,
                                             "cuda_event_records", PyBool_FromLong(g->cuda_events))
                             : NULL;
    if (!waits || PyDict_SetItemString(counts, "event_waits", waits) < 0) Py_CLEAR(counts);
    Py_XDECREF(waits);
    /* left out on request (toggle_collection_dynamic), not lost: apart from "dropped" */
    PyObject *off = counts ? PyLong_FromUnsignedLongLong(g->toggled_off) : NULL;
    if (!off || PyDict_SetItemString(counts, "toggled_off", off) < 0) Py_CLEAR(counts);
    Py_XDECREF(off);
    /* what a stop could not get out of CUPTI: a failed final flush, buffers not walked to
     * their end (records lost in numbers nobody knows), NVTX ranges left open */
    PyObject *lost = counts ? Py_BuildValue("{sisKsKsKsisKsKsisi}", "flush_error",
                                            g->flush_error, "buffers_undecoded",
                                            (unsigned long long)g->buffers_undecoded,
                                            "buffers_unkept",
                                            (unsigned long long)g->buffers_unkept,
                                            "foreign_buffers",
                                            (unsigned long long)g->foreign_buffers,
                                            "undecoded_error", g->undecoded_error, "nvtx_open",
                                            (unsigned long long)g->open_markers,
                                            "drop_count_errors",
                                            (unsigned long long)g->drop_count_errors,
                                            "disable_error", g->disable_error,
                                            "unsubscribe_error", g->unsubscribe_error)
                            : NULL;
    if (!lost || PyDict_SetItemString(counts, "unrecovered", lost) < 0) Py_CLEAR(counts);
    Py_XDECREF(lost);
    return counts;
}

/* records(): every decoded record as a dict (tests, small windows). */
static PyObject *gpu_snapshot_records(GpuSnapshotObject *self, PyObject *unused) {
    PyObject *list = PyList_New(0);
    if (!list || !self->snap) return list;
    for (cprof_gpu_chunk *c = self->snap->chunks; c; c = c->next) {
        for (uint32_t k = 0; k < c->count; k++) {
            cprof_gpu_record *r = &c->rec[k];
            size_t len, alen;
            const char *s = cprof_names_get(r->name_id, &len);
            const char *a = cprof_names_get(r->aux_id, &alen);
            PyObject *item = Py_BuildValue(
                "{sssNsKsKsIsIsIsIsIsNsK}", "kind",
                gpu_kind_names[r->kind < CPROF_GPU_KIND_COUNT ? r->kind : 0], "name",
                PyUnicode_DecodeUTF8(s, (Py_ssize_t)len, "replace"), "start_ns",
                (unsigned long long)r->start_ns, "end_ns", (unsigned long long)r->end_ns,
                "correlation", r->correlation, "device", r->device, "stream", r->stream, "tid",
                r->tid, "sub", (unsigned)r->sub, "aux",
                (r->kind == CPROF_GPU_KERNEL || r->kind == CPROF_GPU_MARKER)
                    ? PyUnicode_DecodeUTF8(a, (Py_ssize_t)alen, "replace")
                    : PyLong_FromUnsignedLong(r->aux_id),
                "bytes",
                (unsigned long long)((r->kind == CPROF_GPU_MEMCPY || r->kind == CPROF_GPU_MEMSET)
                                         ? r->u.m.bytes : 0));
            if (cprof_py_list_take(list, item) < 0) {
                Py_DECREF(list);
                return NULL;
            }
        }
    }
    return list;
}

static PyObject *gpu_snapshot_close(GpuSnapshotObject *self, PyObject *unused) {
    cprof_gpu_snapshot_free(self->snap);
    self->snap = NULL;
    Py_RETURN_NONE;
}

static PyMethodDef gpu_snapshot_methods[] = {
    {"counts", (PyCFunction)gpu_snapshot_counts, METH_NOARGS, "Records per kind and drops."},
    {"records", (PyCFunction)gpu_snapshot_records, METH_NOARGS, "All records as dicts."},
    {"close", (PyCFunction)gpu_snapshot_close, METH_NOARGS, "Releases the memory now."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot gpu_snapshot_slots[] = {
    {Py_tp_doc, "What CUPTI collected in one window, decoded (held in C memory)."},
    {Py_tp_dealloc, gpu_snapshot_dealloc},
    {Py_tp_methods, gpu_snapshot_methods},
    {0, NULL},
};

static PyType_Spec gpu_snapshot_spec = {
    .name = "cprof._C.GpuSnapshot",
    .basicsize = sizeof(GpuSnapshotObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = gpu_snapshot_slots,
};

/* ---- snapshots: what a window collected, written to a file with the GIL released ---- */

typedef struct {
    PyObject_HEAD
    cprof_snapshot *snap;
    PyObject *last_write; /* write()'s result once a write succeeded: an interrupt raised as it
                           * returns must not make the caller write the trace a second time */
} SnapshotObject;

static void snapshot_dealloc(SnapshotObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    Py_CLEAR(self->last_write);
    if (self->snap) {
        cprof_snapshot *s = self->snap;
        self->snap = NULL;
        Py_BEGIN_ALLOW_THREADS cprof_snapshot_free(s);
        Py_END_ALLOW_THREADS
    }
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static int snapshot_check(SnapshotObject *self) {
    if (!self->snap) {
        cprof_py_raise(PyType_GetModule(Py_TYPE(self)), CPROF_E_STATE,
                       "this snapshot was released with close()");
        return -1;
    }
    return 0;
}

static PyObject *snapshot_close(SnapshotObject *self, PyObject *unused) {
    if (self->snap) {
        cprof_snapshot *s = self->snap;
        self->snap = NULL;
        Py_BEGIN_ALLOW_THREADS cprof_snapshot_free(s);
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

/* write(stem, suffix, *, gzip=6, pid, process_name, rank, world_size, backend, extra_json,
 *       device_props_json, replace=False, gpu=None, top_json=None, mem=None, mem_heap=False,
 *       link_modules=False, mem_events=None, dist_json=None, module_ranges=True)
 * stem and suffix: str or bytes, as file names (a directory or name that is not UTF-8 is
 * written as its bytes; the path returned is os.fsdecode's str).
 * Writes to stem+suffix, or stem-1+suffix, stem-2+suffix... if taken (never overwrites unless
 * replace). Returns (path, events, bytes, seconds, replaced_chars). The snapshot is kept, so a
 * failed write can be retried elsewhere. */
static PyObject *snapshot_write_fs(SnapshotObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"stem",    "suffix",      "gzip",     "pid",
                             "process_name", "rank",   "world_size", "backend",
                             "extra_json",   "device_props_json", "replace", "gpu",
                             "top_json",     "mem",         "mem_heap", "link_modules",
                             "mem_events",   "dist_json",   "module_ranges", NULL};
    const char *stem, *suffix, *process_name = "python", *backend = NULL, *extra = NULL,
                                *devprops = NULL, *top = NULL, *dist = NULL;
    int gzip = 6, rank = 0, world = 1, replace = 0;
    long long pid = getpid();
    PyObject *gpu_obj = Py_None, *mem_obj = Py_None, *mev_obj = Py_None;
    int mem_heap = 0, link_modules = 0, module_ranges = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "yy|$iLsiizzzpOzOppOzp", kwlist, &stem, &suffix,
                                     &gzip, &pid, &process_name, &rank, &world, &backend, &extra,
                                     &devprops, &replace, &gpu_obj, &top, &mem_obj, &mem_heap,
                                     &link_modules, &mev_obj, &dist, &module_ranges))
        return NULL;
    if (mev_obj != Py_None &&
        (!PyBytes_Check(mev_obj) || PyBytes_GET_SIZE(mev_obj) % sizeof(cprof_mem_event))) {
        PyErr_SetString(PyExc_TypeError, "mem_events must be the bytes mem_events_stop() gave");
        return NULL;
    }
    if (mem_obj != Py_None &&
        (!PyBytes_Check(mem_obj) || PyBytes_GET_SIZE(mem_obj) % sizeof(cprof_mem_sample))) {
        PyErr_SetString(PyExc_TypeError, "mem must be the bytes mem_sampler_stop() returned");
        return NULL;
    }
    if (snapshot_check(self) < 0) return NULL;
    PyObject *module = PyType_GetModule(Py_TYPE(self));
    const cprof_gpu_snapshot *gpu = NULL;
    if (gpu_obj != Py_None) {
        if (!PyObject_TypeCheck(gpu_obj, gpu_snapshot_type)) {
            PyErr_SetString(PyExc_TypeError, "gpu must be a GpuSnapshot or None");
            return NULL;
        }
        gpu = ((GpuSnapshotObject *)gpu_obj)->snap;
        if (!gpu) {
            cprof_py_raise(module, CPROF_E_STATE, "the GPU snapshot was released with close()");
            return NULL;
        }
    }
    if (gzip < 0 || gzip > 9) {
        PyErr_SetString(PyExc_ValueError, "gzip level must be 0 (plain) to 9");
        return NULL;
    }
    for (int k = 0; k < 2; k++) {
        int mrc = cprof_meta_members_check(k ? dist : top);
        if (mrc == CPROF_E_NOMEM) return PyErr_NoMemory();
        if (mrc) {
            PyErr_Format(PyExc_ValueError, "%s must be JSON object members (\"k\":v,...)",
                         k ? "dist_json" : "top_json");
            return NULL;
        }
    }
    /* the metadata object (cJSON) */
    char *meta_json = NULL;
    int rc = cprof_meta_json(self->snap, extra, &meta_json);
    if (rc) return cprof_py_raise(module, rc, "building trace metadata");

    /* pick the first free name; link() in commit settles races */
    size_t cap = strlen(stem) + strlen(suffix) + 32;
    char *path = PyMem_Malloc(cap);
    if (!path) {
        free(meta_json);
        return PyErr_NoMemory();
    }
    cprof_trace_meta m = {
        .pid = pid,
        .process_name = process_name,
        .rank = rank,
        .world_size = world,
        .backend = backend,
        .dist_json = dist,
        .trace_name = path,
        .cprof_json = meta_json,
        .device_props_json = devprops,
        .top_json = top,
        .mem = mem_obj == Py_None ? NULL : (const cprof_mem_sample *)PyBytes_AS_STRING(mem_obj),
        .nmem = mem_obj == Py_None ? 0
                                   : (size_t)PyBytes_GET_SIZE(mem_obj) / sizeof(cprof_mem_sample),
        .mem_has_heap = mem_heap,
        .link_modules = link_modules,
        .module_ranges = module_ranges,
        .mev = mev_obj == Py_None ? NULL : (const cprof_mem_event *)PyBytes_AS_STRING(mev_obj),
        .nmev = mev_obj == Py_None
                    ? 0
                    : (size_t)PyBytes_GET_SIZE(mev_obj) / sizeof(cprof_mem_event),
    };
    /* ts values relative to the window's start second: small numbers keep ns precision for
     * readers that parse ts as a double */
    int64_t start_unix = (int64_t)self->snap->start_ns + self->snap->unix_offset_ns;
    m.base_time_ns = start_unix - (start_unix % 1000000000ll);

    cprof_write_stats stats = {0};
    int err_no = 0, attempt = 0;
    double seconds = 0.0;
    struct timespec t0, t1;
    cprof_sink *sink = NULL;
    Py_BEGIN_ALLOW_THREADS
    clock_gettime(CLOCK_MONOTONIC, &t0);
    snprintf(path, cap, "%s%s", stem, suffix);
    struct stat sb;
    /* an existing device or FIFO (/dev/null) is written into: not a name to avoid */
    int stream = stat(path, &sb) == 0 && !S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode);
    for (attempt = 1; !replace && !stream && access(path, F_OK) == 0 && attempt < 100000;
         attempt++)
        snprintf(path, cap, "%s-%d%s", stem, attempt, suffix);
    rc = cprof_sink_open(&sink, path, gzip, &err_no);
    if (!rc) rc = cprof_trace_write(sink, self->snap, gpu, &m, &stats);
    if (!rc) rc = cprof_sink_finish(sink, &err_no);
    else if (sink && !err_no) cprof_sink_finish(sink, &err_no); /* fetch the sink's errno */
    while (!rc) {
        rc = cprof_sink_commit(sink, path, replace, &err_no);
        if (rc != CPROF_E_EXISTS || attempt >= 100000) break;
        snprintf(path, cap, "%s-%d%s", stem, attempt++, suffix); /* lost a race: next name */
        rc = CPROF_OK;
    }
    cprof_sink_abort(sink); /* removes the temp file if it is still there */
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!rc && stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) stats.bytes = (uint64_t)sb.st_size;
    Py_END_ALLOW_THREADS
    seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    free(meta_json);
    if (rc) {
        char what[512];
        snprintf(what, sizeof what, "could not write the trace %s: %s", path,
                 err_no ? strerror(err_no) : cprof_strerror(rc));
        PyMem_Free(path);
        return cprof_py_raise_errno(module, rc, what, err_no);
    }
    PyObject *res = Py_BuildValue("(NKKdn)", PyUnicode_DecodeFSDefault(path),
                                  (unsigned long long)stats.events,
                                  (unsigned long long)stats.bytes, seconds,
                                  (Py_ssize_t)stats.replaced_chars);
    PyMem_Free(path);
    if (res) Py_XSETREF(self->last_write, Py_NewRef(res));
    return res;
}

/* write() taking stem and suffix as str too: encoded as os.fsencode does them */
static PyObject *snapshot_write(SnapshotObject *self, PyObject *args, PyObject *kwds) {
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    PyObject *fs = PyTuple_New(n);
    if (!fs) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyTuple_GET_ITEM(args, i);
        a = i < 2 && PyUnicode_Check(a) ? PyUnicode_EncodeFSDefault(a) : Py_NewRef(a);
        if (!a) {
            Py_DECREF(fs);
            return NULL;
        }
        PyTuple_SET_ITEM(fs, i, a);
    }
    PyObject *res = snapshot_write_fs(self, fs, kwds);
    Py_DECREF(fs);
    return res;
}

static PyObject *snapshot_threads(SnapshotObject *self, PyObject *unused) {
    if (snapshot_check(self) < 0) return NULL;
    uint32_t kseq, kfwd;
    cprof_events_seq_keys(&kseq, &kfwd);
    PyObject *list = PyList_New(0);
    if (!list) return NULL;
    for (size_t i = 0; i < self->snap->nthreads; i++) {
        cprof_thread_data *t = &self->snap->threads[i];
        PyObject *item = Py_BuildValue("{sKsKsKsK}", "tid", (unsigned long long)t->tid, "ident",
                                       (unsigned long long)t->ident, "ranges",
                                       (unsigned long long)t->nrecords, "dropped",
                                       (unsigned long long)t->dropped);
        if (cprof_py_list_take(list, item) < 0) {
            Py_DECREF(list);
            return NULL;
        }
    }
    return list;
}

/* last_event_ns(tid, cat, before_ns): the latest time (cprof clock) a range of category cat on
 * OS thread tid began or ended before before_ns (an end a stop gave a range still open does
 * not count: the window's, flagged truncated, or the tracer's for the frames still running,
 * at or after before_ns), or None: where that thread's events of cat stopped, for a window's
 * note that another profile function took over its tracer. One pass over that thread's
 * records, in C. */
static PyObject *snapshot_last_event_ns(SnapshotObject *self, PyObject *args) {
    unsigned long long tid, before;
    int cat;
    if (!PyArg_ParseTuple(args, "KiK:last_event_ns", &tid, &cat, &before)) return NULL;
    if (snapshot_check(self) < 0) return NULL;
    uint64_t last = 0;
    for (size_t i = 0; i < self->snap->nthreads; i++) {
        cprof_thread_data *t = &self->snap->threads[i];
        if (t->tid != tid) continue;
        for (cprof_chunk *c = t->chunks; c; c = c->next)
            for (uint32_t k = 0; k < c->count; k++) {
                const cprof_record *r = &c->rec[k];
                if (r->cat != cat) continue;
                uint64_t at = r->end_ns;
                if ((r->flags & CPROF_REC_TRUNCATED) || at >= before || at < r->begin_ns)
                    at = r->begin_ns;
                if (at >= before) continue;
                if (at > last) last = at;
            }
    }
    if (!last) Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(last);
}

/* rename_threads({ident: name}): names threads in the trace (threading names, resolved once at
 * stop instead of on every push). */
static PyObject *snapshot_rename_threads(SnapshotObject *self, PyObject *mapping) {
    if (snapshot_check(self) < 0) return NULL;
    PyObject *module = PyType_GetModule(Py_TYPE(self));
    if (!PyDict_Check(mapping)) {
        PyErr_SetString(PyExc_TypeError, "rename_threads takes a dict {ident: name}");
        return NULL;
    }
    for (size_t i = 0; i < self->snap->nthreads; i++) {
        cprof_thread_data *t = &self->snap->threads[i];
        PyObject *key = PyLong_FromUnsignedLongLong(t->ident);
        if (!key) return NULL;
        PyObject *name = PyDict_GetItemWithError(mapping, key);
        Py_DECREF(key);
        if (!name) {
            if (PyErr_Occurred()) return NULL;
            continue;
        }
        uint32_t id;
        if (cprof_py_name_id(module, name, &id) < 0) return NULL;
        t->name_id = id;
    }
    Py_RETURN_NONE;
}

/* records(args=False): every range as a tuple (tid, name, category, begin_ns, end_ns, depth,
 * truncated), begin/end on the cprof clock; with args, five more members: the range's JSON args
 * fragment (record_shapes' "Input Dims", ...) as a str, or None; an operator's sequence number
 * (-1: none) and forward thread id; 1 for an nn.Module call's range; 1 for an async range
 * (CPROF_REC_ASYNC: ended on another thread, or a torch async RecordFunction). Invalid UTF-8 (a lone surrogate
 * given as a name) reads as U+FFFD, as the trace writes it. For results and tests; the
 * trace is the bulk path. */
static PyObject *snapshot_records(SnapshotObject *self, PyObject *pargs, PyObject *kw) {
    static char *kwlist[] = {"args", NULL};
    int with_args = 0;
    if (!PyArg_ParseTupleAndKeywords(pargs, kw, "|p:records", kwlist, &with_args)) return NULL;
    if (snapshot_check(self) < 0) return NULL;
    uint32_t kseq, kfwd;
    cprof_events_seq_keys(&kseq, &kfwd);
    PyObject *list = PyList_New(0);
    if (!list) return NULL;
    for (size_t i = 0; i < self->snap->nthreads; i++) {
        cprof_thread_data *t = &self->snap->threads[i];
        for (cprof_chunk *c = t->chunks; c; c = c->next) {
            for (uint32_t k = 0; k < c->count; k++) {
                cprof_record *r = &c->rec[k];
                size_t len;
                const char *s = cprof_names_get(r->name_id, &len);
                PyObject *name = PyUnicode_DecodeUTF8(s, (Py_ssize_t)len, "replace");
                if (!name) goto fail;
                PyObject *frag = NULL;
                if (with_args && (r->flags & CPROF_REC_RAW_ARGS)) {
                    const char *f = cprof_names_get((uint32_t)r->reserved, &len);
                    frag = PyUnicode_DecodeUTF8(f, (Py_ssize_t)len, "replace");
                    if (!frag) {
                        Py_DECREF(name);
                        goto fail;
                    }
                } else if (with_args) {
                    frag = Py_NewRef(Py_None);
                }
                /* an operator's sequence number and forward thread id (events.c), or -1 */
                long long seq = -1, fwd = 0;
                if (with_args && kfwd && r->nargs == 2 && r->arg_key[0] == kseq &&
                    r->arg_key[1] == kfwd) {
                    seq = (long long)r->arg_val[0];
                    fwd = (long long)r->arg_val[1];
                }
                PyObject *item = Py_BuildValue(
                    with_args ? "(KNiKKiiNLLii)" : "(KNiKKii)", (unsigned long long)t->tid, name,
                    (int)r->cat, (unsigned long long)r->begin_ns, (unsigned long long)r->end_ns,
                    (int)r->depth, (int)((r->flags & CPROF_REC_TRUNCATED) != 0), frag, seq, fwd,
                    (int)((r->flags & CPROF_REC_MODULE) != 0),
                    (int)((r->flags & CPROF_REC_ASYNC) != 0));
                if (cprof_py_list_take(list, item) < 0) goto fail;
            }
        }
    }
    return list;
fail:
    Py_DECREF(list);
    return NULL;
}

/* Rows whose names differ only in invalid UTF-8 (lone surrogates given as names) read as one
 * name once it is replaced by U+FFFD, as the trace, events() and key_averages() show it: they
 * are merged, one row per shown name and category (decision 161). Only names that hold
 * U+FFFD once decoded can share one. Returns 0, or -1 with an exception set. */
static int summary_merge_replaced(cprof_summary_row *rows, size_t *n) {
    PyObject *first = NULL; /* (name, category) -> index of its first row */
    size_t *into = NULL;
    int rc = -1;
    for (size_t i = 0; i < *n; i++) {
        size_t len;
        const char *s = cprof_names_get(rows[i].name_id, &len);
        PyObject *name = PyUnicode_DecodeUTF8(s, (Py_ssize_t)len, "replace");
        if (!name) goto out;
        Py_ssize_t at = PyUnicode_FindChar(name, 0xfffd, 0, PY_SSIZE_T_MAX, 1);
        if (at < 0) {
            Py_DECREF(name);
            if (at == -2) goto out;
            continue;
        }
        if (!into) {
            into = PyMem_Malloc(*n * sizeof *into);
            first = PyDict_New();
            if (!into || !first) {
                Py_DECREF(name);
                if (!into) PyErr_NoMemory();
                goto out;
            }
            for (size_t k = 0; k < *n; k++) into[k] = k;
        }
        PyObject *key = Py_BuildValue("(Ni)", name, (int)rows[i].cat);
        if (!key) goto out;
        PyObject *row = PyDict_GetItemWithError(first, key); /* borrowed */
        if (row) {
            into[i] = PyLong_AsSize_t(row);
        } else if (!PyErr_Occurred()) {
            PyObject *idx = PyLong_FromSize_t(i);
            if (idx) PyDict_SetItem(first, key, idx);
            Py_XDECREF(idx);
        }
        Py_DECREF(key);
        if (PyErr_Occurred()) goto out;
    }
    if (into) cprof_summary_merge(rows, n, into);
    rc = 0;
out:
    Py_XDECREF(first);
    PyMem_Free(into);
    return rc;
}

/* summary(): per (name, category) aggregates, heaviest first, computed in C. */
static PyObject *snapshot_summary(SnapshotObject *self, PyObject *unused) {
    if (snapshot_check(self) < 0) return NULL;
    static const char *const cat_names[CPROF_CAT_COUNT] = {"user_annotation", "cpu_op",
                                                           "python_function", "step"};
    cprof_summary_row *rows = NULL;
    size_t n = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = cprof_summary_build(self->snap, &rows, &n);
    Py_END_ALLOW_THREADS
    if (rc) return cprof_py_raise(PyType_GetModule(Py_TYPE(self)), rc, "summary");
    if (summary_merge_replaced(rows, &n) < 0) {
        free(rows);
        return NULL;
    }
    PyObject *list = PyList_New(0);
    for (size_t i = 0; list && i < n; i++) {
        size_t len;
        const char *s = cprof_names_get(rows[i].name_id, &len);
        PyObject *name = PyUnicode_DecodeUTF8(s, (Py_ssize_t)len, "replace");
        PyObject *item = name ? Py_BuildValue(
            "{sNsssKsKsKsKsK}", "name", name, "category", cat_names[rows[i].cat], "count",
            (unsigned long long)rows[i].count, "total_ns", (unsigned long long)rows[i].total_ns,
            "self_ns", (unsigned long long)rows[i].self_ns, "min_ns",
            (unsigned long long)rows[i].min_ns, "max_ns", (unsigned long long)rows[i].max_ns)
                              : NULL;
        if (cprof_py_list_take(list, item) < 0) Py_CLEAR(list);
    }
    free(rows);
    return list;
}

#define SNAP_GETTER(field)                                                                     \
    static PyObject *snapshot_get_##field(SnapshotObject *self, void *c) {                     \
        if (snapshot_check(self) < 0) return NULL;                                             \
        return PyLong_FromUnsignedLongLong((unsigned long long)self->snap->field);             \
    }
SNAP_GETTER(nrecords)
SNAP_GETTER(dropped)
SNAP_GETTER(truncated)
SNAP_GETTER(toggled_off)
SNAP_GETTER(start_ns)
SNAP_GETTER(stop_ns)
SNAP_GETTER(window_id)

/* The earliest range's begin (records are in begin order per thread), else start_ns: another
 * thread may record while cprof's start enables CUPTI, before the window's restamped start. */
static PyObject *snapshot_get_first_ns(SnapshotObject *self, void *c) {
    (void)c;
    if (snapshot_check(self) < 0) return NULL;
    uint64_t first = self->snap->start_ns;
    for (size_t t = 0; t < self->snap->nthreads; t++) {
        const cprof_chunk *ch = self->snap->threads[t].chunks;
        if (ch && ch->count && ch->rec[0].begin_ns < first) first = ch->rec[0].begin_ns;
    }
    return PyLong_FromUnsignedLongLong((unsigned long long)first);
}

static PyObject *snapshot_get_unix_offset(SnapshotObject *self, void *c) {
    if (snapshot_check(self) < 0) return NULL;
    return PyLong_FromLongLong((long long)self->snap->unix_offset_ns);
}

static PyMethodDef snapshot_methods[] = {
    {"write", (PyCFunction)(void (*)(void))snapshot_write, METH_VARARGS | METH_KEYWORDS,
     "Writes the trace (GIL released); returns (path, events, bytes, seconds, replaced)."},
    {"threads", (PyCFunction)snapshot_threads, METH_NOARGS, "Per-thread counts."},
    {"rename_threads", (PyCFunction)snapshot_rename_threads, METH_O, "Names threads by ident."},
    {"last_event_ns", (PyCFunction)snapshot_last_event_ns, METH_VARARGS,
     "last_event_ns(tid, cat, before_ns): when thread tid's last range of category cat began "
     "or ended before before_ns (cprof clock; truncated ends not counted), or None."},
    {"records", (PyCFunction)(void (*)(void))snapshot_records, METH_VARARGS | METH_KEYWORDS,
     "records(args=False): all ranges as tuples (with args: their JSON args fragment, sequence "
     "number, forward thread id and module flag last)."},
    {"summary", (PyCFunction)snapshot_summary, METH_NOARGS, "Per-name aggregates."},
    {"close", (PyCFunction)snapshot_close, METH_NOARGS, "Releases the memory now."},
    {NULL, NULL, 0, NULL},
};

static PyObject *snapshot_get_last_write(SnapshotObject *self, void *c) {
    (void)c;
    return Py_NewRef(self->last_write ? self->last_write : Py_None);
}

static PyGetSetDef snapshot_getset[] = {
    {"ranges", (getter)snapshot_get_nrecords, NULL, "Ranges stored.", NULL},
    {"dropped", (getter)snapshot_get_dropped, NULL, "Ranges dropped (memory cap).", NULL},
    {"truncated", (getter)snapshot_get_truncated, NULL, "Ranges closed by the window end.", NULL},
    {"toggled_off", (getter)snapshot_get_toggled_off, NULL,
     "Ranges not recorded while CPU collection was toggled off.", NULL},
    {"start_ns", (getter)snapshot_get_start_ns, NULL, "Window start, cprof clock.", NULL},
    {"stop_ns", (getter)snapshot_get_stop_ns, NULL, "Window stop, cprof clock.", NULL},
    {"first_ns", (getter)snapshot_get_first_ns, NULL,
     "The earliest range's begin, or start_ns if none is earlier (cprof clock).", NULL},
    {"window_id", (getter)snapshot_get_window_id, NULL, "Window number in this process.", NULL},
    {"last_write", (getter)snapshot_get_last_write, NULL,
     "The last successful write()'s result, or None.", NULL},
    {"unix_offset_ns", (getter)snapshot_get_unix_offset, NULL, "cprof clock + this = Unix ns.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot snapshot_slots[] = {
    {Py_tp_doc, "What one profiling window collected (held in C memory)."},
    {Py_tp_dealloc, snapshot_dealloc},
    {Py_tp_methods, snapshot_methods},
    {Py_tp_getset, snapshot_getset},
    {0, NULL},
};

static PyType_Spec snapshot_spec = {
    .name = "cprof._C.Snapshot",
    .basicsize = sizeof(SnapshotObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = snapshot_slots,
};

/* ---- made by module.c's stop() and gpu_stop() ---- */

PyObject *cprof_py_snapshot_wrap(cprof_snapshot *snap) {
    SnapshotObject *obj = PyObject_New(SnapshotObject, snapshot_type);
    if (!obj) {
        cprof_snapshot_free(snap);
        return NULL;
    }
    obj->snap = snap;
    obj->last_write = NULL;
    return (PyObject *)obj;
}

PyObject *cprof_py_gpu_snapshot_wrap(cprof_gpu_snapshot *snap) {
    GpuSnapshotObject *obj = PyObject_New(GpuSnapshotObject, gpu_snapshot_type);
    if (!obj) {
        cprof_gpu_snapshot_free(snap);
        return NULL;
    }
    obj->snap = snap;
    return (PyObject *)obj;
}

static int add_type(PyObject *m, PyType_Spec *spec, const char *name, PyTypeObject **slot) {
    PyObject *tp = PyType_FromModuleAndSpec(m, spec, NULL);
    if (!tp) return -1;
    int rc = PyModule_AddObjectRef(m, name, tp);
    if (rc == 0) Py_XSETREF(*slot, (PyTypeObject *)tp); /* ours: `del _C.Snapshot` cannot free it */
    else Py_DECREF(tp);
    return rc;
}

int cprof_py_snapshot_add(PyObject *m) {
    if (add_type(m, &snapshot_spec, "Snapshot", &snapshot_type) < 0) return -1;
    return add_type(m, &gpu_snapshot_spec, "GpuSnapshot", &gpu_snapshot_type);
}
