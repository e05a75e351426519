"""cprof report / cprof merge end to end, from a subprocess as a user runs them: numbers checked
against values computed by hand from the fake CUPTI script (tests/fake_cupti: the timeline of
fake_cupti_script_basic, in µs after t0), every output format, HTML, exit codes, merging."""
import csv
import errno
import gzip
import io
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, load_trace

FAKE_DIR = os.path.join(ROOT, "tests", "fake_cupti")
FAKE_SO = os.path.join(FAKE_DIR, "libfake_cupti.so")


def cprof(*args, check=True, cwd=None):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "cprof", *map(str, args)], capture_output=True,
                       text=True, env=env, timeout=300, cwd=cwd)
    if check:
        assert r.returncode == 0, r.stderr[-3000:]
    return r


@pytest.fixture(scope="module")
def gpu_trace(tmp_path_factory):
    """A cprof trace with scripted GPU activity (kernels on streams 7 and 13, copies, a set,
    a stream sync, a graph launch, a driver launch)."""
    r = subprocess.run(["bash", os.path.join(FAKE_DIR, "build.sh")], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot build the fake CUPTI library: {r.stderr[-500:]}")
    out = tmp_path_factory.mktemp("fake")
    env = dict(os.environ, CPROF_REPO=ROOT, CPROF_OUT=str(out), CPROF_CUPTI_PATH=FAKE_SO,
               CPROF_LIBCUDA_PATH=FAKE_SO)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "gpu_fake_script.py"),
                        "basic"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])["trace"]


@pytest.fixture(scope="module")
def report(gpu_trace):
    return json.loads(cprof("report", gpu_trace, "--format", "json").stdout)


def by_name(rows, needle):
    return [r for r in rows if needle in r["name"]][0]


def test_kernel_summary_matches_hand_computed(report):
    k = report["kernels"]
    assert [r["instances"] for r in k] == [2, 2, 1, 1, 1]
    gemm = by_name(k, "gemm")  # 45 µs on stream 13 + 19 µs in the graph
    assert gemm == {**gemm, "total_us": 64, "instances": 2, "avg_us": 32, "med_us": 32,
                    "min_us": 19, "max_us": 45, "time_pct": 47.76}
    assert gemm["stddev_us"] == pytest.approx(18.385, abs=1e-3)  # sample: sqrt(2 * 13^2)
    assert report["kernels_total"] == {**report["kernels_total"], "total_us": 134,
                                       "instances": 7, "distinct": 5}
    assert sum(r["time_pct"] for r in k) == pytest.approx(100, abs=0.05)


def test_kernel_occupancy_is_weighted_by_time(report, gpu_trace):
    """Each kernel row's "occupancy_pct" is the trace's est. achieved occupancy % of its
    instances weighted by their durations, and kernels_total's that of all kernels."""
    ks = [e for e in load_trace(gpu_trace)["traceEvents"] if e.get("cat") == "kernel"]
    assert all("est. achieved occupancy %" in e["args"] for e in ks)

    def weighted(evs):
        return round(sum(e["args"]["est. achieved occupancy %"] * e["dur"] for e in evs) /
                     sum(e["dur"] for e in evs), 1)
    for row in report["kernels"]:
        assert row["occupancy_pct"] == pytest.approx(
            weighted([e for e in ks if e["name"] == row["name"]]), abs=0.05)
    assert report["kernels_total"]["occupancy_pct"] == pytest.approx(weighted(ks), abs=0.05)
    assert "occupancy_pct" not in report["cuda_api"][0]


def test_kernel_occupancy_of_kineto_traces(tmp_path):
    """Kineto's values as written: integers, a negative one where it could not compute it (not
    counted), none on older traces (the column stays blank); floats are read too."""
    def k(name, ts, dur, occ=None):
        args = {"device": 0, "stream": 7, "correlation": ts}
        if occ is not None:
            args["est. achieved occupancy %"] = occ
        return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts,
                "dur": dur, "args": args}
    path = tmp_path / "kineto.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": [
        k("a", 0, 30, 50), k("a", 40, 10, 100), k("b", 60, 10, -99), k("c", 80, 10),
        k("d", 100, 20, 12.5)]}))
    rep = json.loads(cprof("report", path, "--format", "json").stdout)
    occ = {r["name"]: r["occupancy_pct"] for r in rep["kernels"]}
    assert occ == {"a": 62.5, "b": None, "c": None, "d": 13}
    assert rep["kernels_total"]["occupancy_pct"] == pytest.approx((1500 + 1000 + 260) / 60,
                                                                  abs=0.05)
    table = cprof("report", path).stdout
    assert "Est. Occ (%)" in table and "62.5" in table


def test_api_and_memory_summaries(report):
    api = {r["name"]: r for r in report["cuda_api"]}
    assert api["cudaLaunchKernel"]["instances"] == 4
    assert api["cudaStreamSynchronize"]["total_us"] == 70
    assert api["cuLaunchKernel"]["total_us"] == 4
    mem = {m["kind"]: m for m in report["memory"]}
    assert mem["HtoD"] == {"kind": "HtoD", "count": 1, "bytes": 4 << 20, "total_us": 8,
                           "gbps": 524.288, "pageable": 1, "small": 0}
    assert mem["DtoH"]["bytes"] == 1 << 20 and mem["DtoH"]["pageable"] == 0
    assert mem["memset"]["count"] == 1 and mem["memset"]["total_us"] == 4
    assert report["launches"]["calls"] == 6  # 4 cudaLaunchKernel, graph, cuLaunchKernel
    assert report["sync"]["calls"] == 1 and report["sync"]["total_us"] == 70


def test_utilisation_and_idle_breakdown(report):
    (dev,) = report["devices"]
    # union of [20,30] [45,95] [105,125] [152,160] [180,200] [216,220] [325,340] [341,360]
    # [390,395] µs
    assert dev["busy_us"] == 151 and dev["kernels"] == 7
    streams = {s["stream"]: s for s in dev["streams"]}
    assert streams[7]["busy_us"] == 81 and streams[7]["ops"] == 7
    assert streams[13]["busy_us"] == 85 and streams[13]["ops"] == 3
    win = report["window"]["dur_us"]
    assert dev["util_pct"] == pytest.approx(100 * 151 / win, abs=0.01)
    idle = dev["idle"]
    assert idle["total_us"] == pytest.approx(win - 151, abs=1e-3)
    assert idle["total_us"] == pytest.approx(
        idle["host_us"] + idle["sync_us"] + idle["short_us"] + idle["other_us"]
        + idle["unknown_us"], abs=1e-3)
    # the gap [220, 325): the CPU waited in cudaStreamSynchronize [230, 300) (after syncs);
    # before it, and after it while the graph was launched [310, 320), the GPU waited on the
    # host, launching in [300, 325) (the launch fills 10 of its 25 µs), not in [220, 230)
    assert idle["sync_us"] == 70
    assert idle["host_us"] - idle["host_launching_us"] >= 10 - 1e-3
    assert idle["short_us"] == 1    # [340, 341] inside the graph
    tl = dev["timeline"]
    assert len(tl["busy_pct"]) == 100
    assert sum(tl["busy_pct"]) * tl["bin_us"] / 100 == pytest.approx(151, rel=0.02)


def test_largest_gaps_name_the_cpu_work(report):
    gaps = report["gaps"]
    assert [g["dur_us"] for g in gaps] == sorted((g["dur_us"] for g in gaps), reverse=True)
    sync = [g for g in gaps if g["kind"] == "sync"][0]
    assert sync["dur_us"] == 70
    # the rest of that gap: before the wait (10 µs) and after it, while the graph is launched
    after = [g for g in gaps if g["start_us"] == pytest.approx(sync["start_us"] + 70)]
    assert [(g["kind"], g["dur_us"], g["launching"]) for g in after] == [("host", 25, True)]
    before = [g for g in gaps if g["start_us"] == pytest.approx(sync["start_us"] - 10)]
    assert [(g["kind"], g["dur_us"], g["launching"]) for g in before] == [("host", 10, False)]
    assert sync["before"] == "Memset (Device)"
    assert "FillFunctor" in sync["after"]
    assert {c["name"] for c in sync["cpu"]} >= {"cudaStreamSynchronize", "Stream Sync"}
    copy_gap = [g for g in gaps if g["dur_us"] == 27][0]  # [125, 152): memcpy launched at 130
    assert copy_gap["kind"] == "host" and copy_gap["after"].startswith("Memcpy HtoD")
    assert copy_gap["cpu"][0]["name"] == "cudaMemcpyAsync"


def test_gpu_time_attributed_to_ranges(report):
    ranges = {r["name"]: r for r in report["ranges"]}
    # every GPU op (7 kernels, 2 copies, 1 set) was launched inside "launches" inside "step"
    assert ranges["launches"]["gpu_us"] == 166 and ranges["launches"]["kernels"] == 10
    assert ranges["step"]["gpu_us"] == 166
    assert report["unattributed_gpu_us"] == 0
    assert report["compiled"]["triton_kernels"] == 1


def test_diagnoses_carry_evidence(report):
    """The scripted trace's GPU idles while the script sleeps (6 launch calls, 34 µs of them,
    in an 11 ms window): an idle GPU, not a launch-bound one."""
    ids = {d["id"]: d for d in report["diagnoses"]}
    assert "gpu_idle" in ids and "pageable_copies" in ids and "launch_bound" not in ids
    gi = ids["gpu_idle"]
    assert gi["evidence"]["util_pct"] < 10 and gi["evidence"]["largest_gap_us"] > 1000
    assert ids["pageable_copies"]["evidence"]["pageable_copies"] == 1


def _launch_trace(path, launches, cpu=()):
    """A Kineto-style trace: each launch (api_ts, api_dur, kernel_ts, kernel_dur) is a
    cudaLaunchKernel on the CPU and its kernel on GPU 0 stream 7 (same correlation); cpu:
    (name, ts, dur) cpu_op ranges. Times in µs."""
    ev = [{"ph": "X", "cat": "cpu_op", "name": n, "pid": 1, "tid": 1, "ts": t, "dur": d}
          for n, t, d in cpu]
    for c, (at, ad, kt, kd) in enumerate(launches, 1):
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                   "tid": 1, "ts": at, "dur": ad, "args": {"correlation": c}})
        ev.append({"ph": "X", "cat": "kernel", "name": f"k{c % 3}", "pid": 0, "tid": 7,
                   "ts": kt, "dur": kd, "args": {"correlation": c, "device": 0, "stream": 7}})
    path.write_text(json.dumps({"traceEvents": ev}))
    return json.loads(cprof("report", path, "--format", "json").stdout)


def test_launch_bound_when_launches_outlast_the_kernels(tmp_path):
    """Seed 001's launch overhead: each launch call (17 µs) outlasts the 4 µs kernel before
    it, so the GPU waits for the host between kernels even though each launch began before
    the gap did: launch-bound, and the idle time counts as waiting on the host."""
    doc = _launch_trace(tmp_path / "lb.json",
                        [(20 * i + 2, 17, 20 * i + 20, 4) for i in range(50)],
                        cpu=[("aten::add", 20 * i, 20) for i in range(50)])
    ids = {d["id"]: d for d in doc["diagnoses"]}
    assert "launch_bound" in ids, [d["id"] for d in doc["diagnoses"]]
    (dev,) = doc["devices"]
    assert dev["idle"]["other_us"] == 0 and dev["idle"]["host_us"] > 500


def test_short_gaps_waiting_on_the_host_are_host_in_table_and_diagnosis(tmp_path):
    """Audit finding 5: 10 µs launches, 3 µs kernels, 7 µs gaps: the table filed the gaps as
    "short" (under 10 µs) while the diagnosis said 100% of the idle time waits on the host.
    A gap whose next launch had not returned is host whatever its length; one whose work was
    queued and that is short stays short; and the two agree."""
    doc = _launch_trace(tmp_path / "lb.json",
                        [(10 * i, 10, 10 * i + 10, 3) for i in range(200)])
    (dev,) = doc["devices"]
    idle = dev["idle"]
    assert idle["short_us"] == 0 and idle["host_us"] == pytest.approx(idle["total_us"])
    (d,) = [d for d in doc["diagnoses"] if d["id"] == "launch_bound"]
    assert d["evidence"]["idle_waiting_on_host_pct"] == 100.0
    # queued work (launches long returned) with 2 µs gaps: short, not waiting on the host
    doc = _launch_trace(tmp_path / "q.json", [(i, 1, 1000 + 5 * i, 3) for i in range(100)])
    idle = doc["devices"][0]["idle"]
    assert idle["host_us"] == 1000  # before the first kernel: its launch was running
    assert idle["short_us"] == pytest.approx(198)


