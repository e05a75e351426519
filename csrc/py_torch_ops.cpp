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

PyObject *mem_result(int rc, const std::string &err, const char *what) {
    if (rc < 0) {
        PyErr_Format(PyExc_RuntimeError, "cprof: %s the allocation reporter failed: %s", what,
                     err.c_str());
        return nullptr;
    }
    return PyBool_FromLong(rc);
}

PyObject *py_mem_push(PyObject *, PyObject *) {
    std::string err;
    int rc = cprof_torch_ops_mem_push(&err);
    return mem_result(rc, err, "installing");
}

PyObject *py_mem_pop(PyObject *, PyObject *) {
    std::string err;
    int rc = cprof_torch_ops_mem_pop(&err);
    return mem_result(rc, err, "removing");
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
    {"mem_push", py_mem_push, METH_NOARGS,
     "mem_push() -> bool: profile_memory's allocation reporter on this thread (and the threads "
     "torch hands work to); False when torch's profiler state holds the slot."},
    {"mem_pop", py_mem_pop, METH_NOARGS,
     "mem_pop() -> bool: takes it away (the thread that pushed it); False when not on top."},
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
