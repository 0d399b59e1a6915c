"""`python -m kforge_core <command>`: a thin layer over the library. Each command is one module here with
`register(subparsers)`; a typed KForgeError becomes one `Error: ...` line on stderr and exit code 2."""

from __future__ import annotations

import argparse
import importlib
import sys

from ..errors import KForgeError

COMMANDS = ("evaluate", "platforms", "synthesize", "runs", "bench")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kforge_core",
                                     description="KForge: PyTorch modules to fast custom kernels, with agents.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"{__name__}.{name}_cmd")
        except ModuleNotFoundError as e:
            if e.name == f"{__name__}.{name}_cmd":
                continue  # a command not built yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except KForgeError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        return 130
