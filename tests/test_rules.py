"""Static rules (kforge_core.eval.rules.check_candidate) on many snippets: what honest candidates need stays allowed,
what no honest kernel needs is rejected with the rule that stands for it."""

from __future__ import annotations

import textwrap

import pytest
import torch  # noqa: F401 - the rules resolve values from imported modules, as in the evaluation child

from candidates.evalkit import HONEST
from kforge_core.platform import get_platform
from kforge_core.eval.rules import RULES, check_candidate, check_native_source, rules_markdown

CPU = get_platform("cpu")


def check(src: str):
    return check_candidate(textwrap.dedent(src), CPU.module_name, CPU.candidate_api)


def rules_of(src: str) -> set[str]:
    return {v.rule for v in check(src)}


# ------------------------------------------------------------------------------------------------------ allowed

def test_examples_and_honest_fixtures_are_allowed():
    paths = [CPU.example().candidate, *sorted(HONEST.glob("*.py"))]
    for path in paths:
        assert check_candidate(path.read_text(), CPU.module_name, CPU.candidate_api) == [], path


ALLOWED = {
    "load_inline import": """
        import torch
        from torch.utils.cpp_extension import load_inline
        mod = load_inline(name="m", cpp_sources="torch::Tensor f(torch::Tensor x) { return x; }", functions=["f"])
    """,
    "cpp_extension module then load_inline": """
        import torch.utils.cpp_extension
        mod = torch.utils.cpp_extension.load_inline(name="m", cpp_sources="", functions=["f"])
    """,
    "functional alias": """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        class ModelNew(nn.Module):
            def forward(self, x):
                return F.relu(x)
    """,
    "super init and private attributes on self": """
        import torch.nn as nn
        class ModelNew(nn.Module):
            def __init__(self, n):
                super().__init__()
                self._cache = {}
                self._n = n
            def forward(self, x):
                self._cache["k"] = x.shape
                return x
    """,
    "textwrap.dedent source": """
        import textwrap
        from platforms.cpu import compile_cpp
        SRC = textwrap.dedent('''
            extern "C" void f(const float* x, float* y, long n) { for (long i = 0; i < n; ++i) y[i] = x[i]; }
        ''')
        lib = compile_cpp(SRC)
    """,
    "math, typing, functools, dataclasses, numpy": """
        import math
        from typing import Optional
        import functools
        from dataclasses import dataclass
        import numpy as np
        x = math.sqrt(2.0) + np.float32(1.0)
    """,
    "getattr with a public constant name": """
        import torch
        relu = getattr(torch, "relu")
    """,
    "__name__ and __init__": """
        import torch.nn as nn
        class ModelNew(nn.Module):
            def __init__(self):
                nn.Module.__init__(self)
                self.label = type(self).__name__
    """,
    "local torch.Generator seeding": """
        import torch
        g = torch.Generator().manual_seed(0)
        w = torch.randn(4, generator=g)
    """,
    "torch.autocast and no_grad inside forward": """
        import torch
        def f(x):
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
                return x @ x
    """,
    "a forward argument named input": """
        import torch.nn as nn
        import torch.nn.functional as F
        class ModelNew(nn.Module):
            def forward(self, input, compile=False):
                vars_ = input
                return F.relu(input) if not compile else vars_
    """,
    "tensor method chains": """
        import torch
        def f(x):
            return x.contiguous().view(-1).float().data_ptr()
    """,
    "assignment to attributes of own objects": """
        import torch
        class Box:
            pass
        b = Box()
        b.value = torch.zeros(1)
    """,
    "native source with OS words inside comments": '''
        from platforms.cpu import compile_cpp
        SRC = r"""
        // do not call system() or getenv() here; /proc is off limits
        /* fopen( is also banned, std::thread too */
        extern "C" void f(const float* x, float* y, long n) { for (long i = 0; i < n; ++i) y[i] = x[i]; }
        """
        lib = compile_cpp(SRC)
    ''',
    "native source with openmp pragmas and an include of a system header": '''
        from platforms.cpu import compile_cpp
        SRC = r"""
        #include <omp.h>
        #include "math.h"
        extern "C" void f(const float* x, float* y, long n) {
            #pragma omp parallel for
            for (long i = 0; i < n; ++i) y[i] = x[i] * omp_get_num_threads();
        }
        """
        lib = compile_cpp(SRC)
    ''',
    "docstrings naming forbidden calls": '''
        """This kernel never calls system() or fopen(); it reads no /proc files and starts no std::thread."""
        import torch
        def f(x):
            """Unlike open(...) or getenv(...), nothing here touches the OS."""
            return x
    ''',
    "re-exported stdlib helpers of allowed modules": """
        import torch
        import functools, itertools, operator, typing, collections, dataclasses, warnings
        import numpy as np
        a = (torch.math.sqrt, torch.functools.reduce, functools.partial, itertools.chain, operator.add,
             typing.Optional, collections.OrderedDict, dataclasses.field, warnings.warn, np.float32, np.linalg.norm)
        b = (torch.nn.Module, torch.cuda.Event, torch.utils.cpp_extension.load_inline, torch.Tensor.add)
        torch.cuda.empty_cache
    """,
    "private attributes on the candidate's own class and ctx": """
        import torch
        class Fn(torch.autograd.Function):
            _scale = 2.0
            @staticmethod
            def forward(ctx, x):
                ctx._n = x.numel()
                return x * Fn._scale
    """,
    "identifiers that merely contain banned words": '''
        from platforms.cpu import compile_cpp
        SRC = r"""
        extern "C" void filesystem_free(const float* reopen_x, float* system_out, long n) {
            for (long i = 0; i < n; ++i) system_out[i] = reopen_x[i];
        }
        """
        lib = compile_cpp(SRC)
    ''',
}


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_allowed(name):
    assert check(ALLOWED[name]) == [], name


