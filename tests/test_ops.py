"""Torch operators (aten ops, autograd nodes) recorded as cpu_op ranges through torch's ITT
hooks (csrc/ops_itt.c, cprof/_ops.py). Each scenario runs in a fresh interpreter, because
whether cprof can record operators depends on cprof being imported before torch."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, run_ops_snippet
torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.profiler.itt.is_available(),
                                reason="this torch build has no ITT")


def run_py(code, tmp_path, env=None, timeout=300):
    return run_ops_snippet(code, tmp_path, env, timeout)[0]


def _observer_built():
    try:
        from cprof import _torch_ops  # noqa: F401
    except ImportError:
        return False
    return True


# the default operator capture: the observer where cprof._torch_ops is built, else ITT
DEFAULT_MODE = "record_function" if _observer_built() else "itt"


HELPERS = """
import json, os, sys
def X(trace):
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "Trace"]
def load(prof, path):
    prof.export_chrome_trace(path)
    with open(path) as f:
        return json.load(f)
def inside(outer, inner):
    return (outer["tid"] == inner["tid"] and outer["ts"] <= inner["ts"]
            and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + 0.002)
"""


def test_aten_ops_nest_under_user_ranges_and_each_other(tmp_path):
    out = run_py(HELPERS + """
import cprof
import torch
lin = torch.nn.Linear(16, 16)
x = torch.randn(4, 16, requires_grad=True)
env_before = os.environ.get("INTEL_LIBITTNOTIFY64")
with cprof.profile(activities=["CPU"], record_ops=True) as p:
    with cprof.record_function("fwd"):
        y = lin(x).relu().sum()
    y.backward()
t = load(p, "t.json")
ev = X(t)
ops = [e for e in ev if e["cat"] == "cpu_op"]
fwd = next(e for e in ev if e["name"] == "fwd")
linear = next(e for e in ops if e["name"] == "aten::linear")
addmm = next(e for e in ops if e["name"] == "aten::addmm")
ka = {r.key: r.count for r in p.key_averages()}
print(json.dumps({
    "env_before": env_before == cprof._C.__file__,
    "env_after": os.environ.get("INTEL_LIBITTNOTIFY64"),
    "fwd_cat": fwd["cat"], "linear_in_fwd": inside(fwd, linear),
    "addmm_in_linear": inside(linear, addmm),
    "backward": sorted({e["name"] for e in ops if "Backward" in e["name"]}),
    "addmm_calls": ka.get("aten::addmm"), "mm_calls": ka.get("aten::mm"),
    "meta": t["cprof"].get("ops"), "record_ops": t["cprof"]["config"]["record_ops"],
    "profiler_flag_after": torch.autograd.profiler._is_profiler_enabled,
    "dur_ok": all(e["dur"] >= 0 for e in ops),
    "fwd_twice": sum(e["name"] == "fwd" for e in ev),
}))
""", tmp_path)
    assert out["env_before"] and out["env_after"] is None  # removed once attached
    assert out["fwd_cat"] == "user_annotation" and out["fwd_twice"] == 1
    assert out["linear_in_fwd"] and out["addmm_in_linear"] and out["dur_ok"]
    assert {"AddmmBackward0", "ReluBackward0", "SumBackward0"} <= set(out["backward"])
    assert out["addmm_calls"] == 1 and out["mm_calls"] == 2
    # the observer where cprof._torch_ops is built (decision 98), ITT where it is not
    assert out["meta"]["mode"] == DEFAULT_MODE and out["meta"]["names"] > 5
    assert out["record_ops"] is True
    assert out["profiler_flag_after"] is False


def test_cprofs_itt_variable_leaves_the_environment_at_any_window(tmp_path):
    """Multiproc audit M4: only a window capturing operators took INTEL_LIBITTNOTIFY64 (set at
    `import cprof`) out of the environment; after a ProfilerContext (record_ops off) every
    subprocess, spawn worker and torchrun inherited cprof's extension as its ITT collector."""
    out = run_py(HELPERS + """
import subprocess, sys
import cprof
import torch
before = os.environ.get("INTEL_LIBITTNOTIFY64")
with cprof.ProfilerContext(activities=["CPU"], output_dir=".", verbose=False):
    torch.ones(2).sum()
child = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('INTEL_LIBITTNOTIFY64'))"],
                       capture_output=True, text=True).stdout.strip()
print(json.dumps({"before": before == cprof._C.__file__,
                  "after": os.environ.get("INTEL_LIBITTNOTIFY64"), "child": child}))
""", tmp_path)
    assert out == {"before": True, "after": None, "child": "None"}


