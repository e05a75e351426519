"""The cprof command line (`cprof ...` or `python -m cprof ...`)."""
import argparse
import json
import sys

from . import __version__, features


def main(argv=None):
    parser = argparse.ArgumentParser(prog="cprof", description="cprof: a C-core PyTorch profiler")
    parser.add_argument("--version", action="version", version=f"cprof {__version__}")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("features", help="what this build and machine can record, and why not")
    args = parser.parse_args(argv)
    if args.command == "features":
        print(json.dumps(features(), indent=2))
        return 0
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
