"""The run/step Profiler of seed 003 (cprof.Profiler and friends)."""
import json
import math
import os
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

import cprof
import cprof._C as C
from conftest import ROOT, load_trace


@pytest.fixture(autouse=True)
def _registry_clean():
    cprof.release_active_profiler()
    yield
    cprof.release_active_profiler()


def make(tmp_path, **kw):
    kw.setdefault("run_name", "t")
    kw.setdefault("print_per_run", False)
    cfg = cprof.ProfilerConfig(output_dir=str(tmp_path), **kw)
    return cprof.Profiler(cfg, timing="host")


def run_steps(prof, latencies_ms, label="decode", tokens=1, kv=None, bsz=4, buckets=()):
    """Steps of controlled latency: sleep inside the step."""
    prof.begin_run(bsz=bsz, label=label)
    for i, ms in enumerate(latencies_ms):
        with prof.step_timing_ctx():
            for b in buckets:
                with cprof.cuda_bucket_timer(b):
                    pass
            time.sleep(ms / 1000)
            prof.set_step_tokens(tokens)
            if kv is not None:
                prof.set_step_seq_len(kv[i])
    prof.end_run()


def test_config_defaults_match_the_seed():
    c = cprof.ProfilerConfig()
    assert (c.output_dir, c.collect_on_rank0_only, c.strict_sync, c.dist_barrier,
            c.model_profiling, c.engine_profiling, c.num_total_runs, c.warmup_runs,
            c.print_per_run, c.run_name, c.kv_len_reduce) == (
        "profiler_out", True, True, False, False, False, 10, 1, True, None, "mean")
    assert c.kv_bins == [0, 512, 1024, 2048, 4096, 8192, 16384]


def test_from_args_precedence():
    a = SimpleNamespace(prof_model_profiling=True, model_profiling=False, warmup_runs=3,
                        backend_profiling=True, prof_run_name=None, run_name="plain")
    c = cprof.ProfilerConfig.from_args(a)
    assert c.model_profiling is True  # prefixed wins
    assert c.warmup_runs == 3  # unprefixed
    assert c.engine_profiling is True  # backend_profiling maps to engine_profiling
    assert c.run_name == "plain"  # None counts as absent
    assert c.num_total_runs == 10  # default
    b = SimpleNamespace(prof_engine_profiling=False, backend_profiling=True)
    assert cprof.ProfilerConfig.from_args(b).engine_profiling is False
    c2 = cprof.ProfilerConfig.from_args(SimpleNamespace(x_warmup_runs=0), prefix="x_")
    assert c2.warmup_runs == 0


@pytest.mark.parametrize("kw,needle", [
    ({"kv_len_reduce": "median"}, "mean, max, p50, p90, sum"),
    ({"kv_bins": [0, 512, 256]}, "strictly increasing"),
    ({"kv_bins": [0, 0, 1]}, "strictly increasing"),
    ({"kv_bins": []}, "non-empty"),
    ({"warmup_runs": -1}, "warmup_runs"),
    ({"kv_bins": [0, float("inf")]}, "finite"),
    ({"run_name": "a/b"}, "without '/'"),
    ({"run_name": ".."}, "directory name"),
    ({"run_name": "x\ny"}, "control characters"),  # a directory named with a newline
    ({"run_name": "s\ud800"}, "cannot be a file name"),  # was a bare UnicodeEncodeError
])
def test_bad_config_names_the_fix(kw, needle):
    with pytest.raises(ValueError, match=needle):
        cprof.ProfilerConfig(**kw)


@pytest.mark.parametrize("kw,needle", [
    ({"warmup_runs": "one"}, "type=int"),
    ({"num_total_runs": 2.5}, "type=int"),
    ({"kv_bins": None}, "kv_bins"),
    ({"strict_sync": "no"}, "store_true"),
])
def test_wrong_config_types_fail_at_construction(kw, needle):
    with pytest.raises((TypeError, ValueError), match=needle):
        cprof.ProfilerConfig(**kw)


def test_config_takes_argparse_strings_and_dicts(tmp_path):
    assert cprof.ProfilerConfig(warmup_runs="2").warmup_runs == 2  # argparse without type=int
    # what worked before the checks still works: numpy / tensor integers, integral floats,
    # None for a flag (its default), negative bin edges
    np = pytest.importorskip("numpy")
    c = cprof.ProfilerConfig(warmup_runs=np.int64(1), num_total_runs=10.0, strict_sync=np.True_,
                             print_per_run=None, kv_bins=[-1, 0, 512])
    assert (c.warmup_runs, c.num_total_runs, c.strict_sync, c.print_per_run) == (1, 10, True,
                                                                                 True)
    assert c.kv_bins == [-1, 0, 512] and type(c.warmup_runs) is int
    c = cprof.ProfilerConfig.from_args({"prof_warmup_runs": 3, "output_dir": str(tmp_path)})
    assert c.warmup_runs == 3 and c.output_dir == str(tmp_path)
    prof = cprof.Profiler({"warmup_runs": 0, "output_dir": str(tmp_path), "run_name": "d",
                           "print_per_run": False}, timing="host")
    assert prof.cfg.warmup_runs == 0 and prof.output_dir == str(tmp_path / "d")
    assert prof.runner_args["run_name"] == "d"


def test_seed_end_to_end_example(tmp_path):
    args = SimpleNamespace(run_name="demo", model_profiling=True, engine_profiling=True,
                           warmup_runs=1, num_total_runs=2, output_dir=str(tmp_path),
                           print_per_run=False)
    prof = cprof.Profiler(args)
    cprof.register_active_profiler(prof)
    assert cprof.get_active_profiler() is prof
    for _ in range(2):
        prof.begin_run(bsz=32, label="decode")
        for _ in range(10):
            with prof.step_timing_ctx():
                with cprof.attention_compute_timer():
                    time.sleep(0.0005)
                with cprof.cuda_bucket_timer("attn.rope"):
                    pass
                with cprof.cpu_bucket_timer("engine.sampling"):
                    pass
                prof.set_step_seq_len(4096)
                prof.set_step_tokens(1)
        prof.end_run()
    cfg_path = prof.save_config()
    sp, rp = prof.save_all()
    cprof.release_active_profiler()
    assert isinstance(cprof.get_active_profiler(), cprof.NullProfiler)
    assert sp == os.path.join(str(tmp_path), "demo", "summary.json")
    conf = json.load(open(cfg_path))
    assert conf["config"]["model_profiling"] is True and conf["runner_args"]["run_name"] == "demo"
    s = json.loads(open(sp).read())
    assert set(s) == {"meta", "stats", "buckets_model_avg_ms", "buckets_engine_avg_ms", "runs",
                      "runs_aggregate", "decode_length_buckets"}
    st = s["stats"]
    assert st["steps"] == 10 and st["tokens"] == 10  # warmup run excluded
    for k in ("mean_ms", "p50_ms", "p90_ms", "p99_ms", "tok_per_s", "time_ms"):
        assert st[k] > 0
    assert list(s["buckets_model_avg_ms"]) == ["attn.compute", "attn.rope"]  # seed order
    assert s["buckets_model_avg_ms"]["attn.compute"] >= 0.4
    assert list(s["buckets_engine_avg_ms"]) == ["engine.sampling"]
    assert [r["meta"]["warmup"] for r in s["runs"]] == [True, False]
    assert s["runs"][1]["meta"]["bsz"] == 32 and s["runs"][1]["meta"]["label"] == "decode"
    assert s["runs_aggregate"]["n_runs"] == 1 and s["runs_aggregate"]["mean_ms"]["std"] is None
    bins = {b["label"]: b["steps"] for b in s["decode_length_buckets"]}
    assert bins["[4096, 8192)"] == 10 and bins["[16384, inf)"] == 0
    md = open(rp).read()
    for heading in ("Global summary", "Model buckets", "Engine buckets", "Per-run overview",
                    "Across-run mean ± std", "Decode-length buckets"):
        assert heading in md
    assert "NaN" not in open(sp).read() and "Infinity" not in open(sp).read()


def test_percentiles_and_bins_hand_checked(tmp_path):
    prof = make(tmp_path, warmup_runs=0, kv_bins=[0, 100, 200])
    # latencies are set exactly through the C store (sleep-based ones are not exact)
    prof.begin_run(bsz=1, label="x")
    lat_ms = [1, 2, 3, 4, 10]
    kvs = [50, 150, 150, 250, 90]
    for ms, kv in zip(lat_ms, kvs):
        step = C.step_begin(prof._owner, 0)
        C.step_end(step, ms * 1_000_000, 2, float(kv))
    prof.runs[0].steps = len(lat_ms)
    prof.end_run()
    s = prof.summary()
    st = s["stats"]
    # sorted [1,2,3,4,10]: p50 = 3; p90: h = 4*0.9 = 3.6 -> 4 + 0.6*6 = 7.6; p99: 4+0.96*6
    assert st["p50_ms"] == pytest.approx(3.0)
    assert st["p90_ms"] == pytest.approx(7.6)
    assert st["p99_ms"] == pytest.approx(9.76)
    assert st["mean_ms"] == pytest.approx(4.0)
    assert st["time_ms"] == pytest.approx(20.0)
    assert st["tokens"] == 10 and st["tok_per_s"] == pytest.approx(500.0)
    bins = s["decode_length_buckets"]
    assert [(b["lo"], b["hi"], b["steps"]) for b in bins] == [(0, 100, 2), (100, 200, 2),
                                                               (200, None, 1)]
    assert bins[0]["mean_ms"] == pytest.approx(5.5)  # steps of 1 and 10 ms
    assert bins[1]["p50_ms"] == pytest.approx(2.5)
    assert bins[2]["p99_ms"] == pytest.approx(4.0)


@pytest.mark.parametrize("how,expected", [("mean", 25.0), ("max", 40.0), ("sum", 100.0),
                                          ("p50", 25.0), ("p90", 37.0)])
def test_seq_len_reductions(tmp_path, how, expected):
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    for x in ([10, 20, 30, 40], np.array([10, 20, 30, 40]), torch.tensor([10, 20, 30, 40])):
        prof = make(tmp_path, kv_len_reduce=how, warmup_runs=0)
        prof.begin_run()
        with prof.step_timing_ctx():
            prof.set_step_seq_len(x)
            assert prof._kv == pytest.approx(expected)
        prof.end_run()


def test_bad_calls_are_clear_errors(tmp_path):
    prof = make(tmp_path)
    with pytest.raises(cprof.ProfilerStateError, match="begin_run"):
        prof.end_run()
    prof.begin_run()
    with pytest.raises(cprof.ProfilerStateError, match="end_run"):
        prof.begin_run()
    with prof.step_timing_ctx():
        with pytest.raises(ValueError, match="negative"):
            prof.set_step_tokens(-1)
        with pytest.raises(TypeError):
            prof.set_step_seq_len(object())
    prof.end_run()
    prof.begin_run()
    # no step yet in this run: tokens have no step to go to
    with pytest.raises(cprof.ProfilerStateError, match="inside step_timing_ctx"):
        prof.set_step_tokens(1)
    with pytest.raises(ValueError, match=">= 0"):
        prof.set_step_seq_len(-5)
    prof.end_run()
    with pytest.raises(cprof.ProfilerStateError, match="begin_run"):
        prof.set_step_seq_len(10)  # outside any run
    prof.begin_run()
    with prof.step_timing_ctx():
        for bad in ("3", 1.5, True, None):
            with pytest.raises((TypeError, ValueError), match="whole number"):
                prof.set_step_tokens(bad)
        prof.set_step_tokens(4.0)  # integral: taken
        for bad in ("abc", ["1", "x"], None):
            with pytest.raises(TypeError, match="KV length"):
                prof.set_step_seq_len(bad)
        with pytest.raises(ValueError, match=">= 0"):
            prof.set_step_seq_len(float("inf"))
    prof.end_run()
    assert prof.summary()["stats"]["tokens"] == 4
    assert isinstance(cprof.ProfilerStateError("x"), cprof.CprofError)


