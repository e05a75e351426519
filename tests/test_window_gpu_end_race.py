"""A window's GPU end from two threads at once: torch.profiler started on another thread
(_window.torch_profiler_starts ends the window's GPU collection there, decision 177) while the
window's own thread stops it. Both ended GPU collection: the loser's gpu_stop failed and said
"GPU records of this window are lost" (notes.gpu_error) when none were, and a stop that came
between the winner's gpu_stop and its notes read notes["gpu"] before it existed (KeyError in
metadata). Now one GPU end at a time, the later one waiting and finding the work done
(decision 183). Made deterministic without timing: a fake _C whose GPU stop is one flag, and a
_sync_cuda that holds the first thread inside the end until the test has the other one at the
door."""
import threading
import types

import pytest

from cprof import _C, _window

WAIT = 60  # a bound on a hang, never reached when the code is right: no timing is asserted


class _FakeGpuSnapshot:
    def counts(self):
        return {"dropped": {"cupti": 0, "decode": 0, "incomplete": 0, "buffers_refused": 0},
                "unrecovered": {"flush_error": 0, "buffers_undecoded": 0, "undecoded_error": 0,
                                "disable_error": 0, "unsubscribe_error": 0,
                                "drop_count_errors": 0, "nvtx_open": 0},
                "pool_bytes": 1 << 20}

    def close(self):
        pass


@pytest.fixture
def gpu_window(monkeypatch):
    """An open CPU window that believes it collects GPU activity through a fake _C: gpu_stop
    succeeds once (later calls raise as the C side does when nothing is collecting)."""
    state = {"active": True, "stops": []}  # and "said": what cprof warned

    def gpu_active():
        return state["active"]

    def gpu_stop(host_stop_ns=None, toggled_off=None):
        if not state["active"]:
            raise _C.CprofError("cprof: no GPU collection is running")
        state["active"] = False
        state["stops"].append(threading.current_thread().name)
        return _FakeGpuSnapshot()

    proxy = types.SimpleNamespace(**{k: getattr(_C, k) for k in dir(_C) if not k.startswith("__")})
    proxy.gpu_active = gpu_active
    proxy.gpu_stop = gpu_stop
    monkeypatch.setattr(_window, "_C", proxy)
    said = state["said"] = []
    monkeypatch.setattr(_window._warn, "warn", lambda msg, *a, **k: said.append(msg))
    w = _window.Window({}, gpu=False)
    w.start()
    w.gpu = True  # what start would have set with CUPTI there
    yield w, state
    if _C.active():
        _C.stop().close()
    _window._open = None
    assert not [m for m in said if "lost" in m]  # no loss said where none happened


def _held_sync(monkeypatch):
    """_sync_cuda that holds the first caller (inside its GPU end) until released."""
    entered, release = threading.Event(), threading.Event()
    first = []

    def sync():
        if not first:
            first.append(threading.current_thread().name)
            entered.set()
            assert release.wait(WAIT)

    monkeypatch.setattr(_window, "_sync_cuda", sync)
    return entered, release


def _at_the_door(monkeypatch):
    """Window._gpu_turn, saying when a thread has reached it."""
    arrived = threading.Event()
    orig = _window.Window._gpu_turn

    def turn(self):
        arrived.set()
        return orig(self)

    monkeypatch.setattr(_window.Window, "_gpu_turn", turn)
    return arrived


def _run(name, fn, errors):
    def body():
        try:
            fn()
        except BaseException as err:  # noqa: BLE001 - reported by the test
            errors.append(f"{name}: {err!r}")
    t = threading.Thread(target=body, name=name)
    t.start()
    return t


def _held_after_checks(monkeypatch, name):
    """The thread `name` held at its first clock read: a takeover has passed its checks."""
    checked, go_on = threading.Event(), threading.Event()
    real_now = _window._C.now_ns

    def now_ns():
        if threading.current_thread().name == name and not checked.is_set():
            checked.set()
            assert go_on.wait(WAIT)
        return real_now()

    monkeypatch.setattr(_window._C, "now_ns", now_ns)
    return checked, go_on


def test_a_stop_during_torch_profilers_takeover_waits_for_it(gpu_window, monkeypatch):
    w, state = gpu_window
    entered, release = _held_sync(monkeypatch)
    errors = []
    taker = _run("taker", lambda: _window.torch_profiler_starts(["CUDA"]), errors)
    assert entered.wait(WAIT)  # the takeover is inside its GPU end
    arrived = _at_the_door(monkeypatch)
    stopper = _run("stopper", lambda: w.stop(), errors)
    assert arrived.wait(WAIT)  # the stop has reached the GPU end the takeover holds
    release.set()
    taker.join(WAIT)
    stopper.join(WAIT)
    assert not taker.is_alive() and not stopper.is_alive()
    assert errors == []
    assert state["stops"] == ["taker"]  # one GPU end, the takeover's
    assert "gpu_error" not in w.notes
    assert "gpu_taken_by_torch_profiler" in w.notes
    meta, *_ = w.metadata()  # the GPU counts are there for the trace
    assert meta["dropped"]["gpu_cupti"] == 0 and "gpu" in meta
    w.release()


