"""Hostile candidates: one test per published trick (shared/EVAL_PITFALLS.md), each must get the right verdict.
Crashes, hangs, exits and exhausted resources are in test_evaluator_crashes.py.

Real child processes and a real g++. Most cases run with timing off; the timing-path ones use a tiny budget.
The verdict for every case is computed in the background two at a time (see candidates/evalkit.py).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from candidates.evalkit import HOSTILE, QUICK_TIMING, REGISTRY, assert_status, case, run_case

M = __name__
SWISH = "swish_small.py"


def hostile(name: str, problem: str = SWISH, weight: int = 1, **options) -> str:
    return case(M, name, problem, HOSTILE / f"{name}.py", weight=weight, **options)


# --- correctness tricks
hostile("stale_buffer")
hostile("zero_output", "tiny_scale.py")
hostile("nan_output")
hostile("inf_output")
hostile("constant_output")
hostile("cache_data_ptr")
hostile("cache_shape")
hostile("mutate_inputs")
hostile("mutate_inputs_when_timed", weight=2, **QUICK_TIMING)
hostile("first_output_only", "multi_output.py")
hostile("pure_pytorch")
hostile("compiled_never_called")
hostile("trivial_kernel_torch_compute")
hostile("tensor_subclass")
hostile("global_forward_hook")
hostile("global_forward_hook_getattr")
hostile("global_forward_hook_runtime")
hostile("autocast_leak")
hostile("wrong_shape")
hostile("wrong_dtype")
# --- timing tricks
hostile("timer_patch_static")
hostile("timer_patch_alias")
hostile("timer_patch_runtime")
hostile("flush_patch")
hostile("tf32")
hostile("tf32_runtime")
hostile("warmup_detect", weight=3, **QUICK_TIMING)
hostile("warmup_switch_to_torch", weight=3, **QUICK_TIMING)
hostile("repeat_detector", weight=3, **QUICK_TIMING)
# --- escapes: threads, processes, dynamic code
ESCAPES = ["esc_threading", "esc_thread_low", "esc_futures", "esc_multiprocessing", "esc_subprocess", "esc_os_system"]
DODGES = ["dodge_getattr_import", "dodge_builtins", "dodge_subclasses", "dodge_importlib", "dodge_eval", "dodge_exec"]
NATIVE_OS = ["native_system", "native_getenv", "native_proc_environ", "native_thread", "native_fopen"]
for _name in ESCAPES + DODGES + NATIVE_OS:
    hostile(_name)
hostile("native_ppid_environ")
hostile("python_print_environ")
hostile("native_concat_dodge")
hostile("native_token_paste")
hostile("native_raw_syscall")
hostile("native_flag_injection")
hostile("native_include_file")
# --- a forged result channel
hostile("forged_result")
# --- deserialising, and borrowing the trust given to installed libraries' lazy imports
hostile("pickle_np_load_alias")
# spawned children only (run by their tests): sympy is not yet imported there, so torch's lazy import searches sys.path
PLANTED = ["plant_module_unpickle", "plant_loader_attribute", "plant_loader_subclass"]
for _name in PLANTED:
    case(f"{M}:spawned", _name, SWISH, HOSTILE / f"{_name}.py")
case(f"{M}:planted", "plant_module_probe", SWISH, HOSTILE / "plant_module_probe.py")


# ------------------------------------------------------------------------------------------ correctness tricks

def test_stale_buffer(verdicts):
    """Stale buffers (Sakana AI CUDA Engineer, 2025: a kernel returned memory still holding the reference's
    output and 'won' 150x). The candidate returns an unwritten torch.empty; the harness poisons freed memory with
    NaN and runs the candidate after the reference, so the unwritten output cannot look right."""
    assert_status(verdicts["stale_buffer"], "incorrect")


def test_zero_output_on_tiny_values(verdicts):
    """Zero outputs pass an absolute tolerance when the outputs are tiny (KernelBench's allclose with atol=1e-2
    on outputs ~1e-6). Rejected: a constant output for a reference small next to atol must be close in relative L2
    too."""
    assert_status(verdicts["zero_output"], "incorrect", "constant output", "relative L2")


def test_nan_output(verdicts):
    """NaN as a wildcard (equal_nan=True / NaN-tolerant max-error logic): NaN never passes."""
    assert_status(verdicts["nan_output"], "incorrect", "NaN")


def test_inf_output(verdicts):
    """Inf outputs (Inf - Inf = NaN, relative errors Inf/Inf): Inf never passes."""
    assert_status(verdicts["inf_output"], "incorrect", "Inf")


def test_constant_output(verdicts):
    """Constant outputs (pass on degenerate problems or loose absolute tolerances)."""
    assert_status(verdicts["constant_output"], "incorrect")


def test_caching_by_input_data_ptr(verdicts):
    """Caching by input address: the same input objects reused across calls let a kernel return a cached
    result. Caught by re-running with new values written into the same tensors (and fresh inputs per seed)."""
    assert_status(verdicts["cache_data_ptr"], "incorrect")


def test_caching_by_shape(verdicts):
    """Caching by shape (one shape checked, results reused): fresh inputs per seed expose it."""
    assert_status(verdicts["cache_shape"], "incorrect")


def test_mutating_inputs(verdicts):
    """Mutated inputs: a candidate that writes into its inputs changes what the reference sees."""
    assert_status(verdicts["mutate_inputs"], "incorrect", "modified its inputs")


def test_mutating_inputs_once_timed(verdicts):
    """Inputs left alone while checked and written once timed: every timed call's inputs are checked too."""
    assert_status(verdicts["mutate_inputs_when_timed"], "incorrect", "modified its inputs in")



