"""The warm torch.compile baseline of one problem: `python -m kforge_core.eval.harness.baseline_server`.

Started by the caller (`kforge_core.eval.baselines`) once per run key (problem digest, sizes, target, device, torch
version), spawned like an evaluation child (scrubbed environment, private directory, limits, own session). It
imports the problem, builds the reference, compiles it with torch.compile once, and then times the compiled
baseline on request, for trial after trial of the evaluations of that run. It never imports candidate code: the
baseline is timed in a process the candidate never touched. Inputs are made from the trial's seed exactly as the
evaluation child makes them (same generator calls, same device), so each trial's baseline runs on the same inputs
as that trial's candidate and eager calls, interleaved with them: the child pauses while the caller asks here.

Why a process and not a fork of a warm parent: the compiled baseline's first call starts OpenMP's thread pool, and
a child forked after that hangs at its first parallel region (GNU libgomp is not fork-safe).

Protocol, one JSON object per line. stdin: {"workdir", "target", "size_class"} first, then {"op": "time"|"warm",
"seed"}. stdout: {"stage": ...} while starting, {"ready": true, "torch_compile_s", "conditions"} or {"ready": true, "error"} or
{"problem_error"}, then one {"ms"} or {"ok"} or {"error"} per request.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


_out = {"fd": 1}


def _write(obj: dict) -> None:
    os.write(_out["fd"], (json.dumps(obj, default=str) + "\n").encode())


def main() -> None:
    _out["fd"] = os.dup(1)
    os.dup2(2, 1)  # the problem's own prints go to the log, never into the protocol

    import torch

    from ...platform import get_platform
    from .child import scrub_sys_path
    from . import footprint
    from .conditions import read as read_conditions
    from .run import ProblemFailure, _load_reference
    from .timing import compile_baseline

    start = json.loads(sys.stdin.readline())
    workdir = Path(start["workdir"])
    scrub_sys_path(workdir)
    platform = get_platform(start["target"])
    platform.prepare_child()
    footprint.hold_long_lived(platform)
    timer = platform.make_timer()
    try:
        _write({"stage": "loading the problem"})
        _, _, ref_model, make_inputs = _load_reference(start, workdir, platform)
    except ProblemFailure as e:
        _write({"problem_error": str(e)})
        return
    _write({"stage": "building the torch.compile baseline"})
    compiled, compile_s, err = compile_baseline(ref_model, make_inputs(0), platform)
    if compiled is None:
        _write({"ready": True, "error": err})
        return
    # the compile's example inputs, their clone and its output stay cached otherwise (three times the problem's
    # tensors where a trial needs two: 19 GB of an 80 GB card at KernelBench's 6 GiB sizes, beside the judge's and
    # the candidate's process)
    footprint.release(platform)
    _write({"ready": True, "torch_compile_s": compile_s, "conditions": read_conditions()})
    for line in sys.stdin:
        inputs = None  # the last request's inputs go before this one's are made (both at once: 3x, not 2x)
        try:
            msg = json.loads(line)
            inputs = make_inputs(int(msg["seed"]))
            if msg.get("op") == "warm":
                with torch.no_grad():
                    compiled(*inputs)
                platform.synchronize()
                _write({"ok": True})
                continue
            platform.flush_cache()
            with torch.no_grad():
                ms = timer.time_ms(lambda: compiled(*inputs))
            _write({"ms": ms})
        except Exception as e:  # noqa: BLE001 - an error answers this request; the server goes on
            _write({"error": f"{type(e).__name__}: {str(e)[:300]}"})


if __name__ == "__main__":
    main()
