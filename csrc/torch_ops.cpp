/* torch's operators with their inputs' shapes, through a RecordFunction observer.
 *
 * ITT (ops_itt.c) hands cprof an operator's name only; record_shapes asks for what torch.profiler
 * writes for each op: "Input Dims", "Input type", "Input Strides", "Concrete Inputs". Those need
 * the RecordFunction's inputs, a C++ API, so this file is C++ built against the installed torch
 * (setup.py builds it when torch is importable; it is optional, and Python checks the torch
 * version it was built for before using it; docs/design.md decision 92).
 *
 * The observer is a thread-local RecordFunction callback of the thread that opens the window (torch
 * carries it into autograd's threads, as it does torch.profiler's), for every scope but
 * USER_SCOPE (record_function is recorded by cprof's own patch; with shapes, user-scope ranges
 * with keyword inputs, enter_user). It records through the C
 * functions cprof._C lends it in a capsule (op_api.h): the same per-thread operator stack as the
 * ITT collector, so ops nest with Python functions, modules and user ranges exactly as there.
 * The shapes are read before the push (a range does not include reading them) and become one JSON
 * fragment, made and interned once per distinct inputs: a per-thread cache keyed by the inputs'
 * binary description (kinds, dtypes, sizes, strides, scalar bits) finds it without formatting.
 * Ops carry torch's sequence number and forward thread id, the keys of the fwdbwd links.
 * A second callback, global and for USER_SCOPE only, records torch's async ranges (collectives)
 * from their begin to their end on whatever thread ends them (add_async; whatever captures the
 * operators, or nothing).
 * Callbacks never throw into torch: a failure records the op without shapes and is counted.
 * Binding: py_torch_ops.cpp; with py_torch_shapes.cpp they make the extension cprof._torch_ops. */
#include <ATen/core/List.h>
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <torch/csrc/profiler/orchestration/observer.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <unordered_set>
#include <vector>

#include "torch_ops.h"

