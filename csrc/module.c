/* The CPython binding of cprof._C (with the py_*.c units it registers, see py_binding.h).
 * Multi-phase init (PEP 489) with module state for the exception types, the name cache and the
 * types. Core error codes become exceptions here and only here (raise_core_error). The event
 * store itself is process-wide C state, so every import of the module shares it. */
/* CPython fixes the signatures of method and getter callbacks: many ignore an argument. */
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_loader.h"
#include "py_binding.h"
#include "gpu.h"
#include "runstats.h"

typedef struct {
    PyObject *CprofError;
    PyObject *NoOpenRangeError;
    PyObject *WindowStateError;
    PyObject *TraceWriteError;
    PyObject *GpuUnavailableError;
    PyObject *CuptiBusyError;
    PyObject *name_cache;   /* str -> int id */
    PyObject *decorate;     /* cprof's Python helper that turns a range into a decorator */
    PyTypeObject *RangeType;
    uint32_t full_name_id;  /* used when the name table is full */
} module_state;

static inline module_state *get_state(PyObject *module) {
    return (module_state *)PyModule_GetState(module);
}

/* ---- errors: the one place codes become exceptions ---- */

static PyObject *raise_core_error(module_state *st, int code, const char *what, int err_no) {
    PyObject *type = st->CprofError;
    switch (code) {
    case CPROF_E_NOMEM:
        /* keep what could not be had (a buffer pool's size, say): the user can act on it */
        if (what && *what) return PyErr_Format(PyExc_MemoryError, "cprof: %s", what);
        return PyErr_NoMemory();
    case CPROF_E_EMPTY:
        type = st->NoOpenRangeError;
        break;
    case CPROF_E_STATE:
        type = st->WindowStateError;
        break;
    case CPROF_E_IO:
    case CPROF_E_ZLIB:
    case CPROF_E_EXISTS:
        type = st->TraceWriteError;
        break;
    case CPROF_E_CUPTI_BUSY:
        type = st->CuptiBusyError;
        break;
    case CPROF_E_UNAVAILABLE:
    case CPROF_E_NO_DEVICE:
    case CPROF_E_CUPTI_PRIVILEGES:
        type = st->GpuUnavailableError;
        break;
    default: break;
    }
    if (code <= CPROF_E_CUPTI_BUSY || code == CPROF_E_UNAVAILABLE) {
        /* the collector's message already says what happened and what to do */
        PyErr_Format(type, "cprof: %s", what && *what ? what : cprof_strerror(code));
        return NULL;
    }
    if (code == CPROF_E_IO && err_no) {
        PyObject *args = Py_BuildValue("(is)", err_no, what ? what : strerror(err_no));
        if (args) {
            PyErr_SetObject(type, args);
            Py_DECREF(args);
        }
        return NULL;
    }
    PyErr_Format(type, "%s: %s", what ? what : "cprof", cprof_strerror(code));
    return NULL;
}

/* ---- names ---- */

/* A direct-mapped cache keyed by the str object's address, in front of the dict: a name
 * written as a literal is the same object on every call, so the common case is one compare.
 * It holds a reference to each key, so an address cannot be reused by another string while
 * cached. GIL-protected. */
#define NAME_DICT_MAX 65536 /* entries of the str -> id dict before it starts afresh */
#define NAME_PTR_CACHE 256
static struct {
    PyObject *key;
    uint32_t id;
} name_ptr_cache[NAME_PTR_CACHE];

static int name_id_slow(module_state *st, PyObject *name, uint32_t *id);

static inline int name_id_of(module_state *st, PyObject *name, uint32_t *id) {
    size_t slot = ((uintptr_t)name >> 4) & (NAME_PTR_CACHE - 1);
    if (CPROF_LIKELY(name_ptr_cache[slot].key == name)) {
        *id = name_ptr_cache[slot].id;
        return 0;
    }
    if (name_id_slow(st, name, id) < 0) return -1;
    if (*id != st->full_name_id) {
        PyObject *old = name_ptr_cache[slot].key;
        name_ptr_cache[slot].key = Py_NewRef(name);
        name_ptr_cache[slot].id = *id;
        Py_XDECREF(old);
    }
    return 0;
}

/* str -> interned id, through a dict so a repeated name costs one dict lookup. */
static int name_id_slow(module_state *st, PyObject *name, uint32_t *id) {
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "a range name must be a str, not %.100s",
                     Py_TYPE(name)->tp_name);
        return -1;
    }
    PyObject *cached = PyDict_GetItemWithError(st->name_cache, name);
    if (cached) {
        *id = (uint32_t)PyLong_AsUnsignedLong(cached);
        return 0;
    }
    if (PyErr_Occurred()) return -1;
    Py_ssize_t len;
    PyObject *bytes = NULL;
    const char *s = PyUnicode_AsUTF8AndSize(name, &len);
    if (!s) {
        /* lone surrogates: keep them as bytes; the writer turns them into U+FFFD */
        PyErr_Clear();
        bytes = PyUnicode_AsEncodedString(name, "utf-8", "surrogatepass");
        if (!bytes) return -1;
        s = PyBytes_AS_STRING(bytes);
        len = PyBytes_GET_SIZE(bytes);
    }
    int rc = cprof_names_intern(s, (size_t)len, id);
    Py_XDECREF(bytes);
    if (rc == CPROF_E_FULL) {
        *id = st->full_name_id; /* recorded under a marker name; not cached, so it stays visible */
        return 0;
    }
    if (rc) {
        raise_core_error(st, rc, "interning a name", 0);
        return -1;
    }
    PyObject *v = PyLong_FromUnsignedLong(*id);
    if (!v) return -1;
    /* The dict is a cache in front of the C table (which finds a name again on its own): kept
     * bounded, so the distinct names of a long run (a schedule's ProfilerStep#N, per-request
     * names) cost their C copy only, not a str, an int and a dict slot each for good */
    if (PyDict_GET_SIZE(st->name_cache) >= NAME_DICT_MAX) PyDict_Clear(st->name_cache);
    rc = PyDict_SetItem(st->name_cache, name, v);
    Py_DECREF(v);
    return rc;
}

