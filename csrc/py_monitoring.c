/* sys.monitoring (Python 3.12+) for the with_stack tracer (py_tracer.c): taking a free tool id,
 * registering the tracer's callbacks for its events, and giving all of it back. Plumbing
 * through the sys.monitoring Python API, run at tracer start and stop with the GIL held; the
 * callbacks themselves live in py_tracer.c, next to the hot path they call. On 3.11 this file
 * is empty (the tracer uses PyEval_SetProfile there). */
#include "py_binding.h"

#if PY_VERSION_HEX >= 0x030C0000
#include <string.h>

static PyObject *monitoring(void) {
    PyObject *mon = PySys_GetObject("monitoring"); /* borrowed */
    if (!mon && !PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "sys.monitoring is missing");
    return mon;
}

static int event_bit(PyObject *mon, const char *name, long *bit) {
    PyObject *events = PyObject_GetAttrString(mon, "events");
    if (!events) return -1;
    PyObject *v = PyObject_GetAttrString(events, name);
    Py_DECREF(events);
    if (!v) return -1;
    *bit = PyLong_AsLong(v);
    Py_DECREF(v);
    return (*bit == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* Takes a free tool id: 3, 4, 5 first, then PROFILER_ID (2), COVERAGE_ID (1), DEBUGGER_ID
 * (0). The reserved ids are left to the tools they are named for while another is free
 * (3.12's cProfile.enable() needs PROFILER_ID: inside a window it failed while cprof held
 * it), and the lowest free of 3-5 leaves the ones above to the compiled-region capture
 * (cprof/_compiled.py takes 5, 4, 3), whose callbacks must run before the tracer's
 * (sys.monitoring calls a higher id first): a region then opens before its frame's range. */
int cprof_monitoring_take(PyObject *module, const char *tool_name, int *tool_id) {
    PyObject *mon = monitoring();
    if (!mon) return -1;
    long pid = 2;
    PyObject *v = PyObject_GetAttrString(mon, "PROFILER_ID");
    if (v) {
        pid = PyLong_AsLong(v);
        Py_DECREF(v);
        if (pid == -1 && PyErr_Occurred()) return -1;
    } else {
        PyErr_Clear();
    }
    const long order[] = {3, 4, 5, pid, 1, 0};
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
        long id = order[k];
        if (k > 3 && id == pid) continue;
        PyObject *holder = PyObject_CallMethod(mon, "get_tool", "l", id);
        if (!holder) return -1;
        int free_id = holder == Py_None;
        Py_DECREF(holder);
        if (!free_id) continue;
        PyObject *r = PyObject_CallMethod(mon, "use_tool_id", "ls", id, tool_name);
        if (r) {
            Py_DECREF(r);
            *tool_id = (int)id;
            return 0;
        }
        if (!PyErr_ExceptionMatches(PyExc_ValueError)) return -1;
        PyErr_Clear(); /* taken in between: try the next */
    }
    PyObject *holder = PyObject_CallMethod(mon, "get_tool", "l", pid);
    if (!holder) return -1;
    PyObject *err = PyObject_GetAttrString(module, "CprofError");
    if (err) {
        PyErr_Format(err, "with_stack: every sys.monitoring tool id is in use (PROFILER_ID "
                          "by %R); stop another tool (debugger, coverage, profiler) first",
                     holder);
        Py_DECREF(err);
    }
    Py_DECREF(holder);
    return -1;
}

int cprof_monitoring_enable(int tool_id, const char *const *events, PyObject *const *callbacks,
                            size_t n) {
    PyObject *mon = monitoring();
    if (!mon) return -1;
    long mask = 0;
    for (size_t i = 0; i < n; i++) {
        long bit;
        if (event_bit(mon, events[i], &bit) < 0) return -1;
        PyObject *r = PyObject_CallMethod(mon, "register_callback", "ilO", tool_id, bit,
                                          callbacks[i]);
        if (!r) return -1;
        Py_DECREF(r);
        /* C_RETURN / C_RAISE follow CALL and cannot be set on their own */
        if (strncmp(events[i], "C_", 2) != 0) mask |= bit;
    }
    PyObject *r = PyObject_CallMethod(mon, "set_events", "il", tool_id, mask);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
}

/* Keeps the first error of a sequence of steps that must all run. */
static void keep_first(PyObject **first) {
    PyObject *e = PyErr_GetRaisedException();
    if (!*first) *first = e;
    else Py_XDECREF(e);
}

/* 3.12's free_tool_id neither disables the events nor unregisters the callbacks: all three are
 * done here, every step runs, the first error is raised. */
int cprof_monitoring_release(int tool_id, const char *const *events, size_t n) {
    PyObject *mon = monitoring();
    if (!mon) return -1;
    PyObject *first = NULL;
    PyObject *r = PyObject_CallMethod(mon, "set_events", "ii", tool_id, 0);
    if (r) Py_DECREF(r);
    else keep_first(&first);
    for (size_t i = 0; i < n; i++) {
        long bit;
        r = event_bit(mon, events[i], &bit) < 0
                ? NULL
                : PyObject_CallMethod(mon, "register_callback", "ilO", tool_id, bit, Py_None);
        if (r) Py_DECREF(r);
        else keep_first(&first);
    }
    r = PyObject_CallMethod(mon, "free_tool_id", "i", tool_id);
    if (r) Py_DECREF(r);
    else keep_first(&first);
    if (!first) return 0;
    PyErr_SetRaisedException(first);
    return -1;
}
#endif
