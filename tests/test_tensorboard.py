"""cprof traces in TensorBoard's profiler plugin, and the "nn.Module: " python_function events its
Module view is built from (written with with_stack, as torch.profiler writes them)."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, load_trace
from tb_check import load_with_tb, module_tree, tb_available, timeline_modules

torch = pytest.importorskip("torch")
import cprof  # noqa: E402

needs_tb = pytest.mark.skipif(not tb_available(), reason="torch-tb-profiler not installed "
                              "(scripts/install_tb_profiler.sh)")


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)
        self.act = torch.nn.ReLU()

    def forward(self, x):
        return self.act(self.fc(x))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([Block(), Block()])
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


PATHS = ["Net", "layers.0", "layers.0.fc", "layers.0.act", "layers.1", "layers.1.fc",
         "layers.1.act", "head"]


def profile_dir(P, out, **opts):
    """5 steps of Net under P.profile (cprof or torch.profiler), a wait 1 / warmup 1 / active 2
    schedule, the trace written by P's tensorboard_trace_handler. Returns the trace's path."""
    torch.manual_seed(0)
    m, x = Net(), torch.randn(4, 16)
    with P.profile(activities=[P.ProfilerActivity.CPU],
                   schedule=P.schedule(wait=1, warmup=1, active=2),
                   on_trace_ready=P.tensorboard_trace_handler(str(out)), **opts) as p:
        for _ in range(5):
            m(x).sum().backward()
            p.step()
    files = [f for f in os.listdir(out) if ".pt.trace.json" in f]
    assert len(files) == 1, files
    return out / files[0]


@pytest.fixture(scope="module")
def stacked(tmp_path_factory):
    path = profile_dir(cprof, tmp_path_factory.mktemp("stacked"), with_stack=True,
                       with_modules=True)
    return path, load_trace(path)


def xs(trace, cat=None):
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and
            (cat is None or e.get("cat") == cat)]


def test_module_calls_get_torch_module_events_with_with_stack(stacked):
    _, trace = stacked
    ranges = [e for e in xs(trace, "user_annotation") if e["name"] in PATHS]
    twins = [e for e in xs(trace, "python_function") if e["name"].startswith("nn.Module: ")]
    assert len(ranges) == 2 * len(PATHS)  # two active steps
    # one twin per module range: same thread, start and duration, named after its path
    key = lambda e: (e["tid"], e["ts"], e["dur"])  # noqa: E731
    assert sorted((key(e), "nn.Module: " + e["name"]) for e in ranges) == \
        sorted((key(e), e["name"]) for e in twins)
    pys = {e["args"]["Python id"]: e for e in xs(trace, "python_function")}
    assert len(pys) == len(xs(trace, "python_function"))  # Python ids stay unique
    for t in twins:
        a = t["args"]
        assert "External id" not in a and isinstance(a["Python module id"], int)
    # the same module has the same module id in both steps; different modules differ
    ids = {}
    for t in twins:
        ids.setdefault(t["name"], set()).add(t["args"]["Python module id"])
    assert all(len(v) == 1 for v in ids.values())
    assert len({next(iter(v)) for v in ids.values()}) == len(PATHS)

    def module_parent(e):
        """The nearest enclosing twin through the Python parent id chain."""
        p = pys.get(e["args"]["Python parent id"])
        while p is not None and not p["name"].startswith("nn.Module: "):
            p = pys.get(p["args"]["Python parent id"])
        return p and p["name"][len("nn.Module: "):]
    parents = {t["name"][len("nn.Module: "):]: module_parent(t) for t in twins}
    assert parents == {"Net": None, "layers.0": "Net", "layers.1": "Net", "head": "Net",
                       "layers.0.fc": "layers.0", "layers.0.act": "layers.0",
                       "layers.1.fc": "layers.1", "layers.1.act": "layers.1"}
    # Python functions run by a module call have its twin up their parent chain
    fwd = [e for e in xs(trace, "python_function") if e["name"].endswith(": forward")]
    assert fwd and all(module_parent(e) is not None for e in fwd)


def test_no_module_events_without_with_stack(tmp_path):
    trace = load_trace(profile_dir(cprof, tmp_path, with_modules=True))
    assert {e["name"] for e in xs(trace, "user_annotation")} >= set(PATHS)
    assert not [e for e in xs(trace) if e["name"].startswith("nn.Module: ")]


@pytest.fixture(scope="module")
def stack_only(tmp_path_factory):
    path = profile_dir(cprof, tmp_path_factory.mktemp("stack_only"), with_stack=True)
    return path, load_trace(path)


def test_with_stack_alone_writes_module_calls_as_torch_does(stack_only):
    """torch.profiler(with_stack=True) writes each module call as a python_function
    "nn.Module: Class_N"; cprof writes its "nn.Module: <path>" event, and no user_annotation
    range by path (that is with_modules' or record_shapes')."""
    _, trace = stack_only
    twins = [e for e in xs(trace, "python_function") if e["name"].startswith("nn.Module: ")]
    assert sorted({e["name"] for e in twins}) == sorted("nn.Module: " + p for p in PATHS)
    assert len(twins) == 2 * len(PATHS)  # two active steps
    assert all(isinstance(e["args"]["Python module id"], int) for e in twins)
    assert not [e for e in xs(trace, "user_annotation") if e["name"] in PATHS]
    assert "modules" not in trace["cprof"]  # nothing for cprof report to take as twins
    pys = [e["args"]["Python id"] for e in xs(trace, "python_function")]
    assert len(set(pys)) == len(pys)


def test_with_stack_alone_module_events_in_results_and_report(stack_only, tmp_path):
    with cprof.profile(activities=["CPU"], with_stack=True) as p:
        Net()(torch.randn(2, 16))
    mods = [e for e in p.events() if e.name.startswith("nn.Module: ")]
    assert sorted(e.name for e in mods) == sorted("nn.Module: " + x for x in PATHS)
    assert all(e.category == "python_function" for e in mods)
    path, _ = stack_only
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "cprof", "report", str(path), "--format", "json"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(r.stdout)["modules"]  # named as torch's module events are
    assert sorted(row["name"] for row in rows) == sorted("nn.Module: " + x for x in PATHS)
    assert all(row["calls"] == 2 for row in rows)


@needs_tb
def test_tensorboard_module_view_with_stack_alone(stack_only):
    path, _ = stack_only
    prof, _, _ = load_with_tb(path)
    assert "module" in [v.name for v in prof.views]
    assert module_tree(prof.module_stats) == [
        ("Net", 2, [("layers.0", 2, [("layers.0.fc", 2, []), ("layers.0.act", 2, [])]),
                    ("layers.1", 2, [("layers.1.fc", 2, []), ("layers.1.act", 2, [])]),
                    ("head", 2, [])])]


def test_with_stack_alone_module_events_follow_cprof_module_events(tmp_path, monkeypatch):
    """CPROF_MODULE_EVENTS=0 turns the nn.Module: events off in the trace and in events()
    alike (with with_stack alone no hook is installed for them)."""
    monkeypatch.setenv("CPROF_MODULE_EVENTS", "0")
    with cprof.profile(activities=["CPU"], with_stack=True) as p:
        Net()(torch.randn(2, 16))
    assert not [e for e in p.events() if e.name.startswith("nn.Module: ")]
    path = p.export_chrome_trace(str(tmp_path / "t.json"))
    assert not [e for e in xs(load_trace(path)) if e["name"].startswith("nn.Module: ")]


def test_module_events_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("CPROF_MODULE_EVENTS", "0")
    trace = load_trace(profile_dir(cprof, tmp_path, with_stack=True, with_modules=True))
    assert {e["name"] for e in xs(trace, "user_annotation")} >= set(PATHS)
    assert xs(trace, "python_function")
    assert not [e for e in xs(trace) if e["name"].startswith("nn.Module: ")]


def test_report_counts_each_module_once(stacked):
    path, _ = stacked
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "cprof", "report", str(path), "--format", "json"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(r.stdout)["modules"]
    assert sorted(row["name"] for row in rows) == sorted(PATHS)
    assert all(row["calls"] == 2 for row in rows)


@needs_tb
def test_tensorboard_module_view_matches_torch_profilers(stacked, tmp_path):
    path, _ = stacked
    prof, data, _ = load_with_tb(path)
    ref_prof, ref_data, _ = load_with_tb(profile_dir(torch.profiler, tmp_path, with_stack=True,
                                                     with_modules=True))
    assert "module" in [v.name for v in ref_prof.views]
    assert "module" in [v.name for v in prof.views]
    mine, ref = module_tree(prof.module_stats), module_tree(ref_prof.module_stats)

    def shape(tree):
        return [(n, shape(c)) for _, n, c in tree]
    assert shape(mine) == shape(ref)  # same hierarchy, same number of calls per module
    assert mine == [("Net", 2, [("layers.0", 2, [("layers.0.fc", 2, []), ("layers.0.act", 2, [])]),
                                ("layers.1", 2, [("layers.1.fc", 2, []), ("layers.1.act", 2, [])]),
                                ("head", 2, [])])]
    by_name = {s.name: s for s in prof.module_stats}
    ref_net = next(s for s in ref_prof.module_stats if s.name.startswith("Net"))
    assert by_name["Net"].host_duration > 0
    assert by_name["Net"].operators == ref_net.operators  # C calls are no operators (dec. 124)
    # the view's timeline: one Net per active step, its children in call order
    step = ("Net", [("layers.0", [("layers.0.fc", []), ("layers.0.act", [])]),
                    ("layers.1", [("layers.1.fc", []), ("layers.1.act", [])]), ("head", [])])
    assert timeline_modules(data) == [step, step]
    assert [len(c) for _, c in timeline_modules(ref_data)] == [3, 3]
    assert data.steps_names == ref_data.steps_names == ["2", "3"]


@needs_tb
def test_tensorboard_overview_and_operator_views(stacked):
    path, trace = stacked
    prof, data, log = load_with_tb(path)
    views = [v.name for v in prof.views]
    assert views[:2] == ["overall", "operator"] and "trace" in views
    perf = prof.overview["performance"][0]
    assert perf["name"] == "Average Step Time" and perf["value"] > 0
    steps = [e for e in xs(trace, "user_annotation") if e["name"].startswith("ProfilerStep#")]
    assert len(steps) == 2
    ops = {r["name"]: r for r in prof.operation_table_by_name["data"]}
    linears = [e for e in xs(trace, "cpu_op") if e["name"] == "aten::linear"]
    assert ops["aten::linear"]["calls"] == len(linears) == 6
    # torch's operators are captured, so C calls are python_function as torch writes them:
    # no builtins.isinstance or torch._C._nn.linear rows in the Operator view (decision 124)
    assert not [n for n in ops if n.startswith(("builtins.", "torch._C.", "list."))], list(ops)
    assert [e for e in xs(trace, "python_function") if e["name"] == "torch._C._nn.linear"]
    assert not [ln for ln in log if "intersect" in ln]  # ranges nest on every thread


@needs_tb
def test_tensorboard_kernel_view_of_a_gpu_trace(tmp_path, fake_so):
    from test_gpu_fake import run
    res = run("stack_spans", tmp_path, fake_so)
    trace = load_trace(res["trace"])
    prof, data, log = load_with_tb(res["trace"])
    assert "kernel" in [v.name for v in prof.views]
    kernels = xs(trace, "kernel")
    rows = prof.kernel_table["data"]["rows"]
    cols = [c["name"] for c in prof.kernel_table["data"]["columns"]]
    calls = {r[cols.index("Name")]: r[cols.index("Calls")] for r in rows}
    assert sum(calls.values()) == len(kernels)
    summary = {d["title"]: d["value"] for d in prof.gpu_summary}
    assert summary["Name"] == trace["deviceProperties"][0]["name"]
    assert "Est. Achieved Occupancy" in summary and "Est. SM Efficiency" in summary
    assert not [ln for ln in log if "intersect" in ln]


@needs_tb
def test_tensorboard_operator_view_by_input_shape_matches_torch_profilers(tmp_path):
    """record_shapes: TensorBoard's operator view grouped by input shape is torch.profiler's
    (the operators' shapes come from cprof._torch_ops, decision 92)."""
    try:
        from cprof import _torch_ops  # noqa: F401
    except ImportError as err:
        pytest.skip(f"cprof._torch_ops is not built: {err}")
    rows = {}
    for P, name in ((cprof, "cprof"), (torch.profiler, "torch")):
        (tmp_path / name).mkdir()
        prof, _, log = load_with_tb(profile_dir(P, tmp_path / name, record_shapes=True))
        assert not log
        rows[name] = sorted((r["name"], r["input_shape"], r["calls"])
                            for r in prof.operation_table_by_name_input["data"]
                            if r["name"] in ("aten::addmm", "aten::linear", "aten::relu",
                                             "aten::t", "aten::sum"))
    assert ("aten::addmm", "[[16], [4, 16], [16, 16], [], []]", 4) in rows["cprof"]
    assert rows["cprof"] == rows["torch"]