namespace {

const cprof_op_api *api = nullptr;
std::atomic<uint64_t> n_errors{0};
std::atomic<uint64_t> n_shaped{0};

/* ---- the fragment: torch.profiler's four lists, one entry per input ---- */

struct Frag {
    std::string dims, types, strides, concrete, out;
};

/* The per-thread cache in front of the text: keyed by the inputs' binary description (what
 * the text is made of: kinds, dtypes, sizes, strides, scalar bits), so a repeated call costs a
 * walk over its inputs, a hash and a compare, and no formatting. */
struct FragSlot {
    uint64_t hash = 0;
    uint32_t id = 0;
    std::vector<uint64_t> key;
};
constexpr size_t FRAG_CACHE = 256; /* a power of two */

thread_local Frag frag_buf;
thread_local FragSlot frag_cache[FRAG_CACHE];
thread_local std::vector<uint64_t> key_buf;

void put_i64(std::string &s, int64_t v) {
    char b[24];
    int n = std::snprintf(b, sizeof b, "%lld", static_cast<long long>(v));
    s.append(b, static_cast<size_t>(n));
}

/* A list of sizes or strides; a symbolic one (a traced shape) is -1. */
void put_syms(std::string &s, c10::SymIntArrayRef v) {
    s.push_back('[');
    for (size_t i = 0; i < v.size(); i++) {
        if (i) s.push_back(',');
        auto n = v[i].maybe_as_int();
        put_i64(s, n ? *n : -1);
    }
    s.push_back(']');
}

/* text as the body of a JSON string (quotes not included) */
void put_escaped(std::string &s, const char *p, size_t len) {
    for (size_t i = 0; i < len; i++) {
        unsigned char c = static_cast<unsigned char>(p[i]);
        if (c == '"' || c == '\\') {
            s.push_back('\\');
            s.push_back(static_cast<char>(c));
        } else if (c < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", c);
            s.append(b);
        } else {
            s.push_back(static_cast<char>(c));
        }
    }
}

/* A scalar as torch prints an IValue (ivalue.cpp): ints in decimal, bools True / False, a
 * double with an integral value as "1." (and "-0."), other doubles with 17 significant digits;
 * anything else (complex, symbolic) through IValue's own operator<<. */
void put_scalar_text(std::string &s, const c10::IValue &v) {
    if (v.isInt()) {
        put_i64(s, v.toInt());
    } else if (v.isBool()) {
        s.append(v.toBool() ? "True" : "False");
    } else if (v.isDouble()) {
        double d = v.toDouble();
        int c = std::fpclassify(d);
        if ((c == FP_NORMAL || c == FP_ZERO) && std::abs(d) < 1e10 &&
            static_cast<double>(static_cast<int64_t>(d)) == d) {
            if (d == 0 && std::signbit(d)) s.push_back('-');
            put_i64(s, static_cast<int64_t>(d));
            s.push_back('.');
        } else {
            char b[40];
            int n = std::snprintf(b, sizeof b, "%.17g", d);
            s.append(b, static_cast<size_t>(n));
        }
    } else {
        std::ostringstream o;
        o << v;
        std::string t = o.str();
        put_escaped(s, t.data(), t.size());
    }
}

/* torch.profiler keeps a list's elements only up to 30 of them (collection.cpp): a longer list
 * of scalars is written as an unknown input, a longer tensor list without its shapes */
constexpr size_t LIST_LIMIT = 30;

bool is_scalar_list(const c10::IValue &v) {
    if (!v.isList()) return false;
    auto l = v.toListRef();
    if (l.size() > LIST_LIMIT) return false;
    for (const auto &e : l)
        if (!(e.isInt() || e.isDouble() || e.isBool())) return false;
    return true;
}

/* One tensor: its sizes, strides and dtype (torch's C++ type name: "float", "c10::Half");
 * undefined or nested: nothing known ([], ""). */
void put_tensor(Frag &f, const at::Tensor &t) {
    if (!t.defined() || t.is_nested()) {
        f.dims.append("[]");
        f.strides.append("[]");
        f.types.append("\"\"");
        return;
    }
    put_syms(f.dims, t.sym_sizes());
    if (t.layout() == c10::kStrided) put_syms(f.strides, t.sym_strides());
    else f.strides.append("[]");
    auto name = t.dtype().name();
    f.types.push_back('"');
    put_escaped(f.types, name.data(), name.size());
    f.types.push_back('"');
}

void put_input(Frag &f, const c10::IValue &v) {
    if (v.isTensor()) {
        put_tensor(f, v.toTensor());
        f.concrete.append("\"\"");
    } else if (v.isScalar()) {
        f.dims.append("[]");
        f.strides.append("[]");
        f.types.append("\"Scalar\"");
        f.concrete.push_back('"');
        put_scalar_text(f.concrete, v);
        f.concrete.push_back('"');
    } else if (v.isTensorList() && v.toTensorList().size() > LIST_LIMIT) {
        f.dims.append("[]");
        f.strides.append("[]");
        f.types.append("\"TensorList\"");
        f.concrete.append("\"\"");
    } else if (v.isTensorList()) {
        Frag inner;
        f.dims.push_back('[');
        f.strides.push_back('[');
        size_t i = 0;
        for (const at::Tensor &t : v.toTensorList()) {
            if (i++) {
                f.dims.push_back(',');
                f.strides.push_back(',');
            }
            put_tensor(inner, t);
            f.dims.append(inner.dims);
            f.strides.append(inner.strides);
            inner.dims.clear();
            inner.strides.clear();
        }
        f.dims.push_back(']');
        f.strides.push_back(']');
        f.types.append("\"TensorList\"");
        f.concrete.append("\"\"");
    } else if (is_scalar_list(v)) {
        f.dims.append("[]");
        f.strides.append("[]");
        f.types.append("\"ScalarList\"");
        f.concrete.append("\"[");
        size_t i = 0;
        for (const auto &e : v.toListRef()) {
            if (i++) f.concrete.append(", ");
            put_scalar_text(f.concrete, e);
        }
        f.concrete.append("]\"");
    } else {
        f.dims.append("[]");
        f.strides.append("[]");
        f.types.append("\"\"");
        f.concrete.append("\"\"");
    }
}

/* ---- the key: one word per fact, in input order; false when an input has no exact key
 * (a complex or symbolic scalar: printed by IValue, not cached) ---- */

enum : uint64_t { K_TENSOR = 1, K_NONE_TENSOR, K_SCALAR_INT, K_SCALAR_BOOL, K_SCALAR_DOUBLE,
                  K_TENSORLIST, K_LONG_TENSORLIST, K_SCALARLIST, K_OTHER };

uint64_t sym_word(const c10::SymInt &v) {
    auto n = v.maybe_as_int();
    return static_cast<uint64_t>(n ? *n : -1);
}

void key_tensor(std::vector<uint64_t> &k, const at::Tensor &t) {
    if (!t.defined() || t.is_nested()) {
        k.push_back(K_NONE_TENSOR);
        return;
    }
    auto sizes = t.sym_sizes();
    bool strided = t.layout() == c10::kStrided;
    k.push_back(K_TENSOR | static_cast<uint64_t>(t.scalar_type()) << 8 |
                static_cast<uint64_t>(strided) << 16 | static_cast<uint64_t>(sizes.size()) << 24);
    for (const auto &d : sizes) k.push_back(sym_word(d));
    if (strided) {
        auto strides = t.sym_strides();
        k.push_back(strides.size());
        for (const auto &d : strides) k.push_back(sym_word(d));
    }
}

bool key_scalar(std::vector<uint64_t> &k, const c10::IValue &v) {
    if (v.isInt()) {
        k.push_back(K_SCALAR_INT);
        k.push_back(static_cast<uint64_t>(v.toInt()));
    } else if (v.isBool()) {
        k.push_back(K_SCALAR_BOOL);
        k.push_back(v.toBool());
    } else if (v.isDouble()) {
        double d = v.toDouble();
        uint64_t bits;
        std::memcpy(&bits, &d, sizeof bits);
        k.push_back(K_SCALAR_DOUBLE);
        k.push_back(bits);
    } else {
        return false;
    }
    return true;
}

bool key_of(std::vector<uint64_t> &k, c10::ArrayRef<const c10::IValue> in) {
    k.clear();
    for (const auto &v : in) {
        if (v.isTensor()) {
            key_tensor(k, v.toTensor());
        } else if (v.isScalar()) {
            if (!key_scalar(k, v)) return false;
        } else if (v.isTensorList()) {
            auto l = v.toTensorList();
            if (l.size() > LIST_LIMIT) {
                k.push_back(K_LONG_TENSORLIST);
                continue;
            }
            k.push_back(K_TENSORLIST | static_cast<uint64_t>(l.size()) << 8);
            for (const at::Tensor &t : l) key_tensor(k, t);
        } else if (is_scalar_list(v)) {
            auto l = v.toListRef();
            k.push_back(K_SCALARLIST | static_cast<uint64_t>(l.size()) << 8);
            for (const auto &e : l) key_scalar(k, e);
        } else {
            k.push_back(K_OTHER);
        }
    }
    return true;
}

/* The inputs' fragment as text, interned: its id, or 0 (a failure: counted). */
uint32_t fragment_text_id(c10::ArrayRef<const c10::IValue> in) {
    Frag &f = frag_buf;
    f.dims.clear();
    f.types.clear();
    f.strides.clear();
    f.concrete.clear();
    for (size_t i = 0; i < in.size(); i++) {
        if (i) {
            f.dims.push_back(',');
            f.types.push_back(',');
            f.strides.push_back(',');
            f.concrete.push_back(',');
        }
        put_input(f, in[i]);
    }
    std::string &o = f.out;
    o.assign("\"Input Dims\":[").append(f.dims);
    o.append("],\"Input type\":[").append(f.types);
    o.append("],\"Input Strides\":[").append(f.strides);
    o.append("],\"Concrete Inputs\":[").append(f.concrete).push_back(']');
    uint32_t id = 0;
    if (o.size() > UINT32_MAX || api->intern(o.data(), o.size(), &id) != 0) {
        n_errors.fetch_add(1, std::memory_order_relaxed);
        return 0;
    }
    return id;
}

/* The interned id of the inputs' fragment, or 0 (no inputs, or a failure: counted). */
uint32_t fragment_id(c10::ArrayRef<const c10::IValue> in) {
    if (in.empty()) return 0; /* torch writes no shape keys for an op without inputs */
    std::vector<uint64_t> &k = key_buf;
    if (!key_of(k, in)) return fragment_text_id(in);
    uint64_t h = cprof_key_hash(k);
    FragSlot &slot = frag_cache[h & (FRAG_CACHE - 1)];
    if (slot.id && slot.hash == h && slot.key == k) return slot.id;
    uint32_t id = fragment_text_id(in);
    if (id) {
        slot.hash = h;
        slot.id = id;
        slot.key = k;
    }
    return id;
}

/* ---- the callbacks (any thread, GIL or not; never throw) ---- */

/* An op with a sequence number (under grad mode, or an autograd node) keeps it, its forward
 * thread and this thread's RecordFunction id (threadId(): the id the step's callbacks ran
 * with), so the writer links forward ops to their backward nodes as torch.profiler does. */
inline void push(const at::RecordFunction &fn, uint32_t name, uint32_t frag) {
    int64_t seq = fn.seqNr();
    if (seq >= 0) api->push_op_seq(name, frag, seq, fn.forwardThreadId(), fn.threadId());
    else api->push_op(name, frag);
}

void enter_shapes_op(const at::RecordFunction &fn) {
    uint32_t name = api->name_id(fn.name());
    uint32_t frag = 0;
    if (api->cpu_on()) {
        try {
            frag = fragment_id(fn.inputs());
            if (frag) n_shaped.fetch_add(1, std::memory_order_relaxed);
        } catch (...) {
            n_errors.fetch_add(1, std::memory_order_relaxed);
            frag = 0;
        }
    }
    push(fn, name, frag); /* pushed even on failure, so the exit stays balanced */
}

/* A user-scope range the observer records: under record_shapes torch's _RecordFunctionFast
 * (compiled code's "## Call CompiledFxGraph ##") moves a range given keyword arguments with
 * scope="user_scope" to USER_SCOPE. record_function's ranges (recorded by cprof's own patch)
 * have no keyword inputs and pass untouched. */
struct UserPushed : at::ObserverContext {};

std::unique_ptr<at::ObserverContext> enter_user(const at::RecordFunction &fn) {
    if (fn.isAsync() || fn.kwinputs().empty()) return nullptr;
    try {
        auto ctx = std::make_unique<UserPushed>();
        enter_shapes_op(fn);
        return ctx;
    } catch (...) { /* no memory for the marker: the range is not recorded */
        n_errors.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
    }
}

std::unique_ptr<at::ObserverContext> enter_shapes(const at::RecordFunction &fn) {
    if (fn.scope() == at::RecordScope::USER_SCOPE) return enter_user(fn);
    enter_shapes_op(fn);
    return nullptr;
}

void leave_shapes(const at::RecordFunction &fn, at::ObserverContext *ctx) {
    if (ctx || fn.scope() != at::RecordScope::USER_SCOPE) api->pop_op();
}

std::unique_ptr<at::ObserverContext> enter_plain(const at::RecordFunction &fn) {
    push(fn, api->name_id(fn.name()), 0);
    return nullptr;
}

void leave(const at::RecordFunction &, at::ObserverContext *) { api->pop_op(); }

/* ---- async user-scope ranges: the ones torch.distributed's process groups open around a
 * collective ("gloo:all_reduce", "nccl:all_reduce"). torch marks them async: begun on one thread,
 * ended on the thread that completes the work. record_function's own ranges (not async) are
 * recorded by cprof's Python patch and pass through here untouched. ---- */

struct AsyncCtx : at::ObserverContext {
    explicit AsyncCtx(uint64_t h) : handle(h) {}
    uint64_t handle;
};

std::unique_ptr<at::ObserverContext> enter_async(const at::RecordFunction &fn) {
    if (!fn.isAsync()) return nullptr;
    uint64_t h = 0;
    if (api->async_open(api->name_id(fn.name()), &h) != 0 || h == 0) return nullptr;
    try {
        return std::make_unique<AsyncCtx>(h);
    } catch (...) { /* no memory for the context: the range ends with the window */
        n_errors.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
    }
}

void leave_async(const at::RecordFunction &, at::ObserverContext *ctx) {
    if (ctx) api->async_close(static_cast<AsyncCtx *>(ctx)->handle);
}

/* ---- cprof's state in the thread's PROFILER_STATE slot. Two users: profile_memory (torch's
 * allocators report each allocation and release to the MemoryReportingInfoBase in that slot,
 * which torch carries into the threads it hands work to) and operator capture (torch's
 * _RecordFunctionFast, which Inductor, Dynamo and AOTAutograd use for "triton_..." launches,
 * "## Call CompiledFxGraph ##", "Pregraph bytecode", opens its RecordFunction only when the
 * slot holds a profiler state). torch reads the slot as a ProfilerStateBase (config(),
 * profilerType()), so the holder is one: its config is Disabled, so profilerEnabled() stays
 * false and nothing else in torch changes behaviour, except for a record_shapes window
 * (set_shapes below). torch.profiler's own state needs the slot:
 * cprof/_ops.py takes this one out while torch's runs on the thread. ---- */

struct CprofState final : torch::profiler::impl::ProfilerStateBase {
    CprofState()
        : ProfilerStateBase(torch::profiler::impl::ProfilerConfig(
              torch::profiler::impl::ProfilerState::Disabled)) {}
    void reportMemoryUsage(void *ptr, int64_t alloc_size, size_t total_allocated,
                           size_t total_reserved, c10::Device device) override {
        if (!memory.load(std::memory_order_relaxed)) return;
        api->mem_event(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ptr)), alloc_size,
                       static_cast<int64_t>(total_allocated), static_cast<int64_t>(total_reserved),
                       static_cast<int>(device.type()), static_cast<int>(device.index()));
    }
    bool memoryProfilingEnabled() const override {
        return memory.load(std::memory_order_relaxed);
    }
    torch::profiler::impl::ActiveProfilerType profilerType() override {
        return torch::profiler::impl::ActiveProfilerType::NONE;
    }
    /* record_shapes: torch packs an autograd.Function's (and a _RecordFunctionFast's)
     * non-tensor arguments into the RecordFunction's inputs only when profilerEnabled() and
     * the config reports input shapes (python_function.cpp unpack_input), so for such a
     * window the config says so, as torch.profiler's does (decision 145). Two plain fields,
     * written on the owning thread between its ops (other threads read them only while it
     * waits on them: a backward). */
    void set_shapes(bool on) {
        config_.state = on ? torch::profiler::impl::ProfilerState::CPU
                           : torch::profiler::impl::ProfilerState::Disabled;
        config_.report_input_shapes = on;
    }
    std::atomic<bool> memory{false};
    int users = 0; /* CPROF_STATE_OPS | CPROF_STATE_MEMORY; changed on the owning thread only */
};

