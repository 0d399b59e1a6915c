"""The evaluator's rules for candidate programs, stated in one place (the UI and the docs show `RULES`).

Static checks here read the candidate's Python source (AST) and the native kernel source it carries in string
literals. They reject what no honest kernel needs. Run-time guards (`kforge_core.eval.harness.guards`) back the rules that
a static check alone could be dodged around (e.g. `getattr(__import__("os"), ...)` is caught statically, but native
code or exotic reflection is caught at run time by an audit hook, thread-start guards and state snapshots).
"""

from __future__ import annotations

import ast
import builtins
import inspect
import re
import sys
import types
from dataclasses import dataclass

from ..pyast import parse_ast


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
         "sockets, dlopen, file I/O, std::thread/pthread/async, or host inline assembly.",
         "Native code can read secrets from /proc/<pid>/environ or finish work on a thread after the timer stops."),
    Rule("must-launch", "ModelNew must run at least one kernel it compiled through the target's helpers or "
         "load_inline on every forward call checked.", "A pure-PyTorch ModelNew is not a custom kernel."),
    Rule("no-input-mutation", "Inputs must not be modified.", "A candidate that writes into its inputs changes "
         "what the reference sees."),
)

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
_VALUE_MODULE_ROOTS = frozenset({"_functools", "_operator", "_collections", "_collections_abc", "_abc", "abc",
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
_MODULE_INTERNALS = re.compile(r"^_(parameters|buffers|modules|non_persistent|forward|backward|state_dict|"
                               r"load_state_dict|load_from_state_dict|register|apply|call_impl|wrapped_call|"
                               r"compiled_call|slow_forward|get_backward|is_full_backward|version|named_members|"
                               r"replicate|get_name|save_to_state_dict|maybe_warn)")
# Modules whose functions are refused under any public alias (`torch.cuda.memory_snapshot` is defined in
# torch.cuda.memory): what they do, not where they are re-exported, is the problem.
_VALUE_DENIED_MODULES = ("torch.cuda.memory", "torch.multiprocessing", "torch.distributed", "torch.hub",
                         "torch.serialization", "torch.utils.benchmark", "torch.profiler", "torch.autograd.profiler",
                         "torch.onnx", "torch.utils.tensorboard", "torch.overrides", "torch.library")
_VALUE_ALLOWED = frozenset({"torch.cuda.memory.empty_cache"})
_MISSING = object()
# Methods that write files, refused whatever object they are reached on (`x.numpy().tofile(path)` is rooted at no
# import the qualified-name checks could follow; `getattr(x, "tofile")` is read like `x.tofile`).
FILE_WRITE_ATTRS = frozenset({
    "tofile", "dump", "save", "savez", "savez_compressed", "savetxt", "from_file", "memmap", "open_memmap",
    "to_folder", "get_cache_manager",
})

# Native (C/C++/CUDA/Metal) source: what kernels never need. Word-boundary patterns over string literals.
_NATIVE_PATTERNS = [
    (r"\b(system|popen|fork|vfork|execl|execlp|execle|execv|execve|execvp|execvpe|fexecve|posix_spawnp?|clone)"
     r"\s*\(", "runs programs"),
    (r"\b(getenv|secure_getenv|environ|__environ|setenv|putenv)\b", "reads the environment"),
    (r"/proc\b", "reads /proc"),
    (r"\b(socket|connect|bind|dlopen|dlmopen|dlsym|syscall|ptrace|mprotect|prctl)\s*\(", "uses OS services"),
    (r"\b(fopen|fopen64|freopen|fdopen|opendir|open|open64|openat|creat|unlink|remove|rename|truncate)\s*\(",
     "does file I/O"),
    (r"\b(ifstream|ofstream|fstream|filebuf|std::filesystem)\b", "does file I/O"),
    (r"\b(pthread_create|std::thread|std::async|std::jthread)\b", "starts threads (OpenMP is allowed)"),
    # kernels include system headers by name; a path (absolute, parent directory, home) or a macro would paste an
    # arbitrary file into the build log the agent reads
    (r"^\s*#\s*(include|include_next|import)\s*(?![<\"])\S", "uses a computed #include"),
    (r"^\s*#\s*(include|include_next|import)\s*[<\"]\s*(/|~|[^>\"]*\.\.)", "includes a file by path"),
    (r"\b(__has_include|__has_include_next)\b|#\s*embed\b", "probes or embeds files"),
    # the Python C API / pybind11 from a load_inline extension is Python without the static rules
    (r"\b(PyRun_\w*|PyImport_\w*|Py_CompileString\w*|PyEval_EvalCode\w*|PyEval_GetBuiltins|PySys_\w*|"
     r"PyMarshal_\w*|PyObject_SetAttr\w*|PyObject_GenericSetAttr)\b", "uses the Python C API to run Python"),
    (r"\bpy(bind11)?::(exec|eval|eval_file|globals|module_?::import|setattr|delattr|import)\b|"
     r"\bpybind11::(module_?::)?import\b", "uses pybind11 to run Python"),
]
_HOST_ASM = (r"\b(asm|__asm__|__asm)\b", "uses host inline assembly")


@dataclass(frozen=True)
class Violation:
    rule: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        return f"{where}{self.message} [rule {self.rule}]"


class _Checker(ast.NodeVisitor):
    def __init__(self, platform_module: str, candidate_api: tuple[str, ...]):
        self.platform_module = platform_module
        self.candidate_api = set(candidate_api)
        self.aliases: dict[str, str] = {}  # local name -> qualified module/object path
        self.direct_calls: set[int] = set()  # Name nodes that are the callee of a call (checked in visit_Call)
        self.bound: set[str] = set()  # names the candidate binds itself (`def forward(self, input)`): not builtins
        self.own: set[str] = set()  # first parameters of its methods and its class names: private attributes ok
        self.violations: list[Violation] = []

    def visit_Module(self, node: ast.Module) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, ast.arg):
                self.bound.add(sub.arg)
            elif isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                self.bound.add(sub.id)
            elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bound.add(sub.name)
            if isinstance(sub, ast.ClassDef):
                self.own.add(sub.name)
                for item in sub.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.args.posonlyargs + \
                            item.args.args:
                        self.own.add((item.args.posonlyargs + item.args.args)[0].arg)
            elif isinstance(sub, ast.ExceptHandler) and sub.name:
                self.bound.add(sub.name)
        self.generic_visit(node)

    def flag(self, rule: str, node: ast.AST, message: str) -> None:
        self.violations.append(Violation(rule, getattr(node, "lineno", None), message))

    # --- imports -------------------------------------------------------------------------------------------
    def _import_allowed(self, module: str) -> bool:
        root = module.split(".")[0]
        return root in ALLOWED_IMPORT_ROOTS and not self._denied(module) and not any(
            part.startswith("_") and part != "__future__" for part in module.split("."))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not self._import_allowed(alias.name):
                self.flag("imports", node, f"import of {alias.name!r} is not allowed")
            local = alias.asname or alias.name.split(".")[0]
            self.aliases[local] = alias.name if alias.asname else alias.name.split(".")[0]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self.flag("imports", node, "relative imports are not allowed")
            return
        if module == self.platform_module:
            for alias in node.names:
                if alias.name not in self.candidate_api:
                    self.flag("imports", node, f"{module} exposes only {sorted(self.candidate_api)} to candidates, "
                                               f"not {alias.name!r}")
                self.aliases[alias.asname or alias.name] = f"{module}.{alias.name}"
            return
        if not self._import_allowed(module):
            self.flag("imports", node, f"import from {module!r} is not allowed")
        for alias in node.names:
            qualified = f"{module}.{alias.name}"
            if alias.name == "*":
                self.flag("imports", node, "star imports are not allowed")
            elif alias.name.startswith("_") or (self._denied(qualified) and qualified not in ALLOWED_QUALIFIED):
                self.flag("imports", node, f"import of {qualified!r} is not allowed")
            else:
                self._check_value(node, qualified)
            self.aliases[alias.asname or alias.name] = qualified

    @staticmethod
    def _denied(qualified: str) -> bool:
        if qualified in ALLOWED_QUALIFIED:
            return False
        return any(qualified == p or qualified.startswith(p + ".") for p in DENIED_QUALIFIED_PREFIXES)

    # --- names and attributes -------------------------------------------------------------------------------
    def _const_getattr(self, node: ast.AST) -> bool:
        """`getattr(obj, "name")` (public constant name): read exactly like `obj.name`."""
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                and "getattr" not in self.aliases and len(node.args) in (2, 3) and not node.keywords
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str))

    def _qualified(self, node: ast.AST) -> str | None:
        """`nn.functional.relu` -> `torch.nn.functional.relu` when the chain is rooted at an imported name (or a name
        assigned from one); `getattr(x, "name")` counts as `x.name`."""
        parts: list[str] = []
        while True:
            if isinstance(node, ast.Attribute):
                parts.append(node.attr)
                node = node.value
            elif self._const_getattr(node):
                parts.append(node.args[1].value)
                node = node.args[0]
            else:
                break
        if isinstance(node, ast.Name) and node.id in self.aliases:
            return ".".join([self.aliases[node.id], *reversed(parts)])
        return None

    def visit_Name(self, node: ast.Name) -> None:
        if node.id.startswith("__") and node.id.endswith("__") and node.id not in ALLOWED_DUNDERS:
            self.flag("no-dunder", node, f"use of {node.id} is not allowed")
        elif node.id in BANNED_CALLS | {"getattr"} and node.id not in self.aliases and \
                node.id not in self.bound and id(node) not in self.direct_calls:
            # `f = exec; f(src)` or `reduce(getattr, ...)`: a banned builtin passed around as a value
            self.flag("no-dynamic-code", node, f"use of {node.id} as a value is not allowed")

    # --- values: what a name of an allowed module *is* ---------------------------------------------------------
    @staticmethod
    def _resolve(qualified: str) -> tuple[object, int]:
        """The object `qualified` names, read statically (module dicts, class attributes without descriptors
        running) from modules already imported here (the evaluation child has torch; nothing is imported for
        the check). Returns (value or _MISSING, how many parts resolved)."""
        parts = qualified.split(".")
        if parts[0] not in ALLOWED_IMPORT_ROOTS or parts[0] not in sys.modules:
            return _MISSING, 0
        obj = sys.modules[parts[0]]
        for i, part in enumerate(parts[1:], start=1):
            if isinstance(obj, types.ModuleType):
                found = vars(obj).get(part, _MISSING)
                if found is _MISSING:  # a submodule imported but not yet bound, or a lazy attribute
                    found = sys.modules.get(f"{obj.__name__}.{part}", _MISSING)
            elif isinstance(obj, type):
                try:
                    found = inspect.getattr_static(obj, part)
                except AttributeError:
                    found = _MISSING
            else:
                found = _MISSING
            if found is _MISSING:
                return _MISSING, i
            obj = found
        return obj, len(parts)

    def _value_problem(self, qualified: str, value: object) -> str | None:
        if isinstance(value, types.ModuleType):
            name = value.__name__
            if not (self._import_allowed(name) or name in ALLOWED_QUALIFIED):
                return f"{qualified} is the module {name}, outside the import allow-list"
            return None
        name = getattr(value, "__name__", None)
        if isinstance(name, str) and getattr(builtins, name, _MISSING) is value and not isinstance(value, str):
            if name in SAFE_BUILTINS or (isinstance(value, type) and issubclass(value, BaseException)):
                return None
            return f"{qualified} is the builtin {name}(), not allowed"
        if not callable(value) or qualified in ALLOWED_QUALIFIED:
            return None
        module = getattr(value, "__module__", None)
        if not isinstance(module, str):
            return None
        if module.split(".")[0] not in ALLOWED_IMPORT_ROOTS | _VALUE_MODULE_ROOTS:
            return f"{qualified} is {module}.{name or '?'}, from a module outside the import allow-list"
        defined = f"{module}.{name}"
        if any(defined.startswith(p + ".") for p in _VALUE_DENIED_MODULES) and defined not in _VALUE_ALLOWED:
            return f"{qualified} is {defined}, which is not allowed"
        return None

    def _check_value(self, node: ast.AST, qualified: str) -> bool:
        """Refuse what `qualified` resolves to when it is a module, builtin or function outside the allow-lists;
        where it cannot be resolved, refuse the names of the stdlib modules libraries hand out."""
        value, resolved = self._resolve(qualified)
        problem = self._value_problem(qualified, value) if value is not _MISSING else None
        if problem is None and value is _MISSING:
            parts = qualified.split(".")
            bad = next((p for p in parts[max(resolved, 1):] if p in FORBIDDEN_MODULE_NAMES), None)
            if bad and parts[0] in ALLOWED_IMPORT_ROOTS:
                problem = f"{qualified} names the module {bad!r} (outside the import allow-list)"
        if problem:
            self.flag("resolved-values", node, problem)
        return problem is not None

    def _check_qualified(self, node: ast.AST, qualified: str, store: bool) -> None:
        parts = qualified.split(".")
        if any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts):
            self.flag("no-private-torch", node, f"private attribute {qualified} is not allowed")
        elif self._denied(qualified):
            self.flag("imports", node, f"{qualified} is not allowed")
        elif parts[0] == self.platform_module.split(".")[0] and not qualified.startswith(self.platform_module):
            self.flag("imports", node, f"{qualified} is not allowed")
        elif qualified.startswith(self.platform_module + ".") and parts[len(self.platform_module.split("."))] \
                not in self.candidate_api:
            self.flag("imports", node, f"{qualified} is not part of the candidate API")
        else:
            self._check_value(node, qualified)
        if store:
            self.flag("no-patching", node, f"assigning to {qualified} patches a module")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("__") and node.attr.endswith("__") and node.attr not in ALLOWED_DUNDERS:
            self.flag("no-dunder", node, f"attribute {node.attr} is not allowed")
        if node.attr in FILE_WRITE_ATTRS:
            self.flag("no-file-writes", node, f"{node.attr} writes files")
        qualified = self._qualified(node)
        if qualified:
            self._check_qualified(node, qualified, isinstance(node.ctx, (ast.Store, ast.Del)))
        elif node.attr.startswith("_") and not (node.attr.startswith("__") and node.attr.endswith("__")) and \
                not self._own_private(node):
            # on any object: `torch.sys.modules["torch"]._C` is rooted at no import the chain check follows
            self.flag("no-private-torch", node, f"private attribute .{node.attr} is not allowed")
        self.generic_visit(node)

    def _own_private(self, node: ast.Attribute) -> bool:
        """`self._cache` on the candidate's own instance or class (not an alias of an import), nn.Module's own
        internals (`self._forward_hooks`, `self._apply`) excepted."""
        root = node.value
        return isinstance(root, ast.Name) and root.id in self.own and root.id not in self.aliases and \
            not _MODULE_INTERNALS.match(node.attr)

    def _check_store_target(self, target: ast.AST) -> None:
        # Attributes of imported modules/classes, directly or through a name assigned from one
        # (`t = torch.cuda.Event; t.elapsed_time = f`); other aliases are caught at run time.
        if isinstance(target, ast.Attribute):
            qualified = self._qualified(target)
            if qualified:
                self.flag("no-patching", target, f"assigning to {qualified} patches a module")

    def _bind(self, target: ast.AST, value: ast.AST | None) -> None:
        """Follow plain-name aliases of imported objects (`E = torch.cuda.Event`); rebinding a name drops it."""
        if isinstance(target, ast.Name):
            qualified = self._qualified(value) if value is not None else None
            if qualified:
                self.aliases[target.id] = qualified
            else:
                self.aliases.pop(target.id, None)
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = value.elts if isinstance(value, (ast.Tuple, ast.List)) and \
                len(value.elts) == len(target.elts) else [None] * len(target.elts)
            for t, v in zip(target.elts, values):
                self._bind(t, v)

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            self._check_store_target(t)
        self.generic_visit(node)
        for t in node.targets:
            self._bind(t, node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_store_target(node.target)
        self.generic_visit(node)
        self._bind(node.target, node.value)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.generic_visit(node)
        self._bind(node.target, node.value)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_store_target(node.target)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        self.direct_calls.add(id(func))
        if isinstance(func, ast.Name) and func.id in BANNED_CALLS and func.id not in self.aliases:
            self.flag("no-dynamic-code", node, f"call of {func.id}() is not allowed")
        if isinstance(func, ast.Name) and func.id == "getattr" and func.id not in self.aliases:
            name = node.args[1] if len(node.args) > 1 else None
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str) and not name.value.startswith("_")):
                self.flag("no-dynamic-code", node, "getattr() is allowed only with a public constant name")
            elif name.value in FILE_WRITE_ATTRS:
                self.flag("no-file-writes", node, f"{name.value} writes files")
            elif self._const_getattr(node):
                qualified = self._qualified(node)
                if qualified:
                    self._check_qualified(node, qualified, store=False)
        qualified = self._qualified(func)
        if qualified and qualified.split(".")[-1] in GLOBAL_STATE_CALLS and qualified.startswith("torch"):
            self.flag("no-global-state", node, f"{qualified}() changes torch's global state")
        self.generic_visit(node)