/* ---- the range type: `with cprof.range(name):` and `@cprof.range(name)` ---- */

typedef struct {
    PyObject_HEAD
    PyObject *name;
    uint32_t name_id; /* 0 until the name is interned: only in a window (names made outside
                       * one, a server's per-request names, cost no memory) */
    uint32_t key;     /* its stack key, from the name object (known without interning) */
    uint8_t cat;
} RangeObject;

/* Range objects are recycled through a small freelist: `with cprof.range(name):` then
 * allocates nothing once warm, and skips the allocator's cost. GIL-protected. */
#define RANGE_FREELIST_MAX 64
static RangeObject *range_freelist[RANGE_FREELIST_MAX];
static int range_freelist_n;

static PyObject *range_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf,
                                  PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (CPROF_UNLIKELY(kwnames && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "range() takes no keyword arguments");
        return NULL;
    }
    if (CPROF_UNLIKELY(nargs < 1 || nargs > 2)) {
        PyErr_SetString(PyExc_TypeError, "range(name) takes exactly one argument");
        return NULL;
    }
    PyTypeObject *tp = (PyTypeObject *)type;
    module_state *st = PyType_GetModuleState(tp);
    unsigned long cat = CPROF_CAT_USER_ANNOTATION;
    if (nargs == 2) {
        cat = PyLong_AsUnsignedLong(args[1]);
        if (cat == (unsigned long)-1 && PyErr_Occurred()) return NULL;
        if (cat >= CPROF_CAT_COUNT) {
            PyErr_SetString(PyExc_ValueError, "unknown range category");
            return NULL;
        }
    }
    if (CPROF_UNLIKELY(!PyUnicode_Check(args[0]))) {
        PyErr_Format(PyExc_TypeError, "a range name must be a str, not %.100s",
                     Py_TYPE(args[0])->tp_name);
        return NULL;
    }
    uint32_t id = 0;
    if (cprof_events_active() && name_id_of(st, args[0], &id) < 0) return NULL;
    RangeObject *self;
    if (CPROF_LIKELY(range_freelist_n > 0 && tp == st->RangeType)) {
        self = range_freelist[--range_freelist_n];
        _Py_NewReference((PyObject *)self);
        Py_INCREF(tp);
    } else {
        self = (RangeObject *)tp->tp_alloc(tp, 0);
        if (!self) return NULL;
    }
    self->name = Py_NewRef(args[0]);
    self->name_id = id;
    /* the name object's address: the same object at a range's enter and exit, and unique
     * among the names of ranges alive at once (each range holds its name); two ranges of the
     * same text through different objects may get different keys, which only matters if they
     * interleave, and then either ending first is right */
    uintptr_t a = (uintptr_t)args[0] >> 4;
    self->key = (uint32_t)(a ^ (a >> 32));
    self->cat = (uint8_t)cat;
    return (PyObject *)self;
}

static PyObject *range_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (kwds && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "range() takes no keyword arguments");
        return NULL;
    }
    return range_vectorcall((PyObject *)type, &PyTuple_GET_ITEM(args, 0),
                            (size_t)PyTuple_GET_SIZE(args), NULL);
}

/* Not GC-tracked: a range holds only its name (a str), so it can be part of no cycle. */
static void range_dealloc(RangeObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    Py_CLEAR(self->name);
    if (range_freelist_n < RANGE_FREELIST_MAX) range_freelist[range_freelist_n++] = self;
    else tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* Entered and exited by name: an exit ends the innermost open range of this name on this
 * thread, so interleaved ranges (asyncio tasks) each end their own, and a stray pop() cannot
 * end it. The object holds no state between enter and exit: threads may share it. */
static PyObject *range_enter(RangeObject *self, PyObject *unused) {
    if (CPROF_UNLIKELY(!self->name_id) && cprof_events_active() &&
        name_id_of(PyType_GetModuleState(Py_TYPE(self)), self->name, &self->name_id) < 0)
        return NULL;
    int rc = cprof_events_push_named(self->name_id, self->cat, self->key);
    if (CPROF_UNLIKELY(rc))
        return raise_core_error(PyType_GetModuleState(Py_TYPE(self)), rc, "range", 0);
    return Py_NewRef(self);
}

static PyObject *range_exit(RangeObject *self, PyObject *const *args, Py_ssize_t nargs) {
    int rc = cprof_events_pop_named(self->key, self->cat);
    /* an exception already on its way out is the one the user needs: not replaced by ours */
    if (CPROF_UNLIKELY(rc) && !(nargs >= 1 && args[0] != Py_None))
        return raise_core_error(PyType_GetModuleState(Py_TYPE(self)), rc,
                                "range exit without a matching enter on this thread", 0);
    Py_RETURN_FALSE;
}

static PyObject *range_call(RangeObject *self, PyObject *args, PyObject *kwds) {
    module_state *st = PyType_GetModuleState(Py_TYPE(self));
    if (!st->decorate) {
        PyErr_SetString(PyExc_TypeError, "cprof.range is not callable before cprof is imported");
        return NULL;
    }
    if (kwds && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "a range decorates one function, no keywords");
        return NULL;
    }
    if (PyTuple_GET_SIZE(args) != 1 || !PyCallable_Check(PyTuple_GET_ITEM(args, 0))) {
        PyErr_SetString(PyExc_TypeError, "a range used as a decorator takes one callable");
        return NULL;
    }
    return PyObject_CallFunctionObjArgs(st->decorate, (PyObject *)self, PyTuple_GET_ITEM(args, 0),
                                        NULL);
}