def test_all_warmup_and_no_runs_give_valid_reports(tmp_path):
    prof = make(tmp_path, warmup_runs=5, run_name="warm")
    run_steps(prof, [0.1, 0.1])
    sp, rp = prof.save_all()
    s = json.load(open(sp))
    assert s["stats"]["steps"] == 0 and s["stats"]["mean_ms"] is None
    assert "every run was a warmup run" in s["meta"]["note"]
    assert "every run was a warmup run" in open(rp).read()
    empty = make(tmp_path, run_name="empty")
    sp2, rp2 = empty.save_all()
    s2 = json.load(open(sp2))
    assert s2["runs"] == [] and "no runs were recorded" in s2["meta"]["note"]


def test_save_all_with_a_run_open_reports_only_ended_runs(tmp_path):
    prof = make(tmp_path, warmup_runs=0, run_name="open")
    prof.begin_run()
    with prof.step_timing_ctx():
        prof.set_step_tokens(1)
    with pytest.warns(RuntimeWarning, match="still open"):
        sp, _ = prof.save_all()
    s = json.load(open(sp))
    assert s["runs"] == [] and s["stats"]["steps"] == 0 and s["stats"]["tokens"] == 0
    assert "still open" in s["meta"]["note"] and "warmup" not in s["meta"]["note"]
    prof.end_run()
    run_steps(prof, [0.1])
    prof.begin_run()
    with prof.step_timing_ctx():
        pass
    with pytest.warns(RuntimeWarning):
        s = json.load(open(prof.save_all()[0]))
    assert len(s["runs"]) == 2 and s["stats"]["steps"] == 2 and s["meta"]["note"] is None


def test_unwritable_output_names_the_fix_and_save_all_elsewhere(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(cprof.CprofError, match="another output_dir"):
        make(blocker)
    prof = make(tmp_path, warmup_runs=0, run_name="r")
    run_steps(prof, [0.1])
    os.rmdir(prof.output_dir)
    (tmp_path / "r").write_text("now a file")  # the run directory went away
    with pytest.raises(cprof.CprofError, match=r"save_all\(output_dir=\.\.\.\)"):
        prof.save_all()
    sp, rp = prof.save_all(output_dir=tmp_path / "elsewhere")
    assert json.load(open(sp))["stats"]["steps"] == 1 and os.path.exists(rp)
    assert prof.save_config(output_dir=tmp_path / "elsewhere").endswith("config.json")


def test_kv_lengths_below_the_first_edge_get_a_bin(tmp_path):
    prof = make(tmp_path, warmup_runs=0, kv_bins=[128, 512])
    run_steps(prof, [0.1, 0.1], kv=[10, 20])
    bins = prof.summary()["decode_length_buckets"]
    assert bins[0]["label"] == "[0, 128)" and bins[0]["steps"] == 2
    # listed whether or not any step falls below the first edge: every run has the same bins
    assert [b["label"] for b in make(tmp_path, run_name="u", kv_bins=[128, 512]).summary()[
        "decode_length_buckets"]] == ["[0, 128)", "[128, 512)", "[512, inf)"]
    prof = make(tmp_path, warmup_runs=0, run_name="v", kv_bins=[128, 512])
    run_steps(prof, [0.1], kv=[300])
    run_steps(prof, [0.1], kv=[10])
    runs = prof.summary()["runs"]
    assert [len(r["decode_length_buckets"]) for r in runs] == [3, 3]
    assert runs[0]["decode_length_buckets"][0]["steps"] == 0


def test_across_run_sample_std(tmp_path):
    prof = make(tmp_path, warmup_runs=0)
    for run, ms in enumerate([2.0, 4.0, 6.0]):
        prof.begin_run(label=f"r{run}")
        step = C.step_begin(prof._owner, run)
        C.step_end(step, int(ms * 1e6), 1, None)
        prof.end_run()
    agg = prof.summary()["runs_aggregate"]
    assert agg["n_runs"] == 3
    assert agg["mean_ms"]["mean"] == pytest.approx(4.0)
    assert agg["mean_ms"]["std"] == pytest.approx(2.0)  # sample std of 2, 4, 6


def test_gating(tmp_path):
    prof = make(tmp_path, warmup_runs=1, model_profiling=True, engine_profiling=False)
    # outside any step: nothing recorded
    with cprof.cuda_bucket_timer("norm"):
        pass
    run_steps(prof, [0.1], buckets=["lm_head"])   # warmup run: timers gated
    run_steps(prof, [0.1], buckets=["embed"])
    prof.begin_run()
    with prof.step_timing_ctx():
        with cprof.cpu_bucket_timer("prefill"):  # engine domain off
            pass
    prof.end_run()
    s = prof.summary()
    assert list(s["buckets_model_avg_ms"]) == ["embed"]
    assert s["buckets_engine_avg_ms"] == {}
    assert C.timers_counts()["pending"] == 0


def test_unknown_buckets_kept_by_name_after_canonical(tmp_path):
    """Issue 4: unknown buckets are kept, listed after the canonical ones (in the order first
    timed), never dropped; the meta lists which buckets are outside the canonical list; other
    spellings of canonical buckets (attn.out_proj, attn.qknorm) are canonicalised."""
    prof = make(tmp_path, warmup_runs=0, model_profiling=True)
    run_steps(prof, [0.1], buckets=["zzz.custom", "mlp.down_proj", "embed", "aaa.custom",
                                    "attn.out_proj", "Attn.QKNorm"])
    s = prof.summary()
    order = ["embed", "attn.qk_norm", "attn.o_proj", "mlp.down_proj", "zzz.custom", "aaa.custom",
             "others"]
    b = s["buckets_model_avg_ms"]
    assert list(b) == order
    # seed 003's "others": the subtotal of the unknown ones, not one more bucket
    assert b["others"] == pytest.approx(b["zzz.custom"] + b["aaa.custom"])
    assert list(s["meta"]["buckets_others_ms"]["model"]) == ["zzz.custom", "aaa.custom"]
    assert list(s["runs"][0]["buckets_model_avg_ms"]) == order
    assert list(s["runs_aggregate"]["buckets_model_avg_ms"]) == order
    md = (tmp_path / prof.run_name / "report.md")
    prof.save_all()
    text = md.read_text()
    assert "| `zzz.custom` |" in text and "| `aaa.custom` |" in text
    # the table's total counts each bucket once (the subtotal row is left out of it)
    total = sum(v for k, v in b.items() if k != "others")
    assert f"| **total** | {total:.3f} |" in text


def test_bucket_names_are_canonicalised_by_domain():
    from cprof._runreport import canonical_bucket
    assert canonical_bucket("model", " ATTN.QKV_PROJ ") == ("model", "attn.qkv_proj")
    assert canonical_bucket("engine", "engine.prefill") == ("engine", "prefill")
    assert canonical_bucket("model", "attn.out_proj") == ("model", "attn.o_proj")
    assert canonical_bucket("engine", "engine.sampling") == ("engine", "engine.sampling")
    assert canonical_bucket("engine", "my_phase") == ("engine", None)
    assert canonical_bucket("model", "engine.decode") == ("engine", "decode")
    assert canonical_bucket("model", "model.embed") == ("model", "embed")
    assert canonical_bucket("engine", "engine.sampling") == ("engine", "engine.sampling")
    assert canonical_bucket("model", "decode") == ("engine", "decode")  # the engine's only
    assert canonical_bucket("engine", "communication") == ("engine", "communication")  # both
    assert canonical_bucket("model", "communication") == ("model", "communication")
    assert canonical_bucket("model", "my.custom") == ("model", None)


def test_two_profilers_keep_their_steps_apart(tmp_path):
    a = make(tmp_path, warmup_runs=0, run_name="a")
    run_steps(a, [0.1] * 5)
    b = make(tmp_path, warmup_runs=0, run_name="b")  # a second Profiler wipes nothing
    assert a.summary()["stats"]["steps"] == 5
    run_steps(b, [0.1] * 7, tokens=2)
    run_steps(a, [0.1] * 3)
    assert a.summary()["stats"]["steps"] == 8 and a.summary()["stats"]["tokens"] == 8
    assert b.summary()["stats"]["steps"] == 7 and b.summary()["stats"]["tokens"] == 14
    owner = b._owner
    del b
    import gc
    gc.collect()
    assert C.rs_stats(owner, 0, 10, -math.inf, math.inf)["steps"] == 0  # released
    assert a.summary()["stats"]["steps"] == 8


def test_a_step_nested_in_another_profilers_step_hands_the_timers_back(tmp_path):
    """One Profiler's step inside another's (a draft model's Profiler inside the target's):
    timers record into the innermost step, and once it ends the outer step's timers record
    again (the C gate is one per process; the inner exit used to switch it off)."""
    a = make(tmp_path, warmup_runs=0, run_name="a", engine_profiling=True)
    b = make(tmp_path, warmup_runs=0, run_name="b", engine_profiling=True)
    a.begin_run()
    b.begin_run()
    with a.step_timing_ctx():
        with cprof.cpu_bucket_timer("draft"):
            time.sleep(0.002)
        with b.step_timing_ctx():
            with cprof.cpu_bucket_timer("verify"):
                time.sleep(0.002)
        with cprof.cpu_bucket_timer("draft"):
            time.sleep(0.002)
    with cprof.cpu_bucket_timer("draft"):  # outside every step: gated off again
        time.sleep(0.05)
    a.end_run()
    b.end_run()
    ea = a.summary()["buckets_engine_avg_ms"]
    eb = b.summary()["buckets_engine_avg_ms"]
    assert 4.0 <= ea["draft"] < 45.0, ea  # both of a's draft regions, not the one outside
    assert "verify" not in ea and "draft" not in eb and eb["verify"] >= 2.0


def test_a_step_that_fails_to_start_leaves_no_gate_open(tmp_path, monkeypatch):
    prof = make(tmp_path, warmup_runs=0, engine_profiling=True)
    prof.begin_run()
    with cprof.ProfilerContext(output_dir=str(tmp_path / "w"), activities=["CPU"]):
        def boom(name):
            raise RuntimeError("no range")
        monkeypatch.setattr(C, "range", boom)
        with pytest.raises(RuntimeError, match="no range"):
            with prof.step_timing_ctx():
                pass
        monkeypatch.undo()
        with cprof.cpu_bucket_timer("draft"):  # no step open: records nothing
            time.sleep(0.001)
        with prof.step_timing_ctx():  # the failed step is not left open
            pass
    prof.end_run()
    s = prof.summary()
    assert s["stats"]["steps"] == 1 and "draft" not in s["buckets_engine_avg_ms"]


def test_tokens_after_the_step_and_seq_len_before_it(tmp_path):
    np = pytest.importorskip("numpy")
    prof = make(tmp_path, warmup_runs=0, kv_bins=[0, 100, 1000])
    prof.begin_run(bsz=2, label="d", prefix_len=128)
    for kv, tok in ((50, 1), (500, 3)):
        prof.set_step_seq_len(np.int64(kv))  # before the step: the KV length at its start
        with prof.step_timing_ctx():
            time.sleep(0.0001)
        prof.set_step_tokens(np.int32(tok))  # after the step: the step that just ended
    with prof.step_timing_ctx():
        prof.set_step_seq_len(np.array(2000))  # a 0-d array
        prof.set_step_seq_len(np.float32(2000.0))
    prof.end_run()
    s = prof.summary()
    assert s["stats"]["steps"] == 3 and s["stats"]["tokens"] == 4
    assert [b["steps"] for b in s["decode_length_buckets"]] == [1, 1, 1]
    assert [b["tokens"] for b in s["decode_length_buckets"]] == [1, 3, 0]
    assert s["runs"][0]["meta"]["prefix_len"] == 128  # begin_run's other keywords kept


@pytest.mark.parametrize("env", [{"RANK": "1"}, {"LOCAL_RANK": "1"},
                                 {"LOCAL_RANK": "1", "WORLD_SIZE": "2"},
                                 {"RANK": "3", "WORLD_SIZE": "2"}])
def test_rank_gating_from_any_rank_variable(tmp_path, monkeypatch, env):
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    prof = make(tmp_path, run_name="gated")
    assert prof.enabled is False and prof.disabled is True and prof.rank >= 1
    assert prof.world_size > prof.rank
    prof.begin_run()
    prof.begin_run()  # call-order mistakes are no-ops on a disabled rank too
    prof.end_run()
    prof.end_run()
    assert prof.save_all() is None and not (tmp_path / "gated").exists()
    cprof.register_active_profiler(prof)
    p = cprof.get_active_profiler()
    assert isinstance(p, cprof.NullProfiler) and p.cfg is prof.cfg and p.disabled


def test_every_rank_collecting_keeps_each_ranks_report(tmp_path, monkeypatch):
    """collect_on_rank0_only=False with the seed's fixed run_name: each rank saves to the same
    directory; rank 0 keeps the seed's names, the others' carry their rank, none is lost."""
    paths = {}
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        prof = make(tmp_path, run_name="demo", collect_on_rank0_only=False)
        assert prof.enabled and prof.rank == rank
        prof.begin_run()
        with prof.step_timing_ctx():
            pass
        prof.end_run()
        paths[rank] = prof.save_all()
    d = tmp_path / "demo"
    assert paths[0] == (str(d / "summary.json"), str(d / "report.md"))
    assert paths[1] == (str(d / "summary-rank1.json"), str(d / "report-rank1.md"))
    assert [json.loads(open(p[0]).read())["meta"]["rank"] for p in (paths[0], paths[1])] == [0, 1]


def test_rank_gating_from_an_initialised_process_group(tmp_path, monkeypatch):
    import types
    fake = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True,
                                 get_rank=lambda: 1, get_world_size=lambda: 2)
    monkeypatch.setitem(sys.modules, "torch.distributed", fake)  # no get_backend at all
    prof = make(tmp_path, run_name="pg")
    assert (prof.rank, prof.world_size, prof.enabled) == (1, 2, False)


