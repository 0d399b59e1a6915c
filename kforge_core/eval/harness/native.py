"""Vetting of native code at the compile helpers, where the real text, flags and binary are in hand.

The static rules (`kforge_core.eval.rules`) scan string literals of the candidate file; a candidate can assemble its
source at run time, spell a call through the preprocessor, or smuggle options into the compiler. So every compile
helper (ctypes `compile_cpp`, `load_inline`, ...) calls, in the evaluation child:

- `vet_source` on the exact text it will compile (the same native rules as the static check);
- `vet_flags` on extra compiler/linker flags and include paths: an allow-list, since flags such as `-wrapper`,
  `-fplugin=`, `-B`, `-specs=` or `-Wl,...` run programs or load code inside our *trusted* build;
- `vet_binary` on the built shared library: the dynamic symbols it imports must not include OS services
  (system, exec*, fork, getenv, open/fopen, sockets, dlopen, syscall, kill, mprotect, thread creation, file
  streams) or the Python C API entry points that run Python code. This sees through macros and token pasting.

A violation raises `guards.GuardViolation` (verdict `rejected`) and is recorded even if the candidate catches it.
What remains possible, and is documented as a limitation: native code that reaches OS services without importing
them (raw syscalls via obfuscated inline assembly, addresses computed from an allowed libc function).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from . import guards

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
    from ..rules import check_native_source

    for text in sources:
        if not text:
            continue
        found = check_native_source(text, first_line=1)
        if found:
            v = found[0]
            guards._violate(f"{helper}: kernel line {v.line}: {v.message} [rule native-no-os]")


def vet_names(helper: str, names) -> None:
    """Function names a binding generator pastes into C++ (load_inline's `functions`) must be plain identifiers
    and may not bind a libc function by name (`functions=["system"]`)."""
    if names is None:
        return
    items = list(names.items()) if isinstance(names, dict) else [(n, "") for n in
                                                                  ([names] if isinstance(names, str) else names)]
    for name, doc in items:
        if not isinstance(name, str) or not name.isidentifier():
            guards._violate(f"{helper}: function name {name!r} is not a C++ identifier [rule native-no-os]")
        if _symbol_denied(name):
            guards._violate(f"{helper}: binding {name!r} would expose an OS service [rule native-no-os]")
        if doc and re.search(r'["\\\n]', str(doc)):
            guards._violate(f"{helper}: the docstring of {name!r} contains quotes, backslashes or newlines "
                            f"(it is pasted into C++) [rule native-no-os]")


# --- binary -------------------------------------------------------------------------------------------------------
_DENIED_SYMBOLS = frozenset("""
system popen pclose fork vfork clone clone3 execl execlp execle execv execve execvp execvpe fexecve posix_spawn
posix_spawnp getenv secure_getenv environ __environ _environ setenv putenv unsetenv clearenv
open open64 openat openat64 creat creat64 fopen fopen64 freopen freopen64 fdopen opendir fdopendir
unlink unlinkat remove rename renameat renameat2 truncate ftruncate mkdir rmdir symlink link chmod chown
socket socketpair connect bind listen accept accept4 sendto recvfrom
dlopen dlmopen dlsym dlvsym syscall ptrace prctl mprotect mmap mmap64 process_vm_readv process_vm_writev
kill killpg tgkill tkill sigqueue pidfd_open pidfd_send_signal
read write pread pread64 pwrite pwrite64 readv writev dup dup2 dup3 ioctl sendfile splice
pthread_create thrd_create chdir fchdir chroot setuid setgid seteuid setegid
""".split())
_DENIED_SYMBOL_PARTS = ("St6thread15_M_start_thread", "basic_ifstream", "basic_ofstream", "basic_fstream", "basic_filebuf",
                        "St10filesystem", "PyRun_", "PyImport_", "Py_CompileString", "PyEval_EvalCode", "PySys_",
                        "PyMarshal_")


def _symbol_denied(name: str) -> bool:
    return name in _DENIED_SYMBOLS or any(part in name for part in _DENIED_SYMBOL_PARTS)


def imported_symbols(path: Path) -> list[str] | None:
    """Undefined dynamic symbols of a shared library (what it imports), or None when `nm` is unavailable."""
    nm = shutil.which("nm")
    if nm is None:
        return None
    with guards.trusted():
        proc = subprocess.run([nm, "-D", "--undefined-only", str(path)], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        return None
    names = []
    for line in proc.stdout.splitlines():
        parts = line.split()
        if parts:
            names.append(parts[-1].split("@")[0])
    return names


def denied_imports(path: Path) -> list[str]:
    symbols = imported_symbols(path)
    return sorted({s for s in symbols or () if _symbol_denied(s)})


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


def vet_binary(helper: str, path: Path, allowed: frozenset[str] = frozenset(),
               check_instructions: bool = True) -> None:
    """`allowed`: symbols the toolchain itself brings into every such build (e.g. a CUDA extension's runtime
    support), measured on a trivial build with the same toolchain and flags, never a fixed list.
    `check_instructions`: also refuse system-call instructions in the library's code (host builds)."""
    symbols = imported_symbols(path)
    if symbols is not None:  # without binutils the source checks still ran
        bad = sorted({s for s in symbols if _symbol_denied(s) and s not in allowed})
        if bad:
            guards._violate(f"{helper}: the compiled kernel imports OS services or the Python interpreter: "
                            f"{', '.join(bad[:8])} [rule native-no-os]")
    if check_instructions:
        calls = system_call_instructions(path)
        if calls:
            guards._violate(f"{helper}: the compiled kernel makes system calls directly ({calls[0]}; "
                            f"{len(calls)} in all) [rule native-no-os]")