static PyObject *range_repr(RangeObject *self) {
    return PyUnicode_FromFormat("cprof.range(%R)", self->name);
}

static PyObject *range_get_name(RangeObject *self, void *c) { return Py_NewRef(self->name); }

static PyMethodDef range_methods[] = {
    {"__enter__", (PyCFunction)range_enter, METH_NOARGS, "Opens the range on this thread."},
    {"__exit__", (PyCFunction)(void (*)(void))range_exit, METH_FASTCALL,
     "Closes this thread's innermost open range of this name."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef range_getset[] = {
    {"name", (getter)range_get_name, NULL, "The range's name.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot range_slots[] = {
    {Py_tp_doc, "range(name): a named CPU range on the calling thread.\n\n"
                "Use as `with cprof.range(name):` or as a decorator `@cprof.range(name)`.\n"
                "Outside a profiling window it only tracks nesting (about 100 ns)."},
    {Py_tp_new, range_new},
    {Py_tp_dealloc, range_dealloc},
    {Py_tp_call, range_call},
    {Py_tp_repr, range_repr},
    {Py_tp_methods, range_methods},
    {Py_tp_getset, range_getset},
    {0, NULL},
};

static PyType_Spec range_spec = {
    .name = "cprof._C.range",
    .basicsize = sizeof(RangeObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = range_slots,
};

/* ---- for the other binding units (py_binding.h) ---- */

int cprof_py_name_id(PyObject *module, PyObject *name, uint32_t *id) {
    return name_id_of(get_state(module), name, id);
}

PyObject *cprof_py_raise(PyObject *module, int code, const char *what) {
    return raise_core_error(get_state(module), code, what, 0);
}

PyObject *cprof_py_raise_errno(PyObject *module, int code, const char *what, int err_no) {
    return raise_core_error(get_state(module), code, what, err_no);
}

/* ---- module functions ---- */

static PyObject *mod_push(PyObject *module, PyObject *name) {
    module_state *st = get_state(module);
    uint32_t id = 0; /* interned only in a window: outside one only the depth is kept */
    if (CPROF_UNLIKELY(!PyUnicode_Check(name))) {
        PyErr_Format(PyExc_TypeError, "a range name must be a str, not %.100s",
                     Py_TYPE(name)->tp_name);
        return NULL;
    }
    if (cprof_events_active() && name_id_of(st, name, &id) < 0) return NULL;
    int rc = cprof_events_push(id, CPROF_CAT_USER_ANNOTATION);
    if (rc) return raise_core_error(st, rc, "push", 0);
    Py_RETURN_NONE;
}

static PyObject *mod_pop(PyObject *module, PyObject *unused) {
    int rc = cprof_events_pop();
    if (rc) return raise_core_error(get_state(module), rc, "pop() without a matching push() on "
                                                           "this thread", 0);
    Py_RETURN_NONE;
}

static PyObject *mod_pop_point(PyObject *module, PyObject *unused) {
    int rc = cprof_events_pop_point();
    if (rc) return raise_core_error(get_state(module), rc, "pop_point() without a matching "
                                                           "push() on this thread", 0);
    Py_RETURN_NONE;
}

/* open_range(name, cat=CAT_USER_ANNOTATION) -> token; close_range(token): a range closed by
 * identity, not as the innermost one (ProfilerStep, record_function). */
static PyObject *mod_open_range(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    module_state *st = get_state(module);
    if (nargs < 1 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError,
                        "open_range(name, cat=CAT_USER_ANNOTATION, detached=False)");
        return NULL;
    }
    long cat = CPROF_CAT_USER_ANNOTATION;
    int detached = nargs == 3 ? PyObject_IsTrue(args[2]) : 0;
    if (detached < 0) return NULL;
    if (nargs >= 2) {
        cat = PyLong_AsLong(args[1]);
        if (cat == -1 && PyErr_Occurred()) return NULL;
        if (cat < 0 || cat >= CPROF_CAT_COUNT) {
            PyErr_SetString(PyExc_ValueError, "open_range: unknown category");
            return NULL;
        }
    }
    uint32_t id;
    if (name_id_of(st, args[0], &id) < 0) return NULL;
    uint64_t token = 0;
    int rc = detached ? cprof_events_push_detached(id, (uint8_t)cat, &token)
                      : cprof_events_push_token(id, (uint8_t)cat, &token);
    if (rc) return raise_core_error(st, rc, "open_range", 0);
    return PyLong_FromUnsignedLongLong(token);
}

/* close_range(token[, ident]): ident (threading.get_ident() of the opening thread) closes a
 * range another thread opened */
static PyObject *mod_close_range(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "close_range(token, ident=None)");
        return NULL;
    }
    unsigned long long token = PyLong_AsUnsignedLongLong(args[0]);
    if (token == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    int rc;
    if (nargs == 2 && args[1] != Py_None) {
        unsigned long long ident = PyLong_AsUnsignedLongLong(args[1]);
        if (ident == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
        rc = cprof_events_pop_token_on(ident, token);
    } else {
        rc = cprof_events_pop_token(token);
    }
    if (rc) return raise_core_error(get_state(module), rc, "close_range: this range is not open "
                                                           "on that thread", 0);
    Py_RETURN_NONE;
}

static PyObject *mod_depth(PyObject *module, PyObject *unused) {
    return PyLong_FromUnsignedLong(cprof_events_depth());
}

static PyObject *mod_add_arg(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    module_state *st = get_state(module);
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "add_arg(key, value) takes two arguments");
        return NULL;
    }
    uint32_t id;
    if (name_id_of(st, args[0], &id) < 0) return NULL;
    long long v = PyLong_AsLongLong(args[1]);
    if (v == -1 && PyErr_Occurred()) return NULL;
    int rc = cprof_events_add_arg(id, v);
    if (rc) return raise_core_error(st, rc, "add_arg", 0);
    Py_RETURN_NONE;
}

/* start(cpu_on=True): opens a window; cpu_on=False opens it with CPU collection toggled off */
static PyObject *mod_start(PyObject *module, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"cpu_on", NULL};
    int cpu_on = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p", kwlist, &cpu_on)) return NULL;
    int rc = cprof_events_start(cpu_on);
    if (rc == CPROF_E_STATE) {
        PyErr_SetString(get_state(module)->WindowStateError,
                        "a cprof window is already open in this process; close it (exit its "
                        "ProfilerContext / call stop()) before opening another");
        return NULL;
    }
    if (rc) return raise_core_error(get_state(module), rc, "start", 0);
    Py_RETURN_NONE;
}

