"""Work the app hands to a child process: anything that imports torch or runs user code.

The app process stays light and safe: platform discovery (CUDA and Triton availability need torch), running a
pasted reference once, creating a run (it checks the target through discovery) and measuring ceilings all happen
in `python -m app.child <job>`, which reads a JSON request on stdin and writes one JSON answer on its last stdout
line: {"ok": true, "result": ...} or {"ok": false, "error": "one line"}. A typed KForgeError becomes that one line;
anything else is a bug and keeps its traceback on stderr, whose last line is reported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


class ChildJobError(Exception):
    """The job failed; str() is one line for the user."""


def run_job(job: str, request: dict[str, Any] | None = None, timeout_s: float = 300.0) -> Any:
    """Run `job` in a child process and return its result; raises ChildJobError with a one-line reason."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    try:
        proc = subprocess.run([sys.executable, "-m", "app.child", job], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=timeout_s, input=json.dumps(request or {}))
    except subprocess.TimeoutExpired:
        raise ChildJobError(f"did not finish within {timeout_s:g} s") from None
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if isinstance(answer, dict) and "ok" in answer:
        if answer["ok"]:
            return answer.get("result")
        raise ChildJobError(answer.get("error") or "failed")
    tail = [line for line in proc.stderr.splitlines() if line.strip()]
    raise ChildJobError(tail[-1] if tail else f"the child process exited with code {proc.returncode}")


# --------------------------------------------------------------------------------------------------- jobs (child)

def _targets(request: dict) -> list[dict]:
    from app.services import discover_targets

    return [t.__dict__ for t in discover_targets()]


def _validate(request: dict) -> dict:
    from kforge_core.eval.evaluator import validate_problem
    from kforge_core.problem import load_problem

    problem = load_problem(text=request["source"], name=request.get("name"))
    report = validate_problem(problem, request["target"], timeout_s=float(request.get("timeout_s", 120)),
                              size_class=request.get("size_class"))
    out = report.to_dict()
    if request.get("builtin"):
        out["builtin"] = _builtin_coverage(problem, request["target"], request.get("size_class"))
    return out


def _builtin_coverage(problem, target: str, size_class: str | None) -> dict:
    """What the built-in synthesizer writes for this problem on `target` (its first candidate: what it covers and
    what stays in PyTorch), or why it cannot write one, so the form can say so before a run starts."""
    from kforge_core.agents.builtin_generation import BuiltinGenerationAgent

    agent = BuiltinGenerationAgent(size_class=size_class or "auto")
    result = agent.synthesize(problem.source, target, problem_name=problem.name)
    if result.program is None:
        return {"ok": False, "text": result.error or "it wrote no program"}
    return {"ok": True, "text": result.notes, "kept": agent.last_report.get("kept") or {}}


def _coverage(request: dict) -> int:
    """What the built-in synthesizer covers of one gallery level's problems on one target (app.gallery_coverage).
    The request names a level, never a source: only gallery files are surveyed this way."""
    from app.gallery_coverage import compute
    from kforge_core.gallery import list_problems

    return compute([p.source for p in list_problems(int(request["level"]))], request["target"])


def _ceilings(request: dict) -> dict:
    from app.ceilings import measure_in_this_process

    return measure_in_this_process(request["target"])


def _start(request: dict) -> dict:
    """create_run + launch_worker. In a child because create_run checks the target through platform discovery,
    which imports torch; the API key arrives on stdin (never argv) and goes on only in the worker's environment."""
    from kforge_core.loop import RunConfig, create_run, launch_worker
    from kforge_core.store import open_store

    config = RunConfig(**request["config"])
    with open_store(request["db"]) as store:
        run_id = create_run(store, config)
    pid = launch_worker(request["db"], run_id, config)
    return {"run_id": run_id, "pid": pid}


def _manual(request: dict) -> dict:
    """One Workbench job (evaluate or analyse a program) on a manual run, created first when `run_id` is None.
    In a child for the same reason as `_start`; the program itself is judged by the worker's evaluator."""
    from kforge_core.loop import create_manual_run, launch_manual_job
    from kforge_core.store import open_store

    run_id = request.get("run_id")
    if run_id is None:
        with open_store(request["db"]) as store:
            run_id = create_manual_run(store, request["problem_source"], request["problem_name"], request["target"],
                                       request["author"], **request.get("evaluation", {}))
    pid = launch_manual_job(request["db"], run_id, request["job"], request["program"], request.get("of"))
    return {"run_id": run_id, "pid": pid}


JOBS = {"targets": _targets, "validate": _validate, "ceilings": _ceilings, "start": _start, "manual": _manual,
        "coverage": _coverage}


def main(argv: list[str]) -> int:
    from kforge_core.errors import KForgeError

    if len(argv) != 1 or argv[0] not in JOBS:
        print(f"usage: python -m app.child {{{'|'.join(JOBS)}}} < request.json", file=sys.stderr)
        return 2
    request = json.loads(sys.stdin.read() or "{}")
    try:
        result = JOBS[argv[0]](request)
    except KForgeError as exc:
        print(json.dumps({"ok": False, "error": str(exc)}))
        return 0
    print(json.dumps({"ok": True, "result": result}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
