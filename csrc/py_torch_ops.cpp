/* Binding of the RecordFunction observer (torch_ops.cpp): the module cprof._torch_ops, which
 * takes cprof._C's C functions from their capsule (op_api.h) and says which torch it was
 * built for (cprof/_ops.py checks before using it). */
#include <Python.h>

#include <cstdint>
#include <string>

#include "torch_ops.h"

#ifndef CPROF_TORCH_VERSION
#define CPROF_TORCH_VERSION "unknown"
#endif

/* py_torch_shapes.cpp: the capsule of the module-call shape reader */
PyObject *cprof_torch_shapes_api(PyObject *base_t, PyObject *tensor_t, PyObject *parameter_t);

namespace {

PyObject *py_shapes_api(PyObject *, PyObject *args) {
    PyObject *base_t, *tensor_t, *parameter_t;
    if (!PyArg_ParseTuple(args, "OOO:shapes_api", &base_t, &tensor_t, &parameter_t))
        return nullptr;
    return cprof_torch_shapes_api(base_t, tensor_t, parameter_t);
}

PyObject *py_add(PyObject *, PyObject *arg) {
    int shapes = PyObject_IsTrue(arg);
    if (shapes < 0) return nullptr;
    uint64_t h = 0;
    std::string err;
    if (cprof_torch_ops_add(shapes, &h, &err) != 0) {
        PyErr_Format(PyExc_RuntimeError, "cprof: adding the RecordFunction observer failed: %s",
                     err.c_str());
        return nullptr;
    }
    return PyLong_FromUnsignedLongLong(static_cast<unsigned long long>(h));
}

PyObject *py_add_async(PyObject *, PyObject *) {
    uint64_t h = 0;
    std::string err;
    if (cprof_torch_ops_add_async(&h, &err) != 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "cprof: adding the async-range RecordFunction callback failed: %s",
                     err.c_str());
        return nullptr;
    }
    return PyLong_FromUnsignedLongLong(static_cast<unsigned long long>(h));
}

int state_users(PyObject *arg, int *users) {
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v <= 0 || v > (CPROF_STATE_OPS | CPROF_STATE_MEMORY | CPROF_STATE_SHAPES)) {
        PyErr_Format(PyExc_ValueError, "cprof: state users must be a mask of %d (operators), "
                     "%d (memory) and %d (operators' inputs), got %ld", CPROF_STATE_OPS,
                     CPROF_STATE_MEMORY, CPROF_STATE_SHAPES, v);
        return -1;
    }
    *users = static_cast<int>(v);
    return 0;
}

PyObject *py_state_push(PyObject *, PyObject *arg) {
    int users;
    if (state_users(arg, &users) < 0) return nullptr;
    std::string err;
    int rc = cprof_torch_ops_state_push(users, &err);
    if (rc < 0) {
        PyErr_Format(PyExc_RuntimeError, "cprof: installing cprof's profiler state failed: %s",
                     err.c_str());
        return nullptr;
    }
    return PyBool_FromLong(rc);
}

PyObject *py_state_pop(PyObject *, PyObject *arg) {
    int users, had = 0;
    if (state_users(arg, &users) < 0) return nullptr;
    std::string err;
    int rc = cprof_torch_ops_state_pop(users, &had, &err);
    if (rc < 0) {
        PyErr_Format(PyExc_RuntimeError, "cprof: removing cprof's profiler state failed: %s",
                     err.c_str());
        return nullptr;
    }
    if (rc == 0) return PyLong_FromLong(-1);
    return PyLong_FromLong(had);
}

PyObject *py_remove(PyObject *, PyObject *arg) {
    unsigned long long h = PyLong_AsUnsignedLongLong(arg);
    if (h == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return nullptr;
    std::string err;
    if (cprof_torch_ops_remove(static_cast<uint64_t>(h), &err) != 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "cprof: removing the RecordFunction observer failed: %s", err.c_str());
        return nullptr;
    }
    Py_RETURN_NONE;
}

PyObject *py_stats(PyObject *, PyObject *) {
    uint64_t shaped = 0, errors = 0;
    cprof_torch_ops_stats(&shaped, &errors);
    return Py_BuildValue("{s:K,s:K}", "shaped", static_cast<unsigned long long>(shaped),
                         "errors", static_cast<unsigned long long>(errors));
}

PyMethodDef methods[] = {
    {"add", py_add, METH_O,
     "add(record_shapes) -> handle: records torch's operators (and their inputs' shapes) on this "
     "thread and the threads it hands work to, until remove(handle) on this thread."},
    {"add_async", py_add_async, METH_NOARGS,
     "add_async() -> handle: records torch's async ranges (a collective's \"gloo:all_reduce\") "
     "from their begin to their end on any thread, until remove(handle) (any thread)."},
    {"remove", py_remove, METH_O, "remove(handle): takes the observer away (its own thread)."},
    {"state_push", py_state_push, METH_O,
     "state_push(users) -> bool: cprof's profiler state on this thread (and the threads torch "
     "hands work to) for users, a mask of 1 (operator capture: torch's _RecordFunctionFast "
     "records), 2 (profile_memory's allocation reports) and 4 (record_shapes: torch passes "
     "non-tensor inputs, its profiler config says enabled); False when another profiler state "
     "(torch.profiler's, torch's ITT) holds the slot."},
    {"state_pop", py_state_pop, METH_O,
     "state_pop(users) -> int: takes those users away (the state goes with its last one), on "
     "the thread that pushed; returns the users it had, or -1 when it is not on top."},
    {"shapes_api", py_shapes_api, METH_VARARGS,
     "shapes_api(TensorBase, Tensor, Parameter) -> capsule: module-call shapes read through "
     "torch's C++ tensors, for cprof._C.ModuleHooks(fast_shapes=...)."},
    {"stats", py_stats, METH_NOARGS,
     "stats() -> {shaped, errors}: ops recorded with shapes; shapes that could not be read."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "cprof._torch_ops",
                      "torch's operators with shapes, through a RecordFunction observer.", -1,
                      methods, nullptr, nullptr, nullptr, nullptr};

} // namespace

extern "C" __attribute__((visibility("default"))) PyObject *PyInit__torch_ops(void) {
    auto *api = static_cast<const cprof_op_api *>(PyCapsule_Import(CPROF_OP_API_CAPSULE, 0));
    if (!api) return nullptr;
    if (api->version != CPROF_OP_API_VERSION || api->size < sizeof(cprof_op_api)) {
        PyErr_SetString(PyExc_ImportError,
                        "cprof._torch_ops was built for another cprof._C: rebuild cprof "
                        "(python setup.py build_ext --inplace)");
        return nullptr;
    }
    cprof_torch_ops_init(api);
    PyObject *m = PyModule_Create(&moddef);
    if (!m) return nullptr;
    if (PyModule_AddStringConstant(m, "TORCH_VERSION", CPROF_TORCH_VERSION) < 0) {
        Py_DECREF(m);
        return nullptr;
    }
    return m;
}