static PyObject *mod_stop(PyObject *module, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"span_stop_ns", NULL};
    unsigned long long span_stop = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|K", kwlist, &span_stop)) return NULL;
    module_state *st = get_state(module);
    cprof_snapshot *snap = NULL;
    int rc = cprof_events_stop(&snap);
    if (rc == CPROF_E_STATE) {
        PyErr_SetString(st->WindowStateError, "no cprof window is open");
        return NULL;
    }
    if (rc) return raise_core_error(st, rc, "stop", 0);
    /* inside the window, or the span keeps its stop */
    if (span_stop > snap->start_ns && span_stop < snap->stop_ns) snap->span_stop_ns = span_stop;
    return cprof_py_snapshot_wrap(snap);
}

static PyObject *mod_mark_start(PyObject *module, PyObject *unused) {
    if (cprof_events_mark_start() == CPROF_E_STATE) {
        PyErr_SetString(get_state(module)->WindowStateError, "no cprof window is open");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *mod_active(PyObject *module, PyObject *unused) {
    return PyBool_FromLong(cprof_events_active());
}

/* toggle_cpu(on): toggle_collection_dynamic's CPU side for the open window */
static PyObject *mod_toggle_cpu(PyObject *module, PyObject *arg) {
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    if (cprof_events_toggle_cpu(on) == CPROF_E_STATE) {
        PyErr_SetString(get_state(module)->WindowStateError, "no cprof window is open");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *mod_cpu_on(PyObject *module, PyObject *unused) {
    return PyBool_FromLong(cprof_events_cpu_on());
}

static PyObject *mod_counts(PyObject *module, PyObject *unused) {
    uint64_t stored, dropped;
    cprof_events_counts(&stored, &dropped);
    return Py_BuildValue("(KK)", (unsigned long long)stored, (unsigned long long)dropped);
}

static PyObject *mod_names_refused(PyObject *module, PyObject *unused) {
    return PyLong_FromUnsignedLongLong((unsigned long long)cprof_names_refused());
}

static PyObject *mod_set_cap(PyObject *module, PyObject *arg) {
    unsigned long long v = PyLong_AsUnsignedLongLong(arg);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    int rc = cprof_events_set_cap(v);
    if (rc == CPROF_E_ARG) {
        PyErr_Format(PyExc_ValueError, "the buffer cap must be at least %zu bytes (one chunk)",
                     sizeof(cprof_chunk));
        return NULL;
    }
    if (rc == CPROF_E_STATE) {
        PyErr_SetString(get_state(module)->WindowStateError,
                        "the buffer cap cannot change while a window is open");
        return NULL;
    }
    if (rc) return raise_core_error(get_state(module), rc, "set_buffer_cap", 0);
    Py_RETURN_NONE;
}

static PyObject *mod_memory(PyObject *module, PyObject *unused) {
    return Py_BuildValue("{sKsKsKsKsn}", "cap_bytes", (unsigned long long)cprof_events_cap(),
                         "allocated_bytes", (unsigned long long)cprof_pool_bytes(0),
                         "pooled_bytes", (unsigned long long)cprof_pool_bytes(1),
                         "held_bytes", (unsigned long long)cprof_pool_bytes(2),
                         "chunk_bytes", (Py_ssize_t)sizeof(cprof_chunk));
}

/* The threading.Thread whose _bootstrap runs this thread's Python code, or NULL (a thread
 * not started by threading, or no frame). On 3.12 sys.monitoring records a new thread's
 * first call inside Thread._bootstrap, before _bootstrap_inner registers it in
 * threading._active: its outermost frame is _bootstrap, and its `self` the Thread. Once per
 * thread (its first record), never per call. New reference; may leave an error set. */
static PyObject *bootstrapping_thread(PyObject *threading) {
    PyFrameObject *f = PyEval_GetFrame(); /* borrowed */
    if (!f) return NULL;
    Py_INCREF(f);
    for (PyFrameObject *back; (back = PyFrame_GetBack(f)) != NULL; f = back) Py_DECREF(f);
    PyObject *thread = NULL, *globals = PyFrame_GetGlobals(f);
    PyCodeObject *co = PyFrame_GetCode(f);
    PyObject *tdict = PyModule_GetDict(threading); /* borrowed */
    if (globals == tdict && PyUnicode_CompareWithASCIIString(co->co_name, "_bootstrap") == 0) {
#if PY_VERSION_HEX >= 0x030C0000
        thread = PyFrame_GetVarString(f, "self");
#else
        PyObject *locals = PyFrame_GetLocals(f);
        thread = locals ? PyMapping_GetItemString(locals, "self") : NULL;
        Py_XDECREF(locals);
#endif
    }
    Py_XDECREF(globals);
    Py_DECREF(co);
    Py_DECREF(f);
    return thread;
}

/* The event store calls this, GIL held, on a thread's first record: names the thread after
 * its threading.Thread now, so its ranges keep that name if it exits before the window closes
 * (stop renames live threads, which may have been renamed since). A thread not yet in
 * threading._active (3.12: still in Thread._bootstrap) is found through its bootstrap frame.
 * Reads only dicts, frame locals and an instance attribute, so no Python code runs inside a
 * push; never raises. */
static void name_new_thread(void) {
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *saved = PyErr_GetRaisedException();
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
#endif
    PyObject *threading = PyDict_GetItemString(PyImport_GetModuleDict(), "threading");
    PyObject *active = NULL, *key = NULL, *name = NULL, *bytes = NULL;
    if (!threading) goto out;
    active = PyObject_GetAttrString(threading, "_active");
    key = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
    if (!active || !key || !PyDict_Check(active)) goto out;
    PyObject *thread = PyDict_GetItemWithError(active, key); /* borrowed */
    if (thread) {
        Py_INCREF(thread);
    } else {
        PyErr_Clear();
        if (!(thread = bootstrapping_thread(threading))) goto out;
    }
    name = PyObject_GetAttrString(thread, "_name");
    Py_DECREF(thread);
    Py_ssize_t len;
    const char *utf8 = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8AndSize(name, &len) : NULL;
    if (!utf8 && name && PyUnicode_Check(name)) {
        /* lone surrogates: kept as bytes, U+FFFD in the trace, as a range name's */
        PyErr_Clear();
        if ((bytes = PyUnicode_AsEncodedString(name, "utf-8", "surrogatepass"))) {
            utf8 = PyBytes_AS_STRING(bytes);
            len = PyBytes_GET_SIZE(bytes);
        }
    }
    uint32_t id;
    if (utf8 && cprof_names_intern(utf8, (size_t)len, &id) == CPROF_OK)
        cprof_events_set_thread_name(id);
out:
    Py_XDECREF(bytes);
    Py_XDECREF(name);
    Py_XDECREF(key);
    Py_XDECREF(active);
    PyErr_Clear();
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(saved);
#else
    PyErr_Restore(type, value, tb);
#endif
}

static PyObject *mod_set_thread_name(PyObject *module, PyObject *name) {
    uint32_t id;
    if (name_id_of(get_state(module), name, &id) < 0) return NULL;
    int rc = cprof_events_set_thread_name(id);
    if (rc) return raise_core_error(get_state(module), rc, "set_thread_name", 0);
    Py_RETURN_NONE;
}

/* signal_default(signum) -> bool: whether the process's own disposition of signum is the
 * default. signal.getsignal reports only Python's table: a handler installed in C
 * (faulthandler.register, a debugger, an embedding application) reads as SIG_DFL there. */
static PyObject *mod_signal_default(PyObject *module, PyObject *arg) {
    long sig = PyLong_AsLong(arg);
    if (sig == -1 && PyErr_Occurred()) return NULL;
    struct sigaction old;
    if (sig <= 0 || sig >= NSIG || sigaction((int)sig, NULL, &old) != 0)
        return PyErr_Format(PyExc_ValueError, "signal number %ld is not valid here", sig);
    return PyBool_FromLong(!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL);
}

static PyObject *mod_now_ns(PyObject *module, PyObject *unused) {
    return PyLong_FromUnsignedLongLong(cprof_clock_now_ns());
}

static PyObject *mod_clock_info(PyObject *module, PyObject *unused) {
    cprof_clock_state c;
    cprof_clock_info(&c);
    return Py_BuildValue("{s:s,s:s,s:d,s:K,s:K,s:L,s:L}", "source", c.tsc ? "tsc" : "monotonic",
                         "why", c.why ? c.why : "", "tsc_hz", c.tsc_hz,
                         "segments", (unsigned long long)c.segments,
                         "checks", (unsigned long long)c.checks,
                         "last_diff_ns", (long long)c.last_diff_ns,
                         "max_abs_diff_ns", (long long)c.max_abs_diff_ns);
}

static PyObject *mod_unix_offset_ns(PyObject *module, PyObject *unused) {
    return PyLong_FromLongLong(cprof_clock_unix_offset_ns());
}

static PyObject *mod_set_decorator(PyObject *module, PyObject *fn) {
    module_state *st = get_state(module);
    Py_XSETREF(st->decorate, Py_NewRef(fn));
    Py_RETURN_NONE;
}

/* json_escape(bytes) -> bytes: the writer's escaping, exposed for tests and fuzzing. */
static PyObject *mod_json_escape(PyObject *module, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    size_t need = cprof_json_escape(view.buf, (size_t)view.len, NULL, 0);
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)need);
    if (out) cprof_json_escape(view.buf, (size_t)view.len, PyBytes_AS_STRING(out), need);
    PyBuffer_Release(&view);
    return out;
}

static PyObject *mod_build_info(PyObject *module, PyObject *unused) {
    return Py_BuildValue("{sssssssisn}", "version", CPROF_VERSION, "compiler",
#if defined(__clang__)
                         "clang " __clang_version__,
#elif defined(__GNUC__)
                         "gcc " __VERSION__,
#else
                         "unknown",
#endif
                         "debug",
#ifdef CPROF_DEBUG
                         "1",
#else
                         "0",
#endif
                         "chunk_records", (int)CPROF_CHUNK_RECORDS, "record_bytes",
                         (Py_ssize_t)sizeof(cprof_record));
}

/* gpu_start(memory=False, nvtx=True, buffer_bytes=0, pool_bytes=0, share=False): opens GPU
 * collection. share: a subscriber held by an idle client (Kineto) does not stop it. */
static PyObject *mod_gpu_start(PyObject *module, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"memory", "nvtx", "buffer_bytes", "pool_bytes", "share", NULL};
    int memory = 0, nvtx = 1, share = 0;
    unsigned long long buffer_bytes = 0, pool_bytes = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|ppKKp", kwlist, &memory, &nvtx, &buffer_bytes,
                                     &pool_bytes, &share))
        return NULL;
    cprof_gpu_config cfg = {.memory = memory, .nvtx = nvtx, .buffer_bytes = buffer_bytes,
                            .pool_cap_bytes = pool_bytes, .share = share};
    int rc;
    uint64_t now = cprof_clock_now_ns();
    Py_BEGIN_ALLOW_THREADS rc = cprof_cupti_start(&cfg, now);
    Py_END_ALLOW_THREADS
    if (rc) return raise_core_error(get_state(module), rc, cprof_cupti_last_error(), 0);
    Py_RETURN_NONE;
}

