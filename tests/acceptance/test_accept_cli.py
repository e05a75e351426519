"""Acceptance tests: issue 6 (cprof run / report / merge / --html)."""
import gzip, json, os, pathlib, signal, subprocess, sys, textwrap, time
import pytest

pytest.importorskip("torch")  # (the suite's Python 3.12 pass has no torch)
from accept_helpers import load_trace, CLONE

ENV = dict(os.environ)
ENV["PYTHONPATH"] = CLONE + os.pathsep + ENV.get("PYTHONPATH", "")
for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "CPROF_PROFILER_DIR"):
    ENV.pop(k, None)


def cprof_cli(*args, cwd=None, env=None, timeout=240, input=None):
    e = dict(ENV)
    if env:
        e.update(env)
    return subprocess.run([sys.executable, "-m", "cprof", *map(str, args)], cwd=cwd, env=e,
                          capture_output=True, text=True, timeout=timeout, input=input)


SCRIPT = """
import sys
import cprof
print("hello stdout", sys.argv[1:])
print("hello stderr", file=sys.stderr)
with cprof.range("user_range"):
    s = sum(range(1000))
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
"""


@pytest.fixture
def script(tmp_path):
    p = tmp_path / "train.py"
    p.write_text(SCRIPT)
    return p


def test_run_script_passthrough(tmp_path, script):
    out = tmp_path / "out"
    r = cprof_cli("run", "-o", out, "--activities", "CPU", script, "3", "--epochs", "1")
    assert r.returncode == 3, r.stderr
    assert "hello stdout ['3', '--epochs', '1']" in r.stdout
    assert "hello stderr" in r.stderr
    files = list(out.glob("*.trace.json*"))
    assert len(files) == 1, files
    assert files[0].name == "train.trace.json.gz"
    names = {e.get("name") for e in load_trace(files[0])["traceEvents"]}
    assert "user_range" in names


def test_run_stdout_unchanged_exactly(tmp_path, script):
    r0 = subprocess.run([sys.executable, str(script), "0"], capture_output=True, text=True, env=ENV)
    r = cprof_cli("run", "-o", tmp_path / "o", "--activities", "CPU", script, "0")
    assert r.stdout == r0.stdout
    assert r.returncode == 0


def test_run_default_dir(tmp_path, script):
    r = cprof_cli("run", "--activities", "CPU", "--name", "accept_cli_default", script)
    assert r.returncode == 0, r.stderr
    p = pathlib.Path("/tmp/cprof_profiles/accept_cli_default.trace.json.gz")
    assert p.exists()
    p.unlink()


def test_run_env_dir(tmp_path, script):
    r = cprof_cli("run", "--activities", "CPU", script, env={"CPROF_PROFILER_DIR": str(tmp_path / "e")})
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "e" / "train.trace.json.gz").exists()


def test_run_name_and_no_gzip(tmp_path, script):
    r = cprof_cli("run", "--output-dir", tmp_path, "--name", "nm", "--no-gzip", "--activities", "CPU", script)
    assert r.returncode == 0, r.stderr
    p = tmp_path / "nm.trace.json"
    assert p.exists(), list(tmp_path.iterdir())
    json.loads(p.read_text())