def test_the_programs_own_itt_annotations_are_not_operators(tmp_path):
    """apisurface audit F5: torch.profiler.itt.range / mark (annotations meant for VTune)
    reached cprof's ITT collector and became cpu_op "operators" (a mark a 0.03 µs one), with
    the aten ops inside as their children; torch.profiler records neither. Outside cprof's
    own ITT capture (the observer records the operators) they are ignored."""
    if DEFAULT_MODE != "record_function":
        pytest.skip("cprof._torch_ops is not built here: operators come through ITT, where the "
                    "program's own ITT ranges cannot be told from them")
    out = run_py(HELPERS + """
import warnings
import cprof
import torch
import torch.profiler as tp
warnings.simplefilter("ignore")
got = {}
for lab, P in (("torch", tp.profile), ("cprof", cprof.profile)):
    with P(activities=[tp.ProfilerActivity.CPU]) as p:
        with tp.itt.range("itt_user_range_name"):
            torch.ones(3).sum()
        tp.itt.mark("itt_mark_name")
    got[lab] = [e.name for e in p.events()]
print(json.dumps(got))
""", tmp_path)
    for lab in ("torch", "cprof"):
        assert not any(n.startswith("itt_") for n in out[lab]), (lab, out[lab])
    assert "aten::sum" in out["cprof"] and "aten::ones" in out["cprof"]


def test_itt_capture_refused_under_torch_profiler_leaves_itt_annotations_alone(tmp_path):
    """Review 6: under ITT capture, a cprof window opened inside torch.profiler cannot have
    torch's ITT state; the recording flag was set before trying and stayed on, so the
    program's own itt.mark became an operator row, the symptom of apisurface F5."""
    out = run_py(HELPERS + """
import warnings
import cprof
import torch
import torch.profiler as tp
warnings.simplefilter("ignore")
with tp.profile(activities=[tp.ProfilerActivity.CPU]):
    with cprof.profile(activities=["CPU"]) as p:
        tp.itt.mark("itt_mark_in_cprof_under_torch")
        torch.ones(2).add(1)
names = [e.name for e in p.events()]
with cprof.profile(activities=["CPU"]) as p2:  # and ITT capture still works afterwards
    torch.ones(2).add(1)
print(json.dumps({"names": names, "after": [e.name for e in p2.events()]}))
""", tmp_path, env={"CPROF_OPS_CAPTURE": "itt"})
    assert not any(n.startswith("itt_") for n in out["names"]), out
    assert "aten::add" in out["after"], out


def test_schedule_windows_record_the_active_steps_only(tmp_path):
    out = run_py(HELPERS + """
import cprof
import torch
a = torch.ones(3)
traces = []
def ready(p):
    t = load(p, "t%d.json" % len(traces))
    traces.append(t)
sched = cprof.schedule(wait=1, warmup=1, active=2, repeat=2)
with cprof.profile(activities=["CPU"], schedule=sched, on_trace_ready=ready,
                   record_ops=True) as p:
    for i in range(10):
        torch.add(a, i)
        p.step()
res = []
for t in traces:
    ev = X(t)
    adds = [e for e in ev if e["name"] == "aten::add"]
    steps = [e for e in ev if e["name"].startswith("ProfilerStep#")]
    res.append([len(adds), all(any(inside(s, a) for s in steps) for a in adds)])
print(json.dumps(res))
""", tmp_path)
    assert out == [[2, True], [2, True]]


def test_torch_profiler_inside_a_window_runs_and_cprof_resumes(tmp_path):
    out = run_py(HELPERS + """
import cprof
import torch
lin = torch.nn.Linear(8, 8)
x = torch.randn(2, 8)
with cprof.profile(activities=["CPU"], record_ops=True) as p:
    lin(x)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as tp:
        lin(x)
    lin(x)
torch_linear = sum(e.name == "aten::linear" for e in tp.events())
ka = {r.key: r.count for r in p.key_averages()}
# and the other way round: a cprof window inside torch.profiler (ITT cannot start there; the
# observer can)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as tp2:
    with cprof.profile(activities=["CPU"], record_ops=True) as p2:
        lin(x)
t2 = load(p2, "t2.json")
print(json.dumps({"torch": torch_linear, "cprof": ka.get("aten::linear"),
                  "torch2": sum(e.name == "aten::linear" for e in tp2.events()),
                  "cprof2": sum(e["name"] == "aten::linear" for e in X(t2)),
                  "meta2": t2["cprof"].get("ops")}))
""", tmp_path)
    assert out["torch"] == 1 and out["cprof"] == 2
    assert out["torch2"] == 1
    if DEFAULT_MODE == "itt":  # torch's ITT profiler state cannot start under torch.profiler
        assert out["cprof2"] == 0
        assert out["meta2"]["mode"] == "unavailable" and "torch.profiler" in out["meta2"]["reason"]
    else:  # the observer is one more RecordFunction callback: both record the op
        assert out["cprof2"] == 1 and out["meta2"]["mode"] == "record_function"