def test_gaps_without_a_launch_to_judge_by_are_unknown(tmp_path):
    """Audit finding 6: a trace without launch calls had all its idle time "waiting on the
    host", and so did the gap after the last GPU op; there is no evidence for that."""
    ev = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": ts, "dur": 100,
           "args": {"device": 0, "stream": 7, "correlation": c}}
          for c, ts in enumerate((1000, 1200, 1300), 1)]
    ev.append({"ph": "X", "cat": "cpu_op", "name": "work", "pid": 1, "tid": 1, "ts": 1000,
               "dur": 900})
    p = tmp_path / "nolaunch.trace.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    doc = json.loads(cprof("report", p, "--format", "json").stdout)
    idle = doc["devices"][0]["idle"]
    assert idle["host_us"] == 0
    assert idle["unknown_us"] == pytest.approx(600)  # [1100, 1200) and [1400, 1900)
    assert {g["kind"] for g in doc["gaps"]} == {"unknown"}
    (d,) = [d for d in doc["diagnoses"] if d["id"] == "gpu_idle"]
    assert "waiting on the host 0.0 µs" in d["summary"] and "unknown" in d["summary"]
    text = cprof("report", p, "--tables", "devices").stdout
    assert "Unknown (us)" in text


def test_gpu_idle_names_the_cpu_event_covering_most_of_the_gap(tmp_path):
    """Audit finding 7: in the 700 µs gap [1300, 2000), step 1 covers 600 µs and step 2
    100 µs; the diagnosis named step 2 (the shortest, first of the innermost-first list).
    Four short events beside a long one no longer push the long one off the list."""
    doc = _launch_trace(tmp_path / "g.json", [(990, 5, 1000, 100), (1190, 5, 1200, 100),
                                              (1995, 5, 2000, 50)],
                        cpu=[("step1", 900, 1000), ("step2", 1900, 200)]
                        + [(f"tiny{i}", 1300 + 80 * i, 75) for i in range(4)])
    (d,) = [d for d in doc["diagnoses"] if d["id"] == "gpu_idle"]
    assert d["evidence"]["cpu_during_gap"] == "step1"
    gap = max(doc["gaps"], key=lambda g: g["dur_us"])
    assert "step1" in [c["name"] for c in gap["cpu"]]
    assert [c["dur_us"] for c in gap["cpu"]] == sorted(c["dur_us"] for c in gap["cpu"])


def test_an_idle_gpu_during_data_loading_is_not_launch_bound(tmp_path):
    """The GPU idles 2 ms while the CPU loads data (no launch in flight): an idle GPU with the
    loader in its largest gap, not launch-bound (CUDA graphs would not help)."""
    doc = _launch_trace(tmp_path / "dl.json", [(0, 5, 6, 5), (2020, 5, 2026, 5)],
                        cpu=[("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                              15, 2000)])
    ids = {d["id"] for d in doc["diagnoses"]}
    assert "launch_bound" not in ids and "gpu_idle" in ids


def _loader_bound_trace(path, sync):
    """Seed-002 audit's loop, 3 steps: a ProfilerStep range around a 3 ms DataLoader range,
    then 50 five-µs kernels (8 µs launch calls, 10 µs apart) and a 500 µs GEMM; with sync, a
    `loss.item()` at each step's end: a 9 µs cudaStreamSynchronize as the GEMM ends."""
    ev, c = [], 0
    for s in range(3):
        t0 = 5000 * s
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1,
                   "tid": 1, "ts": t0, "dur": 5000})
        ev.append({"ph": "X", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": t0 + 10,
                   "dur": 3000,
                   "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"})
        t = t0 + 3020
        for k in range(51):
            c += 1
            kd = 500 if k == 50 else 5
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                       "tid": 1, "ts": t, "dur": 8, "args": {"correlation": c}})
            ev.append({"ph": "X", "cat": "kernel", "name": "gemm" if k == 50 else "small",
                       "pid": 0, "tid": 7, "ts": t + 9, "dur": kd,
                       "args": {"correlation": c, "device": 0, "stream": 7}})
            t += 10
        if sync:  # the CPU waits as the GEMM (t - 1 .. t + 499) ends
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize",
                       "pid": 1, "tid": 1, "ts": t + 495, "dur": 9})
    path.write_text(json.dumps({"traceEvents": ev}))
    return json.loads(cprof("report", path, "--format", "json").stdout)


@pytest.mark.parametrize("sync", [False, True])
def test_a_loop_held_up_by_data_loading_is_diagnosed_as_such(tmp_path, sync):
    """Seed-002 audit findings 2-4. Each step's 3 ms of data loading was: (3) "launch-bound,
    99% of the idle time waiting for the CPU to launch work", because every gap whose next
    launch had not returned counted as launch wait and the launch calls' total passed 10% of
    it; (2) named after the ProfilerStep range, which covers every gap in it, not the
    DataLoader range filling 96% of it; (4) with a `.item()` sync overlapping the gap's
    start, "after syncs" whole, a high "Synchronisation stalls" for 0.1% of the window spent
    in syncs. Now a gap is launch wait only where the next launch fills 3% of it or more,
    the diagnosis names the innermost event covering half the gap, and only the time the
    CPU waited is after syncs."""
    doc = _loader_bound_trace(tmp_path / "dl.json", sync)
    ids = {d["id"]: d for d in doc["diagnoses"]}
    assert "launch_bound" not in ids and "sync_stalls" not in ids, list(ids)
    gi = ids["gpu_idle"]["evidence"]
    assert gi["cpu_during_gap"].startswith("enumerate(DataLoader)")
    (dev,) = doc["devices"]
    idle = dev["idle"]
    assert idle["host_us"] - idle["host_launching_us"] >= 2 * 3000  # the loader's gaps
    assert idle["host_launching_us"] < 0.1 * idle["total_us"]
    # the waits' idle part: 5 µs a step (the GEMM ends 4 µs into the 9 µs wait)
    assert idle["sync_us"] == (pytest.approx(3 * 5) if sync else 0)
    big = max(doc["gaps"], key=lambda g: g["dur_us"])
    assert big["kind"] == "host" and big["dur_us"] > 2900


def test_a_long_wait_over_many_gaps_gives_each_its_waited_part(tmp_path):
    """Review 5 finding 2: a wait on another thread spanning the loop made every gap walk back
    to it (quadratic: 7.6 s at 160k kernels); the part of each gap under a wait is now found
    by one binary search. Each gap inside the long wait is after-sync idle whole; the gaps
    after it are not."""
    ev = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1,
           "tid": 2, "ts": 0, "dur": 1000}]
    for c in range(1, 41):  # kernels 10 µs long every 50 µs: gaps of 40 µs
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                   "tid": 1, "ts": 50 * c - 20, "dur": 5, "args": {"correlation": c}})
        ev.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 50 * c,
                   "dur": 10, "args": {"correlation": c, "device": 0, "stream": 7}})
    p = tmp_path / "w.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    doc = json.loads(cprof("report", p, "--format", "json").stdout)
    idle = doc["devices"][0]["idle"]
    # [0, 1000): the first 50 µs before kernel 1, then 19 gaps of 40 µs, all under the wait
    assert idle["sync_us"] == pytest.approx(50 + 19 * 40)
    assert idle["host_us"] == pytest.approx(20 * 40)  # the 20 gaps after it: launches late


def test_launch_bound_needs_the_launches_in_the_gaps(tmp_path):
    """The positive control of the rule above: the same kernels with no loader between steps
    (the CPU only launching, 8 µs calls 10 µs apart, kernels 5 µs): launch-bound."""
    doc = _launch_trace(tmp_path / "lb.json",
                        [(10 * i, 8, 10 * i + 9, 5) for i in range(300)])
    (d,) = [d for d in doc["diagnoses"] if d["id"] == "launch_bound"]
    assert d["evidence"]["idle_waiting_on_host_pct"] > 90
    idle = doc["devices"][0]["idle"]
    assert idle["host_launching_us"] == pytest.approx(idle["host_us"])


def test_md_and_csv_carry_each_diagnosis_evidence(gpu_trace):
    """Issue 6: diagnoses in words, each with its evidence, in every format."""
    doc = json.loads(cprof("report", gpu_trace, "--format", "json").stdout)
    lb = next(d for d in doc["diagnoses"] if d["id"] == "gpu_idle")
    assert lb["evidence"]
    ev = ", ".join(f"{k}={v}" for k, v in lb["evidence"].items())
    assert f"evidence: {ev}" in cprof("report", gpu_trace).stdout
    md = cprof("report", gpu_trace, "--format", "md").stdout.splitlines()
    assert f"  - evidence: {ev}" in [_md_inline(ln)[1] for ln in md]  # "_" escaped in md
    rows = list(csv.reader(io.StringIO(cprof("report", gpu_trace, "--format", "csv").stdout)))
    head = next(r for r in rows if r[:3] == ["table", "trace", "id"])
    assert head[-1] == "evidence"
    row = next(r for r in rows if r and r[0] == "diagnoses" and r[2] == "gpu_idle")
    assert row[-1] == ev


def test_table_csv_md_formats(gpu_trace):
    table = cprof("report", gpu_trace).stdout
    assert "CUDA GPU Kernel Summary" in table and "Time (%)" in table and "StdDev" in table
    assert "47.8" in table and "is idle most of the window" in table
    rows = list(csv.reader(io.StringIO(cprof("report", gpu_trace, "--format", "csv").stdout)))
    kernels = [r for r in rows if r and r[0] == "kernels"]
    assert len(kernels) == 5 and float(kernels[0][3]) == 64.0  # table, trace, time_pct, total
    md = cprof("report", gpu_trace, "--format", "md").stdout
    assert "| Time (%) |" in md and "### CUDA GPU Kernel Summary" in md
    top = json.loads(cprof("report", gpu_trace, "--format", "json", "--top", "2").stdout)
    assert len(top["kernels"]) == 2 and top["kernels_total"]["distinct"] == 5
    only = cprof("report", gpu_trace, "--tables", "memory").stdout
    assert "GPU Memory Operations" in only and "Kernel Summary" not in only


def test_a_name_with_a_newline_stays_on_its_row(tmp_path):
    """A range name with a newline broke its row in the table format (csv quotes it, md
    escaped it already)."""
    import cprof as cp
    with cp.ProfilerContext(output_dir=tmp_path, profile_name="nl", verbose=False,
                            activities=["CPU"], with_stack=False):
        with cp.range("two\nlines\tname"):
            pass
    (path,) = [p for p in os.listdir(tmp_path) if p.endswith(".trace.json.gz")]
    table = cprof("report", tmp_path / path, "--tables", "ranges").stdout
    (row,) = [ln for ln in table.splitlines() if "two" in ln]
    assert row.endswith("two\\nlines\\tname")
    assert not any(ln.startswith("lines") for ln in table.splitlines())
    rows = list(csv.reader(io.StringIO(cprof("report", tmp_path / path, "--format", "csv",
                                             "--tables", "ranges").stdout)))
    assert any(r and r[-1] == "two\nlines\tname" for r in rows)


def test_control_characters_in_names_and_paths_are_shown_escaped(tmp_path):
    """The table format showed only \\n, \\r and \\t escaped: an ESC or C1 CSI sequence in a
    name (a trace from anywhere) reached the terminal raw and could clear or restyle it."""
    names = ["\x1b[2Jclear", "v\x0bt\x0cf\x7f", "csi\x9b31m", "bell\x07"]
    ev = [{"ph": "X", "cat": "user_annotation", "name": n, "pid": 1, "tid": 1, "ts": 10.0 * i,
           "dur": 5.0} for i, n in enumerate(names)]
    path = tmp_path / "ctl\x1b[31m.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    out = cprof("report", path, "--tables", "ranges").stdout
    shown = [ln.split("user_annotation")[1].strip() for ln in out.splitlines()
             if "user_annotation" in ln]
    assert sorted(shown) == sorted(["\\x1b[2Jclear", "v\\x0bt\\x0cf\\x7f", "csi\\x9b31m",
                                    "bell\\x07"])
    assert "ctl\\x1b[31m.json" in out  # the trace's own path, in the header
    assert not any(c in out for c in "\x1b\x0b\x0c\x7f\x9b\x07")

