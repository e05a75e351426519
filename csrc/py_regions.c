/* Code ranges: a range opened each time one of a chosen set of code objects runs, and closed
 * when that frame returns or unwinds. cprof/_compiled.py chooses the code objects torch.compile
 * (Dynamo) produced and names each "Torch-Compiled Region: {frame}/{compile}", which torch's
 * C++ RecordFunction shows in torch.profiler traces but cprof cannot see; graph breaks then look
 * as seed 001 describes them: nested regions.
 *
 * Events: on Python 3.12+, sys.monitoring callbacks (cprof/_compiled.py takes a tool id and sets
 * PY_START / PY_RETURN as local events on those code objects only, PY_UNWIND globally), so other
 * code pays nothing; on 3.11, a PyEval_SetProfile function on every thread existing at install
 * (not when another profile function holds a thread), which costs a pointer lookup per Python
 * call; with with_stack on 3.11 the tracer holds that hook and asks cprof_py_regions_lookup
 * when it first names a code object, recording a region's runs as its user ranges instead.
 * Ranges are user ranges (cprof_events_push / pop). Each thread keeps a small stack of the
 * region frames it opened and the user depth after the push: a frame's exit closes down to its
 * own range (a user range its code left open closes with it, as a frame's end ends it), and an
 * exit of any other frame changes nothing. A stack older than the current install is dropped.
 * Everything runs with the GIL held. */
#define PY_SSIZE_T_CLEAN
#include "py_binding.h"

#include <stdlib.h>
#include <string.h>

#include "cprof.h"

#define REGION_MAX_DEPTH 64

/* ---- the chosen code objects: open addressing, pointer -> name id, keys held ---- */

typedef struct {
    PyObject *code; /* NULL: empty slot */
    uint32_t name_id;
} region_slot;

static struct {
    region_slot *slots;
    size_t cap, count; /* cap a power of two, count <= cap / 2 */
    uint64_t gen;      /* install number: thread stacks of an older one are stale */
    int profiling;     /* 3.11: the profile function is installed */
    int tool;          /* 3.12+: the sys.monitoring tool id of the callbacks, -1 when none */
    uint64_t entered, closed, left_open, overflows, threads, threads_skipped;
} rg = {.tool = -1};

typedef struct {
    uint64_t gen;
    uint32_t depth;
    struct {
        const void *code;
        uint32_t user_depth; /* cprof_events_depth() right after the push */
    } ent[REGION_MAX_DEPTH];
} region_stack;

static _Thread_local region_stack ts_stack;

CPROF_INLINE size_t slot_of(const void *p, size_t cap) {
    uintptr_t h = (uintptr_t)p;
    h ^= h >> 17;
    h *= (uintptr_t)0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 7) & (cap - 1);
}

static int lookup(const void *code, uint32_t *id) {
    if (!rg.count) return 0;
    for (size_t i = slot_of(code, rg.cap);; i = (i + 1) & (rg.cap - 1)) {
        if (!rg.slots[i].code) return 0;
        if (rg.slots[i].code == code) {
            *id = rg.slots[i].name_id;
            return 1;
        }
    }
}

static int grow(void) {
    size_t ncap = rg.cap ? rg.cap * 2 : 64;
    region_slot *ns = calloc(ncap, sizeof *ns);
    if (!ns) return -1;
    for (size_t i = 0; i < rg.cap; i++) {
        if (!rg.slots[i].code) continue;
        size_t j = slot_of(rg.slots[i].code, ncap);
        while (ns[j].code) j = (j + 1) & (ncap - 1);
        ns[j] = rg.slots[i];
    }
    free(rg.slots);
    rg.slots = ns;
    rg.cap = ncap;
    return 0;
}

int cprof_py_regions_lookup(const void *code, uint32_t *id) {
#if PY_VERSION_HEX < 0x030C0000
    return lookup(code, id);
#else
    (void)code; /* 3.12+: the sys.monitoring callbacks record regions, the tracer must not */
    (void)id;
    return 0;
#endif
}

/* ---- entering and leaving a region frame ---- */

