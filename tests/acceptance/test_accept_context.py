"""Acceptance tests: issue 2 (foundation) + seed 000 API, from the issue text only."""
import argparse, functools, gzip, inspect, json, os, pathlib, re, threading, time, warnings
import pytest
import cprof
from accept_helpers import load_trace, run_py


@pytest.fixture
def clean_env(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "CPROF_PROFILER_DIR"):
        monkeypatch.delenv(k, raising=False)
    return monkeypatch


def test_features_returns_reasons():
    f = cprof.features()
    assert isinstance(f, dict)
    txt = json.dumps(f, default=str).lower()
    assert "cpu" in txt and "gpu" in txt and "cuda" in txt
    # each unavailable feature says why
    for k, v in f.items():
        if isinstance(v, dict) and v.get("available") is False:
            assert v.get("reason"), k


def test_profilercontext_signature_defaults():
    sig = inspect.signature(cprof.ProfilerContext)
    p = sig.parameters
    assert p["enabled"].default is True
    assert p["activities"].default is None
    assert p["output_dir"].default is None
    assert p["profile_name"].default is None
    assert p["with_stack"].default is True
    assert p["record_shapes"].default is True
    names = list(p)
    assert names[:6] == ["enabled", "activities", "output_dir", "profile_name", "with_stack", "record_shapes"]


def test_profile_function_signature_defaults():
    p = inspect.signature(cprof.profile_function).parameters
    assert p["enabled"].default is True
    assert p["activities"].default is None
    assert p["output_dir"].default is None
    assert p["profile_name"].default is None
    assert p["with_stack"].default is False
    assert p["record_shapes"].default is True


def test_basic_file_naming_and_attributes(tmp_path, clean_env, capsys):
    with cprof.ProfilerContext(activities=["CPU"], output_dir=str(tmp_path), profile_name="my_inference") as ctx:
        with cprof.range("forward"):
            pass
    expected = tmp_path / "my_inference.trace.json.gz"
    assert expected.exists()
    assert isinstance(ctx.trace_path, pathlib.Path)
    assert ctx.trace_path == expected
    assert str(ctx.output_dir) == str(tmp_path)
    out = capsys.readouterr()
    lines = [l for l in (out.out + out.err).splitlines() if "my_inference" in l]
    assert len(lines) == 1, out
    assert str(expected) in lines[0]


def test_printed_line_has_path_events_size_seconds(tmp_path, clean_env, capsys):
    with cprof.ProfilerContext(activities=["CPU"], output_dir=str(tmp_path), profile_name="pl"):
        for i in range(5):
            with cprof.range("r"):
                pass
    out = capsys.readouterr()
    text = out.out + out.err
    line = [l for l in text.splitlines() if "pl.trace.json.gz" in l][0]
    assert re.search(r"\bevents?\b", line), line
    assert re.search(r"\d+(\.\d+)?\s*(B|KB|KiB|MB|MiB|bytes)\b", line), line
    assert re.search(r"\d+(\.\d+)?\s*(s|ms)\b", line), line


def test_rank_suffix_when_world_size_gt_1(tmp_path, clean_env):
    clean_env.setenv("RANK", "1")
    clean_env.setenv("WORLD_SIZE", "2")
    with cprof.ProfilerContext(activities=["CPU"], output_dir=str(tmp_path), profile_name="flux_tp") as ctx:
        pass
    assert (tmp_path / "flux_tp-rank1.trace.json.gz").exists()
    assert ctx.trace_path.name == "flux_tp-rank1.trace.json.gz"
    t = load_trace(ctx.trace_path)
    assert t["distributedInfo"]["rank"] == 1
    assert t["distributedInfo"].get("world_size") == 2


def test_default_dir_env_read_at_call_time(tmp_path, clean_env):
    d = tmp_path / "envdir"
    clean_env.setenv("CPROF_PROFILER_DIR", str(d))
    with cprof.ProfilerContext(activities=["CPU"], profile_name="envtest") as ctx:
        pass
    assert (d / "envtest.trace.json.gz").exists()
    d2 = tmp_path / "envdir2"
    clean_env.setenv("CPROF_PROFILER_DIR", str(d2))
    with cprof.ProfilerContext(activities=["CPU"], profile_name="envtest") as ctx2:
        pass
    assert (d2 / "envtest.trace.json.gz").exists()


def test_default_dir_tmp_cprof_profiles(clean_env):
    ctx = cprof.ProfilerContext(activities=["CPU"], profile_name="defdir_accept")
    with ctx:
        pass
    assert str(ctx.output_dir) == "/tmp/cprof_profiles"
    assert ctx.trace_path.parent == pathlib.Path("/tmp/cprof_profiles")
    assert ctx.trace_path.exists()
    ctx.trace_path.unlink()


