/* Binding units besides module.c (py_*.c): each adds its functions and types to cprof._C.
 * Binding files (module.c and py_*.c) are the only ones that include Python.h; core files never
 * do. Every function here runs with the GIL held, from module_exec. */
#ifndef CPROF_PY_BINDING_H
#define CPROF_PY_BINDING_H

#include <Python.h>

/* Python 3.10 (the oldest supported): the frame API that 3.11 made public in Python.h.
 * PyFrame_GetBack and PyFrame_Check are in frameobject.h there; PyFrame_GetGlobals and
 * PyFrame_GetLocals do not exist, so they are defined as pythoncapi-compat defines them
 * (new references; locals through PyFrame_FastToLocalsWithError, what frame.f_locals does).
 * 3.11+ compiles none of this. */
#if PY_VERSION_HEX < 0x030B0000
#include <frameobject.h>

static inline PyObject *PyFrame_GetGlobals(PyFrameObject *f) { return Py_NewRef(f->f_globals); }

static inline PyObject *PyFrame_GetLocals(PyFrameObject *f) {
    if (PyFrame_FastToLocalsWithError(f) < 0) return NULL;
    return Py_NewRef(f->f_locals);
}
#endif

/* Saves the pending exception (if any) into v and restores it: for code that must run Python
 * calls while an exception is set (closing a range on the way out of a raising call). */
#if PY_VERSION_HEX >= 0x030C0000
#define SAVE_EXC(v) PyObject *v = PyErr_GetRaisedException()
#define RESTORE_EXC(v) PyErr_SetRaisedException(v)
#else
#define SAVE_EXC(v)                                                                            \
    PyObject *v##_t, *v##_v, *v##_tb;                                                          \
    PyErr_Fetch(&v##_t, &v##_v, &v##_tb)
#define RESTORE_EXC(v) PyErr_Restore(v##_t, v##_v, v##_tb)
#endif

/* Appends item to list and drops the caller's reference to it; item NULL means its building
 * failed (an exception is set). 0, or -1 with an exception set. */
static inline int cprof_py_list_take(PyObject *list, PyObject *item) {
    if (!item) return -1;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

/* py_tracer.c: the with_stack Python-function tracer (PyEval_SetProfile / sys.monitoring). */
int cprof_py_tracer_add(PyObject *m);
/* py_tracer_threads.c (3.11): the threads the tracer's profile function was set on in this
 * session (reset: a new session; note: ts got it), and lost: a list of (threading ident,
 * native id) of the live ones whose profile function ours() no longer accepts (a
 * sys.setprofile replaced it), new reference or NULL with an exception set. 3.12+: nothing is
 * kept, lost is []. */
void cprof_py_traced_reset(void);
void cprof_py_traced_note(PyThreadState *ts);
PyObject *cprof_py_traced_lost(int (*ours)(PyThreadState *));
/* py_monitoring.c (3.12+): takes a free sys.monitoring tool id (PROFILER_ID first; all in use:
 * CprofError naming the holder), registers callbacks[i] for events[i] (sys.monitoring.events
 * names) and enables them, and releases all of it (events off, callbacks unregistered, id
 * freed: every step runs, the first error is raised). 0, or -1 with an exception set. */
int cprof_monitoring_take(PyObject *module, const char *tool_name, int *tool_id);
int cprof_monitoring_enable(int tool_id, const char *const *events, PyObject *const *callbacks,
                            size_t n);
int cprof_monitoring_release(int tool_id, const char *const *events, size_t n);
/* py_codename.c: a python_function name for code object co ("file(line): name", as
 * torch.profiler spells it; new reference, NULL with an exception set), and the directory
 * prefixes left out of its file (a sequence of str; None: none). -1: an exception is set and
 * no prefix is kept. */
PyObject *cprof_py_code_name(PyCodeObject *co);
PyObject *cprof_py_code_name_at(PyCodeObject *co, int line);
int cprof_py_code_name_strip(PyObject *prefixes);
/* py_codename.c: the name of a C callable the tracer records (a builtin, a method descriptor,
 * a bound C method): "{module}.{name}" or "{type}.{name}"; *ref: the object to keep alive
 * while the name is cached under the callable's PyMethodDef (new reference or NULL); *skip
 * when it is a cprof module's (not recorded). NULL with an exception on failure. */
PyObject *cprof_py_c_name(PyObject *f, PyObject **ref, int *skip);
/* py_hooks.c: nn.Module forward hooks in C (with_modules) and tensor shape capture. */
int cprof_py_hooks_add(PyObject *m);
/* py_regions.c: ranges around runs of chosen code objects (torch.compile's regions). */
int cprof_py_regions_add(PyObject *m);
/* 3.11 (with_stack's tracer names regions there): 1 and *id (its interned name) when code is a
 * region's code object, else 0; always 0 on 3.12+. GIL held. */
int cprof_py_regions_lookup(const void *code, uint32_t *id);
/* 3.12+ (py_tracer.c): a region's frame exits, seen by the callbacks of sys.monitoring tool id
 * regions_tool; when they run before the tracer's (a higher id), the with_stack tracer closes
 * that frame's range now if it is its innermost, and ignores the same exit when its own
 * callback sees it. */
void cprof_py_tracer_exit_ahead(const void *code, int regions_tool);
/* py_ops.c: attaching the torch-operator collector (ops_itt.c). */
int cprof_py_ops_add(PyObject *m);
/* py_report.c: the trace reader for cprof report / merge, and TraceFormatError. */
int cprof_py_report_add(PyObject *m);
/* py_memory.c: profile_memory's CPU memory sampler (mem_sampler.c). */
int cprof_py_memory_add(PyObject *m);
/* py_runprof.c: the run/step Profiler's BucketTimer type, timer gate, steps and statistics. */
int cprof_py_runprof_add(PyObject *m);
/* py_guard.c: guarded_exit, window exits called from C (a Ctrl-C at their entry included). */
int cprof_py_guard_add(PyObject *m);

/* py_snapshot.c: the Snapshot and GpuSnapshot types (a window's collection until written).
 * The wrap functions take ownership of snap (freed if the object cannot be made; NULL with an
 * exception set then). */
struct cprof_snapshot;
struct cprof_gpu_snapshot;
int cprof_py_snapshot_add(PyObject *m);
PyObject *cprof_py_snapshot_wrap(struct cprof_snapshot *snap);
PyObject *cprof_py_gpu_snapshot_wrap(struct cprof_gpu_snapshot *snap);

/* module.c, for the units above: a name's interned id through the module's name cache (0, or
 * -1 with an exception set), and the exception for a core error code (returns NULL; with
 * err_no, an I/O error's OSError errno). */
int cprof_py_name_id(PyObject *module, PyObject *name, uint32_t *id);
PyObject *cprof_py_raise(PyObject *module, int code, const char *what);
PyObject *cprof_py_raise_errno(PyObject *module, int code, const char *what, int err_no);

#endif
