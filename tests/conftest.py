import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def load_trace(path):
    path = os.fspath(path)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


CPU_RANGE_CATS = ("user_annotation", "cpu_op", "python_function")


def run_ops_snippet(code, cwd, env=None, timeout=300, warnings_always=False):
    """Runs code in a fresh interpreter that imports cprof from this checkout, with no ITT
    collector and no CPROF_OPS inherited (which operator capture a process gets depends on
    both); the snippet prints JSON last. Returns (that JSON, stderr); a failure shows both
    streams."""
    e = dict(os.environ)
    e.pop("INTEL_LIBITTNOTIFY64", None)
    e.pop("CPROF_OPS", None)
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env or {})
    flags = ["-W", "always"] if warnings_always else []
    r = subprocess.run([sys.executable, *flags, "-c", textwrap.dedent(code)], cwd=cwd, env=e,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def sigint_default():
    """preexec_fn for a child a test interrupts with SIGINT: a test run started in the
    background by a shell without job control inherits SIGINT ignored, and a Python started
    that way never raises KeyboardInterrupt; the child gets the default disposition back.
    Also no core file: a child a test ends by SIGQUIT must not leave one in the checkout."""
    import resource
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def ranges_of(trace, cat=None):
    """The complete events of one category, or (cat None) the CPU ranges: on a machine with a
    GPU a window also holds CUDA API calls, kernels and CUPTI's own overhead."""
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and
            (e.get("cat") in CPU_RANGE_CATS if cat is None else e.get("cat") == cat)]


@pytest.fixture
def outdir(tmp_path):
    d = tmp_path / "traces"
    return d


@pytest.fixture(autouse=True)
def _no_open_window():
    """Every test starts and ends with no cprof window open."""
    import cprof._C as C
    if C.active():
        C.stop().close()
    yield
    if C.active():
        C.stop().close()
        pytest.fail("a test left a cprof window open")
    C.set_buffer_cap(256 << 20)  # the default: a test's small cap must not leak into the next
    # a test's failed write it never saved is not written into /tmp when pytest exits
    # (tests/test_context.py checks that a program's is, in a process of its own)
    import cprof._lifecycle
    cprof._lifecycle._unsaved.clear()


@pytest.fixture(autouse=True)
def _no_dist_env(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)


@pytest.fixture(scope="session")
def fake_so():
    """tests/fake_cupti's libcupti + libcuda stand-in, built once per session (skips where it
    cannot be built)."""
    import subprocess
    fake_dir = os.path.join(ROOT, "tests", "fake_cupti")
    r = subprocess.run(["bash", os.path.join(fake_dir, "build.sh")], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot build the fake CUPTI library: {r.stderr[-500:]}")
    return os.path.join(fake_dir, "libfake_cupti.so")