# ---------------------------------------------------------------------------------------------------- forbidden

FORBIDDEN = {
    # imports
    "import os": ("import os", "imports"),
    "import sys": ("import sys", "imports"),
    "from os import system": ("from os import system", "imports"),
    "import ctypes": ("import ctypes", "imports"),
    "import threading": ("import threading", "imports"),
    "import _thread": ("import _thread", "imports"),
    "concurrent.futures": ("from concurrent.futures import ThreadPoolExecutor", "imports"),
    "multiprocessing": ("import multiprocessing", "imports"),
    "torch.multiprocessing": ("import torch.multiprocessing as mp", "imports"),
    "subprocess": ("import subprocess", "imports"),
    "importlib": ("import importlib", "imports"),
    "time": ("import time", "imports"),
    "relative import": ("from . import x", "imports"),
    "star import": ("from torch import *", "imports"),
    "platform internals": ("from platforms.cpu import launches", "imports"),
    "platform package": ("import platforms.cpu", "imports"),
    "harness": ("from kforge_core.eval.harness import launches", "imports"),
    "cpp_extension.load (file based)": ("from torch.utils.cpp_extension import load", "imports"),
    "torch.load (pickle)": ("import torch\nm = torch.load('x.pt', weights_only=False)", "imports"),
    "numpy.load (pickle)": ("import numpy as np\na = np.load('x.npy', allow_pickle=True)", "imports"),
    "numpy.ctypeslib": ("import numpy as np\nlib = np.ctypeslib.load_library('x', '.')", "imports"),
    "torch.overrides": ("import torch\nm = torch.overrides.TorchFunctionMode", "imports"),
    "global module hooks": ("from torch.nn.modules.module import register_module_forward_hook", "imports"),
    "torch.library": ("import torch.library", "imports"),
    "torch.ops": ("import torch\ntorch.ops.load_library('x.so')", "imports"),
    "torch.utils.benchmark timers": ("from torch.utils.benchmark import Timer", "imports"),
    # file writers: a written file is code (or data) the static rules never read
    "ndarray.tofile": ("import numpy as np\nnp.zeros(3).tofile('sympy.py')", "no-file-writes"),
    "tofile on a tensor's array": ("import torch\ntorch.zeros(3).numpy().tofile('sympy.py')", "no-file-writes"),
    "tofile through getattr": ("import numpy as np\ngetattr(np.zeros(3), 'tofile')('x.py')", "no-file-writes"),
    "ndarray.dump (pickle)": ("import numpy as np\nnp.zeros(3).dump('x.pkl')", "no-file-writes"),
    "numpy.save through an alias": ("import numpy as np\nm = [np][0]\nm.save('x.npy', m.zeros(3))",
                                    "no-file-writes"),
    "numpy.savetxt": ("import numpy as np\nnp.savetxt('x.py', np.zeros(3))", "imports"),
    "torch.save": ("import torch\ntorch.save(torch.zeros(3), 'x.pt')", "imports"),
    "shared storage from_file": ("import torch\ns = torch.UntypedStorage.from_file('x.py', True, 64)",
                                 "no-file-writes"),
    "numpy.core.memmap": ("import numpy as np\nm = np.core.memmap('x.py', mode='w+', shape=(8,))",
                          "no-file-writes"),
    "GraphModule.to_folder": ("import torch\ng = torch.fx.symbolic_trace(torch.nn.ReLU())\ng.to_folder('sympy')",
                              "no-file-writes"),
    "torch.onnx.export": ("import torch\ntorch.onnx.export(torch.nn.ReLU(), (torch.zeros(1),), 'x.py')",
                          "imports"),
    "triton cache manager": ("from triton.runtime.cache import get_cache_manager", "imports"),
    # dynamic code and reflection
    "eval": ("eval('1')", "no-dynamic-code"),
    "exec": ("exec('x = 1')", "no-dynamic-code"),
    "compile": ("compile('1', 'f', 'eval')", "no-dynamic-code"),
    "__import__": ("__import__('os')", "no-dunder"),
    "open": ("open('/etc/passwd')", "no-dynamic-code"),
    "setattr": ("import torch\nsetattr(torch, 'relu', abs)", "no-dynamic-code"),
    "getattr with a computed name": ("import torch\nname = 're' + 'lu'\ngetattr(torch, name)", "no-dynamic-code"),
    "getattr with a private name": ("import torch\ngetattr(torch, '_C')", "no-dynamic-code"),
    "getattr reaching a denied module": ("import torch\ngetattr(torch, 'backends').cudnn", "imports"),
    "getattr reaching a global hook": ("import torch\ngetattr(torch.nn.modules.module, "
                                       "'register_module_forward_hook')(print)", "imports"),
    "globals": ("g = globals()", "no-dynamic-code"),
    "exec passed around as a value": ("run = exec\nrun('import os')", "no-dynamic-code"),
    "exec as a default argument": ("def f(run=exec):\n    run('import os')", "no-dynamic-code"),
    "getattr passed to reduce": ("import functools\nf = functools.reduce(getattr, ['__globals__'], print)",
                                 "no-dynamic-code"),
    "operator.attrgetter with a dunder string": ("import operator\ng = operator.attrgetter('__globals__')",
                                                 "imports"),
    "operator.methodcaller": ("from operator import methodcaller\nm = methodcaller('__subclasses__')", "imports"),
    "string.Formatter field access": ("import string\nf = string.Formatter().get_field('0.__class__', [1], {})",
                                      "imports"),
    "typing.get_type_hints evaluates strings": ("import typing\ndef f(x: 'print(1)'): pass\n"
                                                "typing.get_type_hints(f)", "imports"),
    "vars": ("v = vars()", "no-dynamic-code"),
    "__builtins__": ("b = __builtins__", "no-dunder"),
    "__subclasses__": ("s = ().__class__.__bases__[0].__subclasses__()", "no-dunder"),
    "__globals__": ("def f(): pass\ng = f.__globals__", "no-dunder"),
    "__dict__ of torch": ("import torch\nd = torch.__dict__", "no-dunder"),
    # private torch
    "torch._C": ("import torch\nx = torch._C._get_tracing_state()", "no-private-torch"),
    "private attribute off a subscript": ("import torch\nm = [torch][0]._C", "no-private-torch"),
    "private attribute of a call result": ("import torch\ns = torch.cuda.current_stream()._as_parameter_",
                                           "no-private-torch"),
    "nn.Module internals on self": ("import torch.nn as nn\nclass M(nn.Module):\n    def f(self):\n"
                                    "        self._forward_hooks[0] = print", "no-private-torch"),
    "name-mangled attribute": ("x = [1]\ny = x.__secret", "no-private-torch"),
    # values: what an attribute of an allowed module is
    "torch.os": ("import torch\ntorch.os.system('ls')", "resolved-values"),
    "torch.sys.modules then private": ("import torch\nm = torch.sys.modules['torch']._C._state",
                                       "resolved-values"),
    "torch.builtins.open": ("import torch\nf = torch.builtins.open('/etc/passwd')", "resolved-values"),
    "torch.importlib": ("import torch\nm = torch.importlib.import_module('os')", "resolved-values"),
    "torch.ctypes through an alias": ("import torch\nt = torch\nc = t.ctypes.CDLL(None)", "resolved-values"),
    "from torch import os": ("from torch import os", "resolved-values"),
    "dataclasses.sys": ("import dataclasses\nm = dataclasses.sys.modules", "resolved-values"),
    "typing.sys": ("import typing\nm = typing.sys.modules", "resolved-values"),
    "dataclasses.builtins.exec": ("import dataclasses\ndataclasses.builtins.exec('1')", "resolved-values"),
    "getattr(torch, 'importlib')": ("import torch\nm = getattr(torch, 'importlib')", "resolved-values"),
    "torch.cuda.memory_snapshot": ("import torch\ns = torch.cuda.memory_snapshot()", "imports"),
    "memory_snapshot through getattr": ("import torch\ns = getattr(torch.cuda, 'memory_snapshot')()",
                                        "imports"),
    "torch.cuda.memory_stats": ("import torch\ns = torch.cuda.memory_stats()", "imports"),
    "torch._dynamo": ("import torch._dynamo", "imports"),
    # patching
    "patch a torch function": ("import torch\ntorch.allclose = lambda *a, **k: True", "no-patching"),
    "patch through an alias": ("import torch\nT = torch.Tensor\nT.clone = lambda self: self", "no-patching"),
    "patch Event.elapsed_time via alias": ("import torch\nt = torch.cuda.Event\nt.elapsed_time = abs",
                                           "no-patching"),
    "augmented patch": ("import torch\ntorch.nn.Module.dump_patches += 1", "no-patching"),
    "delete a torch attribute": ("import torch\ndel torch.relu", "no-patching"),
    "tf32": ("import torch\ntorch.backends.cuda.matmul.allow_tf32 = True", "no-patching"),
    # global state
    "matmul precision": ("import torch\ntorch.set_float32_matmul_precision('medium')", "no-global-state"),
    "manual_seed": ("import torch\ntorch.manual_seed(0)", "no-global-state"),
    "default generator reseed": ("import torch\ntorch.default_generator.manual_seed(0)", "no-global-state"),
    "set_num_threads": ("import torch\ntorch.set_num_threads(64)", "no-global-state"),
    "torch.compile": ("import torch\nf = torch.compile(lambda x: x)", "no-global-state"),
    "default dtype": ("import torch\ntorch.set_default_dtype(torch.float64)", "no-global-state"),
}