def test_gated_rank_through_the_registry_keeps_dist_barriers_symmetric(tmp_path, monkeypatch):
    """dist_barrier=True: a loop written against get_active_profiler() (seed 003's registry)
    makes as many barriers on a gated rank (which gets a NullProfiler) as on rank 0. Before,
    the NullProfiler's step and end_run made none, so rank 0's step barriers paired with the
    other rank's next collective: two real gloo ranks timed out in their all_reduce."""
    import types
    rank, barriers = [0], {0: 0, 1: 0}

    def barrier():
        barriers[rank[0]] += 1

    fake = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True,
                                 get_rank=lambda: rank[0], get_world_size=lambda: 2,
                                 barrier=barrier)
    torch = sys.modules.get("torch") or types.ModuleType("torch")  # CI runs without torch too
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.distributed", fake)
    for r in (0, 1):
        rank[0] = r
        cprof.register_active_profiler(make(tmp_path, run_name=f"b{r}", dist_barrier=True,
                                            warmup_runs=0))
        try:
            prof = cprof.get_active_profiler()
            assert prof.enabled is (r == 0)
            prof.begin_run(bsz=1, label="decode")
            for _ in range(3):
                with prof.step_timing_ctx():
                    prof.set_step_tokens(1)
            prof.end_run()
        finally:
            cprof.release_active_profiler()
    assert barriers[0] == 4 and barriers[1] == barriers[0]
    # a NullProfiler standing for no Profiler makes no barrier
    rank[0] = 1
    with cprof.get_active_profiler().step_timing_ctx():
        pass
    cprof.get_active_profiler().end_run()
    assert barriers[1] == 4


def test_enabled_profiler_creates_its_directory(tmp_path):
    prof = make(tmp_path, run_name="made")
    assert (tmp_path / "made").is_dir() and prof.out_dir == str(tmp_path / "made")


def test_reports_go_to_the_run_directory_made_even_after_a_chdir(tmp_path, monkeypatch):
    """A relative output_dir (the default "profiler_out") names the directory the Profiler
    made at construction; a program that changes directory before save_all used to get its
    reports under the new working directory and an empty run directory where it started."""
    (tmp_path / "start").mkdir()
    (tmp_path / "later").mkdir()
    monkeypatch.chdir(tmp_path / "start")
    prof = cprof.Profiler(cprof.ProfilerConfig(output_dir="rel", run_name="x", warmup_runs=0,
                                               print_per_run=False), timing="host")
    prof.begin_run()
    with prof.step_timing_ctx():
        prof.set_step_tokens(1)
    prof.end_run()
    monkeypatch.chdir(tmp_path / "later")
    sp, rp = prof.save_all()
    cp = prof.save_config()
    made = tmp_path / "start" / "rel" / "x"
    assert {sp, rp, cp} == {str(made / n) for n in ("summary.json", "report.md", "config.json")}
    assert sorted(p.name for p in made.iterdir()) == ["config.json", "report.md", "summary.json"]
    assert not list((tmp_path / "later").iterdir())
    assert prof.summary()["meta"]["output_dir"] == os.path.join("rel", "x")  # as given


def test_star_import_keeps_builtin_range():
    ns = {}
    exec("from cprof import *\nr = list(range(2))", ns)
    assert ns["r"] == [0, 1] and "Profiler" in ns


