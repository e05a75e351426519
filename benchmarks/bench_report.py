#!/usr/bin/env python
"""Trace analysis speed: `cprof report` vs Holistic Trace Analysis (HTA) on the same file.

For each size (MiB of uncompressed JSON; default 100 and 1024) a synthetic Kineto training
trace is generated with benchmarks/make_trace.py (plain JSON, and a gzip -1 copy of it), unless
--trace gives an existing file. Then, each in a fresh subprocess, wall time and peak RSS of:

- cprof: `python -m cprof report TRACE --format json --top 20` (--repeats times; median).
  Checked first with `python -m cprof report --help`; while that fails, the benchmark says so
  and measures HTA only.
- HTA:   `TraceAnalysis(trace_dir=DIR)` (HTA reads a directory of rank traces), then
  get_gpu_kernel_breakdown(), get_temporal_breakdown(), get_idle_time_breakdown() (kernel
  summary, GPU utilisation, idle-time breakdown: what `cprof report` computes), each timed
  separately inside the child (--hta-repeats times, default 1).

Peak RSS is /usr/bin/time -v's "Maximum resident set size" (the largest single process; HTA
parses one rank in-process, so that is all of it), or without /usr/bin/time the child's
RUSAGE_CHILDREN ru_maxrss via a small wrapper. A watchdog thread also samples the summed RSS of
the child's session every 0.2 s. Every child runs under RLIMIT_AS (--mem-limit-gb, default 20)
and is killed if its RSS passes --rss-limit-gb (default: the lower of the AS limit and available
memory minus 1.5 GiB) or it runs longer than --timeout (default 900 s); such runs are reported
as OOM / RSS limit / timeout, not as crashes. Each file is read through once just before each
run, so runs start with it in the page cache (this VM reclaims cache on its own). Generated
files go to a temporary directory (--tmpdir) that is deleted at the end unless --keep.

Trace shape: --steps (default 10) ProfilerSteps, each gradient accumulation over as many
micro-batches as fill the size (~100 micro-batches of a 12-layer model per step at 1 GiB).
HTA's load assigns every CPU event to a step by a Python loop over all steps (O(events x
steps)), so --steps 0 (one micro-batch per step: ~1000 steps at 1 GiB) makes HTA far slower.

    python benchmarks/bench_report.py [--sizes 100,1024 | --size-mb N | --trace FILE]
        [--formats json,gz] [--repeats 3] [--hta-repeats 1] [--hta/--no-hta] [--cprof/--no-cprof]
        [--timeout 900] [--mem-limit-gb 20] [--keep] [--tmpdir DIR] [--json PATH] [--seed 0]
        [--steps 10] [--layers 12]

The last thing printed is a markdown table: size, events, format, tool, wall s (median),
peak RSS MB, and the ratios HTA/cprof, followed by the machine and versions.
"""
import argparse
import datetime
import json
import os
import platform
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from _common import cpu_model  # noqa: E402
MB = 1 << 20
GB = 1 << 30


# ----------------------------------------------------------------------------------------------
# children
# ----------------------------------------------------------------------------------------------
def _status_kb():
    out = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line.split(":")[0]] = int(line.split()[1])
    except OSError:
        pass
    return out