@pytest.mark.parametrize("name", sorted(FORBIDDEN))
def test_forbidden(name):
    src, rule = FORBIDDEN[name]
    found = check(src)
    assert found, f"{name}: no violation"
    assert rule in {v.rule for v in found}, f"{name}: {[str(v) for v in found]}"


NATIVE_FORBIDDEN = {
    "system": ('std::system("ls");', "runs programs"),
    "popen": ('FILE* p = popen("ls", "r");', "runs programs"),
    "fork": ("pid_t p = fork();", "runs programs"),
    "execve": ("execve(a, b, c);", "runs programs"),
    "getenv": ('const char* k = getenv("OPENAI_API_KEY");', "environment"),
    "environ": ("extern char** environ;", "environment"),
    "/proc/self/environ": ('const char* p = "/proc/self/environ";', "/proc"),
    "fopen": ('FILE* f = fopen("x", "r");', "file I/O"),
    "ifstream": ('std::ifstream in("x");', "file I/O"),
    "open": ('int fd = open("x", 0);', "file I/O"),
    "std::thread": ("std::thread t([]{});", "threads"),
    "pthread_create": ("pthread_create(&t, 0, f, 0);", "threads"),
    "std::async": ("auto f = std::async([]{ return 1; });", "threads"),
    "socket": ("int s = socket(2, 1, 0);", "OS services"),
    "dlopen": ('void* h = dlopen("libc.so.6", 2);', "OS services"),
    "syscall": ("syscall(59, a, b, c);", "OS services"),
    "inline asm": ('asm volatile("syscall");', "assembly"),
    "absolute include": ('#include "/etc/passwd"', "include"),
    "parent-directory include": ('#include "../../secrets.h"', "include"),
    "computed include": ("#include MACRO_PATH", "include"),
    "python C API": ('PyRun_SimpleString("import os");', "Python"),
    "pybind import": ('auto os = py::module_::import("os");', "Python"),
    # the GPU timer holds torch's pool streams until its start: a stream of the candidate's own would escape that
    "cudaStreamCreate": ("cudaStream_t s; cudaStreamCreate(&s);", "stream of its own"),
    "cudaStreamCreateWithFlags": ("cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);", "stream of its own"),
    "cuStreamCreate": ("cuStreamCreate(&s, 0);", "stream of its own"),
}


