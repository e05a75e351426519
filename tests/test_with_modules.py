"""with_modules / record_shapes: nn.Module calls as ranges named by qualified path, through the
C capture of csrc/py_hooks.c (+ py_modcall.c) installed by cprof/_modules.py, in both modes:
"call" (nn.Module.__call__ replaced by _C.ModuleCall, the default) and "hooks" (torch's global
forward hooks). Tests taking the `mode` fixture run in both."""
import collections
import gc
import json
import os
import subprocess
import sys
import textwrap
import threading
import warnings
import weakref

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn.modules import module as torch_module  # noqa: E402

import cprof  # noqa: E402
from cprof import _C, _modules  # noqa: E402
from conftest import ROOT, load_trace, ranges_of  # noqa: E402

ORIGINAL_CALL = nn.Module.__dict__["__call__"]  # torch's own, before any test ran


# ---- models ----

class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(4, 4)

    def forward(self, x):
        return self.q(x)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attn()
        self.mlp = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    def forward(self, x):
        return self.mlp(self.attn(x))


class Encoder(nn.Module):
    def __init__(self, n=2):
        super().__init__()
        self.layers = nn.ModuleList([Layer() for _ in range(n)])

    def forward(self, x):
        for layer in self.layers:  # the ModuleList's own forward never runs
            x = layer(x)
        return x


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.encoder(x))


EXPECTED = [
    "MLP", "encoder",
    "encoder.layers.0", "encoder.layers.0.attn", "encoder.layers.0.attn.q",
    "encoder.layers.0.mlp", "encoder.layers.0.mlp.0", "encoder.layers.0.mlp.1",
    "encoder.layers.1", "encoder.layers.1.attn", "encoder.layers.1.attn.q",
    "encoder.layers.1.mlp", "encoder.layers.1.mlp.0", "encoder.layers.1.mlp.1",
    "head",
]


# ---- helpers ----

def profiled(tmp_path, fn, mode="call", record_shapes=False, name="t"):
    """Runs fn in a CPU window with the module capture installed; returns (trace, handle)."""
    with cprof.ProfilerContext(output_dir=tmp_path, profile_name=name, activities=["CPU"], record_ops=False,
                               with_stack=False, record_shapes=False, verbose=False) as p:
        handle = _modules.install(record_shapes=record_shapes, mode=mode)
        try:
            fn()
        finally:
            handle.remove()
    assert handle.hooks.errors == 0
    assert _C.depth() == 0
    return load_trace(p.trace_path), handle


def ns(e):
    return round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)


def contains(outer, inner):
    (a0, a1), (b0, b1) = ns(outer), ns(inner)
    return outer["tid"] == inner["tid"] and a0 <= b0 and b1 <= a1


def by_name(trace):
    out = {}
    for e in ranges_of(trace):
        out.setdefault(e["name"], []).append(e)
    return out


@pytest.fixture(params=_modules.MODES)
def mode(request):
    return request.param


@pytest.fixture(autouse=True)
def _hooks_removed():
    pre = dict(torch_module._global_forward_pre_hooks)
    post = dict(torch_module._global_forward_hooks)
    yield
    if _modules._installed is not None:
        _modules._installed.remove()
        pytest.fail("a test left the module hooks installed")
    assert dict(torch_module._global_forward_pre_hooks) == pre
    assert dict(torch_module._global_forward_hooks) == post
    assert nn.Module.__dict__["__call__"] is ORIGINAL_CALL
    assert not any(isinstance(f, _modules._DynamoImport) for f in sys.meta_path)
    assert _modules._DynamoImport._entry is None


# ---- names and nesting ----

def test_qualified_names_and_nesting(tmp_path, mode):
    model = MLP()
    x = torch.randn(3, 4)
    trace, _ = profiled(tmp_path, lambda: model(x), mode)
    rs = ranges_of(trace)
    assert [e["name"] for e in rs] == EXPECTED
    assert all(e["cat"] == "user_annotation" for e in rs)
    assert all("Input Dims" not in e["args"] for e in rs)  # record_shapes off
    names = by_name(trace)
    # every range lies inside its parent path's range (the root contains everything)
    for e in rs:
        name = e["name"]
        parent = name.rsplit(".", 1)[0] if "." in name else "MLP"
        if name == "MLP":
            continue
        if parent == "encoder.layers":  # ModuleList: no range of its own
            parent = "encoder"
        assert contains(names[parent][0], e), (parent, name)
    # siblings do not overlap
    a, b = names["encoder.layers.0"][0], names["encoder.layers.1"][0]
    assert ns(a)[1] <= ns(b)[0]


def test_module_called_twice_and_names_kept(tmp_path, mode):
    model = MLP()
    x = torch.randn(1, 4)

    # called on its own in forward, a module is named by its class and its children by
    # their paths under it, whatever was called before (names used to be the first ones a
    # module got in the window, so they depended on call order)
    direct = ["Layer"] + [n[len("encoder.layers.1."):] for n in EXPECTED[9:14]]

    def run():
        model(x)
        model(x)
        model.encoder.layers[1](x)
        # a module that has been a child is asked about at each call on its own (not
        # cached): its children are cached under it
        assert _modules._installed.hooks.cached == len(EXPECTED) + len(direct) - 1

    trace, _ = profiled(tmp_path, run, mode)
    names = [e["name"] for e in ranges_of(trace)]
    assert names == EXPECTED + EXPECTED + direct