def hta_child(trace_dir, result_path):
    """Runs in the child: HTA load + the three analyses, each timed; results saved as it goes
    (so a run killed half way still tells how far it got)."""
    res = {"status": "running", "phase": "import", "phases": {}, "rss_kb_after": {}}

    def save():
        tmp = result_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f, default=str)
        os.replace(tmp, result_path)

    def phase(name, fn):
        res["phase"] = name
        save()
        t = time.perf_counter()
        out = fn()
        res["phases"][name] = time.perf_counter() - t
        res["rss_kb_after"][name] = _status_kb()
        save()
        return out

    try:
        def imp():
            import warnings
            warnings.filterwarnings("ignore")
            from hta.trace_analysis import TraceAnalysis
            import numpy
            import pandas
            res["versions"] = {"pandas": pandas.__version__, "numpy": numpy.__version__,
                               "python": platform.python_version()}
            return TraceAnalysis
        TraceAnalysis = phase("import", imp)
        a = phase("load", lambda: TraceAnalysis(trace_dir=trace_dir))
        try:
            res["rows"] = {str(r): int(len(df)) for r, df in a.t.traces.items()}
        except Exception:  # noqa: BLE001 - informative only
            pass
        kb = phase("kernel_breakdown", lambda: a.get_gpu_kernel_breakdown(visualize=False))
        res["kernel_type"] = kb[0].to_dict(orient="records")
        res["kernel_rows"] = int(len(kb[1]))
        tb = phase("temporal_breakdown", lambda: a.get_temporal_breakdown(visualize=False))
        res["temporal"] = tb.to_dict(orient="records")
        ib = phase("idle_breakdown", lambda: a.get_idle_time_breakdown(visualize=False))
        res["idle"] = ib[0].to_dict(orient="records")
        res["status"] = "ok"
        res["phase"] = None
        save()
        return 0
    except MemoryError as e:
        res["status"] = "oom"
        res["error"] = "%s: %s" % (type(e).__name__, str(e)[:300])
        save()
        return 3


def rusage_wrap(out_path, cmd):
    """Fallback for /usr/bin/time -v: runs cmd and writes its exit status and ru_maxrss."""
    p = subprocess.Popen(cmd)
    rc = p.wait()
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out_path, "w") as f:
        json.dump({"rc": rc, "maxrss_kb": ru.ru_maxrss}, f)
    return rc if rc >= 0 else 128 - rc


# ----------------------------------------------------------------------------------------------
# measuring a child
# ----------------------------------------------------------------------------------------------
def _session_rss_kb(sid):
    """Summed VmRSS (kB) of every process in session sid."""
    total = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
            fields = st[st.rindex(")") + 2:].split()
            if int(fields[3]) != sid:  # state ppid pgrp session ...
                continue
            total += int(fields[21]) * (os.sysconf("SC_PAGE_SIZE") // 1024)  # rss pages
        except (OSError, ValueError, IndexError):
            continue
    return total


def measure(cmd, workdir, tag, timeout, mem_limit, rss_limit, cwd=REPO):
    """Runs cmd in a new session under RLIMIT_AS; returns wall, peak RSS, status."""
    out_path = os.path.join(workdir, tag + ".stdout")
    err_path = os.path.join(workdir, tag + ".stderr")
    time_path = os.path.join(workdir, tag + ".time")
    for p in (time_path,):
        if os.path.exists(p):
            os.unlink(p)
    gnu_time = os.path.exists("/usr/bin/time")
    if gnu_time:
        full = ["/usr/bin/time", "-v", "-o", time_path] + cmd
    else:
        full = [sys.executable, os.path.abspath(__file__), "--_rusage-wrap", time_path, "--"] + cmd

    def limit():
        if mem_limit:
            resource.setrlimit(resource.RLIMIT_AS, (mem_limit, mem_limit))

    with open(out_path, "wb") as fo, open(err_path, "wb") as fe:
        t0 = time.perf_counter()
        proc = subprocess.Popen(full, stdout=fo, stderr=fe, cwd=cwd, preexec_fn=limit,
                                start_new_session=True)
        state = {"peak_kb": 0, "killed": None}
        stop = threading.Event()

        def watch():
            while not stop.wait(0.2):
                kb = _session_rss_kb(proc.pid)
                state["peak_kb"] = max(state["peak_kb"], kb)
                if rss_limit and kb * 1024 > rss_limit and state["killed"] is None:
                    state["killed"] = "rss-limit (%.0f MiB > %.0f MiB)" % (kb / 1024,
                                                                             rss_limit / MB)
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass

        th = threading.Thread(target=watch, daemon=True)
        th.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            state["killed"] = "timeout (%d s)" % timeout
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            rc = proc.wait()
        wall = time.perf_counter() - t0
        stop.set()
        th.join()
        try:  # anything the child left behind in its session
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    maxrss_kb = None
    child_rc = rc
    sig = None
    try:
        with open(time_path) as f:
            ttxt = f.read()
        if gnu_time:
            m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", ttxt)
            maxrss_kb = int(m.group(1)) if m else None
            m = re.search(r"Exit status: (\d+)", ttxt)
            child_rc = int(m.group(1)) if m else rc
            m = re.search(r"Command terminated by signal (\d+)", ttxt)
            sig = int(m.group(1)) if m else None
        else:
            d = json.loads(ttxt)
            maxrss_kb, child_rc = d["maxrss_kb"], d["rc"]
            if child_rc < 0:
                sig = -child_rc
    except (OSError, ValueError):
        pass
    with open(err_path, "rb") as f:
        f.seek(max(0, os.path.getsize(err_path) - 4000))
        err_tail = f.read().decode(errors="replace")
    if state["killed"]:
        status = state["killed"]
    elif child_rc == 0 and sig is None:
        status = "ok"
    elif re.search(r"MemoryError|Unable to allocate|Cannot allocate memory|std::bad_alloc|"
                   r"out of memory", err_tail, re.I):
        status = "OOM (RLIMIT_AS %.0f GiB)" % (mem_limit / GB) if mem_limit else "OOM"
    elif sig == 9 or rc in (-9, 137):
        status = "killed by SIGKILL (kernel OOM killer?)"
    elif sig:
        status = "killed by signal %d" % sig
    else:
        status = "failed (exit %s)" % child_rc
        exc = re.findall(r"^(\w+(?:Error|Exception)): (.{0,120})", err_tail, re.M)
        if exc:
            status = "failed (%s: %s)" % exc[-1]
            if re.search(r"Invalid value .* for dtype 'int(8|16)'", err_tail):
                status += " [HTA 0.5.0 with pandas >= 3: see --hta-python]"
    return {"cmd": cmd, "status": status, "rc": child_rc, "wall_s": wall,
            "maxrss_mb": maxrss_kb / 1024 if maxrss_kb else None,
            "sampled_peak_rss_mb": state["peak_kb"] / 1024, "stdout": out_path,
            "stderr_tail": err_tail[-1500:]}


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------
def count_events(path):
    """Events in a plain JSON trace: occurrences of '"ph":' (one per event in Kineto output)."""
    n = 0
    tail = b""
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 24)
            if not b:
                break
            buf = tail + b
            n += buf.count(b'"ph":')
            tail = buf[-4:]
    return n


