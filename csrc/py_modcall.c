/* with_modules, "call" capture: the ModuleCall type, an object that replaces nn.Module.__call__
 * while a window is open (cprof/_modules.py). A module call then runs
 *     ModuleCall(module, *args, **kwargs)
 *         cprof_hooks_enter   name, shapes of the positional args, push  (py_hooks.c)
 *         original(module, *args, **kwargs)                               (torch's __call__)
 *         cprof_hooks_exit    pop, also when the original raised (any BaseException)
 * so torch's Module._call_impl keeps its fast path (no global hook is registered), which saves
 * ~1.3 us per module call over the "hooks" capture.
 *
 * How CPython calls it: a type whose __call__ is not a Python function gets slot_tp_call, which
 * looks __call__ up on the type and, for an object whose type has Py_TPFLAGS_METHOD_DESCRIPTOR,
 * calls it unbound with the instance prepended (no bound method is made) through its vectorcall.
 * Looked up on an instance (m.__call__, super().__call__) it binds like a function; looked up
 * on the class (nn.Module.__call__) it gives the original, which is what torch.compile must see
 * (modcall_descr_get). Each object keeps its own original and hooks, so a stale one (still
 * held by code that replaced Module.__call__ after it) only passes calls on after disable().
 * Threads: any thread holding the GIL. */
#define PY_SSIZE_T_CLEAN
#include "py_binding.h"
#include "py_hooks.h"

#include <stddef.h>

#include <structmember.h>

#include "cprof.h"

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *hooks;    /* the ModuleHooks that names, measures and keeps the open calls */
    PyObject *original; /* the __call__ replaced: called with the same arguments */
    int enabled;        /* 0 after disable(): calls go straight to original, for good */
    int paused;         /* > 0 between pause() and resume() (dynamo compiling): calls made */
    unsigned long paused_thread; /* by this thread go straight to original too */
} ModCallObject;

/* args[0] is the module; args (and nargsf, with its PY_VECTORCALL_ARGUMENTS_OFFSET permission,
 * which covers args[-1], the caller's slot) and kwnames go to the original unchanged. */
static PyObject *modcall_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                    PyObject *kwnames) {
    ModCallObject *self = (ModCallObject *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *original = self->original;
    if (CPROF_UNLIKELY(!original)) {
        PyErr_SetString(PyExc_TypeError, "cprof ModuleCall: cleared");
        return NULL;
    }
    if (CPROF_UNLIKELY(!self->enabled || nargs < 1) ||
        CPROF_UNLIKELY(self->paused && self->paused_thread == PyThread_get_thread_ident()))
        return PyObject_Vectorcall(original, args, nargsf, kwnames);
    /* the caller holds a reference to self for the call, and self holds hooks and original */
    PyObject *hooks = self->hooks, *m = args[0];
    uint32_t mark;
    /* the keyword arguments' values follow the positional ones in args: record_shapes reads
     * them all, in call order (hidden_states=..., attention_mask=... are inputs too) */
    Py_ssize_t ninputs = nargs - 1 + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    int pushed = cprof_hooks_enter(hooks, m, args + 1, ninputs, &mark);
    if (CPROF_UNLIKELY(pushed < 0)) return NULL;
    PyObject *out = PyObject_Vectorcall(original, args, nargsf, kwnames);
    if (CPROF_LIKELY(pushed)) {
        if (CPROF_LIKELY(out != NULL)) {
            cprof_hooks_exit(hooks, m, mark);
        } else {
            SAVE_EXC(exc); /* closing may drop a module reference: keep the error as it is */
            cprof_hooks_exit(hooks, m, mark);
            RESTORE_EXC(exc);
        }
    }
    return out;
}

static PyObject *modcall_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"hooks", "original", NULL};
    PyObject *hooks, *original;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:ModuleCall", kwlist, &hooks, &original))
        return NULL;
    if (!cprof_hooks_check(hooks)) {
        PyErr_SetString(PyExc_TypeError, "ModuleCall: hooks must be a cprof._C.ModuleHooks");
        return NULL;
    }
    if (!PyCallable_Check(original)) {
        PyErr_SetString(PyExc_TypeError, "ModuleCall: original must be callable");
        return NULL;
    }
    ModCallObject *self = (ModCallObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->vectorcall = modcall_vectorcall;
    self->hooks = Py_NewRef(hooks);
    self->original = Py_NewRef(original);
    self->enabled = 1;
    return (PyObject *)self;
}

/* module.__call__ (and super().__call__) -> a method bound to this object, recorded like a
 * call; nn.Module.__call__ read through the class -> the original: dynamo reads it there when
 * it traces a module call, and inlines torch's function as it does unprofiled (it cannot
 * trace this object). CPython's own calls (slot_tp_call) take this object from the type's
 * dict without calling __get__. */
