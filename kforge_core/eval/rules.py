"""The evaluator's rules for candidate programs, stated in one place (the UI and the docs show `RULES`).

Static checks here read the candidate's Python source (AST) and the native kernel source it carries in string
literals. They reject what no honest kernel needs. Run-time guards (`kforge_core.eval.harness.guards`) back the rules that
a static check alone could be dodged around (e.g. `getattr(__import__("os"), ...)` is caught statically, but native
code or exotic reflection is caught at run time by an audit hook, thread-start guards and state snapshots).

The rule table is here; what each rule refuses by name is `kforge_core.eval.refusals`, the Python checker
`kforge_core.eval.python_check`, the kernel-source scan `kforge_core.eval.native_scan`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..pyast import parse_ast
from .native_scan import check_native_source
from .python_check import check_python, string_literals
from .refusals import Violation

__all__ = ["RULES", "Rule", "Violation", "check_candidate", "check_native_source", "rules_markdown"]


@dataclass(frozen=True)
class Rule:
    id: str
    summary: str
    why: str  # which published exploit or failure mode it stands for


RULES: tuple[Rule, ...] = (
    Rule("imports", "Only these imports: torch (public modules), math, typing, functools, itertools, dataclasses, "
         "collections, enum, operator, numbers, textwrap, string, numpy, triton, and the target's compile helpers "
         "(from platforms.<target> import ...).",
         "os/sys/subprocess/threading/ctypes/importlib give a candidate the process: timers, files, secrets."),
    Rule("no-threads", "No threads, subprocesses or multiprocessing in the candidate's own Python code.",
         "Background threads return before the work is done (lazy outputs) and escape the timer."),
    Rule("no-dynamic-code", "No eval/exec/compile/__import__/open/globals/locals/vars/setattr/delattr, and getattr "
         "only with a public constant name.", "Dynamic code and reflection dodge every static rule."),
    Rule("no-dunder", "No dunder names or attributes except __init__ and __name__.",
         "__globals__, __code__, __subclasses__ reach the harness and its timers."),
    Rule("no-private-torch", "No private attributes (torch._C, torch._dynamo, x._state, ...) on any object but the "
         "candidate's own instances (self._cache), and not nn.Module's own internals there.",
         "Private torch internals patch dispatch, timers and caching allocators."),
    Rule("resolved-values", "What an attribute of an allowed module is decides, not its name: a module outside the "
         "import allow-list (torch.os, torch.sys, typing.sys, dataclasses.builtins), a builtin outside the safe "
         "ones (torch.builtins.open) or a function of a refused module (torch.cuda.memory_snapshot) is refused "
         "however it is reached.",
         "Libraries import os, sys, builtins, importlib and ctypes themselves: an allowed name hands them out."),
    Rule("no-patching", "No assignment to attributes of imported modules or their classes.",
         "Patched timers (time.perf_counter, Event.elapsed_time) and patched torch functions fake speedups."),
    Rule("no-global-state", "No calls that change torch's global state: precision (TF32, matmul precision), "
         "default dtype/device, RNG seeds, thread counts, torch.compile.",
         "TF32/fp16 drift looks 5-7x faster; reseeding makes 'fresh' inputs predictable; torch.compile is the baseline."),
    Rule("no-file-writes", "No file-writing APIs: ndarray.tofile/dump, numpy.save/savez/savetxt/memmap, torch.save, "
         "Storage.from_file, GraphModule.to_folder, torch.onnx, tensorboard writers, triton's cache and tools "
         "(open() is refused by no-dynamic-code).",
         "A written file is code the static rules never read: a planted sympy.py or a poisoned compile cache is "
         "imported later by torch itself."),
    Rule("native-no-os", "Kernel source may not call the OS: no system/popen/fork/exec, getenv/environ, /proc, "
         "sockets, dlopen, file I/O, std::thread/pthread/async, or host inline assembly; CUDA streams come from "
         "torch's pool (no cudaStreamCreate).",
         "Native code can read secrets from /proc/<pid>/environ or finish work on a thread after the timer stops."),
    Rule("must-launch", "ModelNew must run at least one kernel it compiled through the target's helpers or "
         "load_inline on every forward call checked.", "A pure-PyTorch ModelNew is not a custom kernel."),
    Rule("no-input-mutation", "Inputs must not be modified.", "A candidate that writes into its inputs changes "
         "what the reference sees."),
)


def check_candidate(source: str, platform_module: str, candidate_api: tuple[str, ...],
                    allow_inline_asm: bool = False) -> list[Violation]:
    """All static violations of a candidate; an empty list means it may run. Syntax errors raise SyntaxError."""
    tree = parse_ast(source)
    violations = check_python(tree, platform_module, candidate_api)
    for line, text in string_literals(tree):
        if len(text) > 40 and ("(" in text or "{" in text):  # only literals that look like code
            violations.extend(check_native_source(text, line, allow_inline_asm))
    return sorted(set(violations), key=lambda v: (v.line or 0, v.rule, v.message))


def _md_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("_", "\\_").replace("*", "\\*")


def rules_markdown() -> str:
    """The rules as Markdown (underscores escaped: `__import__` must not render as bold)."""
    return "\n".join(f"- **{r.id}** — {_md_escape(r.summary)} _Why: {_md_escape(r.why)}_" for r in RULES)
