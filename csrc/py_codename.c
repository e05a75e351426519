/* The names of python_function events, as torch.profiler's Python tracer spells them (and of
 * the C functions with_stack records, at the end):
 * "{file}({first line}): {co_name}" (a frame already running when a window opens: the line
 * it is at), the file relative to the first of a list of directory
 * prefixes it lies under (the sys.path / site-packages entries torch strips, longest first,
 * given at each tracer start by cprof/_pystack.py), else whole. The tracer (py_tracer.c)
 * builds a name once per code object per session. GIL held throughout. */
#include "py_binding.h" /* Python.h first: it sets the feature macros strdup needs */

#include <stdlib.h>
#include <string.h>

static char **strip;  /* UTF-8 prefixes, each ending in a separator */
static size_t nstrip;

static void strip_free(void) {
    for (size_t i = 0; i < nstrip; i++) free(strip[i]);
    free(strip);
    strip = NULL;
    nstrip = 0;
}

int cprof_py_code_name_strip(PyObject *prefixes) {
    strip_free();
    if (!prefixes || prefixes == Py_None) return 0;
    PyObject *seq = PySequence_Fast(prefixes, "strip_prefixes must be a sequence of str");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    char **v = n ? calloc((size_t)n, sizeof *v) : NULL;
    size_t k = 0;
    if (n && !v) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        const char *u = PyUnicode_Check(item) ? PyUnicode_AsUTF8(item) : NULL;
        if (!u) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "strip_prefixes must be a sequence of str");
            goto fail;
        }
        if (!*u) continue; /* "" would strip nothing */
        if (!(v[k] = strdup(u))) {
            PyErr_NoMemory();
            goto fail;
        }
        k++;
    }
    Py_DECREF(seq);
    strip = v;
    nstrip = k;
    return 0;
fail:
    for (size_t i = 0; i < k; i++) free(v[i]);
    free(v);
    Py_DECREF(seq);
    return -1;
}

PyObject *cprof_py_code_name(PyCodeObject *co) { return cprof_py_code_name_at(co, -1); }

/* line < 0: the code's first line (a call made inside the window); else the line a frame
 * running when the window opened was at, as torch.profiler names those. */
PyObject *cprof_py_code_name_at(PyCodeObject *co, int line) {
    if (line < 0) line = co->co_firstlineno;
    const char *rel = NULL;
    if (nstrip) {
        Py_ssize_t flen;
        const char *f = PyUnicode_AsUTF8AndSize(co->co_filename, &flen);
        if (!f) PyErr_Clear(); /* lone surrogates: the whole name */
        for (size_t i = 0; f && i < nstrip; i++) {
            size_t plen = strlen(strip[i]);
            if ((size_t)flen > plen && memcmp(f, strip[i], plen) == 0) {
                rel = f + plen;
                break;
            }
        }
    }
    return rel ? PyUnicode_FromFormat("%s(%d): %U", rel, line, co->co_name)
               : PyUnicode_FromFormat("%U(%d): %U", co->co_filename, line, co->co_name);
}

/* ---- C functions' names (with_stack's C calls): "{module}.{name}", "{type}.{name}" ---- */

static int is_cprof_module(PyObject *modname) {
    if (!modname || !PyUnicode_Check(modname)) return 0;
    const char *s = PyUnicode_AsUTF8(modname);
    if (!s) {
        PyErr_Clear();
        return 0;
    }
    return strcmp(s, "cprof") == 0 || strncmp(s, "cprof.", 6) == 0;
}

/* "{module}.{name}" (module omitted when unknown); *skip when the module is cprof's. */
static PyObject *function_name(PyObject *module, const char *name, int *skip) {
    PyObject *modname = NULL;
    if (module && PyModule_Check(module)) {
        modname = PyModule_GetNameObject(module);
        if (!modname) PyErr_Clear();
    } else if (module && PyUnicode_Check(module)) {
        modname = Py_NewRef(module);
    }
    *skip = is_cprof_module(modname);
    PyObject *s = modname ? PyUnicode_FromFormat("%U.%s", modname, name)
                          : PyUnicode_FromString(name);
    Py_XDECREF(modname);
    return s;
}

/* "{type}.{name}", the type named as reprs do: "list", "torch._C.TensorBase". */
static PyObject *method_name(PyTypeObject *tp, const char *name, int *skip) {
    PyObject *mod = PyObject_GetAttrString((PyObject *)tp, "__module__");
    if (!mod) PyErr_Clear();
    PyObject *qual = PyObject_GetAttrString((PyObject *)tp, "__qualname__");
    if (!qual) {
        PyErr_Clear();
        qual = PyUnicode_FromString(tp->tp_name);
        if (!qual) {
            Py_XDECREF(mod);
            return NULL;
        }
    }
    *skip = is_cprof_module(mod);
    PyObject *s;
    if (mod && PyUnicode_Check(mod) && PyUnicode_CompareWithASCIIString(mod, "builtins") != 0)
        s = PyUnicode_FromFormat("%U.%U.%s", mod, qual, name);
    else
        s = PyUnicode_FromFormat("%U.%s", qual, name);
    Py_XDECREF(mod);
    Py_DECREF(qual);
    return s;
}

/* Contract in py_binding.h. */
PyObject *cprof_py_c_name(PyObject *f, PyObject **ref, int *skip) {
    *ref = NULL;
    if (Py_IS_TYPE(f, &PyMethodDescr_Type)) {
        PyMethodDescrObject *d = (PyMethodDescrObject *)f;
        *ref = Py_NewRef(f);
        return method_name(PyDescr_TYPE(d), d->d_method->ml_name, skip);
    }
    PyCFunctionObject *cf = (PyCFunctionObject *)f;
    PyMethodDef *ml = cf->m_ml;
    PyObject *self = (ml->ml_flags & METH_STATIC) ? NULL : cf->m_self;
    if (!self || PyModule_Check(self) || PyCapsule_CheckExact(self) ||
        (cf->m_module && PyUnicode_Check(cf->m_module))) {
        /* a function: the object owns (or outlives) its PyMethodDef. A module's str in
         * m_module marks one too: pybind11 binds its functions to a private record object
         * (torch._C._get_tracing_state), which is no instance to name a method after */
        *ref = Py_NewRef(f);
        return function_name(cf->m_module, ml->ml_name, skip);
    }
    if (PyType_Check(self)) { /* a class method bound to its class */
        *ref = Py_NewRef(f);
        return method_name((PyTypeObject *)self, ml->ml_name, skip);
    }
    /* a method bound to an instance (3.11 makes one per call): name it after the type that
     * defines it, as its method descriptor (the key of 3.12's CALL events) does */
    PyTypeObject *tp = Py_TYPE(self);
    PyObject *d = PyObject_GetAttrString((PyObject *)tp, ml->ml_name);
    if (d && Py_IS_TYPE(d, &PyMethodDescr_Type) && ((PyMethodDescrObject *)d)->d_method == ml) {
        *ref = d;
        tp = PyDescr_TYPE((PyMethodDescrObject *)d);
    } else {
        if (!d) PyErr_Clear();
        Py_XDECREF(d);
    }
    return method_name(tp, ml->ml_name, skip);
}
