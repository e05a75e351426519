"""Multi-rank behaviour found by the seed-workflow audit (torchrun, 2 ranks, gloo on CPU)."""
import pytest


def _one_run(prof):
    prof.begin_run(bsz=1, label="decode")
    for _ in range(2):
        with prof.step_timing_ctx():
            prof.set_step_tokens(1)
    prof.end_run()


def test_per_run_line_names_the_rank_when_every_rank_collects(tmp_path, monkeypatch, capsys):
    """With collect_on_rank0_only=False each rank prints its per-run line to the same
    console: the line says which rank it is (decision 171)."""
    import cprof
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    prof = cprof.Profiler(cprof.ProfilerConfig(output_dir=str(tmp_path), run_name="r",
                                               collect_on_rank0_only=False, warmup_runs=0))
    _one_run(prof)
    out = capsys.readouterr().out
    assert "cprof: rank 1: run 0 decode: 2 steps" in out


def test_per_run_line_unchanged_in_one_process(tmp_path, monkeypatch, capsys):
    import cprof
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    prof = cprof.Profiler(cprof.ProfilerConfig(output_dir=str(tmp_path), run_name="r",
                                               warmup_runs=0))
    _one_run(prof)
    out = capsys.readouterr().out
    assert "cprof: run 0 decode: 2 steps" in out
    assert "rank" not in out


def _rank_trace(path, rank, step_us, coll_us, steps=range(4)):
    import json
    ev = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
    t = 1000.0
    for i in steps:
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1,
                   "tid": 1, "ts": t, "dur": step_us})
        ev.append({"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1,
                   "tid": 1, "ts": t + step_us - coll_us - 1, "dur": coll_us})
        t += step_us
    path.write_text(json.dumps({"schemaVersion": 1, "baseTimeNanoseconds": 0,
                                "distributedInfo": {"backend": "gloo", "rank": rank,
                                                    "world_size": 2},
                                "traceEvents": ev}))
    return str(path)


def _report_json(paths):
    import json
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "cprof", "report", *paths, "--format", "json"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_rank_waiting_longest_in_collectives_is_no_straggler(tmp_path):
    """Rank 1's steps are 1.3x rank 0's but it spends 4x as long in the all_reduce: it waits
    for rank 0 (the phase of synchronised ranks), so no straggler (decision 172). Before, the
    report flagged rank 1 and cited rank 0 as the one spending least time in collectives."""
    a = _rank_trace(tmp_path / "r0.json", 0, 1000.0, 100.0)
    b = _rank_trace(tmp_path / "r1.json", 1, 1300.0, 400.0)
    out = _report_json([a, b])
    assert '"stragglers"' not in out
    assert "spends least time in collectives" not in out


def test_slow_rank_that_does_not_wait_is_still_a_straggler(tmp_path):
    a = _rank_trace(tmp_path / "r0.json", 0, 1000.0, 100.0)
    b = _rank_trace(tmp_path / "r1.json", 1, 1300.0, 100.0)
    out = _report_json([a, b])
    assert '"stragglers"' in out
    assert "it is not waiting for the others" in out


def test_ranks_that_profiled_different_steps_are_said_to(tmp_path):
    """Ranks with different schedules (or one stopped early): rank 0 holds steps 0-1, rank 1
    steps 1-4. The report compared their medians and said "no straggler" with no word that
    the steps differ (seed audit); it now says so. Equal steps: nothing said."""
    import json
    a = _rank_trace(tmp_path / "r0.json", 0, 1000.0, 100.0, steps=range(0, 2))
    b = _rank_trace(tmp_path / "r1.json", 1, 1000.0, 100.0, steps=range(1, 5))
    rep = json.loads(_report_json([a, b]))
    (d,) = [d for d in rep["diagnoses"] if d["id"] == "different_steps"]
    assert "rank 0: steps 0-1; rank 1: steps 1-4" in d["summary"], d
    c = _rank_trace(tmp_path / "r1b.json", 1, 1000.0, 100.0, steps=range(0, 2))
    rep = json.loads(_report_json([a, c]))
    assert not [d for d in rep["diagnoses"] if d["id"] == "different_steps"]