/* toggled_off's [(off_ns, on_ns or None), ...] as 2n values (None: UINT64_MAX); *n pairs.
 * Returns a PyMem buffer (NULL with *n = 0 for None or empty), or NULL with an exception. */
static uint64_t *toggle_intervals(PyObject *seq, size_t *n) {
    *n = 0;
    if (seq == NULL || seq == Py_None) return NULL;
    PyObject *fast = PySequence_Fast(seq, "toggled_off must be a sequence of (off_ns, on_ns)");
    if (!fast) return NULL;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
    uint64_t *iv = PyMem_Malloc((size_t)(len ? len : 1) * 2 * sizeof *iv);
    if (!iv) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "toggled_off: each interval is (off_ns, on_ns)");
            goto fail;
        }
        for (int k = 0; k < 2; k++) {
            PyObject *v = PyTuple_GET_ITEM(pair, k);
            iv[2 * i + k] = k && v == Py_None ? UINT64_MAX : PyLong_AsUnsignedLongLong(v);
            if (PyErr_Occurred()) goto fail;
        }
        if (iv[2 * i] > iv[2 * i + 1] || (i && iv[2 * i] < iv[2 * i - 1])) {
            PyErr_SetString(PyExc_ValueError, "toggled_off: the intervals must be sorted and "
                            "disjoint, each (off_ns, on_ns) with off_ns <= on_ns");
            goto fail;
        }
    }
    Py_DECREF(fast);
    *n = (size_t)len;
    return iv;
