"""Acceptance tests: issue 2 layout + HTA loads a cprof trace."""
import os, pathlib, shutil, warnings
import pytest
import cprof
from accept_helpers import CLONE

ROOT = pathlib.Path(CLONE)


def test_layout():
    for p in ("pyproject.toml", "setup.py", "csrc", "cprof", "tests", "benchmarks", "docs", "README.md", ".ci/run", ".clang-format"):
        assert (ROOT / p).exists(), p
    assert list((ROOT / "csrc").glob("*.c"))
    assert (ROOT / "docs" / "benchmarks.md").exists()
    assert (ROOT / "docs" / "reliability.md").exists()
    assert (ROOT / "docs" / "usage.md").exists()


def test_readme_two_commands():
    txt = (ROOT / "README.md").read_text()
    assert "bash scripts/example.sh" in txt and "bash scripts/test.sh" in txt
    assert (ROOT / "scripts" / "example.sh").exists() and (ROOT / "scripts" / "test.sh").exists()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/test.sh" in ci


def test_hta_loads_cprof_trace(tmp_path):
    hta = pytest.importorskip("hta.trace_analysis")
    d = tmp_path / "traces"
    with cprof.ProfilerContext(activities=["CPU"], output_dir=str(d), profile_name="hta", with_stack=False):
        for i in range(3):
            with cprof.range(f"ProfilerStep#{i}"):
                with cprof.range("work"):
                    pass
    a = hta.TraceAnalysis(trace_dir=str(d))
    t = a.t.get_trace(0)
    assert len(t) > 0