CprofState *ours_on_top() {
    auto *top = c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE);
    return top ? dynamic_cast<CprofState *>(top) : nullptr;
}

} // namespace

int cprof_torch_ops_state_push(int users, std::string *err) {
    try {
        CprofState *st = ours_on_top();
        if (!st) {
            if (c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE)) return 0;
            auto fresh = std::make_shared<CprofState>();
            st = fresh.get();
            c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE,
                                             std::move(fresh));
        }
        st->users |= users;
        if (users & CPROF_STATE_MEMORY) st->memory.store(true, std::memory_order_relaxed);
        if (users & CPROF_STATE_SHAPES) st->set_shapes(true);
        return 1;
    } catch (const std::exception &e) {
        *err = e.what();
        return -1;
    }
}

int cprof_torch_ops_state_pop(int users, int *had, std::string *err) {
    try {
        *had = 0;
        CprofState *st = ours_on_top();
        if (!st) return 0;
        *had = st->users;
        st->users &= ~users;
        if (users & CPROF_STATE_MEMORY) st->memory.store(false, std::memory_order_relaxed);
        if (users & CPROF_STATE_SHAPES) st->set_shapes(false);
        if (st->users == 0) c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
        return 1;
    } catch (const std::exception &e) {
        *err = e.what();
        return -1;
    }
}