static PyObject *modcall_descr_get(PyObject *self, PyObject *obj, PyObject *type) {
    (void)type;
    ModCallObject *mc = (ModCallObject *)self;
    if (obj == NULL || obj == Py_None) return Py_NewRef(mc->original ? mc->original : self);
    return PyMethod_New(self, obj);
}

static int modcall_traverse(ModCallObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->hooks);
    Py_VISIT(self->original);
    return 0;
}

static int modcall_clear(ModCallObject *self) {
    self->enabled = 0;
    Py_CLEAR(self->hooks);
    Py_CLEAR(self->original);
    return 0;
}

static void modcall_dealloc(ModCallObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    modcall_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *modcall_disable(ModCallObject *self, PyObject *unused) {
    (void)unused;
    self->enabled = 0;
    Py_RETURN_NONE;
}

/* One thread at a time: a pause() from another thread while paused moves the pause to it
 * (dynamo compiles one frame at a time, under its own lock). */
static PyObject *modcall_pause(ModCallObject *self, PyObject *unused) {
    (void)unused;
    self->paused++;
    self->paused_thread = PyThread_get_thread_ident();
    Py_RETURN_NONE;
}

static PyObject *modcall_resume(ModCallObject *self, PyObject *unused) {
    (void)unused;
    if (self->paused > 0) self->paused--;
    Py_RETURN_NONE;
}

static PyObject *modcall_get_paused(ModCallObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->paused > 0);
}

static PyObject *modcall_get_enabled(ModCallObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->enabled);
}

/* The original's __name__, __qualname__ and __doc__, as functools.wraps copies them, so code
 * that prints Module.__call__ sees torch's names; and its __code__, which torch.compile(module)
 * requires of module.__call__ (it wraps that bound method and compiles the frames it runs). */
static PyObject *modcall_get_attr_of_original(ModCallObject *self, void *name) {
    if (!self->original) Py_RETURN_NONE;
    return PyObject_GetAttrString(self->original, (const char *)name);
}

static PyObject *modcall_repr(ModCallObject *self) {
    return PyUnicode_FromFormat("<cprof ModuleCall of %R%s>",
                                self->original ? self->original : Py_None,
                                !self->enabled ? " (disabled)" : self->paused ? " (paused)" : "");
}

static PyMethodDef modcall_methods[] = {
    {"disable", (PyCFunction)modcall_disable, METH_NOARGS,
     "Stops recording: every later call goes straight to the original."},
    {"pause", (PyCFunction)modcall_pause, METH_NOARGS,
     "This thread's calls go straight to the original until the matching resume() (they "
     "nest)."},
    {"resume", (PyCFunction)modcall_resume, METH_NOARGS, "Undoes one pause()."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef modcall_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(ModCallObject, vectorcall), READONLY, NULL},
    {"original", T_OBJECT, offsetof(ModCallObject, original), READONLY,
     "The __call__ this object replaced and calls."},
    {"hooks", T_OBJECT, offsetof(ModCallObject, hooks), READONLY,
     "The ModuleHooks that records the calls."},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef modcall_getset[] = {
    {"enabled", (getter)modcall_get_enabled, NULL, "False after disable().", NULL},
    {"paused", (getter)modcall_get_paused, NULL,
     "True between pause() and resume() (on the thread that paused).", NULL},
    {"__name__", (getter)modcall_get_attr_of_original, NULL, NULL, "__name__"},
    {"__qualname__", (getter)modcall_get_attr_of_original, NULL, NULL, "__qualname__"},
    {"__doc__", (getter)modcall_get_attr_of_original, NULL, NULL, "__doc__"},
    {"__code__", (getter)modcall_get_attr_of_original, NULL, NULL, "__code__"},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot modcall_slots[] = {
    {Py_tp_new, modcall_new},
    {Py_tp_dealloc, modcall_dealloc},
    {Py_tp_traverse, modcall_traverse},
    {Py_tp_clear, modcall_clear},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_descr_get, modcall_descr_get},
    {Py_tp_repr, modcall_repr},
    {Py_tp_methods, modcall_methods},
    {Py_tp_members, modcall_members},
    {Py_tp_getset, modcall_getset},
    {0, NULL},
};

/* The type's doc: the instances' __doc__ is the original's (a getset above). */
static PyType_Spec modcall_spec = {
    .name = "cprof._C.ModuleCall",
    .basicsize = sizeof(ModCallObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .slots = modcall_slots,
};

int cprof_py_modcall_add(PyObject *m) {
    PyObject *type = PyType_FromModuleAndSpec(m, &modcall_spec, NULL);
    if (!type) return -1;
    int rc = PyModule_AddObjectRef(m, "ModuleCall", type);
    Py_DECREF(type);
    return rc;
}
