"""torch.compile regions in cprof traces: "Torch-Compiled Region: F/C" ranges around runs of the
code Dynamo compiled, "CompiledFunction" / "CompiledFunctionBackward" around AOTAutograd's, so
graph breaks show as seed 001 describes (nested regions) and cprof report finds them.

The first part drives the mechanism (csrc/py_regions.c with cprof/_compiled.py) on plain Python
code objects, so it runs without torch and on every Python (3.11: profile function; 3.12+:
sys.monitoring local events); the second part uses torch.compile."""
import sys
import threading
import time

import pytest

import cprof
from cprof import _C, _compiled
from tests.conftest import load_trace

MONITORING = sys.version_info >= (3, 12)


def _records(snap):
    return [dict(zip(("tid", "name", "cat", "begin", "end", "depth", "trunc"), r))
            for r in snap.records()]


class _Window:
    """A bare window with the regions capture of the given code objects."""

    def __init__(self, codes, with_stack=False):
        self.codes = codes
        self.with_stack = with_stack

    def __enter__(self):
        _C.start()
        self.regions = _compiled._Regions(self.with_stack)
        for code, name in self.codes:
            self.regions.add(code, name)
        return self

    def __exit__(self, *exc):
        self.stats = _C.regions_stats()
        self.regions.remove()
        self.snap = _C.stop()
        self.recs = _records(self.snap)
        self.snap.close()
        return False


def leaf(x):
    return x + 1


def middle(x):
    return leaf(x) * 2


def raiser(x):
    leaf(x)
    raise KeyError(x)


def unregistered(x):
    return leaf(x)


def recursive(n):
    return 0 if n == 0 else recursive(n - 1) + 1


def test_runs_of_registered_code_become_nested_ranges():
    with _Window([(middle.__code__, "R: middle"), (leaf.__code__, "R: leaf")]) as w:
        middle(1)
        unregistered(2)
    names = [(r["name"], r["depth"]) for r in w.recs]
    assert names == [("R: middle", 0), ("R: leaf", 1), ("R: leaf", 0)]
    outer, inner, alone = w.recs
    assert outer["begin"] <= inner["begin"] <= inner["end"] <= outer["end"] <= alone["begin"]
    assert not any(r["trunc"] for r in w.recs)
    assert w.stats["entered"] == w.stats["closed"] == 3


def test_an_exception_closes_the_regions_it_leaves():
    with _Window([(raiser.__code__, "R: raiser"), (leaf.__code__, "R: leaf")]) as w:
        with pytest.raises(KeyError):
            raiser(1)
        with cprof.range("after"):
            pass
    by = {r["name"]: r for r in w.recs}
    assert set(by) == {"R: raiser", "R: leaf", "after"}
    assert by["R: raiser"]["end"] <= by["after"]["begin"]
    assert by["after"]["depth"] == 0  # nothing was left open under it
    assert not any(r["trunc"] for r in w.recs)


def test_recursion_nests_and_unwinds():
    with _Window([(recursive.__code__, "R: rec")]) as w:
        recursive(5)
    assert [r["depth"] for r in w.recs] == [0, 1, 2, 3, 4, 5]
    assert w.stats["closed"] == 6


def test_a_user_range_left_open_in_a_region_closes_with_it():
    def sloppy():
        cprof.push("left open")

    with _Window([(sloppy.__code__, "R: sloppy")]) as w:
        sloppy()
        with cprof.range("next"):
            pass
    by = {r["name"]: r for r in w.recs}
    assert by["left open"]["end"] <= by["R: sloppy"]["end"] <= by["next"]["begin"]
    assert by["next"]["depth"] == 0
    assert w.stats["left_open"] == 1


def test_nothing_is_recorded_after_remove_and_hooks_are_gone():
    with _Window([(leaf.__code__, "R: leaf")]) as w:
        tool = w.regions.tool
        leaf(0)
    assert [r["name"] for r in w.recs] == ["R: leaf"]
    if MONITORING:
        assert tool is not None and sys.monitoring.get_tool(tool) is None
    else:
        assert not _C.regions_stats()["profiling"]
    assert _C.regions_stats()["codes"] == 0
    _C.start()
    leaf(0)
    snap = _C.stop()
    assert snap.records() == []
    snap.close()


def test_threads_running_registered_code_get_their_own_ranges():
    started, go = threading.Event(), threading.Event()

    def worker():
        started.set()
        go.wait(10)
        middle(3)

    t = threading.Thread(target=worker)
    t.start()  # exists before the install: 3.11 sets the profile function on it too
    started.wait(10)
    with _Window([(middle.__code__, "R: middle")]) as w:
        go.set()
        t.join(10)
    (rec,) = w.recs
    assert rec["name"] == "R: middle" and rec["tid"] != threading.get_native_id()


