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
