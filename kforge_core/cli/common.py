"""Helpers shared by CLI commands: JSON output."""

from __future__ import annotations

import json
import sys


def print_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=1, default=str)
    sys.stdout.write("\n")
    sys.stdout.flush()