def test_a_backslash_in_a_name_is_doubled_so_escapes_stay_unambiguous(tmp_path):
    """review7 F4: a name holding a backslash and an "n" printed exactly as one holding a
    newline (escaped to \\n): two different names looked like one. Backslashes are doubled,
    as repr does; the JSON report keeps the names as they are."""
    names = ["a\\nb", "a\nb"]
    ev = [{"ph": "X", "cat": "user_annotation", "name": n, "pid": 1, "tid": 1, "ts": 10.0 * i,
           "dur": 5.0} for i, n in enumerate(names)]
    path = tmp_path / "bs.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    out = cprof("report", path, "--tables", "ranges").stdout
    shown = [ln.split("user_annotation")[1].strip() for ln in out.splitlines()
             if "user_annotation" in ln]
    assert sorted(shown) == sorted(["a\\\\nb", "a\\nb"])
    rep = json.loads(cprof("report", path, "--format", "json", "--tables", "ranges").stdout)
    assert sorted(r["name"] for r in rep["ranges"]) == sorted(names)


def test_a_nul_in_a_name_is_kept_in_json_and_shown_escaped_in_text(tmp_path):
    """The report turned NUL into U+FFFD (names went to cJSON as C strings): the JSON report
    no longer held the trace's name, and "a\\0b" and "a\\ufffdb" became two rows of one name."""
    names = ["a\x00b", "a\ufffdb", "\x00"]
    ev = []
    for corr, n in enumerate(names, 1):
        ev += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                "tid": 1, "ts": 100.0 * corr, "dur": 5.0, "args": {"correlation": corr}},
               {"ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": 7,
                "ts": 100.0 * corr + 10, "dur": 20.0 + corr,
                "args": {"correlation": corr, "device": 0, "stream": 7}},
               {"ph": "X", "cat": "user_annotation", "name": "r" + n, "pid": 1, "tid": 1,
                "ts": 100.0 * corr, "dur": 6.0}]
    path = tmp_path / "nul.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    doc = json.loads(cprof("report", path, "--format", "json").stdout)
    assert sorted(k["name"] for k in doc["kernels"]) == sorted(names)
    assert sorted(r["name"] for r in doc["ranges"]) == sorted("r" + n for n in names)
    assert {g["before"] for g in doc["gaps"]} >= set(names[:2])
    table = cprof("report", path, "--tables", "kernels").stdout
    assert "\x00" not in table
    assert {ln.split()[-1] for ln in table.splitlines() if ln.startswith("  ")} >= \
        {"a\\x00b", "a\ufffdb", "\\x00"}

def _md_inline(s):
    """CommonMark inline reading of s, as far as the report needs: (code spans' contents,
    the text outside them with backslash escapes undone, markup characters left unescaped
    outside code spans)."""
    codes, text, raw, i = [], [], [], 0
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s) and not s[i + 1].isalnum() and s[i + 1].isascii() \
                and not s[i + 1].isspace():
            text.append(s[i + 1])
            i += 2
            continue
        if s[i] == "`":
            j = i
            while j < len(s) and s[j] == "`":
                j += 1
            close = None
            for m in re.finditer("`+", s[j:]):
                if len(m.group()) == j - i:
                    close = j + m.start()
                    break
            if close is None:
                raw.append("`")
                text.append(s[i:j])
                i = j
                continue
            body = s[j:close]
            if body.startswith(" ") and body.endswith(" ") and body.strip():
                body = body[1:-1]
            codes.append(body)
            i = close + j - i
            continue
        if s[i] in "<>*_[]&~":
            raw.append(s[i])
        text.append(s[i])
        i += 1
    return codes, "".join(text), raw


def _md_cells(row):
    """A GFM table row's cells: split on unescaped "|", then "\\|" read as "|" (in code spans
    too)."""
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]]


def test_md_shows_names_and_paths_literally(tmp_path):
    """--format md escaped only "|" and newlines: a demangled template kernel name's "<float>"
    was a raw HTML tag (GitHub drops it), "<img onerror=...>" passed through as HTML, and "**",
    "[..](..)" and backticks were read as markup, in the tables, the diagnoses and the
    "## <trace path>" heading alike."""
    names = ["void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>,"
             " std::array<char*, 1ul> >(int)", "k<img src=x onerror=alert(1)>",
             "k **bold** [link](http://x) `code`", "a``b|c", "`lead", "e\x1b[2J & &amp; ~~s~~",
             " both ends ", "  "]
    ev, t = [], 0.0
    for corr, n in enumerate(names, 1):
        ev += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                "tid": 1, "ts": t, "dur": 5.0, "args": {"correlation": corr}},
               {"ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": 7, "ts": t + 10,
                "dur": 20.0, "args": {"correlation": corr, "device": 0, "stream": 7}},
               {"ph": "X", "cat": "user_annotation", "name": "<script>load*</script>", "pid": 1,
                "tid": 2, "ts": t + 30, "dur": 75.0}]
        t += 100
    path = tmp_path / "k<b>_*x*`.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    md = cprof("report", path, "--format", "md").stdout
    lines = md.splitlines()
    shown = [n.replace("\x1b", "\\x1b") for n in names]
    kernels = lines.index("### CUDA GPU Kernel Summary")
    rows = [_md_cells(ln) for ln in lines[kernels + 4: kernels + 4 + len(names)]]
    assert sorted(_md_inline(r[-1])[0][0] for r in rows) == sorted(shown)
    assert all(_md_inline(c)[2] == [] for r in rows for c in r)
    (gap,) = [_md_cells(ln) for ln in lines if ln.startswith("| 0 | 30.000 |")]
    assert _md_inline(gap[4])[0] == [shown[0]] and _md_inline(gap[5])[0] == [shown[1]]
    assert _md_inline(gap[6])[0] == ["<script>load*</script>", "user_annotation"]
    assert _md_inline(gap[6])[2] == []
    head = _md_inline(lines[0][3:])
    assert lines[0].startswith("## ") and head[0] == [str(path)] and head[2] == []
    assert _md_inline(lines[2]) == ([], f"trace: {path}, producer: unknown, "
                                        f"{len(ev)} events, window {t + 5:.1f} µs", [])
    (idle,) = [ln for ln in lines if ln.startswith("- **GPU 0 is idle")]
    codes, text, raw = _md_inline(idle.split("): ", 1)[1])
    assert "while the CPU ran '<script>load*</script>'" in text and raw == [] and codes == []

def test_html_report_is_self_contained(gpu_trace, tmp_path):
    out = tmp_path / "r.html"
    r = cprof("report", gpu_trace, "--html", out, "-o", tmp_path / "r.txt")
    assert r.stdout == "" and "HTML report written" in r.stderr
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and 'id="kernels"' in page
    assert "Est. occupancy" in page  # the kernels carry it: the column is shown
    assert "http://" not in page and "https://" not in page
    assert "Kernel Summary" in (tmp_path / "r.txt").read_text()


def test_torch_profiler_trace_is_analysed(tmp_path):
    torch = pytest.importorskip("torch")
    m = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())
    path = tmp_path / "torch.pt.trace.json"
    with torch.profiler.profile(schedule=torch.profiler.schedule(wait=0, warmup=1, active=3),
                                on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as p:
        for _ in range(4):
            m(torch.randn(4, 16))
            p.step()
    rep = json.loads(cprof("report", path, "--format", "json").stdout)
    assert rep["trace"]["producer"] == "torch.profiler"
    steps = sorted((e for e in load_trace(path)["traceEvents"] if e.get("ph") == "X" and
                    e.get("cat") == "user_annotation" and
                    e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
    assert len(steps) == 3
    assert [s["name"] for s in rep["steps"]] == [e["name"] for e in steps]
    assert [s["cpu_us"] for s in rep["steps"]] == pytest.approx([e["dur"] for e in steps],
                                                                 abs=1e-3)
    assert any(r["cat"] == "cpu_op" for r in rep["ranges"])
    assert {d["id"] for d in rep["diagnoses"]} >= {"cpu_only"}


def test_bad_input_exit_codes(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "a"')
    r = cprof("report", bad, check=False)
    assert r.returncode == 1 and "truncated" in r.stderr and "bad.json" in r.stderr
    assert r.stdout == ""
    r = cprof("report", tmp_path / "missing.json", check=False)
    assert r.returncode == 1 and "no such file" in r.stderr
    (tmp_path / "empty").mkdir()
    r = cprof("report", tmp_path / "empty", check=False)
    assert r.returncode == 1 and "no trace files" in r.stderr
    notjson = tmp_path / "x.trace.json"
    notjson.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    r = cprof("report", notjson, check=False)
    assert r.returncode == 1 and "cprof report: error:" in r.stderr
    for args in (["--top", "0"], ["--format", "xml"], [], ["--small-copy-bytes", "nan"],
                 ["--small-copy-bytes", "inf"], ["--small-copy-bytes", "1e30"],
                 ["--short-gap-us", "nan"], ["--short-gap-us", "-1"]):
        r = cprof("report", *args, *([notjson] if args else []), check=False)
        assert r.returncode == 2, args
        assert "Traceback" not in r.stderr, args
    for text in ('{"traceEvents": []}', "[]"):  # valid JSON, nothing in it
        (tmp_path / "none.json").write_text(text)
        r = cprof("report", tmp_path / "none.json", check=False)
        assert r.returncode == 1 and "holds no events" in r.stderr and r.stdout == ""
    r = cprof("report", bad, "--tables", "nope", check=False)  # a bad argument, checked first
    assert r.returncode == 2 and "unknown table" in r.stderr and "choose from" in r.stderr
    # an option given empty (an unset shell variable) was taken as not given: -o "" printed
    # the report to stdout, --tables "" printed every table
    for opt, message in (("--tables", "--tables is empty; name one or more of kernels,"),
                         ("--step-range", "--step-range is empty; name the range"),
                         ("-o", "-o is empty; name a file, or leave -o out"),
                         ("--html", "--html is empty; name the HTML file")):
        for value in ("", " , ") if opt == "--tables" else ("",):
            r = cprof("report", bad, opt, value, check=False)
            assert r.returncode == 2 and r.stdout == "", (opt, value)
            assert f"cprof report: error: {message}" in r.stderr, (opt, value)


def test_report_never_writes_over_a_trace(gpu_trace, tmp_path):
    """report -o / --html naming a trace it reads (directly, through a directory or a link),
    or a name the next report would take for a trace: refused (exit 2) before any analysis,
    every input left byte for byte as it was."""
    import shutil
    d = tmp_path / "d"
    d.mkdir()
    t = d / "a.trace.json.gz"
    shutil.copy(gpu_trace, t)
    before = t.read_bytes()
    link = tmp_path / "link.txt"
    link.symlink_to(t)
    for flag in ("-o", "--html"):
        for inputs, out in (([t], t), ([d], t), ([t], link), ([d], d / "new.trace.json"),
                            ([t], tmp_path / "r.pt.trace.json.gz")):
            r = cprof("report", *inputs, flag, out, check=False)
            assert r.returncode == 2, (flag, inputs, out, r.stderr)
            assert "cprof report: error:" in r.stderr and "Traceback" not in r.stderr
            assert r.stdout == ""
            assert t.read_bytes() == before
            assert not (d / "new.trace.json").exists()
    assert "would destroy it" in cprof("report", t, "-o", t, check=False).stderr
    ok = tmp_path / "report.txt"  # an ordinary name is written
    cprof("report", t, "-o", ok)
    assert ok.read_text().startswith(f"trace: {t}")


def test_outputs_write_through_links_and_into_devices_and_fifos(gpu_trace, tmp_path):
    """report -o / --html and merge -o: a symlink's target is replaced (the link stays), a FIFO
    is written into (not replaced by a file), a full device is an error (exit 1, the device
    left as it is); errors name the path given, not a temporary file."""
    import stat
    import threading
    real = tmp_path / "real.csv"
    real.write_text("old")
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    cprof("report", gpu_trace, "--format", "csv", "-o", link)
    assert link.is_symlink() and real.read_text().startswith("table,")
    html_real, html_link = tmp_path / "r.html", tmp_path / "l.html"
    html_real.write_text("old")
    html_link.symlink_to(html_real)
    cprof("report", gpu_trace, "--html", html_link)
    assert html_link.is_symlink() and "<html" in html_real.read_text().lower()
    merged_real, merged_link = tmp_path / "m.json", tmp_path / "ml.json"
    merged_real.write_text("{}")
    merged_link.symlink_to(merged_real)
    cprof("merge", gpu_trace, gpu_trace, "-o", merged_link, "--force")
    assert merged_link.is_symlink() and load_trace(merged_real)["traceEvents"]
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo).read()))
    reader.start()
    cprof("report", gpu_trace, "--format", "csv", "-o", fifo)
    reader.join(30)
    assert got and got[0].startswith("table,")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    if os.path.exists("/dev/full") and stat.S_ISCHR(os.stat("/dev/full").st_mode):
        for args in (["-o", "/dev/full"], ["--html", "/dev/full"]):
            r = cprof("report", gpu_trace, *args, check=False)
            assert r.returncode == 1 and "/dev/full" in r.stderr and ".tmp" not in r.stderr
            assert stat.S_ISCHR(os.stat("/dev/full").st_mode), "the device was replaced"


def _rank_trace(path, rank, base_ns, step_us):
    """A small torch-style rank trace: steps of step_us with one kernel each, a flow."""
    ev = [{"ph": "M", "name": "process_name", "pid": 4242, "tid": 0, "ts": 0,
           "args": {"name": "python"}},
          {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "ts": 0,
           "args": {"name": "GPU 0"}},
          {"ph": "M", "name": "process_sort_index", "pid": 0, "tid": 0, "ts": 0,
           "args": {"sort_index": 5000000}}]
    for s in range(4):
        t0 = 1000.0 + s * step_us
        ev += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 4242,
             "tid": 4242, "ts": t0, "dur": step_us - 1},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242,
             "tid": 4242, "ts": t0 + 1, "dur": 2, "args": {"correlation": s + 1}},
            {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
             "pid": 0, "tid": 7, "ts": t0 + 4, "dur": 10,
             "args": {"device": 0, "stream": 7, "correlation": s + 1}},
            {"ph": "s", "id": s + 1, "pid": 4242, "tid": 4242, "ts": t0 + 1, "cat": "ac2g",
             "name": "ac2g"},
            {"ph": "f", "id": s + 1, "pid": 0, "tid": 7, "ts": t0 + 4, "cat": "ac2g",
             "name": "ac2g", "bp": "e"}]
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Fake"}],
           "distributedInfo": {"rank": rank, "world_size": 2, "backend": "nccl"},
           "baseTimeNanoseconds": base_ns, "traceEvents": ev}
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    return doc