CPROF_INLINE region_stack *my_stack(void) {
    region_stack *st = &ts_stack;
    if (st->gen != rg.gen) {
        st->gen = rg.gen;
        st->depth = 0;
    }
    return st;
}

static void region_enter(const void *code) {
    uint32_t id;
    if (!lookup(code, &id)) return;
    region_stack *st = my_stack();
    if (st->depth >= REGION_MAX_DEPTH) {
        rg.overflows++;
        return;
    }
    if (cprof_events_push(id, CPROF_CAT_USER_ANNOTATION) != 0) return;
    st->ent[st->depth].code = code;
    st->ent[st->depth].user_depth = cprof_events_depth();
    st->depth++;
    rg.entered++;
}

static void region_exit(const void *code) {
    region_stack *st = my_stack();
    if (!st->depth || st->ent[st->depth - 1].code != code) return;
#if PY_VERSION_HEX >= 0x030C0000
    /* the frame's python_function ends inside the region */
    cprof_py_tracer_exit_ahead(code, rg.tool);
#endif
    uint32_t want = st->ent[--st->depth].user_depth - 1;
    uint32_t d = cprof_events_depth();
    if (d > want + 1) rg.left_open += d - want - 1;
    cprof_events_pop_to(want);
    rg.closed++;
}

/* ---- 3.12+: the sys.monitoring callbacks ---- */

/* region_start(code, offset): PY_START */
static PyObject *region_start(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    (void)m;
    if (nargs >= 1) region_enter(args[0]);
    Py_RETURN_NONE;
}

/* region_end(code, offset, value): PY_RETURN and PY_UNWIND */
static PyObject *region_end(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    (void)m;
    if (nargs >= 1) region_exit(args[0]);
    Py_RETURN_NONE;
}

/* ---- 3.11: a profile function ---- */

#if PY_VERSION_HEX < 0x030C0000
static int region_profile(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg) {
    (void)obj;
    (void)arg;
    if (what != PyTrace_CALL && what != PyTrace_RETURN) return 0;
    PyCodeObject *co = PyFrame_GetCode(frame);
    Py_DECREF(co); /* borrowed: the frame holds its code */
    if (what == PyTrace_CALL) region_enter(co);
    else region_exit(co);
    return 0;
}

static void profile_uninstall(void) {
    PyThreadState *me = PyThreadState_Get();
    PyInterpreterState *interp = PyThreadState_GetInterpreter(me);
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts;
         ts = PyThreadState_Next(ts)) {
        if (ts->c_profilefunc == region_profile && _PyEval_SetProfile(ts, NULL, NULL) < 0)
            PyErr_Clear(); /* an audit hook refused: the function stays, finds nothing */
    }
    rg.profiling = 0;
}

static int profile_install(void) {
    PyThreadState *me = PyThreadState_Get();
    PyInterpreterState *interp = PyThreadState_GetInterpreter(me);
    rg.threads = rg.threads_skipped = 0;
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts;
         ts = PyThreadState_Next(ts)) {
        if (ts->c_profilefunc && ts->c_profilefunc != region_profile) {
            rg.threads_skipped++; /* another profiler's (with_stack's tracer, cProfile) */
            continue;
        }
        if (_PyEval_SetProfile(ts, region_profile, NULL) < 0) {
            SAVE_EXC(err);
            profile_uninstall();
            RESTORE_EXC(err);
            return -1;
        }
        rg.threads++;
    }
    rg.profiling = 1;
    return 0;
}
#endif

/* ---- module functions ---- */

