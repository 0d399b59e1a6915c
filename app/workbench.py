"""The Workbench's parts that are not drawing: what the editor opens (a target's example, a blank template, an
iteration of a run), the error markers a verdict puts on the candidate's lines, and the jobs it hands to workers.

The editor's text is untrusted code: here it is only a string that travels to a child job, which hands it to a
detached worker, whose evaluator judges it in a sandbox. Nothing here parses, imports or runs it.
"""

from __future__ import annotations

import getpass
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

from . import services
from .child import run_job

JOB_TIMEOUT_S = 120.0
# where compiler diagnostics and Python errors name the candidate's own lines (kforge_core.source_map writes
# "candidate line N"; a traceback through the candidate's file says `candidate.py", line N`)
_CANDIDATE_LINE = re.compile(r"candidate line (\d+)(?: \(kernel line \d+\))?:?\s*(.*)")
_TRACEBACK_LINE = re.compile(r'candidate\.py", line (\d+)')
MAX_MARKERS = 20


def default_author() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name for this uid (a container)
        return ""


def blank_template(target: services.TargetInfo) -> str:
    """A starting point for `target`: its compile helper imported, a `ModelNew` with a kernel to write. Not a
    program that passes: the person writes the kernel and the forward."""
    helper = target.candidate_api[0] if target.candidate_api else None
    module = target.candidate_module or f"platforms.{target.name}"
    doc = f'"""A custom kernel for {target.title}."""\n\n'
    imports = "import torch\nimport torch.nn as nn\n"
    if target.kernel_language == "python":  # kernels written in Python (Triton)
        return (doc + imports + "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
                "def kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    pid = tl.program_id(0)\n"
                "    offsets = pid * BLOCK + tl.arange(0, BLOCK)\n    mask = offsets < n\n"
                "    # write the kernel here\n\n\nclass ModelNew(nn.Module):\n    def __init__(self, *init_inputs):\n"
                "        super().__init__()\n\n    def forward(self, *inputs):\n"
                "        raise NotImplementedError('launch kernel[grid](...) here')\n")
    build = f"from {module} import {helper}\n" if helper else ""
    comment = "//" if target.kernel_language in ("cpp", "c", "cuda", "metal", "objective-c") else "#"
    lib = f"        self.lib = {helper}(SOURCE)\n" if helper else ""
    return (doc + imports + build + f'\nSOURCE = r"""\n{comment} write the {target.kernel_language} kernel here\n"""\n'
            "\n\nclass ModelNew(nn.Module):\n    def __init__(self, *init_inputs):  # get_init_inputs()\n"
            f"        super().__init__()\n{lib}\n    def forward(self, *inputs):  # get_inputs()\n"
            "        raise NotImplementedError('call the kernel here')\n")


def example_texts(target: services.TargetInfo) -> tuple[str, str] | None:
    """(problem, candidate) of the target's single-shot example, or None when the platform has none."""
    try:
        return Path(target.example_problem).read_text(), Path(target.example_candidate).read_text()
    except (OSError, ValueError):
        return None


def annotations(verdict: dict[str, Any] | None, reason: str | None = None) -> list[dict[str, Any]]:
    """Ace annotations (0-based rows) at the candidate lines a verdict names: compiler diagnostics mapped to the
    program's own lines, Python syntax errors, tracebacks through the candidate's file."""
    verdict = verdict or {}
    found: dict[int, str] = {}
    texts = [reason or verdict.get("reason") or "", verdict.get("compile_log") or "", verdict.get("log_tail") or ""]
    for text in texts:
        for part in re.split(r"\n|; ", text):
            m = _CANDIDATE_LINE.search(part)
            if m:
                found.setdefault(int(m.group(1)), m.group(2).strip() or part.strip())
        for m in _TRACEBACK_LINE.finditer(text):
            found.setdefault(int(m.group(1)), verdict.get("reason") or "raised here")
    kind = "error" if verdict.get("status", "compile_error") in ("compile_error", "runtime_error") else "warning"
    return [{"row": line - 1, "column": 0, "type": kind, "text": text}
            for line, text in sorted(found.items())[:MAX_MARKERS] if line >= 1]


def manual_job(job: str, program: str, *, run_id: str | None, problem_source: str, problem_name: str,
               target: str, author: str, evaluation: dict[str, Any], of: int | None = None) -> str:
    """Hand a job to a child (which creates the manual run when `run_id` is None and starts its worker); return
    the run id."""
    answer = run_job("manual", {"db": str(services.db_path()), "run_id": run_id, "job": job, "program": program,
                                "of": of, "problem_source": problem_source, "problem_name": problem_name,
                                "target": target, "author": author, "evaluation": evaluation},
                     timeout_s=JOB_TIMEOUT_S)
    return answer["run_id"]


def continue_config(loop, program: str, problem_source: str, problem_name: str, target: str, agent: Any,
                    budgets: dict[str, Any], evaluation: dict[str, Any]) -> Any:
    """The RunConfig of a synthesis run that starts from `program`."""
    from .synthesize_form import build_config

    return build_config(loop, problem_source=problem_source, problem_name=problem_name, target=target,
                        start_program=program, **asdict(agent), **budgets, **evaluation)