def test_merge_puts_ranks_on_one_timeline(tmp_path):
    d = tmp_path / "job"
    d.mkdir()
    r0 = _rank_trace(d / "job-rank0.trace.json.gz", 0, 1_700_000_000_000_000_000, 100.0)
    _rank_trace(d / "job-rank1.trace.json.gz", 1, 1_700_000_000_000_500_000, 130.0)
    out = tmp_path / "merged.trace.json.gz"
    r = cprof("merge", d, "-o", out)
    assert "merged 2 traces" in r.stderr
    assert "Straggler" in r.stdout and "yes" in r.stdout
    m = load_trace(out)
    ev = m["traceEvents"]
    assert len(ev) == 2 * len(r0["traceEvents"])
    assert m["baseTimeNanoseconds"] == 1_700_000_000_000_000_000
    names = {(e["pid"], e["args"]["name"]) for e in ev if e.get("name") == "process_name"}
    assert names == {(4242, "rank 0: python"), (0, "rank 0: GPU 0"),
                     (10_004_242, "rank 1: python"), (10_000_000, "rank 1: GPU 0")}
    steps = {(e["pid"], e["name"]): e["ts"] for e in ev if e.get("cat") == "user_annotation"}
    assert steps[(4242, "ProfilerStep#0")] == 1000.0
    assert steps[(10_004_242, "ProfilerStep#0")] == pytest.approx(1500.0)  # +500 µs base
    flows = [e["id"] for e in ev if e.get("ph") in ("s", "f")]
    assert len(set(flows)) == len(flows) // 2  # each pair kept, no id shared across ranks
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    assert all(e["args"]["device"] == 0 for e in kernels)  # args untouched
    assert m["cprof"]["merged"][1]["rank"] == 1
    # Kineto's top-level keys (TRACE_FORMAT.md): the job's backend and size, no single rank
    assert m["traceName"] == str(out)
    assert m["distributedInfo"] == {"backend": "nccl", "world_size": 2}
    # the merged file is itself a trace cprof reads, analysed rank by rank: correlation ids
    # and device numbers repeat across ranks and must not be mixed
    rep = json.loads(cprof("report", out, "--format", "json").stdout)
    assert [r["trace"]["rank"] for r in rep["reports"]] == [0, 1]
    for r in rep["reports"]:
        assert r["trace"]["world_size"] == 2
        assert r["kernels_total"]["instances"] == 4
        assert [s["gpu_us"] for s in r["steps"]] == [10] * 4  # one kernel per step, not two
        assert [s["kernels"] for s in r["steps"]] == [1] * 4
        (dev,) = r["devices"]
        assert dev["kernels"] == 4 and dev["busy_us"] == 40
    assert [row["rank"] for row in rep["ranks"]] == [0, 1]
    assert rep["ranks"][1]["straggler"]
    # no overwrite without --force
    r = cprof("merge", d, "-o", out, check=False)
    assert r.returncode == 1 and "--force" in r.stderr
    cprof("merge", d, "-o", out, "--force")


def test_merge_output_errors_say_what_is_wrong(tmp_path):
    """-o DIR said "exists; pass --force" (then, with --force, "Is a directory"), -o FILE/m.json
    said the directory FILE "does not exist", -o "" was "writing  failed" with exit 1."""
    _rank_trace(tmp_path / "r0.trace.json", 0, 0, 1000)
    sub = tmp_path / "sub"
    sub.mkdir()
    for force in ((), ("--force",)):
        r = cprof("merge", tmp_path / "r0.trace.json", "-o", sub, *force, check=False)
        assert r.returncode == 1 and "--force" not in r.stderr, r.stderr
        assert (f"cprof merge: error: {sub} is a directory; name the merged trace file, e.g. "
                f"-o {sub / 'merged.trace.json.gz'}") in r.stderr
    (tmp_path / "afile").write_text("")
    r = cprof("merge", tmp_path / "r0.trace.json", "-o", tmp_path / "afile" / "m.json",
              check=False)
    assert r.returncode == 1 and "does not exist" not in r.stderr
    assert f"the output directory {tmp_path / 'afile'} is a file, not a directory" in r.stderr
    for opt, message in (("-o", "-o is empty; name the merged trace's file"),
                         ("--step-range", "--step-range is empty")):
        args = ("-o", tmp_path / "m.trace.json") if opt != "-o" else ()
        r = cprof("merge", tmp_path / "r0.trace.json", *args, opt, "", check=False)
        assert r.returncode == 2 and f"cprof merge: error: {message}" in r.stderr, r.stderr
    assert sorted(os.listdir(tmp_path)) == ["afile", "r0.trace.json", "sub"]

def test_report_to_a_long_legal_file_name(tmp_path):
    """-o's temporary file (".{name}.{pid}.tmp") was longer than NAME_MAX for a legal name of
    240-255 bytes: "File name too long" for a name the user could create."""
    _rank_trace(tmp_path / "r0.trace.json", 0, 0, 1000)
    name = "x" + "é" * 125 + ".txt"  # 255 bytes; the cut at 200 falls inside an "é"
    r = cprof("report", tmp_path / "r0.trace.json", "-o", tmp_path / name)
    assert r.stdout == "" and "Steps" in (tmp_path / name).read_text()
    assert sorted(os.listdir(tmp_path)) == ["r0.trace.json", name]

def test_a_trace_named_twice_is_read_once(tmp_path):
    """Audit 000 F4: a trace named twice (itself, through its directory, through a link) or
    a copy of it was merged and reported twice: every event of its rank doubled."""
    d = tmp_path / "job"
    d.mkdir()
    r0 = _rank_trace(d / "job-rank0.trace.json.gz", 0, 1_700_000_000_000_000_000, 100.0)
    _rank_trace(d / "job-rank1.trace.json.gz", 1, 1_700_000_000_000_500_000, 130.0)
    (tmp_path / "link.trace.json.gz").symlink_to(d / "job-rank0.trace.json.gz")
    copy = tmp_path / "copy.trace.json.gz"
    copy.write_bytes((d / "job-rank1.trace.json.gz").read_bytes())
    names = [d, d / "job-rank0.trace.json.gz", tmp_path / "link.trace.json.gz", copy,
             d / "job-rank1.trace.json.gz"]
    out = tmp_path / "merged.trace.json.gz"
    r = cprof("merge", *names, "-o", out)
    assert "merged 2 traces" in r.stderr
    assert "job-rank0.trace.json.gz is named twice: read once" in r.stderr
    assert "link.trace.json.gz is the same file as" in r.stderr
    assert "copy.trace.json.gz has the same content as" in r.stderr
    m = load_trace(out)
    assert len(m["traceEvents"]) == 2 * len(r0["traceEvents"])
    assert [i["rank"] for i in m["cprof"]["merged"]] == [0, 1]
    r = cprof("report", *names, "--format", "json")
    assert "named twice" in r.stderr and "same content" in r.stderr
    rep = json.loads(r.stdout)
    assert [row["traces"] for row in rep["ranks"]] == [1, 1]
    assert [x["kernels_total"]["instances"] for x in rep["reports"]] == [4, 4]


def test_ranks_without_steps_are_not_called_free_of_stragglers(tmp_path):
    """Audit 000 F6: "no straggler" was printed when no rank had a step to compare."""
    d = tmp_path / "job"
    d.mkdir()
    for rank in (0, 1):
        _rank_trace(d / f"job-rank{rank}.trace.json.gz", rank, 1_700_000_000_000_000_000, 100.0)
    for cmd in (["report", d], ["merge", d, "-o", tmp_path / "m.trace.json"]):
        out = cprof(*cmd, "--step-range", "no_such_range").stdout
        assert "no straggler" not in out and "no steps to compare" in out, cmd
    assert "no straggler" in cprof("report", d).stdout  # steps, and none straggles


def _gloo_rank_trace(path, rank, work_us, coll_us):
    """A CPU rank of a gloo job: 4 steps of 22 ms, each `work_us` of compute then a
    gloo:all_reduce range of `coll_us` (the wait for the other rank included)."""
    ev = [{"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "ts": 0,
           "args": {"name": "python"}}]
    for s in range(4):
        t0 = 1000.0 + s * 22_000
        ev += [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 7,
                "tid": 7, "ts": t0, "dur": 21_990},
               {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7,
                "ts": t0 + 5, "dur": work_us},
               {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 7,
                "tid": 7, "ts": t0 + 10 + work_us, "dur": coll_us}]
    doc = {"schemaVersion": 1, "traceEvents": ev,
           "distributedInfo": {"rank": rank, "world_size": 2, "backend": "gloo"}}
    path.write_text(json.dumps(doc))


def test_a_gloo_straggler_is_found_by_its_ranges(tmp_path):
    """Multiproc audit M2: on a gloo (CPU) job the collectives column was 0 (NCCL kernels
    only) and the verdict "no straggler", although rank 1 did 10x the work and rank 0 waited
    20 ms a step inside gloo:all_reduce. gloo / MPI / UCC ranges last as long as their
    collective: their time counts where there are no NCCL kernels."""
    d = tmp_path / "job"
    d.mkdir()
    _gloo_rank_trace(d / "r0.pt.trace.json", 0, 2_000, 19_900)
    _gloo_rank_trace(d / "r1.pt.trace.json", 1, 20_000, 1_900)
    rep = json.loads(cprof("report", d, "--format", "json").stdout)
    rows = {r["rank"]: r for r in rep["ranks"]}
    assert rows[0]["collective_step_us"] == pytest.approx(19_900)
    assert [rows[0]["straggler"], rows[1]["straggler"]] == [False, True]
    assert rep["reports"][0]["collectives"] == {**rep["reports"][0]["collectives"],
                                                "kernels": 0, "host_ranges": 4}
    # no collectives at all, steps equal: no verdict, never a positive "no straggler"
    for r in (0, 1):
        _gloo_rank_trace(d / f"r{r}.pt.trace.json", r, 2_000 + 18_000 * r, 0)
        doc = json.loads((d / f"r{r}.pt.trace.json").read_text())
        doc["traceEvents"] = [e for e in doc["traceEvents"] if e["name"] != "gloo:all_reduce"]
        (d / f"r{r}.pt.trace.json").write_text(json.dumps(doc))
    out = cprof("report", d).stdout
    assert "no straggler" not in out and "Steps equal across ranks" in out


