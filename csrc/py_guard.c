/* Guarded window exits: `ProfilerContext.__exit__` / `profile.__exit__` as C callables.
 *
 * A Ctrl-C (SIGINT's KeyboardInterrupt, or any exception a signal handler raises) is raised at
 * the next bytecode that checks for pending signals, and the first such check of a Python
 * __exit__ is its entry, before any `try:` in it. A with block's exit interrupted there left
 * its window open for good: every later window was refused. `_C.guarded_exit(impl, salvage)`
 * is a descriptor whose bound call runs impl(self, exc_type, exc, tb) from C: no Python
 * bytecode runs between the with statement and that call, so an interrupt lands inside impl's
 * call, and when impl raises, salvage(self, exc) closes what impl left open before the
 * exception goes on (salvage's own errors are reported as unraisable, never replacing it). */
#define PY_SSIZE_T_CLEAN
#include "py_binding.h"

#include <structmember.h>

typedef struct {
    PyObject_HEAD
    PyObject *impl;
    PyObject *salvage;
    vectorcallfunc vectorcall;
} GuardObject;

static PyObject *guard_vectorcall(PyObject *self_, PyObject *const *args, size_t nargsf,
                                  PyObject *kwnames) {
    GuardObject *self = (GuardObject *)self_;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *res = PyObject_Vectorcall(self->impl, args, (size_t)nargs, kwnames);
    if (res || nargs < 1) return res;
    SAVE_EXC(exc);
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *value = exc;
#else
    PyErr_NormalizeException(&exc_t, &exc_v, &exc_tb);
    if (exc_v && exc_tb) PyException_SetTraceback(exc_v, exc_tb);
    PyObject *value = exc_v ? exc_v : Py_None;
#endif
    PyObject *r = PyObject_CallFunctionObjArgs(self->salvage, args[0], value, NULL);
    if (r) Py_DECREF(r);
    else PyErr_WriteUnraisable(self->salvage);
    RESTORE_EXC(exc);
    return NULL;
}

static PyObject *guard_new(PyTypeObject *tp, PyObject *args, PyObject *kwds) {
    PyObject *impl, *salvage;
    if (kwds && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "guarded_exit(impl, salvage) takes no keywords");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OO:guarded_exit", &impl, &salvage)) return NULL;
    if (!PyCallable_Check(impl) || !PyCallable_Check(salvage)) {
        PyErr_SetString(PyExc_TypeError, "guarded_exit(impl, salvage) takes two callables");
        return NULL;
    }
    GuardObject *self = (GuardObject *)tp->tp_alloc(tp, 0);
    if (!self) return NULL;
    self->impl = Py_NewRef(impl);
    self->salvage = Py_NewRef(salvage);
    self->vectorcall = guard_vectorcall;
    return (PyObject *)self;
}

static int guard_traverse(GuardObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->impl);
    Py_VISIT(self->salvage);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static int guard_clear(GuardObject *self) {
    Py_CLEAR(self->impl);
    Py_CLEAR(self->salvage);
    return 0;
}

static void guard_dealloc(GuardObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    guard_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* A method: bound to the instance it is looked up on (obj None: the class, itself). */
static PyObject *guard_get(PyObject *self, PyObject *obj, PyObject *type) {
    (void)type;
    if (obj == NULL || obj == Py_None) return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyMemberDef guard_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(GuardObject, vectorcall), READONLY, NULL},
    {"impl", T_OBJECT, offsetof(GuardObject, impl), READONLY, "The exit that runs."},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot guard_slots[] = {
    {Py_tp_doc, "guarded_exit(impl, salvage): a method calling impl from C, then salvage(self, "
                "exc) when impl raised (an interrupt at impl's entry included)."},
    {Py_tp_new, guard_new},
    {Py_tp_dealloc, guard_dealloc},
    {Py_tp_traverse, guard_traverse},
    {Py_tp_clear, guard_clear},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_descr_get, guard_get},
    {Py_tp_members, guard_members},
    {0, NULL},
};

static PyType_Spec guard_spec = {
    .name = "cprof._C.guarded_exit",
    .basicsize = sizeof(GuardObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
             Py_TPFLAGS_METHOD_DESCRIPTOR,
    .slots = guard_slots,
};

int cprof_py_guard_add(PyObject *m) {
    PyObject *tp = PyType_FromModuleAndSpec(m, &guard_spec, NULL);
    if (!tp) return -1;
    int rc = PyModule_AddObjectRef(m, "guarded_exit", tp);
    Py_DECREF(tp);
    return rc;
}