TORCH_FIRST = HELPERS + """
import torch
import cprof
import warnings
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    for _ in range(2):  # warned once, not per window
        with cprof.profile(activities=["CPU"], record_ops=True) as p:
            with cprof.record_function("r"):
                torch.add(torch.ones(2), 1)
t = load(p, "t.json")
ev = X(t)
r = [e for e in ev if e["name"] == "r"]
print(json.dumps({"names": sorted({e["name"] for e in ev}), "meta": t["cprof"].get("ops"),
                  "nested": all(inside(r[0], e) for e in ev if e["cat"] == "cpu_op"),
                  "warned": [str(x.message) for x in w if "record_ops" in str(x.message)]}))
"""


def test_torch_imported_first_still_gives_ops_through_itt(tmp_path):
    """torch imported before cprof, ITT asked for: ITT found no collector when libtorch loaded,
    so torch's domain pointer is NULL; cprof finds it through libtorch's symbol table and
    attaches late. (The observer, the default where built, has no such constraint.)"""
    probe = run_py("""
import torch, json, subprocess, os, shutil
lib = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
ok = os.path.exists(lib) and shutil.which("nm")
out = subprocess.run(["nm", lib], capture_output=True, text=True).stdout if ok else ""
print(json.dumps({"symtab": "_ZN5torch8profilerL11_itt_domainE" in out}))
""", tmp_path)
    if not probe["symtab"]:
        pytest.skip("this torch build's libtorch_cpu has no symbol table naming its ITT domain")
    out = run_py(TORCH_FIRST, tmp_path, env={"CPROF_OPS_CAPTURE": "itt"})
    assert "aten::add" in out["names"] and "r" in out["names"] and out["nested"]
    assert out["meta"]["mode"] == "itt" and out["warned"] == []


def test_torch_imported_first_without_symbols_gives_no_ops_and_says_why(tmp_path):
    """Where libtorch's symbol table does not name the domain (a stripped build; forced here
    with CPROF_OPS_LATE=0) and the RecordFunction observer is not built (hidden here): no
    operators, one warning, and the metadata says why."""
    hide = "import sys\nsys.modules['cprof._torch_ops'] = None\n"
    out = run_py(hide + TORCH_FIRST, tmp_path, env={"CPROF_OPS_LATE": "0"})
    assert out["names"] == ["r"]
    assert len(out["warned"]) == 1 and "import cprof first" in out["warned"][0]
    assert out["meta"]["mode"] == "unavailable"
    assert "import cprof first" in out["meta"]["reason"]


def test_torch_imported_first_without_symbols_records_ops_through_the_observer(tmp_path):
    """The same process with cprof._torch_ops built for this torch: ITT cannot attach, and the
    RecordFunction observer records the operators instead, with no warning."""
    try:
        from cprof import _torch_ops  # noqa: F401
    except ImportError as err:
        pytest.skip(f"cprof._torch_ops is not built: {err}")
    out = run_py(TORCH_FIRST, tmp_path, env={"CPROF_OPS_LATE": "0"})
    assert "aten::add" in out["names"] and out["nested"]
    assert out["warned"] == []
    assert out["meta"]["mode"] == "record_function" and out["meta"]["shapes"] is False