def test_disabled_rank_is_a_noop(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    prof = make(tmp_path, model_profiling=True, run_name="r1")
    assert prof.enabled is False
    run_steps(prof, [0.1], buckets=["x"])
    prof.set_step_tokens(5)  # safe outside a step too
    assert prof.save_config() is None and prof.save_all() is None
    assert not (tmp_path / "r1").exists()


def test_step_that_raises_is_not_measured(tmp_path):
    prof = make(tmp_path, warmup_runs=0, model_profiling=True)
    prof.begin_run()
    with prof.step_timing_ctx():
        prof.set_step_tokens(1)
    with pytest.raises(RuntimeError):
        with prof.step_timing_ctx():
            with cprof.cuda_bucket_timer("lost"):
                raise RuntimeError("boom")
    prof.end_run()
    s = prof.summary()
    assert s["stats"]["steps"] == 1 and "lost" not in s["buckets_model_avg_ms"]
    assert C.timers_counts()["open"] == 0


def test_steps_and_buckets_appear_in_cprof_trace(tmp_path):
    prof = make(tmp_path, warmup_runs=0, model_profiling=True)
    with cprof.ProfilerContext(output_dir=tmp_path, profile_name="both", activities=["CPU"],
                               verbose=False) as ctx:
        run_steps(prof, [0.1, 0.1], label="decode", buckets=["attn.compute"])
    names = [e["name"] for e in load_trace(ctx.trace_path)["traceEvents"] if e["ph"] == "X"]
    assert names.count("step[decode]") == 2 and names.count("attn.compute") == 2


def test_disabled_timer_costs_little():
    t = cprof.cuda_bucket_timer("off")
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        with t:
            pass
    assert (time.perf_counter() - t0) / n < 20e-6  # ~0.1 us in practice (benchmarks/)


def test_registry_checks_what_it_is_given():
    cprof.release_active_profiler()
    with pytest.raises(TypeError, match="cprof.Profiler"):
        cprof.register_active_profiler(42)
    assert not cprof.get_active_profiler()  # NullProfiler: falsy, as seed 003's
    cprof.register_active_profiler(None)
    assert not cprof.get_active_profiler()


def test_null_profiler_calls_are_safe():
    p = cprof.get_active_profiler()
    p.begin_run(bsz=1, label="x")
    with p.step_timing_ctx():
        p.set_step_tokens(1)
        p.set_step_seq_len([1, 2])
    p.end_run()
    assert p.save_all() is None and p.save_config() is None
    assert p.attach_model(object()) is None


def test_generate_run_name_unique_prefix():
    a = cprof.generate_run_name()
    assert a.startswith("run_") and str(os.getpid()) in a
    assert cprof.generate_run_name("decode").startswith("decode_")
    names = {cprof.generate_run_name("same") for _ in range(5)}  # same second: still unique
    assert len(names) == 5
    args = SimpleNamespace(model_name="org/llama-7b", output_dir="a/b")
    n = cprof.generate_run_name(args)
    assert n.startswith("llama-7b_") and "/" not in n
    assert cprof.generate_run_name(SimpleNamespace(run_name="given")) == "given"


def test_attach_model_buckets_and_idempotent(tmp_path):
    torch = pytest.importorskip("torch")
    from torch import nn

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv_proj = nn.Linear(8, 24)
            self.o_proj = nn.Linear(8, 8)

        def forward(self, x):
            q, k, v = self.qkv_proj(x).chunk(3, -1)
            return self.o_proj(torch.softmax(q @ k.T, -1) @ v)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(10, 8)
            self.input_layernorm = nn.LayerNorm(8)
            self.self_attn = Attn()
            self.gate_up_proj = nn.Linear(8, 16)
            self.down_proj = nn.Linear(16, 8)
            self.lm_head = nn.Linear(8, 10)

        def forward(self, ids):
            x = self.input_layernorm(self.embed_tokens(ids))
            x = x + self.self_attn(x)
            x = x + self.down_proj(torch.relu(self.gate_up_proj(x)))
            return self.lm_head(x)

    model = Block()
    prof = make(tmp_path, warmup_runs=0, model_profiling=True)
    wrapped = prof.attach_model(model)
    assert wrapped == {"embed_tokens": "embed", "input_layernorm": "norm",
                       "self_attn.qkv_proj": "attn.qkv_proj", "self_attn.o_proj": "attn.o_proj",
                       "gate_up_proj": "mlp.gate_up_proj", "down_proj": "mlp.down_proj",
                       "lm_head": "lm_head"}
    assert prof.attach_model(model) == {}  # attaching twice never wraps twice
    ids = torch.tensor([1, 2, 3])
    prof.begin_run()
    with prof.step_timing_ctx():
        model(ids)
    prof.end_run()
    got = prof.summary()["buckets_model_avg_ms"]
    assert set(got) == set(wrapped.values())
    assert list(got)[:3] == ["embed", "attn.qkv_proj", "attn.o_proj"]
    import torch.distributed as dist
    assert getattr(dist.all_reduce, "_cprof_bucket") == "communication.all_reduce"


def test_an_attached_model_compiles_whole_and_still_times_in_eager(tmp_path):
    """torch.compile of an attached model: dynamo traces the wrappers as the bare forwards (a
    C timer call in a graph is unsupported: a graph break per module, and fullgraph=True
    raised torch._dynamo.exc.Unsupported in the user's program); the eager model still times
    its buckets."""
    torch = pytest.importorskip("torch")
    from torch import nn
    if not hasattr(torch, "compile") or not hasattr(torch.compiler, "is_compiling"):
        pytest.skip("torch without torch.compile")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(10, 8)
            self.norm = nn.LayerNorm(8)
            self.lm_head = nn.Linear(8, 10)

        def forward(self, ids):
            return self.lm_head(self.norm(self.embed_tokens(ids)))

    model = Net()
    prof = make(tmp_path, warmup_runs=0, model_profiling=True)
    assert prof.attach_model(model)
    ids = torch.tensor([1, 2, 3])
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    prof.begin_run()
    with prof.step_timing_ctx():
        out = compiled(ids)
        model(ids)
    prof.end_run()
    assert torch.equal(out, model(ids))
    assert set(prof.summary()["buckets_model_avg_ms"]) == {"embed", "norm", "lm_head"}


def test_a_bucket_nested_in_itself_counts_once(tmp_path):
    """A user's timer around a call attach_engine already times into the same bucket: the
    inner region times nothing (the time would count twice, a share above 100%); different
    buckets nested, and the same bucket one after the other, each count. A timer entered and
    never exited does not stop the bucket from counting in the next step."""
    prof = make(tmp_path, warmup_runs=0, engine_profiling=True, model_profiling=True)

    class Engine:
        def decode(self):
            time.sleep(0.01)

    e = Engine()
    prof.attach_engine(e)
    prof.begin_run()
    with prof.step_timing_ctx():
        with cprof.cpu_bucket_timer("decode"):
            e.decode()
        with cprof.cpu_bucket_timer("sampler"):
            with cprof.cpu_bucket_timer("postproc"):
                time.sleep(0.002)
        with cprof.cuda_bucket_timer("norm"):
            time.sleep(0.002)
        with cprof.cuda_bucket_timer("norm"):
            time.sleep(0.002)
        cprof.cuda_bucket_timer("embed").__enter__()  # never exited
    with prof.step_timing_ctx():
        with cprof.cuda_bucket_timer("embed"):
            time.sleep(0.002)
    prof.end_run()
    s = prof.summary()
    eng, mod = s["buckets_engine_avg_ms"], s["buckets_model_avg_ms"]
    step_ms = s["stats"]["mean_ms"]
    per_step = 2  # averages are per step over both steps
    assert 10 / per_step <= eng["decode"] < 18 / per_step  # once, not twice (20 ms)
    assert eng["sampler"] >= 2 / per_step and eng["postproc"] >= 2 / per_step
    assert mod["norm"] >= 4 / per_step
    assert mod["embed"] >= 2 / per_step
    assert eng["decode"] < step_ms


def test_module_buckets_by_name_and_type():
    """Rotary embeddings are attn.rope whatever their attribute name (the type rule comes
    before the Embedding one they end with); gpt-fast's fused w13 is mlp.gate_up_proj."""
    torch = pytest.importorskip("torch")
    from cprof._hooks import bucket_for

    class RotaryEmbedding(torch.nn.Module):
        pass

    class LlamaRotaryEmbedding(torch.nn.Module):
        pass

    assert bucket_for("transformer.rotary_pos_emb", RotaryEmbedding()) == "attn.rope"
    assert bucket_for("layers.0.layer0", LlamaRotaryEmbedding()) == "attn.rope"
    assert bucket_for("layers.0.feed_forward.w13", torch.nn.Linear(2, 2)) == "mlp.gate_up_proj"
    assert bucket_for("tok", torch.nn.Embedding(3, 2)) == "embed"
    # vLLM / SGLang: the Attention / RadixAttention module inside self_attn is the attention
    # compute; GPT-2's and timm's `attn` is the whole block (its projections are buckets)
    core = torch.nn.Module()
    assert bucket_for("model.layers.0.self_attn.attn", core) == "attn.compute"
    assert bucket_for("model.layers.0.attention.attn", core) == "attn.compute"
    assert bucket_for("transformer.h.0.attn", core) is None
    assert bucket_for("blocks.0.attn", core) is None


_TINY_LM = None


def _tiny_lm(torch):
    """A module-level class (pickle finds it by name), made once torch is known to exist."""
    global _TINY_LM
    if _TINY_LM is None:
        class TinyLM(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.embed_tokens = torch.nn.Embedding(10, 4)
                self.lm_head = torch.nn.Linear(4, 10)

            def forward(self, x, attention_mask=None):
                return self.lm_head(self.embed_tokens(x))

        TinyLM.__qualname__ = "TinyLM"
        globals()["TinyLM"] = _TINY_LM = TinyLM
    return _TINY_LM()


def test_attached_model_deepcopies_and_saves(tmp_path):
    """A draft or EMA model is often copy.deepcopy(model): the copy's wrapped forwards run the
    copy's own weights (they ran the original's, silently); torch.save(model) pickles it and
    the loaded model runs and is timed; inspect.signature sees the real forward."""
    torch = pytest.importorskip("torch")
    import copy
    import inspect
    import io

    m = _tiny_lm(torch)
    prof = make(tmp_path, warmup_runs=0, model_profiling=True)
    assert prof.attach_model(m) == {"embed_tokens": "embed", "lm_head": "lm_head"}
    m2 = copy.deepcopy(m)
    with torch.no_grad():
        m2.lm_head.weight.zero_()
        m2.lm_head.bias.zero_()
    x = torch.tensor([1, 2])
    assert bool((m2(x) == 0).all()) and not bool((m(x) == 0).all())
    assert prof.attach_model(m2) == {}  # the copy is attached already
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    m3 = torch.load(buf, weights_only=False)
    assert torch.equal(m3(x), m(x))
    assert list(inspect.signature(m.lm_head.forward).parameters) == ["input"]
    prof.begin_run()
    with prof.step_timing_ctx():
        m3(x)
        m2(x)
    prof.end_run()
    assert set(prof.summary()["buckets_model_avg_ms"]) == {"embed", "lm_head"}


def test_output_is_the_head_only_at_the_top(tmp_path):
    """Llama's reference code names its head `output`; a BERT block's `layer.N.output`
    modules are not heads and stay unbucketed."""
    pytest.importorskip("torch")
    from torch import nn

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.output = nn.Linear(8, 8)  # BertOutput's place

        def forward(self, x):
            return self.output(x)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.ModuleList([Layer(), Layer()])
            self.output = nn.Linear(8, 10)

        def forward(self, x):
            for m in self.layer:
                x = m(x)
            return self.output(x)

    prof = make(tmp_path, warmup_runs=0, model_profiling=True)
    assert prof.attach_model(Model()) == {"output": "lm_head"}


def test_peft_style_lora_adapters_get_lora_buckets(tmp_path):
    torch = pytest.importorskip("torch")
    from torch import nn

    class LoraLinear(nn.Module):  # PEFT's layout: adapters by name in ModuleDicts
        def __init__(self):
            super().__init__()
            self.base_layer = nn.Linear(8, 8)
            self.lora_A = nn.ModuleDict({"default": nn.Linear(8, 2)})
            self.lora_B = nn.ModuleDict({"default": nn.Linear(2, 8)})

        def forward(self, x):
            return self.base_layer(x) + self.lora_B["default"](self.lora_A["default"](x))

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = LoraLinear()
            self.o_proj = LoraLinear()

        def forward(self, x):
            return self.o_proj(self.q_proj(x))

    model = Attn()
    prof = make(tmp_path, warmup_runs=0, model_profiling=True)
    wrapped = prof.attach_model(model, use_gated_lora=True)
    assert wrapped == {"q_proj": "attn.qkv_proj", "q_proj.lora_A.default": "attn.qkv_proj.lora",
                       "q_proj.lora_B.default": "attn.qkv_proj.lora", "o_proj": "attn.o_proj",
                       "o_proj.lora_A.default": "attn.o_proj.lora",
                       "o_proj.lora_B.default": "attn.o_proj.lora"}
    prof.begin_run()
    with prof.step_timing_ctx():
        model(torch.randn(2, 8))
    prof.end_run()
    assert {"attn.qkv_proj.lora", "attn.o_proj.lora"} <= set(
        prof.summary()["buckets_model_avg_ms"])
    plain = make(tmp_path, run_name="plain", model_profiling=True)
    assert all(not b.endswith(".lora") for b in plain.attach_model(Attn()).values())


def test_attach_engine(tmp_path):
    class Engine:
        def prefill(self, x):
            return x + 1

        def decode(self, x):
            return x * 2

        def helper(self):
            return 0

    eng = Engine()
    prof = make(tmp_path, warmup_runs=0, engine_profiling=True)
    assert prof.attach_engine(eng) == {"prefill": "prefill", "decode": "decode"}
    assert prof.attach_engine(eng) == {}
    prof.begin_run()
    with prof.step_timing_ctx():
        assert eng.decode(eng.prefill(1)) == 4
    prof.end_run()
    assert list(prof.summary()["buckets_engine_avg_ms"]) == ["prefill", "decode"]


def _fake_so():
    """tests/fake_cupti's library (the fake CUDA driver), built if needed; skips without it."""
    fake_dir = os.path.join(ROOT, "tests", "fake_cupti")
    if subprocess.run(["bash", os.path.join(fake_dir, "build.sh")]).returncode != 0:
        pytest.skip("cannot build the fake library")
    return os.path.join(fake_dir, "libfake_cupti.so")


def test_cuda_timers_through_fake_driver(tmp_path):
    """The CUDA-event path (pool, record, batch resolution) against tests/fake_cupti, whose
    events stamp the host clock; in its own process because the driver loads once."""
    so = _fake_so()
    code = f"""
import json, sys, time
sys.path.insert(0, {ROOT!r})
import cprof, cprof._C as C
prof = cprof.Profiler(cprof.ProfilerConfig(output_dir={str(tmp_path)!r}, run_name="cuda",
                      warmup_runs=0, model_profiling=True, print_per_run=False), timing="cuda")
prof.begin_run()
for _ in range(5):
    with prof.step_timing_ctx():
        with cprof.cuda_bucket_timer("attn.compute"):
            time.sleep(0.002)
prof.end_run()
s = prof.summary()
print(json.dumps({{"timing": s["meta"]["timing"], "b": s["buckets_model_avg_ms"],
                   "counts": C.timers_counts(), "share": s["meta"]["timer_boundary_share_ns"]}}))
"""
    env = dict(os.environ, CPROF_LIBCUDA_PATH=so, CPROF_CUPTI_PATH=so)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["timing"] == "cuda_events"
    assert 1.5 <= out["b"]["attn.compute"] <= 50
    assert out["counts"]["pending"] == 0 and out["counts"]["events"] == 2  # pooled, reused
    assert out["share"] == 1000  # the default window of one event per boundary


FAKE_TIMERS = """
import json, sys, time
sys.path.insert(0, {root!r})
import cprof, cprof._C as C
prof = cprof.Profiler(cprof.ProfilerConfig(output_dir={out!r}, run_name="share",
                      warmup_runs=0, model_profiling=True, print_per_run=False), timing="cuda")
prof.begin_run()
c0 = C.timers_counts()
for _ in range(5):
    with prof.step_timing_ctx():
        with cprof.cuda_bucket_timer("attn.qkv_proj"):
            time.sleep(0.002)
        {between}
        with cprof.cuda_bucket_timer("attn.compute"):
            with cprof.cuda_bucket_timer("attn.rope"):
                time.sleep(0.003)
c1 = C.timers_counts()
prof.end_run()
s = prof.summary()
print(json.dumps({{"b": s["buckets_model_avg_ms"], "share_ns": s["meta"]["timer_boundary_share_ns"],
                   "records": c1["records"] - c0["records"], "shared": c1["shared"] - c0["shared"]}}))
"""


def _fake_timers(tmp_path, between="pass", **env):
    so = _fake_so()
    code = FAKE_TIMERS.format(root=ROOT, out=str(tmp_path), between=between)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, CPROF_LIBCUDA_PATH=so, CPROF_CUPTI_PATH=so, **env))
    return r