def test_a_takeover_that_passed_its_checks_before_the_stop_takes_nothing(gpu_window,
                                                                         monkeypatch):
    """torch.profiler starting on another thread has seen the window open and collecting
    GPU activity; the window's thread then stops it whole. The takeover, going on, finds the
    window stopped and does nothing (before: a second gpu_stop, "GPU records ... lost")."""
    w, state = gpu_window
    checked, go_on = _held_after_checks(monkeypatch, "taker")
    monkeypatch.setattr(_window, "_sync_cuda", lambda: None)
    errors = []
    taker = _run("taker", lambda: _window.torch_profiler_starts(["CUDA"]), errors)
    assert checked.wait(WAIT)
    stopper = _run("stopper", lambda: w.stop(), errors)
    stopper.join(WAIT)
    assert not stopper.is_alive()  # the stop did not wait: nobody held the GPU turn
    go_on.set()
    taker.join(WAIT)
    assert not taker.is_alive()
    assert errors == []
    assert state["stops"] == ["stopper"]
    assert "gpu_taken_by_torch_profiler" not in w.notes and "gpu_error" not in w.notes
    meta, *_ = w.metadata()
    assert meta["dropped"]["gpu_cupti"] == 0
    w.release()


def test_a_takeover_during_a_schedules_restart_waits_and_takes_the_new_collection(
        gpu_window, monkeypatch):
    """A schedule's warmup-to-active restart stops and restarts GPU collection on the
    stepping thread; torch.profiler starting on another thread meanwhile waits for it, then
    ends the restarted collection (one stop each, in that order, and no error)."""
    w, state = gpu_window

    def gpu_start(**kwargs):
        assert not state["active"]
        state["active"] = True
        state["stops"].append("started")

    monkeypatch.setattr(_window._C, "gpu_start", gpu_start)
    monkeypatch.setattr(_window._C, "mark_start", lambda: None)
    entered, release = _held_sync(monkeypatch)
    errors = []
    restarter = _run("restarter", w.restart, errors)
    assert entered.wait(WAIT)  # the restart is inside its GPU stop
    arrived = _at_the_door(monkeypatch)
    taker = _run("taker", lambda: _window.torch_profiler_starts(["CUDA"]), errors)
    assert arrived.wait(WAIT)
    release.set()
    restarter.join(WAIT)
    taker.join(WAIT)
    assert not taker.is_alive() and not restarter.is_alive()
    assert errors == []
    assert state["stops"] == ["restarter", "started", "taker"]
    assert "gpu_taken_by_torch_profiler" in w.notes and "gpu_error" not in w.notes
    w.stop()
    assert state["stops"] == ["restarter", "started", "taker"]
    w.release()


def test_two_takeovers_end_the_gpu_once(gpu_window, monkeypatch):
    """torch.profiler started on two threads at once: the second, past its checks when the
    first ends the window's GPU collection, takes nothing after it."""
    w, state = gpu_window
    checked, go_on = _held_after_checks(monkeypatch, "second")
    monkeypatch.setattr(_window, "_sync_cuda", lambda: None)
    errors = []
    second = _run("second", lambda: _window.torch_profiler_starts(["CUDA"]), errors)
    assert checked.wait(WAIT)
    first = _run("first", lambda: _window.torch_profiler_starts(["CUDA"]), errors)
    first.join(WAIT)
    go_on.set()
    second.join(WAIT)
    assert not first.is_alive() and not second.is_alive()
    assert errors == []
    assert state["stops"] == ["first"]
    assert len([m for m in state["said"] if "torch.profiler started" in m]) == 1
    w.stop()
    assert state["stops"] == ["first"] and "gpu_error" not in w.notes
    w.release()


def test_a_sigterm_during_a_takeover_waits_for_it(gpu_window, monkeypatch):
    """A SIGTERM whose handler runs on the thread that is inside torch.profiler's takeover
    (in its closing CUDA sync): the handler's stop would wait for that thread's own GPU turn
    for ever. The takeover is a critical section, as a stop is: the signal is acted on when
    it is done, and its stop then finds the turn free."""
    import signal
    from cprof import _lifecycle
    w, state = gpu_window
    acted = []

    def terminate(signum=signal.SIGTERM):
        acted.append((signum, w._gpu_busy is None))  # False: its stop would hang here
        if w._gpu_busy is None:
            w.stop()
    monkeypatch.setattr(_lifecycle, "_terminate", terminate)

    def sync():  # the signal lands while the takeover ends the GPU side
        _lifecycle._on_sigterm(signal.SIGTERM, None)
    monkeypatch.setattr(_window, "_sync_cuda", sync)
    _window.torch_profiler_starts(["CUDA"])
    assert acted == [(signal.SIGTERM, True)]
    assert state["stops"] == [threading.current_thread().name]
    assert "gpu_taken_by_torch_profiler" in w.notes
    assert _window._open is None  # the signal's stop ended the window