def test_an_empty_trace_is_left_out_by_merge_and_report_alike(tmp_path):
    """Audit 000 F4: merge took a trace with no events that report refused. Both now leave it
    out with a warning, and fail only when no input has events."""
    d = tmp_path / "job"
    d.mkdir()
    r0 = _rank_trace(d / "job-rank0.trace.json.gz", 0, 1_700_000_000_000_000_000, 100.0)
    (d / "empty.trace.json").write_text('{"traceEvents": []}')
    out = tmp_path / "merged.trace.json.gz"
    r = cprof("merge", d, "-o", out)
    assert "empty.trace.json: the trace holds no events" in r.stderr and "left out" in r.stderr
    assert "merged 1 traces" in r.stderr
    m = load_trace(out)
    assert len(m["traceEvents"]) == len(r0["traceEvents"])
    assert [os.path.basename(i["path"]) for i in m["cprof"]["merged"]] == [
        "job-rank0.trace.json.gz"]
    r = cprof("report", d, "--format", "json")
    assert "empty.trace.json: the trace holds no events" in r.stderr and "left out" in r.stderr
    assert json.loads(r.stdout)["trace"]["rank"] == 0
    (d / "job-rank0.trace.json.gz").unlink()
    (d / "empty2.trace.json").write_text("[]")
    for cmd in (["merge", d, "-o", tmp_path / "m2.trace.json"], ["report", d]):
        r = cprof(*cmd, check=False)
        assert r.returncode == 1 and "none of the 2" in r.stderr and "events" in r.stderr, cmd
    r = cprof("merge", d / "empty.trace.json", "-o", tmp_path / "m3.trace.json", check=False)
    assert r.returncode == 1 and "holds no events" in r.stderr
    assert not (tmp_path / "m3.trace.json").exists()


def test_merge_keeps_each_inputs_drops_and_end(tmp_path):
    """What an input lost (cprof.dropped) and how its window ended (cprof.end) survive the
    merge: a report on the merged file warns about the drops input by input as one on the
    inputs does (a rank's windows are analysed apart, each with its own drops)."""
    d = tmp_path / "job"
    d.mkdir()
    metas = {"job-rank0.trace.json.gz": (0, {"partial": True, "end": "KeyboardInterrupt",
                                             "dropped": {"cpu_ranges": 7, "gpu_cupti": 0}}),
             "job-rank1.trace.json.gz": (1, {"partial": False, "end": "normal",
                                             "dropped": {"cpu_ranges": 3,
                                                         "gpu_flush_error": -5}}),
             "job-rank1-1.trace.json.gz": (1, {"partial": False, "end": "normal",
                                               "dropped": {"cpu_ranges": 4, "gpu_cupti": 2,
                                                           "gpu_flush_error": -9}})}
    for name, (rank, meta) in metas.items():
        doc = _rank_trace(d / name, rank, 1_700_000_000_000_000_000 + rank * 1000, 100.0)
        doc["cprof"] = dict(meta, version="0")
        with gzip.open(d / name, "wt") as f:
            json.dump(doc, f)
    single = json.loads(cprof("report", d / "job-rank0.trace.json.gz", "--format",
                              "json").stdout)["trace"]
    out = tmp_path / "merged.trace.json.gz"
    cprof("merge", d, "-o", out)
    entries = load_trace(out)["cprof"]["merged"]
    assert sorted(e["end"] for e in entries) == ["KeyboardInterrupt", "normal", "normal"]
    rep = json.loads(cprof("report", out, "--format", "json").stdout)
    r0, r1a, r1b = rep["reports"]
    for key in ("dropped", "end", "partial"):
        assert r0["trace"][key] == single[key], key
    assert r0["trace"]["end"] == "KeyboardInterrupt" and r0["trace"]["partial"] is True
    # inputs in file order: job-rank1-1 sorts before job-rank1
    assert r1a["trace"]["dropped"] == {"cpu_ranges": 4, "gpu_cupti": 2, "gpu_flush_error": -9}
    assert r1b["trace"]["dropped"] == {"cpu_ranges": 3, "gpu_flush_error": -5}
    for r in (r1a, r1b):
        assert r["trace"]["rank"] == 1
        assert r["trace"]["end"] == "normal" and r["trace"]["partial"] is False
    for r in (r0, r1a, r1b):
        assert "dropped" in {x["id"] for x in r["diagnoses"]}
    assert "partial" in {x["id"] for x in r0["diagnoses"]}
    text = cprof("report", out).stdout
    assert text.count("Records were dropped") == 3


def test_stdout_on_a_full_disk_is_a_clean_error(gpu_trace, tmp_path):
    """`cprof report T > /dev/full` printed a Python traceback (-o /dev/full gave a clean
    error); now both give "cprof report: error: cannot write ..." and exit 1, and so does
    merge's table."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for args in (["report", gpu_trace], ["report", gpu_trace, "--format", "json"],
                 ["merge", gpu_trace, "-o", tmp_path / "m.trace.json.gz"]):
        with open("/dev/full", "w") as full:
            r = subprocess.run([sys.executable, "-m", "cprof", *map(str, args)], stdout=full,
                               stderr=subprocess.PIPE, text=True, env=env, timeout=300)
        assert r.returncode == 1, (args, r.stderr)
        assert "Traceback" not in r.stderr, r.stderr
        lines = r.stderr.strip().splitlines()
        assert lines[-1].startswith(f"cprof {args[0]}: error: cannot write to standard output"), \
            r.stderr
        assert len([x for x in lines if "error:" in x]) == 1, r.stderr


def test_losses_outside_dropped_are_diagnosed_and_survive_a_merge(tmp_path):
    """The report diagnosed only cprof.dropped: names refused by a full name table, operator
    shapes lost and allocation events past the limit (recorded elsewhere in the metadata)
    got no word. Each is now a diagnosis with its count and in trace.losses, also per input
    of a merged file."""
    d = tmp_path / "job"
    d.mkdir()
    metas = {"job-rank0.trace.json.gz": (0, {"names_refused": 89, "ops": {"shape_errors": 7},
                                             "memory": {"allocation_events_dropped": 100000},
                                             "dropped": {"cpu_ranges": 0}}),
             "job-rank1.trace.json.gz": (1, {"names_refused": 0, "ops": {"names": 3}})}
    for name, (rank, meta) in metas.items():
        doc = _rank_trace(d / name, rank, 1_700_000_000_000_000_000 + rank * 1000, 100.0)
        doc["cprof"] = dict(meta, version="0")
        with gzip.open(d / name, "wt") as f:
            json.dump(doc, f)
    want = {"names_refused": 89, "op_shape_errors": 7, "allocation_events_dropped": 100000}
    ids = {"names_refused", "op_shapes_lost", "allocation_events_dropped"}
    single = json.loads(cprof("report", d / "job-rank0.trace.json.gz", "--format",
                              "json").stdout)
    assert single["trace"]["losses"] == want
    assert single["trace"]["dropped"] == {"cpu_ranges": 0}
    diags = {x["id"]: x for x in single["diagnoses"]}
    assert ids <= set(diags) and "dropped" not in diags
    assert diags["names_refused"]["evidence"] == {"names_refused": 89}
    assert "89 names" in diags["names_refused"]["summary"]
    assert "100,000 allocation events" in diags["allocation_events_dropped"]["summary"]
    assert "7 operator calls" in diags["op_shapes_lost"]["summary"]
    clean = json.loads(cprof("report", d / "job-rank1.trace.json.gz", "--format",
                             "json").stdout)
    assert clean["trace"]["losses"] == {} and not ids & {x["id"] for x in clean["diagnoses"]}
    out = tmp_path / "merged.trace.json.gz"
    cprof("merge", d, "-o", out)
    r0, r1 = json.loads(cprof("report", out, "--format", "json").stdout)["reports"]
    assert r0["trace"]["losses"] == want and r1["trace"]["losses"] == {}
    assert ids <= {x["id"] for x in r0["diagnoses"]}
    text = cprof("report", d / "job-rank0.trace.json.gz").stdout
    assert "name table was full" in text and "Allocation events were dropped" in text


def test_report_of_several_ranks_flags_the_straggler(tmp_path):
    _rank_trace(tmp_path / "a-rank0.trace.json.gz", 0, 1_700_000_000_000_000_000, 100.0)
    _rank_trace(tmp_path / "a-rank1.trace.json.gz", 1, 1_700_000_000_000_000_000, 130.0)
    doc = json.loads(cprof("report", tmp_path, "--format", "json").stdout)
    ranks = {r["rank"]: r for r in doc["ranks"]}
    assert ranks[0]["step_med_us"] == 99 and ranks[1]["step_med_us"] == 129
    assert ranks[1]["straggler"] and not ranks[0]["straggler"]
    assert ranks[0]["collective_us"] == 40
    (diag,) = doc["diagnoses"]
    assert diag["id"] == "stragglers" and diag["evidence"]["worst_rank"] == 1
    assert diag["evidence"]["mode"] == "step_time"


def _sync_rank_trace(path, rank, work_us, coll_us, steps=6, windows_base=0):
    """A rank of a job that synchronises every step: work_us of compute kernels, then an
    all-reduce whose NCCL kernel lasts coll_us (the wait for the slowest rank included), so
    every rank's step takes the same time."""
    step_us = 200.0
    ev = [{"ph": "M", "name": "process_name", "pid": 77, "tid": 0, "ts": 0,
           "args": {"name": "python"}}]
    for s in range(steps):
        t0 = 1000.0 + windows_base + s * step_us
        c = 2 * s + 1 + int(windows_base)  # CUPTI's ids grow over the process's windows
        ev += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 77,
             "tid": 77, "ts": t0, "dur": step_us - 1},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 77,
             "tid": 77, "ts": t0 + 1, "dur": 2, "args": {"correlation": c}},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t0 + 4,
             "dur": work_us, "args": {"device": 0, "stream": 7, "correlation": c}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 77,
             "tid": 77, "ts": t0 + 4, "dur": 2, "args": {"correlation": c + 1}},
            {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
             "pid": 0, "tid": 9, "ts": t0 + 4 + work_us, "dur": coll_us,
             "args": {"device": 0, "stream": 9, "correlation": c + 1}}]
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Fake"}],
           "distributedInfo": {"rank": rank, "world_size": 4, "backend": "nccl"},
           "baseTimeNanoseconds": 1_700_000_000_000_000_000, "traceEvents": ev}
    with open(path, "w") as f:
        json.dump(doc, f)


def test_straggler_found_when_ranks_synchronise_every_step(tmp_path):
    """All ranks take 199 µs per step (the all-reduce waits for the slowest), so step times
    cannot tell; rank 2 computes 150 µs where the others compute 100 and wait 50 more in NCCL."""
    for rank in range(4):
        work = 150.0 if rank == 2 else 100.0
        _sync_rank_trace(tmp_path / f"job-rank{rank}.pt.trace.json", rank, work, 190.0 - work)
    doc = json.loads(cprof("report", tmp_path, "--format", "json").stdout)
    ranks = {r["rank"]: r for r in doc["ranks"]}
    assert {r["step_med_us"] for r in ranks.values()} == {199}
    assert [r for r in ranks if ranks[r]["straggler"]] == [2]
    assert ranks[2]["collective_step_us"] == 40 and ranks[0]["collective_step_us"] == 90
    (diag,) = doc["diagnoses"]
    ev = diag["evidence"]
    assert diag["id"] == "stragglers" and ev["mode"] == "synchronised"
    assert ev["worst_rank"] == 2 and ev["ratio"] == pytest.approx(159 / 109, abs=1e-3)
    assert "synchronise" in diag["summary"] and "rank 2" in diag["summary"]
    text = cprof("report", tmp_path).stdout
    assert "Coll./step (us)" in text and "yes" in text


def test_balanced_synchronised_ranks_have_no_straggler(tmp_path):
    for rank in range(4):
        work = 100.0 + rank  # 1% apart: noise, not a straggler
        _sync_rank_trace(tmp_path / f"job-rank{rank}.pt.trace.json", rank, work, 190.0 - work)
    doc = json.loads(cprof("report", tmp_path, "--format", "json").stdout)
    assert not any(r["straggler"] for r in doc["ranks"])
    assert doc["diagnoses"] == []