FAKE_TIMER_FAULT = """
import ctypes, json, sys, time, warnings
sys.path.insert(0, {root!r})
import cprof
fake = ctypes.CDLL({so!r})
fake.fake_cupti_set_error.argtypes = [ctypes.c_char_p, ctypes.c_int]
fake.fake_cupti_reset.argtypes = []
def run(prof, fail_from):
    prof.begin_run()
    for i in range(4):
        if i == fail_from:  # CUDA error 700 from the event query from here on
            fake.fake_cupti_set_error(b"cuEventElapsedTime", 700)
            fake.fake_cupti_set_error(b"cuEventElapsedTime_v2", 700)
        with prof.step_timing_ctx():
            with cprof.cuda_bucket_timer("attn.rope"):
                time.sleep(0.004)
    prof.end_run()
    fake.fake_cupti_reset()
out = {{}}
for strict in (False, True):
    prof = cprof.Profiler(cprof.ProfilerConfig(output_dir={out!r}, run_name=f"s{{strict}}",
                          warmup_runs=0, model_profiling=True, print_per_run=False,
                          strict_sync=strict), timing="cuda")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        run(prof, 2)  # steps 0, 1 timed; 2, 3 not
        run(prof, 0 if not strict else 99)  # every step fails / none does
    s = prof.summary()
    prof.save_all()
    out[str(strict)] = {{"warn": [str(x.message) for x in w], "meta": s["meta"],
                         "runs": [r["meta"] for r in s["runs"]],
                         "stats": [r["stats"] for r in s["runs"]],
                         "rope": [r["buckets_model_avg_ms"].get("attn.rope") for r in s["runs"]]}}
print(json.dumps(out))
"""


TIMERS_DURING_A_WAIT = """
import sys, threading, warnings
sys.path.insert(0, {root!r})
import cprof
def make(name):
    return cprof.Profiler(cprof.ProfilerConfig(output_dir={out!r}, run_name=name, warmup_runs=0,
                          model_profiling=True, print_per_run=False), timing="cuda")
done = threading.Event()
def resolver():  # each end_run waits for the GPU (the fake's FAKE_CUDA_SYNC_US)
    p = make("a")
    for _ in range(20):
        p.begin_run()
        with p.step_timing_ctx():
            with cprof.cuda_bucket_timer("attn.rope"):
                pass
        p.end_run()
    done.set()
def grower():  # meanwhile: hundreds of regions, the region array reallocated under the wait
    while not done.is_set():
        p = make("b")
        p.begin_run()
        for _ in range(2):
            with p.step_timing_ctx():
                for _ in range(600):
                    with cprof.cuda_bucket_timer("mlp"):
                        pass
        p.end_run()
warnings.simplefilter("ignore")
threads = [threading.Thread(target=resolver), threading.Thread(target=grower)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("ok")
"""


def test_timers_of_another_thread_during_a_resolves_wait(tmp_path):
    """The wait for the GPU runs without the GIL: it used to walk the region array there while
    another thread's timers reallocated it (a use after free; ASan catches it). Now only a
    copy of the end events is waited on; the regions are read with the GIL held."""
    so = _fake_so()
    code = TIMERS_DURING_A_WAIT.format(root=ROOT, out=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, CPROF_LIBCUDA_PATH=so, CPROF_CUPTI_PATH=so,
                                FAKE_CUDA_SYNC_US="300"))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


TIMERS_WAIT_AFTER_A_FAILED_SYNC = """
import ctypes, json, sys, threading, time, warnings
sys.path.insert(0, {root!r})
import cprof
fake = ctypes.CDLL({so!r})
fake.fake_cupti_set_error_once.argtypes = [ctypes.c_char_p, ctypes.c_int]
prof = cprof.Profiler(cprof.ProfilerConfig(output_dir={out!r}, run_name="cap", warmup_runs=0,
                      model_profiling=True, print_per_run=False), timing="cuda")
gaps, stop = [], threading.Event()
def ticker():  # how long the GIL is held at a stretch while the step ends
    last = time.perf_counter()
    while not stop.is_set():
        time.sleep(0.001)
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
warnings.simplefilter("ignore")
prof.begin_run()
with prof.step_timing_ctx():
    for i in range(5):
        with cprof.cuda_bucket_timer("r%d" % i):
            time.sleep(0.0005)  # no shared boundaries: 10 events of their own
    fake.fake_cupti_set_error_once(b"cuEventSynchronize", 907)  # recorded in a graph capture
    t = threading.Thread(target=ticker)
    t.start()
    time.sleep(0.05)
stop.set()
t.join()
prof.end_run()
print(json.dumps({{"max_gap_ms": max(gaps) * 1e3}}))
"""


def test_the_wait_for_the_gpu_goes_on_without_the_gil_after_a_failed_sync(tmp_path):
    """cprof_timers_wait returned at the first event the driver would not wait for (one
    recorded in a CUDA graph capture: error 907), so every later event was waited for in
    resolve with the GIL held, every Python thread stopped for the GPU's backlog (gpurev2 F6).
    The fake's GPU takes 80 ms per event: held, 9 events are 720 ms; now at most the failed
    one's 80 ms is waited for with the GIL."""
    so = _fake_so()
    code = TIMERS_WAIT_AFTER_A_FAILED_SYNC.format(root=ROOT, out=str(tmp_path), so=so)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, CPROF_LIBCUDA_PATH=so, CPROF_CUPTI_PATH=so,
                                FAKE_CUDA_SYNC_US="80000"))
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["max_gap_ms"] < 300, out


def test_cuda_timer_that_cannot_be_read_is_not_a_zero(tmp_path):
    """A CUDA region whose time the driver cannot give (cuEventElapsedTime failing, as after
    a sticky CUDA error) leaves its step out of every figure, counted and warned about; it
    used to count as 0 ms (a mean of 0, bucket averages diluted), silently."""
    so = _fake_so()
    code = FAKE_TIMER_FAULT.format(root=ROOT, out=str(tmp_path), so=so)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, CPROF_LIBCUDA_PATH=so, CPROF_CUPTI_PATH=so))
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    for res in out.values():
        assert "CUDA error 700" in res["runs"][0]["timer_error"]
        assert any("could not be timed" in m and "CUDA error 700" in m for m in res["warn"])
    # resolved at end_run, when the fault is there: no step of either run has a time
    lost = out["False"]
    assert [r["steps_unmeasured"] for r in lost["runs"]] == [4, 4]
    assert [st["steps"] for st in lost["stats"]] == [0, 0]
    assert lost["stats"][0]["mean_ms"] is None and lost["rope"][0] is None  # not 0.0
    assert lost["meta"]["steps_unmeasured"] == 8
    # strict_sync resolves each step as it ends: steps 0 and 1 keep their times
    ok = out["True"]
    assert [r["steps_unmeasured"] for r in ok["runs"]] == [2, 0]
    assert [st["steps"] for st in ok["stats"]] == [2, 4]
    assert ok["stats"][0]["min_ms"] >= 3.5  # no step counted as 0 ms
    assert ok["rope"][0] >= 3.5  # the bucket average is not diluted by the failures
    assert ok["meta"]["steps_unmeasured"] == 2
    # strict_sync resolves every step: one warning per run, not one per step
    assert sum("could not be timed" in m for m in ok["warn"]) == 1
    reports = [p.read_text() for p in tmp_path.rglob("*.md")]
    assert len(reports) == 2 and all("step(s) could not be timed" in t for t in reports)


def test_adjacent_cuda_regions_share_their_boundary_event(tmp_path):
    """End of one region and start of the next (and an outer and an inner start, an inner and
    an outer end) are one event: 3 regions, 6 boundaries, 3 records per step; the times are
    those of separate events."""
    # a window far above any host gap between two `with` blocks (a loaded CI machine included)
    # and below the regions' 2 and 3 ms
    r = _fake_timers(tmp_path, CPROF_TIMER_SHARE_NS="1500000")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["share_ns"] == 1500000
    assert out["records"] == 3 * 5 and out["shared"] == 3 * 5, out
    b = out["b"]
    assert 1.9 <= b["attn.qkv_proj"] <= 20 and 2.9 <= b["attn.rope"] <= 30
    assert b["attn.rope"] <= b["attn.compute"] <= b["attn.rope"] + 1.0


def test_separated_cuda_regions_record_their_own_events(tmp_path):
    """Host time between two regions (where a launch could go) is longer than the window: no
    sharing; CPROF_TIMER_SHARE_NS=0 turns sharing off altogether."""
    r = _fake_timers(tmp_path, between="time.sleep(0.005)", CPROF_TIMER_SHARE_NS="1500000")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["records"] == 4 * 5 and out["shared"] == 2 * 5, out  # outer/inner still share
    r = _fake_timers(tmp_path, CPROF_TIMER_SHARE_NS="0")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["share_ns"] == 0 and out["records"] == 6 * 5 and out["shared"] == 0, out
    assert 2.9 <= out["b"]["attn.rope"] <= out["b"]["attn.compute"]


def test_bad_share_window_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("CPROF_TIMER_SHARE_NS", "fast")
    with pytest.raises(ValueError, match="CPROF_TIMER_SHARE_NS='fast'.*set 0"):
        cprof.Profiler(cprof.ProfilerConfig(output_dir="unused", print_per_run=False))


def test_cpu_bucket_timer_sync_takes_a_bool():
    """sync="no" (a YAML or environment value) was taken as sync=True, a truthy string; every
    other bool option refuses text."""
    for bad in ("no", "false", "True", [], 0.5):
        with pytest.raises(TypeError, match="cpu_bucket_timer: sync takes a bool, got"):
            cprof.cpu_bucket_timer("x", sync=bad)
    assert type(cprof.cpu_bucket_timer("x", sync=True)).__name__ == "_SyncedTimer"
    for off in (False, 0, None):  # None: decided by the step (no step open: no sync)
        assert type(cprof.cpu_bucket_timer("x", sync=off)).__name__ != "_SyncedTimer"
    assert type(cprof.cpu_bucket_timer("x", sync=1)).__name__ == "_SyncedTimer"

def test_bucket_name_must_be_a_str():
    for make in (cprof.cuda_bucket_timer, cprof.cpu_bucket_timer,
                 lambda b: cprof._C.BucketTimer(b, 0)):
        with pytest.raises(TypeError, match="bucket name must be a str, not int"):
            make(3)
    with pytest.raises(ValueError, match="domain must be 0"):
        cprof._C.BucketTimer("x", 2)
    assert cprof.cuda_bucket_timer("attn.rope").bucket == "attn.rope"
    assert cprof.cpu_bucket_timer("sampler").domain == 1
    # the seed's signature, cuda_bucket_timer(bucket: str), keyword included
    assert cprof.cuda_bucket_timer(bucket="attn.qk_norm").bucket == "attn.qk_norm"
    assert cprof.cpu_bucket_timer(bucket="sampler").bucket == "sampler"
    for call in (lambda: cprof.cuda_bucket_timer(), lambda: cprof.cuda_bucket_timer("a", "b"),
                 lambda: cprof.cuda_bucket_timer(name="a")):
        # (a second argument is the stream: "b" is not one)
        with pytest.raises(TypeError, match="the bucket name|stream must be"):
            call()


@pytest.mark.parametrize("strict,sync,expected", [(True, None, 2), (True, False, 0),
                                                  (False, None, 0), (False, True, 2)])