def _string_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """String constants that may be kernel source: docstrings are documentation (never compiled, and they often
    name the very calls the rules forbid); the compile helpers re-check whatever text is actually compiled."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and \
                    isinstance(first.value.value, str):
                docstrings.add(id(first.value))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            out.append((node.lineno, node.value))
    return out


_C_STRING = r'"(?:[^"\\\n]|\\.)*"'
_ADJACENT_STRINGS = re.compile(rf"{_C_STRING}(?:\s*{_C_STRING})+")


def _join_strings(m: re.Match) -> str:
    text = m.group(0)
    parts = re.findall(_C_STRING, text)
    return '"' + "".join(p[1:-1] for p in parts) + '"' + "\n" * text.count("\n")


def _normalize_c(src: str) -> str:
    """What the preprocessor sees, as far as the scan needs it: digraph/trigraph `#` (`%:include`, `??=include`)
    and adjacent string literals joined (`"/pr" "oc"` is "/proc"; the newlines between them kept after it, so
    later lines keep their numbers)."""
    return _ADJACENT_STRINGS.sub(_join_strings, src.replace("%:", "#").replace("??=", "#"))


def _strip_c_comments(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)


def check_native_source(text: str, first_line: int = 1, allow_inline_asm: bool = False) -> list[Violation]:
    """Scan kernel source text; `first_line` is where the literal starts in the candidate file."""
    found = []
    patterns = list(_NATIVE_PATTERNS) + ([] if allow_inline_asm else [_HOST_ASM])
    body = _normalize_c(_strip_c_comments(text))
    for i, line in enumerate(body.splitlines()):
        for pattern, what in patterns:
            m = re.search(pattern, line)
            if m:
                found.append(Violation("native-no-os", first_line + i,
                                       f"kernel source {what}: {m.group(0).strip()!r}"))
    return found


def check_candidate(source: str, platform_module: str, candidate_api: tuple[str, ...],
                    allow_inline_asm: bool = False) -> list[Violation]:
    """All static violations of a candidate; an empty list means it may run. Syntax errors raise SyntaxError."""
    tree = parse_ast(source)
    checker = _Checker(platform_module, candidate_api)
    checker.visit(tree)
    violations = checker.violations
    for line, text in _string_literals(tree):
        if len(text) > 40 and ("(" in text or "{" in text):  # only literals that look like code
            violations.extend(check_native_source(text, line, allow_inline_asm))
    return sorted(set(violations), key=lambda v: (v.line or 0, v.rule, v.message))


def _md_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("_", "\\_").replace("*", "\\*")


def rules_markdown() -> str:
    """The rules as Markdown (underscores escaped: `__import__` must not render as bold)."""
    return "\n".join(f"- **{r.id}** — {_md_escape(r.summary)} _Why: {_md_escape(r.why)}_" for r in RULES)
