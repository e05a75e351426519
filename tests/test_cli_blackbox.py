"""Black-box tests of the `cprof` command line, written from seed 001 (torch.compile under a
profiler), issue 6 (cprof run / report / merge) and issue 5's torch.compile part alone, each
through a subprocess as a user runs it. Only those the rest of the suite lacked are kept
(tests/test_cli_run.py, test_cli_report.py, test_compiled_regions.py and
acceptance/test_accept_cli.py cover the others)."""
import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("CPROF_PROFILER_DIR", None)
    env.pop("CPROF_TORCH_PROFILER_DIR", None)
    env.update(extra)
    return env


def cprof(*args, cwd=None, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "cprof", *map(str, args)],
                          cwd=cwd, env=env or _env(), capture_output=True, text=True,
                          timeout=timeout)


def load_trace(path):
    path = Path(path)
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        raw = gzip.decompress(raw)
    return json.loads(raw)


def traces_in(d):
    return sorted(p for p in Path(d).iterdir() if ".json" in p.name)


# ---------------------------------------------------------------------------------------------
# synthetic Kineto traces (TRACE_FORMAT.md): GPU timelines made by hand, numbers known
# ---------------------------------------------------------------------------------------------
PID, TID = 4101, 4101


def _meta(rank=0):
    return {"schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "Fake GPU", "totalGlobalMem": 1 << 34,
                                  "computeMajor": 9, "computeMinor": 0,
                                  "maxThreadsPerBlock": 1024, "numSms": 132}],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
            "displayTimeUnit": "ms", "baseTimeNanoseconds": 1_700_000_000_000_000_000}


def kernel(name, ts, dur, corr, stream=7, dev=0):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": dev, "tid": stream, "ts": ts,
            "dur": dur, "args": {"device": dev, "context": 1, "stream": stream,
                                 "correlation": corr, "External id": corr,
                                 "grid": [1, 1, 1], "block": [128, 1, 1]}}


def launch(ts, dur, corr, name="cudaLaunchKernel", cat="cuda_runtime"):
    return {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID, "ts": ts,
            "dur": dur, "args": {"cbid": 211, "correlation": corr, "External id": corr}}


def cpu(name, ts, dur, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": dur,
            "args": {}}


