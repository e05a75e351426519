"""Shared helper of test_gpu_accept_trace.py: drive cprof with tests/fake_cupti.
CPROF_REPO defaults to the repository this file is in. A scenario is python code run in a fresh
subprocess with the fake library loaded (CUPTI resolves once per process)."""
import ctypes, gzip, json, os, subprocess, sys, textwrap

REPO = os.environ.get(
    "CPROF_REPO", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
FAKE_SO = os.path.join(REPO, "tests", "fake_cupti", "libfake_cupti.so")

PRELUDE = r'''
import ctypes, json, os, sys, threading, time
sys.path.insert(0, os.environ["CPROF_REPO"])
import cprof, cprof._C as C
fake = ctypes.CDLL(os.environ["CPROF_CUPTI_PATH"])
u64, u32, i32, i = ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int32, ctypes.c_int
fake.fake_cupti_script_basic.argtypes = [u64, u32]
fake.fake_cupti_add_api.argtypes = [i, i, u64, u64, u32, u32]
fake.fake_cupti_add_kernel.argtypes = [ctypes.c_char_p, u64, u64, u32, u32]
fake.fake_cupti_add_kernel_ex.argtypes = [ctypes.c_char_p, u64, u64, u32, u32, u32, u32,
    i32, i32, i32, i32, i32, i32, ctypes.c_uint16, i32, i32, u32, u64]
fake.fake_cupti_add_graph_kernel.argtypes = [ctypes.c_char_p, u64, u64, u32, u32, u32, u64]
fake.fake_cupti_add_memcpy.argtypes = [i, i, i, u64, u64, u64, u32, u32, i]
fake.fake_cupti_add_memcpy_p2p.argtypes = [u64, u64, u64, u32, u32, u32, u32]
fake.fake_cupti_add_memset.argtypes = [u32, u64, u64, u64, u32, u32, i]
fake.fake_cupti_add_sync.argtypes = [i, u64, u64, u32, u32, u32]
fake.fake_cupti_add_sync_ex.argtypes = [i, u64, u64, u32, u32, u32, u32, u64]
fake.fake_cupti_add_cuda_event.argtypes = [u32, u32, u32, u32, u32, u64]
fake.fake_cupti_add_graph_trace.argtypes = [u64, u64, u32, u32, u32]
fake.fake_cupti_add_marker.argtypes = [ctypes.c_char_p, ctypes.c_char_p, u32, u64, u64, u32]
fake.fake_cupti_add_overhead.argtypes = [i, u64, u64, u32]
fake.fake_cupti_add_memory.argtypes = [i, i, u64, u64, u64, u32, u32]
fake.fake_cupti_add_mempool.argtypes = [i, i, u64, u64, u64, u64]
fake.fake_cupti_add_external_correlation.argtypes = [i, u64, u32]
fake.fake_cupti_set_dropped.argtypes = [u64]
TID = threading.get_native_id()
OUT = os.environ["CPROF_OUT"]
RESULT = {}
def us(t0, x): return t0 + int(x * 1000)
'''


def run(code, tmp, timeout=120, **env_extra):
    """Run PRELUDE + code in a subprocess; code must set RESULT; returns (RESULT, stderr)."""
    os.makedirs(tmp, exist_ok=True)
    env = dict(os.environ, CPROF_REPO=REPO, CPROF_OUT=str(tmp), CPROF_CUPTI_PATH=FAKE_SO,
               CPROF_LIBCUDA_PATH=FAKE_SO)
    env.pop("NVTX_INJECTION64_PATH", None)
    env.update({k: str(v) for k, v in env_extra.items()})
    src = PRELUDE + textwrap.dedent(code) + "\nprint('RESULT ' + json.dumps(RESULT))\n"
    r = subprocess.run([sys.executable, "-c", src], env=env, capture_output=True, text=True,
                       timeout=timeout, cwd=REPO)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-4000:])
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[7:]), r.stderr


def load(path):
    op = gzip.open if str(path).endswith(".gz") else open
    with op(path, "rt") as f:
        return json.load(f)


def X(t, cat=None):
    return [e for e in t["traceEvents"] if e.get("ph") == "X" and (cat is None or e.get("cat") == cat)]


def meta(t, name):
    return [e for e in t["traceEvents"] if e.get("ph") == "M" and e.get("name") == name]
