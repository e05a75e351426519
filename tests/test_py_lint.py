"""Lints the Python package for names used but never defined (a NameError waiting on a path the
tests may not take, as `cprof run`'s trace-written line once was). pyflakes is installed by
scripts/setup.sh with the test tools."""
import pathlib

import pytest

pyflakes_api = pytest.importorskip("pyflakes.api")
from pyflakes import messages  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
FATAL = (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport,
         messages.DuplicateArgument, messages.ReturnOutsideFunction)


class _Collect:
    def __init__(self):
        self.found = []

    def unexpectedError(self, filename, msg):
        self.found.append(f"{filename}: {msg}")

    def syntaxError(self, filename, msg, lineno, offset, text):
        self.found.append(f"{filename}:{lineno}: {msg}")

    def flake(self, message):
        if isinstance(message, FATAL):
            self.found.append(str(message))


@pytest.mark.parametrize("folder", ["cprof", "benchmarks", "tests", "scripts"])
def test_no_undefined_names(folder):
    rep = _Collect()
    for path in sorted((ROOT / folder).rglob("*.py")):
        pyflakes_api.checkPath(str(path), rep)
    assert rep.found == []
