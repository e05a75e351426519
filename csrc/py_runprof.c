/* The binding of the run/step Profiler (cprof/runprof.py): the BucketTimer type behind
 * `with cuda_bucket_timer(name):` and friends, the gate the Profiler opens at step begin (which
 * domains time, CUDA or host, on which stream, for which step) and closes at step end, so that
 * outside a step a timer costs one check; and thin wrappers over cuda_timers.c and runstats.c.
 * Everything runs with the GIL held; resolving and synchronising release it. */
/* CPython fixes the signatures of method and getter callbacks: many ignore an argument. */
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define PY_SSIZE_T_CLEAN
#include "py_binding.h" /* Python.h first */

#include <math.h>
#include <stdlib.h>

#include "cprof.h"
#include "runstats.h"

static struct {
    int on[CPROF_DOMAIN_COUNT];
    int cuda[CPROF_DOMAIN_COUNT];
    uintptr_t stream;
    uint64_t step;
} gate;

#define NO_SLOT UINT32_MAX

typedef struct {
    PyObject_HEAD
    PyObject *name;
    uint32_t name_id;
    uint32_t slot;
    uint8_t domain;
    uint8_t pushed;
    uint8_t own_stream; /* 1: recorded on stream, not on the step's stream */
    uint8_t nested;     /* entered inside a region of its own bucket: times nothing */
    uint8_t tracked;    /* counted in this thread's open-bucket table */
    uintptr_t stream;
} BucketTimerObject;

/* The buckets open on this thread in the current step, with their depth: a region of a bucket
 * already open (a user's timer around a call attach_engine / attach_model already times into
 * the same bucket) would count that time twice, so it times nothing. Entries of an earlier
 * step are stale (a timer entered and never exited) and are dropped when met. */
#define OPEN_BUCKETS_MAX 16
static _Thread_local struct open_bucket {
    uint64_t step;
    uint32_t name_id, depth;
    uint8_t domain;
} open_b[OPEN_BUCKETS_MAX];
static _Thread_local uint32_t n_open_b;

/* 1 when (domain, name_id) is already open on this thread in this step (its depth grows), 0
 * when it is now open once; *tracked 0 when the table is full (not counted either way). */
static int bucket_open(uint32_t name_id, uint8_t domain, uint8_t *tracked) {
    for (uint32_t i = 0; i < n_open_b;) {
        struct open_bucket *o = &open_b[i];
        if (o->step != gate.step) {
            open_b[i] = open_b[--n_open_b];
            continue;
        }
        if (o->name_id == name_id && o->domain == domain) {
            o->depth++;
            *tracked = 1;
            return 1;
        }
        i++;
    }
    *tracked = n_open_b < OPEN_BUCKETS_MAX;
    if (*tracked) open_b[n_open_b++] = (struct open_bucket){gate.step, name_id, 1, domain};
    return 0;
}

static void bucket_close(uint32_t name_id, uint8_t domain) {
    for (uint32_t i = 0; i < n_open_b; i++) {
        struct open_bucket *o = &open_b[i];
        if (o->name_id == name_id && o->domain == domain && o->step == gate.step) {
            if (--o->depth == 0) open_b[i] = open_b[--n_open_b];
            return;
        }
    }
}

static PyTypeObject *timer_type; /* the module's BucketTimer (a strong reference) */

static PyObject *timer_make(PyObject *module, PyTypeObject *tp, PyObject *name, int domain) {
    if (!PyUnicode_Check(name))
        return PyErr_Format(PyExc_TypeError, "a bucket name must be a str, not %.100s",
                            Py_TYPE(name)->tp_name);
    if (PyUnicode_GET_LENGTH(name) == 0)
        return PyErr_Format(PyExc_ValueError, "a bucket name must not be empty; name the "
                            "region it times (such as 'attn.compute' or 'sampler')");
    uint32_t id;
    if (cprof_py_name_id(module, name, &id) < 0) return NULL;
    BucketTimerObject *self = (BucketTimerObject *)tp->tp_alloc(tp, 0);
    if (!self) return NULL;
    self->name = Py_NewRef(name);
    self->name_id = id;
    self->domain = (uint8_t)domain;
    self->slot = NO_SLOT;
    return (PyObject *)self;
}

