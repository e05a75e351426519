"""What this build and this machine can do, and for each thing that is not available, why."""
import glob
import os
import site
import sys

from . import _C

_search_dirs_added = False
_MIN_DRIVER_CUDA = 13000  # cuDriverGetVersion of a CUDA 13.0 driver (R580)


def _add_torch_cupti_dirs():
    """Tells the loader where PyTorch's own libcupti lives (nvidia/cu13/lib, cuda_cupti/lib),
    once, before CUPTI is first looked up. A libcupti already mapped (PyTorch maps its own when
    it initialises CUDA) is still preferred by the loader."""
    global _search_dirs_added
    if _search_dirs_added:
        return
    _search_dirs_added = True
    roots = list(getattr(site, "getsitepackages", lambda: [])())
    user = getattr(site, "getusersitepackages", lambda: None)()
    if user:
        roots.append(user)
    roots += [p for p in sys.path if p.endswith("site-packages")]
    seen = set()
    for root in roots:
        for sub in ("nvidia/cu13/lib", "nvidia/cuda_cupti/lib"):
            d = os.path.join(root, sub)
            if d not in seen and glob.glob(os.path.join(d, "libcupti.so*")):
                seen.add(d)
                _C.cuda_add_search_dir(d)


def cuda_info():
    _add_torch_cupti_dirs()
    return _C.cuda_info()


# what to do about the cuInit results a user meets (cuda.h's CUresult numbers)
_CUINIT_HINTS = {
    100: "no CUDA device is visible to this process: check CUDA_VISIBLE_DEVICES and "
         "nvidia-smi",
    35: "the installed NVIDIA driver is older than the CUDA runtime needs: update the driver",
    803: "the NVIDIA driver library and the loaded kernel module are different versions: "
         "reboot, or reload the nvidia kernel module",
    804: "forward compatibility is not supported on this GPU: use a driver of the CUDA "
         "version the program was built for",
    46: "every GPU is busy or unavailable (exclusive-process mode, or held by another "
        "process): free one or change the compute mode",
    999: "the driver failed in an unknown way: check dmesg; a reboot usually clears it",
}


def _gpu_status():
    """(available, reason, details) for GPU activity collection."""
    info = cuda_info()
    cupti, driver = info["cupti"], info["driver"]
    details = {"cupti_path": cupti["path"], "cupti_source": cupti["source"],
               "cupti_version": cupti["version"], "cupti_error": cupti["error"],
               "driver_version": driver["version"], "driver_error": driver["error"],
               "cuinit_result": driver.get("init_result"), "devices": driver.get("devices", 0)}
    if not driver["loaded"]:
        reason = f"no NVIDIA driver: {driver['error']}"
        if not cupti["loaded"] and os.environ.get("CPROF_CUPTI_PATH"):
            # the CUPTI the user named is as much the answer as the missing driver
            reason += f"; and CUPTI could not be loaded either: {cupti['error']}"
        return False, reason, details
    dv = driver["version"] or 0
    if 0 < dv < _MIN_DRIVER_CUDA:
        # CUPTI 13 answers CUPTI_ERROR_NOT_INITIALIZED to everything under an older driver
        return False, (f"the NVIDIA driver supports CUDA {dv // 1000}.{dv % 1000 // 10} at most "
                       f"(driver API {dv}); cprof's CUPTI 13 needs a driver for CUDA 13.0 or "
                       "newer (R580 or later): update the NVIDIA driver"), details
    if not cupti["loaded"]:
        return False, f"CUPTI could not be loaded: {cupti['error']}", details
    code = driver.get("init_result")
    if code:
        what = driver.get("init_error") or "no description from the driver"
        hint = _CUINIT_HINTS.get(code, "check nvidia-smi and CUDA_VISIBLE_DEVICES")
        return False, (f"the NVIDIA driver is installed but cuInit failed with CUDA error "
                       f"{code} ({what}): {hint}"), details
    if _C.device_props_json() is None:
        return False, ("the NVIDIA driver is installed but no GPU is usable (no device is "
                       "visible: check CUDA_VISIBLE_DEVICES and nvidia-smi)"), details
    return True, None, details


def features():
    """Returns a dict: feature name -> {"available": bool, "reason": str or None, ...}.

    - ``cpu_ranges``: cprof.range / push / pop and ProfilerContext CPU traces.
    - ``gpu_activity``: kernels, copies, sets and runtime calls from CUPTI (with which library
      and version were found).
    - ``cuda_timers``: CUDA-event bucket timers of the Profiler class.
    - ``operator_shapes``: record_shapes / with_flops for torch's operators (the
      RecordFunction observer cprof._torch_ops, built against the installed torch).
    - ``build``: how the extension was built.
    """
    gpu_ok, gpu_reason, details = _gpu_status()
    return {
        "cpu_ranges": {"available": True, "reason": None},
        "gpu_activity": dict({"available": gpu_ok, "reason": gpu_reason}, **details),
        "cuda_timers": _timers_status(),
        "operator_shapes": _op_shapes_status(),
        "build": dict(_C.build_info()),
    }


def _op_shapes_status():
    """Whether operators can carry their shapes. Without torch imported only the file is
    looked for (loading the observer loads libtorch); with torch, the observer is loaded and
    its torch version checked, as a window would."""
    if sys.modules.get("torch") is None:
        import importlib.util
        built = importlib.util.find_spec("cprof._torch_ops") is not None
        return {"available": built, "checked": "file only (torch is not imported)",
                "reason": None if built else (
                    "cprof._torch_ops is not built: build cprof with torch installed (bash "
                    "scripts/setup.sh, or python setup.py build_ext --inplace)")}
    from . import _ops
    mod, why = _ops.observer()
    return {"available": mod is not None, "reason": why,
            "built_for_torch": getattr(mod, "TORCH_VERSION", None)}


def _timers_status():
    info = cuda_info()["driver"]
    if not info["loaded"]:
        return {"available": False,
                "reason": f"no NVIDIA driver: {info['error']}; the Profiler's CUDA bucket "
                          "timers fall back to host timing"}
    return {"available": True, "reason": None,
            "note": "CUDA-event timers need a CUDA context current on the timing thread "
                    "(torch initialises one when it first uses the GPU)"}


def gpu_unavailable_reason():
    """None if GPU activity can be collected, else the reason it cannot."""
    ok, reason, _ = _gpu_status()
    return None if ok else reason
