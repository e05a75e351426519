"""cprof.profile drives torch's Execution Trace observer as torch.profiler.profile does:
execution_trace_observer=, ENABLE_PYTORCH_EXECUTION_TRACE=1, the ProfilerStep nodes, and
observers that are wrong or fail."""
import json
import os

import pytest

import cprof
from tests.conftest import load_trace

torch = pytest.importorskip("torch")
import torch.profiler as tp  # noqa: E402


class Calls:
    """An _ITraceObserver that logs its calls, with the step they came at."""

    def __init__(self):
        self.log = []
        self.step = None

    def start(self):
        self.log.append(("start", self.step))

    def stop(self):
        self.log.append(("stop", self.step))

    def cleanup(self):
        self.log.append(("cleanup", self.step))


def drive(make, sched, steps, observer):
    with make(activities=[tp.ProfilerActivity.CPU], schedule=sched,
              execution_trace_observer=observer) as p:
        for i in range(steps):
            observer.step = i
            p.step()
        observer.step = "exit"
    return observer.log


@pytest.mark.parametrize("args,steps", [
    ((1, 1, 2, 2, 0), 9), ((0, 0, 1, 3, 0), 3), ((2, 1, 1, 0, 1), 11), ((1, 1, 2, 1, 0), 2),
    ((0, 1, 2, 1, 0), 7), ((0, 0, 2, 0, 0), 5)])
def test_observer_calls_match_torch_profiler(args, steps):
    """start / stop / cleanup at the same steps as torch.profiler.profile makes them, for
    schedules with and without warmup, repeats, skip_first and an exit mid-cycle."""
    w, wu, a, r, sf = args
    ours = drive(cprof.profile, cprof.schedule(wait=w, warmup=wu, active=a, repeat=r,
                                               skip_first=sf), steps, Calls())
    theirs = drive(tp.profile, tp.schedule(wait=w, warmup=wu, active=a, repeat=r,
                                           skip_first=sf), steps, Calls())
    assert ours == theirs
    assert ours[-1] == ("cleanup", "exit")


def et_nodes(path):
    nodes = json.loads(open(path).read())["nodes"]
    by_id = {n["id"]: n for n in nodes}
    return [(n["name"], by_id[n.get("ctrl_deps")]["name"] if n.get("ctrl_deps") in by_id else None,
             [i for i in n["inputs"]["shapes"]] if isinstance(n.get("inputs"), dict) else None)
            for n in nodes]


def workload(p, steps):
    m = torch.nn.Linear(8, 4)
    for _ in range(steps):
        m(torch.ones(3, 8)).relu()
        p.step()


def test_execution_trace_file_matches_torch_profilers(tmp_path):
    """The execution trace written under cprof.profile has torch.profiler's nodes: the same
    operators with the same input shapes under the same ProfilerStep#N parents."""
    out = {}
    for name, make, sched in (("torch", tp.profile, tp.schedule),
                              ("cprof", cprof.profile, cprof.schedule)):
        path = str(tmp_path / f"{name}.et.json")
        et = tp.ExecutionTraceObserver().register_callback(path)
        with make(activities=[tp.ProfilerActivity.CPU], schedule=sched(wait=1, warmup=1,
                                                                       active=2),
                  execution_trace_observer=et) as p:
            workload(p, 4)
        out[name] = et_nodes(path)
    assert out["cprof"] == out["torch"]
    names = [n for n, _, _ in out["cprof"]]
    assert names.count("ProfilerStep#2") == 1 and names.count("ProfilerStep#3") == 1
    assert ("aten::addmm", "aten::linear", [[4], [3, 8], [8, 4], [], []]) in out["cprof"]