def test_cpu_timers_synchronise_under_strict_sync(tmp_path, monkeypatch, strict, sync, expected):
    """Seed 003: with strict_sync, CUDA is synchronised at step boundaries "and for CPU
    timers". Counted through a stand-in for torch.cuda.synchronize (no GPU here)."""
    torch = pytest.importorskip("torch")
    from cprof import runprof
    calls = []
    monkeypatch.setattr(runprof, "_cuda_ready", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: calls.append(1))
    prof = make(tmp_path, warmup_runs=0, engine_profiling=True, strict_sync=strict)
    engine = SimpleNamespace(decode=lambda: 1)
    prof.attach_engine(engine)
    prof.begin_run()
    with prof.step_timing_ctx():
        base = len(calls)  # the step boundary's own sync
        with cprof.cpu_bucket_timer("engine.sampling", sync=sync):
            pass
        timer_syncs = len(calls) - base
        before = len(calls)
        engine.decode()
        hook_syncs = len(calls) - before
    prof.end_run()
    assert timer_syncs == expected
    assert hook_syncs == (2 if strict else 0)
    calls.clear()
    with cprof.cpu_bucket_timer("engine.sampling"):  # outside a step: never
        pass
    assert calls == []


def test_strict_sync_on_another_thread_syncs_the_runs_device(tmp_path, monkeypatch):
    """gpurev2 F4: torch's current device is per thread, and a worker thread that never set
    it has device 0. A run begun on a thread whose device is 1 and stepped on a worker synced
    (and created a context on) device 0. The worker's steps now sync the device current at
    begin_run; steps on begin_run's own thread keep the thread's current device (None)."""
    torch = pytest.importorskip("torch")
    from cprof import runprof
    main = threading.get_ident()
    calls = []
    monkeypatch.setattr(runprof, "_cuda_ready", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device",
                        lambda: 1 if threading.get_ident() == main else 0)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    prof = make(tmp_path, warmup_runs=0, engine_profiling=True, strict_sync=True)
    prof.begin_run()

    def step():
        with prof.step_timing_ctx():
            with cprof.cpu_bucket_timer("engine.sampling"):
                pass

    t = threading.Thread(target=step)
    t.start()
    t.join()
    worker = list(calls)
    calls.clear()
    step()
    prof.end_run()
    assert worker == [1, 1, 1, 1]  # step begin, timer enter / exit, step end
    assert calls == [None] * 4


def test_strict_sync_on_a_worker_that_set_its_device_syncs_that_device(tmp_path, monkeypatch):
    """Decision 165 gave every step on a thread other than begin_run's the device current at
    begin_run. A worker that set its own device (one thread per GPU, one Profiler, begin_run
    on the main thread at device 0) then synced device 0 instead of its own, so its steps no
    longer waited for their own GPU work. A worker whose device is not torch's default (0) set
    it: its steps keep its current device; one still at 0 syncs the run's device (F4)."""
    torch = pytest.importorskip("torch")
    from cprof import runprof
    devices = {threading.get_ident(): 0}
    calls = []
    monkeypatch.setattr(runprof, "_cuda_ready", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device",
                        lambda: devices.get(threading.get_ident(), 0))
    monkeypatch.setattr(torch.cuda, "synchronize",
                        lambda device=None: calls.append(
                            devices.get(threading.get_ident(), 0) if device is None
                            else device))
    prof = make(tmp_path, warmup_runs=0, engine_profiling=True, strict_sync=True)
    prof.begin_run()

    def step(dev):
        if dev is not None:
            devices[threading.get_ident()] = dev  # torch.cuda.set_device(dev) on the worker
        with prof.step_timing_ctx():
            with cprof.cpu_bucket_timer("engine.sampling"):
                pass
        devices.pop(threading.get_ident(), None)  # idents are reused by later threads

    t = threading.Thread(target=step, args=(2,))
    t.start()
    t.join()
    assert calls == [2, 2, 2, 2]  # its own device, not the run's device 0
    calls.clear()
    devices[threading.get_ident()] = 1  # begin_run's thread moves on: a run at device 1
    prof.end_run()
    prof.begin_run()
    t = threading.Thread(target=step, args=(None,))  # a worker that never set its device
    t.start()
    t.join()
    prof.end_run()
    assert calls == [1, 1, 1, 1]  # the run's device (gpurev2 F4), not device 0


def test_two_profilers_stepping_at_once_each_sync_their_own_device(tmp_path, monkeypatch):
    """One Profiler per GPU, each stepped on its own worker thread (begin_run on the main
    thread, whose device was 1 for the first and 3 for the second; the workers never set
    theirs: decision 165 gives their steps the run's device). The CPU timers' sync device and
    whether they sync at all were one process-wide setting, the last opened step's: worker 1's
    timer inside its step synced device 3 (the other GPU) while worker 2's step was open, and
    with the second Profiler's engine profiling off it did not sync at all. Each timer now
    follows the step open on its own thread. The steps interleave in a fixed order (events,
    no timing): step 1 opens, step 2 opens, timer 1, timer 2, step 2 closes, step 1 closes."""
    torch = pytest.importorskip("torch")
    from cprof import runprof
    main = threading.get_ident()
    devices = {main: 1}
    calls = []
    monkeypatch.setattr(runprof, "_cuda_ready", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device",
                        lambda: devices.get(threading.get_ident(), 0))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(
        (threading.current_thread().name,
         devices.get(threading.get_ident(), 0) if device is None else device)))

    def run_pair(second_engine):
        calls.clear()
        devices[main] = 1
        p1 = make(tmp_path / "p1", warmup_runs=0, engine_profiling=True, strict_sync=True)
        p1.begin_run()
        devices[main] = 3
        p2 = make(tmp_path / "p2", warmup_runs=0, engine_profiling=second_engine,
                  strict_sync=True)
        p2.begin_run()
        go = [threading.Event() for _ in range(6)]
        errors = []

        def worker(prof, mine, theirs):
            try:
                assert go[mine[0]].wait(60)
                with prof.step_timing_ctx():
                    go[theirs[0]].set()
                    assert go[mine[1]].wait(60)
                    with cprof.cpu_bucket_timer("engine.sampling"):
                        pass
                    go[theirs[1]].set()
                    assert go[mine[2]].wait(60)
                go[theirs[2]].set()
            except BaseException as err:  # noqa: BLE001 - reported below
                errors.append(repr(err))
                for e in go:
                    e.set()

        # w1: open (0), timer (2), close (5); w2: open (1), timer (3), close (4)
        w1 = threading.Thread(target=worker, args=(p1, (0, 2, 5), (1, 3, 5)), name="w1")
        w2 = threading.Thread(target=worker, args=(p2, (1, 3, 4), (2, 4, 5)), name="w2")
        w1.start()
        w2.start()
        go[0].set()
        w1.join(60)
        w2.join(60)
        p1.end_run()
        p2.end_run()
        assert errors == []
        return [c for c in calls if c[0] == "w1"], [c for c in calls if c[0] == "w2"]

    w1, w2 = run_pair(second_engine=True)
    assert w1 == [("w1", 1)] * 4  # step begin, timer enter / exit, step end: its own GPU
    assert w2 == [("w2", 3)] * 4
    w1, w2 = run_pair(second_engine=False)
    assert w1 == [("w1", 1)] * 4  # its timer still syncs: its own Profiler says so
    assert w2 == [("w2", 3)] * 2  # the steps' boundaries only: no engine profiling there


def test_strict_sync_never_synchronises_inside_a_cuda_graph_capture(tmp_path, monkeypatch):
    """A device synchronize while the thread's stream captures a CUDA graph fails and
    invalidates the user's capture (an inference engine capturing its graphs inside a
    profiled warmup step). strict_sync's syncs (step boundaries, CPU timers) are skipped
    there, with one warning; outside the capture they happen as before."""
    torch = pytest.importorskip("torch")
    from cprof import runprof
    calls, capturing = [], [True]
    monkeypatch.setattr(runprof, "_cuda_ready", lambda: True)
    monkeypatch.setattr(runprof, "_capture_warned", False)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    prof = make(tmp_path, warmup_runs=0, engine_profiling=True, strict_sync=True)
    prof.begin_run()
    with pytest.warns(RuntimeWarning, match="captures a CUDA graph") as w:
        with prof.step_timing_ctx():
            with cprof.cpu_bucket_timer("engine.sampling"):
                pass
    assert calls == [] and len(w) == 1
    capturing[0] = False
    with prof.step_timing_ctx():
        with cprof.cpu_bucket_timer("engine.sampling"):
            pass
    prof.end_run()
    assert len(calls) == 4


def test_bsz_and_label_of_any_kind_keep_summary_json_valid(tmp_path):
    """begin_run(bsz=np.int64(8)) made save_all fail after the runs were collected (and
    bsz=nan, a torch scalar, label=3 too): numbers become numbers, NaN null, labels text."""
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    prof = make(tmp_path, warmup_runs=0)
    for bsz, label in ((np.int64(8), 3), (torch.tensor(4), None), (float("nan"), "x"),
                       (np.float32(2.5), np.str_("y"))):
        prof.begin_run(bsz=bsz, label=label)
        with prof.step_timing_ctx():
            prof.set_step_tokens(1)
        prof.end_run()
    paths = prof.save_all()
    s = json.loads(open(paths[0]).read())
    assert [(r["meta"]["bsz"], r["meta"]["label"]) for r in s["runs"]] == \
        [(8, "3"), (4, None), (None, "x"), (2.5, "y")]


def test_a_label_with_lone_surrogates_is_reported(tmp_path, capsys):
    """A label from os.fsdecode (b'\\xff' -> '\\udcff') or '\\ud800' made end_run's print and
    save_all's report.md raise UnicodeEncodeError, report.md lost and its temp file left: the
    label reads U+FFFD, as a range name in a trace."""
    prof = make(tmp_path, warmup_runs=0, print_per_run=True)
    for label in (os.fsdecode(b"batch_\xff.jsonl"), "x\ud800"):
        prof.begin_run(bsz=1, label=label, source="m\udcfe")
        with prof.step_timing_ctx():
            prof.set_step_tokens(1)
        prof.end_run()
    assert "batch_\ufffd\ufffd\ufffd.jsonl" in capsys.readouterr().out
    sp, rp = prof.save_all()
    assert sorted(os.listdir(prof.output_dir)) == ["report.md", "summary.json"]  # no temp left
    md = open(rp, encoding="utf-8").read()
    assert "batch_\ufffd\ufffd\ufffd.jsonl" in md and "x\ufffd\ufffd\ufffd" in md
    labels = [r["meta"]["label"] for r in json.load(open(sp))["runs"]]
    assert labels == ["batch_\ufffd\ufffd\ufffd.jsonl", "x\ufffd\ufffd\ufffd"]


def test_output_dirs_expand_the_home_directory(tmp_path, monkeypatch):
    """ProfilerContext took "~/x" as $HOME/x, the Profiler and the exports as ./~/x."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    prof = cprof.Profiler(cprof.ProfilerConfig(output_dir="~/out", run_name="r",
                                               print_per_run=False), timing="host")
    assert prof.output_dir == str(tmp_path / "home" / "out" / "r")
    sp, _ = prof.save_all(output_dir="~/elsewhere")
    assert sp == str(tmp_path / "home" / "elsewhere" / "summary.json") and os.path.exists(sp)
    with cprof.profile() as p:
        with cprof.range("r"):
            pass
    assert p.export_chrome_trace("~/t.json") == str(tmp_path / "home" / "t.json")
    assert p.events().export_chrome_trace("~/e.json") == str(tmp_path / "home" / "e.json")
    assert not os.path.exists(tmp_path / "~")


def test_two_profilers_never_share_a_run_directory(tmp_path):
    """A name made in between (generate_run_name("wandb")) let a later Profiler reuse an
    earlier one's directory in the same second, and overwrite its summary.json."""
    a = make(tmp_path, run_name=None)
    cprof.generate_run_name("wandb")
    b = make(tmp_path, run_name=None)
    c = make(tmp_path, run_name=None)
    assert len({a.output_dir, b.output_dir, c.output_dir}) == 3