@pytest.mark.parametrize("name", sorted(NATIVE_FORBIDDEN))
def test_native_source_forbidden(name):
    line, what = NATIVE_FORBIDDEN[name]
    text = f"#include <cstdint>\n{line}\nextern \"C\" void f(float* x) {{ x[0] = 1; }}\n"
    found = check_native_source(text, first_line=10)
    assert found, name
    assert all(v.rule == "native-no-os" for v in found)
    assert any(what.lower() in v.message.lower() for v in found), [str(v) for v in found]
    assert found[0].line == 11  # line 2 of a literal that starts on candidate line 10


def test_native_scan_ignores_comments_and_keeps_line_numbers():
    text = "/* system(\n getenv( */\n// fopen(\nint ok = 1;\nstd::system(\"x\");\n"
    found = check_native_source(text, first_line=1)
    assert [v.line for v in found] == [5]


def test_native_source_in_candidate_literal_reports_candidate_line():
    src = 'from platforms.cpu import compile_cpp\nSRC = r"""\n#include <cstdlib>\n' \
          'extern "C" void f(float* x) { std::system("ls"); x[0] = 1; }\n"""\nlib = compile_cpp(SRC)\n'
    found = check_candidate(src, CPU.module_name, CPU.candidate_api)
    assert [(v.rule, v.line) for v in found] == [("native-no-os", 4)]


def test_unresolvable_values_fall_back_to_module_names(monkeypatch):
    """Where a value cannot be resolved (its module not imported in this process), the names of the stdlib modules
    libraries hand out are refused instead."""
    from kforge_core.eval import python_check

    monkeypatch.setattr(python_check._Checker, "_resolve", staticmethod(lambda qualified: (python_check._MISSING, 1)))
    assert "resolved-values" in rules_of("import torch\nm = torch.sys.modules")
    assert "resolved-values" in rules_of("import numpy as np\nm = np.os.system")
    assert rules_of("import torch\nm = torch.nn.functional.relu") == set()


def test_resolved_value_names_what_it_is():
    found = [str(v) for v in check("import torch\nm = torch.os")]
    assert found == ["line 2: torch.os is the module os, outside the import allow-list [rule resolved-values]"]


def test_violations_carry_lines_and_read_well():
    found = check("import torch\n\nimport os\n")
    assert found[0].line == 3 and "line 3" in str(found[0]) and "[rule imports]" in str(found[0])


def test_syntax_error_raises():
    with pytest.raises(SyntaxError):
        check("def f(:\n")


def test_rules_are_documented():
    text = rules_markdown()
    for r in RULES:
        assert r.id in text and r.why