def warm(path):
    """Reads the file once (into the page cache) and returns the seconds it took."""
    t = time.perf_counter()
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass
    return time.perf_counter() - t


def cprof_available():
    try:
        p = subprocess.run([sys.executable, "-m", "cprof", "report", "--help"], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    if p.returncode == 0:
        return True, ""
    lines = [ln for ln in (p.stderr or p.stdout).strip().splitlines() if ln.strip()]
    return False, "exit %d: %s" % (p.returncode, lines[-1] if lines else "")


def _version(dist):
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:  # noqa: BLE001
        return None


def machine_info():
    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                                capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO, capture_output=True, text=True).stdout.strip()
        commit += " (uncommitted changes)" if dirty else ""
    except OSError:
        commit = None
    return {
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "mem_gib": round(mem / GB, 1) if mem else None,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "hta": _version("HolisticTraceAnalysis"),
        "pandas": _version("pandas"),
        "numpy": _version("numpy"),
        "ijson": _version("ijson"),
        "cprof": _version("cprof"),
        "cprof_commit": commit,
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def mem_available():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def gzip_copy(src, dst):
    tmp = dst + ".tmp"
    if shutil.which("gzip"):
        with open(tmp, "wb") as f:
            subprocess.run(["gzip", "-1", "-c", src], stdout=f, check=True)
    else:
        import gzip
        with open(src, "rb") as fi, gzip.open(tmp, "wb", compresslevel=1) as fo:
            shutil.copyfileobj(fi, fo, 1 << 22)
    os.replace(tmp, dst)


def fmt(x, nd=2):
    if x is None:
        return "-"
    if isinstance(x, float):
        return "%.*f" % (nd, x)
    return str(x)


# ----------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------
def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--_hta-child"]:
        return hta_child(argv[1], argv[2])
    if argv[:1] == ["--_rusage-wrap"]:
        return rusage_wrap(argv[1], argv[3:])

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="100,1024", help="comma-separated MiB (default 100,1024)")
    p.add_argument("--size-mb", type=float, help="one size, MiB (overrides --sizes)")
    p.add_argument("--trace", help="use this existing trace (.json or .json.gz) instead")
    p.add_argument("--formats", default="json,gz",
                   help="which copies of each generated trace to analyse (default json,gz)")
    p.add_argument("--hta", dest="hta", action="store_true", default=True)
    p.add_argument("--no-hta", dest="hta", action="store_false")
    p.add_argument("--cprof", dest="cprof", action="store_true", default=True)
    p.add_argument("--no-cprof", dest="cprof", action="store_false")
    p.add_argument("--repeats", type=int, default=3, help="cprof runs per file (median)")
    p.add_argument("--hta-repeats", type=int, default=1, help="HTA runs per file (median)")
    p.add_argument("--hta-python", default=sys.executable,
                   help="interpreter for the HTA child (e.g. a venv with another pandas)")
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--timeout", type=int, default=900, help="seconds per child run")
    p.add_argument("--mem-limit-gb", type=float, default=20.0,
                   help="RLIMIT_AS of each child, GiB (0: none)")
    p.add_argument("--rss-limit-gb", type=float, default=None,
                   help="kill a child whose RSS passes this (default: min(AS limit, "
                        "available - 1.5 GiB))")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=10,
                   help="ProfilerSteps per generated trace; each step is gradient accumulation "
                        "over as many micro-batches as fill the size (default 10; 0: one "
                        "micro-batch per step, ~1 MB each, so ~1000 steps at 1 GiB)")
    p.add_argument("--layers", type=int, default=12, help="transformer blocks (default 12)")
    p.add_argument("--tmpdir", help="parent directory for the generated files")
    p.add_argument("--keep", action="store_true", help="keep the generated files")
    p.add_argument("--json", help="write every result (and the machine) as JSON here")
    a = p.parse_args(argv)

    sys.path.insert(0, HERE)
    import make_trace

    mem_limit = int(a.mem_limit_gb * GB) if a.mem_limit_gb else 0
    avail = mem_available()
    if a.rss_limit_gb is not None:
        rss_limit = int(a.rss_limit_gb * GB)
    else:
        cands = [x for x in (mem_limit, (avail - int(1.5 * GB)) if avail else 0) if x]
        rss_limit = min(cands) if cands else 0
    machine = machine_info()
    print("machine: %s" % json.dumps(machine), flush=True)
    print("limits per child: RLIMIT_AS %s, RSS watchdog %s, timeout %d s"
          % ("%.1f GiB" % (mem_limit / GB) if mem_limit else "none",
             "%.1f GiB" % (rss_limit / GB) if rss_limit else "none", a.timeout), flush=True)

    use_cprof = False
    cprof_note = "disabled (--no-cprof)"
    if a.cprof:
        use_cprof, why = cprof_available()
        cprof_note = "ok" if use_cprof else "NOT AVAILABLE YET (`python -m cprof report " \
                                             "--help` %s); measuring HTA only" % why
        print("cprof report: %s" % cprof_note, flush=True)
    hta_note = "disabled (--no-hta)"
    if a.hta:
        try:
            import importlib.util
            ok = importlib.util.find_spec("hta") is not None
        except Exception:  # noqa: BLE001
            ok = False
        hta_note = "ok" if ok else "NOT INSTALLED (run scripts/install_hta.sh)"
        if a.hta_python != sys.executable:
            hv = subprocess.run([a.hta_python, "-c", "import pandas, numpy, hta; "
                                 "print(pandas.__version__, numpy.__version__)"],
                                capture_output=True, text=True)
            ok = hv.returncode == 0
            hta_note = ("ok, run by %s (pandas %s, numpy %s)" % ((a.hta_python,) + tuple(
                hv.stdout.split()[:2])) if ok else "NOT IMPORTABLE by %s" % a.hta_python)
            machine["hta_python"] = a.hta_python
            machine["hta_pandas"] = hv.stdout.split()[0] if ok else None
        print("HTA: %s %s" % (hta_note, machine.get("hta") or ""), flush=True)
        a.hta = ok

    root = tempfile.mkdtemp(prefix="bench_report_", dir=a.tmpdir)
    print("work dir: %s" % root, flush=True)
    results = {"machine": machine, "cprof": cprof_note, "hta": hta_note, "files": [],
               "runs": [], "args": vars(a)}
    try:
        # -- the files -----------------------------------------------------------------------
        files = []  # (size label, fmt, path, events)
        if a.trace:
            src = os.path.abspath(a.trace)
            fmtname = "gz" if src.endswith(".gz") else "json"
            d = os.path.join(root, "given")
            os.makedirs(d)
            link = os.path.join(d, "rank0.pt.trace.json" + (".gz" if fmtname == "gz" else ""))
            os.symlink(src, link)
            ev = count_events(src) if fmtname == "json" else None
            info = {"path": src, "format": fmtname, "file_bytes": os.path.getsize(src),
                    "events": ev}
            results["files"].append(info)
            files.append(("%.1f (file)" % (os.path.getsize(src) / MB), fmtname, link, ev,
                          os.path.getsize(src)))
        else:
            sizes = [a.size_mb] if a.size_mb else [float(s) for s in a.sizes.split(",") if s]
            fmts = [f.strip() for f in a.formats.split(",") if f.strip()]
            for size in sizes:
                label = "%g" % size
                djson = os.path.join(root, "s%s" % label, "json")
                os.makedirs(djson)
                path = os.path.join(djson, "rank0.pt.trace.json")
                print("\n== generating %s MiB trace ==" % label, flush=True)
                s = make_trace.write_rank(path, size, 0, 1, a.seed, a.layers, False, 1.0, 1.0,
                                          steps=a.steps or None)
                info = {"size_mb": size, "json": path, "json_bytes": s["json_bytes"],
                        "events": s["events"], "steps": s["steps"],
                        "micro_batches_per_step": s["micro_batches_per_step"],
                        "generate_s": s["seconds"], "ground_truth": {
                            "gpu_busy_ns_by_stream": s["gpu_busy_ns_by_stream"],
                            "gpu_span_ns": s["gpu_span_ns"],
                            "kernel_names": len(s["kernels"]),
                            "kernel_total_ns": sum(v["total_ns"] for v in s["kernels"].values()),
                        }}
                if "json" in fmts:
                    files.append((label, "json", path, s["events"], s["json_bytes"]))
                if "gz" in fmts:
                    dgz = os.path.join(root, "s%s" % label, "gz")
                    os.makedirs(dgz)
                    gz = os.path.join(dgz, "rank0.pt.trace.json.gz")
                    t = time.perf_counter()
                    gzip_copy(path, gz)
                    info["gzip_s"] = time.perf_counter() - t
                    info["gz"] = gz
                    info["gz_bytes"] = os.path.getsize(gz)
                    print("gzip -1 copy: %.1f MB in %.1f s" % (info["gz_bytes"] / MB,
                                                              info["gzip_s"]), flush=True)
                    files.append((label, "gz", gz, s["events"], info["gz_bytes"]))
                results["files"].append(info)

        # -- the runs ------------------------------------------------------------------------
        for label, fmtname, path, events, fbytes in files:
            if use_cprof:
                print("\n== cprof report: %s MiB %s (%d runs) ==" % (label, fmtname, a.repeats),
                      flush=True)
                for i in range(a.repeats):
                    cmd = [sys.executable, "-m", "cprof", "report", path, "--format", "json",
                           "--top", str(a.top)]
                    read_s = warm(path)
                    r = measure(cmd, root, "cprof_%s_%s_%d" % (label, fmtname, i), a.timeout,
                                mem_limit, rss_limit)
                    r["read_before_s"] = read_s
                    r.update(tool="cprof", size=label, format=fmtname, events=events,
                             file_bytes=fbytes, repeat=i)
                    if r["status"] == "ok":
                        try:
                            with open(r["stdout"]) as f:
                                out = json.load(f)
                            r["output_keys"] = list(out)[:20] if isinstance(out, dict) else \
                                type(out).__name__
                        except ValueError as e:
                            r["status"] = "ok, but stdout is not JSON (%s)" % e
                        r["stdout_bytes"] = os.path.getsize(r["stdout"])
                    results["runs"].append(r)
                    print("  run %d: %s, %.2f s, peak RSS %s MB" % (
                        i, r["status"], r["wall_s"], fmt(r["maxrss_mb"], 0)), flush=True)
                    if r["status"] != "ok":
                        print("  " + r["stderr_tail"][-800:].replace("\n", "\n  "), flush=True)
                        break
            if a.hta:
                hdir = os.path.dirname(path)
                print("\n== HTA: %s MiB %s (%d run%s) ==" % (label, fmtname, a.hta_repeats,
                                                            "s" if a.hta_repeats > 1 else ""),
                      flush=True)
                for i in range(a.hta_repeats):
                    tag = "hta_%s_%s_%d" % (label, fmtname, i)
                    res_path = os.path.join(root, tag + ".result.json")
                    cmd = [a.hta_python, os.path.abspath(__file__), "--_hta-child", hdir,
                           res_path]
                    read_s = warm(path)
                    r = measure(cmd, root, tag, a.timeout, mem_limit, rss_limit)
                    r["read_before_s"] = read_s
                    r.update(tool="HTA", size=label, format=fmtname, events=events,
                             file_bytes=fbytes, repeat=i)
                    try:
                        with open(res_path) as f:
                            child = json.load(f)
                    except (OSError, ValueError):
                        child = {}
                    r["hta"] = child
                    if child.get("status") == "oom":
                        r["status"] = "OOM (MemoryError under RLIMIT_AS %.0f GiB) during %s" % (
                            mem_limit / GB, child.get("phase"))
                    elif r["status"] == "ok" and child.get("status") != "ok":
                        r["status"] = "failed (child status %s)" % child.get("status")
                    elif r["status"] != "ok" and child.get("phase"):
                        r["status"] += " during %s" % child["phase"]
                    results["runs"].append(r)
                    ph = child.get("phases", {})
                    print("  run %d: %s, %.1f s, peak RSS %s MB; phases: %s" % (
                        i, r["status"], r["wall_s"], fmt(r["maxrss_mb"], 0),
                        ", ".join("%s %.2f s" % kv for kv in ph.items())), flush=True)
                    if r["status"] != "ok":
                        print("  " + r["stderr_tail"][-800:].replace("\n", "\n  "), flush=True)
                        break
    finally:
        if a.json:
            with open(a.json, "w") as f:
                json.dump(results, f, indent=1, default=str)
        if a.keep:
            print("\nkept: %s" % root)
        else:
            shutil.rmtree(root, ignore_errors=True)

    print_tables(results, a)
    return 0


