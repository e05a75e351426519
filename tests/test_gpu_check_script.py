"""scripts/gpu_check.sh before it reaches a GPU: device time is scarce, so a wrong flag, a
missing file or an output outside $OUT must show up here. The benchmarks run with their
smallest settings (GPU_CHECK_QUICK=1) against tests/fake_cuda_torch (a CPU torch that says it
has CUDA) and tests/fake_cupti, with no GPU tests and no rest of the suite."""
import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "gpu_check.sh")


def run_check(tmp_path, fake_so=None, **env):
    e = dict(os.environ, OUT=str(tmp_path / "out"), GPU_CHECK_TESTS="none", GPU_CHECK_REST="0",
             GPU_CHECK_QUICK="1", PYTHON=os.environ.get("PYTHON", "python"), **env)
    if fake_so:
        e.update(CPROF_FAKE_CUDA_TORCH="1", CPROF_CUPTI_PATH=fake_so, CPROF_LIBCUDA_PATH=fake_so,
                 PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "tests", "fake_cuda_torch"),
                                             ROOT]))
    r = subprocess.run(["bash", SCRIPT], env=e, capture_output=True, text=True, timeout=900)
    summary = r.stdout[r.stdout.rfind("== summary =="):]
    return r, summary


def test_script_parses():
    r = subprocess.run(["bash", "-n", SCRIPT], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_unknown_part_is_refused_before_anything_runs(tmp_path):
    r, _ = run_check(tmp_path, GPU_CHECK_PART="5")
    assert r.returncode == 2
    assert "GPU_CHECK_PART=5: give 1, 2, 3 or 4" in r.stdout
    assert not (tmp_path / "out" / "build.log").exists()


@pytest.mark.slow
def test_parts_split_the_benchmarks_and_an_unknown_name_fails(tmp_path):
    # clock runs in part 2 only; a misspelt benchmark fails the run instead of passing by
    r, summary = run_check(tmp_path, GPU_CHECK_PART="3", GPU_CHECK_BENCHES="clock")
    assert r.returncode == 0, r.stdout[-3000:]
    assert "benchmark  none run in part 3" in summary
    assert "not in part 3 (GPU_CHECK_PART=4 runs it)" not in summary  # GPU_CHECK_REST=0
    r, summary = run_check(tmp_path, GPU_CHECK_PART="2", GPU_CHECK_BENCHES="clock")
    assert r.returncode == 0, r.stdout[-3000:]
    assert "benchmark  clock: ok" in summary
    assert "[benchmark clock:" in r.stdout and "seconds " in summary
    r, summary = run_check(tmp_path, GPU_CHECK_BENCHES="residuals")
    assert r.returncode == 1
    assert "residuals: unknown benchmark" in summary


@pytest.mark.slow
def test_the_gpu_benchmarks_run_through_on_a_fake_gpu(tmp_path, fake_so):
    """The next GPU session's benchmarks, end to end: every flag gpu_check passes is accepted,
    every benchmark finishes, and its JSON lands in $OUT."""
    pytest.importorskip("torch")
    r, summary = run_check(tmp_path, fake_so,
                           GPU_CHECK_BENCHES="residual cupti_modes options gpu_overhead perf",
                           CUPTI_MODES="default,bare_kernel", PERF_PROFILER="")
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-2000:]
    for name in ("residual", "cupti_modes", "options", "gpu_overhead", "perf"):
        assert f"benchmark  {name}: ok" in summary, summary
    out = tmp_path / "out"
    res = json.loads((out / "bench_cupti_residual.json").read_text())
    assert set(res["results"]) == {"cold", "cprof", "cprof_teardown", "torch", "torch_teardown"}
    assert all(v["ms_per_step_median"] for v in res["results"].values())
    modes = json.loads((out / "bench_cupti_modes.json").read_text())
    assert set(modes) == {"default", "bare_kernel"}
    opts = json.loads((out / "bench_options.json").read_text())
    assert "cprof:defaults+ops" in opts["results"] and "torch:defaults" in opts["results"]
    gpu = json.loads((out / "bench_gpu.json").read_text())
    assert set(gpu["workloads"]["launch"]["configs"]) == {"none", "cprof_gpu", "cprof_default",
                                                          "torch"}
    perf_log = (out / "perf_step.log").read_text()
    assert perf_log.count("steps/s") == 7, perf_log


def test_benchmarks_without_torch_say_so_and_measure_nothing(tmp_path):
    """CI's 3.10 / 3.12 jobs have no torch; neither may the GPU machine's other Python: one
    line that says why, exit 0 (gpu_check then reports "nothing measured"), no traceback."""
    import sys
    e = dict(os.environ, PYTHONPATH=ROOT)
    code = ("import sys, builtins; real = builtins.__import__\n"
            "def imp(name, *a, **k):\n"
            "    if name == 'torch' or name.startswith('torch.'):\n"
            "        raise ImportError('No module named torch')\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = imp\n"
            "sys.argv = sys.argv[1:]; import runpy\n"
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    for script, args in (("bench_cupti_modes.py", ["--modes", "default"]),
                         ("bench_options.py", ["--device", "cuda", "--rounds", "1"]),
                         ("perf_step.py", ["--seconds", "0.1"]),
                         ("bench_cupti_residual.py", ["--passes", "1"]),
                         ("bench_gpu_overhead.py", ["--rounds", "1"])):
        json_path = tmp_path / f"{script}.json"
        extra = [] if script == "perf_step.py" else ["--json", str(json_path)]
        r = subprocess.run([sys.executable, "-c", code,
                            os.path.join(ROOT, "benchmarks", script)] + args + extra,
                           env=e, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, (script, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr, (script, r.stderr)
        assert "torch" in r.stdout and "nothing" in r.stdout.lower(), (script, r.stdout)
        assert not json_path.exists(), script
