"""Vetting of native code at the compile helpers, where the real text, flags and binary are in hand.

The static rules (`kforge_core.eval.rules`) scan string literals of the candidate file; a candidate can assemble its
source at run time, spell a call through the preprocessor, or smuggle options into the compiler. So every compile
helper (ctypes `compile_cpp`, `load_inline`, ...) calls, in the evaluation child:

- `vet_source` on the exact text it will compile (the same native rules as the static check);
- `vet_flags` on extra compiler/linker flags and include paths: an allow-list, since flags such as `-wrapper`,
  `-fplugin=`, `-B`, `-specs=` or `-Wl,...` run programs or load code inside our *trusted* build;
- `vet_includes` on the compiler's own list of the non-system files it read (`-MMD`): only the kernel's own;
- `vet_objects` on the candidate's own object files (not the linked library, where a toolchain's statically
  linked runtime shows up): every symbol they import must be on the allow-list of the build kind (libm, OpenMP,
  mem*/str*, malloc, new/delete, the C++ exception and string runtime; for load_inline also the torch runtime
  minus dispatcher/library registration and global setters, and the Python C API pybind11's bindings use; for
  CUDA the runtime API), and their code may hold no system-call instructions. This sees through macros and token
  pasting, and needs no list of the ways glibc spells an OS service;
- `sanitize_compiler_log` on a failed build's output: diagnostics located in a file other than the kernel or a
  trusted header directory are reduced to their location, so no included file's text is echoed.

A violation raises `guards.GuardViolation` (verdict `rejected`) and is recorded even if the candidate catches it.
What remains possible, and is documented as a limitation: native code that reaches OS services without importing
them (raw syscalls via obfuscated inline assembly, addresses computed from an allowed libc function).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

from . import guards

# Part of every build's cache key: builds are vetted when made, so a change of the rules must not reuse old ones.
VETTING_VERSION = "objects-allowlist-2"

# --- flags --------------------------------------------------------------------------------------------------------
_FLAG_OK = re.compile(
    r"^-(O[0-3sgz]?|Ofast|g[0-3]?|w|W[\w=+-]*|pedantic|std=[\w+]+|D[A-Za-z_]\w*(=[\w.+-]*)?|U[A-Za-z_]\w*|"
    r"m[\w=.,+-]+|f[\w=.,+-]+|pthread|shared|fPIC|fpic|"
    r"l(gomp|omp|iomp5|m|pthread|stdc\+\+|cublas|cublasLt|cudart|cuda|curand|cufft|cusparse|cusolver|nvrtc)|"
    r"L[\w/.+-]+|"
    # CUDA (nvcc) options
    r"X(compiler|ptxas)(=[\w=,.+-]+)?|-?use_fast_math|-?expt-relaxed-constexpr|-?expt-extended-lambda|"
    r"-?extended-lambda|-?lineinfo|-?generate-line-info|-?gencode(=[\w=,.]+)?|-?gpu-architecture(=[\w,.]+)?|"
    r"arch(=[\w,.]+)?|code(=[\w,.]+)?|-?ptxas-options(=[\w,=.-]+)?|-?default-stream(=\w+)?|"
    r"-?maxrregcount(=\d+)?|-?resource-usage|-?threads(=\d+)?)$")
# A value following an option ("-gencode", "arch=compute_90,code=sm_90"): no paths, spaces or quotes.
_VALUE_OK = re.compile(r"^[\w=,.:+-]*$")
# Options that match the shapes above but run or load code, read arbitrary files, or write outside the build.
_FLAG_BAD = re.compile(
    r"^-(W[lpa],|Xlinker|Xassembler|Xpreprocessor|fplugin|fprofile|fauto-profile|fcreate-profile|fdump|"
    r"fstack-usage|fcallgraph-info|fdebug-prefix|ffile-prefix|fmacro-prefix|frecord|specs|wrapper|B|"
    r"-?include|-?imacros|iquote|isystem|idirafter|I|save-temps|M|o\b|x\b|fsanitize-blacklist|"
    r"fsanitize-ignorelist|fsanitize-coverage-allowlist|fsanitize-coverage-denylist)")


def vet_flags(helper: str, **flag_lists) -> None:
    """`flag_lists`: name -> list of strings (extra_cflags=[...], extra_ldflags=[...], extra_include_paths=[...])."""
    for kind, flags in flag_lists.items():
        if not flags:
            continue
        if isinstance(flags, str):
            flags = [flags]
        if kind == "extra_include_paths":
            guards._violate(f"{helper}: {kind}={list(flags)!r} is not allowed (kernels include system headers by "
                            f"name) [rule native-no-os]")
        for flag in flags:
            text = str(flag)
            parts = text.split("=", 1)[1].split(",") if text.startswith("-Xcompiler=") else [text]
            for part in parts:
                if not part.startswith("-") and _VALUE_OK.match(part):
                    continue
                if _FLAG_BAD.match(part) or not _FLAG_OK.match(part):
                    guards._violate(f"{helper}: compiler flag {part!r} in {kind} is not allowed (flags are "
                                    f"allow-listed: optimisation, -m/-f code generation, -D/-U, -std, warnings, "
                                    f"OpenMP) [rule native-no-os]")


# --- source -------------------------------------------------------------------------------------------------------
def vet_source(helper: str, *sources: str) -> None:
    """The native rules on the exact text about to be compiled (line numbers are the kernel's own)."""
    from ..native_scan import check_native_source

    for text in sources:
        if not text:
            continue
        found = check_native_source(text, first_line=1)
        if found:
            v = found[0]
            guards._violate(f"{helper}: kernel line {v.line}: {v.message} [rule native-no-os]")


def vet_names(helper: str, names) -> None:
    """Function names a binding generator pastes into C++ (load_inline's `functions`) must be plain identifiers.
    Binding a libc function by name (`functions=["system"]`) imports it into the object: `vet_objects` refuses."""
    if names is None:
        return
    items = list(names.items()) if isinstance(names, dict) else [(n, "") for n in
                                                                  ([names] if isinstance(names, str) else names)]
    for name, doc in items:
        if not isinstance(name, str) or not name.isidentifier():
            guards._violate(f"{helper}: function name {name!r} is not a C++ identifier [rule native-no-os]")
        if doc and re.search(r'["\\\n]', str(doc)):
            guards._violate(f"{helper}: the docstring of {name!r} contains quotes, backslashes or newlines "
                            f"(it is pasted into C++) [rule native-no-os]")


# --- binary -------------------------------------------------------------------------------------------------------
# What a kernel's own object files may import: an allow-list per build kind. A deny-list of OS services misses
# glibc's fortified and `at`/vector variants (__open_2, __read_chk, pwritev, linkat, mkstemp, dprintf), _Fork,
# setsid, sigaction, setitimer, timer_create, mallopt, ...; an allow-list does not.
_LIBM_BASE = """acos acosh asin asinh atan atan2 atanh cbrt ceil copysign cos cosh erf erfc exp exp10 exp2 expm1 fabs
fdim floor fma fmax fmin fmod frexp hypot ilogb ldexp lgamma llrint llround log log10 log1p log2 logb lrint lround
modf nan nearbyint nextafter nexttoward pow remainder remquo rint round scalbln scalbn sin sincos sinh sqrt tan tanh
tgamma trunc j0 j1 jn y0 y1 yn gamma significand""".split()
_LIBM = frozenset(n + suffix for n in _LIBM_BASE for suffix in ("", "f", "l", "f128", "f32", "f64", "f32x")) | \
    frozenset(f"__{n}{suffix}_finite" for n in _LIBM_BASE for suffix in ("", "f", "l")) | \
    frozenset({"__isnan", "__isnanf", "__isnanl", "__isinf", "__isinff", "__isinfl", "__finite", "__finitef",
               "__finitel", "__fpclassify", "__fpclassifyf", "__signbit", "__signbitf", "__errno_location",
               "fegetround", "fetestexcept", "feclearexcept", "signgam", "_ZGVbN4v_expf", "_ZGVdN8v_expf"})
_LIBC_OK = frozenset("""
memcpy memmove memset memcmp memchr memrchr strlen strnlen strcmp strncmp strchr strrchr strstr strcpy strncpy
strcat strncat strspn strcspn strpbrk strtol strtoll strtoul strtoull strtod strtof atoi atol atof
__memcpy_chk __memmove_chk __memset_chk __strcpy_chk __strncpy_chk __strcat_chk __strncat_chk __stpcpy_chk
__stack_chk_fail __stack_chk_guard __assert_fail abort
malloc calloc realloc free aligned_alloc posix_memalign memalign
qsort bsearch abs labs llabs div ldiv rand srand
printf puts putchar fputs fputc fprintf fflush fwrite snprintf sprintf vsnprintf vsprintf stdout stderr
__printf_chk __fprintf_chk __sprintf_chk __snprintf_chk __vsnprintf_chk __vsprintf_chk
__cxa_allocate_exception __cxa_free_exception __cxa_throw __cxa_begin_catch __cxa_end_catch __cxa_rethrow
__cxa_guard_acquire __cxa_guard_release __cxa_guard_abort __cxa_atexit __cxa_finalize __cxa_pure_virtual
__cxa_call_unexpected __cxa_get_exception_ptr __cxa_bad_cast __cxa_bad_typeid __cxa_deleted_virtual
__gxx_personality_v0 __dso_handle __tls_get_addr _GLOBAL_OFFSET_TABLE_ __cpu_model __cpu_indicator_init
__cpu_features2 _ITM_deregisterTMCloneTable _ITM_registerTMCloneTable __gmon_start__
__cxa_demangle __dynamic_cast __libc_single_threaded __cxa_thread_atexit __cxa_thread_atexit_impl strdup strndup
pthread_mutex_lock pthread_mutex_unlock pthread_mutex_trylock pthread_once pthread_key_create pthread_key_delete
pthread_getspecific pthread_setspecific pthread_self pthread_equal
""".split()) | _LIBM
_ALLOWED_PATTERNS = {
    "host": re.compile(
        r"^(GOMP_\w+|omp_\w+|__kmpc_\w+|_Unwind_\w+"
        # compiler runtime (libgcc): complex arithmetic, half/bf16 conversions, bit operations, wide integers
        r"|__(mul|div)[sdxt]c3|__(extend|trunc)\w+[hsdtx]f2|__(fix|float)(uns)?\w+|"
        r"__(popcount|clz|ctz|ffs|bswap|parity)\w+|__(ashl|ashr|lshr|div|mod|udiv|umod|mul|neg)[dt]i3"
        # C++ runtime: new/delete, RTTI/vtables, exceptions, strings, containers, ostream (never files)
        r"|_Z(nw|na|dl|da)\w+|_ZT[IVS]\w+|_ZSt\d+__throw_\w+|_ZSt9terminatev|_ZSt17current_exceptionv"
        r"|_ZSt17rethrow_exception\w+|_ZNSt15__exception_ptr\w+|_ZSt11_Hash_bytes\w+"
        r"|_ZN?K?St\d+(runtime_error|logic_error|invalid_argument|out_of_range|length_error|domain_error|"
        r"overflow_error|underflow_error|range_error|exception|bad_alloc|bad_cast|bad_function_call|"
        r"bad_array_new_length|nested_exception)\w*"
        r"|_ZN?K?[RO]?St7__cxx1112basic_string\w+|_ZN?K?[RO]?St7__cxx11(19basic_ostringstream|15basic_stringbuf)\w+"
        r"|_ZN?K?St8__detail\d+_(Prime_rehash_policy|List_node_base)\w+|_ZSt\d+_Rb_tree_\w+"
        r"|_ZNSo\w+|_ZNKSo\w+|_ZSt4(cout|cerr|endl)\w*|_ZStlsI\w+|_ZSt16__ostream_insert\w+|_ZNSt8ios_base4Init\w+"
        # GCC 13's libstdc++ initialises the standard streams through this one function (formerly ios_base::Init)
        r"|_ZSt21ios_base_library_initv"
        r"|_ZNSt6chrono3_V212steady_clock3nowEv"
        r")$"),
}
# load_inline: the torch runtime (at::, c10::, torch::, caffe2::) and the Python C API pybind11's bindings use,
# minus what registers or replaces global behaviour: dispatcher and library registration (a TORCH_LIBRARY_IMPL
# replaced ATen's CPU abs, the comparison's own op), allocators, global context setters, thread counts, seeds.
_TORCH_OK = re.compile(r"^_ZN?K?(2at|3c10|5torch|6caffe2|8pybind11)\w+$")
_TORCH_DENIED = re.compile(
    r"(5torch7Library|5torch11CppFunction|5torch6detail\d+TorchLibraryInit|5torch3jit|5torch6class_|"
    r"3c1010Dispatcher\d+(register|deregister)|3c1017RegisterOperators|3c104impl13OperatorEntry|"
    r"3c10\d+Set[A-Z]\w*Allocator|3c10\d+SetAllocator|CachingAllocator\w*(snapshot|recordHistory|"
    r"attachOutOfMemoryObserver|setMemoryFraction|attachAllocatorTraceTracker)|"
    r"2at7Context\d+set|2at\d+set_num(_interop)?_threads|set_current_seed|set_offset|"
    r"3c104impl\d+tls_set|PythonDispatcherTLS|TorchDispatchModeTLS\d+(push|pop|set)|"
    r"3c1019SetStorageImplCreate|getGlobalPyInterpreter\w*(dispatch))")
# The Python C API a pybind11 binding module imports (PYBIND11_MODULE and its casters), measured on a trivial
# load_inline build; nothing that imports modules, runs code or reads the interpreter's globals.
_PYBIND_OK = re.compile(
    r"^(_?Py(BaseObject|ByteArray|Bytes|CFunction|CMethod|Capsule|Dict|Err|Exc|Exception|Float|Frame|GILState|"
    r"InstanceMethod|InterpreterState|List|Long|Bool|Mem|ModuleDef|Module|Number|Object|Property|Slice|"
    r"StaticMethod|ThreadState|Thread_tss|Tuple|Type|Unicode|Weakref|Index|Sequence|Iter|Complex|Method|"
    r"MemoryView|DictProxy)_\w+|PyEval_(AcquireThread|SaveThread|RestoreThread|ReleaseThread|GetBuiltins)"
    r"|Py_(GetVersion|IncRef|DecRef|IsInitialized|Finalize\w*)|_Py_(Dealloc|NoneStruct|TrueStruct|FalseStruct|"
    r"NotImplementedStruct|EllipsisObject|RefTotal|IncRef|DecRef)|_PyObject_\w+|_PyThreadState_\w+|_PyType_\w+|"
    r"PyBool_Type|PyFloat_Type|PyLong_Type)$")
# CUDA host code: the runtime API and the stubs nvcc writes (launch configuration, fat binary registration).
_CUDA_OK = re.compile(r"^(cuda(?!DeviceReset|DeviceSetLimit|Ipc|Profiler|SetDevice|ThreadExit|DeviceSetCacheConfig|"
                      r"StreamCreate|"
                      r"DeviceSetSharedMemConfig|HostRegister)[A-Z]\w*|atexit|__cuda(RegisterFatBinary\w*|"
                      r"RegisterLinkedBinary\w*|"
                      r"UnregisterFatBinary|RegisterFunction|RegisterVar|RegisterManagedVar|PushCallConfiguration|"
                      r"PopCallConfiguration|InitModule|"
                      # CUDA 12.x nvcc stubs launch through these (seen on the H100 image: CUDA 12.8)
                      r"LaunchKernel(_ptsz)?|GetKernel)|__nv_\w+|cublas\w+|curand\w+|__fatbinwrap\w*)$")
_PYTHON_DENIED_PARTS = ("PyRun_", "PyImport_", "Py_CompileString", "PyEval_EvalCode", "PySys_", "PyMarshal_",
                        "PyEval_GetGlobals", "PyEval_GetLocals", "PyEval_GetFrame")


def symbol_allowed(name: str, kind: str) -> bool:
    """`kind`: "cpp" (compile_cpp: a plain C++ library, no Python at all), "load_inline" (a torch extension),
    "load_inline_cuda" (the same with CUDA host code)."""
    if name in _LIBC_OK or _ALLOWED_PATTERNS["host"].match(name):
        return True
    if kind == "cpp":
        return False
    if any(part in name for part in _PYTHON_DENIED_PARTS):
        return False
    if _TORCH_OK.match(name):
        return not _TORCH_DENIED.search(name)
    if _PYBIND_OK.match(name):
        return True
    return kind == "load_inline_cuda" and bool(_CUDA_OK.match(name))


def vet_objects(helper: str, objects: list[Path], kind: str) -> None:
    """The candidate's own object files (not the linked library: a toolchain may link its runtime statically,
    which would import ioctl/open/syscall for every honest build) against the allow-list of `kind`, and their
    code for system-call instructions. A symbol one of the build's objects defines is the candidate's own code
    (the host wrapper in main.cpp calling the launcher in cuda.cu), not an import."""
    own = set()
    for obj in objects:
        own.update(_symbols(obj, "--defined-only") or ())
    for obj in objects:
        symbols = imported_symbols(obj, dynamic=False)
        if symbols is None:
            continue  # without binutils the source checks still ran
        bad = sorted({s for s in symbols if s not in own and not symbol_allowed(s, kind)})
        if bad:
            guards._violate(f"{helper}: the compiled kernel imports {', '.join(bad[:8])}"
                            f"{f' (+{len(bad) - 8} more)' if len(bad) > 8 else ''}, outside what kernels need "
                            f"(math, memory, OpenMP, C++ runtime{', torch' if kind != 'cpp' else ''}) "
                            f"[rule native-no-os]")
        calls = system_call_instructions(obj)
        if calls:
            guards._violate(f"{helper}: the compiled kernel makes system calls directly ({calls[0]}; "
                            f"{len(calls)} in all) [rule native-no-os]")


# --- includes and compiler output ---------------------------------------------------------------------------------
def depfile_entries(text: str) -> list[str]:
    """Prerequisites of a make-style dependency file (`-MMD -MF x.d`: non-system headers only)."""
    body = text.replace("\\\n", " ")
    entries = []
    for rule in body.splitlines():
        if ":" not in rule:
            continue
        rest = rule.split(":", 1)[1]
        entries += [e.replace("\\ ", " ") for e in re.split(r"(?<!\\)\s+", rest.strip()) if e]
    return entries


def vet_includes(helper: str, entries: list[str], own: set[Path], base: Path) -> None:
    """Kernels include system headers by name; the compiler's own list of non-system files it read (-MMD) must
    hold nothing but the kernel's own source files, however the #include was spelled (digraphs, macros).
    Relative entries are relative to `base`, where the compiler ran."""
    own = {p.resolve() for p in own}
    others = [e for e in entries if (base / e).resolve() not in own]
    if others:
        guards._violate(f"{helper}: the kernel includes {len(others)} file(s) that are not system headers "
                        f"(kernels include system headers by name) [rule native-no-os]")


_DIAG_LINE = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+)(:\d+)?: (?P<kind>fatal error|error|warning|note)")
_SOURCE_QUOTE = re.compile(r"^\s*(\d+\s*\||\|)")