def test_input_check_in_the_candidates_process():
    """The candidate's process checks its own copy of the inputs (worker._inputs_changed): a value changed, or a
    tensor turned into a subclass (whose hooks would run inside the check itself: static rules refuse the
    spelling, this is the check behind them), is a change; the same values are not."""
    from types import SimpleNamespace

    from kforge_core.eval.harness.compare import fingerprint
    from kforge_core.eval.harness.worker import _Worker

    class Sub(torch.Tensor):
        pass

    x, y = torch.randn(64, 33), torch.arange(5)
    w = SimpleNamespace(inputs=[x, [y]], inputs_print=fingerprint([x, [y]]), inputs_checked=None)
    assert _Worker._inputs_changed(w) is False
    x[3, 7] += 1.0
    w.inputs_checked = None  # as a new call on the same inputs does (op_time)
    assert _Worker._inputs_changed(w) is True
    x[3, 7] -= 1.0
    x.__class__ = Sub
    w.inputs_checked = None
    assert _Worker._inputs_changed(w) is True
    assert _Worker._inputs_changed(SimpleNamespace(inputs=None, inputs_print=None, inputs_checked=None)) is False


def test_only_first_output_right(verdicts):
    """Only the first output checked: every output is compared; the reason names the wrong one."""
    assert_status(verdicts["first_output_only"], "incorrect", "output 1")


def test_pure_pytorch_modelnew_is_rejected(verdicts):
    """Pure-framework 'kernels': a ModelNew that just calls PyTorch is not a custom kernel."""
    assert_status(verdicts["pure_pytorch"], "rejected", "must-launch")


def test_compiled_but_never_called_is_rejected(verdicts):
    """A kernel compiled for show but never launched is rejected like a pure-PyTorch ModelNew."""
    assert_status(verdicts["compiled_never_called"], "rejected", "must-launch")


def test_trivial_kernel_beside_pytorch_compute_is_flagged(verdicts):
    """KNOWN LIMITATION: a do-nothing kernel launched once per call satisfies must-launch while PyTorch computes
    the answer. Launch counting cannot tell it from an honest partial-kernel candidate (custom op + torch matmul),
    so it stays `correct`, but the verdict warns that no output was written by a compiled kernel."""
    v = verdicts["trivial_kernel_torch_compute"]
    assert_status(v, "correct")
    assert any("no output of ModelNew was written by a kernel" in w for w in v.warnings), v.warnings


def test_tensor_subclass_output(verdicts):
    """Outputs that lie about themselves: a torch.Tensor subclass overriding abs/detach/max to fool a
    comparison written with tensor methods. Outputs must be plain tensors."""
    assert_status(verdicts["tensor_subclass"], "incorrect", "subclass")


