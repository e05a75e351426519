"""The cprof command line (`cprof ...` or `python -m cprof ...`).

Subcommands live in their own modules; this file only dispatches:
  run      cprof/_cli_run.py     profile a script or module unchanged
  report   cprof/_cli_report.py  analyse cprof or torch.profiler traces (table/csv/json/md/html)
  merge    cprof/_cli_report.py  put the rank traces of one job on one timeline
  features (here)                what this build and machine can record
"""
import argparse
import json
import sys

from . import __version__, features


def build_parser():
    parser = argparse.ArgumentParser(prog="cprof", description="cprof: a C-core PyTorch profiler")
    parser.add_argument("--version", action="version", version=f"cprof {__version__}")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("features", help="what this build and machine can record, and why not")
    from . import _cli_report, _cli_run

    _cli_run.add_parser(sub)
    _cli_report.add_parsers(sub)
    return parser


def _main(argv):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "run":
        # `cprof run` hands everything after the script / -m module to the program untouched,
        # so it parses its own arguments (argparse would eat the program's options)
        from . import _cli_run

        return _cli_run.main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "features":
        print(json.dumps(features(), indent=2))
        return 0
    if args.command is None:
        parser.print_help()
        return 2
    return args.func(args)


def main(argv=None):
    """The command line. Output piped into a reader that closes early (`cprof report ... |
    head`) ends quietly with the shell's status for it, as other command-line tools do."""
    try:
        code = _main(argv)
        try:
            sys.stdout.flush()
        except ValueError:  # the profiled program closed sys.stdout (python exits 0 then)
            pass
        return code
    except BrokenPipeError:
        import os
        # the rest of stdout cannot be written: point it at /dev/null so the interpreter's own
        # flush at exit does not report the same broken pipe again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13  # SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
