"""cprof traces load in Holistic Trace Analysis the way torch.profiler CPU traces do."""
import pytest

import cprof
from hta_check import count, critical_path_edges, hta_available, load_with_hta

pytestmark = pytest.mark.skipif(not hta_available(), reason="holistictraceanalysis not installed "
                                "(scripts/install_hta.sh)")


def make_cprof_trace(outdir, name, gz=True):
    with cprof.ProfilerContext(output_dir=outdir, profile_name=name, activities=["CPU"],
                               gzip=gz, verbose=False) as p:
        for i in range(3):
            with cprof.range(f"ProfilerStep#{i}"):
                with cprof.range("forward"):
                    with cprof.range("matmul"):
                        pass
                with cprof.range("backward"):
                    pass
    return p.trace_path


@pytest.mark.parametrize("gz", [True, False])
def test_cprof_trace_loads_in_hta(tmp_path, gz):
    path = make_cprof_trace(tmp_path, "hta", gz)
    ok, d = load_with_hta(str(path))
    assert ok, d.get("error")
    assert d["rank_regex_rank"] == 0
    assert count(d, name="forward", cat="user_annotation") == 3
    assert count(d, name="matmul", cat="user_annotation") == 3
    assert count(d, name="ProfilerStep#1") == 1
    assert "cprof" in d["meta_keys"]


def test_rank_from_env_is_what_hta_reads(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    path = make_cprof_trace(tmp_path, "ranked")
    assert path.name == "ranked-rank1.trace.json.gz"
    ok, d = load_with_hta(str(path))
    assert ok, d.get("error")
    assert d["rank_regex_rank"] == 1 and d["ranks"] == [1]


def test_same_shape_as_torch_profiler_cpu_trace(tmp_path):
    torch = pytest.importorskip("torch")
    ref = tmp_path / "ref.pt.trace.json"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with torch.profiler.record_function("forward"):
            torch.ones(4) + 1
    prof.export_chrome_trace(str(ref))
    ok_ref, d_ref = load_with_hta(str(ref))
    ok, d = load_with_hta(str(make_cprof_trace(tmp_path, "mine")))
    assert ok_ref and ok
    # the columns HTA builds for a torch CPU trace exist for ours too
    keys_ref = set(d_ref["events"][0])
    assert keys_ref <= set(d["events"][0])
    assert count(d_ref, name="forward", cat="user_annotation") == 1


def test_trace_with_memory_counters_loads_in_hta(tmp_path):
    """profile_memory's "CPU memory" counter events ("ph": "C") next to the ranges."""
    import time
    with cprof.ProfilerContext(output_dir=tmp_path, profile_name="mem", verbose=False,
                               activities=["CPU", "MEM"]) as p:
        for i in range(3):
            with cprof.range(f"ProfilerStep#{i}"):
                time.sleep(0.002)
    ok, d = load_with_hta(str(p.trace_path))
    assert ok, d.get("error")
    assert count(d, name="ProfilerStep#1") == 1


def test_trace_with_module_events_loads_in_hta(tmp_path):
    """ProfilerContext's defaults (with_stack, record_shapes) on a model: module ranges and
    their "nn.Module: " python_function events (for TensorBoard's Module view) side by side."""
    torch = pytest.importorskip("torch")
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    with cprof.ProfilerContext(output_dir=tmp_path, profile_name="mods", verbose=False,
                               activities=["CPU"]) as p:
        for i in range(2):
            with cprof.range(f"ProfilerStep#{i}"):
                m(torch.randn(2, 8))
    ok, d = load_with_hta(str(p.trace_path))
    assert ok, d.get("error")
    assert count(d, name="0", cat="user_annotation") == 2
    assert count(d, name="nn.Module: 0", cat="python_function") == 2
    assert count(d, name="nn.Module: Sequential", cat="python_function") == 2


def test_critical_path_draws_cross_stream_edges_from_event_waits(tmp_path, fake_so):
    """HTA's critical path analysis turns a Stream Wait Event into a kernel-to-kernel edge
    across streams and an Event Sync into a GPU-to-CPU edge, from the wait_on_* args cprof
    pairs from CUPTI's CUDA_EVENT records (fake CUPTI: producer on stream 7, consumer on 13).
    Without the records (CPROF_CUPTI_CUDA_EVENTS=0) HTA finds no such edge."""
    from test_gpu_fake import run
    edges = {}
    for on in ("1", "0"):
        res = run("event_waits", tmp_path / on, fake_so, CPROF_CUPTI_CUDA_EVENTS=on)
        cpa = critical_path_edges(res["trace"], annotation="step")
        assert cpa["ok"], cpa
        edges[on] = cpa["edges"]
    assert edges["1"].get("SYNC_DEPENDENCY") == 2, edges
    assert "SYNC_DEPENDENCY" not in edges["0"], edges
