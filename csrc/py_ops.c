/* Binding of ops_itt.c: attaching cprof as torch's ITT collector (cprof/_ops.py drives it),
 * and the capsule of C functions the RecordFunction observer (csrc/torch_ops.cpp) records with. */
#include "py_binding.h"

#include "cprof.h"
#include "op_api.h"

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

static PyObject *py_ops_itt_recording(PyObject *self, PyObject *arg) {
    (void)self;
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    cprof_ops_itt_set_recording(on);
    Py_RETURN_NONE;
}

static PyMethodDef ops_methods[] = {
    {"ops_itt_recording", py_ops_itt_recording, METH_O,
     "ops_itt_recording(on): whether ITT task begin / end are recorded as operators (cprof's "
     "ITT capture turned torch's emit_itt on) or ignored (the program's own ITT annotations)."},
    {"ops_attach", py_ops_attach, METH_VARARGS,
     "ops_attach(torch_lib, self_path) -> None or str: makes this extension the ITT collector of "
     "the loaded torch library, so emit_itt operator ranges are recorded as cpu_op; returns why "
     "not when it cannot."},
    {"ops_stats", py_ops_stats, METH_NOARGS,
     "ops_stats() -> {attached, names}: whether the collector is attached, distinct op names."},
    {NULL, NULL, 0, NULL},
};

static int async_open_user(uint32_t name_id, uint64_t *handle) {
    return cprof_events_async_open(name_id, CPROF_CAT_USER_ANNOTATION, handle);
}

static const cprof_op_api op_api = {
    .version = CPROF_OP_API_VERSION,
    .size = sizeof(cprof_op_api),
    .name_id = cprof_ops_name_id,
    .intern = cprof_names_intern,
    .text = cprof_names_get,
    .push_op = cprof_events_push_op_args,
    .pop_op = cprof_events_pop_op,
    .cpu_on = cprof_events_cpu_on,
    .push_op_seq = cprof_events_push_op_seq,
    .async_open = async_open_user,
    .async_close = cprof_events_async_close,
    .mem_event = cprof_mem_events_add,
};

int cprof_py_ops_add(PyObject *m) {
    if (PyModule_AddFunctions(m, ops_methods) < 0) return -1;
    PyObject *cap = PyCapsule_New((void *)&op_api, CPROF_OP_API_CAPSULE, NULL);
    if (!cap) return -1;
    int rc = PyModule_AddObject(m, "_op_api", cap);
    if (rc < 0) Py_DECREF(cap);
    return rc;
}