def print_tables(results, a):
    runs = results["runs"]
    print("\n## Trace files\n")
    print("| size MiB | events | steps | micro-batches/step | generate s | gzip -1 s | .gz MB |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for fi in results["files"]:
        print("| %s | %s | %s | %s | %s | %s | %s |" % (
            fmt(fi.get("size_mb"), 0) if fi.get("size_mb") else
            "%.1f (file)" % (fi.get("file_bytes", 0) / MB), fi.get("events") or "-",
            fi.get("steps", "-"),
            fi.get("micro_batches_per_step", "-"),
            fmt(fi.get("generate_s"), 1), fmt(fi.get("gzip_s"), 1),
            fmt(fi["gz_bytes"] / MB, 1) if fi.get("gz_bytes") else "-"))

    hta_runs = [r for r in runs if r["tool"] == "HTA"]
    if hta_runs:
        print("\n## HTA phases (s)\n")
        print("| size MiB | format | status | import | load (TraceAnalysis) | kernel breakdown "
              "| temporal breakdown | idle breakdown | rows parsed |")
        print("|---:|---|---|---:|---:|---:|---:|---:|---:|")
        for r in hta_runs:
            ph = r["hta"].get("phases", {})
            rows = r["hta"].get("rows")
            print("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                r["size"], r["format"], r["status"], fmt(ph.get("import")),
                fmt(ph.get("load")), fmt(ph.get("kernel_breakdown")),
                fmt(ph.get("temporal_breakdown")), fmt(ph.get("idle_breakdown")),
                sum(rows.values()) if rows else "-"))

    print("\n## cprof report vs HTA: wall time and peak memory\n")
    print("cprof: `%s -m cprof report TRACE --format json --top %d` (%s)" % (
        os.path.basename(sys.executable), a.top, results["cprof"]))
    print("HTA: `TraceAnalysis(trace_dir=DIR)` + get_gpu_kernel_breakdown() + "
          "get_temporal_breakdown() + get_idle_time_breakdown(), visualize=False (%s)\n"
          % results["hta"])
    print("| size MiB | events | format | tool | runs | status | wall s (median) | min-max s "
          "| peak RSS MB | HTA/cprof wall | HTA/cprof RSS |")
    print("|---:|---:|---|---|---:|---|---:|---:|---:|---:|---:|")
    keys = []
    for r in runs:
        k = (r["size"], r["format"])
        if k not in keys:
            keys.append(k)
    for size, fmtname in keys:
        agg = {}
        for tool in ("cprof", "HTA"):
            rs = [r for r in runs if r["tool"] == tool and r["size"] == size
                  and r["format"] == fmtname]
            if not rs:
                continue
            ok = [r for r in rs if r["status"] == "ok"]
            walls = [r["wall_s"] for r in ok]
            rss = [r["maxrss_mb"] or r["sampled_peak_rss_mb"] for r in ok]
            agg[tool] = {"rs": rs, "wall": statistics.median(walls) if walls else None,
                         "min": min(walls) if walls else None,
                         "max": max(walls) if walls else None,
                         "rss": max(rss) if rss else None,
                         "status": "ok" if len(ok) == len(rs) else
                         "; ".join(sorted({r["status"] for r in rs if r["status"] != "ok"}))}
        for tool, g in agg.items():
            ratio_w = ratio_m = "-"
            if tool == "HTA" and "cprof" in agg and agg["cprof"]["wall"] and g["wall"]:
                ratio_w = "%.1fx" % (g["wall"] / agg["cprof"]["wall"])
                if agg["cprof"]["rss"] and g["rss"]:
                    ratio_m = "%.1fx" % (g["rss"] / agg["cprof"]["rss"])
            if tool == "HTA" and "cprof" not in agg:
                ratio_w = ratio_m = "n/a (no cprof)"
            bad = [r for r in g["rs"] if r["status"] != "ok"]
            rss_txt = fmt(g["rss"], 0)
            if g["rss"] is None and bad:
                rss_txt = ">= %s (sampled)" % fmt(max(r["sampled_peak_rss_mb"] for r in bad), 0)
            print("| %s | %s | %s | %s | %d | %s | %s | %s | %s | %s | %s |" % (
                size, g["rs"][0]["events"] or "-", fmtname, tool, len(g["rs"]), g["status"],
                fmt(g["wall"]), "%s-%s" % (fmt(g["min"]), fmt(g["max"])) if g["min"] else "-",
                rss_txt, ratio_w, ratio_m))
    m = results["machine"]
    print("\nMachine: %s, %s cores (%s usable), %s GiB RAM, Linux %s; Python %s, torch %s, "
          "HTA %s (parser backend: json, its 0.5.0 default; ijson %s), pandas %s, numpy %s, "
          "cprof %s at %s; %s. Each file is read once just before each run (page cache "
          "warm). Peak RSS: /usr/bin/time -v maximum resident set size." % (
              m["cpu_model"], m["cores"], m["cores_usable"], m["mem_gib"], m["kernel"],
              m["python"], m["torch"], m["hta"], m["ijson"] or "not installed", m["pandas"],
              m["numpy"], m["cprof"], m["cprof_commit"], m["date"]))
    if m.get("hta_python"):
        print("HTA ran under %s (pandas %s)." % (m["hta_python"], m.get("hta_pandas")))


if __name__ == "__main__":
    sys.exit(main())