def test_global_forward_hook_rewriting_the_reference(verdicts):
    """A global forward hook (torch.nn.modules.module.register_module_forward_hook, a public API) fires on the
    reference Model too and zeroes its output, so a candidate returning zeros 'matches'."""
    assert_status(verdicts["global_forward_hook"], "rejected")


def test_global_forward_hook_through_getattr(verdicts):
    """The same hook reached with getattr and a constant name: the static rules resolve getattr like an
    attribute, and the run-time check of global hooks backs them."""
    assert_status(verdicts["global_forward_hook_getattr"], "rejected")


def test_global_forward_hook_at_run_time(verdicts):
    """The same hook reached through a list element no static check follows: the run-time check of global module
    hooks (after import and after every candidate call) rejects it before any comparison is made."""
    assert_status(verdicts["global_forward_hook_runtime"], "rejected", "global module hooks")


def test_leaked_autocast(verdicts):
    """Global torch state leaked out of forward (autocast held open by a suspended generator): the reference's
    later runs would use reduced precision. Rejected by the check of global state after every candidate call."""
    assert_status(verdicts["autocast_leak"], "rejected", "autocast")


def test_wrong_shape(verdicts):
    """Wrong output shape: incorrect, and the reason names the shapes."""
    assert_status(verdicts["wrong_shape"], "incorrect", "shape", "[4096]", "[16, 256]")


def test_wrong_dtype(verdicts):
    """Wrong output dtype: incorrect, and the reason names the dtypes."""
    assert_status(verdicts["wrong_dtype"], "incorrect", "dtype", "float64", "float32")


# ------------------------------------------------------------------------------------------------ timing tricks

def test_timer_patching_static(verdicts):
    """Patched timers (time.perf_counter replaced): rejected statically (import and patching rules)."""
    assert_status(verdicts["timer_patch_static"], "rejected", "time")


def test_timer_patching_through_alias(verdicts):
    """`t = torch.cuda.Event; t.elapsed_time = ...`: the alias is followed statically."""
    assert_status(verdicts["timer_patch_alias"], "rejected", "elapsed_time")


def test_timer_patching_at_run_time(verdicts):
    """An alias no static check follows (a list element): the timer snapshot taken before import catches it."""
    assert_status(verdicts["timer_patch_runtime"], "rejected", "elapsed_time")


def test_cache_flush_patching_is_rejected(verdicts):
    """The platform's cache flush replaced on its class: the platform module is not candidate API (past the rules,
    the identity snapshot catches it: tests/test_process_state.py)."""
    assert_status(verdicts["flush_patch"], "rejected", "platforms.cpu")


def test_tf32_is_rejected(verdicts):
    """Precision drift: torch.backends.cuda.matmul.allow_tf32 = True is rejected statically."""
    assert_status(verdicts["tf32"], "rejected", "torch.backends")


def test_tf32_through_alias_is_rejected_at_run_time(verdicts):
    """TF32 enabled through an alias the static check cannot follow: the precision snapshot catches it."""
    assert_status(verdicts["tf32_runtime"], "rejected", "allow_tf32")


def test_warmup_detection(verdicts):
    """Warm-up detection: correct during the correctness checks (6 calls), garbage once timing starts. The
    outputs of timed calls are checked against the reference's outputs on the same inputs."""
    assert_status(verdicts["warmup_detect"], "incorrect", "timed call")


def test_switching_to_pytorch_once_timing_starts(verdicts):
    """Warm-up detection against must-launch: the kernel runs during the correctness checks only, then PyTorch
    (or a cache) answers. must-launch is enforced on every warm-up and timed call as well."""
    assert_status(verdicts["warmup_switch_to_torch"], "rejected", "must-launch")


def test_inputs_never_repeat(verdicts):
    """Result caching in timing (harnesses that rotate a few input sets let a cache keyed by address, version or
    content hit on every timed call). This candidate answers any repeated input with garbage, so `correct` proves
    that no checked, warm-up or timed call saw input values twice: every trial gets fresh values from a seed the
    candidate cannot predict."""
    v = verdicts["repeat_detector"]
    assert_status(v, "correct")
    assert v.candidate is not None and v.candidate.trials >= 3


# --------------------------------------------------------------------------------- threads, processes, dodges