def test_default_name_profile_unix_seconds(tmp_path, clean_env):
    t0 = int(time.time())
    with cprof.ProfilerContext(activities=["CPU"], output_dir=str(tmp_path)) as ctx:
        pass
    t1 = int(time.time())
    m = re.fullmatch(r"profile_(\d+)(.*)\.trace\.json\.gz", ctx.trace_path.name)
    assert m, ctx.trace_path.name
    assert t0 - 1 <= int(m.group(1)) <= t1 + 1


def test_same_name_does_not_overwrite(tmp_path, clean_env):
    paths = []
    for i in range(3):
        with cprof.ProfilerContext(activities=["CPU"], output_dir=str(tmp_path), profile_name="dup") as ctx:
            with cprof.range(f"run{i}"):
                pass
        paths.append(ctx.trace_path)
    assert len(set(paths)) == 3
    files = sorted(tmp_path.glob("dup*.trace.json.gz"))
    assert len(files) == 3
    # each file keeps its own run
    for i, p in enumerate(paths):
        names = {e.get("name") for e in load_trace(p)["traceEvents"]}
        assert f"run{i}" in names


def test_disabled_is_noop(tmp_path, clean_env):
    with cprof.ProfilerContext(enabled=False, output_dir=str(tmp_path / "x"), profile_name="no") as ctx:
        with cprof.range("r"):
            pass
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())


def test_disabled_noop_even_with_gpu_activity_and_bad_dir(tmp_path, clean_env):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with cprof.ProfilerContext(enabled=False, activities=["GPU"], output_dir="/proc/nonexistent/x"):
            pass


def test_activities_case_insensitive(tmp_path, clean_env):
    with cprof.ProfilerContext(activities=["cpu"], output_dir=str(tmp_path), profile_name="ci") as ctx:
        pass
    assert ctx.trace_path.exists()


def test_unknown_activity_valueerror_names_valid(tmp_path, clean_env):
    with pytest.raises(ValueError) as ei:
        with cprof.ProfilerContext(activities=["CPU", "TPU"], output_dir=str(tmp_path), profile_name="bad"):
            pass
    msg = str(ei.value)
    for v in ("CPU", "GPU", "MEM"):
        assert v in msg


def test_gpu_unavailable_warns_and_records_cpu(tmp_path, clean_env):
    if cprof.features()["gpu_activity"]["available"]:
        pytest.skip("GPU present")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with cprof.ProfilerContext(output_dir=str(tmp_path), profile_name="gpu") as ctx:
            with cprof.range("cpu_work"):
                pass
    assert any("GPU" in str(x.message) or "CUPTI" in str(x.message) or "driver" in str(x.message) for x in w), [str(x.message) for x in w]
    names = {e.get("name") for e in load_trace(ctx.trace_path)["traceEvents"]}
    assert "cpu_work" in names


def test_unwritable_output_dir_error_before_window(tmp_path, clean_env):
    ran = []
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o500)
    if os.access(ro, os.W_OK):
        # running as root: use a path under a file instead
        target = str(tmp_path / "afile" / "sub")
        (tmp_path / "afile").write_text("x")
    else:
        target = str(ro / "sub")
    with pytest.raises(Exception) as ei:
        with cprof.ProfilerContext(activities=["CPU"], output_dir=target, profile_name="x"):
            ran.append(1)
    assert ran == []
    assert target in str(ei.value) or "afile" in str(ei.value)


def test_exception_inside_window_trace_written_and_propagates(tmp_path, clean_env):
    class MyErr(Exception):
        pass
    err = MyErr("boom")
    with pytest.raises(MyErr) as ei:
        with cprof.ProfilerContext(activities=["CPU"], output_dir=str(tmp_path), profile_name="exc") as ctx:
            with cprof.range("before"):
                pass
            raise err
    assert ei.value is err
    t = load_trace(tmp_path / "exc.trace.json.gz")
    assert "before" in {e.get("name") for e in t["traceEvents"]}


def test_pop_without_push_raises_cprof_error(tmp_path, clean_env):
    with cprof.ProfilerContext(activities=["CPU"], output_dir=str(tmp_path), profile_name="pp") as ctx:
        with pytest.raises(cprof.CprofError):
            cprof.pop()
        cprof.push("ok")
        cprof.pop()
    names = [e.get("name") for e in load_trace(ctx.trace_path)["traceEvents"] if e.get("ph") == "X"]
    assert "ok" in names
    # outside any window too
    with pytest.raises(cprof.CprofError):
        cprof.pop()


def test_cprof_error_is_exception():
    assert issubclass(cprof.CprofError, Exception)


