"""csrc/cupti_abi.h (our own CUPTI 13 / driver declarations) against NVIDIA's headers, through
tests/abi_check.c; where no CUDA toolkit is installed only the checks that need none run: the
headers compile without CUDA, abi_check.c lists everything the header declares, and the call-id
tables of csrc/cupti_cbids.h are consistent."""
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSRC = os.path.join(ROOT, "csrc")
ABI_H = os.path.join(CSRC, "cupti_abi.h")
ABI_CHECK = os.path.join(ROOT, "tests", "abi_check.c")
CFLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror"]


def compiler():
    cc = os.environ.get("CC", "gcc")
    if not shutil.which(cc):
        pytest.skip("no C compiler")
    return cc


def cuda_include_dirs():
    """-I directories holding cuda.h and cupti.h of an installed toolkit, or None."""
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for home in filter(None, homes):
        inc = os.path.join(home, "include")
        if not os.path.isfile(os.path.join(inc, "cuda.h")):
            continue
        for cupti in (inc, os.path.join(home, "extras", "CUPTI", "include")):
            if os.path.isfile(os.path.join(cupti, "cupti.h")):
                return [inc] if cupti == inc else [inc, cupti]
    return None


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert p.returncode == 0, f"{' '.join(cmd)}\n{p.stdout}\n{p.stderr}"
    return p.stdout


def test_abi_matches_the_real_headers(tmp_path):
    cc = compiler()
    inc = cuda_include_dirs()
    if inc is None:
        pytest.skip("no CUDA toolkit headers (cuda.h + cupti.h) on this machine")
    real, ours, main = (str(tmp_path / n) for n in ("real.o", "ours.o", "main.o"))
    real_flags = [f for d in inc for f in ("-I", d)]
    # NVIDIA's headers are not -pedantic clean (enumerators above INT_MAX); ours are
    run([cc, *CFLAGS, "-DABI_SIDE_REAL", *real_flags, "-I", CSRC, "-c", ABI_CHECK, "-o", real])
    run([cc, *CFLAGS, "-pedantic", "-DABI_SIDE_OURS", "-I", CSRC, "-c", ABI_CHECK, "-o", ours])
    run([cc, *CFLAGS, "-c", ABI_CHECK, "-o", main])
    exe = str(tmp_path / "abi_check")
    run([cc, main, real, ours, "-o", exe])
    p = subprocess.run([exe], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"^(\d+) of \1 entries match$", p.stdout, re.M), p.stdout


def test_headers_compile_without_cuda(tmp_path):
    cc = compiler()
    src = tmp_path / "standalone.c"
    src.write_text('#include "cupti_cbids.h"\n#include "cuda_loader.h"\n'
                   "int main(void) { return cprof_cbid_lookup(0, 211) ? 0 : 1; }\n")
    exe = str(tmp_path / "standalone")
    # no CUDA include path: cupti_abi.h must stand alone
    run([cc, *CFLAGS, "-pedantic", "-I", CSRC, str(src), "-o", exe])
    assert subprocess.run([exe]).returncode == 0


def _strip_comments(text):
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def _header_declarations():
    """Enumerators, type names, struct fields and PFN_ names declared by cupti_abi.h."""
    raw = open(ABI_H).read()
    start = raw.index("#ifndef CPROF_CUPTI_ABI_PFN_ONLY")
    end = raw.index("#endif /* !CPROF_CUPTI_ABI_PFN_ONLY */")
    types_part = _strip_comments(raw[start:end])
    pfn_part = _strip_comments(raw[end:])
    enumerators = re.findall(r"^\s+((?:CU|CUPTI)\w*)\s*=", types_part, re.M)
    enum_types = re.findall(r"typedef enum[^{]*\{[^}]*\}\s*(\w+);", types_part)
    structs = {}
    for m in re.finditer(r"typedef (?:struct|union)[^{;]*\{", types_part):
        depth, j = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(types_part[j], 0)
            j += 1
        name = re.match(r"\s*(\w+)\s*;", types_part[j:]).group(1)
        body, flat, depth = types_part[m.end(): j - 1], "", 0
        k = 0
        while k < len(body):  # top-level fields only; a nested aggregate counts by its name
            c = body[k]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    mm = re.match(r"\s*(\w+)\s*;", body[k + 1:])
                    flat += f" nested {mm.group(1)};"
                    k += 1 + mm.end()
                    continue
            elif depth == 0:
                flat += c
            k += 1
        fields = []
        for decl in filter(None, (d.strip() for d in flat.split(";"))):
            decl = re.sub(r"\[.*?\]", "", decl)
            decl = re.sub(r"\s*:\s*\d+$", "", decl)
            fields.append(re.findall(r"\w+", decl)[-1])
        structs[name] = fields
    pfns = re.findall(r"\(\*PFN_(\w+)\)", pfn_part)
    return enumerators, enum_types, structs, pfns


def test_abi_check_lists_everything_the_header_declares():
    enumerators, enum_types, structs, pfns = _header_declarations()
    check = open(ABI_CHECK).read()
    assert len(enumerators) > 400 and len(structs) >= 15 and len(pfns) >= 35
    missing = [e for e in enumerators if f"V({e})" not in check]
    missing += [t for t in enum_types + list(structs) if f"S({t})" not in check]
    missing += [f"{s}.{f}" for s, fs in structs.items() for f in fs if f"F({s}, {f})" not in check]
    missing += [f"PFN_{p}" for p in pfns if f"P({p}, " not in check]
    assert not missing, f"add these to tests/abi_check.c: {missing}"


