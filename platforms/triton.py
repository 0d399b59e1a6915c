"""Triton target: `@triton.jit` kernels written in the candidate itself, launched with `kernel[grid](...)`.

Candidates import `triton` and `triton.language` directly (no helper API). In the evaluation child this module:
- counts launches of JIT functions defined in the candidate (a wrapper around `JITFunction.run`, which every
  `kernel[grid](...)` and autotuner trial goes through), so a pure-PyTorch `ModelNew` is rejected;
- runs Triton's compilation inside `guards.trusted()` (Triton starts ptxas and a C compiler as subprocesses); the
  candidate's own callables that Triton calls from there (a `grid` lambda) run guarded again;
- turns compilation failures (CompilationError and friends, ptxas errors, kernels needing more shared memory or
  threads than the GPU has) into `compile_error` verdicts whose message names the candidate's own lines.
Everything else — strict fp32, synchronization, timing, L2 flush, profilers, ceilings — is shared with the CUDA
target (`platforms.cuda._common`). Note: `tl.dot` on fp32 inputs uses TF32 unless `input_precision="ieee"`; under the
default fp32 tolerance such a kernel is judged incorrect, as TF32 drift should be.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import sys

from kforge_core.errors import CompileError
from kforge_core.platform import Availability

from .cuda._common import GpuPlatform, cuda_problem, gpu_summary

CANDIDATE_MODULE = "kforge_candidate"
_COMPILE_ERRORS = ("CompilationError", "CompileTimeAssertionFailure", "UnsupportedLanguageConstruct",
                   "PTXASError", "OutOfResources")


def _jit_functions(module) -> list:
    """JITFunction objects reachable from a module's globals (through Autotuner/Heuristics wrappers too)."""
    found = []
    for value in list(vars(module).values()) if module else []:
        seen = 0
        while value is not None and seen < 5:
            if type(value).__name__ == "JITFunction":
                found.append(value)
                break
            value = getattr(value, "fn", None)
            seen += 1
    return found


def _def_line(jit_fn) -> int | None:
    """Candidate line of the `def` of a JITFunction (its decorators come first)."""
    raw, start = getattr(jit_fn, "raw_src", None), getattr(jit_fn, "starting_line_number", None)
    if not raw or not start:
        return None
    for i, line in enumerate(raw):
        if re.match(r"\s*def\s+\w+\s*\(", line):
            return start + i
    return start


def compile_error_from_triton(exc: BaseException, kernel_name: str, jit_fns=()) -> CompileError:
    """A CompileError naming candidate lines from a Triton compilation failure (duck-typed: `src`, `node.lineno`,
    `error_message`), walking the cause chain to the innermost error."""
    chain, e = [], exc
    while e is not None and len(chain) < 20:
        chain.append(e)
        e = e.__cause__ or (e.__context__ if not e.__suppress_context__ else None)
    by_src = {getattr(f, "src", None): f for f in jit_fns}
    located = []
    for err in chain:
        node, src = getattr(err, "node", None), getattr(err, "src", None)
        lineno = getattr(node, "lineno", None)
        if lineno is None:
            continue
        fn = by_src.get(src)
        def_line = _def_line(fn) if fn is not None else None
        where = f"candidate line {def_line + lineno - 1}" if def_line else f"line {lineno} of the kernel"
        fn_name = getattr(getattr(fn, "fn", None), "__name__", None) or kernel_name
        located.append((where, fn_name, err))
    detail = ""
    for err in reversed(chain):  # the innermost message says what went wrong
        msg = getattr(err, "error_message", None)
        if msg:
            detail = str(msg).strip().splitlines()[-1] if str(msg).strip() else ""
            break
        if type(err).__name__ not in ("CompilationError",):
            text = str(err).strip()
            if text:
                detail = f"{type(err).__name__}: {text.splitlines()[-1]}"
                break
    kind = type(exc).__name__
    if located:
        where, fn_name, _ = located[-1]  # the innermost located frame
        calls = " <- ".join(f"{w} ({n})" for w, n, _ in reversed(located[:-1]))
        summary = f"Triton compilation of {kernel_name} failed at {where} in {fn_name}: {detail or kind}"
        if calls:
            summary += f" (called from {calls})"
    elif kind == "OutOfResources":
        summary = f"Triton kernel {kernel_name} cannot run on this GPU: {exc}"
    else:
        summary = f"Triton compilation of {kernel_name} failed: {kind}: {str(exc).strip()[:600]}"
    log_parts = []
    for where, fn_name, err in located:
        log_parts.append(f"--- {where} ({fn_name}) ---\n{err}")
    return CompileError(summary, log="\n".join(log_parts) or str(exc)[-8000:])


def _is_compile_failure(exc: BaseException) -> bool:
    e = exc
    for _ in range(10):
        if e is None:
            return False
        if type(e).__name__ in _COMPILE_ERRORS:
            return True
        e = e.__cause__
    return False


_installed = False


def install_hooks() -> None:
    """Wrap JITFunction.run (launch counting, trusted compilation, error mapping). Idempotent."""
    global _installed
    if _installed:
        return
    import triton
    from triton.runtime.jit import JITFunction

    from kforge_core.eval.harness import guards, launches

    _installed = True
    original_run = JITFunction.run

    def is_candidates(jf) -> bool:
        return getattr(jf, "module", None) == CANDIDATE_MODULE or \
            getattr(getattr(jf, "fn", None), "__module__", None) == CANDIDATE_MODULE

    def guarded_callable(fn):
        def call(*args, **kwargs):
            with guards.untrusted():
                return fn(*args, **kwargs)

        return call

    def run(self, *args, grid, warmup, **kwargs):
        own = is_candidates(self)
        if own and not warmup:
            launches.record(self.fn.__name__)
        if callable(grid):
            grid = guarded_callable(grid)
        try:
            with guards.trusted():
                return original_run(self, *args, grid=grid, warmup=warmup, **kwargs)
        except CompileError:
            raise
        except Exception as e:  # noqa: BLE001
            if own and _is_compile_failure(e):
                raise compile_error_from_triton(e, self.fn.__name__,
                                                _jit_functions(sys.modules.get(CANDIDATE_MODULE))) from None
            raise

    run.kforge_wrapped = True
    JITFunction.run = run
    # Triton's driver starts a C compiler and ldconfig on first use: do it now, trusted, outside any measurement.
    with guards.trusted():
        triton.runtime.driver.active.get_current_device()


class TritonPlatform(GpuPlatform):
    name = "triton"
    title = "Triton (GPU)"
    kernel_language = "python"
    formats = ("triton",)
    candidate_api = ()
    module_name = "platforms.triton"

    def availability(self) -> Availability:
        problem = cuda_problem()
        if problem:
            return Availability(False, problem)
        if importlib.util.find_spec("triton") is None:
            return Availability(False, "Triton is not installed (pip install triton; torch's CUDA wheels on Linux "
                                       "usually bring it)")
        try:
            version = importlib.metadata.version("triton")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown version"
        return Availability(True, f"{gpu_summary()}; triton {version}")

    def prepare_child(self) -> None:
        super().prepare_child()
        if not cuda_problem() and importlib.util.find_spec("triton") is not None:
            install_hooks()

    def warm_child(self) -> None:
        super().warm_child()
        if not cuda_problem() and importlib.util.find_spec("triton") is not None:
            import triton

            triton.runtime.driver.active.get_current_device()  # its driver module: a C build (cached), ldconfig


PLATFORM = TritonPlatform()