fail:
    Py_DECREF(fast);
    PyMem_Free(iv);
    return NULL;
}

/* gpu_stop(host_stop_ns=0, toggled_off=None) -> GpuSnapshot: flushes CUPTI and decodes (GIL
 * released). host_stop_ns: when the user's window ended; API calls and waits that begin after
 * it (cprof's own synchronize before stopping) are left out. 0: now. toggled_off: the
 * intervals CUDA collection was toggled off, [(off_ns, on_ns or None)], sorted: the records of
 * work asked for in them are left out. */
static PyObject *mod_gpu_stop(PyObject *module, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"host_stop_ns", "toggled_off", NULL};
    unsigned long long host_stop = 0;
    PyObject *toggled = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|KO", kwlist, &host_stop, &toggled))
        return NULL;
    module_state *st = get_state(module);
    size_t niv;
    uint64_t *iv = toggle_intervals(toggled, &niv);
    if (!iv && PyErr_Occurred()) return NULL;
    cprof_gpu_snapshot *snap = NULL;
    int rc, trc = CPROF_OK;
    uint64_t now = cprof_clock_now_ns();
    if (!host_stop || host_stop > now) host_stop = now;
    Py_BEGIN_ALLOW_THREADS rc = cprof_cupti_stop(now, host_stop, &snap);
    if (rc == CPROF_OK) trc = cprof_gpu_drop_toggled_off(snap, iv, niv);
    Py_END_ALLOW_THREADS
    PyMem_Free(iv);
    if (rc) return raise_core_error(st, rc, cprof_cupti_last_error(), 0);
    (void)trc; /* CPROF_E_ARG only, and toggle_intervals checked the order */
    return cprof_py_gpu_snapshot_wrap(snap);
}

static PyObject *mod_gpu_active(PyObject *module, PyObject *unused) {
    return PyBool_FromLong(cprof_cupti_active());
}

/* gpu_teardown_info() -> {"state": "idle"|"pending"|"finalizing", "finalized": n,
 * "last_result": CUptiResult}: CPROF_CUPTI_TEARDOWN=1's detaching of CUPTI after windows. */
static PyObject *mod_gpu_teardown_info(PyObject *module, PyObject *unused) {
    int state, last;
    uint64_t n;
    cprof_cupti_teardown_info(&state, &n, &last);
    static const char *const names[] = {"idle", "pending", "finalizing"};
    return Py_BuildValue("{sssKsi}", "state", state >= 0 && state <= 2 ? names[state] : "?",
                         "finalized", (unsigned long long)n, "last_result", last);
}

/* cuda_info(): what the loader found, without starting anything. */
static PyObject *mod_cuda_info(PyObject *module, PyObject *unused) {
    int cupti_rc, driver_rc, init_rc = -1, ndev = 0;
    const char *init_what = NULL;
    Py_BEGIN_ALLOW_THREADS cupti_rc = cprof_cuda_load_cupti(NULL);
    driver_rc = cprof_cuda_load_driver(NULL);
    if (driver_rc == 0) init_rc = cprof_cuda_init_status(&ndev, &init_what);
    Py_END_ALLOW_THREADS
    const char *cp = cprof_cupti_path(), *cs = cprof_cupti_source(), *dp = cprof_libcuda_path();
    PyObject *init = driver_rc == 0 ? PyLong_FromLong(init_rc) : Py_NewRef(Py_None);
    if (!init) return NULL;
    PyObject *r = Py_BuildValue(
        "{s{sOszszszsi}s{sOszsiszsOszsi}}", "cupti", "loaded", cupti_rc == 0 ? Py_True : Py_False,
        "path", cp, "source", cs, "error", cupti_rc == 0 ? NULL : cprof_cupti_error(), "version",
        cprof_cupti_version(), "driver", "loaded", driver_rc == 0 ? Py_True : Py_False, "path", dp,
        "version", cprof_cuda_driver_version(), "error",
        driver_rc == 0 ? NULL : cprof_cuda_driver_error(), "init_result", init, "init_error",
        init_rc > 0 ? init_what : NULL, "devices", ndev);
    Py_DECREF(init);
    return r;
}