def test_a_config_edited_after_it_was_made_is_checked(tmp_path):
    cfg = cprof.ProfilerConfig(output_dir=str(tmp_path), run_name="e")
    cfg.kv_len_reduce = "median"
    with pytest.raises(ValueError, match="kv_len_reduce"):
        cprof.Profiler(cfg)
    cfg = cprof.ProfilerConfig(output_dir=str(tmp_path), run_name="e")
    cfg.kv_bins = [4096, 0]
    with pytest.raises(ValueError, match="increasing"):
        cprof.Profiler(cfg)
    cfg = cprof.ProfilerConfig(output_dir=str(tmp_path), run_name="e")
    prof = cprof.Profiler(cfg)
    cfg.kv_len_reduce = "median"  # later edits do not reach the Profiler
    assert prof.cfg.kv_len_reduce == "mean"


def test_negative_kv_lengths_in_a_list_array_or_tensor_are_errors(tmp_path):
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    prof = make(tmp_path, warmup_runs=0)
    prof.begin_run()
    with prof.step_timing_ctx():
        for x in ([-100, 300], np.array([-100, 300]), torch.tensor([-100, 300]),
                  [float("nan"), 3]):
            with pytest.raises(ValueError, match=">= 0"):
                prof.set_step_seq_len(x)
        prof.set_step_seq_len([100, 300])
    prof.end_run()


def test_a_2d_array_of_kv_lengths_counts_as_its_values_like_a_tensor(tmp_path):
    """Seed 003: x "can be an int, list/array, or tensor". A 2-D tensor counted as its
    values; the same lengths as a 2-D numpy array were a TypeError."""
    np = pytest.importorskip("numpy")
    prof = make(tmp_path, warmup_runs=0, kv_len_reduce="max", kv_bins=[0, 1000, 5000])
    prof.begin_run()
    for x in (np.array([[1, 2], [3, 4000]]), np.array([[10], [20]], dtype=np.float32)):
        with prof.step_timing_ctx():
            prof.set_step_seq_len(x)
    with prof.step_timing_ctx():
        with pytest.raises(ValueError, match="no KV lengths"):
            prof.set_step_seq_len(np.zeros((0, 3)))
        with pytest.raises(ValueError, match=">= 0"):
            prof.set_step_seq_len(np.array([[1, -2]]))
    prof.end_run()
    steps = {b["label"]: b["steps"] for b in prof.summary()["decode_length_buckets"]}
    assert steps == {"[0, 1000)": 1, "[1000, 5000)": 1, "[5000, inf)": 0}


def test_steps_that_raise_are_counted_not_silently_dropped(tmp_path):
    prof = make(tmp_path, warmup_runs=0)
    prof.begin_run()
    for i in range(4):
        try:
            with prof.step_timing_ctx():
                prof.set_step_tokens(1)
                if i % 2:
                    raise RuntimeError("boom")
        except RuntimeError:
            pass
    prof.end_run()
    s = prof.summary()
    assert s["stats"]["steps"] == 2
    assert s["meta"]["steps_discarded"] == 2 and s["runs"][0]["meta"]["steps_discarded"] == 2
    paths = prof.save_all()
    md = open([p for p in paths if p.endswith(".md")][0]).read()
    assert "2 step(s) raised inside step_timing_ctx" in md


@pytest.mark.parametrize("raise_inside_bucket", [True, False])
def test_a_step_that_raised_leaves_its_bucket_times_out_of_the_next_step(tmp_path,
                                                                         raise_inside_bucket):
    """The raised step's regions resolve at the run's end: they used to be filed under the
    next step, which was given the same index (one 100 ms failure made a 1 ms bucket 50 ms)."""
    prof = make(tmp_path, warmup_runs=0, engine_profiling=True)
    prof.begin_run()
    for i in range(3):
        try:
            with prof.step_timing_ctx():
                with cprof.cpu_bucket_timer("decode"):
                    time.sleep(0.001)
                    if i == 1:
                        time.sleep(0.1)
                        if raise_inside_bucket:
                            raise RuntimeError("boom")
                if i == 1:
                    raise RuntimeError("boom")
        except RuntimeError:
            pass
    prof.end_run()
    s = prof.summary()
    assert s["stats"]["steps"] == 2 and s["meta"]["steps_discarded"] == 1
    assert 0.9 < s["buckets_engine_avg_ms"]["decode"] < 50, s["buckets_engine_avg_ms"]
    assert s["stats"]["max_ms"] < 50


def test_thousands_of_distinct_buckets_are_all_kept(tmp_path):
    """Every distinct bucket is a row (there was a silent cap of 4,096: the rest vanished
    from the rows and from others)."""
    prof = make(tmp_path, warmup_runs=0, engine_profiling=True)
    prof.begin_run()
    with prof.step_timing_ctx():
        for i in range(5000):
            with cprof.cpu_bucket_timer(f"layer{i}.moe"):
                if i == 4500:
                    time.sleep(0.02)
    prof.end_run()
    rows = prof.summary()["buckets_engine_avg_ms"]
    assert len([k for k in rows if k.startswith("layer")]) == 5000
    assert rows["layer4500.moe"] >= 20
    assert rows["others"] >= 20


def test_tokens_reported_after_a_step_that_raised_are_discarded_with_it(tmp_path):
    """set_step_tokens right after a step goes to the step that just ended; when that step
    raised (discarded), its tokens go with it, not onto the step before it."""
    prof = make(tmp_path, warmup_runs=0)
    prof.begin_run()
    with prof.step_timing_ctx():
        pass
    prof.set_step_tokens(1)
    try:
        with prof.step_timing_ctx():
            raise RuntimeError("oom, retried")
    except RuntimeError:
        pass
    prof.set_step_tokens(7)  # the failed step's count: dropped
    with prof.step_timing_ctx():
        pass
    prof.set_step_tokens(2)  # the next good step's count
    prof.end_run()
    s = prof.summary()
    assert s["stats"]["steps"] == 2 and s["stats"]["tokens"] == 3
    assert s["meta"]["steps_discarded"] == 1


def test_cuda_timers_record_on_a_stream_passed_in(tmp_path):
    """Issue 4: CUDA timers are recorded on the current stream (or a stream passed in): a
    region given stream= records its two boundary events on that stream (the fake driver
    counts cuEventRecord per stream), and is timed into its bucket."""
    so = _fake_so()
    code = f"""
import ctypes, json, sys, time
sys.path.insert(0, {ROOT!r})
import cprof
fake = ctypes.CDLL({so!r})
fake.fake_cuda_records_on.restype = ctypes.c_uint64
fake.fake_cuda_records_on.argtypes = [ctypes.c_uint64]

class Side:  # what cprof reads of a torch.cuda.Stream
    cuda_stream = 0x5151

prof = cprof.Profiler(cprof.ProfilerConfig(output_dir={str(tmp_path)!r}, run_name="s",
                      warmup_runs=0, model_profiling=True, print_per_run=False), timing="cuda")
prof.begin_run()
with prof.step_timing_ctx():
    with cprof.cuda_bucket_timer("attn.qkv_proj", stream=Side()):
        time.sleep(0.002)
    with cprof.attention_compute_timer(stream=0x5252):
        time.sleep(0.002)
    with cprof.cuda_bucket_timer("norm"):
        time.sleep(0.002)
prof.end_run()
errs = []
for bad in ("x", -1):
    try:
        cprof.cuda_bucket_timer("norm", stream=bad)
    except (TypeError, ValueError) as e:
        errs.append(type(e).__name__)
print(json.dumps({{"side": fake.fake_cuda_records_on(0x5151),
                   "raw": fake.fake_cuda_records_on(0x5252),
                   "b": prof.summary()["buckets_model_avg_ms"], "errs": errs}}))
"""
    env = dict(os.environ, CPROF_LIBCUDA_PATH=so, CPROF_CUPTI_PATH=so)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["side"] == 2 and out["raw"] == 2
    assert set(out["b"]) == {"attn.qkv_proj", "attn.compute", "norm"}
    assert all(v >= 1.5 for v in out["b"].values())
    assert out["errs"] == ["TypeError", "ValueError"]


def test_report_says_when_nested_buckets_add_up_past_the_step(tmp_path):
    prof = make(tmp_path, warmup_runs=0, engine_profiling=True)
    prof.begin_run()
    for _ in range(3):
        with prof.step_timing_ctx():
            with cprof.cpu_bucket_timer("decode"):
                with cprof.cpu_bucket_timer("engine.sampling"):
                    time.sleep(0.002)
    prof.end_run()
    md = open(prof.save_all()[1]).read()
    assert "The buckets add up to more than the step" in md
    flat = make(tmp_path, warmup_runs=0, engine_profiling=True, run_name="flat")
    flat.begin_run()
    with flat.step_timing_ctx():
        with cprof.cpu_bucket_timer("decode"):
            time.sleep(0.002)
    flat.end_run()
    assert "add up to more than" not in open(flat.save_all()[1]).read()


def test_numpy_values_stay_numbers_in_the_summary(tmp_path):
    np = pytest.importorskip("numpy")
    prof = make(tmp_path, warmup_runs=0, kv_bins=np.array([0, 512, 1024]))
    assert prof.cfg.kv_bins == [0, 512, 1024] and all(type(b) is int for b in prof.cfg.kv_bins)
    prof.begin_run(prefix_len=np.int32(512), temps=np.array([0.5, 1.0]),
                   t=torch_or_none(np))
    prof.set_step_seq_len(600)
    with prof.step_timing_ctx():
        pass
    prof.end_run()
    s = json.loads(open(prof.save_all()[0]).read())
    meta = s["runs"][0]["meta"]
    assert meta["prefix_len"] == 512 and meta["temps"] == [0.5, 1.0]
    bins = s["decode_length_buckets"]
    assert [b["label"] for b in bins] == ["[0, 512)", "[512, 1024)", "[1024, inf)"]
    assert [type(b["lo"]) for b in bins] == [int, int, int]
    f32 = make(tmp_path, warmup_runs=0, run_name="f", kv_bins=[np.float32(0.5), 2.5])
    assert f32.cfg.kv_bins == [0.5, 2.5]


def torch_or_none(np):
    try:
        import torch
    except ImportError:
        return None
    return torch.tensor(3)


def test_empty_bucket_names_and_kv_lengths_are_refused(tmp_path):
    """An empty bucket name would be a nameless row in summary.json; an empty KV length list
    (or tensor) is refused, and the length the step already had stays."""
    for make_timer in (cprof.cuda_bucket_timer, cprof.cpu_bucket_timer):
        with pytest.raises(ValueError, match="bucket name must not be empty"):
            make_timer("")
    prof = make(tmp_path, warmup_runs=0, kv_bins=[0, 1024])
    prof.begin_run()
    with prof.step_timing_ctx():
        prof.set_step_seq_len(600)
        empties = [[], ()]
        torch = sys.modules.get("torch")
        if torch is not None:
            empties.append(torch.tensor([]))
        for empty in empties:
            with pytest.raises(ValueError, match="no KV lengths"):
                prof.set_step_seq_len(empty)
        prof.set_step_tokens(1)
    prof.end_run()
    (run,) = prof.summary()["runs"]
    assert [b["steps"] for b in run["decode_length_buckets"]] == [1, 0]


