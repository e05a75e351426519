"""csrc/occupancy.c (the "est. achieved occupancy %" on kernels) against NVIDIA's occupancy
calculator, cuda_occupancy.h, through tests/occupancy_check.cpp: the same blocks per SM and the
same percentage as Kineto's arithmetic for thousands of launch configurations on the limits of
real devices from Pascal to Blackwell. Skips where no CUDA toolkit header or C++ compiler is
installed; the fake-CUPTI test in test_gpu_fake.py checks the numbers end to end everywhere."""
import os
import random
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSRC = os.path.join(ROOT, "csrc")

# cc, SMs, threads per block / per SM, warp, registers per block / per SM, shared memory per
# block / opt-in per block / per SM / reserved per block (cuDeviceGetAttribute on those cards)
DEVICES = {
    "P100": (6, 0, 56, 1024, 2048, 32, 65536, 65536, 49152, 49152, 65536, 0),
    "GTX 1080": (6, 1, 20, 1024, 2048, 32, 65536, 65536, 49152, 49152, 98304, 0),
    "V100": (7, 0, 80, 1024, 2048, 32, 65536, 65536, 49152, 98304, 98304, 0),
    "T4": (7, 5, 40, 1024, 1024, 32, 65536, 65536, 49152, 65536, 65536, 0),
    "A100": (8, 0, 108, 1024, 2048, 32, 65536, 65536, 49152, 166912, 167936, 1024),
    "A10": (8, 6, 72, 1024, 1536, 32, 65536, 65536, 49152, 101376, 102400, 1024),
    "L4": (8, 9, 58, 1024, 1536, 32, 65536, 65536, 49152, 101376, 102400, 1024),
    "H100": (9, 0, 132, 1024, 2048, 32, 65536, 65536, 49152, 232448, 233472, 1024),
    "B200": (10, 0, 148, 1024, 2048, 32, 65536, 65536, 49152, 232448, 233472, 1024),
    "RTX 5090": (12, 0, 170, 1024, 1536, 32, 65536, 65536, 49152, 101376, 102400, 1024),
    "unknown (cc 2.0)": (2, 0, 16, 1024, 1536, 32, 32768, 32768, 49152, 0, 49152, 0),
    "limits unknown": (9, 0, 132, 1024, 0, 32, 65536, 65536, 49152, 232448, 233472, 1024),
}


def occupancy_header():
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for home in filter(None, homes):
        if os.path.isfile(os.path.join(home, "include", "cuda_occupancy.h")):
            return os.path.join(home, "include")
    return None


@pytest.fixture(scope="module")
def checker(tmp_path_factory):
    inc = occupancy_header()
    if inc is None:
        pytest.skip("no CUDA toolkit header cuda_occupancy.h on this machine")
    cc, cxx = os.environ.get("CC", "gcc"), os.environ.get("CXX", "g++")
    if not (shutil.which(cc) and shutil.which(cxx)):
        pytest.skip("no C and C++ compiler")
    d = tmp_path_factory.mktemp("occ")
    obj, main, exe = (str(d / n) for n in ("occupancy.o", "check.o", "occupancy_check"))
    # linked by $CC: under scripts/sanitize.sh it is the ASan + UBSan compiler, and the
    # random configurations below then run the C code instrumented
    for cmd in ([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-I", CSRC, "-c",
                 os.path.join(CSRC, "occupancy.c"), "-o", obj],
                [cxx, "-Wall", "-I", inc, "-I", CSRC, "-c",
                 os.path.join(ROOT, "tests", "occupancy_check.cpp"), "-o", main],
                [cc, main, obj, "-lstdc++", "-lm", "-o", exe]):
        p = subprocess.run(cmd, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
    return exe


def check(exe, rows):
    """rows: (device limits, (regs, static, dynamic, block, grid)); returns the output rows."""
    text = "".join(" ".join(map(str, (*dev, regs, ss, sd, *block, *grid))) + "\n"
                   for dev, (regs, ss, sd, block, grid) in rows)
    p = subprocess.run([exe], input=text, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = [tuple(map(int, ln.split())) for ln in p.stdout.splitlines()]
    assert len(out) == len(rows)
    return out


def random_kernel(rng, dev):
    optin = max(dev[9], dev[8])
    threads = rng.choice([32, 64, 96, 128, 192, 256, 384, 512, 640, 768, 1024,
                          rng.randint(1, 1024), rng.randint(1025, 2048)])
    shape = rng.choice([(threads, 1, 1), (32, max(1, threads // 32), 1),
                        (8, 8, max(1, threads // 64))])
    regs = rng.choice([0, 16, 24, 32, 40, 64, 72, 96, 128, 168, 255, 256,
                       rng.randint(0, 300)])
    static = rng.choice([0, 0, 1024, 4096, 16384, 49152, rng.randint(0, 49152)])
    dynamic = rng.choice([0, 0, 0, 8192, 65536, rng.randint(0, optin), optin - static,
                          optin + 1])
    grid = rng.choice([(1, 1, 1), (dev[2], 1, 1), (rng.randint(1, 100000), 1, 1),
                       (rng.randint(1, 64), rng.randint(1, 64), rng.randint(1, 8))])
    return regs, static, max(0, dynamic), shape, grid


def test_occupancy_matches_nvidias_calculator(checker):
    rng = random.Random(20261124)
    rows = [(dev, random_kernel(rng, dev)) for dev in DEVICES.values() for _ in range(1500)]
    out = check(checker, rows)
    bad = [(dev, kernel, o) for (dev, kernel), o in zip(rows, out)
           if o[0] != o[1] or o[2] != o[3]]
    assert not bad, f"{len(bad)} of {len(rows)} differ, first: {bad[:5]}"
    # the configurations reach every regime: none fit, some, the grid's cap, and refusal
    blocks = {o[0] for o in out}
    assert {-1, 0, 1}.issubset(blocks) and max(blocks) >= 16
    assert any(0 < o[2] < 100 for o in out) and any(o[2] == 100 for o in out)


def test_known_answers(checker):
    h100, t4 = DEVICES["H100"], DEVICES["T4"]
    rows = [(h100, (32, 0, 0, (256, 1, 1), (100000, 1, 1))),   # 8 blocks of 8 warps: 100 %
            (h100, (128, 0, 0, (256, 1, 1), (100000, 1, 1))),  # registers: 2 blocks, 25 %
            (h100, (32, 0, 0, (256, 1, 1), (66, 1, 1))),       # half a block per SM: 6 %
            (h100, (32, 0, 232448, (128, 1, 1), (1000, 1, 1))),  # all opt-in smem: 1 block
            (h100, (32, 0, 232449, (128, 1, 1), (1000, 1, 1))),  # one byte too many: none
            (t4, (32, 0, 0, (1024, 1, 1), (1000, 1, 1))),      # Turing: 1024 threads per SM
            (DEVICES["unknown (cc 2.0)"], (32, 0, 0, (256, 1, 1), (1000, 1, 1)))]
    assert check(checker, rows) == [(8, 8, 100, 100), (2, 2, 25, 25), (8, 8, 6, 6),
                                    (1, 1, 6, 6), (0, 0, 0, 0), (1, 1, 100, 100),
                                    (-1, -1, -1, -1)]
