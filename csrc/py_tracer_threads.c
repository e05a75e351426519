/* The 3.10/3.11 with_stack tracer's threads: which threads its profile function was set on in this
 * session, and which of them another profile function has taken over since.
 *
 * A sys.setprofile on a thread (cProfile.enable(), a pdb-like tool, the user's own hook) set
 * inside a window replaces the tracer's profile function on that thread: its python_function
 * events end there for the rest of the window, even after the user's sys.setprofile(None)
 * (cprof does not fight the user's hook). tracer_stop reports those threads, so the window
 * says so instead of ending them silently. Threads are kept by PyThreadState id, unique for the
 * interpreter's life, so an exited thread's reused state or ident never matches; a thread that
 * was taken over and exited before stop is not reported (its state is gone).
 * 3.12+: sys.monitoring cannot be displaced by sys.setprofile; nothing is kept. GIL held. */
#define PY_SSIZE_T_CLEAN
#include "py_binding.h"

#include <stdint.h>
#include <stdlib.h>

#if PY_VERSION_HEX < 0x030C0000
static uint64_t *ids;
static size_t n_ids, cap_ids;

void cprof_py_traced_reset(void) { n_ids = 0; }

void cprof_py_traced_note(PyThreadState *ts) {
    if (n_ids == cap_ids) {
        size_t cap = cap_ids ? 2 * cap_ids : 64;
        uint64_t *grown = realloc(ids, cap * sizeof *ids);
        if (!grown) return; /* that thread is not reported: its recording is unaffected */
        ids = grown;
        cap_ids = cap;
    }
    ids[n_ids++] = PyThreadState_GetID(ts);
}

static int noted(uint64_t id) {
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] == id) return 1;
    return 0;
}

#if PY_VERSION_HEX >= 0x030B0000
static unsigned long native_id(PyThreadState *ts) { return ts->native_thread_id; }
#else
/* 3.10's PyThreadState has no native_thread_id, and ts is another thread's, so gettid() will
 * not do: its threading.Thread's _native_id (set by the thread itself at bootstrap; an
 * instance attribute, so no Python code runs), found by ident in threading._active. 0 for a
 * thread threading does not know (started by C code, never called current_thread()): its
 * note then says "thread 0". Never raises. */
static unsigned long native_id(PyThreadState *ts) {
    SAVE_EXC(saved);
    unsigned long id = 0;
    PyObject *threading = PyDict_GetItemString(PyImport_GetModuleDict(), "threading");
    PyObject *active = threading ? PyObject_GetAttrString(threading, "_active") : NULL;
    PyObject *key = PyLong_FromUnsignedLong(ts->thread_id);
    PyObject *thread = NULL;
    if (active && key && PyDict_Check(active) && (thread = PyDict_GetItemWithError(active, key)))
        Py_INCREF(thread);
    PyObject *nid = thread ? PyObject_GetAttrString(thread, "_native_id") : NULL;
    if (nid && PyLong_Check(nid)) id = PyLong_AsUnsignedLong(nid);
    if (PyErr_Occurred()) id = 0;
    Py_XDECREF(nid);
    Py_XDECREF(thread);
    Py_XDECREF(key);
    Py_XDECREF(active);
    PyErr_Clear();
    RESTORE_EXC(saved);
    return id;
}
#endif

PyObject *cprof_py_traced_lost(int (*ours)(PyThreadState *)) {
    PyObject *list = PyList_New(0);
    if (!list) return NULL;
    PyInterpreterState *interp = PyThreadState_GetInterpreter(PyThreadState_Get());
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts;
         ts = PyThreadState_Next(ts)) {
        if (ours(ts) || !noted(PyThreadState_GetID(ts))) continue;
        PyObject *item = Py_BuildValue("(kk)", ts->thread_id, native_id(ts));
        if (cprof_py_list_take(list, item) < 0) {
            Py_DECREF(list);
            return NULL;
        }
    }
    return list;
}
#else
void cprof_py_traced_reset(void) {}

void cprof_py_traced_note(PyThreadState *ts) { (void)ts; }

PyObject *cprof_py_traced_lost(int (*ours)(PyThreadState *)) {
    (void)ours;
    return PyList_New(0);
}
#endif
