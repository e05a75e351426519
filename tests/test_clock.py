"""The time base (clock.c, decision 69): the TSC source where the kernel times with the TSC,
kept on CLOCK_MONOTONIC's base, never backwards, on every thread, after fork; the vDSO clock
elsewhere or when CPROF_CLOCK=monotonic asks for it."""
import os
import subprocess
import sys
import threading
import time

import pytest

import cprof
from cprof import _C
from tests.conftest import load_trace

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def kernel_clocksource():
    try:
        with open("/sys/devices/system/clocksource/clocksource0/current_clocksource") as f:
            return f.read().strip()
    except OSError:
        return None


TSC_MACHINE = kernel_clocksource() == "tsc" and os.uname().machine == "x86_64"
TSC_EXPECTED = TSC_MACHINE and os.environ.get("CPROF_CLOCK") != "monotonic"


def past_calibration():
    """Reads the clock for 60 ms: the TSC source starts after 50 ms of calibration."""
    t = time.monotonic()
    while time.monotonic() - t < 0.06:
        _C.now_ns()
    return _C.clock_info()


def test_clock_source_is_reported():
    info = past_calibration()
    assert set(info) >= {"source", "why", "tsc_hz", "segments", "checks", "last_diff_ns",
                         "max_abs_diff_ns"}
    if TSC_EXPECTED:
        assert info["source"] == "tsc" and info["why"] == "tsc", info
        assert 5e8 < info["tsc_hz"] < 1e10
        assert info["segments"] >= 1
    else:
        assert info["source"] == "monotonic" and info["why"], info


STAYS_ON_MONOTONIC = r"""
import json, time
from cprof import _C
t = time.monotonic()
while time.monotonic() - t < 0.06:  # past calibration
    _C.now_ns()
worst = 0
t_end = time.monotonic() + 1.2
while time.monotonic() < t_end:
    a = time.monotonic_ns()
    c = _C.now_ns()
    b = time.monotonic_ns()
    # c lies in [a, b] up to the source's error: a few us covers a preempted read
    worst = max(worst, a - c, c - b)
print(json.dumps({"worst": worst, "info": _C.clock_info()}))
"""


def test_clock_stays_on_clock_monotonic():
    """Bracketed by time.monotonic_ns() reads, over 1.2 s (a dozen steering checks). In a
    process of its own: clock_info's max_abs_diff_ns covers the process's life, and a test
    session of several minutes on a VM whose NTP changes CLOCK_MONOTONIC's rate sees the
    steering absorb an excursion above 20 us now and then (22 us once in a 400 s ASan run);
    the bound is for these 1.2 s."""
    import json
    r = subprocess.run([sys.executable, "-c", STAYS_ON_MONOTONIC], capture_output=True,
                       text=True, timeout=60, cwd=REPO)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    worst, info = res["worst"], res["info"]
    assert worst < 20_000, f"cprof clock {worst} ns outside CLOCK_MONOTONIC brackets"
    if info["source"] == "tsc":
        assert info["checks"] >= 5
        assert info["max_abs_diff_ns"] < 20_000, info


def test_clock_never_runs_backwards_on_any_thread():
    past_calibration()
    bad = []

    def spin():
        last = _C.now_ns()
        back = 0
        t_end = time.monotonic() + 0.6
        while time.monotonic() < t_end:
            now = _C.now_ns()
            back += now < last
            last = now
        bad.append(back)

    threads = [threading.Thread(target=spin) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == [0, 0, 0]


def test_unix_offset_maps_the_clock_to_time_time_ns():
    past_calibration()
    off = _C.unix_offset_ns()
    unix = _C.now_ns() + off
    assert abs(unix - time.time_ns()) < 2_000_000


def test_monotonic_can_be_asked_for_and_fork_keeps_the_clock():
    code = (
        "import os, time, sys\n"
        "from cprof import _C\n"
        "t = time.monotonic()\n"
        "while time.monotonic() - t < 0.06: _C.now_ns()\n"
        "pid = os.fork()\n"
        "worst = 0\n"
        "end = time.monotonic() + 0.4\n"
        "while time.monotonic() < end:\n"
        "    a = time.monotonic_ns(); c = _C.now_ns(); b = time.monotonic_ns()\n"
        "    worst = max(worst, a - c, c - b)\n"
        "if pid == 0:\n"
        "    os._exit(0 if worst < 20000 else 3)\n"
        "_, st = os.waitpid(pid, 0)\n"
        "print(_C.clock_info()['source'], _C.clock_info()['why'], os.WEXITSTATUS(st), worst)\n"
    )
    env = dict(os.environ, PYTHONPATH=REPO)
    env.pop("CPROF_CLOCK", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    source, *_, child_rc, worst = out.stdout.split()
    assert child_rc == "0" and int(worst) < 20000, out.stdout
    assert source == ("tsc" if TSC_MACHINE else "monotonic")
    env["CPROF_CLOCK"] = "monotonic"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("monotonic CPROF_CLOCK=monotonic 0 "), out.stdout


def test_trace_says_which_clock(tmp_path):
    past_calibration()
    with cprof.ProfilerContext(activities=["CPU"], with_stack=False, record_shapes=False,
                               output_dir=str(tmp_path)) as p:
        with cprof.range("r"):
            pass
    t = load_trace(p.trace_path)
    win = t["cprof"]["window"]
    assert win["clock"] == "CLOCK_MONOTONIC"
    assert win["clock_source"] == ("tsc" if _C.clock_info()["source"] == "tsc" else "vdso")


@pytest.mark.skipif(not TSC_EXPECTED, reason="the TSC source needs clocksource tsc on x86-64")
def test_ranges_measure_sleeps_truly():
    """A range around a sleep measures what CLOCK_MONOTONIC measures, to a few us."""
    past_calibration()
    _C.start()
    spans = []
    for _ in range(5):
        a = time.monotonic_ns()
        with cprof.range("sleep"):
            time.sleep(0.02)
        spans.append(time.monotonic_ns() - a)
    snap = _C.stop()
    try:
        durs = [end - begin for _tid, name, _c, begin, end, *_ in snap.records()
                if name == "sleep"]
    finally:
        snap.close()
    assert len(durs) == 5
    gaps = [s - d for d, s in zip(durs, spans)]
    # the range is inside the bracket, to the TSC clock's agreement with CLOCK_MONOTONIC: it is
    # steered within ~100 ns of it (52 ns over was seen on a loaded VM under ASan), but while it
    # steers a difference away its rate may differ by up to SLEW_MAX_PPM (500 ppm, clock.c):
    # 10 us over a 20 ms sleep (5.5 us over was seen with CI, a suite and torchrun tests
    # sharing 2 cores)
    assert all(g > -(1_000 + 500e-6 * s) for g, s in zip(gaps, spans)), (gaps, spans)
    # ... and not much shorter: in the quietest sample (on a 2-core VM a preemption between
    # the bracket's read and the range's open can add a millisecond to any one of them)
    assert min(gaps) < 200_000, gaps
