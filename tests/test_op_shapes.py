"""record_shapes for torch's operators: the RecordFunction observer (csrc/torch_ops.cpp,
cprof/_ops.py) writes what torch.profiler writes for each op ("Input Dims", "Input type",
"Input Strides", "Concrete Inputs"), and says so where it cannot. Each scenario runs in a fresh
interpreter: which capture a window gets depends on the process (cprof imported before torch,
an ITT collector named, the observer built for this torch)."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, run_ops_snippet
torch = pytest.importorskip("torch")
try:
    from cprof import _torch_ops  # noqa: F401  (built by setup.py where torch is importable)
except ImportError as err:
    pytest.skip(f"cprof._torch_ops is not built: {err}", allow_module_level=True)

KEYS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")


def run_py(code, tmp_path, env=None, timeout=300):
    return run_ops_snippet(code, tmp_path, env, timeout, warnings_always=True)


HELPERS = """
import json, os, sys, warnings
KEYS = %r
def load(prof, path):
    prof.export_chrome_trace(path)
    with open(path) as f:
        return json.load(f)
def ops(trace):
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
def shapes(trace):
    return [[e["name"]] + [e["args"].get(k) for k in KEYS] for e in ops(trace)]
""" % (KEYS,)

WORKLOAD = """
import torch
torch.manual_seed(0)
a = torch.randn(4, 8)
b = torch.randn(8, 16)
i = torch.arange(5)
conv_in = torch.randn(1, 3, 8, 8)
conv_w = torch.randn(4, 3, 3, 3)
sp = torch.sparse_coo_tensor(torch.tensor([[0, 1], [1, 0]]), torch.tensor([1., 2.]), (2, 2))
def work():
    torch.mm(a, b)
    torch.cat([a, a], 1)              # TensorList, Scalar
    torch.cat([a] * 31)               # a tensor list past torch's 30: no shapes
    torch.zeros(*([1] * 31))          # a scalar list past 30: an unknown input
    a.add(1.5); a.mul(-0.0); a.mul(0.1); a.add(float("inf")); a.mul(3.000001e12)
    a.sum(dim=[0])                    # ScalarList
    torch.nn.functional.linear(a, b.t())   # None bias
    a.to(torch.float16).to(torch.bfloat16)
    i + 1                             # long int
    torch.tensor([True, False]).logical_not()
    a[torch.tensor([0, 1])]           # a list of optional tensors
    a[:, 1:3]
    sp + sp                           # sparse: no strides
    torch.nn.functional.conv2d(conv_in, conv_w, padding=1)
    torch.clamp(a, min=-1.5, max=2)
    w = torch.randn(3, 3, requires_grad=True)
    (w * 2).sum().backward()          # autograd nodes and their ops
"""


def test_operator_shapes_are_torch_profilers_field_for_field(tmp_path):
    out, err = run_py(HELPERS + WORKLOAD + """
import cprof
with cprof.profile(activities=["CPU"], record_shapes=True) as p:
    work()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                            record_shapes=True) as q:
    work()
c = load(p, "c.json")
t = load(q, "t.json")
print(json.dumps({"cprof": shapes(c), "torch": shapes(t), "meta": c["cprof"]["ops"]}))
""", tmp_path)
    assert out["meta"]["mode"] == "record_function" and out["meta"]["shapes"] is True
    assert "shapes_unavailable" not in out["meta"] and "shape_errors" not in out["meta"]
    assert len(out["cprof"]) > 50
    # the same operators in the same order, each with torch's four lists exactly
    assert out["cprof"] == out["torch"]
    by_name = {r[0]: r for r in out["cprof"]}
    assert by_name["aten::mm"][1:3] == [[[4, 8], [8, 16]], ["float", "float"]]
    assert "cprof: record_shapes=True" not in err


def test_group_by_input_shape_splits_ops_by_their_shapes_as_torch_does(tmp_path):
    out, _ = run_py(HELPERS + """
import cprof
import torch
x, y = torch.randn(2, 3), torch.randn(5, 7)
def work():
    for _ in range(3):
        torch.relu(x)
    torch.relu(y)
with cprof.profile(activities=["CPU"], record_shapes=True) as p:
    work()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                            record_shapes=True) as q:
    work()
