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
        # torch.profiler's other members: the process groups and their configs
        info = t["distributedInfo"]
        assert info["pg_count"] >= 1 and isinstance(info["pg_config"], list), info
        assert info["pg_config"] and "pg_name" in info["pg_config"][0], info
        assert list(info)[:3] == ["backend", "rank", "world_size"]


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


def _observer_built():
    try:
        from cprof import _torch_ops  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _observer_built(), reason="cprof._torch_ops is not built")
def test_collectives_are_ranges_as_torch_profiler_writes_them(run_dir):
    """gloo:all_reduce / gloo:barrier: the async user-scope ranges the process group opens
    around each collective, on the thread that runs it (gloo's worker), each within the
    window, as torch.profiler writes them, whether operators are recorded or not."""
    t = load_trace(run_dir / "dist-rank0.trace.json.gz")
    ev = ranges_of(t)
    coll = [e for e in ev if e["name"].startswith("gloo:")]
    assert {e["name"] for e in coll} == {"gloo:all_reduce", "gloo:barrier"}, coll
    assert all(e["cat"] == "user_annotation" and e["dur"] > 0 for e in coll), coll
    main = [e for e in ev if e["name"] == "after_barrier"]
    assert main and {e["tid"] for e in coll}.isdisjoint({e["tid"] for e in main})
    (win,) = [e for e in t["traceEvents"] if e.get("cat") == "Trace"]
    for e in coll:
        assert win["ts"] <= e["ts"] and e["ts"] + e["dur"] <= win["ts"] + win["dur"] + 1
    names = {e["tid"]: e["args"]["name"] for e in t["traceEvents"]
             if e.get("ph") == "M" and e["name"] == "thread_name"}
    assert all("gloo" in names.get(e["tid"], "") for e in coll), names
    # the ranks=[0]-gated window's barrier is there too; the cprof.profile windows had one
    # all_reduce per active step
    tb = sorted(os.listdir(run_dir / "tb"))
    t = load_trace(run_dir / "tb" / tb[0])
    assert [e["name"] for e in ranges_of(t) if e["name"].startswith("gloo:")] == \
        ["gloo:all_reduce"] * 2


@pytest.mark.parametrize("sub", ["runprof_launcher", "runprof_store"])
def test_every_rank_profiler_shares_one_run_directory(run_dir, sub):
    """collect_on_rank0_only=False with no run_name: one {run_name}/ for the job (each rank
    used to name its own, pid included), with each rank's files beside rank 0's."""
    runs = os.listdir(run_dir / sub)
    assert len(runs) == 1, runs
    assert sorted(os.listdir(run_dir / sub / runs[0])) == [
        "config-rank1.json", "config.json", "report-rank1.md", "report.md",
        "summary-rank1.json", "summary.json"]