def write_trace(path, events, rank=0, **top):
    doc = _meta(rank)
    doc.update(top)
    doc["traceEvents"] = events
    path = Path(path)
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def report_json(*paths, extra=()):
    r = cprof("report", *paths, "--format", "json", *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def diagnosis_ids(rep):
    return {d["id"] for d in rep["diagnoses"]}


def _script(tmp_path, body, name="prog.py"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


def _assert_clean_failure(r, must_name):
    assert r.returncode not in (0, -11, -6), (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    assert must_name in r.stderr


# ---------------------------------------------------------------------------------------------
# cprof run: the program unchanged
# ---------------------------------------------------------------------------------------------
def test_run_passes_option_like_arguments_and_double_dash_to_the_program(tmp_path):
    """Everything after the script is the program's, '--' and cprof's own option names too."""
    s = _script(tmp_path, "import sys, json; print(json.dumps(sys.argv))\n")
    r = cprof("run", "-o", tmp_path / "out", s, "a b", "--name", "x", "-o", "y", "--", "-m")
    assert r.returncode == 0, r.stderr
    argv = json.loads(r.stdout.strip().splitlines()[-1])
    assert argv[1:] == ["a b", "--name", "x", "-o", "y", "--", "-m"]
    assert Path(argv[0]).name == "prog.py"
    assert [p.name for p in traces_in(tmp_path / "out")] == ["prog.trace.json.gz"]


def test_program_with_its_own_torch_profiler_runs_unchanged_under_cprof_run(tmp_path):
    """Seed 001's program as written (a warm-up, then torch.profiler.profile around the steps,
    export_chrome_trace) profiled without changing it: its own trace is still exported, with
    its compiled regions, and cprof run writes its trace too."""
    pytest.importorskip("torch")
    s = _script(tmp_path, """
        import torch
        model_c = torch.compile(torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU()),
                                backend="eager")
        inputs = [torch.randn(4, 16) for _ in range(4)]
        model_c(inputs[0]).sum()  # warm up
        with torch.profiler.profile() as prof:
            for i in range(1, 4):
                model_c(inputs[i]).sum()
                prof.step()
        prof.export_chrome_trace("trace.json")
        print("exported")
    """)
    r = cprof("run", "-o", tmp_path / "out", s, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "exported\n"
    own = load_trace(tmp_path / "trace.json")
    assert len(_compiled_regions(own)) == 3  # torch.profiler saw the three compiled calls
    (t,) = traces_in(tmp_path / "out")
    assert len(_compiled_regions(load_trace(t))) == 4  # cprof run's window: warm-up included


# ---------------------------------------------------------------------------------------------
# torch.compile under cprof run (seed 001)
# ---------------------------------------------------------------------------------------------
GRAPH_BREAK_PROGRAM = """
import torch
import torch._dynamo

class ModelWithBreaks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        def create_sequential():
            return torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(),
                                       torch.nn.Linear(32, 32), torch.nn.ReLU())
        self.mod1 = create_sequential()
        self.mod2 = create_sequential()
        self.mod3 = create_sequential()

    def forward(self, inp):
        mod1 = self.mod1(inp)
        torch._dynamo.graph_break()
        mod2 = self.mod2(mod1)
        torch._dynamo.graph_break()
        return self.mod3(mod2)

model_c = torch.compile(ModelWithBreaks(), backend="aot_eager")
inputs = [torch.randn((32, 32)) for _ in range(4)]

def fwd_bwd(inp):
    out = model_c(inp)
    out.sum().backward()

fwd_bwd(inputs[0])  # warm up
"""


def _compiled_regions(doc):
    return [e for e in doc["traceEvents"]
            if e.get("ph") == "X" and e.get("name", "").startswith("Torch-Compiled Region")]


def _nested(evs):
    """True when one event lies inside another of the same thread."""
    evs = sorted(evs, key=lambda e: (e["ts"], -e["dur"]))
    for i, a in enumerate(evs):
        for b in evs[i + 1:]:
            if b["ts"] >= a["ts"] + a["dur"]:
                break
            if (a["pid"], a["tid"]) == (b["pid"], b["tid"]) and \
                    b["ts"] + b["dur"] <= a["ts"] + a["dur"]:
                return True
    return False


def test_run_graph_breaks_split_compiled_function_with_its_backward(tmp_path):
    """Seed 001: with inputs that require grad, each graph break splits CompiledFunction in
    two, and CompiledFunctionBackward pairs with them; under cprof run (torch imported after
    the window opened) as in a window opened after torch."""
    pytest.importorskip("torch")
    s = _script(tmp_path, GRAPH_BREAK_PROGRAM + "\nfor i in range(1, 4):\n    fwd_bwd(inputs[i])\n")
    r = cprof("run", "-o", tmp_path / "out", "--no-gzip", s)
    assert r.returncode == 0, r.stderr
    (t,) = traces_in(tmp_path / "out")
    doc = load_trace(t)
    names = [e.get("name") for e in doc["traceEvents"] if e.get("ph") == "X"]
    # three graphs a call, four calls (the warm-up is in cprof run's window)
    assert names.count("CompiledFunction") == 12
    assert names.count("CompiledFunctionBackward") == 12
    assert _nested(_compiled_regions(doc))


# ---------------------------------------------------------------------------------------------
# cprof report: diagnoses
# ---------------------------------------------------------------------------------------------
def _sync_loop(n=50):
    """The usual `.item()` loop: launch, wait at once (the wait begins before the kernel
    does and ends after it), 90 µs of host work, next launch."""
    ev, t0 = [], 100.0
    for i in range(n):
        corr = 700 + i
        ev.append(launch(t0, 3.0, corr))
        ev.append(kernel("k_sync", t0 + 5.0, 100.0, corr))
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize",
                   "pid": PID, "tid": TID, "ts": t0 + 4.0, "dur": 101.5,
                   "args": {"cbid": 165, "correlation": 9000 + i}})
        ev.append(cpu("host_work_after_sync", t0 + 106.0, 90.0))
        t0 += 200.0
    return ev


def test_sync_every_step_is_a_sync_stall_and_the_host_work_between_is_host_idle(tmp_path):
    """Issue 6: synchronisation stalls are diagnosed; idle time is split into waiting on the
    host and waiting on syncs (docs/usage.md: the parts of a gap the CPU spent in a wait).
    Each gap here has a wait at both ends (the previous wait's last 0.5 µs, the next one's
    first 1 µs) and 98.5 µs of host work between: the whole gap was 'after syncs' (4.9 ms of
    5 ms idle), and the largest gaps said 'sync' where the GPU waited for host work."""
    rep = report_json(write_trace(tmp_path / "sync.json", _sync_loop()))
    assert "sync_stalls" in diagnosis_ids(rep)
    (dev,) = rep["devices"]
    idle = dev["idle"]
    # 1 µs before the first kernel, 49 gaps of 0.5 + 1 µs, 0.5 µs after the last
    assert idle["sync_us"] == pytest.approx(75.0)
    assert idle["host_us"] == pytest.approx(49 * 98.5 + 4.0)  # + [100, 104) before the wait
    big = max(rep["gaps"], key=lambda g: g["dur_us"])
    assert big["kind"] == "host" and big["dur_us"] == pytest.approx(98.5)


def test_compiled_regions_overlapping_on_other_threads_or_ranks_are_no_graph_break(tmp_path):
    """Seed 001: a graph break is a region nested in another. Regions that overlap in time
    on another thread (a second thread running compiled code) or on another rank (a merged
    trace) are not nested: no graph-break diagnosis; the same two on one thread are one."""
    outer = cpu("Torch-Compiled Region: 0/0", 100.0, 500.0, cat="user_annotation")
    inner = cpu("Torch-Compiled Region: 1/0", 150.0, 100.0, cat="user_annotation")
    same = write_trace(tmp_path / "same.json", [outer, inner])
    assert "graph_breaks" in diagnosis_ids(report_json(same))
    threads = write_trace(tmp_path / "threads.json", [outer, dict(inner, tid=TID + 1)])
    assert "graph_breaks" not in diagnosis_ids(report_json(threads))
    r0 = write_trace(tmp_path / "r0.json", [outer], rank=0)
    r1 = write_trace(tmp_path / "r1.json", [inner], rank=1)
    merged = tmp_path / "merged.json"
    assert cprof("merge", r0, r1, "-o", merged).returncode == 0
    rep = report_json(merged)
    assert all("graph_breaks" not in {d["id"] for d in r["diagnoses"]} for r in rep["reports"])
    assert "graph_breaks" not in diagnosis_ids(rep)


# ---------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------
def test_report_one_bad_trace_among_good_ones_is_named(tmp_path):
    good = write_trace(tmp_path / "good.json", [launch(0.0, 2.0, 1), kernel("k", 5.0, 5.0, 1)])
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    _assert_clean_failure(cprof("report", good, bad), "bad.json")


def test_merge_missing_input_names_it_and_writes_nothing(tmp_path):
    a = write_trace(tmp_path / "r0.json", [launch(0.0, 2.0, 1), kernel("k", 5.0, 5.0, 1)])
    r = cprof("merge", a, tmp_path / "gone.json", "-o", tmp_path / "m.json")
    _assert_clean_failure(r, "gone.json")
    assert not (tmp_path / "m.json").exists()


# ---------------------------------------------------------------------------------------------
# regressions found writing these tests
# ---------------------------------------------------------------------------------------------
def test_program_with_its_own_cprof_window_runs_unchanged_under_cprof_run(tmp_path):
    """Seed 000 / issue 5 programs open cprof windows themselves (ProfilerContext, the
    drop-in cprof.profile); `cprof run` runs any program unchanged: cprof run's window gives
    way (its trace written), where the program used to die with WindowStateError."""
    s = _script(tmp_path, """
        import os, sys
        import cprof
        out = sys.argv[1]
        x = sum(range(10))
        with cprof.ProfilerContext(profile_name="inner", output_dir=out, verbose=False):
            with cprof.range("inside_program_window"):
                y = sum(range(100))
        p = cprof.profile(activities=["CPU"],
                          schedule=cprof.schedule(wait=0, warmup=1, active=1, repeat=2),
                          on_trace_ready=cprof.tensorboard_trace_handler(out + "/tb"))
        with p:
            for _ in range(4):
                p.step()
        print("program done", len(os.listdir(out + "/tb")))
    """)
    inner = tmp_path / "inner"
    r = cprof("run", "-o", tmp_path / "out", s, inner)
    assert r.returncode == 0, r.stderr
    assert "program done 2" in r.stdout
    assert "WindowStateError" not in r.stderr
    assert "cprof window of its own" in r.stderr  # the user is told why cprof run's trace ends early
    assert len(traces_in(tmp_path / "out")) == 1  # cprof run's trace, up to the hand-over
    (t,) = [p for p in traces_in(inner) if p.name.startswith("inner")]
    assert "inside_program_window" in {e.get("name") for e in load_trace(t)["traceEvents"]}


def test_run_record_ops_graph_break_trace_has_fwd_bwd_links_and_says_how_regions_came(tmp_path):
    """Seed 001: a fwd-bwd link joins CompiledFunction and CompiledFunctionBackward; with
    torch's operators the regions are torch's own, and the trace's metadata says so as
    docs/usage.md documents (under cprof run it said nothing: torch is imported after the
    window opens)."""
    pytest.importorskip("torch")
    s = _script(tmp_path, GRAPH_BREAK_PROGRAM + "\nfwd_bwd(inputs[1])\n")
    r = cprof("run", "-o", tmp_path / "out", "--no-gzip", "--record-ops", s)
    assert r.returncode == 0, r.stderr
    (t,) = traces_in(tmp_path / "out")
    doc = load_trace(t)
    assert doc["cprof"]["compiled_regions"]["mode"] == "torch operators"
    assert _nested(_compiled_regions(doc))
    ev = doc["traceEvents"]
    xs = [e for e in ev if e.get("ph") == "X"]

    def at(flow):  # the X event a flow point sits on (same thread, ts inside it)
        return {e["name"] for e in xs if (e["pid"], e["tid"]) == (flow["pid"], flow["tid"])
                and e["ts"] <= flow["ts"] <= e["ts"] + e["dur"]}
    starts = {e["id"]: e for e in ev if e.get("cat") == "fwdbwd" and e["ph"] == "s"}
    ends = {e["id"]: e for e in ev if e.get("cat") == "fwdbwd" and e["ph"] == "f"}
    links = [(starts[i], ends[i]) for i in starts if i in ends]
    assert any("CompiledFunction" in at(a) and "CompiledFunctionBackward" in at(b)
               for a, b in links)
