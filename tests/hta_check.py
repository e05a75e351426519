"""Check that Holistic Trace Analysis (HTA, PyPI `holistictraceanalysis`) loads a trace file.

Self-contained pytest helper. Usage from a test:

    from hta_check import load_with_hta, count
    ok, d = load_with_hta("/path/to/trace.json.gz")
    assert ok, d["error"]
    assert count(d, name="aten::mm", cat="cpu_op") == 2

`load_with_hta` copies the trace into a fresh temp dir as `rank<N>.pt.trace.json[.gz]`
(the suffix is chosen from the file's gzip magic bytes, not from its name), then runs
`hta.trace_analysis.TraceAnalysis(trace_dir=<tmp>)` exactly as a user would, in a child
Python process by default (isolates HTA's logging, env options, fork pool and any hang;
gives a timeout). It returns (ok, details); details is a JSON-able dict:

  ok, error, traceback_tail        -- error is "ExcType: msg" when loading failed
  hta_version, pandas_version
  import_s, load_s, total_s        -- HTA import time, TraceAnalysis() time, wall time
  file_name                        -- name the trace was given in the temp dir
  rank_regex_rank                  -- rank HTA's own regex r'"rank":\\s+(\\d+)' finds (None: not found,
                                      HTA then logs an error-ish warning and assumes rank 0)
  ranks                            -- ranks HTA loaded
  meta_keys                        -- top-level keys HTA kept as metadata (all but traceEvents)
  n_events                         -- rows HTA kept (events with both "cat" and "dur", cat != "Trace")
  counts                           -- {"<cat>|<name>": n}
  events                           -- [{name, cat, ts, dur, pid, tid, external_id, iteration}] (ts aligned
                                      so the first event is 0; ts/dur rounded by HTA unless
                                      disable_ns_rounding=True)
  start_unixtime_ns                -- baseTimeNanoseconds + min(ts)*1000, or an error string
  log                              -- HTA log lines (WARNING and up)
  validate                         -- hta.utils.validate_trace.validate_trace_format(...) result

Notes (see NOTES.md): needs `pip install holistictraceanalysis psutil` (psutil is an
undeclared dependency of HTA 0.5.0). Loading works with pandas 2.x; with pandas 3.1 HTA 0.5.0
fails on some GPU traces (`TypeError: Invalid value ... for dtype 'int16'` in
transform_correlation_to_index, when the largest correlation id fits a smaller integer type
than the row count: seen on synthetic 10-30 MB traces, see benchmarks/bench_report.py
--hta-python), not on the traces this check loads.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import Any, Dict, Optional, Tuple

_MARK = "@@HTA_CHECK_RESULT@@"

# The code run in the child process (or in-process with isolated=False).
_CHILD = r'''
import json, sys, time, logging, io, traceback, warnings, os
warnings.filterwarnings("ignore")
args = json.loads(sys.argv[1])
res = {"ok": False}
buf = io.StringIO()
h = logging.StreamHandler(buf); h.setLevel(logging.WARNING)
h.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
try:
    t0 = time.perf_counter()
    from hta.trace_analysis import TraceAnalysis
    import hta, pandas
    res["import_s"] = round(time.perf_counter() - t0, 3)
    res["hta_version"] = getattr(getattr(hta, "version", None), "__version__", None) or getattr(hta, "__version__", None)
    res["pandas_version"] = pandas.__version__
    lg = logging.getLogger("hta"); lg.addHandler(h)
    t1 = time.perf_counter()
    a = TraceAnalysis(trace_dir=args["trace_dir"], include_last_profiler_step=args["include_last"])
    res["load_s"] = round(time.perf_counter() - t1, 3)
    res["ranks"] = [int(r) for r in a.t.get_ranks()]
    res["files"] = {int(k): os.path.basename(v) for k, v in a.t.trace_files.items()}
    a.t.decode_symbol_ids(use_shorten_name=False)
    def py(v):
        if hasattr(v, "item"):
            v = v.item()
        if isinstance(v, float) and v != v:
            return None
        return v
    events, counts = [], {}
    for r in res["ranks"]:
        df = a.t.get_trace(r)
        res.setdefault("meta_keys", sorted(a.t.meta_data[r].keys()))
        cols = {"name": "s_name", "cat": "s_cat", "ts": "ts", "dur": "dur", "pid": "pid",
                "tid": "tid", "external_id": "external_id", "iteration": "iteration", "stream": "stream"}
        cols = {k: v for k, v in cols.items() if v in df.columns}
        for row in df[list(cols.values())].itertuples(index=False):
            e = {k: py(v) for k, v in zip(cols.keys(), row)}
            e["rank"] = r
            events.append(e)
            key = f'{e.get("cat")}|{e.get("name")}'
            counts[key] = counts.get(key, 0) + 1
    res["events"] = events
    res["counts"] = counts
    res["n_events"] = len(events)
    try:
        res["start_unixtime_ns"] = int(a.t.get_trace_start_unixtime_ns(res["ranks"][0]))
    except Exception as e:
        res["start_unixtime_ns"] = f"{type(e).__name__}: {e}"
    try:
        from hta.utils.validate_trace import validate_trace_format
        vok, verr = validate_trace_format(args["trace_file"], level="standard")
        res["validate"] = {"ok": bool(vok), "errors": {k: str(v) for k, v in verr.items()}}
    except Exception as e:
        res["validate"] = {"ok": None, "errors": {"exception": f"{type(e).__name__}: {e}"}}
    res["ok"] = len(res["ranks"]) > 0
    if not res["ok"]:
        res["error"] = "HTA loaded no ranks"
except BaseException as e:
    res["error"] = f"{type(e).__name__}: {e}"
    res["traceback_tail"] = traceback.format_exc().strip().splitlines()[-6:]
res["log"] = [l for l in buf.getvalue().splitlines() if l.strip()][:50]
print(MARK + json.dumps(res, default=str))
'''.replace("MARK", repr(_MARK))

_RANK_RE = re.compile(r'"rank":\s+(\d+)')  # the regex HTA 0.5.0 uses (hta/common/trace_file.py)


def _is_gzip(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def _hta_rank_regex(path: str) -> Optional[int]:
    """Mimic HTA: scan line by line, first line containing a match wins."""
    opener = gzip.open if _is_gzip(path) else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        for line in f:
            m = _RANK_RE.search(line)
            if m:
                return int(m.group(1))
    return None


def hta_available(python: Optional[str] = None) -> bool:
    code = "import hta.trace_analysis, psutil"
    r = subprocess.run([python or sys.executable, "-c", code], capture_output=True)
    return r.returncode == 0


def load_with_hta(
    trace_path: str,
    *,
    rank: Optional[int] = None,
    include_last_profiler_step: bool = True,
    disable_ns_rounding: bool = False,
    isolated: bool = True,
    timeout_s: float = 300.0,
    python: Optional[str] = None,
) -> Tuple[bool, Dict[str, Any]]:
    """Load `trace_path` with HTA the way a user would; return (ok, details).

    rank: name the copy rank<rank>.pt.trace.json[.gz]; default: the rank HTA's regex finds, else 0.
    include_last_profiler_step: HTA drops everything at/after the start of the last
        ProfilerStep#N (when there are >= 2) unless this is True; with True it still drops
        events starting after the last ProfilerStep ends.
    disable_ns_rounding: set HTA_DISABLE_NS_ROUNDING=1 (keep float ts/dur as written instead of
        ceil(ts)/floor(ts+dur), which makes sub-microsecond events dur 0 or -1).
    isolated: run HTA in a child process (default; needed for timeout and to keep HTA's
        env/logging out of the test process).
    """
    t_start = time.perf_counter()
    details: Dict[str, Any] = {"ok": False, "trace_path": trace_path}
    if not os.path.isfile(trace_path):
        details["error"] = f"FileNotFoundError: {trace_path}"
        return False, details
    found_rank = _hta_rank_regex(trace_path)
    details["rank_regex_rank"] = found_rank
    use_rank = rank if rank is not None else (found_rank if found_rank is not None else 0)
    suffix = ".pt.trace.json.gz" if _is_gzip(trace_path) else ".pt.trace.json"
    tmp = tempfile.mkdtemp(prefix="hta_check_")
    try:
        dst = os.path.join(tmp, f"rank{use_rank}{suffix}")
        shutil.copyfile(trace_path, dst)
        details["file_name"] = os.path.basename(dst)
        args = {"trace_dir": tmp, "trace_file": dst, "include_last": include_last_profiler_step}
        env = dict(os.environ)
        env["HTA_DISABLE_NS_ROUNDING"] = "1" if disable_ns_rounding else "0"
        if isolated:
            try:
                r = subprocess.run(
                    [python or sys.executable, "-c", _CHILD, json.dumps(args)],
                    capture_output=True, text=True, timeout=timeout_s, env=env, cwd=tmp,
                )
            except subprocess.TimeoutExpired:
                details["error"] = f"TimeoutExpired: HTA took more than {timeout_s}s"
                return False, details
            lines = [l for l in r.stdout.splitlines() if l.startswith(_MARK)]
            if not lines:
                details["error"] = f"child exited rc={r.returncode} without a result"
                details["stderr_tail"] = r.stderr[-3000:]
                return False, details
            details.update(json.loads(lines[-1][len(_MARK):]))
        else:
            old = os.environ.get("HTA_DISABLE_NS_ROUNDING")
            os.environ["HTA_DISABLE_NS_ROUNDING"] = env["HTA_DISABLE_NS_ROUNDING"]
            import contextlib
            import io as _io
            out = _io.StringIO()
            saved_argv = sys.argv
            try:
                sys.argv = ["hta_check", json.dumps(args)]
                with contextlib.redirect_stdout(out):
                    exec(compile(_CHILD, "<hta_check_child>", "exec"), {"__name__": "hta_check_child"})
            finally:
                sys.argv = saved_argv
                if old is None:
                    os.environ.pop("HTA_DISABLE_NS_ROUNDING", None)
                else:
                    os.environ["HTA_DISABLE_NS_ROUNDING"] = old
            lines = [l for l in out.getvalue().splitlines() if l.startswith(_MARK)]
            details.update(json.loads(lines[-1][len(_MARK):]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    details["total_s"] = round(time.perf_counter() - t_start, 3)
    return bool(details.get("ok")), details


_CPA_CHILD = r'''
import json, sys, warnings, traceback
warnings.filterwarnings("ignore")
args = json.loads(sys.argv[1])
res = {}
try:
    from hta.trace_analysis import TraceAnalysis
    a = TraceAnalysis(trace_dir=args["trace_dir"])
    graph, ok = a.critical_path_analysis(rank=0, annotation=args["annotation"], instance_id=0)
    res["ok"] = bool(ok)
    edges = {}
    for _, _, data in graph.edges(data=True):
        kind = str(getattr(data.get("object"), "type", "?")).split(".")[-1]
        edges[kind] = edges.get(kind, 0) + 1
    res["edges"] = edges
except BaseException as e:
    res["ok"] = False
    res["error"] = f"{type(e).__name__}: {e}"
    res["traceback_tail"] = traceback.format_exc().strip().splitlines()[-6:]
print(MARK + json.dumps(res))
'''.replace("MARK", repr(_MARK))


def critical_path_edges(trace_path: str, annotation: str,
                        timeout_s: float = 300.0) -> Dict[str, Any]:
    """HTA's critical path analysis of the first `annotation` range of a one-rank trace, in a
    child process: {"ok", "edges": {edge type: count}} or {"ok": False, "error"}."""
    suffix = ".pt.trace.json.gz" if _is_gzip(trace_path) else ".pt.trace.json"
    tmp = tempfile.mkdtemp(prefix="hta_cpa_")
    try:
        shutil.copyfile(trace_path, os.path.join(tmp, "rank0" + suffix))
        args = {"trace_dir": tmp, "annotation": annotation}
        r = subprocess.run([sys.executable, "-c", _CPA_CHILD, json.dumps(args)],
                           capture_output=True, text=True, timeout=timeout_s, cwd=tmp)
        lines = [l for l in r.stdout.splitlines() if l.startswith(_MARK)]
        if not lines:
            return {"ok": False, "error": f"child exited rc={r.returncode}",
                    "stderr_tail": r.stderr[-3000:]}
        return json.loads(lines[-1][len(_MARK):])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def count(details: Dict[str, Any], name: Optional[str] = None, cat: Optional[str] = None) -> int:
    """Number of events HTA kept with the given name and/or cat (None = any)."""
    return sum(
        1 for e in details.get("events", [])
        if (name is None or e.get("name") == name) and (cat is None or e.get("cat") == cat)
    )


def summary(details: Dict[str, Any]) -> str:
    keys = ["ok", "error", "file_name", "rank_regex_rank", "ranks", "n_events", "import_s",
            "load_s", "total_s", "hta_version", "pandas_version"]
    c = Counter(details.get("counts", {})).most_common(15)
    return json.dumps({k: details.get(k) for k in keys}, default=str) + f"\ncounts: {c}\nlog: {details.get('log', [])[:8]}"


# --------------------------------------------------------------------------------------
# Example tests (pytest /tmp/hta_notes/hta_check.py -q)
# --------------------------------------------------------------------------------------