@functools.lru_cache(maxsize=None)
def system_include_dirs(cxx: str) -> tuple[str, ...]:
    """The directories the compiler searches for <...> headers (`-E -v`), resolved."""
    with guards.trusted():
        proc = subprocess.run([cxx, "-xc++", "-E", "-v", "-"], input="", capture_output=True, text=True,
                              timeout=60)
    dirs, inside = [], False
    for line in proc.stderr.splitlines():
        if line.startswith("#include <...> search starts here"):
            inside = True
        elif line.startswith("End of search list"):
            break
        elif inside and line.startswith(" "):
            dirs.append(os.path.realpath(line.strip()))
    return tuple(dirs)


def sanitize_compiler_log(log: str, own_names: tuple[str, ...], trusted_dirs: tuple[str, ...]) -> str:
    """Compiler output with every diagnostic located in a file other than the kernel's own or a trusted header
    directory reduced to its location: an included file's text (a message naming its tokens, the quoted source
    line) never reaches the log the agent reads."""
    out, hidden = [], False
    for raw in log.splitlines():
        m = _DIAG_LINE.match(raw.strip())
        if m:
            path = m.group("file")
            real = os.path.realpath(path)
            ok = Path(path).name in own_names or any(real.startswith(d.rstrip("/") + "/") for d in trusted_dirs)
            hidden = not ok
            if hidden:
                out.append(f"{Path(path).name}:{m.group('line')}: {m.group('kind')} in a file other than the "
                           f"kernel (text not shown)")
                continue
        elif hidden and (_SOURCE_QUOTE.match(raw) or raw.startswith(" ")):
            continue
        elif raw.startswith(("In file included from", "                 from")):
            hidden = False
        out.append(raw)
    return "\n".join(out)