def rows(prof):
    return sorted([r.key, str(r.input_shapes), r.count]
                  for r in prof.key_averages(group_by_input_shape=True)
                  if r.key in ("aten::relu", "aten::clamp_min"))
table = p.key_averages(group_by_input_shape=True).table(sort_by="cpu_time_total")
print(json.dumps({"cprof": rows(p), "torch": rows(q), "table": table}))
""", tmp_path)
    assert out["cprof"] == out["torch"]
    assert ["aten::relu", "[[2, 3]]", 3] in out["cprof"]
    assert ["aten::relu", "[[5, 7]]", 1] in out["cprof"]
    assert "[[2, 3]]" in out["table"] and "Input Shapes" in out["table"]


def test_a_tensor_list_argument_has_no_shapes_in_events_as_torchs(tmp_path):
    """torch's events() give aten::cat's TensorList argument [] (its trace's Input Dims list
    each tensor's, and so does cprof's trace); cprof's events() used to list them."""
    out, _ = run_py(HELPERS + """
import cprof
import torch
a = torch.randn(2, 3)
with cprof.profile(activities=["CPU"], record_shapes=True) as p:
    torch.cat([a, a, a])
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                            record_shapes=True) as q:
    torch.cat([a, a, a])
def shapes(prof):
    return ([e.input_shapes for e in prof.events() if e.name == "aten::cat"],
            [r.input_shapes for r in prof.key_averages(group_by_input_shape=True)
             if r.key == "aten::cat"])
print(json.dumps({"cprof": shapes(p), "torch": shapes(q)}))
""", tmp_path)
    assert out["cprof"] == out["torch"]


def test_concrete_float_lists_are_numbers_as_torchs(tmp_path):
    """interpolate's scale factors (2.0, 3.0) print as "[2., 3.]": torch's events() give
    [2.0, 3.0]; cprof's gave the string."""
    out, _ = run_py(HELPERS + """
import cprof
import torch
import torch.nn.functional as F
x = torch.randn(1, 1, 2, 2)
def run():
    F.interpolate(x, scale_factor=(2.0, 3.0), mode="nearest")
    F.interpolate(x, scale_factor=(1.5, 2.5), mode="nearest")
with cprof.profile(activities=["CPU"], record_shapes=True) as p:
    run()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                            record_shapes=True) as q:
    run()
def concrete(prof):
    return [e.concrete_inputs for e in prof.events() if e.name == "aten::upsample_nearest2d"]
print(json.dumps({"cprof": concrete(p), "torch": concrete(q)}))
""", tmp_path)
    assert out["cprof"] == out["torch"] and out["torch"], out
    assert [2.0, 3.0] in out["cprof"][0]


@pytest.mark.parametrize("capture", ["auto", "itt"])
def test_without_record_shapes_ops_carry_no_shapes(tmp_path, capture):
    """By default the observer records the ops (decision 98), with CPROF_OPS_CAPTURE=itt ITT:
    either way without shapes."""
    out, _ = run_py(HELPERS + """
import cprof
import torch
a = torch.randn(4, 4)
with cprof.profile(activities=["CPU"]) as p:
    torch.mm(a, a)
t = load(p, "t.json")
mm = next(e for e in ops(t) if e["name"] == "aten::mm")
print(json.dumps({"meta": t["cprof"]["ops"], "keys": sorted(mm["args"])}))
""", tmp_path, env={"CPROF_OPS_CAPTURE": capture})
    assert out["meta"]["mode"] == ("itt" if capture == "itt" else "record_function")
    assert not set(KEYS) & set(out["keys"])


