"""`cprof run` (cprof/_cli_run.py), each case a `python -m cprof run ...` subprocess running a
program from tests/cli_run_scripts/."""
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import ROOT, load_trace, ranges_of, sigint_default

SCRIPTS = os.path.join(ROOT, "tests", "cli_run_scripts")
BASIC = os.path.join(SCRIPTS, "basic.py")
TIMED = os.path.join(SCRIPTS, "timed.py")
CAPTURE = os.path.join(SCRIPTS, "capture.py")
MODEL = os.path.join(SCRIPTS, "model.py")
WRITTEN = re.compile(r"^cprof: trace written to (\S+) \((\d+) events, [\d.]+ (B|KB|MB|GB), "
                     r"\d+\.\d{3} s to write\)$",
                     re.M)


def _env():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "CPROF_PROFILER_DIR"):
        env.pop(k, None)
    return env


def _cmd(*args):
    return [sys.executable, "-m", "cprof", "run", *map(str, args)]


def cprof_run(*args, cwd=None, timeout=60, text=True):
    return subprocess.run(_cmd(*args), env=_env(), cwd=cwd, capture_output=True, text=text,
                          timeout=timeout)


def plain_run(*args, cwd=None, text=True):
    return subprocess.run([sys.executable, *map(str, args)], env=_env(), cwd=cwd,
                          capture_output=True, text=text, timeout=60)