def imported_symbols(path: Path, dynamic: bool = True) -> list[str] | None:
    """Undefined symbols of a shared library (`dynamic`: what it imports) or of an object file, or None when `nm`
    is unavailable."""
    return _symbols(path, *(["-D"] if dynamic else []), "--undefined-only")


def _symbols(path: Path, *nm_flags: str) -> list[str] | None:
    nm = shutil.which("nm")
    if nm is None:
        return None
    with guards.trusted():
        proc = subprocess.run([nm, *nm_flags, str(path)], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        return None
    names = []
    for line in proc.stdout.splitlines():
        parts = line.split()
        if parts:
            names.append(parts[-1].split("@")[0])
    return names


_SYSCALL_MNEMONICS = {"syscall", "sysenter", "svc"}


def system_call_instructions(path: Path) -> list[str] | None:
    """System-call instructions in the library's own code (x86-64 syscall/sysenter/int $0x80, AArch64 svc): a
    kernel reaches the OS through imported libc functions, never directly, so any of these means hand-written
    system calls (inline assembly, however its source was spelled). None when `objdump` is unavailable."""
    objdump = shutil.which("objdump")
    if objdump is None:
        return None
    with guards.trusted():
        proc = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True,
                              timeout=120)
    if proc.returncode != 0:
        return None
    found = []
    for line in proc.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) < 2 or not parts[0].strip().endswith(":"):
            continue
        insn = parts[1].split()
        if insn and (insn[0] in _SYSCALL_MNEMONICS or (insn[0] == "int" and "0x80" in parts[1])):
            found.append(f"{parts[0].strip()} {parts[1].strip()}")
    return found
