"""Multi-rank under torchrun: 2 processes, gloo on CPU (tests/torchrun_two_ranks.py)."""
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, load_trace, ranges_of

pytest.importorskip("torch.distributed")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("torchrun")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(k, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone",
           os.path.join(ROOT, "tests", "torchrun_two_ranks.py"), str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def test_each_rank_writes_its_own_file(run_dir):
    for rank in (0, 1):
        t = load_trace(run_dir / f"dist-rank{rank}.trace.json.gz")
        assert t["distributedInfo"]["rank"] == rank
        assert t["distributedInfo"]["world_size"] == 2
        assert t["distributedInfo"]["backend"] == "gloo"
        assert "after_barrier" in [e["name"] for e in ranges_of(t)]


def test_ranks_clocks_are_comparable(run_dir):
    starts = []
    for rank in (0, 1):
        t = load_trace(run_dir / f"dist-rank{rank}.trace.json.gz")
        (ev,) = [e for e in ranges_of(t) if e["name"] == "after_barrier"]
        starts.append(t["baseTimeNanoseconds"] / 1e3 + ev["ts"])  # Unix microseconds
    # both ranks leave the same barrier: their absolute times agree to well under 100 ms
    assert abs(starts[0] - starts[1]) < 100_000, starts


def test_tensorboard_handler_per_rank(run_dir):
    files = sorted(os.listdir(run_dir / "tb"))
    assert len(files) == 2
    assert files[0].startswith("rank0.") and files[1].startswith("rank1.")
    for f in files:
        t = load_trace(run_dir / "tb" / f)
        names = [e["name"] for e in ranges_of(t)]
        assert {"ProfilerStep#1", "ProfilerStep#2", "train_step1", "train_step2"} <= set(names)
        assert "train_step0" not in names


def test_rank_gating(run_dir):
    names = os.listdir(run_dir)
    assert any(n.startswith("only0-rank0") for n in names)
    assert not any(n.startswith("only0-rank1") for n in names)