def test_cprof_trace_is_unchanged_by_the_observer(tmp_path):
    """The observer's ProfilerStep record functions do not appear in cprof's trace (their
    scope is left out of the operator capture): one ProfilerStep#N per step, cprof's."""
    et = cprof.ExecutionTraceObserver().register_callback(str(tmp_path / "et.json"))
    with cprof.profile(activities=["CPU"], schedule=cprof.schedule(wait=0, warmup=0, active=3, repeat=1),
                       execution_trace_observer=et, record_ops=True) as p:
        workload(p, 3)
    t = load_trace(p.export_chrome_trace(str(tmp_path / "t.json")))
    steps = [e["name"] for e in t["traceEvents"] if e.get("name", "").startswith("ProfilerStep")]
    assert steps == ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"]
    assert any(e.get("name") == "aten::addmm" for e in t["traceEvents"])
    assert not et.is_registered and os.path.getsize(tmp_path / "et.json") > 0


def test_without_schedule_the_observer_covers_the_with_block(tmp_path):
    path = tmp_path / "et.json"
    et = cprof.ExecutionTraceObserver().register_callback(str(path))
    with cprof.profile(activities=["CPU"], execution_trace_observer=et):
        assert et.is_running()
        torch.ones(2, 2).mm(torch.ones(2, 2))
    assert not et.is_running() and not et.is_registered
    assert "aten::mm" in [n for n, _, _ in et_nodes(path)]


def test_env_variable_builds_an_observer(tmp_path, monkeypatch):
    """ENABLE_PYTORCH_EXECUTION_TRACE=1 without an observer: torch's from-env observer (a
    temporary .et.json), as torch.profiler.profile builds one."""
    monkeypatch.setenv("ENABLE_PYTORCH_EXECUTION_TRACE", "1")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    with cprof.profile(activities=["CPU"]) as p:
        torch.ones(2).add(1)
    et = p.execution_trace_observer
    assert isinstance(et, tp.ExecutionTraceObserver)
    assert et.output_file_path.endswith(".et.json")
    assert "aten::add" in [n for n, _, _ in et_nodes(et.output_file_path)]
    os.remove(et.output_file_path)
    monkeypatch.setenv("ENABLE_PYTORCH_EXECUTION_TRACE", "0")
    assert cprof.profile(activities=["CPU"]).execution_trace_observer is None


def test_an_object_that_is_not_an_observer_is_refused():
    class Half:
        def start(self):
            pass

    with pytest.raises(TypeError, match=r"lacks stop\(\), cleanup\(\)"):
        cprof.profile(activities=["CPU"], execution_trace_observer=Half())
    with pytest.raises(TypeError, match="register_callback"):
        cprof.profile(activities=["CPU"], execution_trace_observer="et.json")


def test_a_failing_observer_loses_nothing(tmp_path):
    """start() raising: reported after the step's transition, as an on_trace_ready error is;
    cprof's window still records and its trace is written."""
    class Broken(Calls):
        def start(self):
            super().start()
            raise OSError("disk full")

    obs = Broken()
    handler = cprof.tensorboard_trace_handler(str(tmp_path))
    p = cprof.profile(activities=["CPU"], schedule=cprof.schedule(wait=1, warmup=0, active=2),
                      on_trace_ready=handler, execution_trace_observer=obs)
    p.start()
    with pytest.warns(RuntimeWarning, match=r"execution_trace_observer.start\(\) raised"), \
            pytest.raises(OSError, match="disk full") as info:
        p.step()  # step 1: the window opens; the observer's start raises after it did
    assert "cprof's own window and trace are unaffected" in "".join(info.value.__notes__)
    torch.ones(2).add(1)
    p.step()
    p.stop()
    files = os.listdir(tmp_path)
    assert len(files) == 1
    t = load_trace(tmp_path / files[0])
    assert [e["name"] for e in t["traceEvents"] if e.get("name", "").startswith("Profiler")] \
        == ["ProfilerStep#1", "ProfilerStep#2"]
    assert [c for c, _ in obs.log] == ["start", "stop"]


def test_kineto_available_and_the_reexport():
    assert cprof.kineto_available() is True
    assert cprof.ExecutionTraceObserver is tp.ExecutionTraceObserver
    assert set(tp.__all__) <= set(dir(cprof))