CBID_DUMP = r"""
#include <stdio.h>
#include "cupti_cbids.h"
int main(void) {
    for (size_t i = 0; i < CPROF_N_RUNTIME_CBIDS; i++)
        printf("runtime %u %u %s\n", cprof_runtime_cbids[i].cbid, cprof_runtime_cbids[i].cat,
               cprof_runtime_cbids[i].name);
    for (size_t i = 0; i < CPROF_N_DRIVER_CBIDS; i++)
        printf("driver %u %u %s\n", cprof_driver_cbids[i].cbid, cprof_driver_cbids[i].cat,
               cprof_driver_cbids[i].name);
    const cprof_cbid_info *launch = cprof_cbid_lookup(0, 211); /* cudaLaunchKernel */
    printf("lookup %d %d %d\n", launch && launch->cat == CPROF_API_LAUNCH,
           cprof_cbid_lookup(1, 307) != NULL, cprof_cbid_lookup(0, 17) == NULL);
    return 0;
}
"""

LAUNCH, MEMCPY, MEMSET, SYNC, MALLOC, FREE, GRAPH, EVENT = range(8)
REQUIRED = {
    "runtime": {
        "cudaLaunchKernel": LAUNCH, "cudaLaunchKernelExC": LAUNCH,
        "cudaLaunchCooperativeKernel": LAUNCH, "cudaLaunchCooperativeKernelMultiDevice": LAUNCH,
        "cudaGraphLaunch": GRAPH, "cudaMemcpy": MEMCPY, "cudaMemcpyAsync": MEMCPY,
        "cudaMemcpy2D": MEMCPY, "cudaMemcpy2DAsync": MEMCPY, "cudaMemcpy3D": MEMCPY,
        "cudaMemcpy3DAsync": MEMCPY, "cudaMemcpyPeer": MEMCPY, "cudaMemcpyPeerAsync": MEMCPY,
        "cudaMemcpyToSymbol": MEMCPY, "cudaMemcpyFromSymbol": MEMCPY,
        "cudaMemcpyToSymbolAsync": MEMCPY, "cudaMemcpyFromSymbolAsync": MEMCPY,
        "cudaMemset": MEMSET, "cudaMemsetAsync": MEMSET, "cudaMemset2D": MEMSET,
        "cudaMemset3DAsync": MEMSET, "cudaDeviceSynchronize": SYNC, "cudaStreamSynchronize": SYNC,
        "cudaEventSynchronize": SYNC, "cudaStreamWaitEvent": SYNC, "cudaEventRecord": EVENT,
        "cudaMalloc": MALLOC, "cudaFree": FREE, "cudaMallocAsync": MALLOC,
        "cudaFreeAsync": FREE, "cudaMallocHost": MALLOC, "cudaFreeHost": FREE,
        "cudaHostAlloc": MALLOC,
    },
    "driver": {
        "cuLaunchKernel": LAUNCH, "cuLaunchKernelEx": LAUNCH, "cuLaunchCooperativeKernel": LAUNCH,
        "cuGraphLaunch": GRAPH, "cuMemcpyHtoD": MEMCPY, "cuMemcpyDtoH": MEMCPY,
        "cuMemcpyHtoDAsync": MEMCPY, "cuMemcpyDtoHAsync": MEMCPY, "cuMemcpyDtoDAsync": MEMCPY,
        "cuMemcpyAsync": MEMCPY, "cuMemsetD8": MEMSET, "cuMemsetD32": MEMSET,
        "cuMemsetD8Async": MEMSET, "cuMemsetD32Async": MEMSET, "cuStreamSynchronize": SYNC,
        "cuCtxSynchronize": SYNC, "cuEventSynchronize": SYNC, "cuStreamWaitEvent": SYNC,
        "cuMemAlloc": MALLOC, "cuMemFree": FREE, "cuMemAllocAsync": MALLOC,
        "cuMemFreeAsync": FREE,
    },
}


def test_cbid_tables(tmp_path):
    cc = compiler()
    src = tmp_path / "cbids.c"
    src.write_text(CBID_DUMP)
    exe = str(tmp_path / "cbids")
    run([cc, *CFLAGS, "-I", CSRC, str(src), "-o", exe])
    rows = {"runtime": [], "driver": []}
    for line in run([exe]).splitlines():
        parts = line.split()
        if parts[0] == "lookup":
            assert parts[1:] == ["1", "1", "1"]
        else:
            rows[parts[0]].append((int(parts[1]), int(parts[2]), parts[3]))
    for domain, table in rows.items():
        cbids = [c for c, _, _ in table]
        assert len(cbids) == len(set(cbids)), f"duplicate {domain} call ids"
        prefix = "cuda" if domain == "runtime" else "cu"
        for cbid, cat, name in table:
            assert 0 < cbid < 2048 and 0 <= cat <= EVENT
            assert name.startswith(prefix), name
            # the user-facing name: no version or per-thread-stream suffix
            assert not re.search(r"_(v\d+|ptsz|ptds)$", name), name
        by_name = {}
        for _, cat, name in table:
            assert by_name.setdefault(name, cat) == cat, f"{name} in two categories"
        for name, cat in REQUIRED[domain].items():
            assert by_name.get(name) == cat, f"{domain} {name}: {by_name.get(name)} != {cat}"