def test_windows_of_one_rank_are_pooled_not_compared_as_ranks(tmp_path):
    """A schedule with repeat=3 writes three traces of the same rank into one directory: one
    row, its steps pooled, and no straggler verdict between windows."""
    for w, work in enumerate((100.0, 140.0, 100.0)):
        _sync_rank_trace(tmp_path / f"host_1.{w}.pt.trace.json", 0, work, 20.0,
                         windows_base=w * 10_000)
    doc = json.loads(cprof("report", tmp_path, "--format", "json").stdout)
    assert len(doc["reports"]) == 3
    (row,) = doc["ranks"]
    assert row["rank"] == 0 and row["traces"] == 3 and row["steps"] == 18
    assert "(+2 more)" in row["path"]
    assert not row["straggler"] and doc["diagnoses"] == []
    html = tmp_path / "r.html"
    cprof("report", tmp_path, "--html", html)
    assert "cprof report: 3 traces, 1 rank" in html.read_text()


def test_traces_without_rank_are_listed_not_ranked(tmp_path):
    """torch.profiler traces written outside torch.distributed carry no rank: no straggler
    verdict between them (they may be windows of one run, or unrelated runs)."""
    for i, step in enumerate((100.0, 150.0)):
        doc = _rank_trace(tmp_path / f"t{i}.pt.trace.json.gz", 0, 0, step)
        del doc["distributedInfo"]
        with gzip.open(tmp_path / f"t{i}.pt.trace.json.gz", "wt") as f:
            json.dump(doc, f)
    doc = json.loads(cprof("report", tmp_path, "--format", "json").stdout)
    assert [r["rank"] for r in doc["ranks"]] == [None, None]
    assert not any(r["straggler"] for r in doc["ranks"])
    (diag,) = doc["diagnoses"]
    assert diag["id"] == "no_rank_info" and diag["severity"] == "info"
    cprof("report", tmp_path)  # the text form prints the rows without a rank


def test_a_merge_written_beside_its_inputs_is_not_counted_again(tmp_path):
    """`cprof merge d -o d/merged...` then `cprof report d` (or another merge of d): the
    merged file is left out with a note, each rank counted once; named alone it is read."""
    d = tmp_path / "job"
    d.mkdir()
    _rank_trace(d / "job-rank0.trace.json.gz", 0, 1_700_000_000_000_000_000, 100.0)
    _rank_trace(d / "job-rank1.trace.json.gz", 1, 1_700_000_000_000_500_000, 130.0)
    merged = d / "merged.trace.json.gz"
    cprof("merge", d, "-o", merged)
    r = cprof("report", d, "--format", "json")
    assert "merged.trace.json.gz is a `cprof merge` of traces" in r.stderr
    rep = json.loads(r.stdout)
    assert [(row["rank"], row["traces"], row["steps"]) for row in rep["ranks"]] == \
        [(0, 1, 4), (1, 1, 4)]
    again = cprof("merge", d, "-o", tmp_path / "again.trace.json")
    assert "merged 2 traces" in again.stderr
    assert len(load_trace(tmp_path / "again.trace.json")["traceEvents"]) == \
        len(load_trace(merged)["traceEvents"])
    alone = json.loads(cprof("report", merged, "--format", "json").stdout)
    assert [r["trace"]["rank"] for r in alone["reports"]] == [0, 1]
    # only some of its inputs beside it: kept, and the double count is said
    os.remove(d / "job-rank1.trace.json.gz")
    r = cprof("report", d, "--format", "json")
    assert "1 of its 2 inputs are in" in r.stderr and "counted twice" in r.stderr


def test_merge_labels_inputs_without_a_rank_by_position(tmp_path):
    """A torch.profiler trace written outside torch.distributed merged with rank 0's trace was
    labelled "rank 0" as well (its position), so both looked like one rank."""
    d = tmp_path / "in"
    d.mkdir()
    _rank_trace(d / "a-rank0.trace.json.gz", 0, 1_700_000_000_000_000_000, 100.0)
    doc = _rank_trace(d / "b.pt.trace.json.gz", 0, 1_700_000_000_000_000_000, 120.0)
    del doc["distributedInfo"]
    with gzip.open(d / "b.pt.trace.json.gz", "wt") as f:
        json.dump(doc, f)
    out = tmp_path / "m.json"
    cprof("merge", d / "a-rank0.trace.json.gz", d / "b.pt.trace.json.gz", "-o", out)
    m = load_trace(out)
    names = {e["args"]["name"] for e in m["traceEvents"] if e.get("name") == "process_name"}
    assert names == {"rank 0: python", "rank 0: GPU 0", "trace 1: python", "trace 1: GPU 0"}
    merged = m["cprof"]["merged"]
    assert [x["rank"] for x in merged] == [0, 1] and merged[1]["ranked"] is False
    assert "ranked" not in merged[0]
    pids = {e["pid"] for e in m["traceEvents"] if e.get("name") == "process_name"}
    assert len(pids) == 4  # its own process rows, not rank 0's


def test_report_of_a_merged_file_keeps_an_input_without_rank_unranked(tmp_path):
    """A merged file is analysed as its inputs were: the trace with no rank of its own was
    reported as "Rank 2" of a world of 2, and flagged a straggler the direct report (rows
    without a rank get no verdict) does not flag."""
    d = tmp_path / "in"
    d.mkdir()
    _rank_trace(d / "a-rank0.trace.json.gz", 0, 1_700_000_000_000_000_000, 100.0)
    _rank_trace(d / "a-rank1.trace.json.gz", 1, 1_700_000_000_000_000_000, 100.0)
    doc = _rank_trace(d / "solo.pt.trace.json.gz", 0, 1_700_000_000_000_000_000, 170.0)
    del doc["distributedInfo"]
    with gzip.open(d / "solo.pt.trace.json.gz", "wt") as f:
        json.dump(doc, f)
    inputs = [d / "a-rank0.trace.json.gz", d / "a-rank1.trace.json.gz",
              d / "solo.pt.trace.json.gz"]
    direct = json.loads(cprof("report", *inputs, "--format", "json").stdout)
    out = tmp_path / "m.json"
    cprof("merge", *inputs, "-o", out)
    merged = json.loads(cprof("report", out, "--format", "json").stdout)
    for doc in (direct, merged):
        assert [r["rank"] for r in doc["ranks"]] == [0, 1, None]
        assert not any(r["straggler"] for r in doc["ranks"])
        assert "straggler" not in {x["id"] for x in doc["diagnoses"]}
    reps = merged["reports"]
    assert [r["trace"]["rank"] for r in reps] == [0, 1, None]
    assert [r["trace"].get("world_size") for r in reps][:2] == [2, 2]
    assert [r["steps_total"]["count"] if "steps_total" in r else len(r["steps"])
            for r in reps] == [len(r["steps"]) for r in direct["reports"]]


def test_merge_names_the_processes_an_input_left_unnamed(tmp_path):
    """Issue 6: a process group per rank, labelled; an input without process_name metadata
    (a hand-made or trimmed trace) still gets "rank R: process P" for each of its processes."""
    for rank in (0, 1):
        doc = _rank_trace(tmp_path / f"j-rank{rank}.trace.json.gz", rank, 1_700_000_000_0, 100.0)
        doc["traceEvents"] = [e for e in doc["traceEvents"] if e["ph"] != "M"]
        with gzip.open(tmp_path / f"j-rank{rank}.trace.json.gz", "wt") as f:
            json.dump(doc, f)
    out = tmp_path / "out" / "m.json"
    out.parent.mkdir()
    cprof("merge", tmp_path, "-o", out)
    m = load_trace(out)
    names = {e["pid"]: e["args"]["name"] for e in m["traceEvents"]
             if e.get("ph") == "M" and e["name"] == "process_name"}
    assert sorted(names.values()) == ["rank 0: process 0", "rank 0: process 4242",
                                      "rank 1: process 0", "rank 1: process 4242"]
    pids = {e["pid"] for e in m["traceEvents"] if e.get("ph") == "X"}
    assert pids == set(names)  # each process that has events is named


GRAPH_BREAK_PROGRAM = r"""
import sys, torch, torch.profiler as P
def f(x):
    x = torch.sin(x) + 1
    print("graph break")  # dynamo cannot trace print: the frame is split in two
    return torch.cos(x) * 2
cf = torch.compile(f, backend="eager")
x = torch.randn(100)
cf(x)
with P.profile() as p:
    for _ in range(3):
        cf(x)
p.export_chrome_trace(sys.argv[1])
"""


def test_graph_breaks_found_in_a_real_compiled_trace(tmp_path):
    """torch.compile with a graph break, profiled by torch.profiler on CPU: the resumed frame
    runs as a "Torch-Compiled Region" nested inside the first one (seed 001)."""
    pytest.importorskip("torch")
    path = tmp_path / "gb.pt.trace.json"
    r = subprocess.run([sys.executable, "-c", GRAPH_BREAK_PROGRAM, str(path)],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.skip(f"torch.compile unavailable here: {r.stderr[-300:]}")
    rep = json.loads(cprof("report", path, "--format", "json").stdout)
    assert rep["compiled"]["regions"] == 6 and rep["compiled"]["nested"] == 3
    gb = [d for d in rep["diagnoses"] if d["id"] == "graph_breaks"][0]
    assert gb["evidence"]["nested_regions"] == 3 and gb["evidence"]["max_depth"] == 2


def test_byte_columns_use_si_units_like_gb_per_s():
    from cprof._diagnose import _fmt_bytes
    assert _fmt_bytes(1_000_000) == "1.0 MB" and _fmt_bytes(2_000_000) == "2.0 MB"
    assert _fmt_bytes(999) == "999 B" and _fmt_bytes(1_500) == "1.5 KB"


def test_merged_file_with_several_windows_per_rank_reports_as_its_inputs(tmp_path):
    """A schedule with repeat=2 on two ranks: four inputs, two ranks, correlation ids
    repeating in each window. Audit finding 3: the merged file's report analysed a rank's
    windows as one, so the 10 ms between them was GPU idle "waiting on the host" and the
    launches of one window joined the kernels of the other (step GPU time doubled). Now each
    input is analysed apart and the report equals the one of the inputs' directory."""
    d = tmp_path / "traces"
    d.mkdir()
    for rank in range(2):
        for w in range(2):
            _sync_rank_trace(d / f"host_{rank}.{w}.pt.trace.json", rank, 100.0, 50.0,
                             windows_base=w * 10_000)
    out = tmp_path / "merged.trace.json"
    r = cprof("merge", d, "-o", out)
    assert "same rank" in r.stderr
    doc = json.loads(cprof("report", out, "--format", "json").stdout)
    assert [x["trace"]["rank"] for x in doc["reports"]] == [0, 0, 1, 1]
    assert all(x["trace"]["world_size"] == 2 for x in doc["reports"])
    assert [(x["rank"], x["traces"], x["steps"]) for x in doc["ranks"]] == [(0, 2, 12),
                                                                           (1, 2, 12)]
    inputs = json.loads(cprof("report", d, "--format", "json").stdout)

    def figures(doc):
        return [(x["trace"]["rank"], x["window"]["dur_us"], x["kernels_total"]["instances"],
                 [(v["busy_us"], v["idle"]) for v in x["devices"]],
                 [(g["dur_us"], g["kind"]) for g in x["gaps"]],
                 [(s["gpu_us"], s["kernels"]) for s in x["steps"]]) for x in doc["reports"]]

    assert figures(doc) == figures(inputs)
    for x in doc["reports"]:
        assert x["kernels_total"]["instances"] == 12  # 6 steps x 2 kernels
        assert all(s["kernels"] == 2 for s in x["steps"])
        assert max(g["dur_us"] for g in x["gaps"]) < 1000
    assert [(x["rank"], x["gpu_busy_pct"]) for x in doc["ranks"]] == \
        [(x["rank"], x["gpu_busy_pct"]) for x in inputs["ranks"]]
    # a merge written before first_event: the rank's windows are analysed together
    old = json.loads(out.read_text())
    for e in old["cprof"]["merged"]:
        del e["first_event"]
    out.write_text(json.dumps(old))
    doc = json.loads(cprof("report", out, "--format", "json").stdout)
    assert [x["trace"]["rank"] for x in doc["reports"]] == [0, 1]
    assert [x["kernels_total"]["instances"] for x in doc["reports"]] == [24, 24]


def _gap_rank_trace(path, rank, sync):
    """One rank: kernels [100, 150) and [500, 550) on GPU 0 stream 7, each launched 10 µs
    before it (the GPU idle [150, 500) waiting on the host); with sync, the rank's thread
    also waits in cudaStreamSynchronize [200, 450) with its CUPTI `Stream Sync` record, inside
    that gap on the merged timeline (both ranks share one base time)."""
    pid = 4242 + rank
    ev = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": 0,
           "args": {"name": "python"}}]
    for c, (lt, kt) in enumerate([(90, 100), (490, 500)], 1):
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid,
                   "tid": pid, "ts": lt, "dur": 5, "args": {"correlation": c}})
        ev.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": kt,
                   "dur": 50, "args": {"correlation": c, "device": 0, "stream": 7}})
    if sync:
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize",
                   "pid": pid, "tid": pid, "ts": 200, "dur": 250, "args": {"correlation": 9}})
        ev.append({"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7,
                   "ts": 200, "dur": 250, "args": {"correlation": 9, "device": 0, "stream": 7}})
    path.write_text(json.dumps({
        "schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": 2},
        "baseTimeNanoseconds": 1_700_000_000_000_000_000, "traceEvents": ev}))


