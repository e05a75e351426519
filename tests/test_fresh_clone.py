"""The README's main command works from a fresh clone of the committed tree."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_example_command_from_fresh_clone(tmp_path):
    if not shutil.which("git") or not os.path.isdir(os.path.join(ROOT, ".git")):
        pytest.skip("not a git checkout")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", ROOT, str(clone)], check=True)
    env = dict(os.environ, CPROF_PROFILER_DIR=str(tmp_path / "traces"))
    # build in the clone, but leave the machine's installed cprof alone
    subprocess.run(["python3", "setup.py", "-q", "build_ext", "--inplace"], cwd=clone, check=True,
                   capture_output=True)
    r = subprocess.run(["python3", "examples/train_mlp.py", "--steps", "3"], cwd=clone,
                       env=dict(env, PYTHONPATH=str(clone)), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "trace:" in r.stdout and "train_step" in r.stdout
    traces = list((tmp_path / "traces").glob("train_mlp*.trace.json.gz"))
    assert len(traces) == 1