def test_run_module(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("import sys\nprint('mod ran', sys.argv[1:])\nsys.exit(5)\n")
    r = cprof_cli("run", "-o", tmp_path / "o", "--activities", "CPU", "-m", "mypkg.mod", "a", "b", cwd=tmp_path,
                  env={"PYTHONPATH": CLONE + os.pathsep + str(tmp_path)})
    assert r.returncode == 5, r.stderr
    assert "mod ran ['a', 'b']" in r.stdout
    assert list((tmp_path / "o").glob("*.trace.json*"))


def test_run_name_main(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("if __name__ == '__main__':\n    print('main ok')\n")
    r = cprof_cli("run", "-o", tmp_path, "--activities", "CPU", p)
    assert "main ok" in r.stdout, r.stderr


def test_run_raises_trace_partial(tmp_path):
    p = tmp_path / "boom.py"
    p.write_text("import cprof\nwith cprof.range('before_boom'):\n    pass\nraise RuntimeError('kaboom')\n")
    r = cprof_cli("run", "-o", tmp_path, "--activities", "CPU", p)
    assert r.returncode == 1
    assert "RuntimeError: kaboom" in r.stderr
    t = load_trace(tmp_path / "boom.trace.json.gz")
    assert "before_boom" in {e.get("name") for e in t["traceEvents"]}
    meta = json.dumps({k: v for k, v in t.items() if k != "traceEvents"})
    assert '"partial": true' in meta


def test_run_sigint_trace_written(tmp_path):
    p = tmp_path / "loop.py"
    p.write_text("import time, cprof\nprint('ready', flush=True)\nwhile True:\n    with cprof.range('tick'):\n        time.sleep(0.01)\n")
    proc = subprocess.Popen([sys.executable, "-m", "cprof", "run", "-o", str(tmp_path), "--activities", "CPU", str(p)],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.readline()
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    t = load_trace(tmp_path / "loop.trace.json.gz")
    assert "tick" in {e.get("name") for e in t["traceEvents"]}
    assert '"partial": true' in json.dumps({k: v for k, v in t.items() if k != "traceEvents"})


def test_run_delay_duration(tmp_path):
    p = tmp_path / "dd.py"
    p.write_text(textwrap.dedent("""
        import time, cprof
        t0 = time.time()
        i = 0
        while time.time() - t0 < 2.0:
            with cprof.range(f"r{int((time.time()-t0)*10)}"):
                time.sleep(0.02)
        print('done')
    """))
    r = cprof_cli("run", "-o", tmp_path, "--activities", "CPU", "--delay", "0.5", "--duration", "0.5", p)
    assert r.returncode == 0 and "done" in r.stdout, r.stderr
    t = load_trace(tmp_path / "dd.trace.json.gz")
    names = {e["name"] for e in t["traceEvents"] if e.get("ph") == "X" and e["name"].startswith("r")}
    tenths = sorted(int(n[1:]) for n in names if n[1:].isdigit())
    assert tenths and tenths[0] >= 4 and tenths[-1] <= 12, tenths


def test_run_capture_range(tmp_path):
    p = tmp_path / "cr.py"
    p.write_text(textwrap.dedent("""
        import cprof
        with cprof.range("outside_before"):
            pass
        with cprof.range("capture_me"):
            with cprof.range("inside"):
                pass
        with cprof.range("outside_after"):
            pass
    """))
    r = cprof_cli("run", "-o", tmp_path, "--activities", "CPU", "--capture-range", "range:capture_me", p)
    assert r.returncode == 0, r.stderr
    names = {e.get("name") for e in load_trace(tmp_path / "cr.trace.json.gz")["traceEvents"]}
    assert "inside" in names
    assert "outside_before" not in names and "outside_after" not in names


def test_run_capture_range_cuda_profiler_api(tmp_path):
    p = tmp_path / "cp.py"
    p.write_text(textwrap.dedent("""
        import torch, cprof
        with cprof.range("before"):
            pass
        torch.cuda.profiler.start()
        with cprof.range("inside"):
            pass
        torch.cuda.profiler.stop()
        with cprof.range("after"):
            pass
    """))
    r = cprof_cli("run", "-o", tmp_path, "--activities", "CPU", "--capture-range", "cudaProfilerApi", p)
    assert r.returncode == 0, r.stderr
    names = {e.get("name") for e in load_trace(tmp_path / "cp.trace.json.gz")["traceEvents"]}
    assert "inside" in names and "before" not in names and "after" not in names


def test_run_with_stack_record_shapes(tmp_path):
    p = tmp_path / "ws.py"
    p.write_text("import torch\ndef myfunc():\n    return torch.nn.Linear(3, 2)(torch.ones(4, 3))\nmyfunc()\n")
    r = cprof_cli("run", "-o", tmp_path, "--activities", "CPU", "--with-stack", "--record-shapes", p)
    assert r.returncode == 0, r.stderr
    ev = load_trace(tmp_path / "ws.trace.json.gz")["traceEvents"]
    assert any(e.get("cat") == "python_function" and "myfunc" in e.get("name", "") for e in ev)
    assert any("Input Dims" in e.get("args", {}) for e in ev)


def _make_traces(tmp_path):
    import torch, torch.profiler as tp
    import cprof
    with cprof.ProfilerContext(activities=["CPU"], output_dir=str(tmp_path), profile_name="c", with_stack=False) as ctx:
        for i in range(3):
            with cprof.range(f"ProfilerStep#{i}"):
                with cprof.range("work"):
                    time.sleep(0.001)
    with tp.profile(activities=[tp.ProfilerActivity.CPU]) as prof:
        for i in range(3):
            torch.mm(torch.ones(32, 32), torch.ones(32, 32))
            prof.step()
    tpath = tmp_path / "run.pt.trace.json"
    prof.export_chrome_trace(str(tpath))
    return ctx.trace_path, tpath


@pytest.mark.parametrize("fmt", ["table", "csv", "json", "md"])
def test_report_formats(tmp_path, fmt):
    c, t = _make_traces(tmp_path)
    for path in (c, t):
        r = cprof_cli("report", path, "--format", fmt, "--top", "5")
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip()
        if fmt == "json":
            json.loads(r.stdout)


def test_report_torch_gz(tmp_path):
    c, t = _make_traces(tmp_path)
    gz = tmp_path / "run2.pt.trace.json.gz"
    gz.write_bytes(gzip.compress(t.read_bytes()))
    r = cprof_cli("report", gz)
    assert r.returncode == 0, r.stderr


def test_report_kernel_table_columns_on_synthetic_gpu_trace(tmp_path):
    t = {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}, "displayTimeUnit": "ms",
         "baseTimeNanoseconds": 1700000000000000000, "traceEvents": [
             {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 0.0, "dur": 5.0, "args": {"correlation": 1}},
             {"ph": "X", "cat": "kernel", "name": "kA", "pid": 0, "tid": 7, "ts": 10.0, "dur": 100.0, "args": {"correlation": 1, "device": 0, "stream": 7}},
             {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 6.0, "dur": 5.0, "args": {"correlation": 2}},
             {"ph": "X", "cat": "kernel", "name": "kA", "pid": 0, "tid": 7, "ts": 110.0, "dur": 300.0, "args": {"correlation": 2, "device": 0, "stream": 7}},
             {"ph": "X", "cat": "kernel", "name": "kB", "pid": 0, "tid": 7, "ts": 500.0, "dur": 100.0, "args": {"correlation": 3, "device": 0, "stream": 7}},
             {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7, "ts": 700.0, "dur": 10.0, "args": {"bytes": 1000000, "device": 0, "stream": 7}},
         ]}
    p = tmp_path / "syn.json"
    p.write_text(json.dumps(t))
    r = cprof_cli("report", p, "--format", "table")
    assert r.returncode == 0, r.stderr
    for col in ("Time", "Total", "Instances", "Avg", "Med", "Min", "Max", "StdDev", "Name"):
        assert col in r.stdout, col
    assert "kA" in r.stdout and "kB" in r.stdout
    assert "HtoD" in r.stdout
    r = cprof_cli("report", p, "--format", "json")
    j = json.loads(r.stdout)
    s = json.dumps(j)
    assert "kA" in s
    # kA: total 400us, 2 instances, 80% of kernel time
    assert "400" in s and ("80" in s)


@pytest.mark.parametrize("content", [b"", b"{", b"not json", b'{"traceEvents": 5}', b"\x1f\x8b\x08\x00garbage", b'{"traceEvents": [{"ph": "X"'])
def test_report_malformed(tmp_path, content):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    r = cprof_cli("report", p)
    assert r.returncode not in (0,) and r.returncode > 0 and r.returncode < 128, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip()


def test_report_missing_file(tmp_path):
    r = cprof_cli("report", tmp_path / "nope.json")
    assert r.returncode > 0 and "Traceback" not in r.stderr and r.stderr.strip()


def test_report_html(tmp_path):
    c, t = _make_traces(tmp_path)
    out = tmp_path / "report.html"
    r = cprof_cli("report", c, "--html", out)
    assert r.returncode == 0, r.stderr
    h = out.read_text()
    assert h.lower().lstrip().startswith("<!doctype html") or "<html" in h.lower()
    assert "http://" not in h.replace("http://www.w3.org", "") and "https://" not in h or "<script src=" not in h


def test_merge(tmp_path):
    import cprof
    d = tmp_path / "ranks"
    for r in (0, 1):
        os.environ["RANK"], os.environ["WORLD_SIZE"] = str(r), "2"
        try:
            with cprof.ProfilerContext(activities=["CPU"], output_dir=str(d), profile_name="job", with_stack=False):
                for i in range(3):
                    with cprof.range(f"ProfilerStep#{i}"):
                        time.sleep(0.002 * (1 + 4 * r))
        finally:
            del os.environ["RANK"], os.environ["WORLD_SIZE"]
    assert sorted(p.name for p in d.iterdir()) == ["job-rank0.trace.json.gz", "job-rank1.trace.json.gz"]
    out = tmp_path / "merged.trace.json.gz"
    r = cprof_cli("merge", d, "-o", out)
    assert r.returncode == 0, r.stderr
    t = load_trace(out)
    pn = [e for e in t["traceEvents"] if e.get("ph") == "M" and e.get("name") == "process_name"]
    labels = json.dumps(pn)
    assert "rank 0" in labels.lower() or "rank0" in labels.lower()
    assert "rank 1" in labels.lower() or "rank1" in labels.lower()
    pids = {e["pid"] for e in t["traceEvents"] if e.get("ph") == "X" and e["name"].startswith("ProfilerStep")}
    assert len(pids) == 2
    text = r.stdout + r.stderr
    assert "1" in text and ("straggler" in text.lower() or "slow" in text.lower())
    # merge from files too
    out2 = tmp_path / "m2.json"
    r = cprof_cli("merge", *sorted(d.iterdir()), "-o", out2)
    assert r.returncode == 0, r.stderr
    json.loads(out2.read_text())


def test_cli_version_and_console_script():
    r = cprof_cli("--version")
    assert r.returncode == 0 and r.stdout.strip()


def test_cli_unknown_command_exit_code():
    r = cprof_cli("frobnicate")
    assert r.returncode == 2


def test_run_missing_script(tmp_path):
    r = cprof_cli("run", "-o", tmp_path, tmp_path / "nope.py")
    assert r.returncode != 0 and "Traceback" not in r.stderr and r.stderr.strip()