def test_record_ops_defaults(tmp_path):
    """cprof.profile records torch's operators by default, as torch.profiler does (a drop-in:
    seed 001's tables are of operators), with with_modules too (torch.profiler's with_modules
    has them; the trace links kernels to the innermost module); ProfilerContext keeps them
    opt-in (its overhead target)."""
    out = run_py(HELPERS + """
import cprof
import torch
with cprof.profile(activities=["CPU"], record_ops=False) as p:
    torch.add(torch.ones(2), 1)
t = load(p, "t.json")
with cprof.profile(activities=["CPU"]) as p0:  # the default
    torch.add(torch.ones(2), 1)
t0 = load(p0, "t0.json")
with cprof.profile(activities=["CPU"], with_modules=True) as pm:
    torch.add(torch.ones(2), 1)
tm = load(pm, "tm.json")
import gzip
ops = {}
for flag in (False, True):
    with cprof.ProfilerContext(output_dir="out", profile_name="pc", activities=["CPU"],
                               verbose=False, with_stack=False, record_ops=flag) as pc:
        torch.add(torch.ones(2), 1)
    with gzip.open(pc.trace_path, "rt") as f:
        ops[str(flag)] = sorted({e["name"] for e in X(json.load(f)) if e["cat"] == "cpu_op"})
print(json.dumps({"off": [e["name"] for e in X(t)], "off_meta": t["cprof"].get("ops"),
                  "default": [e["name"] for e in X(t0)],
                  "modules": [e["name"] for e in X(tm)], "pc": ops}))
""", tmp_path)
    assert out["off"] == [] and out["off_meta"] is None
    assert "aten::add" in out["default"] and "aten::ones" in out["default"]
    assert "aten::add" in out["modules"]
    assert out["pc"]["False"] == [] and "aten::add" in out["pc"]["True"]


ENV_PROBE = HELPERS + """
import cprof
env = os.environ.get("INTEL_LIBITTNOTIFY64")
import torch
with cprof.profile(activities=["CPU"], record_ops=True) as p:
    torch.add(torch.ones(2), 1)
t = load(p, "t.json")
print(json.dumps({"env": env, "names": [e["name"] for e in X(t)], "meta": t["cprof"]["ops"]}))
"""
OTHER = "/nonexistent/libittnotify_collector.so"


@pytest.mark.parametrize("env,seen,reason", [
    ({"CPROF_OPS": "0"}, None, "CPROF_OPS"),
    ({"INTEL_LIBITTNOTIFY64": OTHER}, OTHER, "another ITT collector"),
], ids=["CPROF_OPS=0", "user-named-collector"])
def test_switched_off_or_left_to_another_collector(tmp_path, env, seen, reason):
    """CPROF_OPS=0: cprof names no collector at import; a collector the user named (VTune) is
    never taken over. Either way, without the RecordFunction observer (hidden here; with it,
    the operators come through it: test_op_shapes.py), no operators, and the metadata says
    why."""
    hide = "import sys\nsys.modules['cprof._torch_ops'] = None\n"
    out = run_py(hide + ENV_PROBE, tmp_path, env=env)
    assert out["env"] == seen and out["names"] == []
    assert out["meta"]["mode"] == "unavailable" and reason in out["meta"]["reason"]


def test_failing_op_keeps_the_operator_stack_balanced(tmp_path):
    out = run_py(HELPERS + """
import cprof
import torch
a, b = torch.ones(2), torch.ones(3)
with cprof.profile(activities=["CPU"], record_ops=True) as p:
    for _ in range(3):
        try:
            torch.add(a, b)
        except RuntimeError:
            pass
    with cprof.record_function("after"):
        torch.mul(a, 2)
t = load(p, "t.json")
ev = X(t)
after = next(e for e in ev if e["name"] == "after")
mul = next(e for e in ev if e["name"] == "aten::mul")
adds = [e for e in ev if e["name"] == "aten::add"]
print(json.dumps({"adds": len(adds), "nested": inside(after, mul),
                  "truncated": t["cprof"]["counts"].get("truncated", 0)}))
""", tmp_path)
    assert out == {"adds": 3, "nested": True, "truncated": 0}


