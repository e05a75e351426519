/* Binding of ops_itt.c: attaching cprof as torch's ITT collector (cprof/_ops.py drives it). */
#include "py_binding.h"

#include "cprof.h"

/* ops_attach(torch_lib, self_path) -> None when attached, else the reason (str). */
static PyObject *py_ops_attach(PyObject *self, PyObject *args) {
    (void)self;
    const char *torch_lib, *self_path, *why = NULL;
    if (!PyArg_ParseTuple(args, "ss:ops_attach", &torch_lib, &self_path)) return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cprof_ops_itt_attach(torch_lib, self_path, &why);
    Py_END_ALLOW_THREADS
    if (rc == CPROF_OK) Py_RETURN_NONE;
    return PyUnicode_FromString(why ? why : cprof_strerror(rc));
}

static PyObject *py_ops_stats(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    return Py_BuildValue("{s:O,s:K}", "attached", cprof_ops_itt_attached() ? Py_True : Py_False,
                         "names", (unsigned long long)cprof_ops_itt_names());
}

static PyMethodDef ops_methods[] = {
    {"ops_attach", py_ops_attach, METH_VARARGS,
     "ops_attach(torch_lib, self_path) -> None or str: makes this extension the ITT collector of "
     "the loaded torch library, so emit_itt operator ranges are recorded as cpu_op; returns why "
     "not when it cannot."},
    {"ops_stats", py_ops_stats, METH_NOARGS,
     "ops_stats() -> {attached, names}: whether the collector is attached, distinct op names."},
    {NULL, NULL, 0, NULL},
};

int cprof_py_ops_add(PyObject *m) { return PyModule_AddFunctions(m, ops_methods); }