void cprof_torch_ops_init(const cprof_op_api *a) { api = a; }

int cprof_torch_ops_intern(const char *p, size_t len, uint32_t *id) {
    return api->intern(p, len, id);
}

int cprof_torch_ops_add(int shapes, uint64_t *handle, std::string *err) {
    try {
        std::unordered_set<at::RecordScope, std::hash<at::RecordScope>> scopes;
        for (int i = 0; i < static_cast<int>(at::RecordScope::NUM_SCOPES); i++)
            if (shapes || i != static_cast<int>(at::RecordScope::USER_SCOPE))
                scopes.insert(static_cast<at::RecordScope>(i));
        at::RecordFunctionCallback cb(shapes ? enter_shapes : enter_plain,
                                      shapes ? leave_shapes : leave);
        cb.needsInputs(shapes != 0).scopes(scopes);
        *handle = static_cast<uint64_t>(at::addThreadLocalCallback(cb));
        return 0;
    } catch (const std::exception &e) {
        *err = e.what();
        return -1;
    }
}

int cprof_torch_ops_add_async(uint64_t *handle, std::string *err) {
    try {
        at::RecordFunctionCallback cb(enter_async, leave_async);
        cb.scopes({at::RecordScope::USER_SCOPE});
        /* global: the work may run on a thread torch's thread-local state never reached */
        *handle = static_cast<uint64_t>(at::addGlobalCallback(cb));
        return 0;
    } catch (const std::exception &e) {
        *err = e.what();
        return -1;
    }
}

int cprof_torch_ops_remove(uint64_t handle, std::string *err) {
    try {
        at::removeCallback(static_cast<at::CallbackHandle>(handle));
        return 0;
    } catch (const std::exception &e) {
        *err = e.what();
        return -1;
    }
}

void cprof_torch_ops_stats(uint64_t *shaped, uint64_t *errors) {
    *shaped = n_shaped.load(std::memory_order_relaxed);
    *errors = n_errors.load(std::memory_order_relaxed);
}