def test_profiler_refuses_settings_that_are_no_config(tmp_path):
    for bad in (42, "cfg.yaml", [("run_name", "x")]):
        with pytest.raises(TypeError, match="ProfilerConfig, an argparse namespace"):
            cprof.Profiler(bad)
    assert not any(tmp_path.iterdir())
    assert cprof.ProfilerConfig.from_args(None) == cprof.ProfilerConfig()


def test_attach_refuses_what_is_no_model_or_engine(tmp_path):
    prof = make(tmp_path)
    with pytest.raises(TypeError, match="attach_model takes a torch.nn.Module"):
        prof.attach_model(42)
    for bad in (None, "engine"):
        with pytest.raises(TypeError, match="attach_engine takes the engine"):
            prof.attach_engine(bad)
    with pytest.warns(RuntimeWarning, match="none of the phase methods"):
        assert prof.attach_engine(object()) == {}


class _PicklableEngine:
    def __init__(self):
        self.calls = 0

    def decode(self, x):
        self.calls += 1
        return x * 2


def test_attached_engine_pickles_and_deepcopies(tmp_path):
    """attach_engine's wrappers are objects holding the engine, as attach_model's: pickle and
    copy.deepcopy take the engine, and the copy's methods run on the copy, still timed."""
    import copy
    import pickle

    prof = make(tmp_path, warmup_runs=0, engine_profiling=True)
    eng = _PicklableEngine()
    assert prof.attach_engine(eng) == {"decode": "decode"}
    assert eng.decode.__name__ == "decode"
    eng2 = pickle.loads(pickle.dumps(eng))
    eng3 = copy.deepcopy(eng)
    prof.begin_run()
    with prof.step_timing_ctx():
        assert eng2.decode(3) == 6 and eng3.decode(1) == 2
    prof.end_run()
    assert (eng.calls, eng2.calls, eng3.calls) == (0, 1, 1)
    assert list(prof.summary()["buckets_engine_avg_ms"]) == ["decode"]
    assert prof.attach_engine(eng2) == {}  # attached already


class _StaticEngine:
    @staticmethod
    def decode(x):
        return ("static", x)

    @classmethod
    def prefill(cls, x):
        return ("cls", x)

    def sample(self, x):
        return ("inst", x)


def test_attach_engine_keeps_static_and_class_methods_callable(tmp_path):
    prof = make(tmp_path, warmup_runs=0, engine_profiling=True)
    eng = _StaticEngine()
    assert prof.attach_engine(eng) == {"decode": "decode", "prefill": "prefill",
                                       "sample": "sampler"}
    prof.begin_run()
    with prof.step_timing_ctx():
        assert eng.decode(1) == ("static", 1) and eng.prefill(2) == ("cls", 2)
        assert eng.sample(3) == ("inst", 3)
    prof.end_run()
    assert set(prof.summary()["buckets_engine_avg_ms"]) == {"decode", "prefill", "sampler"}
    assert pickle_roundtrip(eng).decode(4) == ("static", 4)


def pickle_roundtrip(obj):
    import pickle
    return pickle.loads(pickle.dumps(obj))


def test_a_namedtuple_of_settings_is_a_config():
    from collections import namedtuple
    Args = namedtuple("Args", "prof_run_name prof_warmup_runs")
    cfg = cprof.ProfilerConfig.from_args(Args("nt", 3))
    assert cfg.run_name == "nt" and cfg.warmup_runs == 3


def test_steps_overlapping_another_threads_step_are_counted_and_warned(tmp_path):
    """Two Profilers stepping at once on two threads share the one timer gate, so bucket
    times are lost (audit003 F3): such steps are counted per run and in meta, report.md says
    so, and each Profiler warns once (decision 125). A worker thread's timer inside one
    Profiler's step is no overlap and still counts."""
    import threading
    import warnings
    profs = {n: make(tmp_path, run_name=n, warmup_runs=0, engine_profiling=True) for n in "AB"}
    both_open = threading.Barrier(2)

    def work(n):
        p = profs[n]
        p.begin_run(bsz=1, label=n)
        for _ in range(3):
            with p.step_timing_ctx():
                both_open.wait(timeout=10)  # both steps open here
                with cprof.cpu_bucket_timer("decode"):
                    time.sleep(0.001)
                both_open.wait(timeout=10)
        p.end_run()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ts = [threading.Thread(target=work, args=(n,)) for n in "AB"]
        [t.start() for t in ts]
        [t.join() for t in ts]
    assert sum("another thread had a step" in str(w.message) for w in caught) == 2
    for p in profs.values():
        s = p.summary()
        assert s["meta"]["steps_overlapped"] == 3
        assert s["runs"][0]["meta"]["steps_overlapped"] == 3
        md = open(p.save_all()[1]).read()
        assert "3 step(s) overlapped a step of another Profiler on another thread" in md
    # one Profiler, a worker thread's timer inside its step: no overlap, the time counts
    p = make(tmp_path, run_name="w", warmup_runs=0, engine_profiling=True)

    def worker():
        with cprof.cpu_bucket_timer("decode"):
            time.sleep(0.005)

    p.begin_run()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with p.step_timing_ctx():
            t = threading.Thread(target=worker)
            t.start()
            t.join()
    p.end_run()
    s = p.summary()
    assert s["meta"]["steps_overlapped"] == 0
    assert s["buckets_engine_avg_ms"]["decode"] >= 4.5


def test_unknown_bucket_names_are_folded_and_routed_by_prefix(tmp_path):
    """usage.md: case and spaces folded, a model. / engine. prefix decides the domain, for
    unknown names too (audit003 F4); names differing otherwise stay apart."""
    from cprof._runreport import canonical_bucket
    assert canonical_bucket("engine", "model.moe_router") == ("model", None)
    assert canonical_bucket("model", "engine.scheduler") == ("engine", None)
    prof = make(tmp_path, warmup_runs=0, model_profiling=True, engine_profiling=True)
    prof.begin_run()
    with prof.step_timing_ctx():
        for name in ("Spec Verify", "spec verify", " SPEC  VERIFY ", "spec_verify",
                     "model.moe_router"):
            with cprof.cpu_bucket_timer(name):
                pass
        with cprof.cuda_bucket_timer("engine.scheduler"):
            pass
    prof.end_run()
    s = prof.summary()
    assert list(s["buckets_engine_avg_ms"]) == ["spec verify", "spec_verify",
                                                "engine.scheduler", "others"]
    assert list(s["buckets_model_avg_ms"]) == ["model.moe_router", "others"]


def test_a_note_when_measured_runs_measured_no_step(tmp_path):
    """meta.note "when nothing was measured" covers measured runs with no step, or whose
    steps all raised (audit003 F5)."""
    prof = make(tmp_path, warmup_runs=0)
    prof.begin_run()
    for _ in range(2):
        with pytest.raises(RuntimeError):
            with prof.step_timing_ctx():
                raise RuntimeError("boom")
    prof.end_run()
    note = prof.summary()["meta"]["note"]
    assert note and "no measured step" in note and "2 step(s) raised" in note
    empty = make(tmp_path, run_name="e", warmup_runs=0)
    empty.begin_run()
    empty.end_run()
    assert "no measured step" in empty.summary()["meta"]["note"]
    assert "no measured step" in open(empty.save_all()[1]).read()


def test_begin_run_refuses_cprofs_own_meta_keys_and_non_numeric_bsz(tmp_path):
    """audit003 F6a: a keyword named like one of cprof's run meta keys was overwritten
    silently; bsz is kept as a number, so anything else is refused (a string of digits, as
    argparse gives, is a number)."""
    prof = make(tmp_path, warmup_runs=0)
    with pytest.raises(ValueError, match="'index', 'warmup'"):
        prof.begin_run(warmup=False, index=99, prefix_len=3)
    for bad in ("abc", [1, 2], True, {"a": 1}):
        with pytest.raises(TypeError, match="bsz"):
            prof.begin_run(bsz=bad)
    assert prof.runs == [] and prof._run is None  # nothing half-opened
    prof.begin_run(bsz="8", prefix_len=3)
    prof.end_run()
    meta = prof.summary()["runs"][0]["meta"]
    assert meta["bsz"] == 8 and meta["prefix_len"] == 3 and meta["index"] == 0


def test_report_tables_escape_pipes_and_newlines(tmp_path):
    """audit003 F6b: "|" split a table row even in a code span, a newline ended it."""
    prof = make(tmp_path, warmup_runs=0, engine_profiling=True)
    prof.begin_run(bsz=1, label="x|y\nz")
    with prof.step_timing_ctx():
        with cprof.cpu_bucket_timer("draft|verify"):
            pass
        with cprof.cpu_bucket_timer("a`b"):
            pass
        with cprof.cpu_bucket_timer("c``d"):  # ended the two-backtick fence early
            pass
    prof.end_run()
    md = open(prof.save_all()[1]).read()
    assert "| `draft\\|verify` |" in md and "| `` a`b `` |" in md
    assert "| ``` c``d ``` |" in md
    assert "| 0 | x\\|y z | 1 |" in md
    cells = None
    for line in md.splitlines():  # every row has as many cells as its table's header
        n = line.count("|") - line.count("\\|")
        if not line.startswith("|"):
            cells = None
        elif cells is None:
            cells = n
        else:
            assert n == cells, line


def test_token_total_past_2_63_is_exact(tmp_path):
    """audit003 F6c: the int64 token sum wrapped negative (two steps of 2^62 tokens)."""
    prof = make(tmp_path, warmup_runs=0)
    prof.begin_run()
    for _ in range(4):
        with prof.step_timing_ctx():
            prof.set_step_tokens(2 ** 63 - 1)
    prof.end_run()
    s = prof.summary()["stats"]
    assert s["tokens"] == 4 * (2 ** 63 - 1)
    assert s["tok_per_s"] == pytest.approx(s["tokens"] / (s["time_ms"] / 1e3))
    json.dumps(s)


def test_a_step_context_exited_unentered_is_a_state_error(tmp_path):
    prof = make(tmp_path, warmup_runs=0)
    prof.begin_run()
    with pytest.raises(cprof.ProfilerStateError, match="without being entered"):
        prof.step_timing_ctx().__exit__(None, None, None)
    prof.end_run()


def test_from_args_maps_the_prefixed_backend_profiling_alias():
    """audit003 F6e: a --prof_* CLI gives prof_backend_profiling."""
    c = cprof.ProfilerConfig.from_args(SimpleNamespace(prof_backend_profiling=True))
    assert c.engine_profiling is True
    c = cprof.ProfilerConfig.from_args(SimpleNamespace(prof_engine_profiling=False,
                                                       prof_backend_profiling=True))
    assert c.engine_profiling is False  # the field's own name wins


def test_summary_stats_min_and_max(tmp_path):
    """summary.json's min_ms / max_ms are the shortest and longest measured steps (only an
    upper bound was checked: a wrong max went unnoticed, mutation audit)."""
    cfg = cprof.ProfilerConfig(output_dir=str(tmp_path), run_name="t", print_per_run=False,
                               warmup_runs=0)
    prof = cprof.Profiler(cfg, timing="host")
    prof.begin_run(bsz=1, label="x")
    lat_ms = [4, 1, 10, 2, 3]
    for ms in lat_ms:
        step = C.step_begin(prof._owner, 0)
        C.step_end(step, ms * 1_000_000, 2, 100.0)
    prof.runs[0].steps = len(lat_ms)
    prof.end_run()
    st = prof.summary()["stats"]
    assert st["min_ms"] == pytest.approx(1.0)
    assert st["max_ms"] == pytest.approx(10.0)