def test_ops_nest_in_user_ranges_and_modules_with_shapes_on_both(tmp_path):
    out, _ = run_py(HELPERS + """
import cprof
import torch
lin = torch.nn.Linear(8, 4)
x = torch.randn(2, 8)
with cprof.profile(activities=["CPU"], record_shapes=True, with_modules=True,
                   record_ops=True) as p:
    with cprof.record_function("outer"):
        lin(x)
t = load(p, "t.json")
ev = [e for e in t["traceEvents"] if e.get("ph") == "X"]
outer = next(e for e in ev if e["name"] == "outer")
mod = next(e for e in ev if e["cat"] == "user_annotation" and e["name"] != "outer")
linear = next(e for e in ops(t) if e["name"] == "aten::linear")
def inside(o, i):
    return (o["tid"] == i["tid"] and o["ts"] <= i["ts"]
            and i["ts"] + i["dur"] <= o["ts"] + o["dur"] + 0.002)
print(json.dumps({"in_mod": inside(mod, linear), "mod_in_outer": inside(outer, mod),
                  "mod_dims": mod["args"].get("Input Dims"),
                  "linear_dims": linear["args"].get("Input Dims"),
                  "linear_types": linear["args"].get("Input type")}))
""", tmp_path)
    assert out["in_mod"] and out["mod_in_outer"]
    assert out["mod_dims"] == [[2, 8]]
    assert out["linear_dims"] == [[2, 8], [4, 8], [4]]
    assert out["linear_types"] == ["float", "float", "float"]


def test_shapes_are_not_read_while_cpu_is_toggled_off(tmp_path):
    out, _ = run_py(HELPERS + """
import cprof
import torch
a = torch.randn(3, 3)
with cprof.profile(activities=["CPU"], record_shapes=True) as p:
    torch.mm(a, a)
    p.toggle_collection_dynamic(False, ["CPU"])
    torch.mm(a, a)
    torch.add(a, a)
    p.toggle_collection_dynamic(True, ["CPU"])
    torch.add(a, 2)
t = load(p, "t.json")
from cprof import _torch_ops
print(json.dumps({"ops": [[e["name"], e["args"].get("Input Dims")] for e in ops(t)
                          if e["name"] in ("aten::mm", "aten::add")],
                  "with_dims": sum("Input Dims" in e["args"] for e in ops(t)),
                  "shaped": _torch_ops.stats()["shaped"]}))
""", tmp_path)
    assert out["ops"] == [["aten::mm", [[3, 3], [3, 3]]], ["aten::add", [[3, 3], [], []]]]
    # the ops while off were neither recorded nor measured
    assert out["shaped"] == out["with_dims"]


def test_torch_profiler_inside_a_shapes_window_gets_the_ops_then_cprof_resumes(tmp_path):
    out, _ = run_py(HELPERS + """
import cprof
import torch
a = torch.randn(2, 2)
with cprof.profile(activities=["CPU"], record_shapes=True) as p:
    torch.mm(a, a)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                record_shapes=True) as tp:
        torch.relu(a)
    torch.add(a, a)
c = load(p, "c.json")
t = load(tp, "t.json")
print(json.dumps({"cprof": [e["name"] for e in ops(c)], "torch": [e["name"] for e in ops(t)],
                  "add_dims": next(e["args"]["Input Dims"] for e in ops(c)
                                   if e["name"] == "aten::add")}))
""", tmp_path)
    assert "aten::relu" in out["torch"] and "aten::relu" not in out["cprof"]
    assert out["cprof"][0] == "aten::mm" and "aten::add" in out["cprof"]
    assert out["add_dims"] == [[2, 2], [2, 2], []]


def test_an_observer_built_for_another_torch_is_not_used_and_says_so(tmp_path):
    out, err = run_py(HELPERS + """
import types
import cprof
import torch
# what a torch upgraded after cprof was built looks like to cprof
sys.modules["cprof._torch_ops"] = types.SimpleNamespace(TORCH_VERSION="0.0.1")
a = torch.randn(3, 3)
with cprof.profile(activities=["CPU"], record_shapes=True) as p:
    with cprof.record_function("kept"):
        torch.mm(a, a)
t = load(p, "t.json")
names = [e["name"] for e in t["traceEvents"] if e.get("ph") == "X"]
mm = next(e for e in ops(t) if e["name"] == "aten::mm")
print(json.dumps({"meta": t["cprof"]["ops"], "names": names, "keys": sorted(mm["args"])}))
""", tmp_path)
    note = out["meta"]["shapes_unavailable"]
    assert "built for torch 0.0.1" in note and "rebuild" in note
    assert out["meta"]["mode"] == "itt"  # the ops are still recorded, without shapes
    assert "kept" in out["names"] and "aten::mm" in out["names"]
    assert "Input Dims" not in out["keys"]
    assert "recorded without their shapes" in err and "built for torch 0.0.1" in err


