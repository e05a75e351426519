/* record_shapes for module calls, read through torch's C++ tensors (part of cprof._torch_ops).
 *
 * py_hooks.c reads a module call's tensor arguments from Python: `t.shape` makes a torch.Size,
 * `t.dtype` a lookup, ~1,600 instructions a tensor (docs/benchmarks.md, callgrind). Here a
 * tensor of the exact type torch.Tensor or torch.nn.Parameter is unpacked to its at::Tensor
 * and its sizes and scalar type are read directly; the arguments' binary description (kinds,
 * dtypes, sizes) keys a per-thread cache of interned fragments, so a repeated call formats
 * nothing. The text is py_hooks.c's, byte for byte (a test compares the two on many argument
 * lists): "Input Dims" and "Input type" as torch.profiler writes them for a module call.
 * Anything else that is a tensor (a subclass: its Python `.shape` may say otherwise) or has a
 * dtype outside the common ones is left to py_hooks.c (args_fragment returns 0).
 * GIL held throughout (module calls come from Python). */
#include <Python.h>

#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "torch_ops.h"

namespace {

PyObject *base_type = nullptr;      /* torch._C.TensorBase: what py_hooks.c calls a tensor */
PyObject *tensor_type = nullptr;    /* torch.Tensor and torch.nn.Parameter: the types read */
PyObject *parameter_type = nullptr; /* here (all three owned) */

enum : uint64_t { K_TENSOR = 1, K_NESTED, K_SCALAR, K_TENSORLIST, K_NOT_TENSOR, K_SCALARLIST,
                  K_OTHERLIST, K_OTHER };

/* The dtypes whose C++ type name is what py_hooks.c writes (cprof/_modules.py DTYPE_NAMES);
 * NULL: left to py_hooks.c */
const char *dtype_literal(c10::ScalarType t) {
    switch (t) {
    case c10::ScalarType::Float: return "\"float\"";
    case c10::ScalarType::Double: return "\"double\"";
    case c10::ScalarType::Half: return "\"c10::Half\"";
    case c10::ScalarType::BFloat16: return "\"c10::BFloat16\"";
    case c10::ScalarType::Bool: return "\"bool\"";
    case c10::ScalarType::Byte: return "\"unsigned char\"";
    case c10::ScalarType::Char: return "\"signed char\"";
    case c10::ScalarType::Short: return "\"short int\"";
    case c10::ScalarType::Int: return "\"int\"";
    case c10::ScalarType::Long: return "\"long int\"";
    case c10::ScalarType::ComplexFloat: return "\"c10::complex<float>\"";
    case c10::ScalarType::ComplexDouble: return "\"c10::complex<double>\"";
    default: return nullptr;
    }
}

bool exact_tensor(PyObject *o) {
    PyObject *tp = reinterpret_cast<PyObject *>(Py_TYPE(o));
    return tp == tensor_type || tp == parameter_type;
}

bool is_number(PyObject *o) { return PyLong_Check(o) || PyFloat_Check(o) || PyComplex_Check(o); }

/* A tensor's key words; false when py_hooks.c must read it (a subclass, an unusual dtype). */
bool key_tensor(std::vector<uint64_t> &k, PyObject *o) {
    if (!exact_tensor(o)) return false;
    const at::Tensor &t = THPVariable_Unpack(o);
    if (!dtype_literal(t.scalar_type())) return false;
    uint64_t head = static_cast<uint64_t>(t.scalar_type()) << 8;
    if (t.is_nested()) { /* its Python .shape raises: written [] */
        k.push_back(K_NESTED | head);
        return true;
    }
    auto sizes = t.sym_sizes();
    k.push_back(K_TENSOR | head | static_cast<uint64_t>(sizes.size()) << 16);
    for (const auto &d : sizes) {
        auto v = d.maybe_as_int();
        k.push_back(static_cast<uint64_t>(v ? *v : -1)); /* symbolic: -1, as py_hooks.c */
    }
    return true;
}

/* The arguments' key, as py_hooks.c's put_arg reads them; false: not handled here. */
bool key_of(std::vector<uint64_t> &k, PyObject *const *args, ptrdiff_t n) {
    k.clear();
    for (ptrdiff_t i = 0; i < n; i++) {
        PyObject *a = args[i];
        if (PyObject_TypeCheck(a, reinterpret_cast<PyTypeObject *>(base_type))) {
            if (!key_tensor(k, a)) return false;
        } else if (is_number(a)) {
            k.push_back(K_SCALAR);
        } else if (PyList_Check(a) || PyTuple_Check(a)) {
            Py_ssize_t len = PySequence_Fast_GET_SIZE(a), tensors = 0, numbers = 0;
            PyObject **items = PySequence_Fast_ITEMS(a);
            for (Py_ssize_t j = 0; j < len; j++) {
                if (PyObject_TypeCheck(items[j], reinterpret_cast<PyTypeObject *>(base_type)))
                    tensors++;
                else if (is_number(items[j]))
                    numbers++;
            }
            if (!tensors) {
                k.push_back(numbers == len ? K_SCALARLIST : K_OTHERLIST);
                continue;
            }
            k.push_back(K_TENSORLIST | static_cast<uint64_t>(len) << 8);
            for (Py_ssize_t j = 0; j < len; j++) {
                if (PyObject_TypeCheck(items[j], reinterpret_cast<PyTypeObject *>(base_type))) {
                    if (!key_tensor(k, items[j])) return false;
                } else {
                    k.push_back(K_NOT_TENSOR);
                }
            }
        } else {
            k.push_back(K_OTHER);
        }
    }
    return true;
}

void put_i64(std::string &s, int64_t v) {
    char b[24];
    int len = std::snprintf(b, sizeof b, "%lld", static_cast<long long>(v));
    s.append(b, static_cast<size_t>(len));
}

/* Dims and type of one key entry starting at k[i]; returns the index after it. */
size_t put_tensor(std::string &dims, std::string &types, const std::vector<uint64_t> &k,
                  size_t i) {
    uint64_t head = k[i++];
    auto st = static_cast<c10::ScalarType>((head >> 8) & 0xff);
    if ((head & 0xff) == K_NESTED) {
        dims.append("[]");
    } else {
        size_t nd = static_cast<size_t>(head >> 16);
        dims.push_back('[');
        for (size_t d = 0; d < nd; d++) {
            if (d) dims.push_back(',');
            put_i64(dims, static_cast<int64_t>(k[i++]));
        }
        dims.push_back(']');
    }
    types.append(dtype_literal(st));
    return i;
}

/* The fragment's text from its key (the key holds everything the text says). */
void text_of(std::string &out, const std::vector<uint64_t> &k) {
    std::string dims, types;
    size_t i = 0;
    bool first = true;
    while (i < k.size()) {
        if (!first) {
            dims.push_back(',');
            types.push_back(',');
        }
        first = false;
        uint64_t kind = k[i] & 0xff;
        if (kind == K_TENSOR || kind == K_NESTED) {
            i = put_tensor(dims, types, k, i);
        } else if (kind == K_TENSORLIST) {
            size_t len = static_cast<size_t>(k[i++] >> 8);
            std::string ignored;
            dims.push_back('[');
            for (size_t j = 0; j < len; j++) {
                if (j) dims.push_back(',');
                if (k[i] == K_NOT_TENSOR) {
                    dims.append("[]");
                    i++;
                } else {
                    i = put_tensor(dims, ignored, k, i);
                }
            }
            dims.push_back(']');
            types.append("\"TensorList\"");
        } else {
            dims.append("[]");
            types.append(kind == K_SCALAR       ? "\"Scalar\""
                         : kind == K_SCALARLIST ? "\"ScalarList\""
                                                : "\"\"");
            i++;
        }
    }
    out.assign("\"Input Dims\":[").append(dims).append("],\"Input type\":[").append(types);
    out.push_back(']');
}

struct Slot {
    uint64_t hash = 0;
    uint32_t id = 0;
    std::vector<uint64_t> key;
};
constexpr size_t CACHE = 256; /* a power of two */
thread_local Slot cache[CACHE];
thread_local std::vector<uint64_t> key_buf;
thread_local std::string text_buf;

int args_fragment(struct _object *const *args, ptrdiff_t n, uint32_t *id) {
    try {
        std::vector<uint64_t> &k = key_buf;
        if (!key_of(k, args, n)) return 0;
        uint64_t h = cprof_key_hash(k);
        Slot &slot = cache[h & (CACHE - 1)];
        if (slot.id && slot.hash == h && slot.key == k) {
            *id = slot.id;
            return 1;
        }
        text_of(text_buf, k);
        uint32_t got = 0;
        if (cprof_torch_ops_intern(text_buf.data(), text_buf.size(), &got) != 0) {
            *id = 0;
            return 1;
        }
        slot.hash = h;
        slot.id = got;
        slot.key = k;
        *id = got;
        return 1;
    } catch (...) { /* a tensor whose sizes cannot be read (never expected): py_hooks.c reads */
        return 0;
    }
}

const cprof_shapes_api shapes_api = {CPROF_SHAPES_API_VERSION, sizeof(cprof_shapes_api),
                                     args_fragment};

} // namespace

PyObject *cprof_torch_shapes_api(PyObject *base_t, PyObject *tensor_t, PyObject *parameter_t) {
    if (!PyType_Check(base_t) || !PyType_Check(tensor_t) || !PyType_Check(parameter_t)) {
        PyErr_SetString(PyExc_TypeError,
                        "shapes_api(base_type, tensor_type, parameter_type) takes "
                        "torch._C.TensorBase, torch.Tensor and torch.nn.Parameter");
        return nullptr;
    }
    Py_XSETREF(base_type, Py_NewRef(base_t));
    Py_XSETREF(tensor_type, Py_NewRef(tensor_t));
    Py_XSETREF(parameter_type, Py_NewRef(parameter_t));
    return PyCapsule_New(const_cast<cprof_shapes_api *>(&shapes_api), CPROF_SHAPES_API_CAPSULE,
                         nullptr);
}