@pytest.mark.parametrize("name", ESCAPES)
def test_threads_and_processes_are_rejected(verdicts, name):
    """Background threads (lazy outputs that escape the timer) and subprocesses (the process, the files, the
    secrets): threading, _thread, concurrent.futures, multiprocessing, subprocess, os.system."""
    assert_status(verdicts[name], "rejected", "not allowed")


@pytest.mark.parametrize("name", DODGES)
def test_static_rule_dodges_are_rejected(verdicts, name):
    """Dodges around the import rule: getattr(__import__('os'), 'system'), __builtins__, object.__subclasses__(),
    importlib, eval, exec."""
    assert_status(verdicts[name], "rejected", "not allowed")


@pytest.mark.parametrize("name", NATIVE_OS)
def test_native_os_access_is_rejected(verdicts, name):
    """Native kernel source calling the OS: system(), getenv, /proc/self/environ, std::thread, fopen."""
    assert_status(verdicts[name], "rejected", "native-no-os")


def test_native_source_assembled_at_run_time_is_rejected(verdicts):
    """The kernel source built from short pieces (no literal holds 'system('): the compile helper scans the
    source it is actually given."""
    assert_status(verdicts["native_concat_dodge"], "rejected", "system")


def test_native_call_spelled_by_the_preprocessor_is_rejected(verdicts):
    """system() spelled by token pasting (no textual scan sees it): the built library's imported symbols are
    checked."""
    assert_status(verdicts["native_token_paste"], "rejected", "system")


def test_raw_system_call_is_rejected(verdicts):
    """A system call in inline assembly whose `asm` keyword is spelled by token pasting (no import, no textual
    trace): the built library's code is checked for system-call instructions."""
    assert_status(verdicts["native_raw_syscall"], "rejected", "system calls directly")


def test_compiler_flag_injection_is_rejected(verdicts):
    """`-wrapper /bin/sh,...` in extra_cflags would run a shell inside the trusted build: flags are allow-listed."""
    assert_status(verdicts["native_flag_injection"], "rejected", "-wrapper")


def test_include_of_absolute_path_is_rejected(verdicts):
    """#include "/etc/..." would paste a file's contents into the compile log the agent sees."""
    assert_status(verdicts["native_include_file"], "rejected", "include")


# ------------------------------------------------------------------------------------------------------- secrets

def test_native_read_of_parent_environ_is_rejected(verdicts):
    """Secrets through /proc of the parent (the app holds the API key): native code opening /proc/<ppid>/environ
    is rejected statically."""
    assert_status(verdicts["native_ppid_environ"], "rejected", "/proc")


def test_python_printing_environ_is_rejected(verdicts):
    """A Python candidate printing os.environ is rejected (os is not importable)."""
    assert_status(verdicts["python_print_environ"], "rejected", "'os'")


SECRET_PARENT = r"""
import json, os, sys
from kforge_core.eval.sandbox import run_child
out = run_child({}, {}, timeout_s=60, memory_limit_mb=None, limit_address_space=False,
                module="tests.candidates.sandbox.envdump")
print(json.dumps({"result": out.result, "log": out.log[-2000:]}))
"""