static PyObject *mod_cuda_add_search_dir(PyObject *module, PyObject *arg) {
    PyObject *b = NULL;
    if (!PyUnicode_FSConverter(arg, &b)) return NULL;
    int rc = cprof_cuda_loader_add_search_dir(PyBytes_AS_STRING(b));
    Py_DECREF(b);
    if (rc == CPROF_E_STATE) Py_RETURN_FALSE; /* CUPTI was already looked up */
    if (rc) return raise_core_error(get_state(module), rc, "cuda_add_search_dir", 0);
    Py_RETURN_TRUE;
}

static PyObject *mod_device_props_json(PyObject *module, PyObject *unused) {
    char *s;
    Py_BEGIN_ALLOW_THREADS s = cprof_cuda_device_props_json();
    Py_END_ALLOW_THREADS
    if (!s) Py_RETURN_NONE;
    PyObject *r = PyUnicode_FromString(s);
    free(s);
    return r;
}

static PyMethodDef module_methods[] = {
    {"push", (PyCFunction)mod_push, METH_O, "push(name): opens a range on this thread."},
    {"pop", (PyCFunction)mod_pop, METH_NOARGS, "pop(): closes this thread's innermost range."},
    {"pop_point", (PyCFunction)mod_pop_point, METH_NOARGS,
     "pop_point(): closes this thread's innermost range as a point (no length: a mark)."},
    {"open_range", (PyCFunction)(void (*)(void))mod_open_range, METH_FASTCALL,
     "open_range(name, cat=CAT_USER_ANNOTATION, detached=False) -> token: a range closed by "
     "close_range(token) wherever it sits on this thread's stack; a detached one is passed "
     "over by plain pops (it need not nest)."},
    {"close_range", (PyCFunction)(void (*)(void))mod_close_range, METH_FASTCALL,
     "close_range(token, ident=None): closes the range open_range returned (on the thread "
     "ident, by default this one), not the innermost one."},
    {"depth", (PyCFunction)mod_depth, METH_NOARGS, "Open ranges on this thread."},
    {"add_arg", (PyCFunction)(void (*)(void))mod_add_arg, METH_FASTCALL,
     "add_arg(key, int): an integer arg on the innermost open range."},
    {"start", (PyCFunction)(void (*)(void))mod_start, METH_VARARGS | METH_KEYWORDS,
     "start(cpu_on=True): opens a window (cpu_on=False: with CPU collection toggled off)."},
    {"toggle_cpu", (PyCFunction)mod_toggle_cpu, METH_O,
     "toggle_cpu(on): records CPU ranges again (True) or not (False) in the open window; "
     "ProfilerStep ranges are always recorded."},
    {"cpu_on", (PyCFunction)mod_cpu_on, METH_NOARGS,
     "True while a window is open and recording CPU ranges."},
    {"stop", (PyCFunction)(void (*)(void))mod_stop, METH_VARARGS | METH_KEYWORDS,
     "stop(span_stop_ns=0): closes the window; returns a Snapshot. span_stop_ns: where the "
     "window's span ends (the program's end of it, before cprof's closing work)."},
    {"mark_start", (PyCFunction)mod_mark_start, METH_NOARGS,
     "The open window's start is now (after cprof's own set-up, such as enabling CUPTI)."},
    {"active", (PyCFunction)mod_active, METH_NOARGS, "True while a window is open."},
    {"counts", (PyCFunction)mod_counts, METH_NOARGS, "(stored, dropped) in the open window."},
    {"names_refused", (PyCFunction)mod_names_refused, METH_NOARGS,
     "Names the full name table refused so far (recorded under a marker name)."},
    {"set_buffer_cap", (PyCFunction)mod_set_cap, METH_O, "Cap in bytes for range buffers."},
    {"memory", (PyCFunction)mod_memory, METH_NOARGS, "Range buffer memory figures."},
    {"set_thread_name", (PyCFunction)mod_set_thread_name, METH_O, "Names this thread."},
    {"now_ns", (PyCFunction)mod_now_ns, METH_NOARGS, "The cprof clock (CLOCK_MONOTONIC ns)."},
    {"signal_default", (PyCFunction)mod_signal_default, METH_O,
     "Whether the process's disposition of a signal is the default (C handlers included)."},
    {"clock_info", (PyCFunction)mod_clock_info, METH_NOARGS,
     "The clock's source (tsc or monotonic), why, its TSC rate and how close it keeps to "
     "CLOCK_MONOTONIC."},
    {"unix_offset_ns", (PyCFunction)mod_unix_offset_ns, METH_NOARGS,
     "cprof clock + offset = Unix ns."},
    {"_set_decorator", (PyCFunction)mod_set_decorator, METH_O, "Internal."},
    {"json_escape", (PyCFunction)mod_json_escape, METH_O, "The writer's JSON string escaping."},
    {"build_info", (PyCFunction)mod_build_info, METH_NOARGS, "How this extension was built."},
    {"gpu_start", (PyCFunction)(void (*)(void))mod_gpu_start, METH_VARARGS | METH_KEYWORDS,
     "Opens GPU collection (CUPTI)."},
    {"gpu_stop", (PyCFunction)(void (*)(void))mod_gpu_stop, METH_VARARGS | METH_KEYWORDS,
     "Closes GPU collection; GpuSnapshot."},
    {"gpu_active", (PyCFunction)mod_gpu_active, METH_NOARGS, "True while collecting GPU work."},
    {"gpu_teardown_info", (PyCFunction)mod_gpu_teardown_info, METH_NOARGS,
     "CPROF_CUPTI_TEARDOWN=1: state of the CUPTI detach after windows, and detaches done."},
    {"cuda_info", (PyCFunction)mod_cuda_info, METH_NOARGS, "What the CUDA loader found."},
    {"cuda_add_search_dir", (PyCFunction)mod_cuda_add_search_dir, METH_O,
     "A directory to look for libcupti in (before CUDA_HOME)."},
    {"device_props_json", (PyCFunction)mod_device_props_json, METH_NOARGS,
     "deviceProperties from the driver, as JSON text, or None."},
    {NULL, NULL, 0, NULL},
};