static PyObject *timer_new(PyTypeObject *tp, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"bucket", "domain", NULL};
    PyObject *name;
    int domain = CPROF_DOMAIN_MODEL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|i", kwlist, &name, &domain)) return NULL;
    if (domain < 0 || domain >= CPROF_DOMAIN_COUNT) {
        PyErr_SetString(PyExc_ValueError, "domain must be 0 (model) or 1 (engine)");
        return NULL;
    }
    PyObject *module = PyType_GetModule(tp);
    return module ? timer_make(module, tp, name, domain) : NULL;
}

/* A stream given to cuda_bucket_timer(bucket, stream=...): a torch.cuda.Stream (its
 * cuda_stream handle) or a raw handle (int); None: the step's (current) stream. 0 and *out /
 * *given, or -1 with an exception set. */
static int stream_arg(PyObject *s, uintptr_t *out, int *given) {
    *given = 0;
    if (s == Py_None) return 0;
    PyObject *h = PyLong_Check(s) ? Py_NewRef(s) : PyObject_GetAttrString(s, "cuda_stream");
    if (!h) {
        PyErr_Format(PyExc_TypeError, "stream must be a torch.cuda.Stream, a CUDA stream handle "
                     "(int) or None, not %.100s", Py_TYPE(s)->tp_name);
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(h);
    Py_DECREF(h);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_SetString(PyExc_ValueError, "stream: a CUDA stream handle is an int >= 0");
        return -1;
    }
    *out = (uintptr_t)v;
    *given = 1;
    return 0;
}

/* The slow path of cuda_bucket_timer: bucket by position or keyword, and stream=. */
static PyObject *model_timer_parsed(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames) {
    PyObject *bucket = nargs >= 1 ? args[0] : NULL, *stream = Py_None;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs > 2) goto usage;
    if (nargs == 2) stream = args[1];
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_CompareWithASCIIString(k, "bucket") == 0 && !bucket) bucket = args[nargs + i];
        else if (PyUnicode_CompareWithASCIIString(k, "stream") == 0 && nargs < 2)
            stream = args[nargs + i];
        else goto usage;
    }
    if (!bucket) goto usage;
    uintptr_t s = 0;
    int given = 0;
    if (stream_arg(stream, &s, &given) < 0) return NULL;
    BucketTimerObject *t =
        (BucketTimerObject *)timer_make(module, timer_type, bucket, CPROF_DOMAIN_MODEL);
    if (t) {
        t->own_stream = (uint8_t)given;
        t->stream = s;
    }
    return (PyObject *)t;
usage:
    PyErr_SetString(PyExc_TypeError, "cuda_bucket_timer(bucket, stream=None): the bucket name, "
                                     "and optionally the CUDA stream to record on");
    return NULL;
}

/* cprof.cuda_bucket_timer(bucket) / the engine domain's: one positional argument takes no
 * parsing at all, the per-region path of the Profiler (issue 4 counts every ns of it);
 * bucket= as a keyword works too. */
static PyObject *bucket_arg(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                            const char *fn) {
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (CPROF_LIKELY(nargs == 1 && nkw == 0)) return args[0];
    if (nargs == 0 && nkw == 1 &&
        PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "bucket") == 0)
        return args[0];
    PyErr_Format(PyExc_TypeError, "%s() takes one argument, the bucket name (bucket=...)", fn);
    return NULL;
}

static PyObject *mod_model_timer(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames) {
    Py_ssize_t n = PyVectorcall_NARGS(nargs);
    if (CPROF_LIKELY(n == 1 && !kwnames))
        return timer_make(module, timer_type, args[0], CPROF_DOMAIN_MODEL);
    return model_timer_parsed(module, args, n, kwnames);
}