def test_a_ranks_gaps_are_judged_by_its_own_waits_only(tmp_path):
    """Rank 1 waits in a sync while rank 0's GPU is idle for want of launches. Rank 0's gap
    is "host", never "sync": each rank of a merged file (new merges, merges written before
    first_event, a directory of rank files) is classified with its own waits alone, and
    both ranks' GPU 0 stay apart. Rank 1's own gap is after syncs for the 250 µs waited."""
    d = tmp_path / "job"
    d.mkdir()
    _gap_rank_trace(d / "job-rank0.trace.json", 0, sync=False)
    _gap_rank_trace(d / "job-rank1.trace.json", 1, sync=True)
    out = tmp_path / "merged.trace.json"
    cprof("merge", d, "-o", out)
    old = tmp_path / "old.trace.json"  # as a merge written before first_event reads
    doc = json.loads(out.read_text())
    for e in doc["cprof"]["merged"]:
        del e["first_event"]
    old.write_text(json.dumps(doc))
    for src in (out, old, d):
        rep = json.loads(cprof("report", src, "--format", "json").stdout)
        by_rank = {r["trace"]["rank"]: r for r in rep["reports"]}
        assert sorted(by_rank) == [0, 1], src
        (dev0,) = by_rank[0]["devices"]
        assert dev0["idle"]["sync_us"] == 0, src
        # [150, 500) waiting on the host, plus the window's 10 µs before the first kernel
        assert dev0["idle"]["host_us"] == pytest.approx(350 + 10), src
        assert {g["kind"] for g in by_rank[0]["gaps"]} == {"host"}, src
        assert "sync_stalls" not in {x["id"] for x in by_rank[0]["diagnoses"]}, src
        (dev1,) = by_rank[1]["devices"]
        assert dev1["idle"]["sync_us"] == pytest.approx(250), src
        assert dev1["idle"]["host_us"] == pytest.approx(110), src
        assert "sync" in {g["kind"] for g in by_rank[1]["gaps"]}, src


def _copies_trace(path, kinds, nbytes=4096):
    ev = [{"ph": "X", "cat": "gpu_memcpy", "name": f"Memcpy {k} (Device -> Device)", "pid": 0,
           "tid": 7, "ts": 10 * i, "dur": 5, "args": {"device": 0, "stream": 7,
                                                       "bytes": nbytes}}
          for i, k in enumerate(kinds)]
    path.write_text(json.dumps({"traceEvents": ev}))


def test_small_copies_count_host_device_copies_and_quote_the_threshold(tmp_path):
    """Audit finding 4: 12 small DtoD copies were "many small host-device copies" (keep the
    data on the GPU: it is there already), and the words said 64 KB whatever
    --small-copy-bytes was."""
    p = tmp_path / "dtod.trace.json"
    _copies_trace(p, ["DtoD"] * 12)
    doc = json.loads(cprof("report", p, "--format", "json").stdout)
    assert doc["memory"][0]["small"] == 12
    assert "small_copies" not in {d["id"] for d in doc["diagnoses"]}
    p = tmp_path / "mixed.trace.json"
    _copies_trace(p, ["HtoD"] * 7 + ["DtoH"] * 4 + ["DtoD"] * 5)
    doc = json.loads(cprof("report", p, "--format", "json", "--small-copy-bytes", "8192").stdout)
    (d,) = [d for d in doc["diagnoses"] if d["id"] == "small_copies"]
    assert d["evidence"]["small_copies"] == 11 and d["evidence"]["small_copy_bytes"] == 8192
    assert "(HtoD: 7, DtoH: 4)" in d["summary"] and "less than 8,192 bytes" in d["summary"]
    assert "64 KB" not in d["summary"]
    text = cprof("report", p, "--small-copy-bytes", "8192", "--tables", "memory").stdout
    assert "Small (< 8.2 KB)" in text and "64" not in text.split("GPU Memory")[1]


def test_skipped_events_are_a_warning_and_a_diagnosis(tmp_path):
    """Audit finding 1: events the report cannot place are counted in every format: a warning
    on stderr, a high diagnosis with its counts, and trace.skipped in JSON."""
    p = tmp_path / "t.trace.json"
    ev = [{"ph": "X", "cat": "kernel", "name": "kA", "ts": 10, "dur": 5, "pid": 0, "tid": 7},
          {"ph": "X", "cat": "kernel", "name": "kB", "dur": 5, "pid": 0, "tid": 7},
          {"ph": "X", "cat": "kernel", "name": "kC", "ts": 30, "dur": -5, "pid": 0, "tid": 7}]
    p.write_text(json.dumps({"traceEvents": ev}))
    r = cprof("report", p, "--format", "json")
    assert 'warning' in r.stderr and '2 events skipped (1 without "ts"; 1 with a negative ' \
        '"dur")' in r.stderr
    doc = json.loads(r.stdout)
    assert doc["trace"]["skipped"]["total"] == 2
    d = [d for d in doc["diagnoses"] if d["id"] == "skipped_events"]
    assert d and d[0]["severity"] == "high"
    assert d[0]["evidence"] == {"total": 2, "no_ts": 1, "negative_dur": 1}
    text = cprof("report", p, "--tables", "kernels").stdout
    assert "Events the report could not use: 2 events skipped" in text


# ---- memory over the window ----

def _memory_trace(path, values_by_step, steps_us=1000, name="CPU memory", ph="C",
                  key="malloc in use bytes", pid=1, extra_args=None):
    """A trace with ProfilerStep#N ranges and one memory sample inside each step."""
    evs = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
    for i, v in enumerate(values_by_step):
        t0 = 1000 + i * steps_us
        evs.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1,
                    "tid": 1, "ts": t0, "dur": steps_us - 10})
        args = {key: v}
        args.update(extra_args or {})
        evs.append({"ph": ph, "name": name, "pid": pid, "tid": 0, "ts": t0 + steps_us / 2,
                    "args": args})
    with open(path, "w") as f:
        json.dump({"traceEvents": evs}, f)
    return path


def _report(path):
    doc = json.loads(cprof("report", path, "--format", "json").stdout)
    return doc["reports"][0] if "reports" in doc else doc, doc


def _diag_ids(doc):
    r = doc["reports"][0] if "reports" in doc else doc
    return [d["id"] for d in doc.get("diagnoses", r.get("diagnoses", []))]


def test_memory_growing_every_step_is_diagnosed(tmp_path):
    mib = 1 << 20
    rep, doc = _report(_memory_trace(tmp_path / "leak.json", [100 * mib + i * 4 * mib
                                                              for i in range(6)]))
    (m,) = rep["memory_track"]
    assert m["series"].startswith("CPU memory (cprof")
    assert (m["samples"], m["start_bytes"], m["end_bytes"]) == (6, 100 * mib, 120 * mib)
    assert m["peak_bytes"] == 120 * mib and m["growth_bytes"] == 20 * mib
    # measured at each step's start: the value of the step before (the first step has none)
    assert m["steps"] == 5 and m["steps_growing"] == 4 and m["per_step_bytes"] == 4 * mib
    assert m["grows_every_step"] is True
    assert "memory_growth" in _diag_ids(doc)
    text = cprof("report", tmp_path / "leak.json").stdout
    assert "Memory Over the Window" in text and "grows every step" in text


@pytest.mark.parametrize("values", [
    [100, 140, 100, 140, 100, 140, 100],   # allocated and freed each step: a sawtooth
    [100, 101, 101, 101, 101, 101, 101],   # warmed up after the first step
    [100, 100.1, 100.2, 100.3, 100.4, 100.5, 100.6],  # grows, but under 1 MiB in all
])
def test_memory_that_does_not_grow_every_step_is_not_diagnosed(tmp_path, values):
    mib = 1 << 20
    rep, doc = _report(_memory_trace(tmp_path / "ok.json", [int(v * mib) for v in values]))
    assert rep["memory_track"][0]["grows_every_step"] is False
    assert "memory_growth" not in _diag_ids(doc)


def test_memory_series_of_torch_and_cuda_counters(tmp_path):
    """torch.profiler's [memory] events (by device type and id) and cprof's CUPTI counter are
    series of their own; a trace without memory data has an empty memory_track."""
    mib = 1 << 20
    rep, doc = _report(_memory_trace(
        tmp_path / "torch.json", [i * 8 * mib for i in range(1, 7)], name="[memory]", ph="i",
        key="Total Allocated", extra_args={"Device Type": 1, "Device Id": 0, "Bytes": 8 * mib}))
    (m,) = rep["memory_track"]
    assert m["series"] == "GPU memory (torch: allocated), GPU 0" and m["device"] == 0
    assert m["grows_every_step"] is True
    rep, _ = _report(_memory_trace(tmp_path / "cupti.json", [mib] * 6,
                                   name="GPU memory (CUPTI)", key="allocated bytes", pid=0))
    (m,) = rep["memory_track"]
    assert m["series"] == "GPU memory (CUPTI: allocated), GPU 0" and m["growth_bytes"] == 0
    rep, _ = _report(_memory_trace(tmp_path / "none.json", [1] * 3, name="something else"))
    assert rep["memory_track"] == []


def test_torch_memory_series_starts_from_the_level_before_its_first_change(tmp_path):
    """torch's [memory] events give the total after each change: the window starts at the
    first one's total less its Bytes, so a window that frees all it allocated grows by 0
    (not by minus its first allocation) and a first free's level before it is the peak."""
    mib = 1 << 20
    ev = []
    for i, (nbytes, total) in enumerate([(4, 4), (4, 8), (-4, 4), (-4, 0)]):
        ev.append({"ph": "i", "s": "t", "name": "[memory]", "cat": "cpu_instant_event",
                   "pid": 1, "tid": 1, "ts": 1000 + 10 * i,
                   "args": {"Total Reserved": 0, "Total Allocated": total * mib,
                            "Bytes": nbytes * mib, "Device Id": -1, "Device Type": 0}})
    p = tmp_path / "balanced.pt.trace.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    rep, _ = _report(p)
    (m,) = rep["memory_track"]
    assert m["series"] == "CPU memory (torch: allocated)" and m["samples"] == 4
    assert (m["start_bytes"], m["peak_bytes"], m["end_bytes"]) == (0, 8 * mib, 0)
    assert m["growth_bytes"] == 0 and m["min_bytes"] == 0
    # a window whose first event frees memory allocated before it: that level was the peak
    ev = [{"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1000,
           "args": {"Total Allocated": 2 * mib, "Bytes": -6 * mib, "Device Type": 0}}]
    p.write_text(json.dumps({"traceEvents": ev}))
    (m,) = _report(p)[0]["memory_track"]
    assert (m["start_bytes"], m["peak_bytes"], m["end_bytes"]) == (8 * mib, 8 * mib, 2 * mib)
    assert m["growth_bytes"] == -6 * mib and m["min_bytes"] == 2 * mib


def test_real_leak_in_a_cprof_and_a_torch_trace(tmp_path):
    """End to end: a training-loop-like program that keeps 4 MiB per step, profiled by cprof
    (profile_memory: the sampled CPU track) and by torch.profiler (its [memory] events)."""
    torch = pytest.importorskip("torch")
    import cprof as cp
    keep = []
    for prof_mod, act in ((cp, cp.ProfilerActivity.CPU),
                          (torch.profiler, torch.profiler.ProfilerActivity.CPU)):
        with prof_mod.profile(activities=[act], profile_memory=True, schedule=prof_mod.schedule(
                wait=0, warmup=1, active=6, repeat=1)) as p:
            for _ in range(8):
                keep.append(torch.ones(1 << 20))
                p.step()
        path = str(tmp_path / f"{prof_mod.__name__.replace('.', '_')}.json")
        p.export_chrome_trace(path)
        rep, doc = _report(path)
        assert any(m["grows_every_step"] for m in rep["memory_track"]), rep["memory_track"]
        assert "memory_growth" in _diag_ids(doc)