static int add_exception(PyObject *m, PyObject **slot, const char *name, PyObject *bases,
                         const char *doc) {
    char full[128];
    snprintf(full, sizeof full, "cprof.%s", name);
    *slot = PyErr_NewExceptionWithDoc(full, doc, bases, NULL);
    if (!*slot) return -1;
    return PyModule_AddObjectRef(m, name, *slot);
}

static int module_exec(PyObject *m) {
    module_state *st = get_state(m);
    cprof_clock_init();
    /* a RuntimeError, as torch.profiler's errors are: `except RuntimeError` written for
     * torch.profiler keeps working after the switch to cprof */
    if (add_exception(m, &st->CprofError, "CprofError", PyExc_RuntimeError,
                      "Base class of every error cprof raises (a RuntimeError).") < 0)
        return -1;
    if (add_exception(m, &st->NoOpenRangeError, "NoOpenRangeError", st->CprofError,
                      "pop() or a range exit without a matching push on this thread.") < 0)
        return -1;
    if (add_exception(m, &st->WindowStateError, "WindowStateError", st->CprofError,
                      "A window opened twice, or closed when not open.") < 0)
        return -1;
    PyObject *bases = PyTuple_Pack(2, PyExc_OSError, st->CprofError); /* OSError first: errno */
    if (!bases) return -1;
    int rc = add_exception(m, &st->TraceWriteError, "TraceWriteError", bases,
                           "The trace could not be written; the data is kept in memory.");
    Py_DECREF(bases);
    if (rc < 0) return -1;
    if (add_exception(m, &st->GpuUnavailableError, "GpuUnavailableError", st->CprofError,
                      "GPU activity cannot be collected here (no CUPTI, driver, GPU or "
                      "permission); the message says which and what to do.") < 0)
        return -1;
    if (add_exception(m, &st->CuptiBusyError, "CuptiBusyError", st->CprofError,
                      "Another profiler (torch.profiler, Nsight) holds CUPTI.") < 0)
        return -1;
    st->name_cache = PyDict_New();
    if (!st->name_cache) return -1;
    st->RangeType = (PyTypeObject *)PyType_FromModuleAndSpec(m, &range_spec, NULL);
    if (!st->RangeType) return -1;
    st->RangeType->tp_vectorcall = range_vectorcall;
    if (PyModule_AddObjectRef(m, "range", (PyObject *)st->RangeType) < 0) return -1;
    static const char full_marker[] = CPROF_NAME_FULL_MARKER;
    if (cprof_names_intern(full_marker, sizeof full_marker - 1, &st->full_name_id)) {
        PyErr_NoMemory();
        return -1;
    }
    if (PyModule_AddIntConstant(m, "CAT_USER_ANNOTATION", CPROF_CAT_USER_ANNOTATION) < 0 ||
        PyModule_AddIntConstant(m, "CAT_CPU_OP", CPROF_CAT_CPU_OP) < 0 ||
        PyModule_AddIntConstant(m, "CAT_PYTHON_FUNCTION", CPROF_CAT_PYTHON_FUNCTION) < 0 ||
        PyModule_AddIntConstant(m, "CAT_STEP", CPROF_CAT_STEP) < 0 ||
        PyModule_AddIntConstant(m, "MAX_DEPTH", CPROF_MAX_DEPTH) < 0 ||
        PyModule_AddStringConstant(m, "__version__", CPROF_VERSION) < 0)
        return -1;
    if (cprof_py_tracer_add(m) < 0 || cprof_py_hooks_add(m) < 0 || cprof_py_report_add(m) < 0 ||
        cprof_py_regions_add(m) < 0 || cprof_py_ops_add(m) < 0 ||
        cprof_py_runprof_add(m) < 0 || cprof_py_memory_add(m) < 0 || cprof_py_guard_add(m) < 0 ||
        cprof_py_snapshot_add(m) < 0)
        return -1;
    cprof_events_set_new_thread_hook(name_new_thread);
    return 0;
}

static int module_traverse(PyObject *m, visitproc visit, void *arg) {
    module_state *st = get_state(m);
    Py_VISIT(st->CprofError);
    Py_VISIT(st->NoOpenRangeError);
    Py_VISIT(st->WindowStateError);
    Py_VISIT(st->TraceWriteError);
    Py_VISIT(st->GpuUnavailableError);
    Py_VISIT(st->CuptiBusyError);
    Py_VISIT(st->name_cache);
    Py_VISIT(st->decorate);
    Py_VISIT(st->RangeType);
    return 0;
}

static int module_clear(PyObject *m) {
    module_state *st = get_state(m);
    Py_CLEAR(st->CprofError);
    Py_CLEAR(st->NoOpenRangeError);
    Py_CLEAR(st->WindowStateError);
    Py_CLEAR(st->TraceWriteError);
    Py_CLEAR(st->GpuUnavailableError);
    Py_CLEAR(st->CuptiBusyError);
    Py_CLEAR(st->name_cache);
    Py_CLEAR(st->decorate);
    Py_CLEAR(st->RangeType);
    return 0;
}

static void module_free(void *m) { module_clear((PyObject *)m); }

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "cprof._C",
    .m_doc = "cprof's C core: event store, clock, trace writer.",
    .m_size = sizeof(module_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__C(void) { return PyModuleDef_Init(&module_def); }