def test_ops_on_threads_without_the_gil_while_windows_open_and_close(tmp_path):
    """Worker threads run matmuls (torch releases the GIL inside) with torch's ITT state of
    their own, so operator pushes race with the main thread's window starts and stops. Every
    window's trace must stay well formed: each operator closed, no negative durations, the
    workers' operators present and named by their Python thread. Under cprof's ITT capture:
    with the observer, ITT calls are the program's own annotations and are not recorded."""
    out = run_py(HELPERS + """
import threading
import cprof
import torch
from torch._C._profiler import ProfilerConfig, ProfilerState, _ExperimentalConfig
torch.set_num_threads(1)
stop = threading.Event()
def worker():
    cfg = ProfilerConfig(ProfilerState.ITT, False, False, False, False, False,
                         _ExperimentalConfig())
    torch._C._autograd._enable_profiler(cfg, set(), set())
    a = torch.randn(64, 64)
    while not stop.is_set():
        torch.mm(a, a).relu_()
    torch._C._autograd._disable_profiler()
ts = [threading.Thread(target=worker, name=f"w{i}") for i in range(2)]
for t in ts:
    t.start()
bad, worker_ops, names = 0, 0, set()
for i in range(30):
    with cprof.profile(activities=["CPU"], record_ops=True) as p:
        for _ in range(200):
            torch.add(torch.ones(2), 1)
    t = load(p, "t.json")
    tnames = {e["tid"]: e["args"]["name"] for e in t["traceEvents"]
              if e.get("ph") == "M" and e.get("name") == "thread_name"}
    for e in X(t):
        if e["dur"] < 0 or e["ts"] < 0:
            bad += 1
        if e["name"] == "aten::mm":
            worker_ops += 1
            names.add(tnames.get(e["tid"]))
stop.set()
for t in ts:
    t.join()
print(json.dumps({"bad": bad, "worker_ops": worker_ops, "names": sorted(map(str, names))}))
""", tmp_path, env={"CPROF_OPS_CAPTURE": "itt"})
    assert out["bad"] == 0
    assert out["worker_ops"] > 0
    assert set(out["names"]) <= {"w0", "w1"}, out["names"]


def test_cprof_run_records_ops_of_a_program_that_imports_torch_itself(tmp_path):
    (tmp_path / "prog.py").write_text(
        "import torch\nlin = torch.nn.Linear(8, 8)\n"
        "for _ in range(3):\n    lin(torch.randn(2, 8)).sum().backward()\nprint('ok')\n")
    e = dict(os.environ)
    e.pop("INTEL_LIBITTNOTIFY64", None)
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-m", "cprof", "run", "-o", "out", "--quiet",
                        "--no-gzip", "--record-ops", "prog.py"], cwd=tmp_path, env=e, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout == "ok\n"
    with open(tmp_path / "out" / "prog.trace.json") as f:
        t = json.load(f)
    names = [ev["name"] for ev in t["traceEvents"] if ev.get("cat") == "cpu_op"]
    assert names.count("aten::addmm") == 3 and names.count("AddmmBackward0") == 3
    assert t["cprof"]["ops"]["mode"] == DEFAULT_MODE


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_kernels_link_to_the_op_that_launched_them_on_gpu(tmp_path):
    """With operators recorded, a kernel's External id is its launching op's (Kineto's
    linking), inside the user range around it; cuBLAS and elementwise kernels alike."""
    out = run_py(HELPERS + """
import cprof
import torch
a = torch.randn(256, 256, device="cuda")
(a @ a).relu()
torch.cuda.synchronize()
with cprof.profile(activities=["CPU", "CUDA"], record_ops=True) as p:
    with cprof.record_function("block"):
        (a @ a).relu()
    torch.cuda.synchronize()
t = load(p, "t.json")
ev = [e for e in t["traceEvents"] if e.get("ph") == "X"]
cpu = {e["args"]["External id"]: e for e in ev
       if e.get("cat") in ("cpu_op", "user_annotation") and "External id" in e.get("args", {})}
block = next(e for e in ev if e["name"] == "block")
ks = [e for e in ev if e.get("cat") == "kernel"]
linked = [cpu.get(k["args"].get("External id")) for k in ks]
print(json.dumps({"n": len(ks), "names": sorted({e["name"] for e in linked if e}),
                  "all_linked": all(linked),
                  "inside": all(inside(block, e) for e in linked if e)}))
""", tmp_path)
    assert out["n"] >= 2 and out["all_linked"] and out["inside"]
    assert all(n.startswith("aten::") for n in out["names"]), out["names"]


PAIRS = """
def pairs(trace):
    ops = [e for e in X(trace) if e["cat"] == "cpu_op"]
    def at(f):  # the op starting at the flow's point: (name, its index among same-name ops)
        c = [e for e in ops if e["tid"] == f["tid"] and abs(e["ts"] - f["ts"]) < 0.0015]
        if not c:
            return None
        e = min(c, key=lambda e: e["dur"])
        same = sorted(o["ts"] for o in ops if o["name"] == e["name"])
        return [e["name"], same.index(e["ts"])]
    ends = {}
    for f in trace["traceEvents"]:
        if f.get("cat") == "fwdbwd":
            ends.setdefault(f["id"], {})[f["ph"]] = f
    got = []
    for v in ends.values():
        assert v["s"]["ts"] < v["f"]["ts"] and v["f"].get("bp") == "e"
        got.append([at(v["s"]), at(v["f"])])
    return sorted(got)
"""