def test_weird_names_valid_json(tmp_path, clean_env):
    names = ['q"uote', "back\\slash", "new\nline", "nul\x00byte", "emoji \U0001F600", "surr\ud800ogate", "tab\tctl\x01"]
    with cprof.ProfilerContext(activities=["CPU"], output_dir=str(tmp_path), profile_name="esc") as ctx:
        for n in names:
            with cprof.range(n):
                pass
    raw = gzip.open(ctx.trace_path, "rb").read()
    raw.decode("utf-8")  # valid UTF-8
    t = json.loads(raw)
    got = {e.get("name") for e in t["traceEvents"]}
    for n in ['q"uote', "back\\slash", "new\nline", "emoji \U0001F600", "tab\tctl\x01"]:
        assert n in got, n


def test_trace_top_level_and_metadata(tmp_path, clean_env):
    with cprof.ProfilerContext(activities=["CPU"], output_dir=str(tmp_path), profile_name="top") as ctx:
        with cprof.range("a"):
            with cprof.range("b"):
                pass
    t = load_trace(ctx.trace_path)
    for k in ("schemaVersion", "distributedInfo", "displayTimeUnit", "baseTimeNanoseconds", "traceEvents", "traceName"):
        assert k in t, k
    assert t["distributedInfo"]["rank"] == 0
    ev = t["traceEvents"]
    assert any(e.get("ph") == "M" and e.get("name") == "process_name" for e in ev)
    assert any(e.get("ph") == "M" and e.get("name") == "thread_name" for e in ev)
    xs = {e["name"]: e for e in ev if e.get("ph") == "X"}
    a, b = xs["a"], xs["b"]
    for e in (a, b):
        for k in ("cat", "pid", "tid", "ts", "dur"):
            assert k in e
    assert a["ts"] <= b["ts"] and b["ts"] + b["dur"] <= a["ts"] + a["dur"] + 1e-3
    # cprof's own metadata: version, config, dropped counts
    blob = json.dumps({k: v for k, v in t.items() if k != "traceEvents"})
    assert "cprof" in t or "cprof" in blob
    meta = t.get("cprof")
    assert meta is not None, list(t)
    mblob = json.dumps(meta)
    assert "version" in mblob and "config" in mblob and "drop" in mblob


def test_trace_name_is_path(tmp_path, clean_env):
    with cprof.ProfilerContext(activities=["CPU"], output_dir=str(tmp_path), profile_name="tn") as ctx:
        pass
    t = load_trace(ctx.trace_path)
    assert t["traceName"].endswith("tn.trace.json.gz") or str(ctx.trace_path) in t["traceName"]


def test_base_time_unix_ns(tmp_path, clean_env):
    now = time.time_ns()
    with cprof.ProfilerContext(activities=["CPU"], output_dir=str(tmp_path), profile_name="bt") as ctx:
        with cprof.range("x"):
            pass
    t = load_trace(ctx.trace_path)
    assert abs(t["baseTimeNanoseconds"] - now) < 60e9
    x = [e for e in t["traceEvents"] if e.get("name") == "x"][0]
    abs_ns = t["baseTimeNanoseconds"] + x["ts"] * 1000
    assert abs(abs_ns - now) < 60e9


def test_no_temp_files_left(tmp_path, clean_env):
    with cprof.ProfilerContext(activities=["CPU"], output_dir=str(tmp_path), profile_name="tmpcheck"):
        pass
    assert [p.name for p in tmp_path.iterdir()] == ["tmpcheck.trace.json.gz"]


def test_profile_function_decorator(tmp_path, clean_env):
    @cprof.profile_function(activities=["CPU"], output_dir=str(tmp_path))
    def forward_pass(x, y=2):
        """doc here"""
        return x + y
    assert forward_pass.__name__ == "forward_pass"
    assert forward_pass.__doc__ == "doc here"
    assert str(inspect.signature(forward_pass)) == "(x, y=2)"
    assert forward_pass(1) == 3
    files = list(tmp_path.glob("*.trace.json.gz"))
    assert [f.name for f in files] == ["forward_pass.trace.json.gz"]


def test_profile_function_explicit_name(tmp_path, clean_env):
    @cprof.profile_function(enabled=True, profile_name="fp", activities=["CPU"], output_dir=str(tmp_path))
    def f():
        return 5
    assert f() == 5
    assert (tmp_path / "fp.trace.json.gz").exists()