@pytest.mark.skipif(MONITORING, reason="3.10/3.11: the profile hook is shared with with_stack")
def test_with_stack_on_311_leaves_the_profile_hook_to_the_tracer():
    with _Window([(leaf.__code__, "R: leaf")], with_stack=True) as w:
        leaf(0)
    assert w.regions.mode == "with_stack tracer"
    assert not w.stats["profiling"] and w.recs == []  # this bare window runs no tracer



def _crossing(events):
    """Pairs (region, frame) of one thread whose ranges cross instead of nesting."""
    bad = []
    for r in (e for e in events if e["name"].startswith("R: ")):
        for f in events:
            if f["cat"] != "python_function" or f["tid"] != r["tid"]:
                continue
            r0, r1, f0, f1 = r["ts"], r["ts"] + r["dur"], f["ts"], f["ts"] + f["dur"]
            if (r0 < f0 < r1 < f1) or (f0 < r0 < f1 < r1):
                bad.append((r["name"], f["name"], r0, r1, f0, f1))
    return bad


@pytest.mark.skipif(not MONITORING, reason="3.12+: the tracer and the regions are two tools")
def test_regions_enclose_their_frames_with_the_tracer_on_312(tmp_path):
    """On 3.12 the region capture and the with_stack tracer are two sys.monitoring tools, and
    a higher tool id's callback runs first at both the start and the end: each region ended
    20-110 ns before the python_function of the frame it stands for (ProfilerContext's
    defaults, every compiled function). The tracer now closes that frame first."""
    with cprof.ProfilerContext(activities=["CPU"], output_dir=str(tmp_path), profile_name="nest",
                               gzip=False, verbose=False) as ctx:
        regions = _compiled._Regions(with_stack=True)
        regions.add(middle.__code__, "R: middle")
        regions.add(raiser.__code__, "R: raiser")
        try:
            for i in range(5):
                middle(i)
            raiser(1)
        except KeyError:
            pass
        regions.remove()
    evs = [e for e in load_trace(ctx.trace_path)["traceEvents"] if e.get("ph") == "X"]
    assert sum(e["name"] == "R: middle" for e in evs) == 5
    assert sum(e["name"] == "R: raiser" for e in evs) == 1
    frames = [e for e in evs if e["cat"] == "python_function"
              and e["name"].endswith((": middle", ": raiser", ": leaf"))]
    assert len(frames) == 5 * 2 + 2, [e["name"] for e in frames]
    assert _crossing(evs) == []


def recursive_slow(n):
    r = 0 if n == 0 else recursive_slow(n - 1) + 1
    time.sleep(0.002)  # work after the recursive call: inside this frame, after its callee's
    return r


@pytest.mark.skipif(not MONITORING, reason="3.12+: the tracer and the regions are two tools")
def test_regions_below_the_tracer_s_tool_id_leave_its_frames_alone(tmp_path):
    """The tracer closes a region's frame ahead only when the regions' callbacks run first (a
    higher tool id). When another tool left the regions only an id below the tracer's, the
    tracer had closed the frame already and the regions' exit closed its caller instead: each
    frame of a recursive region ended at its callee's end, 2 ms short here."""
    mon = sys.monitoring
    taken = []

    def take(tool):
        if mon.get_tool(tool) is None:
            mon.use_tool_id(tool, "another tool")
            taken.append(tool)

    take(3)  # the tracer takes 4
    try:
        with cprof.ProfilerContext(activities=["CPU"], output_dir=str(tmp_path),
                                   profile_name="low", gzip=False, verbose=False) as ctx:
            mon.free_tool_id(3)
            taken.remove(3)
            take(5)  # the regions are left 3, below the tracer
            regions = _compiled._Regions(with_stack=True)
            regions.add(recursive_slow.__code__, "R: recursive_slow")
            tool = regions.tool
            recursive_slow(3)
            regions.remove()
    finally:
        for t in taken:
            mon.free_tool_id(t)
    assert tool == 3
    evs = sorted((e for e in load_trace(ctx.trace_path)["traceEvents"] if e.get("ph") == "X"),
                 key=lambda e: e["ts"])
    regs = [e for e in evs if e["name"] == "R: recursive_slow"]
    frames = [e for e in evs if e["cat"] == "python_function"
              and e["name"].endswith(": recursive_slow")]
    assert len(regs) == len(frames) == 4, [e["name"] for e in evs]
    for r, f in zip(regs, frames):  # outermost first: each frame lasts as long as its region
        assert f["dur"] >= r["dur"] - 500, (r, f)