def test_output_into_a_reader_that_stops_early_ends_quietly():
    """`cprof features | head -1`: the closed pipe is the reader's choice, not an error: no
    traceback, the shell's status for SIGPIPE. The reader is gone before cprof writes."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([sys.executable, "-m", "cprof", "features"], stdout=w,
                           stderr=subprocess.PIPE, env=env, text=True, timeout=120)
    finally:
        os.close(w)
    assert p.stderr == "", p.stderr
    assert p.returncode == 141


def test_json_report_keeps_only_the_tables_asked_for(gpu_trace):
    """--tables applies to --format json as to the other formats (it printed every table)."""
    full = json.loads(cprof("report", gpu_trace, "--format", "json").stdout)
    some = json.loads(cprof("report", gpu_trace, "--format", "json", "--tables",
                            "kernels,steps").stdout)
    assert "kernels" in some and "steps" in some
    assert "cuda_api" in full and "cuda_api" not in some and "gaps" not in some
    assert some["trace"] == full["trace"] and some["diagnoses"] == full["diagnoses"]


# ---- audit "report" section 9 and the CLI audit: pooled busy %, refused ranks, memory
# growth words, trace.json in a directory, verdicts without steps ----

def _busy_trace(path, rank, window_us, busy_us):
    """A rank trace: one step over window_us, one kernel busy_us long."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
           "ts": 0, "dur": window_us},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
           "ts": 1, "dur": 1, "args": {"correlation": 1}},
          {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 2, "dur": busy_us,
           "args": {"device": 0, "stream": 7, "correlation": 1}}]
    di = {"world_size": 2}
    if rank is not None:
        di["rank"] = rank
    with open(path, "w") as f:
        json.dump({"distributedInfo": di, "traceEvents": ev}, f)


def test_pooled_gpu_busy_is_busy_time_over_window_time(tmp_path):
    """A rank's GPU busy % over several traces was the mean of their percentages."""
    _busy_trace(tmp_path / "r0a.trace.json", 0, 1000, 100)   # 10 %
    _busy_trace(tmp_path / "r0b.trace.json", 0, 100, 50)     # 50 %
    _busy_trace(tmp_path / "r1.trace.json", 1, 1000, 250)
    doc = json.loads(cprof("report", tmp_path, "--format", "json").stdout)
    row = {r["rank"]: r for r in doc["ranks"]}
    assert row[0]["traces"] == 2
    assert row[0]["gpu_busy_pct"] == round(100 * 150 / 1100, 2)  # 13.64, not 30
    assert row[1]["gpu_busy_pct"] == 25.0


def test_a_rank_that_is_no_rank_is_refused_with_a_warning_naming_the_file(tmp_path):
    """distributedInfo "rank": "1" was ignored, 1.5 read as 1 and -1 taken as a rank."""
    _busy_trace(tmp_path / "a.trace.json", "1", 1000, 100)
    _busy_trace(tmp_path / "b.trace.json", 1.5, 1000, 100)
    _busy_trace(tmp_path / "c.trace.json", -1, 1000, 100)
    r = cprof("report", tmp_path, "--format", "json")
    doc = json.loads(r.stdout)
    assert [x["trace"]["rank"] for x in doc["reports"]] == [1, None, None]
    for name, text in (("b", "1.5"), ("c", "-1")):
        assert (f"{tmp_path / name}.trace.json: distributedInfo.rank is {text}, not a whole "
                "number >= 0" in r.stderr), r.stderr
    assert "a.trace.json:" not in r.stderr
    assert [x["rank"] for x in doc["ranks"]] == [1, None, None]
    (bad,) = [d for d in doc["reports"][1]["diagnoses"] if d["id"] == "bad_rank"]
    assert "distributedInfo.rank is 1.5" in json.dumps(bad)  # the key as spelled ("Dist..." was)
    # cprof merge reads the ranks alike: the refused ones are inputs without a rank
    r = cprof("merge", tmp_path, "-o", tmp_path / "m.trace.json")
    assert "distributedInfo.rank is 1.5" in r.stderr and "distributedInfo.rank is -1" in r.stderr
    m = load_trace(tmp_path / "m.trace.json")
    assert [(i["rank"], i.get("ranked", True)) for i in m["cprof"]["merged"]] == [
        (1, True), (2, False), (3, False)]


def test_a_distributed_info_that_is_no_object_is_warned_about_as_a_bad_rank(tmp_path):
    """"distributedInfo": 5 was skipped without a word, where a rank of [1] got a warning and
    a bad_rank diagnosis."""
    for name, di in (("a", 5), ("b", [1]), ("c", "rank 0"), ("d", None)):
        _busy_trace(tmp_path / f"{name}.trace.json", 0, 1000, 100)
        t = json.loads((tmp_path / f"{name}.trace.json").read_text())
        t["distributedInfo"] = di
        (tmp_path / f"{name}.trace.json").write_text(json.dumps(t))
    r = cprof("report", tmp_path, "--format", "json")
    doc = json.loads(r.stdout)
    assert [x["trace"]["rank"] for x in doc["reports"]] == [None] * 4
    for name, text in (("a", "5"), ("b", "[1]"), ("c", '"rank 0"')):
        assert (f"{tmp_path / name}.trace.json: distributedInfo is {text}, not an object with "
                "rank and world_size: the trace is read as one without a rank" in r.stderr), \
            r.stderr
    assert "d.trace.json" not in r.stderr  # null: no distributedInfo, as torch's without one
    ids = [[d["id"] for d in x["diagnoses"]] for x in doc["reports"]]
    assert ["bad_rank" in i for i in ids] == [True, True, True, False]
    bad = next(d for d in doc["reports"][0]["diagnoses"] if d["id"] == "bad_rank")
    assert bad["evidence"] == {"distributed_info_invalid": "5"}
    r = cprof("merge", tmp_path, "-o", tmp_path / "m.trace.json")
    assert "distributedInfo is [1], not an object" in r.stderr

def test_memory_growth_words_agree_with_the_table(tmp_path):
    """The diagnosis said "higher at the start of each of 5 steps" beside Steps growing = 4."""
    mib = 1 << 20
    rep, doc = _report(_memory_trace(tmp_path / "leak.json", [100 * mib + i * 4 * mib
                                                              for i in range(6)]))
    (d,) = [d for d in rep["diagnoses"] if d["id"] == "memory_growth"]
    assert "4 increases over 5 step starts" in d["summary"]
    assert d["evidence"]["steps_growing"] == 4 and d["evidence"]["step_starts"] == 5
    assert "steps" not in d["evidence"]


def test_directory_finds_plain_json_traces_and_leaves_other_json_out(tmp_path):
    """torch's export_chrome_trace("trace.json") was not found in a directory (only
    *.trace.json was looked for); cprof's own JSON beside traces is no trace."""
    _busy_trace(tmp_path / "trace.json", 0, 1000, 100)
    with gzip.open(tmp_path / "other.json.gz", "wt") as f:  # the array form, gzip
        json.dump([{"ph": "X", "cat": "cpu_op", "name": "f", "pid": 1, "tid": 1, "ts": 0,
                    "dur": 5}], f)
    (tmp_path / "summary.json").write_text(json.dumps({"runs": [{"meta": {}}], "steps": []}))
    (tmp_path / "config.json").write_text(json.dumps([{"lr": 1}]))
    (tmp_path / "notes.json").write_text("not json at all")
    cprof("report", tmp_path / "trace.json", "--format", "json", "-o", tmp_path / "out.json")
    doc = json.loads(cprof("report", tmp_path, "--format", "json").stdout)
    assert sorted(os.path.basename(x["trace"]["path"]) for x in doc["reports"]) == [
        "other.json.gz", "trace.json"]
    empty = tmp_path / "none"
    empty.mkdir()
    (empty / "summary.json").write_text("{}")
    r = cprof("report", empty, check=False)
    assert r.returncode == 1 and "no trace files" in r.stderr and "summary.json" in r.stderr


def test_no_straggler_verdict_when_only_one_rank_has_steps(tmp_path):
    """"no straggler" was printed with steps in one rank only: nothing to compare."""
    d = tmp_path / "job"
    d.mkdir()
    _rank_trace(d / "job-rank0.trace.json.gz", 0, 1_700_000_000_000_000_000, 100.0)
    doc = _rank_trace(d / "job-rank1.trace.json.gz", 1, 1_700_000_000_000_000_000, 100.0)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if "ProfilerStep" not in e["name"]]
    with gzip.open(d / "job-rank1.trace.json.gz", "wt") as f:
        json.dump(doc, f)
    for cmd in (["report", d], ["report", d, "--format", "md"],
                ["merge", d, "-o", tmp_path / "m.trace.json", "--format", "md"]):
        out = cprof(*cmd).stdout
        assert "no straggler" not in out and "no steps to compare" in out, (cmd, out)
        assert "rank 1)" in out


def test_a_big_json_that_is_no_trace_is_passed_over_quickly(tmp_path):
    """Directory discovery searched the whole head again after each 64 KiB read: one 9 MB
    JSON without "traceEvents" (a tokenizer.json, a dataset beside the traces) took ~6 s."""
    import time

    from cprof._cli_report import _find_in_dir, _looks_like_trace
    big = tmp_path / "tokenizer.json"
    with open(big, "w") as f:
        f.write('{"model": {"vocab": {')
        f.write(",".join(f'"tok{i}": {i}' for i in range(600_000)))
        f.write("}}}")
    assert big.stat().st_size > 9 << 20
    _busy_trace(tmp_path / "trace.json", 0, 1000, 100)
    t0 = time.perf_counter()
    assert not _looks_like_trace(big)
    assert _find_in_dir(str(tmp_path)) == [str(tmp_path / "trace.json")]
    assert time.perf_counter() - t0 < 1.5
    # a "traceEvents" key that straddles two reads is still found
    pad = (1 << 16) - len('{"x": "') - 5
    (tmp_path / "split.json").write_text('{"x": "' + "a" * pad + '", "traceEvents": []}')
    assert _looks_like_trace(tmp_path / "split.json")


def test_report_and_summary_writes_never_follow_a_file_planted_at_the_temp_name(tmp_path):
    """cprof report -o and the run profiler's summary.json / report.md were written through
    a fixed temporary name opened for writing: a symlink planted there (a shared output
    directory) was followed and its target overwritten. The temporary file is now created
    exclusively (O_EXCL), under another name when that one is taken."""
    from cprof import _cli_report, runprof
    victim = tmp_path / "victim.txt"
    for mod, name in ((_cli_report, "out.txt"), (runprof, "summary.json")):
        victim.write_text("precious")
        dest = tmp_path / name
        for planted in (f".{name}.{os.getpid()}.tmp", f"{name}.{os.getpid()}.tmp"):
            if not os.path.lexists(tmp_path / planted):
                os.symlink(victim, tmp_path / planted)  # (the new name, and the old one)
        mod._write_text(str(dest), "the report")
        assert victim.read_text() == "precious", mod
        assert dest.read_text() == "the report" and not dest.is_symlink()


def test_merge_onto_a_full_disk_names_the_cause(tmp_path):
    """A merged trace bigger than the writer's 1 MiB buffer, onto a disk that fills while the
    events are written (RLIMIT_FSIZE: EFBIG, as a full disk gives ENOSPC), said "input/output
    error": the errno of the failed write was only fetched when the merge itself succeeded.
    Now the cause is named and no file (final or temporary) is left."""
    import resource
    import signal
    for rank in (0, 1):
        ev = [{"ph": "X", "cat": "user_annotation", "name": f"r{rank}_range_{i}", "pid": 7,
               "tid": 7, "ts": 1000.0 + i, "dur": 0.5} for i in range(12000)]
        with open(tmp_path / f"r{rank}.trace.json", "w") as f:
            json.dump({"traceEvents": ev, "distributedInfo": {"rank": rank, "world_size": 2}},
                      f)
    out = tmp_path / "out"
    out.mkdir()

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, resource.RLIM_INFINITY))

    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for name in ("m.trace.json", "m.trace.json.gz"):
        args = ["merge", tmp_path / "r0.trace.json", tmp_path / "r1.trace.json", "-o", out / name]
        r = subprocess.run([sys.executable, "-m", "cprof", *map(str, args)], capture_output=True,
                           text=True, env=env, timeout=300, preexec_fn=limit)
        assert r.returncode == 1, r.stderr
        assert os.strerror(errno.EFBIG) in r.stderr, r.stderr
        assert "input/output error" not in r.stderr
        assert os.listdir(out) == []
