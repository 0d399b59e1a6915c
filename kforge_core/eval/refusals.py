"""What the static rules refuse or allow, by name, and `Violation`, one broken rule at a line of the candidate.

The lists are the rules' detail (`kforge_core.eval.rules` states each rule once, for the UI, the docs and the
prompts); `kforge_core.eval.python_check` applies them to the candidate's Python, `kforge_core.eval.native_scan`
reads its kernel source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ALLOWED_IMPORT_ROOTS = frozenset({
    "torch", "math", "typing", "functools", "itertools", "dataclasses", "collections", "enum", "operator",
    "numbers", "textwrap", "string", "numpy", "triton", "__future__", "abc", "warnings",
})
# Public torch modules that still hand out the process or the baseline.
DENIED_QUALIFIED_PREFIXES = (
    "torch.multiprocessing", "torch.distributed", "torch.hub", "torch.compile", "torch.utils.cpp_extension.load",
    "torch.utils.data", "torch.cuda.memory", "torch.library", "torch.ops", "torch.jit", "torch.export",
    "torch.backends", "torch.profiler", "torch.autograd.profiler",
    # global interception: hooks on *every* module (the reference included) and torch-function modes
    "torch.nn.modules.module", "torch.overrides", "torch.utils.hooks", "torch.autograd.graph",
    # deserialisation runs code (pickle), file I/O, foreign libraries, clocks
    "torch.load", "torch.save", "torch.from_file", "torch.serialization", "torch.package", "torch.classes",
    "torch.utils.benchmark", "torch.utils.cpp_extension",
    "numpy.load", "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.fromfile", "numpy.memmap",
    "numpy.loadtxt", "numpy.savetxt", "numpy.genfromtxt", "numpy.fromregex", "numpy.ctypeslib", "numpy.lib",
    "numpy.f2py", "numpy.distutils", "numpy.testing", "numpy.DataSource",
    # file writers: whatever lands on disk may be imported later (a planted module, a poisoned compile cache)
    "torch.onnx", "torch.utils.tensorboard", "torch.utils.model_dump", "torch.utils.bundled_inputs",
    "triton.runtime.cache", "triton.tools",
    # attribute access by string (dodges the dunder rule) and eval in disguise (string annotations are evaluated)
    "operator.attrgetter", "operator.methodcaller", "string.Formatter", "typing.get_type_hints",
    "typing.ForwardRef", "functools.singledispatch", "functools.singledispatchmethod",
    # memory introspection: the addresses of the kept reference outputs (overwritten by a kernel, then `correct`)
    "torch.cuda.memory_snapshot", "torch.cuda.memory_stats", "torch.cuda.memory_stats_as_nested_dict",
    "torch.cuda.memory_summary", "torch.cuda.list_gpu_processes", "torch.cuda.caching_allocator_alloc",
    "torch.cuda.caching_allocator_delete", "torch.cuda.mem_get_info", "torch.mps.current_allocated_memory",
    "torch.mps.driver_allocated_memory",
)
# Exact names allowed inside a denied prefix: KernelBench's load_inline (and its module, to reach it).
ALLOWED_QUALIFIED = frozenset({"torch.utils.cpp_extension.load_inline", "torch.utils.cpp_extension"})
GLOBAL_STATE_CALLS = frozenset({
    "set_float32_matmul_precision", "set_default_dtype", "set_default_tensor_type", "set_default_device",
    "set_flush_denormal", "use_deterministic_algorithms", "manual_seed", "manual_seed_all", "seed", "seed_all",
    "set_rng_state", "set_num_threads", "set_num_interop_threads", "compile", "set_per_process_memory_fraction",
    "set_sync_debug_mode",
})
BANNED_CALLS = frozenset({
    "eval", "exec", "compile", "__import__", "open", "input", "breakpoint", "globals", "locals", "vars", "setattr",
    "delattr", "memoryview", "exit", "quit", "help",
})
ALLOWED_DUNDERS = frozenset({"__init__", "__name__"})
# Builtins a candidate may reach as an attribute of an allowed module (`torch.builtins.len` is odd but harmless);
# anything else there (open, exec, getattr, __import__, ...) is refused however it was reached.
SAFE_BUILTINS = frozenset({
    "abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr", "classmethod", "complex",
    "dict", "divmod", "enumerate", "filter", "float", "format", "frozenset", "hash", "hex", "int", "isinstance",
    "issubclass", "iter", "len", "list", "map", "max", "min", "next", "object", "oct", "ord", "pow", "print",
    "property", "range", "repr", "reversed", "round", "set", "slice", "sorted", "staticmethod", "str", "sum",
    "super", "tuple", "type", "zip", "Ellipsis", "NotImplemented", "None", "True", "False",
})
# Modules whose functions and classes an allowed module may re-export (C accelerators of allowed stdlib modules).
VALUE_MODULE_ROOTS = frozenset({"_functools", "_operator", "_collections", "_collections_abc", "_abc", "abc",
                                 "_weakrefset", "cmath", "_warnings", "_string", "_struct", "builtins",
                                 # the harness's own wrappers installed in torch for candidates (load_inline)
                                 "kforge_core", "platforms"})
# Checked when a value cannot be resolved (the root module is not importable here): stdlib modules that allowed
# libraries import for themselves and so hand out as attributes.
FORBIDDEN_MODULE_NAMES = frozenset({
    "os", "sys", "builtins", "importlib", "ctypes", "subprocess", "threading", "_thread", "multiprocessing",
    "socket", "shutil", "pickle", "marshal", "inspect", "gc", "io", "pathlib", "tempfile", "runpy", "pty", "posix",
    "glob", "platform", "traceback", "copyreg", "weakref", "contextlib", "resource", "mmap",
})
# nn.Module's own private state: a candidate's `self._name` is its own business, `self._forward_hooks` is not.
MODULE_INTERNALS = re.compile(r"^_(parameters|buffers|modules|non_persistent|forward|backward|state_dict|"
                               r"load_state_dict|load_from_state_dict|register|apply|call_impl|wrapped_call|"
                               r"compiled_call|slow_forward|get_backward|is_full_backward|version|named_members|"
                               r"replicate|get_name|save_to_state_dict|maybe_warn)")
# Modules whose functions are refused under any public alias (`torch.cuda.memory_snapshot` is defined in
# torch.cuda.memory): what they do, not where they are re-exported, is the problem.
VALUE_DENIED_MODULES = ("torch.cuda.memory", "torch.multiprocessing", "torch.distributed", "torch.hub",
                         "torch.serialization", "torch.utils.benchmark", "torch.profiler", "torch.autograd.profiler",
                         "torch.onnx", "torch.utils.tensorboard", "torch.overrides", "torch.library")
VALUE_ALLOWED = frozenset({"torch.cuda.memory.empty_cache"})
# Methods that write files, refused whatever object they are reached on (`x.numpy().tofile(path)` is rooted at no
# import the qualified-name checks could follow; `getattr(x, "tofile")` is read like `x.tofile`).
FILE_WRITE_ATTRS = frozenset({
    "tofile", "dump", "save", "savez", "savez_compressed", "savetxt", "from_file", "memmap", "open_memmap",
    "to_folder", "get_cache_manager",
})


@dataclass(frozen=True)
class Violation:
    rule: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        return f"{where}{self.message} [rule {self.rule}]"