static PyObject *mod_engine_timer(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames) {
    PyObject *b = bucket_arg(args, PyVectorcall_NARGS(nargs), kwnames, "engine_timer");
    return b ? timer_make(module, timer_type, b, CPROF_DOMAIN_ENGINE) : NULL;
}

static void timer_dealloc(BucketTimerObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    Py_CLEAR(self->name);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *timer_enter(BucketTimerObject *self, PyObject *unused) {
    self->slot = NO_SLOT;
    self->pushed = 0;
    self->tracked = 0;
    if (!gate.on[self->domain]) return Py_NewRef(self);
    if (cprof_events_active() &&
        cprof_events_push_named(self->name_id, CPROF_CAT_USER_ANNOTATION, self->name_id) == 0)
        self->pushed = 1; /* the bucket shows in an open cprof trace too */
    self->nested = (uint8_t)bucket_open(self->name_id, self->domain, &self->tracked);
    if (self->nested) return Py_NewRef(self); /* the enclosing region times it already */
    uint32_t slot;
    uintptr_t stream = self->own_stream ? self->stream : gate.stream;
    int rc = cprof_timer_begin(gate.cuda[self->domain], stream, &slot);
    if (rc == CPROF_OK) self->slot = slot;
    else if (rc == CPROF_E_UNAVAILABLE) cprof_timers_lost(gate.step); /* counted, with why */
    return Py_NewRef(self);
}

static PyObject *timer_exit(BucketTimerObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (self->tracked) {
        bucket_close(self->name_id, self->domain);
        self->tracked = 0;
    }
    if (self->slot != NO_SLOT) {
        if (cprof_timer_end(self->slot, self->own_stream ? self->stream : gate.stream,
                            self->domain, self->name_id, gate.step) == CPROF_E_UNAVAILABLE)
            cprof_timers_lost(gate.step);
        self->slot = NO_SLOT;
    }
    if (self->pushed) {
        cprof_events_pop_named(self->name_id, CPROF_CAT_USER_ANNOTATION);
        self->pushed = 0;
    }
    Py_RETURN_FALSE;
}

static PyObject *timer_get_name(BucketTimerObject *self, void *c) { return Py_NewRef(self->name); }
static PyObject *timer_get_domain(BucketTimerObject *self, void *c) {
    return PyLong_FromLong(self->domain);
}

static PyMethodDef timer_methods[] = {
    {"__enter__", (PyCFunction)timer_enter, METH_NOARGS, "Starts timing if the gate is open."},
    {"__exit__", (PyCFunction)(void (*)(void))timer_exit, METH_FASTCALL, "Stops timing."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef timer_getset[] = {
    {"bucket", (getter)timer_get_name, NULL, "The bucket name.", NULL},
    {"domain", (getter)timer_get_domain, NULL, "0 model, 1 engine.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot timer_slots[] = {
    {Py_tp_doc, "BucketTimer(bucket, domain=0): times a region into a Profiler bucket."},
    {Py_tp_new, timer_new},
    {Py_tp_dealloc, timer_dealloc},
    {Py_tp_methods, timer_methods},
    {Py_tp_getset, timer_getset},
    {0, NULL},
};

static PyType_Spec timer_spec = {
    .name = "cprof._C.BucketTimer",
    .basicsize = sizeof(BucketTimerObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = timer_slots,
};

/* timers_gate(model_on, engine_on, model_cuda, engine_cuda, stream, step) */
static PyObject *mod_timers_gate(PyObject *module, PyObject *args) {
    int mon, eon, mcuda, ecuda;
    unsigned long long stream, step;
    if (!PyArg_ParseTuple(args, "ppppKK", &mon, &eon, &mcuda, &ecuda, &stream, &step))
        return NULL;
    gate.on[CPROF_DOMAIN_MODEL] = mon;
    gate.on[CPROF_DOMAIN_ENGINE] = eon;
    gate.cuda[CPROF_DOMAIN_MODEL] = mcuda;
    gate.cuda[CPROF_DOMAIN_ENGINE] = ecuda;
    gate.stream = (uintptr_t)stream;
    gate.step = step;
    Py_RETURN_NONE;
}

/* timers_cuda_init(device=0): device is torch's current device on this thread, whose primary
 * context a thread with none current falls back to. */
static PyObject *mod_timers_cuda_init(PyObject *module, PyObject *args) {
    int rc, device = 0;
    if (!PyArg_ParseTuple(args, "|i", &device)) return NULL;
    Py_BEGIN_ALLOW_THREADS rc = cprof_timers_cuda_init(device);
    Py_END_ALLOW_THREADS
    if (rc) return Py_BuildValue("(Os)", Py_False, cprof_timers_error());
    return Py_BuildValue("(Oz)", Py_True, NULL);
}

/* timer_begin(cuda, stream, step) -> slot, or None when CUDA could not record it: the step is
 * then unmeasured, counted by the next timers_resolve with the reason (the user's step goes on)
 * timer_end(slot, stream, domain, step): the same on a failed record */
static PyObject *mod_timer_begin(PyObject *module, PyObject *args) {
    int cuda;
    unsigned long long stream, step;
    if (!PyArg_ParseTuple(args, "pKK", &cuda, &stream, &step)) return NULL;
    uint32_t slot;
    int rc = cprof_timer_begin(cuda, (uintptr_t)stream, &slot);
    if (rc == CPROF_E_UNAVAILABLE) {
        cprof_timers_lost(step);
        Py_RETURN_NONE;
    }
    if (rc) return cprof_py_raise(module, rc, "timer_begin");
    return PyLong_FromUnsignedLong(slot);
}

static PyObject *mod_timer_end(PyObject *module, PyObject *args) {
    unsigned int slot, domain;
    unsigned long long stream, step;
    if (!PyArg_ParseTuple(args, "IKIK", &slot, &stream, &domain, &step)) return NULL;
    int rc = cprof_timer_end(slot, (uintptr_t)stream, (uint8_t)domain, 0, step);
    if (rc == CPROF_E_UNAVAILABLE) cprof_timers_lost(step);
    else if (rc) return cprof_py_raise(module, rc, "timer_end");
    Py_RETURN_NONE;
}

/* timers_resolve() -> (steps newly left unmeasured, why: None or what CUDA returned) */
static PyObject *mod_timers_resolve(PyObject *module, PyObject *unused) {
    uint64_t unmeasured = 0;
    void *ends = NULL;
    size_t n = 0;
    if (cprof_timers_ends(&ends, &n) == CPROF_OK && n) {
        /* the wait for the GPU without the GIL, on a copy: other threads' timers go on */
        Py_BEGIN_ALLOW_THREADS cprof_timers_wait(ends, n);
        Py_END_ALLOW_THREADS
    }
    free(ends);
    int rc = cprof_timers_resolve(&unmeasured);
    if (rc == CPROF_OK) return Py_BuildValue("(KO)", (unsigned long long)unmeasured, Py_None);
    return Py_BuildValue("(Ks)", (unsigned long long)unmeasured, cprof_timers_resolve_error());
}

static PyObject *mod_timers_counts(PyObject *module, PyObject *unused) {
    uint32_t pool, pending;
    uint64_t records, shared;
    cprof_timers_counts(&pool, &pending, &records, &shared);
    return Py_BuildValue("{sIsIsIsKsKsK}", "events", pool, "pending", pending, "open",
                         cprof_timers_open(), "records", (unsigned long long)records, "shared",
                         (unsigned long long)shared, "share_ns",
                         (unsigned long long)cprof_timers_share_ns(-1));
}

/* _timers_share_ns(ns) -> previous: the one-event-per-boundary window (0 turns it off). */
static PyObject *mod_timers_share_ns(PyObject *module, PyObject *arg) {
    long long ns = PyLong_AsLongLong(arg);
    if (ns == -1 && PyErr_Occurred()) return NULL;
    if (ns < 0) return PyErr_Format(PyExc_ValueError, "share window must be >= 0 ns, not %lld", ns);
    return PyLong_FromUnsignedLongLong(cprof_timers_share_ns(ns));
}

static PyObject *mod_sync_stream(PyObject *module, PyObject *arg) {
    unsigned long long stream = PyLong_AsUnsignedLongLong(arg);
    if (stream == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = cprof_timers_sync_stream((uintptr_t)stream);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(rc == CPROF_OK);
}

/* _timers_event_floor(n, stream) -> ns for n pairs of bare cuEventRecord (benchmarks). */
static PyObject *mod_timers_event_floor(PyObject *module, PyObject *args) {
    unsigned long long n, stream;
    if (!PyArg_ParseTuple(args, "KK", &n, &stream)) return NULL;
    if (cprof_timers_cuda_init(0) != CPROF_OK)
        return cprof_py_raise(module, CPROF_E_UNAVAILABLE, cprof_timers_error());
    uint64_t ns = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = cprof_timers_event_floor(n, (uintptr_t)stream, &ns);
    Py_END_ALLOW_THREADS
    if (rc) return cprof_py_raise(module, rc, "cuEventRecord failed");
    return PyLong_FromUnsignedLongLong(ns);
}

/* step_begin(owner, run) -> step index */
static PyObject *mod_step_begin(PyObject *module, PyObject *args) {
    unsigned int owner, run;
    if (!PyArg_ParseTuple(args, "II", &owner, &run)) return NULL;
    uint64_t step;
    int rc = cprof_rs_step_begin((uint32_t)owner, (uint32_t)run, &step);
    if (rc) return cprof_py_raise(module, rc, "step_begin");
    return PyLong_FromUnsignedLongLong(step);
}

/* step_end(step, latency_ns or None, tokens, kv_len or None) */
static PyObject *mod_step_end(PyObject *module, PyObject *args) {
    unsigned long long step;
    PyObject *lat, *kv;
    long long tokens;
    if (!PyArg_ParseTuple(args, "KOLO", &step, &lat, &tokens, &kv)) return NULL;
    uint64_t latency = UINT64_MAX;
    if (lat != Py_None) {
        latency = PyLong_AsUnsignedLongLong(lat);
        if (latency == (uint64_t)-1 && PyErr_Occurred()) return NULL;
    }
    double kv_len = kv == Py_None ? NAN : PyFloat_AsDouble(kv);
    if (kv_len == -1.0 && PyErr_Occurred()) return NULL;
    int rc = cprof_rs_step_end(step, latency, tokens, kv_len);
    if (rc) return cprof_py_raise(module, rc, "step_end");
    Py_RETURN_NONE;
}

static PyObject *mod_step_abort(PyObject *module, PyObject *arg) {
    unsigned long long step = PyLong_AsUnsignedLongLong(arg);
    if (step == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    cprof_rs_step_abort(step);
    Py_RETURN_NONE;
}

static PyObject *mod_step_set_kv(PyObject *module, PyObject *args) {
    unsigned long long step;
    double kv;
    if (!PyArg_ParseTuple(args, "Kd", &step, &kv)) return NULL;
    cprof_rs_set_kv(step, kv);
    Py_RETURN_NONE;
}

static PyObject *mod_step_set_tokens(PyObject *module, PyObject *args) {
    unsigned long long step;
    long long tokens;
    if (!PyArg_ParseTuple(args, "KL", &step, &tokens)) return NULL;
    cprof_rs_set_tokens(step, tokens);
    Py_RETURN_NONE;
}

static PyObject *mod_rs_new_owner(PyObject *module, PyObject *unused) {
    return PyLong_FromUnsignedLong(cprof_rs_new_owner());
}

/* rs_release(owner) -> True when the store was emptied: the store is compacted only when no
 * CUDA region is still open or pending (its step index must stay valid until resolved). */
static PyObject *mod_rs_release(PyObject *module, PyObject *arg) {
    unsigned long owner = PyLong_AsUnsignedLong(arg);
    if (owner == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    uint32_t pool, pending;
    uint64_t records, shared;
    cprof_timers_counts(&pool, &pending, &records, &shared);
    int may = pending == 0 && cprof_timers_open() == 0;
    int emptied = cprof_rs_release((uint32_t)owner, may);
    /* a lost record of a released step must not mark the step that takes its index */
    if (emptied) cprof_timers_lost_forget();
    return PyBool_FromLong(emptied);
}

static PyObject *float_or_none(double v) {
    if (isnan(v) || isinf(v)) Py_RETURN_NONE;
    return PyFloat_FromDouble(v);
}

/* The exact token total as a Python int (it may pass 2^64: Python ints do not overflow). */
static PyObject *tokens_total(const cprof_step_stats *s) {
    if (!s->tokens_hi) return PyLong_FromUnsignedLongLong(s->tokens);
    PyObject *hi = PyLong_FromUnsignedLongLong(s->tokens_hi), *sh = PyLong_FromLong(64);
    PyObject *lo = PyLong_FromUnsignedLongLong(s->tokens);
    PyObject *top = hi && sh ? PyNumber_Lshift(hi, sh) : NULL;
    PyObject *out = top && lo ? PyNumber_Or(top, lo) : NULL;
    Py_XDECREF(hi);
    Py_XDECREF(sh);
    Py_XDECREF(lo);
    Py_XDECREF(top);
    return out;
}

/* rs_stats(owner, run_lo, run_hi, kv_lo, kv_hi) -> dict (None for undefined values) */
static PyObject *mod_rs_stats(PyObject *module, PyObject *args) {
    unsigned int owner, lo, hi;
    double kvlo, kvhi;
    if (!PyArg_ParseTuple(args, "IIIdd", &owner, &lo, &hi, &kvlo, &kvhi)) return NULL;
    cprof_step_stats s;
    int rc = cprof_rs_stats(owner, lo, hi, kvlo, kvhi, &s);
    if (rc) return cprof_py_raise(module, rc, "stats");
    PyObject *tokens = tokens_total(&s);
    if (!tokens) return NULL;
    return Py_BuildValue("{sKsNsNsNsNsNsNsNsNsN}", "steps", (unsigned long long)s.steps,
                         "mean_ms", float_or_none(s.mean_ms), "p50_ms", float_or_none(s.p50_ms),
                         "p90_ms", float_or_none(s.p90_ms), "p99_ms", float_or_none(s.p99_ms),
                         "min_ms", float_or_none(s.min_ms), "max_ms", float_or_none(s.max_ms),
                         "time_ms", float_or_none(s.time_ms), "tokens", tokens,
                         "tok_per_s", float_or_none(s.tok_per_s));
}

/* rs_buckets(owner, run_lo, run_hi, kv_lo, kv_hi) -> [(domain, name, total_ns, steps)] */
static PyObject *mod_rs_buckets(PyObject *module, PyObject *args) {
    unsigned int owner, lo, hi;
    double kvlo, kvhi;
    if (!PyArg_ParseTuple(args, "IIIdd", &owner, &lo, &hi, &kvlo, &kvhi)) return NULL;
    size_t n = 0;
    cprof_bucket_total *rows = NULL;
    int rc = cprof_rs_buckets(owner, lo, hi, kvlo, kvhi, &rows, &n);
    if (rc) return cprof_py_raise(module, rc, "buckets");
    PyObject *list = PyList_New(0);
    for (size_t i = 0; list && i < n; i++) {
        size_t len;
        const char *s = cprof_names_get(rows[i].bucket_id, &len);
        PyObject *item = Py_BuildValue("(iNKK)", (int)rows[i].domain,
                                       PyUnicode_DecodeUTF8(s, (Py_ssize_t)len, "replace"),
                                       (unsigned long long)rows[i].total_ns,
                                       (unsigned long long)rows[i].steps);
        if (cprof_py_list_take(list, item) < 0) Py_CLEAR(list);
    }
    free(rows);
    return list;
}

static PyMethodDef runprof_methods[] = {
    {"cuda_bucket_timer", (PyCFunction)(void (*)(void))mod_model_timer,
     METH_FASTCALL | METH_KEYWORDS,
     "cuda_bucket_timer($module, /, bucket, stream=None)\n--\n\n"
     "Model-domain timer: CUDA events on the step's stream, or on stream (a torch.cuda.Stream "
     "or a handle: a region on a side stream) (host clock without CUDA); "
     "`with cprof.cuda_bucket_timer(\"attn.compute\"): ...`."},
    {"engine_timer", (PyCFunction)(void (*)(void))mod_engine_timer,
     METH_FASTCALL | METH_KEYWORDS,
     "engine_timer($module, /, bucket)\n--\n\n"
     "Engine-domain timer on the host clock (cpu_bucket_timer)."},
    {"timers_gate", (PyCFunction)mod_timers_gate, METH_VARARGS, "Opens/closes bucket timers."},
    {"timers_cuda_init", (PyCFunction)mod_timers_cuda_init, METH_VARARGS,
     "(True, None) when CUDA-event timers work here, else (False, reason)."},
    {"timer_begin", (PyCFunction)mod_timer_begin, METH_VARARGS, "Opens a timed region."},
    {"timer_end", (PyCFunction)mod_timer_end, METH_VARARGS, "Closes a timed region."},
    {"timers_resolve", (PyCFunction)mod_timers_resolve, METH_NOARGS,
     "Resolves ended regions: (steps left unmeasured, why or None)."},
    {"timers_counts", (PyCFunction)mod_timers_counts, METH_NOARGS, "Event pool figures."},
    {"sync_stream", (PyCFunction)mod_sync_stream, METH_O, "Synchronises one CUDA stream."},
    {"_timers_share_ns", (PyCFunction)mod_timers_share_ns, METH_O,
     "Sets the window in which timer boundaries share one CUDA event; returns the old one."},
    {"_timers_event_floor", (PyCFunction)mod_timers_event_floor, METH_VARARGS,
     "Benchmarks: ns for n pairs of bare cuEventRecord on a stream."},
    {"step_begin", (PyCFunction)mod_step_begin, METH_VARARGS,
     "step_begin(owner, run): appends a step; returns its index."},
    {"step_end", (PyCFunction)mod_step_end, METH_VARARGS, "Completes a step."},
    {"step_abort", (PyCFunction)mod_step_abort, METH_O, "Drops the last step."},
    {"rs_new_owner", (PyCFunction)mod_rs_new_owner, METH_NOARGS,
     "A new step-store owner id (one per Profiler)."},
    {"rs_release", (PyCFunction)mod_rs_release, METH_O,
     "Releases an owner's steps; True when the store was emptied."},
    {"step_set_tokens", (PyCFunction)mod_step_set_tokens, METH_VARARGS,
     "Sets a completed step's tokens."},
    {"step_set_kv", (PyCFunction)mod_step_set_kv, METH_VARARGS, "Sets a step's KV length."},
    {"rs_stats", (PyCFunction)mod_rs_stats, METH_VARARGS, "Step statistics of a selection."},
    {"rs_buckets", (PyCFunction)mod_rs_buckets, METH_VARARGS, "Bucket totals of a selection."},
    {NULL, NULL, 0, NULL},
};

int cprof_py_runprof_add(PyObject *m) {
    PyObject *tp = PyType_FromModuleAndSpec(m, &timer_spec, NULL);
    if (!tp) return -1;
    int rc = PyModule_AddObjectRef(m, "BucketTimer", tp);
    if (rc < 0) {
        Py_DECREF(tp);
        return -1;
    }
    Py_XSETREF(timer_type, (PyTypeObject *)tp); /* ours: `del _C.BucketTimer` cannot free it */
    return PyModule_AddFunctions(m, runprof_methods);
}