def test_a_missing_observer_says_how_to_build_it(tmp_path):
    out, err = run_py(HELPERS + """
import cprof
import torch
sys.modules["cprof._torch_ops"] = None  # as if setup.py found no torch to build it against
a = torch.randn(3, 3)
with cprof.profile(activities=["CPU"], record_shapes=True) as p:
    torch.mm(a, a)
t = load(p, "t.json")
print(json.dumps({"meta": t["cprof"]["ops"], "n": len(ops(t))}))
""", tmp_path)
    assert "not built" in out["meta"]["shapes_unavailable"]
    assert "setup" in out["meta"]["shapes_unavailable"] and out["n"] >= 1
    assert "recorded without their shapes" in err


def test_the_observer_records_ops_where_itt_cannot_attach(tmp_path):
    """Another ITT collector is named (VTune's): cprof leaves ITT alone, and records operators
    (without shapes, not asked for) through the observer instead."""
    out, _ = run_py(HELPERS + """
import cprof
import torch
a = torch.randn(3, 3)
with cprof.profile(activities=["CPU"]) as p:
    torch.mm(a, a)
t = load(p, "t.json")
mm = next(e for e in ops(t) if e["name"] == "aten::mm")
print(json.dumps({"meta": t["cprof"]["ops"], "keys": sorted(mm["args"])}))
""", tmp_path, env={"INTEL_LIBITTNOTIFY64": "/nonexistent/libittnotify_collector.so"})
    assert out["meta"]["mode"] == "record_function" and out["meta"]["shapes"] is False
    assert "Input Dims" not in out["keys"]


