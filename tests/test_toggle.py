"""cprof.profile.toggle_collection_dynamic on the CPU side (torch.profiler's method): what is
left out while CPU collection is off, what is kept, how the setting carries across a schedule's
windows, and bad input. The CUDA side runs through the fake CUPTI (test_gpu_fake.py)."""
import threading
import warnings

import pytest

import cprof
from cprof import _C
from tests.conftest import load_trace

torch = pytest.importorskip("torch")

CPU = cprof.ProfilerActivity.CPU


def names_of(p):
    return [e.name for e in p.events()]


def test_cpu_off_leaves_out_every_kind_of_range_opened_meanwhile(tmp_path):
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    x = torch.randn(4, 8)
    with cprof.profile(activities=[CPU], with_stack=True, with_modules=True,
                       record_ops=True) as p:
        with cprof.record_function("before"):
            m(x)
        p.toggle_collection_dynamic(False, [CPU])
        with cprof.record_function("during"), torch.profiler.record_function("torch_rf"):
            m(x)
        p.toggle_collection_dynamic(True, [torch.profiler.ProfilerActivity.CPU])
        with cprof.record_function("after"):
            m(x)
    names = names_of(p)
    assert "during" not in names and "torch_rf" not in names
    assert names.count("before") == names.count("after") == 1
    # each kind once per recorded call (before, after), none for the call while off
    for name in ("0", "aten::addmm", "torch._C._nn.linear"):
        assert names.count(name) == 2, (name, names)
    assert sum("forward" in n for n in names) == 2 * 3  # Sequential, Linear, ReLU
    path = tmp_path / "t.json"
    p.export_chrome_trace(str(path))
    meta = load_trace(path)["cprof"]
    assert meta["counts"]["cpu_ranges_toggled_off"] > 10
    assert [(t["enable"], t["activities"]) for t in meta["toggle_collection_dynamic"]["toggles"]
            ] == [(False, ["CPU"]), (True, ["CPU"])]


def test_ranges_open_at_the_toggle_end_normally_and_stacks_stay_balanced():
    with cprof.profile(activities=[CPU], record_ops=False) as p:
        with cprof.record_function("open_across_off"):
            p.toggle_collection_dynamic(False, [CPU])
            opened_off = cprof.record_function("opened_while_off")
            opened_off.__enter__()
            with cprof.record_function("inside_off"):
                pass
            p.toggle_collection_dynamic(True, [CPU])
            with cprof.record_function("inside_on"):
                pass
            opened_off.__exit__(None, None, None)  # pops its unrecorded slot
        with cprof.record_function("later"):
            pass
    ev = {e.name: e for e in p.events()}
    assert set(ev) == {"open_across_off", "inside_on", "later"}
    assert not ev["open_across_off"].truncated
    assert ev["open_across_off"].time_range.end >= ev["inside_on"].time_range.end
    assert ev["inside_on"].cpu_parent is ev["open_across_off"]
    assert ev["later"].cpu_parent is None
    assert _C.depth() == 0


def test_profiler_steps_are_kept_while_cpu_is_off_and_the_setting_carries_on(tmp_path):
    traces = []
    p = cprof.profile(activities=[CPU], record_ops=False,
                      schedule=cprof.schedule(wait=0, warmup=1, active=2, repeat=2),
                      on_trace_ready=lambda prof: traces.append(
                          prof.export_chrome_trace(str(tmp_path / f"{len(traces)}.json"))))
    p.toggle_collection_dynamic(False, ["CPU"])  # before start: the first window opens off
    with p:
        for i in range(6):
            with cprof.record_function(f"work{i}"):
                pass
            if i == 4:
                p.toggle_collection_dynamic(True, [CPU])
            p.step()
    ranges = [sorted(e["name"] for e in load_trace(tmp_path / f"{i}.json")["traceEvents"]
                     if e.get("ph") == "X" and e.get("cat") != "Trace")
              for i in range(2)]
    assert ranges == [["ProfilerStep#1", "ProfilerStep#2"],
                      ["ProfilerStep#4", "ProfilerStep#5", "work5"]]
    meta0 = load_trace(tmp_path / "0.json")["cprof"]
    assert meta0["toggle_collection_dynamic"] == {"off_at_start": ["CPU"], "toggles": []}
    assert meta0["counts"]["cpu_ranges_toggled_off"] == 2
    meta1 = load_trace(tmp_path / "1.json")["cprof"]
    assert meta1["toggle_collection_dynamic"]["off_at_start"] == ["CPU"]
    assert meta1["counts"]["cpu_ranges_toggled_off"] == 1


def test_operators_on_other_threads_are_left_out_too():
    a = torch.randn(64, 64)

    def work():
        for _ in range(20):
            torch.mm(a, a)

    with cprof.profile(activities=[CPU], record_ops=True) as p:
        p.toggle_collection_dynamic(False, [CPU])
        th = threading.Thread(target=work)
        th.start()
        th.join()
        p.toggle_collection_dynamic(True, [CPU])
        torch.mm(a, a)
    assert names_of(p).count("aten::mm") == 1


def test_a_window_without_toggles_has_no_toggle_metadata(tmp_path):
    with cprof.profile(activities=[CPU], record_ops=False) as p:
        with cprof.record_function("x"):
            pass
    p.export_chrome_trace(str(tmp_path / "t.json"))
    meta = load_trace(tmp_path / "t.json")["cprof"]
    assert "toggle_collection_dynamic" not in meta
    assert "cpu_ranges_toggled_off" not in meta["counts"]


def test_bad_input_is_a_clear_error_and_loses_nothing():
    with cprof.profile(activities=[CPU], record_ops=False) as p:
        with cprof.record_function("kept"):
            pass
        with pytest.raises(ValueError, match="valid activities are CPU, CUDA"):
            p.toggle_collection_dynamic(False, ["TPU"])
        with pytest.raises(TypeError, match="enable must be True or False"):
            p.toggle_collection_dynamic("off", [CPU])
        p.toggle_collection_dynamic(False, [])  # nothing to toggle, as torch.profiler
        with pytest.warns(RuntimeWarning, match="MEM cannot be toggled"):
            p.toggle_collection_dynamic(False, [cprof.ProfilerActivity.MEM])
        with cprof.record_function("still_kept"):
            pass
        p.toggle_collection_dynamic(False, CPU)  # a single activity, not in a list
        with cprof.record_function("off"):
            pass
        p.toggle_collection_dynamic(True, CPU)
    assert names_of(p) == ["kept", "still_kept"]


def test_cuda_toggle_without_gpu_collection_changes_nothing_on_the_cpu():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = cprof.profile(activities=["CPU", "CUDA"], record_ops=False)
    with p:
        p.toggle_collection_dynamic(False, [cprof.ProfilerActivity.CUDA])
        with cprof.record_function("cpu_work"):
            pass
        p.toggle_collection_dynamic(True, [cprof.ProfilerActivity.CUDA])
    assert names_of(p) == ["cpu_work"]