FWDBWD = PAIRS + """
import cprof
import torch
import torch.utils.checkpoint
import warnings
warnings.simplefilter("ignore")

class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2
    @staticmethod
    def backward(ctx, g):
        return g * 2

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)
    def forward(self, x):
        mask = torch.ones(8, 16) * 2  # no grad: no node, same op names
        h = Scale.apply(torch.relu(self.l1(x)) * mask)
        h = torch.utils.checkpoint.checkpoint(lambda t: Scale.apply(t) @ self.l2.weight.T, h,
                                              use_reentrant=True)
        return Scale.apply(h)

x = torch.randn(8, 16)
eager = Net()
compiled = torch.compile(torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU()),
                         backend="aot_eager")
compiled(x).sum().backward()
res = {}
for label, model in (("eager", eager), ("compiled", compiled)):
    for name, P in (("torch", torch.profiler), ("cprof", cprof)):
        kw = CPROF_KW if name == "cprof" else {}
        with P.profile(activities=[P.ProfilerActivity.CPU], **kw) as p:
            for _ in range(2):
                model(x).sum().backward()
        t = load(p, f"{label}_{name}.json")
        got = pairs(t)
        if name == "torch" and not ALL_OPS:  # ITT: cprof links Function classes only
            got = [g for g in got if "::" not in g[0][0]]
        seqs = [[e.name, e.sequence_nr, e.fwd_thread] for e in p.events()
                if e.sequence_nr >= 0]
        base = min((q[1] for q in seqs), default=0)
        res[label + "_" + name + "_seq"] = [[n, q - base, f != 0] for n, q, f in seqs]
        res[label + "_" + name] = got
print(json.dumps(res))
"""


def test_forward_backward_links_match_torch_profiler(tmp_path):
    """Seed 001: a fwd-bwd link joins CompiledFunction to CompiledFunctionBackward. cprof pairs
    an autograd.Function's forward and backward by name (csrc/fwdbwd.c); each link must join
    the same forward call (by its position among same-name calls) to the same node as
    torch.profiler's, with a user Function used several times, reentrant activation
    checkpointing (a first forward without grad, then the recomputation inside the backward
    node) and ops on tensors without grad in the step. Under ITT capture (names only) aten ops
    get no links (by name they would pair wrongly: decision 80); the observer, the default
    where built, links them by sequence number (the test below)."""
    out = run_py(HELPERS + "CPROF_KW = {}\nALL_OPS = False\n" + FWDBWD, tmp_path,
                 env={"CPROF_OPS_CAPTURE": "itt"})
    for label in ("eager", "compiled"):
        assert out[f"{label}_cprof"] == out[f"{label}_torch"], label
        assert out[f"{label}_cprof_seq"] == []  # ITT hands over names only
    names = {(f[0], b[0]) for f, b in out["compiled_cprof"]}
    assert names == {("CompiledFunction", "CompiledFunctionBackward")}
    assert len(out["compiled_cprof"]) == 2
    names = {(f[0], b[0]) for f, b in out["eager_cprof"]}
    assert ("Scale", "ScaleBackward") in names and len(out["eager_cprof"]) >= 6