def test_a_module_called_on_its_own_first_has_its_class_and_its_path_in_its_parent(tmp_path,
                                                                                   mode):
    model = MLP()
    x = torch.randn(1, 4)

    def run():
        model.encoder(x)  # no enclosing module: a root, named by its class
        model(x)  # inside MLP: its path (it used to keep "Encoder", its first name)
        # on its own again: the name it has for that place
        model.encoder(x)

    trace, _ = profiled(tmp_path, run, mode)
    names = [e["name"] for e in ranges_of(trace)]
    alone = ["Encoder"] + [n[len("encoder."):] for n in EXPECTED[2:14]]
    assert names == alone + EXPECTED + alone


def test_module_not_held_by_its_parent(tmp_path, mode):
    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.plain = [nn.ReLU()]  # a plain list: not registered as a child
            self.seq = nn.Sequential(nn.Identity())

        def forward(self, x):
            return self.seq(self.plain[0](x))

    model = Holder()
    trace, _ = profiled(tmp_path, lambda: model(torch.ones(2)), mode)
    assert [e["name"] for e in ranges_of(trace)] == ["Holder", "Holder.ReLU", "seq", "seq.0"]


def test_shared_module_reached_from_two_parents(tmp_path, mode):
    shared = nn.ReLU()

    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Sequential(shared)
            self.b = nn.Sequential(shared)

        def forward(self, x):
            return self.b(self.a(x))

    trace, _ = profiled(tmp_path, lambda: Two()(torch.ones(2)), mode)
    # each call under the parent that makes it (the second was "a.0", its first name)
    assert [e["name"] for e in ranges_of(trace)] == ["Two", "a", "a.0", "b", "b.0"]