def test_cprofile_runs_inside_a_with_stack_window(tmp_path):
    """3.12's cProfile needs sys.monitoring.PROFILER_ID: the tracer took it first, and a
    program using cProfile inside a window raised ValueError. It takes 3-5 first now."""
    import cProfile
    with cprof.ProfilerContext(activities=["CPU"], output_dir=str(tmp_path), profile_name="cp",
                               gzip=False, verbose=False):
        pr = cProfile.Profile()
        pr.enable()
        middle(1)
        pr.disable()
    assert any(getattr(c.code, "co_name", None) == "middle" for c in pr.getstats())


# ---- torch.compile ----

def _torch():
    torch = pytest.importorskip("torch")
    try:
        import torch._dynamo  # noqa: F401
    except Exception as err:  # pragma: no cover - a torch without Dynamo
        pytest.skip(f"torch._dynamo unavailable: {err}")
    return torch


def _broken_fn(x):
    """One graph break: two compiled frames, the second's region nested in the first's."""
    x = x.sin()
    sys.modules["torch"]._dynamo.graph_break()
    return x.cos()


def _compiled_break(fresh):
    """torch.compile(_broken_fn) and an input; fresh: Dynamo's caches emptied first, so the
    first call compiles (inside the window when it is made there)."""
    torch = _torch()
    if fresh:
        torch._dynamo.reset()
    return torch.compile(_broken_fn, backend="eager"), torch.randn(8)


def _compiled_names(p):
    return [(e.name, e.depth) for e in p.events()
            if e.name.startswith(("Torch-Compiled Region", "CompiledFunction"))]