/* regions_add(code, name): code's runs become ranges named name (replaces an earlier name). */
static PyObject *regions_add(PyObject *m, PyObject *args) {
    (void)m;
    PyObject *code, *name;
    if (!PyArg_ParseTuple(args, "O!U:regions_add", &PyCode_Type, &code, &name)) return NULL;
    Py_ssize_t len;
    const char *s = PyUnicode_AsUTF8AndSize(name, &len);
    if (!s) return NULL;
    uint32_t id;
    int rc = cprof_names_intern(s, (size_t)len, &id);
    if (rc) {
        PyErr_Format(PyExc_MemoryError, "regions_add: cannot intern the name (error %d)", rc);
        return NULL;
    }
    if ((rg.count + 1) * 2 > rg.cap && grow() < 0) return PyErr_NoMemory();
    size_t i = slot_of(code, rg.cap);
    while (rg.slots[i].code && rg.slots[i].code != code) i = (i + 1) & (rg.cap - 1);
    if (!rg.slots[i].code) {
        rg.slots[i].code = Py_NewRef(code);
        rg.count++;
    }
    rg.slots[i].name_id = id;
    Py_RETURN_NONE;
}

/* regions_clear(): forgets every code object; regions open now stay open until their exits
 * are seen no more: the window's end closes them. */
static PyObject *regions_clear(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    region_slot *old = rg.slots;
    size_t cap = rg.cap;
    rg.slots = NULL;
    rg.cap = rg.count = 0;
    for (size_t i = 0; i < cap; i++) Py_XDECREF(old[i].code);
    free(old);
    Py_RETURN_NONE;
}

/* regions_begin(profile, tool=-1): a new install (thread stacks restart); with profile (3.11)
 * the profile function is set on every thread free of another; tool: 3.12+'s sys.monitoring
 * tool id of the callbacks (the tracer closes a region's frame ahead only when that id's
 * callbacks run before its own). Returns the threads it holds. */
static PyObject *regions_begin(PyObject *m, PyObject *args) {
    (void)m;
    int profile, tool = -1;
    if (!PyArg_ParseTuple(args, "p|i:regions_begin", &profile, &tool)) return NULL;
    rg.tool = tool;
    rg.gen++;
    rg.entered = rg.closed = rg.left_open = rg.overflows = 0;
#if PY_VERSION_HEX < 0x030C0000
    if (profile && profile_install() < 0) return NULL;
    return PyLong_FromUnsignedLongLong(rg.threads);
#else
    if (profile) {
        PyErr_SetString(PyExc_ValueError, "regions_begin: Python 3.12+ uses sys.monitoring");
        return NULL;
    }
    return PyLong_FromLong(0);
#endif
}

/* regions_end(): removes the profile function (3.11), starts a new install number. */
static PyObject *regions_end(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
#if PY_VERSION_HEX < 0x030C0000
    if (rg.profiling) profile_uninstall();
#endif
    rg.tool = -1;
    rg.gen++;
    Py_RETURN_NONE;
}

static PyObject *regions_stats(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    return Py_BuildValue("{sKsKsKsKsKsKsnsi}", "entered", (unsigned long long)rg.entered,
                         "closed", (unsigned long long)rg.closed, "left_open",
                         (unsigned long long)rg.left_open, "overflows",
                         (unsigned long long)rg.overflows, "threads",
                         (unsigned long long)rg.threads, "threads_skipped",
                         (unsigned long long)rg.threads_skipped, "codes", (Py_ssize_t)rg.count,
                         "profiling", rg.profiling);
}

static PyMethodDef region_methods[] = {
    {"region_start", (PyCFunction)(void (*)(void))region_start, METH_FASTCALL,
     "sys.monitoring PY_START callback of code ranges."},
    {"region_end", (PyCFunction)(void (*)(void))region_end, METH_FASTCALL,
     "sys.monitoring PY_RETURN / PY_UNWIND callback of code ranges."},
    {"regions_add", regions_add, METH_VARARGS,
     "regions_add(code, name): runs of code become ranges named name."},
    {"regions_clear", regions_clear, METH_NOARGS, "Forgets every code object."},
    {"regions_begin", regions_begin, METH_VARARGS,
     "regions_begin(profile, tool=-1): starts recording (profile: 3.11's profile function; "
     "tool: 3.12's sys.monitoring tool id)."},
    {"regions_end", regions_end, METH_NOARGS, "Stops recording."},
    {"regions_stats", regions_stats, METH_NOARGS, "Counters of the current install."},
    {NULL, NULL, 0, NULL},
};

int cprof_py_regions_add(PyObject *m) { return PyModule_AddFunctions(m, region_methods); }
