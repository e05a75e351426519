"""Black-box reliability tests written from issue 7 (signals, fork, threads, bounded memory,
disk faults: nothing collected is lost silently) by reading the issue only, then kept where
the rest of the suite had no equivalent (docs/reliability.md, "Black-box audit").

Every profiled program runs as a subprocess with PYTHONPATH set to this checkout; the tests
look only at what a user sees: exit status, stderr, the files on disk and the trace.
"""

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_py(code, tmp_path, *, timeout=120, extra_env=None):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(code))
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("CPROF_PROFILER_DIR", None)
    env.update(extra_env or {})
    return subprocess.run([sys.executable, str(script)], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=timeout)


def load(path):
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return json.loads(data.decode("utf-8"))


def traces(d):
    return sorted(p for p in Path(d).iterdir() if ".json" in p.name)


def only_trace(d):
    found = traces(d)
    assert len(found) == 1, found
    return load(found[0])


def ranges(trace):
    """The X events cprof recorded (not its own window span)."""
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "Trace"]


def names(trace):
    return [e["name"] for e in ranges(trace)]


def ctx(out, name="p", **kw):
    args = ", ".join(f"{k}={v!r}" for k, v in kw.items())
    return (f"cprof.ProfilerContext(activities=['CPU'], output_dir={str(out)!r}, "
            f"profile_name={name!r}, with_stack=False, record_shapes=False"
            + (", " + args if args else "") + ")")


# -------------------------------------------------------------------------------- fork