@pytest.mark.parametrize("how", ["record_shapes", "capture", "default"])
def test_ops_from_the_observer_link_forward_to_backward_by_sequence_number(tmp_path, how):
    """With the RecordFunction observer (the default where built, record_shapes, or
    CPROF_OPS_CAPTURE=record_function)
    every op keeps torch's sequence number and forward thread id, and the fwdbwd links are
    torch.profiler's own, aten ops included: the same forward op (aten::t inside aten::linear,
    not the linear) to the same node, for the same workload as above (decision 95). events()
    gives the same sequence_nr / fwd_thread as torch's, relative to the window's first."""
    pytest.importorskip("cprof._torch_ops")
    kw, env = {"record_shapes": ("{'record_shapes': True}", None),
               "capture": ("{}", {"CPROF_OPS_CAPTURE": "record_function"}),
               "default": ("{}", None)}[how]
    out = run_py(HELPERS + f"CPROF_KW = {kw}\nALL_OPS = True\n" + FWDBWD, tmp_path, env=env)
    for label in ("eager", "compiled"):
        assert out[f"{label}_cprof"] == out[f"{label}_torch"], label
        assert out[f"{label}_cprof_seq"] == out[f"{label}_torch_seq"], label
    names = {(f[0], b[0]) for f, b in out["eager_cprof"]}
    assert {("aten::t", "TBackward0"), ("Scale", "ScaleBackward"),
            ("aten::relu", "ReluBackward0")} <= names, names
    assert ("aten::linear", "AddmmBackward0") not in names
    assert len(out["compiled_cprof"]) >= 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_sequence_number_links_cross_to_autograds_device_thread_on_gpu(tmp_path):
    """On a GPU the backward nodes run on autograd's device thread: with record_shapes each
    still links to the forward op torch.profiler links it to, across the two threads."""
    pytest.importorskip("cprof._torch_ops")
    out = run_py(HELPERS + PAIRS + """
import cprof, torch
m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).cuda()
x = torch.randn(16, 64, device="cuda")
m(x).sum().backward()
res = {}
for name, P in (("torch", torch.profiler), ("cprof", cprof)):
    with P.profile(activities=[P.ProfilerActivity.CPU, P.ProfilerActivity.CUDA],
                   record_shapes=True) as p:
        for _ in range(2):
            m(x).sum().backward()
        torch.cuda.synchronize()
    t = load(p, name + ".json")
    res[name] = pairs(t)
    ends = {}
    for f in t["traceEvents"]:
        if f.get("cat") == "fwdbwd":
            ends.setdefault(f["id"], set()).add(f["tid"])
    res[name + "_cross"] = sum(len(v) == 2 for v in ends.values())
print(json.dumps(res))
""", tmp_path)
    assert out["cprof"] == out["torch"] and len(out["cprof"]) >= 10
    assert out["cprof_cross"] == out["torch_cross"] and out["cprof_cross"] > 0


@pytest.mark.parametrize("mode", ["record_function", "itt"])
@pytest.mark.parametrize("memory", [False, True])
def test_record_function_fast_ranges_are_recorded(tmp_path, mode, memory):
    """torch's _RecordFunctionFast (Inductor's triton_ launch ranges, "## Call CompiledFxGraph
    ##", Dynamo's "Pregraph bytecode") records only while the thread's profiler-state slot
    holds a profiler state: cprof's holds one for the window, which torch reads as a profiler
    state (with profile_memory it read garbage before and threw std::bad_array_new_length).
    torch.profiler inside the window still works, and torch's "profiler enabled" stays off."""
    if mode == "record_function" and not _observer_built():
        pytest.skip("cprof._torch_ops is not built")
    out = run_py(HELPERS + f"""
import cprof
import torch
from torch._C._profiler import _RecordFunctionFast
kw = {{"profile_memory": True}} if {memory!r} else {{}}
with cprof.profile(activities=["CPU"], **kw) as p:
    enabled = torch._C._autograd._profiler_enabled()
    with _RecordFunctionFast("fast_range"):
        torch.relu(torch.ones(2))
    with _RecordFunctionFast("fast_with_args", (torch.ones(3),), {{"scope": "user_scope"}}):
        pass
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as q:
        with _RecordFunctionFast("inner_fast"):
            torch.relu(torch.ones(2))
    with _RecordFunctionFast("after_inner"):
        pass
t = load(p, "t.json")
ev = X(t)
fast = next(e for e in ev if e["name"] == "fast_range")
relu = [e for e in ev if e["name"] == "aten::relu"]
print(json.dumps({{
    "enabled": enabled, "mode": t["cprof"]["ops"]["mode"],
    "names": sorted({{e["name"] for e in ev if "fast" in e["name"] or e["name"] == "after_inner"}}),
    "cat": fast["cat"], "relu_inside": any(inside(fast, r) for r in relu),
    "torch_inner": [e.name for e in q.events()].count("inner_fast"),
    "after": torch._C._autograd._profiler_enabled(),
    "outside": [e.name for e in p.events()].count("fast_range"),
}}))
with _RecordFunctionFast("after_window"):  # no state left behind: nothing records, no error
    pass
""", tmp_path, env={"CPROF_OPS_CAPTURE": mode})
    assert out["mode"] == mode
    assert out["names"] == ["after_inner", "fast_range", "fast_with_args"]
    assert out["cat"] == "cpu_op" and out["relu_inside"] and out["outside"] == 1
    assert out["torch_inner"] == 1  # torch's own profiler, inside, got its range
    if mode == "record_function":
        assert out["enabled"] is False
    assert out["after"] is False