@pytest.mark.parametrize("warm", [True, False], ids=["compiled-before", "compiled-inside"])
def test_graph_break_shows_as_nested_regions(warm, tmp_path):
    cf, x = _compiled_break(fresh=not warm)
    if warm:
        cf(x)
    with cprof.profile(activities=[cprof.ProfilerActivity.CPU], record_ops=False) as p:
        cf(x)
    regions = [(n, d) for n, d in _compiled_names(p)]
    assert len(regions) == 2, regions
    (outer, d0), (inner, d1) = regions
    assert outer.startswith("Torch-Compiled Region: ") and inner.startswith(
        "Torch-Compiled Region: ")
    assert outer != inner and d1 == d0 + 1
    evs = {e.name: e for e in p.events()}
    assert evs[outer].start_us <= evs[inner].start_us <= evs[inner].end_us <= evs[outer].end_us
    # cprof report reads the break from the cprof trace
    out = tmp_path / "t.json"
    p.export_chrome_trace(str(out))
    import json
    import subprocess
    r = subprocess.run([sys.executable, "-m", "cprof", "report", str(out), "--format", "json"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["compiled"]["regions"] == 2 and rep["compiled"]["nested"] == 1
    assert "graph_breaks" in {d["id"] for d in rep["diagnoses"]}


def test_separate_compiled_functions_are_adjacent_not_nested():
    torch = _torch()
    ca = torch.compile(lambda x: x.sin() + 1, backend="eager")
    cb = torch.compile(lambda x: x.cos() * 2, backend="eager")
    x = torch.randn(8)
    ca(x), cb(x)
    with cprof.profile(activities=[cprof.ProfilerActivity.CPU], record_ops=False) as p:
        ca(x)
        cb(x)
    regions = _compiled_names(p)
    assert len(regions) == 2 and {d for _, d in regions} == {0}
    found = _diagnoses(p)
    assert "cpu_only" in found and "graph_breaks" not in found


def _diagnoses(p):
    import os
    import tempfile
    from cprof._cli_report import analyse
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.json")
        p.export_chrome_trace(path)
        return {x["id"] for x in analyse(path)[0]["diagnoses"]}


def test_compiled_function_forward_and_backward_with_autograd():
    torch = _torch()
    lin = torch.nn.Linear(8, 8)

    def f(x):
        x = lin(x).sin()
        torch._dynamo.graph_break()
        return x.cos().sum()

    cf = torch.compile(f, backend="aot_eager")
    x = torch.randn(4, 8, requires_grad=True)
    cf(x).backward()
    with cprof.profile(activities=[cprof.ProfilerActivity.CPU], record_ops=False) as p:
        cf(x).backward()
    names = [n for n, _ in _compiled_names(p)]
    # the break splits the graph in two: two CompiledFunction, two backward halves
    assert names.count("CompiledFunction") == 2
    assert names.count("CompiledFunctionBackward") == 2
    assert sum(n.startswith("Torch-Compiled Region") for n in names) == 2
    t = load_trace_of(p)
    assert any(e.get("name") == "CompiledFunction" and e.get("cat") == "user_annotation"
               for e in t["traceEvents"])


def load_trace_of(p):
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.json")
        p.export_chrome_trace(path)
        return load_trace(path)


def test_regions_follow_schedule_windows_and_leave_no_hooks():
    torch = _torch()
    cf = torch.compile(lambda x: x.relu() - 1, backend="eager")
    x = torch.randn(8)
    seen = []
    sched = cprof.schedule(wait=1, warmup=1, active=2, repeat=2)
    with cprof.profile(activities=[cprof.ProfilerActivity.CPU], record_ops=False, schedule=sched,
                       on_trace_ready=lambda prof: seen.append(
                           sum(1 for e in prof.events()
                               if e.name.startswith("Torch-Compiled Region")))) as p:
        for _ in range(8):
            cf(x)
            p.step()
    assert seen == [2, 2]
    assert _C.regions_stats()["codes"] == 0
    assert _compiled._active is None
    if MONITORING:
        assert all(sys.monitoring.get_tool(t) != "cprof-compiled-regions" for t in range(6))
    else:
        assert not _C.regions_stats()["profiling"]


def test_nothing_is_hooked_while_nothing_compiled_runs():
    """A fresh process with torch imported and nothing compiled: no profile function, no tool
    id while the window is open; compiling inside the window then starts the capture."""
    _torch()
    import subprocess
    code = r"""
import sys, torch, cprof
def hooked():
    if sys.version_info >= (3, 12):
        return any(sys.monitoring.get_tool(t) == "cprof-compiled-regions" for t in range(6))
    return bool(cprof._C.regions_stats()["profiling"])  # a C function: getprofile() is None
with cprof.profile(activities=[cprof.ProfilerActivity.CPU], record_ops=False) as p:
    before = hooked()
    cf = torch.compile(lambda x: x.exp(), backend="eager")
    cf(torch.randn(3))
    cf(torch.randn(3))
    after = hooked()
print(before, after, sum(e.name.startswith("Torch-Compiled Region") for e in p.events()))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["False", "True", "2"]


def test_trace_metadata_says_how_regions_were_captured():
    torch = _torch()
    cf = torch.compile(lambda x: x.tanh(), backend="eager")
    x = torch.randn(4)
    cf(x)
    with cprof.profile(activities=[cprof.ProfilerActivity.CPU], record_ops=False) as p:
        cf(x)
    meta = load_trace_of(p)["cprof"]["compiled_regions"]
    assert meta["mode"] == ("sys.monitoring" if MONITORING else "setprofile")
    assert meta["regions"] == 1 and meta["codes"] >= 1


@pytest.mark.parametrize("modules", [False, True], ids=["stack", "stack+modules"])
def test_with_stack_regions_are_recorded_once(modules):
    """with_stack (ProfilerContext's default): on 3.11 the tracer names a region's frame as the
    region, on 3.12+ sys.monitoring does and the tracer keeps its python_function range; either
    way each region appears once, as a user_annotation, nested as without the tracer."""
    cf, x = _compiled_break(fresh=False)
    cf(x)
    with cprof.profile(activities=[cprof.ProfilerActivity.CPU], record_ops=False, with_stack=True,
                       with_modules=modules) as p:
        cf(x)
    regions = [e for e in p.events() if e.name.startswith("Torch-Compiled Region")]
    assert len(regions) == 2, [(e.name, e.category) for e in regions]
    assert {e.category for e in regions} == {"user_annotation"}
    outer, inner = sorted(regions, key=lambda e: e.start_us)
    assert outer.start_us <= inner.start_us <= inner.end_us <= outer.end_us
    meta = load_trace_of(p)["cprof"]["compiled_regions"]
    assert meta["mode"] == ("sys.monitoring" if MONITORING else "with_stack tracer")
    # the frames' Python ranges are still there around them (3.12) or are the regions (3.11)
    names = [e.name for e in p.events() if e.category == "python_function"]
    assert any(n.endswith(": _broken_fn") for n in names) == MONITORING


def test_env_switch_turns_the_capture_off(monkeypatch):
    torch = _torch()
    cf = torch.compile(lambda x: x.sigmoid(), backend="eager")
    x = torch.randn(4)
    cf(x)
    monkeypatch.setenv("CPROF_COMPILED_REGIONS", "0")
    with cprof.profile(activities=[cprof.ProfilerActivity.CPU], record_ops=False) as p:
        cf(x)
    assert not [e for e in p.events() if e.name.startswith("Torch-Compiled Region")]
    # the trace says the capture was off (one without regions looked like one without breaks)
    assert load_trace_of(p)["cprof"]["compiled_regions"] == {
        "mode": "off", "reason": "CPROF_COMPILED_REGIONS=0"}
    monkeypatch.setenv("CPROF_COMPILED_REGIONS", "1")
    with cprof.profile(activities=[cprof.ProfilerActivity.CPU], record_ops=False) as p:
        cf(x)
    assert len([e for e in p.events() if e.name.startswith("Torch-Compiled Region")]) == 1
    with cprof.profile(activities=[cprof.ProfilerActivity.CPU]) as p:  # operators recorded
        cf(x)
    assert load_trace_of(p)["cprof"]["compiled_regions"]["mode"] == "torch operators"
