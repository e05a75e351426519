"""The build's Python floor: setup.py refuses an older Python with a clear message before
setuptools runs, and pyproject.toml's requires-python says the same version."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# setup.py run as if by Python 3.9 (sys.version_info replaced): no Python that old is needed
_AS_39 = ("import sys; sys.version_info = (3, 9, 18, 'final', 0); "
          "sys.argv = ['setup.py', '--version']; "
          "exec(compile(open('setup.py').read(), 'setup.py', 'exec'))")


def test_setup_refuses_python_39_before_building():
    r = subprocess.run([sys.executable, "-c", _AS_39], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "cprof needs Python 3.10 or newer" in r.stderr
    assert "gcc" not in r.stderr and r.stdout == ""


def test_requires_python_matches_setup_floor():
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        (floor,) = re.findall(r'^requires-python = ">=(\d+\.\d+)"$', f.read(), re.M)
    with open(os.path.join(ROOT, "setup.py")) as f:
        (check,) = re.findall(r"sys\.version_info < \((\d+), (\d+)\)", f.read())
    assert floor == ".".join(check) == "3.10"
