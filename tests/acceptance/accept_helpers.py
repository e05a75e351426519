"""Helpers of the outsider acceptance tests (tests/acceptance): written black-box from the
seeds and the issue texts, against the public interface only, by a session that had not read
cprof's own tests; kept here so CI runs them. CLONE: the repository root."""
import gzip
import json
import os
import subprocess
import sys

CLONE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if CLONE not in sys.path:
    sys.path.insert(0, CLONE)


def load_trace(path):
    path = str(path)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def run_py(code, cwd=None, env=None, timeout=180):
    e = dict(os.environ)
    e["PYTHONPATH"] = CLONE + os.pathsep + e.get("PYTHONPATH", "")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        e.pop(k, None)
    if env:
        e.update(env)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=e, capture_output=True,
                          text=True, timeout=timeout)