def test_add_profiler_args_defaults():
    p = argparse.ArgumentParser()
    cprof.add_profiler_args(p)
    a = p.parse_args([])
    assert a.profile is False
    assert a.profile_activities == ["CPU", "GPU"]
    assert a.profile_with_stack is True
    assert a.profile_record_shapes is True
    assert a.track_memory is False
    a = p.parse_args(["--profile", "--profile-dir", "/tmp/x", "--profile-name", "n",
                      "--profile-activities", "CPU", "GPU", "MEM", "--no-profile-with-stack",
                      "--no-profile-record-shapes", "--track-memory"])
    assert a.profile and a.profile_dir == "/tmp/x" and a.profile_name == "n"
    assert a.profile_activities == ["CPU", "GPU", "MEM"]
    assert a.profile_with_stack is False and a.profile_record_shapes is False and a.track_memory
    a = p.parse_args(["--profile-with-stack", "--profile-record-shapes"])
    assert a.profile_with_stack and a.profile_record_shapes
    with pytest.raises(SystemExit):
        p.parse_args(["--profile-activities", "TPU"])


def test_create_profiler_from_args(tmp_path, clean_env):
    p = argparse.ArgumentParser()
    cprof.add_profiler_args(p)
    a = p.parse_args(["--profile", "--profile-dir", str(tmp_path), "--profile-name", "fromargs",
                      "--profile-activities", "CPU"])
    prof = cprof.create_profiler_from_args(a)
    assert isinstance(prof, cprof.ProfilerContext)
    with prof:
        pass
    assert (tmp_path / "fromargs.trace.json.gz").exists()
    assert isinstance(prof.trace_path, pathlib.Path)
    assert f"{prof.output_dir}/{prof.trace_path.name}" == str(tmp_path / "fromargs.trace.json.gz")
    # explicit profile_name wins
    prof2 = cprof.create_profiler_from_args(a, profile_name="flux_inference")
    with prof2:
        pass
    assert (tmp_path / "flux_inference.trace.json.gz").exists()


def test_create_profiler_disabled_without_flag(tmp_path, clean_env):
    p = argparse.ArgumentParser()
    cprof.add_profiler_args(p)
    a = p.parse_args(["--profile-dir", str(tmp_path / "d")])
    prof = cprof.create_profiler_from_args(a)
    with prof:
        pass
    assert not (tmp_path / "d").exists() or not list((tmp_path / "d").iterdir())


def test_create_profiler_minimal_namespace(tmp_path, clean_env):
    clean_env.setenv("CPROF_PROFILER_DIR", str(tmp_path))
    a = argparse.Namespace(profile=True)
    prof = cprof.create_profiler_from_args(a, profile_name="minimal")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with prof:
            pass
    assert (tmp_path / "minimal.trace.json.gz").exists()
    # even a Namespace with nothing at all
    prof = cprof.create_profiler_from_args(argparse.Namespace())
    with prof:
        pass


def test_range_context_and_decorator_nesting(tmp_path, clean_env):
    @cprof.range("decorated")
    def g():
        with cprof.range("inner"):
            pass
    with cprof.ProfilerContext(activities=["CPU"], output_dir=str(tmp_path), profile_name="rng") as ctx:
        g()
        cprof.push("p1")
        cprof.push("p2")
        cprof.pop()
        cprof.pop()
    ev = {e["name"]: e for e in load_trace(ctx.trace_path)["traceEvents"] if e.get("ph") == "X"}
    for outer, inner in (("decorated", "inner"), ("p1", "p2")):
        o, i = ev[outer], ev[inner]
        assert o["ts"] <= i["ts"] and i["ts"] + i["dur"] <= o["ts"] + o["dur"] + 1e-3


def test_ranges_outside_window_are_noops():
    with cprof.range("nowindow"):
        pass


def test_threads_exact_counts_and_nesting(tmp_path, clean_env):
    N, T = 2000, 8
    def work(i):
        for _ in range(N):
            with cprof.range(f"outer{i}"):
                with cprof.range(f"inner{i}"):
                    pass
    with cprof.ProfilerContext(activities=["CPU"], output_dir=str(tmp_path), profile_name="thr") as ctx:
        ts = [threading.Thread(target=work, args=(i,)) for i in range(T)]
        for t in ts: t.start()
        for t in ts: t.join()
    ev = [e for e in load_trace(ctx.trace_path)["traceEvents"] if e.get("ph") == "X"]
    from collections import Counter, defaultdict
    c = Counter(e["name"] for e in ev)
    for i in range(T):
        assert c[f"outer{i}"] == N and c[f"inner{i}"] == N
    tids = defaultdict(set)
    for e in ev:
        if e["name"].startswith(("outer", "inner")):
            tids[e["name"][-1]].add(e["tid"])
    assert all(len(v) == 1 for v in tids.values())
    assert len({next(iter(v)) for v in tids.values()}) == T


def test_rank_from_env_single(tmp_path, clean_env):
    clean_env.setenv("RANK", "0")
    clean_env.setenv("WORLD_SIZE", "1")
    with cprof.ProfilerContext(activities=["CPU"], output_dir=str(tmp_path), profile_name="w1") as ctx:
        pass
    assert ctx.trace_path.name == "w1.trace.json.gz"
