"""Inputs that once crashed cprof (found by scripts/fuzz.sh or by the sanitized suite,
scripts/sanitize.sh), kept in tests/fuzz/regressions/<harness>/ and replayed here through the
Python API. Each runs in a subprocess, so a crash fails its test instead of the run. Under the
normal build only a crash or a hang shows; run under scripts/sanitize.sh, the undefined
behaviour and memory errors these inputs once caused fail the test too.

trace_report/: bytes for `cprof report` (cprof._C.trace_report_bytes): a report (valid JSON) or
cprof.TraceFormatError, with the options `cprof report` uses and with the harness's others.
trace_merge/: one or two traces (split at "\\n@@\\n", as tests/fuzz/fuzz_trace_merge.c does)
merged as ranks 0 and 1 (cprof._C.trace_merge); the merged trace must read back."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

REG = os.path.join(ROOT, "tests", "fuzz", "regressions")


def inputs(harness):
    d = os.path.join(REG, harness)
    names = sorted(os.listdir(d)) if os.path.isdir(d) else []
    return [pytest.param(os.path.join(d, n), id=n) for n in names]


REPORT_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import cprof
import cprof._C as C
data = open(sys.argv[2], "rb").read()
out = []
for kw in ({}, dict(top=1, short_gap_us=0, small_copy_bytes=0, bins=1, step_name="step")):
    try:
        json.loads(C.trace_report_bytes(data, **kw))
        out.append("report")
    except cprof.TraceFormatError as e:
        assert str(e), "a TraceFormatError without a message"
        out.append("format error")
print(json.dumps(out))
"""

MERGE_CHILD = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
import cprof
import cprof._C as C
data, tmp = open(sys.argv[2], "rb").read(), sys.argv[3]
parts = data.split(b"\n@@\n", 1)
if len(parts) == 1:
    parts = parts * 2
paths = []
for i, p in enumerate(parts):
    paths.append(os.path.join(tmp, "rank%d.json" % i))
    with open(paths[-1], "wb") as f:
        f.write(p)
out = os.path.join(tmp, "merged.json")
try:
    C.trace_merge(paths, out, ranks=[0, 1], gzip=0)
except cprof.TraceFormatError as e:
    assert str(e)
    print(json.dumps("format error"))
    sys.exit(0)
json.loads(C.trace_report(out))  # the merged trace reads back
print(json.dumps("merged"))
"""


def run_child(code, *args):
    r = subprocess.run([sys.executable, "-c", code, ROOT, *map(str, args)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr[-6000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("path", inputs("trace_report"))
def test_report_regression_input(path):
    assert all(o in ("report", "format error") for o in run_child(REPORT_CHILD, path))


@pytest.mark.parametrize("path", inputs("trace_merge"))
def test_merge_regression_input(path, tmp_path):
    assert run_child(MERGE_CHILD, path, tmp_path) in ("merged", "format error")
    # and the file as it is through `cprof report` (the trace_report harness sees these bytes too)
    assert all(o in ("report", "format error") for o in run_child(REPORT_CHILD, path))


def test_regression_dirs_are_not_empty():
    """The harness directories scripts/fuzz.sh replays exist and hold inputs."""
    for h in ("trace_report", "trace_merge"):
        assert inputs(h), h