def test_fork_then_exec_in_child_writes_nothing(tmp_path):
    """A child forked inside the window that exec()s another program (pty.spawn, launchers):
    os.exec* ends an open window first (usage.md), but the child holds no window, so it
    writes nothing; the parent's trace is complete and not partial."""
    out = tmp_path / "out"
    r = run_py(f"""
        import os, sys, cprof
        with {ctx(out)}:
            with cprof.range('parent_before'):
                pass
            pid = os.fork()
            if pid == 0:
                os.execv(sys.executable, [sys.executable, '-c', 'print("exec ran")'])
            _, status = os.waitpid(pid, 0)
            print('child exit', os.waitstatus_to_exitcode(status), flush=True)
            with cprof.range('parent_after'):
                pass
    """, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "exec ran" in r.stdout and "child exit 0" in r.stdout
    assert r.stdout.count("cprof: trace written") == 1, r.stdout
    t = only_trace(out)
    assert names(t) == ["parent_before", "parent_after"]
    assert t["cprof"]["partial"] is False and t["cprof"]["end"] == "normal"


def test_fork_child_pop_of_parent_range_is_harmless(tmp_path):
    """A range pushed in the parent before fork() and popped in the child (the child's copy of
    the per-thread stack): the parent's range is untouched (closed by the parent's own pop,
    after the child ended) and nothing the child records reaches the parent's trace."""
    out = tmp_path / "out"
    r = run_py(f"""
        import os, cprof
        with {ctx(out)}:
            cprof.push('spanning_fork')
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    cprof.pop()
                    with cprof.range('child_only'):
                        pass
                except cprof.CprofError:
                    pass
                except BaseException:
                    code = 1
                os._exit(code)
            _, status = os.waitpid(pid, 0)
            with cprof.range('inside_after_child'):
                pass
            cprof.pop()
            print('child exit', os.waitstatus_to_exitcode(status))
    """, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "child exit 0" in r.stdout
    t = only_trace(out)
    ev = {e["name"]: e for e in ranges(t)}
    assert sorted(ev) == ["inside_after_child", "spanning_fork"]
    outer, inner = ev["spanning_fork"], ev["inside_after_child"]
    assert "cprof truncated" not in outer.get("args", {})
    # the parent's pop closed it, after the range it recorded once the child had ended
    assert outer["ts"] <= inner["ts"]
    assert inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + 1e-3


# -------------------------------------------------------------------------------- threads

def test_threads_recording_across_window_boundaries(tmp_path):
    """Three threads push and pop without pause while the main thread opens and closes 30
    windows: no crash, every trace valid and exact for the main thread, and each worker's
    inner ranges inside one of its outer ranges (a range cut by a window edge is closed at
    the edge, never left dangling)."""
    out = tmp_path / "out"
    r = run_py(f"""
        import threading, cprof
        stop = threading.Event()
        def worker():
            while not stop.is_set():
                with cprof.range('outer'):
                    with cprof.range('inner'):
                        pass
        ts = [threading.Thread(target=worker) for _ in range(3)]
        for t in ts: t.start()
        try:
            for w in range(30):
                with {ctx(out, 'w', verbose=False, gzip=False)}:
                    for i in range(200):
                        with cprof.range('main'):
                            pass
        finally:
            stop.set()
            for t in ts: t.join()
    """, tmp_path)
    assert r.returncode == 0, r.stderr
    found = traces(out)
    assert len(found) == 30
    for f in found:
        t = load(f)
        assert names(t).count("main") == 200
        assert t["cprof"]["dropped"]["cpu_ranges"] == 0
        by_tid = {}
        for e in ranges(t):
            if e["name"] in ("outer", "inner"):
                by_tid.setdefault(e["tid"], []).append(e)
        for evs in by_tid.values():
            outers = [(e["ts"], e["ts"] + e["dur"]) for e in evs if e["name"] == "outer"]
            for e in evs:
                if e["name"] == "inner":
                    s, end = e["ts"], e["ts"] + e["dur"]
                    assert any(a <= s + 1e-3 and end <= b + 1e-3 for a, b in outers), e


# -------------------------------------------------------------------------------- memory cap

def test_buffer_cap_with_threads_counts_all_drops(tmp_path):
    """Four threads fill a 1 MiB cap together: every range is either in the trace or counted
    as dropped (kept + dropped == recorded, across threads), and the warning says so."""
    out = tmp_path / "out"
    r = run_py(f"""
        import threading, cprof
        def worker():
            for i in range(50_000):
                with cprof.range('r'):
                    pass
        with {ctx(out, buffer_size_mb=1, verbose=False)}:
            ts = [threading.Thread(target=worker) for _ in range(4)]
            for t in ts: t.start()
            for t in ts: t.join()
    """, tmp_path)
    assert r.returncode == 0, r.stderr
    t = only_trace(out)
    kept = names(t).count("r")
    dropped = t["cprof"]["dropped"]["cpu_ranges"]
    assert kept > 0 and dropped > 0
    assert kept + dropped == 4 * 50_000
    assert f"{dropped} of {4 * 50_000} ranges were dropped" in r.stderr, r.stderr


# -------------------------------------------------------------------------------- disk faults

def test_sigterm_with_nowhere_to_write_says_so_and_still_dies_of_sigterm(tmp_path):
    """SIGTERM in a window when no write can succeed anywhere (file size limit: the output
    directory, $TMPDIR and the working directory all fail): the loss is said on stderr, no
    cut file is left anywhere, and the process still dies of SIGTERM (not another status,
    not a hang)."""
    out = tmp_path / "out"
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    r = run_py(f"""
        import os, resource, signal, time, cprof
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # writes past the limit fail (EFBIG)
        with {ctx(out, gzip=False)}:
            for i in range(20_000):
                with cprof.range('r'):
                    pass
            soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
            resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
        print('not reached')
    """, tmp_path, extra_env={"TMPDIR": str(tmp)})
    assert r.returncode == -signal.SIGTERM, (r.returncode, r.stderr)
    assert "not reached" not in r.stdout
    assert "could not be written" in r.stderr and "lost" in r.stderr, r.stderr
    assert str(out / "p.trace.json") in r.stderr
    assert list(out.iterdir()) == []
    assert list(tmp.iterdir()) == []
    assert not [p for p in tmp_path.iterdir() if "trace" in p.name]


# -------------------------------------------------------------------------------- names

def test_huge_name_is_kept_whole_and_the_trace_stays_valid(tmp_path):
    """A 2,000,005-character range name ending in a quote: written whole, escaped, and the
    ranges after it are intact."""
    out = tmp_path / "out"
    r = run_py(f"""
        import cprof
        with {ctx(out)}:
            with cprof.range('H' * 2_000_000 + '\\"tail'):
                pass
            with cprof.range('after_huge'):
                pass
    """, tmp_path)
    assert r.returncode == 0, r.stderr
    t = only_trace(out)
    assert names(t) == ["H" * 2_000_000 + '"tail', "after_huge"]
    assert t["cprof"]["counts"]["cpu_ranges"] == 2