def test_threads_keep_their_own_nesting(tmp_path, mode):
    model = MLP()
    x = torch.randn(2, 4)
    barrier = threading.Barrier(2)

    def work():
        barrier.wait()
        for _ in range(20):
            model(x)

    def run():
        ts = [threading.Thread(target=work) for _ in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    trace, _ = profiled(tmp_path, run, mode)
    rs = ranges_of(trace)
    tids = {e["tid"] for e in rs}
    assert len(tids) == 2
    for tid in tids:
        mine = [e for e in rs if e["tid"] == tid]
        assert [e["name"] for e in mine] == EXPECTED * 20
        roots = [e for e in mine if e["name"] == "MLP"]
        for e in mine:
            assert any(contains(r, e) for r in roots)


# ---- balance: exceptions, hooks installed or removed mid-forward ----

class Boom(Exception):
    pass


def test_exception_in_forward_leaves_the_store_balanced(tmp_path, mode):
    class Bad(nn.Module):
        def __init__(self):
            super().__init__()
            self.ok = nn.Identity()

        def forward(self, x):
            self.ok(x)
            raise Boom("in forward")

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.bad = Bad()

        def forward(self, x):
            return self.bad(x)

    model = Outer()

    def run():
        with cprof.range("user"):
            with pytest.raises(Boom):
                model(torch.ones(2))
            assert _C.depth() == 1  # only "user": every module range was closed
        model.bad.ok(torch.ones(2))  # the hooks still work after the exception

    trace, handle = profiled(tmp_path, run, mode)
    assert handle.hooks.open == 0
    rs = ranges_of(trace)
    assert [e["name"] for e in rs] == ["user", "Outer", "bad", "bad.ok", "Identity"]
    assert not any("cprof truncated" in e["args"] for e in rs)
    names = by_name(trace)
    assert contains(names["user"][0], names["Outer"][0])
    assert contains(names["Outer"][0], names["bad"][0])


def test_hooks_installed_mid_forward_pop_only_their_own(tmp_path, mode):
    state = {}

    class Installer(nn.Module):
        def __init__(self):
            super().__init__()
            self.child = nn.Identity()

        def forward(self, x):
            state["handle"] = _modules.install(mode=mode)  # this module's call was not seen
            with cprof.range("inner user"):
                return self.child(x)

    model = Installer()
    with cprof.ProfilerContext(output_dir=tmp_path, profile_name="mid", activities=["CPU"], record_ops=False,
                               with_stack=False, record_shapes=False, verbose=False) as p:
        try:
            with cprof.range("outer user"):
                model(torch.ones(2))  # Installer's post finds nothing of its own: no pop
                assert _C.depth() == 1
        finally:
            state["handle"].remove()
    assert _C.depth() == 0
    rs = ranges_of(load_trace(p.trace_path))
    assert [e["name"] for e in rs] == ["outer user", "inner user", "Identity"]
    assert not any("cprof truncated" in e["args"] for e in rs)


def test_remove_mid_forward_closes_this_threads_ranges(tmp_path, mode):
    state = {}

    class Remover(nn.Module):
        def forward(self, x):
            state["handle"].remove()
            return x

    model = nn.Sequential(Remover())
    with cprof.ProfilerContext(output_dir=tmp_path, profile_name="rm", activities=["CPU"], record_ops=False,
                               with_stack=False, record_shapes=False, verbose=False) as p:
        state["handle"] = _modules.install(mode=mode)
        model(torch.ones(2))
        assert _C.depth() == 0
    assert [e["name"] for e in ranges_of(load_trace(p.trace_path))] == ["Sequential", "0"]


def test_remove_unregisters_and_drops_references(tmp_path, mode):
    model = MLP()
    ref = weakref.ref(model)
    before = dict(torch_module._global_forward_hooks)
    with cprof.ProfilerContext(output_dir=tmp_path, profile_name="rm", activities=["CPU"], record_ops=False,
                               with_stack=False, record_shapes=False, verbose=False) as p:
        handle = _modules.install(mode=mode)
        if mode == "hooks":
            assert len(torch_module._global_forward_hooks) == len(before) + 1
            assert len(torch_module._global_forward_pre_hooks) >= 1
        else:  # no global hook: torch's _call_impl keeps its fast path
            assert dict(torch_module._global_forward_hooks) == before
            assert nn.Module.__dict__["__call__"] is handle.wrapper
        model(torch.ones(1, 4))
        assert handle.hooks.cached == len(EXPECTED)
        handle.remove()
        handle.remove()  # idempotent
        assert dict(torch_module._global_forward_hooks) == before
        assert nn.Module.__dict__["__call__"] is ORIGINAL_CALL
        assert handle.hooks.cached == 0 and not handle.active
        with cprof.range("after"):
            model(torch.ones(1, 4))  # records nothing now
    names = [e["name"] for e in ranges_of(load_trace(p.trace_path))]
    assert names == EXPECTED + ["after"]
    del model, handle
    gc.collect()
    assert ref() is None


def test_install_needs_an_open_window_and_only_once(tmp_path):
    with pytest.raises(cprof.WindowStateError, match="window"):
        _modules.install()
    _C.start()
    try:
        h = _modules.install()
        try:
            with pytest.raises(cprof.WindowStateError, match="already installed"):
                _modules.install()
        finally:
            h.remove()
    finally:
        _C.stop().close()


def test_hook_calling_conventions():
    hooks = _C.ModuleHooks(torch.Tensor)
    m = nn.Identity()
    assert hooks.pre(m, (torch.ones(1),)) is None
    assert hooks.open == 1 and _C.depth() == 1
    assert hooks.post(nn.ReLU(), (), None) is None  # not ours: nothing closed
    assert hooks.open == 1
    assert hooks.post(m, (), {}, None) is None  # the with_kwargs form
    assert hooks.open == 0 and _C.depth() == 0
    assert hooks.post(m, (), None) is None  # a post without a pre
    assert _C.depth() == 0
    with pytest.raises(TypeError):
        _C.ModuleHooks(torch.Tensor, resolver=3)
    with pytest.raises(TypeError):
        hooks.pre()


# ---- record_shapes ----

DTYPES = [
    (torch.float32, "float"), (torch.float64, "double"), (torch.float16, "c10::Half"),
    (torch.bfloat16, "c10::BFloat16"), (torch.int64, "long int"), (torch.int32, "int"),
    (torch.int16, "short int"), (torch.int8, "signed char"), (torch.uint8, "unsigned char"),
    (torch.bool, "bool"), (torch.complex64, "c10::complex<float>"),
]


class Take(nn.Module):
    def forward(self, *args):
        return args[0] if args else None


def test_record_shapes_dtypes_and_non_tensors(tmp_path, mode):
    take = Take()
    calls = [((torch.zeros(2, 3, dtype=dt),), [[2, 3]], [name]) for dt, name in DTYPES]
    calls += [
        ((torch.zeros(()), 3, 2.5, True, None, "text", torch.device("cpu")),
         [[], [], [], [], [], [], []], ["float", "Scalar", "Scalar", "Scalar", "", "", ""]),
        (([torch.zeros(2, 4), torch.zeros(2, 0, dtype=torch.int64)], (1, 2), [], [1, "a"]),
         [[[2, 4], [2, 0]], [], [], []], ["TensorList", "ScalarList", "ScalarList", ""]),
        (((torch.zeros(5), "x"), torch.Size([3, 4])),
         [[[5], []], []], ["TensorList", "ScalarList"]),
        ((), [], []),
        ((nn.Parameter(torch.zeros(7)),), [[7]], ["float"]),
    ]

    def run():
        for args, _, _ in calls:
            take(*args)

    trace, _ = profiled(tmp_path, run, mode, record_shapes=True)
    rs = ranges_of(trace)
    assert len(rs) == len(calls)
    for e, (_, dims, types) in zip(rs, calls):
        assert e["name"] == "Take"
        assert e["args"]["Input Dims"] == dims
        assert e["args"]["Input type"] == types
        assert list(e["args"])[:3] == ["External id", "Input Dims", "Input type"]


class KwAttn(nn.Module):
    def forward(self, hidden_states=None, attention_mask=None, scale=1.0):
        return hidden_states


@pytest.mark.parametrize("fast", ["1", "0"])
def test_record_shapes_reads_keyword_arguments_too(tmp_path, monkeypatch, fast):
    """Hugging Face style calls pass their tensors by keyword: the module's inputs are the
    positional arguments, then the keyword arguments' values in call order."""
    monkeypatch.setenv("CPROF_FAST_SHAPES", fast)
    attn = KwAttn()

    def run():
        attn(hidden_states=torch.zeros(2, 8), attention_mask=torch.ones(2, 2))
        attn(torch.zeros(3, 8), attention_mask=torch.ones(3, 3, dtype=torch.int64), scale=2.0)
        attn(torch.zeros(4))

    trace, _ = profiled(tmp_path, run, "call", record_shapes=True)
    got = [(e["args"]["Input Dims"], e["args"]["Input type"]) for e in ranges_of(trace)]
    assert got == [([[2, 8], [2, 2]], ["float", "float"]),
                   ([[3, 8], [3, 3], []], ["float", "long int", "Scalar"]),
                   ([[4]], ["float"])]


def test_record_shapes_escapes_dtype_names_and_shares_fragments(tmp_path):
    hooks = _C.ModuleHooks(torch.Tensor, record_shapes=True,
                           dtype_names={torch.float32: 'we"ird\\\n'})
    frag = hooks.shapes_json((torch.zeros(1), torch.zeros(2, dtype=torch.float64)))
    assert json.loads("{" + frag + "}") == {"Input Dims": [[1], [2]],
                                             "Input type": ['we"ird\\\n', "float64"]}
    # identical shapes intern to the same fragment
    assert hooks.shapes_json((torch.ones(1), torch.ones(2, dtype=torch.float64))) == frag


def test_record_shapes_many_shapes_through_the_thread_cache(tmp_path, mode):
    """Fragments are looked up in a 64-slot per-thread cache before the name table: many
    distinct shapes (more than the slots, colliding ones) and repeats, each range keeps its
    own."""
    take = Take()
    shapes = [(i % 7 + 1, i) for i in range(150)]

    def run():
        for _ in range(2):
            for sh in shapes:
                take(torch.zeros(sh))

    trace, _ = profiled(tmp_path, run, mode, record_shapes=True)
    got = [e["args"]["Input Dims"] for e in ranges_of(trace)]
    assert got == [[list(sh)] for sh in shapes] * 2


def test_record_shapes_matches_torch_profiler(tmp_path, mode):
    """Our module args use the keys and encoding torch.profiler writes for aten ops."""
    from torch.profiler import ProfilerActivity, profile

    class Cat(nn.Module):
        def forward(self, xs, dim):
            return torch.cat(xs, dim)

    class Clone(nn.Module):
        def forward(self, x):
            return x.clone()

    cat, clone = Cat(), Clone()
    tensors = [torch.zeros(2, 3, dtype=dt) for dt, _ in DTYPES]
    xs = [torch.zeros(2, 4), torch.zeros(2, 1)]

    def run():
        cat(xs, 1)
        for t in tensors:
            clone(t)

    trace, _ = profiled(tmp_path, run, mode, record_shapes=True)
    ours = ranges_of(trace)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        run()
    tpath = tmp_path / "torch.json"
    prof.export_chrome_trace(str(tpath))
    theirs = [e for e in load_trace(tpath)["traceEvents"]
              if e.get("ph") == "X" and e["name"] in ("aten::cat", "aten::clone")]
    assert [e["name"] for e in theirs] == ["aten::cat"] + ["aten::clone"] * len(tensors)
    for o, t in zip(ours, theirs):
        # the module gets the op's leading inputs (clone's memory_format is the op's own)
        n = len(o["args"]["Input Dims"])
        assert o["args"]["Input Dims"] == t["args"]["Input Dims"][:n]
        assert o["args"]["Input type"] == t["args"]["Input type"][:n]
    assert ours[0]["args"]["Input Dims"] == [[[2, 4], [2, 1]], []]
    assert ours[0]["args"]["Input type"] == ["TensorList", "Scalar"]


def test_record_shapes_off_adds_nothing_and_outside_a_window_is_skipped(tmp_path):
    hooks = _C.ModuleHooks(torch.Tensor, record_shapes=True)
    m = nn.Identity()
    hooks.pre(m, (torch.ones(1),))  # no window: depth is tracked, no fragment is built
    hooks.post(m, (), None)
    assert _C.depth() == 0 and hooks.errors == 0


def test_profiler_context_with_modules_option(tmp_path):
    """The ProfilerContext option installs the hooks for the window and removes them after."""
    import inspect
    if "with_modules" not in inspect.signature(cprof.ProfilerContext).parameters:
        pytest.skip("ProfilerContext has no with_modules option here")
    model = MLP()
    before = dict(torch_module._global_forward_hooks)
    with cprof.ProfilerContext(output_dir=tmp_path, profile_name="pc", activities=["CPU"], record_ops=False,
                               with_stack=False, with_modules=True, record_shapes=True,
                               verbose=False) as p:
        assert _modules._installed.mode == "call"  # the default
        model(torch.ones(1, 4))
    assert dict(torch_module._global_forward_hooks) == before
    assert nn.Module.__dict__["__call__"] is ORIGINAL_CALL
    rs = [e for e in ranges_of(load_trace(p.trace_path)) if e["name"] in EXPECTED]
    assert [e["name"] for e in rs] == EXPECTED
    assert rs[0]["args"]["Input Dims"] == [[1, 4]]


def test_resolver_errors_are_swallowed_but_interrupts_are_not():
    def bad(module, parent, parent_name):
        raise ValueError("resolver bug")

    hooks = _C.ModuleHooks(torch.Tensor, resolver=bad)
    m = nn.ReLU()
    assert hooks.pre(m, ()) is None  # named by its class, the error counted
    assert hooks.errors == 1 and hooks.open == 1
    hooks.post(m, (), None)

    def interrupted(module, parent, parent_name):
        raise KeyboardInterrupt

    hooks = _C.ModuleHooks(torch.Tensor, resolver=interrupted)
    with pytest.raises(KeyboardInterrupt):
        hooks.pre(nn.ReLU(), ())
    assert hooks.open == 0 and _C.depth() == 0


def test_eval_frame_is_switched_off_around_the_resolver_and_put_back():
    """hooks.eval_frame (dynamo's set_eval_frame, set at install once torch._dynamo is
    imported) is called from C around the resolver, as torch._dynamo.disable does: no
    Python wrapper for with_stack to record. The callback comes back also when the resolver
    raises; a failing setter costs the name, not the forward."""
    calls, state = [], {"cb": "prior"}

    def setter(cb):
        calls.append(cb)
        old, state["cb"] = state["cb"], cb
        return old

    def resolver(module, parent, parent_name):
        calls.append(("resolve", state["cb"]))
        return "named"

    hooks = _C.ModuleHooks(torch.Tensor, resolver=resolver)
    assert hooks.eval_frame is None
    with pytest.raises(TypeError):
        hooks.eval_frame = 3
    hooks.eval_frame = setter
    m = nn.ReLU()
    hooks.pre(m, ())
    hooks.post(m, (), None)
    assert calls == [None, ("resolve", None), "prior"] and state["cb"] == "prior"

    def bad(module, parent, parent_name):
        raise KeyboardInterrupt

    calls.clear()
    hooks.resolver = bad
    with pytest.raises(KeyboardInterrupt):
        hooks.pre(nn.ReLU(), ())
    assert calls == [None, "prior"] and hooks.open == 0

    def broken(cb):
        raise RuntimeError("no dynamo")

    hooks = _C.ModuleHooks(torch.Tensor, resolver=resolver)
    hooks.eval_frame = broken
    m = nn.ReLU()
    hooks.pre(m, ())  # named by its class, the error counted
    assert hooks.errors == 1 and hooks.open == 1
    hooks.post(m, (), None)


def test_install_switches_dynamo_off_around_the_resolver_without_a_wrapper():
    dynamo = pytest.importorskip("torch._dynamo")
    _C.start()
    try:
        h = _modules.install()
        try:
            assert h.hooks.eval_frame is dynamo.eval_frame.set_eval_frame
            assert h.hooks.resolver is h.resolver  # not dynamo.disable's Python wrapper
        finally:
            h.remove()
    finally:
        _C.stop().close()


# ---- exceptions, kwargs, subclasses (both modes) ----

class Raiser(nn.Module):
    def __init__(self, exc):
        super().__init__()
        self.exc = exc
        self.inner = nn.Identity()

    def forward(self, x):
        self.inner(x)
        raise self.exc("in forward")


@pytest.mark.parametrize("exc", [Boom, KeyboardInterrupt])
def test_exception_or_interrupt_in_forward_keeps_the_stack_balanced(tmp_path, mode, exc):
    model = nn.Sequential(nn.Identity(), Raiser(exc))
    x = torch.ones(2)

    def run():
        with pytest.raises(exc):
            model(x)
        if mode == "call" or exc is not KeyboardInterrupt:
            assert _C.depth() == 0 and _modules._installed.hooks.open == 0
        else:
            # hooks: torch runs always_call post hooks for an Exception only; the ranges a
            # BaseException left open are closed by the next post above them or by remove()
            assert _C.depth() == 2
        model[0](x)  # the capture still works

    trace, handle = profiled(tmp_path, run, mode)  # checks depth() == 0 after remove()
    names = [e["name"] for e in ranges_of(trace)]
    # model[0] called on its own is named as such; in hooks mode a KeyboardInterrupt leaves
    # "1" open (above), so that call is made inside it, and named under it
    last = "1.Identity" if mode == "hooks" and exc is KeyboardInterrupt else "Identity"
    assert sorted(names) == sorted(["Sequential", "0", "1", "1.inner", last])
    if mode == "call":
        assert names == ["Sequential", "0", "1", "1.inner", last]
        assert not any("cprof truncated" in e["args"] for e in ranges_of(trace))


class KwOnly(nn.Module):
    def forward(self, *, x, scale=1.0):
        return x * scale


class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.kw = KwOnly()

    def forward(self, x, y=None, *, z=None):
        return self.kw(x=x + (y if y is not None else 0) + (z if z is not None else 0),
                       scale=2.0)


def test_kwargs_only_and_mixed_calls(tmp_path, mode):
    model = Mixed()
    x = torch.ones(2, 3)
    out = {}

    def run():
        out["mixed"] = model(x, y=torch.ones(2, 3), z=torch.ones(2, 3))
        out["kw"] = model.kw(x=x)  # keyword arguments only
        out["pos"] = model(x, torch.ones(2, 3))

    trace, _ = profiled(tmp_path, run, mode, record_shapes=True)
    assert torch.equal(out["kw"], x)
    assert torch.equal(out["mixed"], torch.full((2, 3), 6.0))
    assert torch.equal(out["pos"], torch.full((2, 3), 4.0))
    rs = ranges_of(trace)
    assert [e["name"] for e in rs] == ["Mixed", "kw", "KwOnly", "Mixed", "kw"]
    dims = [e["args"]["Input Dims"] for e in rs]
    if mode == "hooks":  # torch's global pre-hooks see the positional arguments only
        assert dims == [[[2, 3]], [], [], [[2, 3], [2, 3]], []]
    else:  # the positional arguments, then the keyword arguments' values in call order
        assert dims == [[[2, 3], [2, 3], [2, 3]], [[2, 3], []], [[2, 3]],
                        [[2, 3], [2, 3]], [[2, 3], []]]


class OwnCall(nn.Module):
    """Overrides __call__ and never goes through nn.Module.__call__ or _call_impl."""

    def __init__(self):
        super().__init__()
        self.child = nn.ReLU()

    def __call__(self, x):
        return self.forward(x)

    def forward(self, x):
        return self.child(x)


class SuperCall(nn.Module):
    """Overrides __call__ but calls nn.Module.__call__: recorded in both modes."""

    def __call__(self, x):
        return super().__call__(x) + 1

    def forward(self, x):
        return x


class ImplCall(nn.Module):
    """Overrides __call__ and runs _call_impl itself: only the hooks mode records it."""

    def __call__(self, x):
        return self._call_impl(x)

    def forward(self, x):
        return x * 2


def test_subclass_with_its_own_call(tmp_path, mode):
    own, sup, impl = OwnCall(), SuperCall(), ImplCall()
    x = -torch.ones(2)
    out = {}

    def run():
        out["own"] = own(x)
        out["sup"] = sup(x)
        out["impl"] = impl(x)

    trace, _ = profiled(tmp_path, run, mode)
    assert torch.equal(out["own"], torch.zeros(2))
    assert torch.equal(out["sup"], torch.zeros(2))
    assert torch.equal(out["impl"], -2 * torch.ones(2))
    names = [e["name"] for e in ranges_of(trace)]
    # OwnCall itself is never recorded (no hook runs, its __call__ is not Module's); its child
    # is, as a root named by its class
    if mode == "call":
        assert names == ["ReLU", "SuperCall"]
    else:
        assert names == ["ReLU", "SuperCall", "ImplCall"]


# ---- mode "call": Module.__call__ replaced and restored ----

def test_module_call_replaced_and_restored_by_identity(tmp_path):
    model = MLP()
    with cprof.ProfilerContext(output_dir=tmp_path, profile_name="id", activities=["CPU"], record_ops=False,
                               with_stack=False, record_shapes=False, verbose=False) as p:
        handle = _modules.install()
        w = handle.wrapper
        try:
            assert handle.mode == "call" and type(w) is _C.ModuleCall
            assert nn.Module.__dict__["__call__"] is w
            # read through the class it is still torch's function (what dynamo inlines)
            assert nn.Module.__call__ is ORIGINAL_CALL and MLP.__call__ is ORIGINAL_CALL
            assert w.original is ORIGINAL_CALL and w.hooks is handle.hooks and w.enabled
            assert w.__name__ == ORIGINAL_CALL.__name__ and w.__code__ is ORIGINAL_CALL.__code__
            bound = model.__call__  # binds like a function
            assert bound.__self__ is model and bound.__func__ is w
            assert not torch_module._global_forward_hooks  # the fast path stays
            bound(torch.ones(1, 4))  # model.__call__(x) and super().__call__(x) are recorded
            w(model.head, torch.ones(1, 4))  # unbound, as slot_tp_call calls it
        finally:
            handle.remove()
        assert nn.Module.__dict__["__call__"] is ORIGINAL_CALL
        assert not w.enabled
        with cprof.range("after"):
            w(model.head, torch.ones(1, 4))  # disabled: passes the call on, records nothing
    names = [e["name"] for e in ranges_of(load_trace(p.trace_path))]
    assert names == EXPECTED + ["Linear", "after"]  # model.head called on its own


def test_module_call_replaced_by_someone_else_is_left_with_a_warning(tmp_path):
    calls = []
    with cprof.ProfilerContext(output_dir=tmp_path, profile_name="other", activities=["CPU"], record_ops=False,
                               with_stack=False, record_shapes=False, verbose=False) as p:
        handle = _modules.install()
        ours = nn.Module.__dict__["__call__"]  # (nn.Module.__call__ would give torch's)

        def theirs(self, *args, **kwargs):
            calls.append(type(self).__name__)
            return ours(self, *args, **kwargs)

        nn.Module.__call__ = theirs
        try:
            nn.ReLU()(torch.ones(1))  # theirs, then ours: recorded
            with pytest.warns(RuntimeWarning, match="replaced"):
                handle.remove()
            assert nn.Module.__dict__["__call__"] is theirs  # not clobbered
            nn.ReLU()(torch.ones(1))  # theirs, then ours disabled: not recorded
        finally:
            nn.Module.__call__ = ORIGINAL_CALL
    assert calls == ["ReLU", "ReLU"]
    assert [e["name"] for e in ranges_of(load_trace(p.trace_path))] == ["ReLU"]


def test_module_call_object_conventions():
    hooks = _C.ModuleHooks(torch.Tensor)
    with pytest.raises(TypeError):
        _C.ModuleCall(object(), ORIGINAL_CALL)
    with pytest.raises(TypeError):
        _C.ModuleCall(hooks, 3)
    w = _C.ModuleCall(hooks, ORIGINAL_CALL)
    m = nn.Identity()
    assert w.__get__(None, nn.Module) is ORIGINAL_CALL  # class access: torch's function
    assert w.__get__(m).__func__ is w
    assert torch.equal(w(m, torch.ones(1)), torch.ones(1))  # no window: depth tracked only
    assert torch.equal(w.__get__(m)(torch.ones(1)), torch.ones(1))
    assert _C.depth() == 0 and hooks.open == 0
    w.pause()
    w.pause()
    assert w.paused and "paused" in repr(w)
    w.resume()
    assert w.paused
    w.resume()
    w.resume()  # one too many: ignored
    assert not w.paused
    with pytest.raises(TypeError):
        w()  # no module: the original's own error
    assert "ModuleCall" in repr(w)

    def interrupted(module, parent, parent_name):
        raise KeyboardInterrupt

    ran = []

    class Probe(nn.Module):
        def forward(self, x):
            ran.append(x)
            return x

    w = _C.ModuleCall(_C.ModuleHooks(torch.Tensor, resolver=interrupted), ORIGINAL_CALL)
    with pytest.raises(KeyboardInterrupt):
        w(Probe(), torch.ones(1))
    assert ran == [] and _C.depth() == 0  # raised before the call, nothing pushed


# ---- torch.compile ----

class Compiled(nn.Module):
    """Two submodules with a graph break between them: unprofiled, dynamo makes 1 break."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    def forward(self, x):
        y = self.a(x)
        torch._dynamo.graph_break()
        return self.b(y).sum()


def _compile_run(model, x, n=3):
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    cm = torch.compile(model, backend="eager")
    outs = [cm(x) for _ in range(n)]
    return outs, sum(counters["graph_break"].values()), counters["stats"]["unique_graphs"]


def test_torch_compile_has_the_same_graph_breaks_profiled(tmp_path):
    pytest.importorskip("torch._dynamo")
    model, x = Compiled(), torch.randn(2, 4)
    outs, breaks, graphs = _compile_run(model, x)
    assert breaks == 1 and graphs == 2
    got = {}

    def run():
        got["outs"], got["breaks"], got["graphs"] = _compile_run(model, x)
        model(x)  # eager: every module recorded

    with warnings.catch_warnings():
        # torch warns when it compiles a module with global hooks on; mode "call" has none
        warnings.filterwarnings("error", message=".*global hooks.*")
        trace, _ = profiled(tmp_path, run, "call")
    assert (got["breaks"], got["graphs"]) == (breaks, graphs)
    assert all(torch.equal(a, b) for a, b in zip(got["outs"], outs))
    all_names = [e["name"] for e in ranges_of(trace)]
    # the compiled frames' regions (tests/test_compiled_regions.py): the break nests them
    regions = [n for n in all_names if n.startswith("Torch-Compiled Region")]
    assert len(regions) == 6 and len(set(regions)) == 2
    names = [n for n in all_names if not n.startswith("Torch-Compiled Region")]
    # compiled calls: the compiled module's call and its original's (OptimizedModule calls
    # model.__call__); no module inside a graph, nothing run by the compilation itself
    assert names[:6] == ["OptimizedModule", "_orig_mod"] * 3
    # eager: every module, named where it is called (the eager model on its own: by its
    # class, not "_orig_mod", the name the compiled wrapper's call gave it)
    assert names[6:] == ["Compiled", "a", "b", "b.0", "b.1"]


def test_torch_compile_when_dynamo_is_first_imported_inside_the_window(tmp_path):
    """torch._dynamo imported for the first time while the capture is on (a fresh process)
    still keeps torch's own __call__ as its "unpatched" one, and compiles as unprofiled."""
    script = textwrap.dedent("""
        import sys, warnings
        import torch
        from torch import nn
        import cprof
        from cprof import _C, _modules
        assert "torch._dynamo" not in sys.modules
        original = nn.Module.__dict__["__call__"]
        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        x = torch.randn(2, 4)
        _C.start()
        h = _modules.install()
        cm = torch.compile(model, backend="eager")  # imports torch._dynamo
        import torch._dynamo.utils as du
        from torch._dynamo.utils import counters
        assert du.unpatched_nn_module_call is original, du.unpatched_nn_module_call
        assert nn.Module.__dict__["__call__"] is h.wrapper
        for _ in range(3):
            cm(x)
        model(x)
        h.remove()
        snap = _C.stop()
        print(sum(counters["graph_break"].values()), counters["stats"]["unique_graphs"],
              snap.ranges, nn.Module.__dict__["__call__"] is original)
    """)
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    # 0 breaks, 1 graph; ranges: 3 x OptimizedModule (torch.compile inlines a torch.nn module
    # such as Sequential into the compiled frame) + Sequential, 0, 1 eager
    assert r.stdout.split() == ["0", "1", "6", "True"]


def test_torch_compile_aot_eager_keeps_the_wrapper_installed(tmp_path):
    """AOTAutograd traces with torch.fx's patcher, which saves nn.Module.__call__ through the
    class (torch's function) and sets it back: the wrapper is put back at compile end."""
    pytest.importorskip("torch._dynamo")
    model, x = nn.Sequential(nn.Linear(4, 4), nn.ReLU()), torch.randn(2, 4)

    class Top(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = model

        def forward(self, x):
            return self.body(x).sum()

    top = Top()

    def run():
        torch._dynamo.reset()
        cm = torch.compile(top, backend="aot_eager")
        for _ in range(2):
            cm(x)
        w = _modules._installed.wrapper
        assert nn.Module.__dict__["__call__"] is w and not w.paused

    trace, _ = profiled(tmp_path, run, "call")
    # the aot_eager graph runs as an fx GraphModule: a module call of its own at run time,
    # inside the frame's compiled region (tests/test_compiled_regions.py)
    names = [e["name"] for e in ranges_of(trace)]
    assert [n for n in names if not n.startswith(("Torch-Compiled Region", "Compiled"))] == \
        ["OptimizedModule", "_orig_mod", "_orig_mod.GraphModule"] * 2
    assert sum(n.startswith("Torch-Compiled Region") for n in names) == 2


def test_checkpointed_layers_and_recursion_keep_their_names(tmp_path, mode):
    """Activation checkpointing recomputes each layer in backward with no module open: each
    keeps its path (they were all named "Block", their children "attn"), both with the
    reentrant and the non-reentrant checkpoint; a module calling itself keeps its name at
    every depth (it got a new, longer one per depth); a layer called on its own in forward
    after all that is named by its class."""
    from torch.utils.checkpoint import checkpoint

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.Linear(4, 4)

        def forward(self, x):
            return self.attn(x)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([Block() for _ in range(3)])

        def forward(self, x):
            for i, layer in enumerate(self.layers):
                x = checkpoint(layer, x, use_reentrant=bool(i % 2))
            return x

    class Rec(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x, depth):
            x = self.lin(x)
            return self(x, depth - 1) if depth else x

    net = Net()

    def run():
        net(torch.ones(2, 4, requires_grad=True)).sum().backward()
        Rec()(torch.ones(1, 2), 20)
        net.layers[0](torch.ones(2, 4))

    trace, _ = profiled(tmp_path, run, mode)
    count = collections.Counter(e["name"] for e in ranges_of(trace))
    for i in range(3):  # forward, and the recompute in backward
        assert count[f"layers.{i}"] == 2 and count[f"layers.{i}.attn"] == 2, count
    assert count["Rec"] == 21 and count["lin"] == 21, count
    assert count["Block"] == 1 and count["attn"] == 1, count  # the call on its own


def test_a_module_put_into_a_container_mid_window_gets_its_path(tmp_path, mode):
    """A module replaced inside a ModuleList of a ModuleList (reached through containers whose
    forward never runs) was named "{parent}.{Class}": the parent's tree was read once."""
    class Deep(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.ModuleList([nn.ModuleList([nn.Linear(4, 4)])])

        def forward(self, x):
            return self.l[0][0](x)

    model = Deep()
    x = torch.ones(1, 4)

    def run():
        model(x)
        model.l[0][0] = nn.Linear(4, 4)
        model(x)

    trace, _ = profiled(tmp_path, run, mode)
    assert [e["name"] for e in ranges_of(trace)] == ["Deep", "l.0.0", "Deep", "l.0.0"]