def run_many(arg_lists):
    """Runs several `cprof run`s at once (the torch imports dominate); returns their
    CompletedProcess-like results in order."""
    procs = [subprocess.Popen(_cmd(*a), env=_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for a in arg_lists]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


def not_cprof(stderr):
    return "".join(line for line in stderr.splitlines(keepends=True)
                   if not line.startswith("cprof: "))


def names(trace, cat="user_annotation"):
    return [e["name"] for e in sorted(ranges_of(trace, cat), key=lambda e: e["ts"])]


def written(proc):
    """The trace path of the "trace written" line (exactly one)."""
    (m,) = WRITTEN.findall(proc.stderr)
    return m[0]


# ---------------------------------------------------------------- the program, unchanged

def test_script_args_stdout_stderr_pass_through(tmp_path):
    args = ("basic.py", "--lr", "3", "-o", "x")
    raw = cprof_run("-o", tmp_path / "raw", *args, cwd=SCRIPTS, text=False)
    assert raw.stdout == plain_run(*args, cwd=SCRIPTS, text=False).stdout  # byte for byte
    assert b"raw bytes\r\n" in raw.stdout
    ran = cprof_run("-o", tmp_path, *args, cwd=SCRIPTS)
    plain = plain_run(*args, cwd=SCRIPTS)
    assert ran.returncode == plain.returncode == 0, ran.stderr
    assert f"argv=['basic.py', '--lr', '3', '-o', 'x'] name=__main__ path0={SCRIPTS}\n" \
        in ran.stdout
    assert f"file={BASIC}\n" in ran.stdout  # absolute, as python sets it
    assert not_cprof(ran.stderr) == plain.stderr == "to stderr\n"
    path = written(ran)
    assert path == str(tmp_path / "basic.trace.json.gz")
    t = load_trace(path)
    assert names(t) == ["work"]
    assert t["cprof"]["partial"] is False and t["cprof"]["end"] == "normal"
    assert t["cprof"]["argv"] == ["basic.py", "--lr", "3", "-o", "x"]
    # cprof run's defaults: no stack, no shapes
    assert t["cprof"]["config"]["with_stack"] is False
    assert t["cprof"]["config"]["record_shapes"] is False


def test_program_globals_and_a_closed_stdout_as_python_has_them(tmp_path):
    """The program's module globals are python's (__annotations__ included), and a program
    that closes sys.stdout ends as under python (exit 0, no cprof traceback)."""
    prog = tmp_path / "g.py"
    prog.write_text("import sys\n"
                    "print(sorted(k for k in globals() if k.startswith('__')))\n"
                    "sys.stdout.close()\n")
    ran, plain = cprof_run("-o", tmp_path, prog), plain_run(prog)
    assert ran.returncode == plain.returncode == 0, ran.stderr
    assert ran.stdout == plain.stdout
    assert "Traceback" not in ran.stderr


@pytest.mark.parametrize("opts", [(), ("--with-stack",)])
def test_module(tmp_path, opts):
    ran = cprof_run("-o", tmp_path, *opts, "-m", "basic", "a", "b", cwd=SCRIPTS)
    plain = plain_run("-m", "basic", "a", "b", cwd=SCRIPTS)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == plain.stdout
    assert f"argv=['{BASIC}', 'a', 'b'] name=__main__ path0={SCRIPTS}\n" in ran.stdout
    t = load_trace(tmp_path / "basic.trace.json.gz")
    assert names(t) == ["work"]
    if opts:
        # the program's calls, from its module code down; nothing of cprof's or runpy's
        calls = [e["name"] for e in ranges_of(t, "python_function")]
        # named as torch.profiler names it: relative to its sys.path entry (the script's dir)
        assert calls[0] == "basic.py(1): <module>"
        assert not any("cprof" in n.replace(ROOT, "") or "runpy" in n for n in calls)
        assert "builtins.sum" in [e["name"] for e in ranges_of(t, "cpu_op")]


def test_syntax_error(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("print('x'\n")
    ran = cprof_run("-o", tmp_path / "out", bad)
    plain = plain_run(bad)
    assert ran.returncode == plain.returncode == 1
    assert ran.stderr == plain.stderr and "SyntaxError" in ran.stderr
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")


def test_torch_imported_after_the_window_opened(tmp_path):
    """The window opens before the program imports torch: its record_function ranges and
    (--record-shapes) module calls are captured all the same."""
    pytest.importorskip("torch")  # the program imports it
    ran = cprof_run("-o", tmp_path, "--record-shapes", MODEL)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "(2, 4)\n"
    t = load_trace(written(ran))
    assert names(t) == ["forward_pass", "Net", "fc"]
    (fc,) = [e for e in ranges_of(t) if e["name"] == "fc"]
    assert fc["args"]["Input Dims"] == [[2, 8]]


def test_with_stack_records_the_import_of_torch(tmp_path):
    """cprof run hooks the import of torch (to catch its glue up); the tracer records nothing
    under cprof's code, so the hook must let it record the import. A stand-in torch."""
    fake = os.path.join(SCRIPTS, "fake_torch")
    env = dict(_env(), PYTHONPATH=fake + os.pathsep + _env()["PYTHONPATH"])
    ran = subprocess.run(_cmd("-o", tmp_path, "--with-stack",
                              os.path.join(SCRIPTS, "imports_torch.py")),
                         env=env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "torch\n"
    calls = [e["name"] for e in ranges_of(load_trace(written(ran)), "python_function")]
    init = os.path.join("torch", "__init__.py")  # relative to its PYTHONPATH entry
    assert f"{init}(1): <module>" in calls and f"{init}(6): imported_helper" in calls


def test_memory_and_unavailable_gpu(tmp_path):
    ran = cprof_run("-o", tmp_path, "--activities", "cpu,mem", BASIC)
    assert ran.returncode == 0, ran.stderr
    assert re.search(r"^cprof: memory: peak CPU RSS [\d.]+ [KMG]?B", ran.stderr, re.M)
    t = load_trace(written(ran))
    track = [e for e in t["traceEvents"] if e.get("ph") == "C" and e["name"] == "CPU memory"]
    assert track
    if "malloc in use bytes" in track[0]["args"]:  # glibc's malloc (not ASan's)
        assert re.search(r"^cprof: memory: .*, peak malloc'd [\d.]+ [KMG]?B", ran.stderr, re.M)
    assert ran.stdout == plain_run(BASIC).stdout  # ProfilerContext's stdout lines are not made
    ran = cprof_run("-o", tmp_path, "--name", "gpu", "--activities", "GPU", BASIC)
    assert ran.returncode == 0, ran.stderr
    if "GPU activity was asked for but is not collected" in ran.stderr:  # no GPU here
        t = load_trace(written(ran))
        assert t["cprof"]["config"]["collected_activities"] == ["CPU"]


@pytest.mark.parametrize("args, code, end, opts", [
    (("exit", "0"), 0, None, ()),
    (("exit", "3"), 3, "SystemExit", ()),
    (("raise",), 1, "ValueError", ()),
    (("raise",), 1, "ValueError", ("--with-stack",)),  # the program runs from a bootstrap
    (("sysexit-msg",), 1, "SystemExit", ()),
])
def test_exit_code_and_partial_trace(tmp_path, args, code, end, opts):
    ran = cprof_run("-o", tmp_path, *opts, BASIC, *args)
    assert ran.returncode == code, ran.stderr
    t = load_trace(written(ran))
    assert t["cprof"]["partial"] is (end is not None)
    assert t["cprof"]["end"] == (end or "normal")
    if args[0] in ("raise", "sysexit-msg"):
        # the traceback / message exactly as python prints it: no cprof or runpy frames
        plain = plain_run(BASIC, *args)
        assert plain.returncode == code
        assert not_cprof(ran.stderr) == plain.stderr
    if args[0] == "raise":
        assert "ValueError: boom" in ran.stderr and "_cli_run" not in ran.stderr
        assert "failing" in names(t)  # the range the exception left, ended at the window's end


@pytest.mark.parametrize("args, code, end, opts", [
    (("os_exit", "7"), 7, "os._exit", ()),
    (("os_exit", "0"), 0, "os._exit", ("--with-stack",)),
    (("exec",), 0, "exec", ()),
])
def test_os_exit_and_exec_write_the_trace_first(tmp_path, args, code, end, opts):
    """Neither runs atexit: the program used to end with no trace and no word (decision
    116). The trace is written, said, and the program's own ending goes on."""
    ran = cprof_run("-o", tmp_path, *opts, BASIC, *args)
    assert ran.returncode == code, ran.stderr
    t = load_trace(written(ran))
    assert t["cprof"]["partial"] is True and t["cprof"]["end"] == end
    assert t["cprof"]["cprof_run"]["closed_by"] == f"{end} called by the program"
    assert names(t)[0] == "work"
    if args[0] == "os_exit":
        assert names(t) == ["work", "exiting"]
    else:
        assert ran.stdout.endswith("replaced\n")
    assert f"the program ended with {end} while the window was open" in ran.stderr


@pytest.mark.parametrize("sig, code, end, opts", [
    # the status python gives: it ends by the signal (-2 / -15 to a parent), after the trace
    (signal.SIGINT, -signal.SIGINT, "KeyboardInterrupt", ()),
    (signal.SIGTERM, -signal.SIGTERM, "Terminated", ()),
    (signal.SIGTERM, -signal.SIGTERM, "Terminated", ("--with-stack",)),  # same pid after exec
])
def test_signal_writes_partial_trace(tmp_path, sig, code, end, opts):
    mode = "sigint" if sig == signal.SIGINT else "sigterm"
    p = subprocess.Popen(_cmd("-o", tmp_path, *opts, BASIC, mode), env=_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=sigint_default)
    try:
        lines = [p.stdout.readline() for _ in range(4)]
        assert lines[3] == "ready\n", lines  # sleeping inside the range "waiting"
        p.send_signal(sig)
        stdout, stderr = p.communicate(timeout=30)
    finally:
        p.kill()
        p.wait()
    assert p.returncode == code, stderr
    assert "not interrupted" not in stdout
    t = load_trace(tmp_path / "basic.trace.json.gz")
    assert t["cprof"]["partial"] is True and t["cprof"]["end"] == end
    assert names(t) == ["work", "waiting"]
    if sig == signal.SIGINT:
        assert stderr.rstrip().endswith("KeyboardInterrupt")  # its traceback, as python does
    else:
        assert "cprof: terminated by SIGTERM" in stderr


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT])
def test_sighup_and_sigquit_write_the_trace_and_say_so(tmp_path, sig):
    """A hung-up session (SIGHUP) or SIGQUIT: python dies at once, leaving nothing; cprof run
    writes the trace (partial, end SIGHUP), says where, and dies of the same signal."""
    p = subprocess.Popen(_cmd("-o", tmp_path, BASIC, "sigterm"), env=_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=sigint_default)
    try:
        lines = [p.stdout.readline() for _ in range(4)]
        assert lines[3] == "ready\n", lines
        p.send_signal(sig)
        stdout, stderr = p.communicate(timeout=30)
    finally:
        p.kill()
        p.wait()
    name = signal.Signals(sig).name
    assert p.returncode == -sig, stderr
    t = load_trace(tmp_path / "basic.trace.json.gz")
    assert t["cprof"]["partial"] is True and t["cprof"]["end"] == name
    assert names(t) == ["work", "waiting"]
    assert f"trace written to {tmp_path / 'basic.trace.json.gz'}" in stderr
    assert f"cprof: terminated by {name}" in stderr


def test_sighup_while_the_duration_timer_writes_waits_for_the_write(tmp_path):
    """--duration's timer thread closes the window and writes; a SIGHUP landing during that
    write used to end the process at once, leaving only the temporary file. The trace is
    complete, then the process dies of SIGHUP."""
    script = os.path.join(SCRIPTS, "many_then_sleep.py")
    p = subprocess.Popen(_cmd("-o", tmp_path, "--duration", "0.4", "--no-gzip", script),
                         env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=sigint_default)
    try:
        for line in p.stderr:
            if "window closed" in line:
                p.send_signal(signal.SIGHUP)  # as soon as the timer starts closing
                break
        _, stderr = p.communicate(timeout=60)
    finally:
        p.kill()
        p.wait()
    assert p.returncode == -signal.SIGHUP, stderr
    files = os.listdir(tmp_path)
    assert files == ["many_then_sleep.trace.json"], files  # written whole, no temp file left
    t = load_trace(tmp_path / files[0])
    assert "busy" in names(t) and t["cprof"]["cprof_run"]["closed_by"].startswith("--duration")


@pytest.mark.parametrize("again", [False, True])
def test_a_program_that_swallows_terminated_still_ends_by_sigterm(tmp_path, again):
    """Python dies at SIGTERM; under cprof run it is raised as Terminated so the trace gets
    written, and a task loop's bare except used to swallow it: the job ran on and exited 0.
    It is now ended by SIGTERM, its trace written, TERM_GRACE_S later or at a second one."""
    prog = tmp_path / "swallow.py"
    prog.write_text(
        "import time, cprof\n"
        "print('ready', flush=True)\n"
        "t0 = time.time()\n"
        "while time.time() - t0 < 30:\n"
        "    try:\n"
        "        with cprof.range('task'):\n"
        "            time.sleep(0.05)\n"
        "    except:  # noqa: E722\n"
        "        print('swallowed', flush=True)\n"
        "print('ran to the end', flush=True)\n")
    p = subprocess.Popen(_cmd("-o", tmp_path, str(prog)), env=_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "ready\n"
        time.sleep(0.2)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        if again:
            assert p.stdout.readline() == "swallowed\n"
            p.send_signal(signal.SIGTERM)
        stdout, stderr = p.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        p.kill()
        p.wait()
    assert p.returncode == -signal.SIGTERM, stderr
    assert "ran to the end" not in stdout and "caught Terminated" in stderr
    assert took < (2.5 if again else 20), took
    t = load_trace(tmp_path / "swallow.trace.json.gz")
    assert t["cprof"]["partial"] is True and t["cprof"]["end"] == "Terminated"


@pytest.mark.parametrize("code", [0, 3])
def test_a_trace_that_cannot_be_written_goes_to_the_temporary_directory(tmp_path, code):
    """The output directory is gone when the program ends (or the disk is full): no one can
    call save() any more, so cprof run writes the trace to $TMPDIR and says where (it used to
    say "call save(path)" and lose it)."""
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    tmp.mkdir()
    prog = tmp_path / "vanish.py"
    prog.write_text("import os, sys, cprof\n"
                    "with cprof.range('kept'):\n"
                    "    pass\n"
                    f"os.rmdir({str(out)!r})\n"
                    f"sys.exit({code})\n")
    env = dict(_env(), TMPDIR=str(tmp))
    ran = subprocess.run(_cmd("-o", out, str(prog)), env=env, capture_output=True, text=True,
                         timeout=60)
    assert ran.returncode == code, ran.stderr
    assert "it was written to" in ran.stderr and "save(path)" not in ran.stderr, ran.stderr
    assert ran.stderr.count("could not be written") == 1, ran.stderr
    (saved,) = os.listdir(tmp)
    assert "kept" in names(load_trace(tmp / saved))


def test_forked_child_keeps_default_sigterm(tmp_path):
    ran = cprof_run("-o", tmp_path, os.path.join(SCRIPTS, "fork_terminate.py"))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == f"child exit {-signal.SIGTERM}\n"
    assert "Terminated" not in ran.stderr


def test_sigterm_in_a_forked_child_before_its_hook_ran_is_the_default(tmp_path):
    """Multiproc audit M1: with a fork Pool under cprof run, a worker terminated at once got
    cprof run's handler (its at-fork hook runs after cprof's import-time one, which imported
    logging): Terminated was swallowed inside the hook, the worker lived on, and the
    handler's watchdog SIGTERMed the *parent* 3 s later: the program died (6 of 10 runs, 10
    of 10 with torch and --with-stack) and 66 workers leaked. The handler now acts as the
    default in any process but the profiled one."""
    ran = cprof_run("-o", tmp_path, os.path.join(SCRIPTS, "fork_early_sigterm.py"),
                    timeout=90)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == f"child signal {int(signal.SIGTERM)} exit None\nprogram done\n"
    assert "Terminated" not in ran.stderr


def test_running_the_launcher_says_it_profiles_the_launcher_only(tmp_path):
    """Multiproc audit M5: `cprof run -m torch.distributed.run ...` profiled the launcher agent
    (4 events, no rank files) and said nothing; the ranks are other processes."""
    pytest.importorskip("torch")
    ran = cprof_run("-o", tmp_path, "-m", "torch.distributed.run", "--help", timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert "profiles the launcher only" in ran.stderr and "-m cprof run" in ran.stderr
    plain = cprof_run("-o", tmp_path, os.path.join(SCRIPTS, "basic.py"))
    assert "profiles the launcher only" not in plain.stderr


# ---------------------------------------------------------------- when the window is open

def test_delay_and_duration(tmp_path):
    # timed.py: early [0, 0.2] s, middle [0.6, 0.9] s, late [1.5, 1.7] s; window [0.4, 1.0] s
    # with --with-stack: the timer thread opens the window, the main thread's calls are traced
    ran = cprof_run("-o", tmp_path, "--delay", "0.4", "--duration", "0.6", "--with-stack",
                    TIMED)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "done\n"
    t = load_trace(written(ran))
    assert names(t) == ["middle"]
    calls = [e["name"] for e in ranges_of(t, "python_function") + ranges_of(t, "cpu_op")]
    assert any(n.endswith("until") for n in calls) and "time.sleep" in calls
    assert not any("_cli_run" in n for n in calls)  # cprof's timer is not traced
    run = t["cprof"]["cprof_run"]
    assert run["opened_by"] == "--delay 0.4 s reached"
    assert run["closed_by"] == "--duration 0.6 s reached"
    assert t["cprof"]["partial"] is False


def test_delay_that_fires_during_the_import_of_torch(tmp_path):
    """The window opened from the timer thread while the program was inside `import torch`
    made Python raise _DeadlockError into the program's import (the two threads took torch's
    module locks in opposite orders): the program died. The window now opens once the import
    is done, and says so."""
    pytest.importorskip("torch")  # the program imports it
    script = os.path.join(SCRIPTS, "imports_torch.py")
    ran = cprof_run("-o", tmp_path, "--delay", "0.01", "--duration", "5", script, "work")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "torch\n"
    assert "could not open" not in ran.stderr and "Deadlock" not in ran.stderr
    t = load_trace(written(ran))
    assert t["cprof"]["cprof_run"]["opened_by"] == (
        "--delay 0.01 s reached; opened once the program's import of torch had finished")
    assert names(t) == ["after_import"]


def test_duration_longer_than_program(tmp_path):
    ran = cprof_run("-o", tmp_path, "--duration", "30", TIMED, "short")
    assert ran.returncode == 0, ran.stderr
    t = load_trace(written(ran))
    assert names(t) == ["early", "middle"]
    assert t["cprof"]["partial"] is False
    assert t["cprof"]["cprof_run"]["closed_by"].startswith("program end")


def test_delay_longer_than_program(tmp_path):
    ran = cprof_run("-o", tmp_path, "--delay", "5", TIMED, "short")
    assert ran.returncode == 0, ran.stderr
    # no capture range was asked for: the message must not speak of one
    assert "cprof: no trace written: the window never opened (the program ended after" \
        in ran.stderr
    assert "capture range" not in ran.stderr
    assert not WRITTEN.search(ran.stderr)
    assert not tmp_path.exists() or os.listdir(tmp_path) == []


# capture.py also knows "autograd" (torch.autograd.profiler.record_function: the same class
# as torch.profiler.record_function) and "nvtx" (range_push / range_pop, which nvtx.range
# calls): left out, each torch import costs ~2 s of CPU
CAPTURE_KINDS = ["cprof", "cprof_decorator", "push", "record_function", "nvtx_range",
                 "cudaProfilerApi", "cuda_profile"]


def test_capture_range(tmp_path):
    """The window is exactly the first range "target" (whatever made it) and what is inside;
    cudaProfilerApi: between torch.cuda.profiler.start() and stop(), which on CPU torch
    (no CUDA) cprof handles without calling torch's (it would raise)."""
    pytest.importorskip("torch")  # the program imports it
    runs = []
    for kind in CAPTURE_KINDS:
        rng = "cudaProfilerApi" if kind.startswith("cuda") else "range:target"
        runs.append(("-o", tmp_path, "--name", kind, "--capture-range", rng, CAPTURE, kind))
    runs.append(("-o", tmp_path, "--name", "never", "--capture-range", "range:nope", CAPTURE,
                 "cprof"))
    results = run_many(runs)
    for kind, ran in zip(CAPTURE_KINDS, results):
        assert ran.returncode == 0, (kind, ran.stderr)
        assert ran.stdout == "done\n", kind
        t = load_trace(tmp_path / f"{kind}.trace.json.gz")
        assert names(t) == ["target", "inner"], kind
        run = t["cprof"]["cprof_run"]
        if kind.startswith("cuda"):
            assert (run["opened_by"], run["closed_by"]) == (
                "torch.cuda.profiler.start()", "torch.cuda.profiler.stop()"), kind
        else:
            assert (run["opened_by"], run["closed_by"]) == (
                "range 'target' began", "range 'target' ended"), kind
        assert t["cprof"]["partial"] is False
    never = results[-1]
    assert never.returncode == 0
    assert "cprof: no trace written: the capture range never started (no range named " \
        "'nope' began)" in never.stderr
    assert not os.path.exists(tmp_path / "never.trace.json.gz")


# ---------------------------------------------------------------- options

def test_name_output_dir_no_gzip_quiet_report(tmp_path):
    out = tmp_path / "new" / "dir"
    ran = cprof_run("--no-gzip", "--name", "custom", "-o", out, "--quiet", "--record-shapes",
                    BASIC)
    assert ran.returncode == 0
    assert not_cprof(ran.stderr) == ran.stderr == "to stderr\n"  # --quiet: no cprof lines
    t = load_trace(out / "custom.trace.json")  # plain JSON
    assert names(t) == ["work"]
    assert t["cprof"]["config"]["record_shapes"] is True
    ran = cprof_run("--output-dir", out, "--name=custom", "--report", "--no-gzip", BASIC)
    assert written(ran) == str(out / "custom-1.trace.json")  # never overwrites
    assert "cprof: CPU ranges of the window" in ran.stderr and "work" in ran.stderr


def test_a_script_named_with_control_characters_gets_a_trace_name(tmp_path):
    """'bad\tname.py': the default name (the stem) was refused by ProfilerContext with a
    traceback, and the program never ran (strings audit #2)."""
    script = tmp_path / "bad\tname\x1b.py"
    script.write_text("print('program ran')\n")
    ran = cprof_run("-o", tmp_path / "out", script)
    assert ran.returncode == 0 and ran.stdout == "program ran\n", ran.stderr
    assert written(ran) == str(tmp_path / "out" / "bad_name_.trace.json.gz")


def test_report_shows_control_characters_escaped_one_row_per_name(tmp_path):
    """--report printed names as they were: a newline split a row in two and an ESC or C1 CSI
    sequence in a name restyled or cleared the terminal."""
    prog = tmp_path / "names.py"
    prog.write_text("import cprof\n"
                    "for n in ['row one\\nrow two', '\\x1b[2Jclear', 'v\\x0bt\\x7f', 'csi\\x9b31m',"
                    " 'nul\\x00']:\n"
                    "    with cprof.range(n):\n"
                    "        pass\n")
    ran = cprof_run("-o", tmp_path, "--report", prog)
    assert ran.returncode == 0, ran.stderr
    rows = ran.stderr.split("cprof: CPU ranges of the window\n")[1].split("\n")[2:]
    shown = {r.split("  ")[0].rstrip() for r in rows if r.strip()}
    assert shown == {"row one\\nrow two", "\\x1b[2Jclear", "v\\x0bt\\x7f",
                     "csi\\x9b31m", "nul\\x00"}
    for bad in "\x1b\x0b\x7f\x9b\x00":
        assert bad not in ran.stderr


@pytest.mark.parametrize("args, message", [
    (("nope.py",), "no such file: nope.py"),
    ((), "no program given"),
    (("--quiet",), "no program given"),
    (("-m",), "no program given"),
    (("-m", "no_such_module_xyz"), "no module named 'no_such_module_xyz'"),
    (("--activities", "CPU,TPU", BASIC), "unknown profiler activity 'TPU'"),
    (("--activities", "CPU", "GPU", BASIC), "no such file: GPU; --activities takes one "
                                             "comma-separated list (--activities CPU,GPU)"),
    (("--capture-range", "nvtx", BASIC), "--capture-range must be cudaProfilerApi or "
                                          "range:NAME"),
    (("--capture-range", "range:", BASIC), "--capture-range must be"),
    (("--delay", "-1", BASIC), "--delay must be 0 or more seconds, got -1"),
    (("--delay", "soon", BASIC), "argument --delay: invalid float value: 'soon'"),
    (("--duration", "0", BASIC), "--duration must be more than 0 seconds"),
    # past threading.TIMEOUT_MAX the timer thread's wait raised OverflowError (a traceback)
    (("--delay", "1e10", BASIC), f"--delay must be at most {threading.TIMEOUT_MAX:.0f} seconds "
                                 "(threading.TIMEOUT_MAX"),
    (("--duration", "1e10", BASIC), f"--duration must be at most {threading.TIMEOUT_MAX:.0f}"),
    (("--delay", "1", "--capture-range", "cudaProfilerApi", BASIC),
     "--delay cannot be combined with --capture-range"),
    (("--name", "a/b", BASIC), "--name must be a file name (not '.' or '..', without '/'"),
    (("--name", "..", BASIC), "--name must be a file name"),
    (("--name", "a\nb", BASIC), "--name must be a file name"),
    (("--name", "", BASIC), "--name must be a file name"),
    (("-o", "", BASIC), "--output-dir is empty; pass a directory"),
    (("--bogus", BASIC), "unrecognized arguments: --bogus"),
])
def test_bad_input(tmp_path, args, message):
    ran = cprof_run("-o", tmp_path, *args)
    assert ran.returncode == 2, ran.stderr
    assert f"cprof run: error: {message}" in ran.stderr
    assert ran.stdout == ""
    assert not os.path.exists(tmp_path / "basic.trace.json.gz")


def test_output_dir_not_writable(tmp_path):
    f = tmp_path / "file"
    f.write_text("")
    ran = cprof_run("-o", f, BASIC)
    assert ran.returncode == 2
    assert "cprof run: error: the output directory" in ran.stderr
    assert "is a file, not a directory" in ran.stderr  # not "cannot be created (File exists)"
    assert "done" not in ran.stdout  # not run


def test_help():
    top = subprocess.run([sys.executable, "-m", "cprof", "--help"], env=_env(),
                         capture_output=True, text=True, timeout=60)
    assert top.returncode == 0
    assert re.search(r"^\s+run\s+profile a Python script", top.stdout, re.M)
    ran = cprof_run("--help")
    assert ran.returncode == 0
    assert "cprof run [options] -m module [args...]" in ran.stdout
    for opt in ("--activities", "--output-dir", "--name", "--delay", "--duration",
                "--capture-range", "--with-stack", "--record-shapes", "--no-gzip", "--quiet",
                "--report"):
        assert opt in ran.stdout


# ---------------------------------------------------------------- torchrun

def test_torchrun_two_ranks(tmp_path):
    pytest.importorskip("torch.distributed.run")
    env = dict(_env(), MASTER_ADDR="127.0.0.1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone",
           "-m", "cprof", "run", "-o", str(tmp_path), "--name", "dist",
           os.path.join(SCRIPTS, "dist_prog.py")]
    start = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("rank done") == 2
    for rank in (0, 1):
        t = load_trace(tmp_path / f"dist-rank{rank}.trace.json.gz")
        assert t["distributedInfo"]["rank"] == rank
        assert t["distributedInfo"]["world_size"] == 2
        # the program destroyed its group before cprof run wrote at exit: still named
        assert t["distributedInfo"]["backend"] == "gloo"
        # the collectives' ranges too, though torch was imported after the window opened
        assert [n for n in names(t) if not n.startswith("gloo:")] == [f"on_rank{rank}"]
        assert {"gloo:all_reduce", "gloo:barrier"} <= set(names(t))
    assert time.monotonic() - start < 60


def test_collectives_and_allocations_of_a_program_that_imports_torch_itself(tmp_path):
    """cprof run opens its window before the program imports torch: the collectives' gloo:
    ranges and torch's allocation events (MEM) are put on when torch arrives, as a window
    opened after `import torch` records them (they used to be missing, and the trace said
    "torch is not imported")."""
    pytest.importorskip("torch")
    script = tmp_path / "coll.py"
    script.write_text(
        "import os, sys, tempfile\n"
        "import torch, torch.distributed as dist\n"
        "store = dist.FileStore(os.path.join(tempfile.mkdtemp(), 'store'), 1)\n"
        "dist.init_process_group('gloo', store=store, rank=0, world_size=1)\n"
        "for _ in range(3):\n"
        "    t = torch.ones(1000)\n"
        "    dist.all_reduce(t)\n"
        "dist.destroy_process_group()\n")
    for extra in ((), ("--record-ops",)):
        ran = cprof_run("-o", tmp_path, "--name", "coll", "--activities", "CPU,MEM", *extra,
                        script)
        assert ran.returncode == 0, ran.stderr
        t = load_trace(written(ran))
        assert names(t).count("gloo:all_reduce") == 3, names(t)
        assert sum(e.get("name") == "[memory]" for e in t["traceEvents"]) >= 3
        assert isinstance(t["cprof"]["memory"]["allocation_events"], int)
        if extra:
            ops = t["cprof"]["ops"]
            assert ops["async_ranges"] is True and "async_ranges_reason" not in ops, ops


def test_late_torch_is_not_said_to_be_missing(tmp_path):
    """A ProfilerContext opened before the program imports torch (no cprof run to catch up):
    the trace says torch came after the window opened, not that it is not imported."""
    pytest.importorskip("torch")
    out = tmp_path / "o"
    code = ("import sys, cprof\n"
            "with cprof.ProfilerContext(activities=['CPU', 'MEM'], output_dir=sys.argv[1],\n"
            "        profile_name='late', with_stack=False, record_ops=True, verbose=False):\n"
            "    import torch\n"
            "    torch.ones(10)\n")
    ran = subprocess.run([sys.executable, "-W", "ignore", "-c", code, str(out)], env=_env(),
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    meta = load_trace(out / "late.trace.json.gz")["cprof"]
    late = "torch was imported after the window opened"
    assert meta["memory"]["allocation_events"] == f"not recorded: {late}"
    assert meta["ops"]["reason"] == late and meta["ops"]["async_ranges_reason"] == late


def test_compiled_regions_of_a_program_that_imports_torch_itself(tmp_path):
    """cprof run opens its window before the program imports torch: the compiled-region
    capture is put on when torch arrives, so graph breaks show (seed 001)."""
    pytest.importorskip("torch")
    script = tmp_path / "gb.py"
    script.write_text(
        "import torch, torch._dynamo\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(s):\n"
        "        super().__init__(); s.a = torch.nn.Linear(8, 8); s.b = torch.nn.Linear(8, 8)\n"
        "    def forward(s, x):\n"
        "        x = s.a(x).relu(); torch._dynamo.graph_break(); return s.b(x)\n"
        "m = torch.compile(M())\n"
        "for _ in range(2):\n"
        "    m(torch.randn(2, 8))\n")
    ran = cprof_run("-o", tmp_path, "--name", "gb", script, timeout=600)
    assert ran.returncode == 0, ran.stderr
    t = load_trace(tmp_path / "gb.trace.json.gz")
    regions = [e for e in t["traceEvents"] if e.get("ph") == "X"
               and e["name"].startswith("Torch-Compiled Region")]
    assert len(regions) >= 4  # two calls, each an outer region with one nested after the break
    rep = subprocess.run([sys.executable, "-m", "cprof", "report",
                          str(tmp_path / "gb.trace.json.gz")], env=_env(), capture_output=True,
                         text=True, timeout=120)
    assert "Graph breaks in compiled code" in rep.stdout, rep.stdout


def test_cprofs_own_warnings_are_cprof_lines_and_the_programs_stay_pythons(tmp_path):
    """cprof run prints only `cprof: ` lines of its own: a warning cprof raises inside the
    program's frames (the GPU asked for where none is) was printed as `<frozen runpy>:88:
    GpuUnavailableWarning: cprof: ...`. The program's own warnings keep Python's form."""
    import cprof
    if cprof.features()["gpu_activity"]["available"]:
        pytest.skip("a GPU is collectable here: no GPU warning to see")
    prog = tmp_path / "w.py"
    prog.write_text("import warnings\nwarnings.warn('mine')\nprint('ok')\n")
    r = cprof_run("-o", tmp_path / "out", "--activities", "GPU", prog)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr
    lines = r.stderr.splitlines()
    assert any(ln.startswith("cprof: GPU activity was asked for") for ln in lines), lines
    assert not any("GpuUnavailableWarning" in ln or "runpy" in ln for ln in lines), lines
    assert any(ln.endswith("UserWarning: mine") and "w.py:2" in ln for ln in lines), lines


def test_record_ops_with_stack_writes_c_calls_as_python_functions(tmp_path):
    """--record-ops: the tracer starts before the program imports torch, whose operators are
    captured from the import on; C calls must be python_function ranges from the start, as
    where operators are captured in-process (decision 124), not cpu_op ones next to aten's."""
    pytest.importorskip("torch")
    prog = tmp_path / "prog.py"
    prog.write_text("import torch\n"
                    "for _ in range(3):\n"
                    "    isinstance(torch.relu(torch.ones(4)), torch.Tensor)\n")
    ran = cprof_run("-o", tmp_path / "out", "--with-stack", "--record-ops", prog, timeout=300)
    assert ran.returncode == 0, ran.stderr
    t = load_trace(written(ran))
    ops = {e["name"] for e in ranges_of(t, "cpu_op")}
    assert "aten::relu" in ops
    assert not [n for n in ops if n.startswith(("builtins.", "torch._C."))], sorted(ops)[:20]
    assert [e for e in ranges_of(t, "python_function") if e["name"] == "builtins.isinstance"]


LAZY_CUDA = """
import pickle
import torch  # after the window opened: cprof run's catch-up runs inside this import
calls = []
torch.cuda.memory._record_memory_history = lambda *a, **k: calls.append(k)
torch.cuda.reset_peak_memory_stats = lambda *a, **k: None
torch.cuda.memory._snapshot = lambda: {"segments": [], "device_traces": [], "fake": 1}
torch.cuda.max_memory_allocated = lambda *a: 123
torch.cuda.max_memory_reserved = lambda *a: 456
torch.cuda.memory_summary = lambda *a, **k: "fake summary"
import sys
if sys.argv[1] == "use-cuda":  # the program's first CUDA use: torch runs its lazy-init queue
    for fn, _ in list(torch.cuda._queued_calls):
        fn()
print("history started", len(calls))
"""


@pytest.mark.parametrize("use", ["use-cuda", "no-cuda"])
def test_mem_starts_cuda_memory_history_at_the_programs_first_cuda_use(tmp_path, use):
    """cprof run opens its window before the program imports torch, so MEM's CUDA memory
    history was never started: no snapshot on a GPU machine unless --delay. It now starts from
    torch.cuda's lazy-init queue when the program first initialises CUDA (simulated here by
    running that queue with torch's CUDA memory calls stubbed)."""
    import pickle
    pytest.importorskip("torch")
    script = tmp_path / "lazy.py"
    script.write_text(LAZY_CUDA)
    ran = cprof_run("-o", tmp_path, "--activities", "CPU,MEM", str(script), use)
    assert ran.returncode == 0, ran.stderr
    assert "MEM asked for a CUDA memory snapshot" not in ran.stderr  # not refused at the start
    pickles = list(tmp_path.glob("*.pickle"))
    if use == "use-cuda":
        assert "history started 1" in ran.stdout
        assert len(pickles) == 1, ran.stderr
        with open(pickles[0], "rb") as f:
            assert pickle.load(f)["fake"] == 1
        assert "memory snapshot written to" in ran.stderr
        assert "peak CUDA allocated 123 B" in ran.stderr
    else:
        assert "history started 0" in ran.stdout and not pickles
        assert "CUDA memory not tracked" in ran.stderr


def test_bare_torchrun_says_where_cprof_run_goes(tmp_path):
    """Docs audit: usage.md said `cprof run torchrun ...` profiles the launcher only and says
    so; a bare `torchrun` is no file (scripts are paths, as for python), so it got a plain
    "no such file: torchrun". It is still refused (exit 2), now with the way to profile the
    ranks."""
    ran = cprof_run("-o", tmp_path, "torchrun", "--nproc_per_node=2", "train.py", timeout=60)
    assert ran.returncode == 2, ran.stderr
    assert "no such file: torchrun" in ran.stderr
    assert "torchrun [its options] -m cprof run" in ran.stderr
    other = cprof_run("-o", tmp_path, "nosuch.py", timeout=60)
    assert other.returncode == 2 and "torchrun" not in other.stderr


@pytest.mark.parametrize("var, value, extra", [
    ("CPROF_GPU_BUFFER_MB", "abc", []),
    ("CPROF_MEMORY_INTERVAL_US", "5", ["--activities", "CPU,MEM"]),
    ("CPROF_OPS_CAPTURE", "bogus", ["--record-ops"]),
])
def test_a_bad_cprof_variable_is_a_usage_error(var, value, extra, tmp_path):
    """Docs audit: `CPROF_GPU_BUFFER_MB=abc cprof run prog.py` ended in a Python traceback from
    inside ProfilerContext (exit 1), where usage.md says bad input exits 2 with a "cprof run:
    error:" line before the program starts. The program does not run."""
    script = tmp_path / "prog.py"
    script.write_text("print('ran')\n")
    ran = subprocess.run(_cmd("-o", tmp_path, *extra, script), env=dict(_env(), **{var: value}),
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 2, ran.stderr
    assert f"cprof run: error: {var}" in ran.stderr and "Traceback" not in ran.stderr
    assert ran.stdout == ""
