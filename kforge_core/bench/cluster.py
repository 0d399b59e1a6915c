"""Which cluster a bench uses, and what one problem asks a Ray cluster for. No Ray import here: the CLI and the
app read these without Ray installed.

The address comes from, in order: the `--cluster` flag, `KFORGE_RAY_ADDRESS`, the settings file's
`[cluster] address`; none of them means this machine. "local" names this machine explicitly (overriding the
environment and the file); "auto" is the Ray cluster this machine joined with `ray start`; "ray://HOST:PORT" a
Ray Client server (the head's port 10001); "HOST:PORT" a head's GCS address (port 6379) from a cluster node.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from ..errors import UsageError

ENV_ADDRESS = "KFORGE_RAY_ADDRESS"
SETTINGS_TABLE = "cluster"
LOCAL = "local"
INSTALL_HINT = "pip install -r requirements-ray.txt"
# A device type with no built-in Ray resource asks for a custom one of this name: Mac nodes join with
# `ray start --address=... --resources='{"metal": 1}'`.
CUSTOM_RESOURCES = {"mps": "metal"}
_ADDRESS = re.compile(r"auto|ray://[A-Za-z0-9.\-\[\]:]+:\d+|[A-Za-z0-9.\-\[\]:]+:\d+")


def check_address(address: str) -> str:
    address = address.strip()
    if address == LOCAL or _ADDRESS.fullmatch(address):
        return address
    raise UsageError(f"cluster address {address!r} is not 'local', 'auto', 'ray://HOST:PORT' or 'HOST:PORT'")


def settings_address(path: Path | None = None) -> str | None:
    """`[cluster] address` from the settings file (None when unset or the file is missing or unreadable: the
    LLM settings' own reader reports a broken file)."""
    import tomllib

    from ..llm import settings_path

    try:
        with (path or settings_path()).open("rb") as fh:
            table = tomllib.load(fh).get(SETTINGS_TABLE)
    except (OSError, tomllib.TOMLDecodeError):
        return None
    value = table.get("address") if isinstance(table, dict) else None
    return value.strip() or None if isinstance(value, str) else None


def resolve_address(flag: str | None, env: Mapping[str, str] | None = None,
                    settings: Path | None = None) -> tuple[str | None, str]:
    """(address or None for this machine, where it came from: "flag", "env:KFORGE_RAY_ADDRESS", "settings", "")."""
    env = os.environ if env is None else env
    for value, source in ((flag, "flag"), (env.get(ENV_ADDRESS), f"env:{ENV_ADDRESS}")):
        if value and value.strip():
            address = check_address(value)
            return (None if address == LOCAL else address), source
    value = settings_address(settings)
    if value:
        address = check_address(value)
        return (None if address == LOCAL else address), "settings"
    return None, ""


def task_resources(device_type: str, cpus_per_task: float = 1.0) -> dict:
    """Ray task options for one problem on a device of `device_type`: one GPU for CUDA and Triton (Ray pins
    CUDA_VISIBLE_DEVICES to it), `cpus_per_task` cores for the CPU target, one unit of a custom resource for the
    rest (Metal: "metal"). Concurrent timed runs on one device would corrupt each other's timings, so a node
    should offer as many units as it has devices: a CPU node as many CPUs (`ray start --num-cpus`) as timed runs
    may share it."""
    if cpus_per_task <= 0:
        raise UsageError(f"--cpus-per-task must be positive, not {cpus_per_task:g}")
    if device_type == "cuda":
        return {"num_gpus": 1, "num_cpus": 1}
    if device_type == "cpu":
        return {"num_cpus": cpus_per_task}
    return {"num_cpus": 1, "resources": {CUSTOM_RESOURCES.get(device_type, device_type): 1}}


def resource_names(options: dict) -> dict[str, float]:
    """The cluster resources (Ray's names: CPU, GPU, custom) that `task_resources` options ask for."""
    need = {"CPU": options.get("num_cpus", 0), "GPU": options.get("num_gpus", 0), **options.get("resources", {})}
    return {k: v for k, v in need.items() if v}
