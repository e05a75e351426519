"""A CPU build of torch that says it has CUDA, for dry runs of scripts/gpu_check.sh's GPU
benchmarks without a GPU (tests/test_gpu_check_script.py). Put this directory first on
PYTHONPATH (child processes inherit it) with CPROF_FAKE_CUDA_TORCH=1, and tests/fake_cupti's
library as CPROF_CUPTI_PATH / CPROF_LIBCUDA_PATH: torch.cuda.is_available() is True, .cuda() /
.to("cuda") / device="cuda" stay on the CPU, synchronize does nothing, and cprof collects "GPU"
activity from the fake CUPTI. Nothing is measured: it only says that every flag, file, code
path and output of the benchmarks is there before scarce GPU time is spent on them.

torch is patched when the program imports it (an import hook), not here: cprof must be
importable before torch, as the benchmarks do."""
import importlib.abc
import importlib.util
import os
import sys


def _cpu(dev):
    s = str(dev) if dev is not None else ""
    return "cpu" if s.startswith("cuda") else dev


def _patch(torch):
    import functools
    import types

    def strip_device(fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            if "device" in k:
                k["device"] = _cpu(k["device"])
            return fn(*a, **k)
        return wrapper

    for name in ("randn", "rand", "randint", "empty", "zeros", "ones", "full", "tensor",
                 "arange"):
        setattr(torch, name, strip_device(getattr(torch, name)))

    def to(orig):
        @functools.wraps(orig)
        def wrapper(self, *a, **k):
            a = tuple(_cpu(x) if isinstance(x, (str, torch.device)) else x for x in a)
            if "device" in k:
                k["device"] = _cpu(k["device"])
            return orig(self, *a, **k)
        return wrapper

    torch.Tensor.to = to(torch.Tensor.to)
    torch.nn.Module.to = to(torch.nn.Module.to)
    torch.Tensor.cuda = lambda self, *a, **k: self
    torch.nn.Module.cuda = lambda self, *a, **k: self
    # torch.profiler's CUDA activity on a CPU build prints a C++ stack per operator: left out
    prof_init = torch.profiler.profile.__init__

    @functools.wraps(prof_init)
    def profile_init(self, *a, activities=None, **k):
        if activities is not None:
            activities = [x for x in activities if x != torch.profiler.ProfilerActivity.CUDA]
        prof_init(self, *a, activities=activities, **k)

    torch.profiler.profile.__init__ = profile_init
    c = torch.cuda
    c.is_available = lambda: True
    c.device_count = lambda: 1
    c.synchronize = lambda *a, **k: None
    c.init = lambda: None
    c.current_device = lambda: 0
    c.get_device_name = lambda *a, **k: "fake CUDA (CPU torch, tests/fake_cuda_torch)"
    c.get_device_properties = lambda *a, **k: types.SimpleNamespace(
        name="fake", multi_processor_count=1, total_memory=1 << 30, major=0, minor=0)


class _Hook(importlib.abc.MetaPathFinder):
    """Patches torch once it is loaded. It stays in sys.meta_path until then: a find_spec of
    torch that does not import it (cprof's checks) must not use it up."""
    busy = False

    def find_spec(self, name, path=None, target=None):
        if name != "torch" or self.busy:
            return None
        self.busy = True
        try:
            spec = importlib.util.find_spec("torch")
        finally:
            self.busy = False
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def patched(module):
            exec_module(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            _patch(module)

        spec.loader.exec_module = patched
        return spec


if os.environ.get("CPROF_FAKE_CUDA_TORCH") == "1":
    sys.meta_path.insert(0, _Hook())
