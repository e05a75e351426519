"""cprof's closing CUDA synchronize and the program's CUDA graph captures (decision 189).

torch.cuda.graph captures in CUDA's global mode by default: a synchronize from any other thread
fails and invalidates the capture. cprof synchronizes before it ends GPU collection, possibly
from another thread (cprof run's --delay / --duration timer, a torch.profiler start on another
thread), so it waits for other threads' global-mode captures and holds new ones back while it
synchronizes. torch.cuda is replaced by stand-ins here (no GPU): a CUDAGraph whose capture state
the stand-in synchronize checks, so a synchronize during a capture is seen as what it would be
on a GPU, a broken capture."""
import os
import subprocess
import sys
import textwrap
import threading

import pytest

torch = pytest.importorskip("torch")

from cprof import _graphs, _window  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class FakeGraph:
    """torch.cuda.CUDAGraph's capture calls, with the state a synchronize would break."""
    capturing = set()  # modes of the captures open
    log = []

    def __init__(self, fail=False):
        self.fail = fail
        self.mode = None

    def capture_begin(self, pool=None, capture_error_mode="global"):
        """Begin capturing."""
        if self.fail:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        self.mode = capture_error_mode
        FakeGraph.capturing.add(capture_error_mode)
        FakeGraph.log.append(("begin", capture_error_mode))

    def capture_end(self):
        FakeGraph.capturing.discard(self.mode)
        FakeGraph.log.append(("end", self.mode))


@pytest.fixture
def fake_cuda(monkeypatch):
    FakeGraph.capturing = set()
    FakeGraph.log = []
    # a fresh class each test: install() patches the class it finds
    graph = type("CUDAGraph", (FakeGraph,), {})
    monkeypatch.setattr(torch.cuda, "CUDAGraph", graph, raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing",
                        lambda: False, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_hasPrimaryContext", lambda i: True, raising=False)

    def synchronize(device=None):
        # on a GPU this fails, and invalidates the capture, while any thread's global-mode
        # capture is open
        FakeGraph.log.append(("sync", "during a global capture"
                              if "global" in FakeGraph.capturing else "ok"))
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    _graphs.install(torch)
    assert _graphs._open == {}
    yield graph
    _graphs._open.clear()


def _in_thread(fn):
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def test_a_stop_on_another_thread_waits_for_a_global_capture_to_end(fake_cuda):
    g = fake_cuda()
    began, go = threading.Event(), threading.Event()

    def program():
        g.capture_begin()  # torch.cuda.graph's default: global
        began.set()
        go.wait(30)
        g.capture_end()
    p = _in_thread(program)
    assert began.wait(30)
    stopper = _in_thread(_window._sync_cuda)  # cprof run's timer thread ending the window
    stopper.join(0.5)
    assert stopper.is_alive(), FakeGraph.log  # still waiting: the capture is open
    go.set()
    p.join(30)
    stopper.join(30)
    assert not stopper.is_alive()
    assert FakeGraph.log == [("begin", "global"), ("end", "global"), ("sync", "ok")]


def test_a_capture_begun_while_cprof_synchronizes_waits_for_it(fake_cuda, monkeypatch):
    g = fake_cuda()
    real_sync = torch.cuda.synchronize
    program = []

    def synchronize(device=None):
        FakeGraph.log.append(("sync starts", None))
        program.append(_in_thread(g.capture_begin))
        program[0].join(0.5)  # held back in capture_begin until the synchronize returns
        real_sync(device)
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    _window._sync_cuda()
    program[0].join(30)
    assert FakeGraph.log == [("sync starts", None), ("sync", "ok"), ("begin", "global")]
    g.capture_end()


@pytest.mark.parametrize("mode", ["thread_local", "relaxed"])
def test_captures_that_restrict_only_their_own_thread_are_not_waited_for(fake_cuda, mode):
    g = fake_cuda()
    g.capture_begin(None, mode)  # positional, as torch.cuda.graph may pass it
    stopper = _in_thread(_window._sync_cuda)
    stopper.join(30)
    assert not stopper.is_alive()
    assert FakeGraph.log == [("begin", mode), ("sync", "ok")]
    g.capture_end()
    assert _graphs._open == {}


def test_a_capture_still_open_at_the_timeout_is_left_alone(fake_cuda):
    g = fake_cuda()
    began, go = threading.Event(), threading.Event()

    def program():
        g.capture_begin(capture_error_mode="global")
        began.set()
        go.wait(30)
        g.capture_end()
    p = _in_thread(program)
    assert began.wait(30)
    with _graphs.sync_allowed(timeout=0.05) as allowed:
        assert allowed is False  # cprof skips its synchronize: the capture is not broken
    go.set()
    p.join(30)
    with _graphs.sync_allowed(timeout=0.05) as allowed:
        assert allowed is True


def test_the_capturing_thread_itself_is_not_waited_for(fake_cuda):
    """A window stopped on the capturing thread (a signal handler, the program's own stop):
    _sync_cuda's own check (is_current_stream_capturing) skips it; the wait never deadlocks
    on the thread's own capture."""
    g = fake_cuda()
    g.capture_begin()
    with _graphs.sync_allowed(timeout=30) as allowed:
        assert allowed is True
    g.capture_end()


def test_a_capture_begin_that_fails_leaves_nothing_open(fake_cuda):
    g = fake_cuda(fail=True)
    with pytest.raises(RuntimeError, match="capturing"):
        g.capture_begin()
    assert _graphs._open == {}
    _window._sync_cuda()
    assert FakeGraph.log == [("sync", "ok")]


def test_install_is_idempotent_and_keeps_torchs_names(fake_cuda):
    begin = fake_cuda.capture_begin
    _graphs.install(torch)
    assert fake_cuda.capture_begin is begin
    assert begin.__name__ == "capture_begin" and begin.__doc__ == "Begin capturing."
    assert begin.__wrapped__ is FakeGraph.capture_begin


def test_torchs_own_cudagraph_gets_wrapped(monkeypatch):
    """The real class (a CPU torch cannot capture; only the wrapping is checked)."""
    cls = torch.cuda.CUDAGraph
    monkeypatch.setattr(cls, "capture_begin", cls.capture_begin)
    monkeypatch.setattr(cls, "capture_end", cls.capture_end)
    _graphs.install(torch)
    assert cls.capture_begin._cprof_patched and cls.capture_end._cprof_patched


def test_cprof_run_installs_it_when_the_program_imports_torch(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import torch
        print("PATCHED", getattr(torch.cuda.CUDAGraph.capture_begin, "_cprof_patched", False))
    """))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-m", "cprof", "run", "-o", str(tmp_path / "out"),
                          str(script)], capture_output=True, text=True, env=env, timeout=300,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "PATCHED True" in out.stdout, out.stdout + out.stderr