def test_cprofs_state_never_blocks_torchs_profilers(tmp_path):
    """cprof's state in torch's PROFILER_STATE slot is taken out for torch's profilers (the
    legacy one too) and never left behind: not by a window stopped from another thread, nor by
    one stopped inside a backward hook (the engine puts back the thread state it saved), nor
    by a bad CPROF_MEMORY_INTERVAL_US; profile_memory still works afterwards."""
    if not _observer_built():
        pytest.skip("cprof._torch_ops is not built")
    out = run_py(HELPERS + """
import threading, warnings
import cprof
import torch
from torch.autograd import profiler_legacy
warnings.simplefilter("ignore")
from cprof import _ops
x = torch.ones(4, 4)
res = {}

def legacy_ok():
    with profiler_legacy.profile() as lp:
        x @ x
    return any(e.name == "aten::mm" for e in lp.function_events)

for kw in ({}, {"profile_memory": True}):
    with cprof.profile(activities=["CPU"], **kw) as p:
        res.setdefault("inside", []).append(legacy_ok())
        x @ x
    res.setdefault("outer_ops", []).append(
        sum(e.name == "aten::mm" for e in p.events()))
# stopped inside a backward hook
w = torch.ones(3, requires_grad=True)
p = cprof.profile(activities=["CPU"])
w.register_hook(lambda g: p.stop() or g)
p.start()
(w * 2).sum().backward()
res["after_hook"] = legacy_ok()
# started on a thread that ends, stopped here
p = cprof.profile(activities=["CPU"])
t = threading.Thread(target=p.start)
t.start(); t.join()
p.stop()
with cprof.profile(activities=["CPU"], profile_memory=True) as m:
    torch.ones(1000)
res["memory_after_thread"] = m._last.notes["memory"]["allocation_events"]
bad = cprof.profile(activities=["CPU"], profile_memory=True)
os.environ["CPROF_MEMORY_INTERVAL_US"] = "bogus"  # after it was made: start() refuses it
try:
    with bad:
        pass
except ValueError:
    res["bad_interval_raised"] = True
del os.environ["CPROF_MEMORY_INTERVAL_US"]
res["slot"] = dict(_ops._slot)
res["legacy_end"] = legacy_ok()
res["enabled"] = torch._C._autograd._profiler_enabled()
print(json.dumps(res))
""", tmp_path)
    assert out["inside"] == [True, True]  # torch's legacy profiler inside a cprof window
    assert out["outer_ops"][0] >= 1
    assert out["after_hook"] and out["legacy_end"] and out["bad_interval_raised"]
    assert out["memory_after_thread"] >= 1
    assert out["slot"] == {"thread": None, "want": 0, "suspended": False}
    assert out["enabled"] is False


def test_evaluate_function_gets_the_nodes_numbers_only_when_the_node_is_next(tmp_path):
    """torch copies a backward node's Sequence number / Fwd thread id onto the engine's
    `autograd::engine::evaluate_function: X` range only when X is the next op on the thread
    (collection.cpp set_autograd_evaluate): a tensor hook (register_hook, retain_grad) that
    runs ops inside the range first leaves it without them. cprof copied whenever X was the
    range's direct child."""
    pytest.importorskip("cprof._torch_ops")
    out = run_py(HELPERS + """
import cprof
import torch
w = torch.randn(3, 3, requires_grad=True)
x = torch.randn(2, 3)
def step():
    h = x @ w
    h.retain_grad()
    y = h.relu() * 2
    y.register_hook(lambda g: g * 3)
    y.sum().backward()
step()
res = {}
for name, P in (("torch", torch.profiler), ("cprof", cprof)):
    with P.profile(activities=[P.ProfilerActivity.CPU]) as p:
        step()
    t = load(p, name + ".json")
    res[name] = sorted([e["name"], "Sequence number" in e["args"], "Fwd thread id" in e["args"]]
                       for e in X(t) if "evaluate_function" in e["name"])
    res[name + "_events"] = sorted([e.name, e.sequence_nr >= 0, e.fwd_thread != 0]
                                   for e in p.events() if "evaluate_function" in e.name)
print(json.dumps(res))
""", tmp_path)
    assert out["cprof"] == out["torch"]
    assert out["cprof_events"] == out["torch_events"]
    flags = {n.split(": ")[1]: s for n, s, _ in out["cprof"]}
    # hooked: MulBackward0 (register_hook on y), MmBackward0 (retain_grad on h); not hooked:
    # SumBackward0, ReluBackward0
    assert flags == {"SumBackward0": True, "MulBackward0": False, "ReluBackward0": True,
                     "MmBackward0": False, "torch::autograd::AccumulateGrad": False}, flags