def test_cprof_run_record_shapes_gives_ops_their_shapes(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("import torch\na = torch.randn(4, 5)\nfor _ in range(3):\n"
                      "    torch.mm(a, a.t())\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-m", "cprof", "run", "--record-ops", "--record-shapes",
                        "--no-gzip", "-o", str(tmp_path / "out"), str(script)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    [path] = [p for p in (tmp_path / "out").rglob("*.json")]
    t = json.loads(path.read_text())
    mms = [e for e in t["traceEvents"] if e.get("name") == "aten::mm"]
    assert len(mms) == 3
    assert all(e["args"]["Input Dims"] == [[4, 5], [5, 4]] for e in mms)


FLOPS_WORK = """
import torch
torch.manual_seed(0)
a, b = torch.randn(4, 8), torch.randn(8, 16)
x, w = torch.randn(2, 3, 16, 16), torch.randn(4, 3, 3, 3)
c, d = torch.randn(2, 4, 8), torch.randn(2, 8, 5)
def work():
    torch.mm(a, b); torch.addmm(torch.randn(16), a, b); a.mul(a); a.add(a); a.add(2); a * 3
    torch.nn.functional.conv2d(x, w, stride=2, padding=1)
    torch.nn.functional.conv2d(torch.randn(1, 4, 9, 9), torch.randn(4, 2, 3, 3), stride=(1, 2),
                               dilation=2, groups=2)
    torch.bmm(c, d); torch.baddbmm(torch.randn(2, 4, 5), c, d)
    torch.nn.functional.linear(a, b.t()); torch.matmul(c, d)
    torch.nn.functional.conv1d(torch.randn(1, 2, 10), torch.randn(3, 2, 3))  # no estimate
    y = torch.randn(3, 3, requires_grad=True)
    (y * 2 + y).sum().backward()
"""


def test_with_flops_estimates_what_torch_profiler_estimates(tmp_path):
    out, err = run_py(HELPERS + FLOPS_WORK + """
import cprof
with cprof.profile(activities=["CPU"], with_flops=True) as p:
    work()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                            with_flops=True) as q:
    work()
def flops(prof):
    return [[e.name, e.flops] for e in prof.events() if e.flops]
def rows(prof):
    return sorted([r.key, r.flops, r.count] for r in prof.key_averages() if r.flops)
t = load(p, "t.json")
table = p.key_averages().table(sort_by="flops", row_limit=3)
print(json.dumps({"cprof": flops(p), "torch": flops(q), "rows_c": rows(p), "rows_t": rows(q),
                  "table": table, "top": t.get("with_flops"), "shapes": t.get("record_shapes"),
                  "total": p.key_averages().total_average().flops}))
""", tmp_path)
    assert len(out["cprof"]) >= 14
    assert out["cprof"] == out["torch"]  # same ops, same order, same estimates
    assert out["rows_c"] == out["rows_t"]
    assert ["aten::conv2d", 27648 + 2160, 2] in out["rows_c"]
    assert out["total"] == sum(f for _, f in out["cprof"])
    lines = out["table"].splitlines()
    assert lines[1].rstrip().endswith("Total FLOPs")  # smallest estimate 9: plain FLOPs
    assert lines[3].split()[0] == "aten::conv2d" and lines[3].split()[-1] == "29808.000"
    assert out["top"] == 1 and out["shapes"] == 1  # with_flops implies record_shapes, as torch
    assert "not supported" not in err


def test_without_with_flops_there_are_no_estimates_and_no_column(tmp_path):
    out, _ = run_py(HELPERS + FLOPS_WORK + """
import cprof
with cprof.profile(activities=["CPU"], record_shapes=True) as p:
    work()
print(json.dumps({"n": sum(1 for e in p.events() if e.flops),
                  "table": p.key_averages().table(row_limit=3)}))
""", tmp_path)
    assert out["n"] == 0 and "FLOPs" not in out["table"]


def test_a_shapes_window_leaves_no_itt_variable_for_child_processes(tmp_path):
    out, _ = run_py(HELPERS + """
import cprof
before = os.environ.get("INTEL_LIBITTNOTIFY64")
import torch
with cprof.profile(activities=["CPU"], record_shapes=True) as p:
    torch.mm(torch.ones(2, 2), torch.ones(2, 2))
t = load(p, "t.json")
print(json.dumps({"before": before == cprof._C.__file__,
                  "after": os.environ.get("INTEL_LIBITTNOTIFY64"),
                  "mode": t["cprof"]["ops"]["mode"]}))
""", tmp_path)
    assert out == {"before": True, "after": None, "mode": "record_function"}


def test_cprof_ops_capture_chooses_the_mechanism_and_rejects_typos(tmp_path):
    out, _ = run_py(HELPERS + """
import cprof
import torch
a = torch.randn(3, 3)
res = {}
for choice in ("record_function", "itt", "auto", "bogus"):
    os.environ["CPROF_OPS_CAPTURE"] = choice
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            with cprof.profile(activities=["CPU"], record_shapes=choice == "itt") as p:
                torch.mm(a, a)
    except ValueError as err:
        res[choice] = str(err)
        continue
    t = load(p, choice + ".json")
    mm = next(e for e in ops(t) if e["name"] == "aten::mm")
    res[choice] = [t["cprof"]["ops"]["mode"], "Input Dims" in mm["args"],
                   [str(x.message) for x in w if "shapes" in str(x.message)]]
print(json.dumps(res))
""", tmp_path)
    assert out["record_function"] == ["record_function", False, []]
    mode, shaped, warned = out["itt"]
    assert mode == "itt" and not shaped and "CPROF_OPS_CAPTURE=itt" in warned[0]
    assert out["auto"] == ["record_function", False, []]
    assert "CPROF_OPS_CAPTURE='bogus'" in out["bogus"] and "record_function" in out["bogus"]


def test_features_say_whether_operators_can_carry_shapes(tmp_path):
    out, _ = run_py("""
import json, sys
import cprof
before = cprof.features()["operator_shapes"]
import torch
after = cprof.features()["operator_shapes"]
# as a process where it is missing: unloaded, unimportable, and the loaded one forgotten
sys.modules["cprof._torch_ops"] = None
del cprof._torch_ops
from cprof import _ops
_ops._state["rf"] = None
missing = cprof.features()["operator_shapes"]
print(json.dumps({"before": before, "after": after, "missing": missing}))
""", tmp_path)
    assert out["before"]["available"] is True
    assert "torch is not imported" in out["before"]["checked"]
    assert out["after"] == {"available": True, "reason": None,
                            "built_for_torch": torch.__version__}
    assert out["missing"]["available"] is False and "setup" in out["missing"]["reason"]


def test_module_shapes_read_through_cpp_tensors_are_the_python_readers_text():
    """record_shapes for module calls: the reader of cprof._torch_ops (decision 94) writes what
    py_hooks.c's Python reader writes, for every kind of argument; tensor subclasses and
    unusual dtypes are left to the Python reader."""
    import cprof
    from cprof import _C, _modules, _torch_ops

    base = torch._C.TensorBase
    names = _modules._dtype_names(torch)
    slow = _C.ModuleHooks(base, record_shapes=True, dtype_names=names)
    api = _torch_ops.shapes_api(base, torch.Tensor, torch.nn.Parameter)
    fast = _C.ModuleHooks(base, record_shapes=True, dtype_names=names, fast_shapes=api)

    class Sub(torch.Tensor):
        pass

    t = torch.randn(2, 3)
    dtypes = (torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.bool, torch.uint8,
              torch.int8, torch.int16, torch.float64, torch.complex64, torch.complex128)
    cases = [(), (t,), (t, 1, 2.5, True, 1j), ([t, t],), ((t, 3),), ([1, 2.0],), ([],),
             ("x", None), (torch.nn.Parameter(torch.randn(4)),),
             tuple(t.to(d) for d in dtypes), (t.as_subclass(Sub),),
             ([t, "a", t.as_subclass(Sub)],), (torch.tensor(3.0),), (torch.empty(0, 5),),
             (torch.nested.nested_tensor([torch.randn(2), torch.randn(3)]),), ([t, None],),
             ({"a": t},), (t.to(torch.float8_e4m3fn),), (t.t(),), ((),), ([[t]],)]
    for args in cases * 2:  # the second time from the per-thread cache
        assert fast.shapes_json(args) == slow.shapes_json(args), args
    assert fast.shapes_json((t, 1)) == '"Input Dims":[[2,3],[]],"Input type":["float","Scalar"]'
    with pytest.raises(TypeError, match="fast_shapes must be the capsule"):
        _C.ModuleHooks(base, record_shapes=True, fast_shapes=object())
    assert cprof  # imported for the extension it loads


def test_a_profile_uses_the_cpp_reader_unless_told_not_to(tmp_path):
    out, _ = run_py(HELPERS + """
import cprof
import torch
from cprof import _modules
lin = torch.nn.Linear(8, 4)
x = torch.randn(2, 8)
res = {}
for fast in ("1", "0"):
    os.environ["CPROF_FAST_SHAPES"] = fast
    with cprof.profile(activities=["CPU"], record_shapes=True, with_modules=True) as p:
        res[fast + "_installed"] = _modules._installed.hooks.fast_shapes_on()
        lin(x)
    t = load(p, fast + ".json")
    mod = next(e for e in t["traceEvents"] if e.get("cat") == "user_annotation")
    res[fast] = [mod["args"]["Input Dims"], mod["args"]["Input type"]]
print(json.dumps(res))
""", tmp_path)
    assert out["1_installed"] is True and out["0_installed"] is False
    assert out["1"] == out["0"] == [[[2, 8]], ["float"]]


def test_record_shapes_tables_have_torchs_rows_and_no_module_rows(tmp_path):
    """record_shapes records module calls for their shapes (the trace keeps them), but
    torch.profiler's results have no module events: key_averages() (plain and by input shape)
    has torch's rows, counts and shapes exactly; with_modules asks for the module rows."""
    out, _ = run_py("""
import json, torch, cprof
m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
opt = torch.optim.SGD(m.parameters(), lr=0.1)
x = torch.randn(16, 32)
def step():
    opt.zero_grad(); m(x).sum().backward(); opt.step()
step()
res = {}
for n, P, kw in (("torch", torch.profiler, {}), ("cprof", cprof, {}),
                 ("mods", cprof, {"with_modules": True})):
    with P.profile(activities=[P.ProfilerActivity.CPU], record_shapes=True, **kw) as p:
        step()
    res[n] = sorted([r.key, r.count] for r in p.key_averages())
    res[n + "_shapes"] = sorted([r.key, str(r.input_shapes)]
                                for r in p.key_averages(group_by_input_shape=True))
    if n == "cprof":
        p.export_chrome_trace("c.json")
        with open("c.json") as f:
            res["trace_names"] = sorted({e["name"] for e in json.load(f)["traceEvents"]
                                         if e.get("ph") == "X"})
print(json.dumps(res))
""", tmp_path)
    assert out["cprof"] == out["torch"] and len(out["cprof"]) > 10
    assert out["cprof_shapes"] == out["torch_shapes"]
    assert {"0", "1", "2"} <= set(out["trace_names"])  # the trace keeps the module calls
    assert {"0", "2"} <= {k for k, _ in out["mods"]}  # asked for: rows of their own


def test_events_carry_concrete_inputs_as_torchs_events_do(tmp_path):
    out, _ = run_py("""
import json, torch, cprof
a = torch.randn(4, 4)
def work():
    a.sum(dim=[0]); a.add(a, alpha=2); torch.clamp(a, min=-1.5, max=2); a[:, 1:3]
res = {}
for n, P in (("torch", torch.profiler), ("cprof", cprof)):
    with P.profile(activities=[P.ProfilerActivity.CPU], record_shapes=True) as p:
        work()
    res[n] = [[e.name, e.concrete_inputs] for e in p.events()
              if e.name in ("aten::sum", "aten::add", "aten::clamp", "aten::slice")]
print(json.dumps(res))
""", tmp_path)
    assert out["cprof"] == out["torch"] and len(out["cprof"]) == 4
    assert ["aten::clamp", [None, -1.5, 2]] in out["cprof"]


def test_shapes_refused_by_a_full_name_table_are_counted_per_window_and_said(tmp_path):
    """Each distinct scalar argument (alpha=i) is a new shape fragment in the process-wide name
    table. Once it is full, ops lose their shapes: ops.shape_errors counted the process's
    errors so far (the second window reported both windows' errors), and the warning spoke
    only of ranges and GPU kernels. Now each window counts its own, and the warning names
    operator shapes, step names and range names as what fills the table."""
    out, err = run_py(HELPERS + """
import cprof, torch
x = torch.ones(4)
metas, said = [], []
for w in range(2):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with cprof.profile(activities=["CPU"], record_shapes=True) as p:
            for i in range(300):
                x.add(x, alpha=1000 * w + i)
    said.append([str(m.message) for m in caught if "name table is full" in str(m.message)])
    metas.append(load(p, f"w{w}.json")["cprof"])
print(json.dumps({"errors": [m["ops"].get("shape_errors", 0) for m in metas],
                  "refused": [m.get("names_refused", 0) for m in metas], "said": said}))
""", tmp_path, env={"CPROF_NAMES_LIMIT": "100"})
    e0, e1 = out["errors"]
    assert e0 > 100 and 250 <= e1 <= 300, out["errors"]  # window 1: its own 300 at most
    (msg,) = out["said"][1]
    assert "operator input shapes under record_shapes" in msg and "alpha=i" in msg
    assert "ProfilerStep#N" in msg and f"{e1:,} operator calls of this window" in msg


def test_autograd_function_scalar_arguments_are_torch_profilers(tmp_path):
    """torch packs an autograd.Function's non-tensor arguments (and a _RecordFunctionFast's)
    into the RecordFunction only when its thread's profiler config is enabled and reports input
    shapes: cprof's state says so for a record_shapes window (decision 145), so `Scale.apply(x,
    2.5, True, "s")` and reentrant checkpoint's CheckpointFunction carry them as torch's. A
    _RecordFunctionFast given scope="user_scope" then opens a user-scope range: still recorded,
    with its inputs; record_function's ranges are not recorded twice. Outside record_shapes
    (and after the window) torch's "profiler enabled" stays off."""
    out, _ = run_py(HELPERS + """
import cprof
import torch
from torch.utils.checkpoint import checkpoint
from torch._C._profiler import _RecordFunctionFast
class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k, flag, name):
        ctx.k = k
        return x * k
    @staticmethod
    def backward(ctx, g):
        return g * ctx.k, None, None, None
x = torch.randn(3, requires_grad=True)
lin = torch.nn.Linear(3, 3)
def work():
    y = Scale.apply(x, 2.5, True, "s")
    checkpoint(lin, y, use_reentrant=True).sum().backward()
    with _RecordFunctionFast("fast_user", (x, 2), {"scope": "user_scope"}):
        pass
    with torch.profiler.record_function("user_range"):
        pass
work()
NAMES = ("Scale", "CheckpointFunction", "fast_user")
def pick(prof, path):
    t = load(prof, path)
    ev = [e for e in t["traceEvents"] if e.get("ph") == "X"]
    return {"args": sorted([e["name"]] + [e["args"].get(k) for k in KEYS]
                           for e in ev if e["name"] in NAMES),
            "user_range": sum(e["name"] == "user_range" for e in ev),
            "events": sorted([e.name, e.input_shapes, e.concrete_inputs]
                             for e in prof.events() if e.name in NAMES[:2]),
            "ka": sorted([r.key, str(r.input_shapes)]
                         for r in prof.key_averages(group_by_input_shape=True)
                         if r.key in NAMES[:2])}
with cprof.profile(activities=["CPU"], record_shapes=True) as p:
    enabled = torch._C._autograd._profiler_enabled()
    work()
after = torch._C._autograd._profiler_enabled()
with cprof.profile(activities=["CPU"]) as r:
    plain = torch._C._autograd._profiler_enabled()
    work()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                            record_shapes=True) as q:
    work()
c, t = pick(p, "c.json"), pick(q, "t.json")
print(json.dumps({"cprof": c, "torch": t, "enabled": [enabled, after, plain],
                  "plain_fast": sum(e.name == "fast_user" for e in r.events())}))
""", tmp_path)
    c, t = out["cprof"], out["torch"]
    assert c["events"] == t["events"] and c["ka"] == t["ka"]
    scale = next(a for a in c["args"] if a[0] == "Scale")
    assert scale[1:3] == [[[3], [], []], ["float", "Scalar", "Scalar"]]
    assert ["CheckpointFunction", "[[], [3]]"] in c["ka"]
    # torch files the user-scope fast range under user_annotation, cprof under cpu_op
    # (usage.md); the args are the same
    assert c["args"] == t["args"]
    assert c["user_range"] == 1 == t["user_range"]
    assert out["enabled"] == [True, False, False] and out["plain_fast"] == 1


def test_small_event_values_are_torchs(tmp_path):
    """events() values as torch's: with_flops on a nested tensor's aten::mul is 0 (torch
    cannot estimate it; its recorded dims [] read as a 0-dim tensor's gave 1), a complex scalar
    argument's concrete_inputs entry is a Python complex (it was the printed text), and an
    allocation outside every op ([memory]) has no concrete inputs, FLOPs or trace name, and its
    own thread as forward thread."""
    out, _ = run_py(HELPERS + """
import cprof
import torch
a, b = torch.randn(2, 4), torch.randn(3, 4)
nt = torch.nested.nested_tensor([a, b])
# (not -2j: its real part is -0.0, which the text torch writes, "0.-2.j", does not keep)
zs = (3 + 4j, -1.5 - 2e-05j, 1e20 + 1e-05j, complex(0, -2), complex(1, float("inf")))
def work():
    nt * 2
    torch.ones(3) * 2
    for z in zs:
        torch.full((1,), z)
    torch.randn(100)
res = {}
for name, P in (("torch", torch.profiler), ("cprof", cprof)):
    with P.profile(activities=[P.ProfilerActivity.CPU], with_flops=True,
                   profile_memory=True) as p:
        work()
    ev = p.events()
    mem = [e for e in ev if e.name == "[memory]"]
    res[name] = {
        "flops": [e.flops for e in ev if e.name == "aten::mul"],
        "complex": [repr(e.concrete_inputs[1]) for e in ev if e.name == "aten::full"],
        "memory": [[m.concrete_inputs, m.flops, m.fwd_thread == m.thread, m.trace_name]
                   for m in mem[:1]],
    }
    if name == "cprof":  # torch's own table(sort_by="flops") raises on its None
        res[name]["table"] = "Total FLOPs" in ev.table(sort_by="flops")
        res[name]["total"] = ev.total_average().count
print(json.dumps(res))
""", tmp_path)
    c, t = out["cprof"], out["torch"]
    assert c["flops"] == t["flops"] and c["flops"][0] == 0 and c["flops"][-1] == 3
    assert c["complex"] == t["complex"] and c["complex"][0] == "(3+4j)"
    assert c["memory"] == t["memory"] == [[None, None, True, None]]
    assert c["table"] and c["total"] > 0
