"""A stand-in `torch` for tests/test_cli_run.py (on PYTHONPATH only there): the import of torch
runs under cprof run's import hook, and --with-stack must record it (a real torch import is a
million calls, too slow for a test)."""


def imported_helper():
    return 1


imported_helper()