def test_child_cannot_see_parent_secrets(tmp_path):
    """Secrets in the environment are readable by candidate code, including through /proc of parent processes.
    A parent started with OPENAI_API_KEY and MY_TOKEN in its environment runs a hostile child module: the
    secrets are not in the child's environment, and the parent's /proc/<pid>/environ cannot be read (the parent
    is non-dumpable and, when running as root, the child has no capabilities to override that)."""
    from kforge_core.platform import REPO_ROOT

    env = {**os.environ, "OPENAI_API_KEY": "sk-test-secret", "MY_TOKEN": "tok-test-secret",
           "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run([sys.executable, "-c", SECRET_PARENT], env=env, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    import json

    report = json.loads(proc.stdout.strip().splitlines()[-1])
    result = report["result"]
    assert result is not None, report["log"]
    assert "OPENAI_API_KEY" not in result["environ"] and "MY_TOKEN" not in result["environ"]
    assert not any("secret" in v for v in result["environ"].values())
    assert "sk-test-secret" not in result.get("parent_environ", ""), "child read the parent's environment"
    assert "parent_environ_error" in result


# -------------------------------------------------------------------------------------- the result channel

def test_forged_result_cannot_change_the_verdict(verdicts):
    """A candidate printing a framed 'correct' result cannot guess the nonce: its (wrong) output is judged."""
    v = verdicts["forged_result"]
    assert_status(v, "incorrect")
    assert "forged" not in v.reason


def test_unpickling_through_a_permitted_loader_is_rejected(verdicts):
    """Deserialising runs code: np.load(allow_pickle=True) reached through an alias no static check follows, on a
    file-like object holding a crafted pickle. Refused at run time (pickle.find_class) although the candidate
    swallows the error."""
    assert_status(verdicts["pickle_np_load_alias"], "rejected", "pickle.find_class")


@pytest.mark.parametrize("name", PLANTED)
def test_planting_a_module_is_rejected(monkeypatch, name):
    """Planting a module to dodge the static rules: the candidate writes sympy.py into its working directory
    (ndarray.tofile) for torch's own lazy `import sympy` (torch.broadcast_shapes) to load as trusted library code:
    - plant_module_unpickle: the planted module unpickles a crafted pickle;
    - plant_loader_attribute / plant_loader_subclass: it crafts importlib machinery instead, a stdlib loader with
      get_data shadowed by an instance attribute or overridden in a subclass, serving bytecode compiled under
      torch's own file name, run through importlib's own _load_unlocked as a module located in torch.
    Candidates have no business writing files: the write is refused statically (rule no-file-writes), so the
    module is never planted (and were it planted, the working directory is not on sys.path: see below)."""
    monkeypatch.setenv("KFORGE_EVAL_SPAWN", "1")
    assert_status(run_case(REGISTRY[name]), "rejected", "tofile", "no-file-writes")


PLANTED_MODULE = """import os
with open({marker!r}, "w") as f:
    f.write(__name__)
os._exit(42)  # no verdict at all: the evaluation fails if this module is ever imported
"""


@pytest.mark.parametrize("spawn", [True, False], ids=["spawned", "forked"])
def test_planted_module_in_the_working_directory_is_not_imported(monkeypatch, tmp_path, spawn):
    """Planted modules (any file-write path the static rules might miss): sympy.py and triton.py are put in the
    candidate's working directory beside candidate.py (and, for a forked child, triton.py in the fork server's
    directory too: a plain `python -m` puts the directory it starts in at the head of sys.path, and forked
    children inherit the fork server's), and the candidate (plant_module_probe) triggers torch's lazy
    `import sympy` and its own `import triton` (absent here). Were any of these directories on sys.path, the
    import would run the planted file, which leaves a marker and kills the child. Children start with -P and
    scrub sys.path: no such directory is searched, the kernel is judged correct, and no marker appears."""
    from kforge_core.eval import child_setup, evaluator, forkserver

    monkeypatch.setenv("KFORGE_EVAL_SPAWN", "1" if spawn else "0")
    markers = {name: tmp_path / f"{name}.imported" for name in ("sympy", "triton", "server-triton")}
    planted = {f"{name}.py": PLANTED_MODULE.format(marker=str(markers[name])) for name in ("sympy", "triton")}
    real_run_child = evaluator.run_child
    server_plants = []

    def planting_run_child(request, files, **kwargs):
        if "candidate.py" not in files:
            return real_run_child(request, files, **kwargs)
        if not spawn:  # the server this evaluation will be forked from (its key ignores HOME)
            plant = forkserver.get(child_setup.child_environment(tmp_path)).dir / "triton.py"
            plant.write_text(PLANTED_MODULE.format(marker=str(markers["server-triton"])))
            server_plants.append(plant)
        return real_run_child(request, {**files, **planted}, **kwargs)

    monkeypatch.setattr(evaluator, "run_child", planting_run_child)
    try:
        v = run_case(REGISTRY["plant_module_probe"])
    finally:
        for plant in server_plants:
            plant.unlink(missing_ok=True)
    assert server_plants or spawn, "the forked case was not forked"
    imported = sorted(name for name, path in markers.items() if path.exists())
    assert not imported, f"planted module(s) imported: {imported}"
    assert_status(v, "correct")
