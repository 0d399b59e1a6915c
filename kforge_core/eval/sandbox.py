"""Run the evaluation harness in a child process: timeout, memory limit, private directory, no secrets.

What the child gets:
- a fresh private working directory (removed afterwards) holding copies of the problem and the candidate;
- an environment built from an allow-list (PATH, locale, CUDA/ROCm/torch/Triton/OpenMP settings, ...) from which
  anything that looks like a credential (`*_KEY`, `*_TOKEN`, `*_SECRET`, `*PASSWORD*`, `OPENAI_*`, ...) is removed;
- its own process group (killed whole on timeout, so compilers and stray grandchildren die too), a parent-death
  signal, no core dumps, RLIMIT_AS where the platform allows it, and RSS polling everywhere;
- a random nonce on stdin: the result is accepted only when framed by it, so candidate output cannot forge one.

The caller's own process is made non-dumpable once (PR_SET_DUMPABLE=0), which stops processes of the same
(non-root) user — the child included — from reading its /proc/<pid>/environ, where the API key lives.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .. import paths
from ..errors import SandboxError
from ..platform import REPO_ROOT

_ENV_ALLOW = re.compile(
    r"^(PATH|LANG|LANGUAGE|LC_\w+|TZ|TERM|TMPDIR|CC|CXX|LD_LIBRARY_PATH|LIBRARY_PATH|CPATH|"
    r"CUDA_\w+|NVIDIA_\w+|ROCM_\w+|HIP_\w+|TORCH_\w+|TORCHINDUCTOR_\w+|TRITON_\w+|PYTORCH_\w+|OMP_\w+|MKL_\w+|"
    r"KMP_\w+|OPENBLAS_\w+|GOMP_\w+|KFORGE_\w+|VIRTUAL_ENV|CONDA_PREFIX|PYTHONHASHSEED|NCCL_\w+|NVSHMEM_\w+|"
    r"MPS_\w+|METAL_\w+)$")
_ENV_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION)|^OPENAI_|^ANTHROPIC_",
                         re.IGNORECASE)
_dumpable_cleared = False


def cache_dir() -> Path:
    d = paths.cache_dir()
    d.mkdir(parents=True, exist_ok=True)
    return d


# How every evaluation child's interpreter starts (spawned children, the fork server, the builtin tracer): -P
# (Python >= 3.11) keeps the working directory -- the candidate's private directory, which it may write -- off
# sys.path, so a lazy import (torch's `import sympy`) can never find a module the candidate planted there; -s drops
# the user site directory (HOME is the working directory). The harness is found through PYTHONPATH (the repo root).
PYTHON_FLAGS: tuple[str, ...] = ("-P", "-s") if sys.version_info >= (3, 11) else ("-s",)


def python_command(module: str) -> list[str]:
    return [sys.executable, *PYTHON_FLAGS, "-m", module]


def child_environment(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if _ENV_ALLOW.match(k) and not _ENV_SECRET.search(k)}
    env.update(
        HOME=str(workdir),
        # the repo first, then the caller's own entries (third-party platform modules named in KFORGE_PLATFORMS)
        PYTHONPATH=os.pathsep.join([str(REPO_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]),
        PYTHONUNBUFFERED="1",
        # what PYTHON_FLAGS does, for the Python processes a child starts itself (ncu's profiled child runs
        # `python -m` in the candidate's directory; inductor's workers): no working directory, no user site
        PYTHONSAFEPATH="1",
        PYTHONNOUSERSITE="1",
        KFORGE_CACHE_DIR=str(cache_dir()),
        # torch.compile's caches persist across children, so the baseline's compile is paid once per problem
        TORCHINDUCTOR_CACHE_DIR=str(cache_dir() / "inductor"),
        TRITON_CACHE_DIR=str(cache_dir() / "triton"),
        TORCH_EXTENSIONS_DIR=str(cache_dir() / "torch_extensions"),
        XDG_CACHE_HOME=str(cache_dir() / "xdg"),
    )
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return env


def _clear_dumpable() -> None:
    global _dumpable_cleared
    if _dumpable_cleared or not sys.platform.startswith("linux"):
        return
    _dumpable_cleared = True
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


def limits(memory_limit_mb: int | None, limit_address_space: bool):
    def apply() -> None:  # runs in the child between fork and exec (or after a fork-server fork)
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if memory_limit_mb and limit_address_space:
            n = memory_limit_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (n, n))
        if sys.platform.startswith("linux"):
            try:
                import ctypes

                ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: die with the caller
            except (OSError, AttributeError):
                pass
        drop_privileges()

    return apply


def drop_privileges() -> None:
    """In a child about to run candidate code (after fork, before exec): no new privileges (setuid programs do not
    elevate), and when running as root an empty capability bounding set, so after exec the child holds no
    capabilities at all. Without this a root child keeps CAP_SYS_PTRACE, which overrides the caller's
    non-dumpable flag and lets it read the caller's /proc/<pid>/environ (the API key), and CAP_DAC_OVERRIDE, which
    opens every file on the machine. The child stays uid 0, so it still owns the private directory and the cache."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
        if os.geteuid() == 0:
            for cap in range(64):  # PR_CAPBSET_DROP; EINVAL past the kernel's last capability is harmless
                libc.prctl(24, cap, 0, 0, 0)
            # and the capabilities held now (a fork-server child runs candidate code without an exec)
            header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
            data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable (x2): all empty
            libc.capset(header, data)
    except (OSError, AttributeError):
        pass


_lasting: dict = {}
_lasting_lock = threading.Lock()


def popen_lasting(*args, **kwargs) -> subprocess.Popen:
    """subprocess.Popen from a thread that lives as long as this process. For servers that outlive the call that
    starts them (fork server, baseline server): their parent-death signal (PR_SET_PDEATHSIG) fires when the
    *thread* that forked them exits, so one started from an evaluation's worker thread would be killed when that
    thread ends."""
    import queue

    with _lasting_lock:
        if "thread" not in _lasting or not _lasting["thread"].is_alive():
            jobs: queue.Queue = queue.Queue()

            def serve() -> None:
                while True:
                    fn, box, done = jobs.get()
                    try:
                        box["value"] = fn()
                    except BaseException as e:  # noqa: BLE001 - handed back to the caller
                        box["error"] = e
                    done.set()

            _lasting["jobs"] = jobs
            _lasting["thread"] = threading.Thread(target=serve, daemon=True, name="kforge-server-starter")
            _lasting["thread"].start()
        jobs = _lasting["jobs"]
    box: dict = {}
    done = threading.Event()
    jobs.put((lambda: subprocess.Popen(*args, **kwargs), box, done))
    done.wait()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _rss_mb(pid: int) -> float:
    """Resident memory of a process group leader and its descendants (Linux), in MiB; 0 where unknown."""
    total = 0
    try:
        out = subprocess.run(["ps", "-o", "rss=", "-s", str(pid)], capture_output=True, text=True, timeout=2)
        total = sum(int(x) for x in out.stdout.split() if x.isdigit())
    except (OSError, subprocess.SubprocessError):
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total = int(line.split()[1])
        except OSError:
            return 0.0
    return total / 1024


@dataclass
class ChildOutcome:
    result: dict | None  # the framed JSON result, when the child produced one
    returncode: int | None
    timed_out: bool
    memory_exceeded: bool
    log: str  # what the child printed (candidate output, tracebacks)
    wall_s: float
    cancelled: bool = False  # the caller asked to stop: the process group was killed, no verdict

    @property
    def signal_name(self) -> str | None:
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class Supervision:
    """What the caller does while a child runs, besides waiting: read its progress channel, and stop it when
    `cancel()` says so (checked every poll, so a cancel kills the process group within tens of milliseconds)."""

    def __init__(self, channel=None, cancel=None):
        self.channel, self.cancel = channel, cancel
        self.cancelled = False

    def tick(self) -> bool:
        """False when the child must be stopped now."""
        if self.channel is not None:
            self.channel.pump()
        if self.cancel is not None and self.cancel():
            self.cancelled = True
            return False
        return True


def _supervise(pid: int, poll, start: float, timeout_s: float, memory_limit_mb: int | None,
               limit_address_space: bool, supervision: Supervision | None = None) -> tuple[bool, bool]:
    """Wait for the child; kill its whole process group on timeout, on memory overuse, on a cancel, or when the
    caller itself is interrupted (Ctrl-C must not leave an evaluation running). Returns (timed_out,
    memory_exceeded)."""
    timed_out = memory_exceeded = False
    next_rss = start + 0.5
    try:
        while poll() is None:
            now = time.monotonic()
            if now - start > timeout_s:
                timed_out = True
                break
            if supervision is not None and not supervision.tick():
                break
            if memory_limit_mb and not limit_address_space and now >= next_rss:
                next_rss = now + 0.5
                if _rss_mb(pid) > memory_limit_mb:
                    memory_exceeded = True
                    break
            time.sleep(0.02)
    except BaseException:
        _kill_group(pid)
        raise
    return timed_out, memory_exceeded


def run_child(request: dict, files: dict[str, str], *, timeout_s: float, memory_limit_mb: int | None,
              limit_address_space: bool, module: str = "kforge_core.eval.harness.child",
              fork_server_safe: bool = False, on_stage=None, relay=None, cancel=None) -> ChildOutcome:
    """Run the evaluation harness (or `python -m module`) on `request` with `files` in a private directory.

    The harness child is forked from the fork server when the platform is fork-safe and a server is available
    (`kforge_core.eval.forkserver`), else spawned; both get the same environment, limits and privileges.
    `on_stage(dict)` receives the stages the child reports, `relay(dict) -> dict` answers its relay requests (see
    `kforge_core.eval.progress_channel`), and `cancel()` returning True kills the child's process group at once
    (the outcome says `cancelled`)."""
    from . import forkserver
    from .progress_channel import ProgressChannel

    _clear_dumpable()
    workdir = Path(tempfile.mkdtemp(prefix="kforge-eval-"))
    channel = None
    try:
        for name, text in files.items():
            (workdir / name).write_text(text)
        nonce = secrets.token_hex(16)
        channel = ProgressChannel(workdir, on_stage, relay)
        supervision = Supervision(channel, cancel)
        full_request = {**request, "nonce": nonce, "workdir": str(workdir), **channel.request_fields()}
        env = child_environment(workdir)
        server = None
        if fork_server_safe and module == "kforge_core.eval.harness.child" and forkserver.enabled():
            try:
                server = forkserver.get(env)
            except SandboxError:
                server = None  # spawning still works; only slower
        start = time.monotonic()
        if server is not None:
            pid = server.fork(workdir, full_request, memory_limit_mb, limit_address_space)
            timed_out, memory_exceeded = _supervise(pid, lambda: server.returncode(pid), start, timeout_s,
                                                    memory_limit_mb, limit_address_space, supervision)
            _kill_group(pid)  # the child, or whatever it left behind in its session
            returncode = server.wait(pid, 10.0)
            out = _read_log(workdir / "result.out", limit=1 << 26)
        else:
            returncode, timed_out, memory_exceeded, out = _spawn(workdir, full_request, env, module, start,
                                                                 timeout_s, memory_limit_mb, limit_address_space,
                                                                 supervision)
        wall = time.monotonic() - start
        channel.close()
        result = _unframe(out, nonce)
        log = _read_log(workdir / "child.log")
        cand_log = workdir / "candidate.log"
        if cand_log.exists():
            log = _read_log(cand_log) + ("\n" + log if log else "")
        if supervision.cancelled:
            result = None
        return ChildOutcome(result, returncode, timed_out, memory_exceeded, log, wall, supervision.cancelled)
    finally:
        if channel is not None:
            channel.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _spawn(workdir: Path, request: dict, env: dict, module: str, start: float, timeout_s: float,
           memory_limit_mb: int | None, limit_address_space: bool,
           supervision: Supervision | None = None) -> tuple[int | None, bool, bool, str]:
    try:
        with open(workdir / "child.log", "wb") as log_file:
            proc = subprocess.Popen(
                python_command(module), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=log_file, cwd=workdir, env=env, start_new_session=True,
                preexec_fn=limits(memory_limit_mb, limit_address_space))
    except OSError as e:
        raise SandboxError(f"could not start the evaluation process: {e}") from e
    stdout_chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: stdout_chunks.append(proc.stdout.read()), daemon=True)
    reader.start()
    try:
        proc.stdin.write(json.dumps(request).encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    timed_out, memory_exceeded = _supervise(proc.pid, proc.poll, start, timeout_s, memory_limit_mb,
                                            limit_address_space, supervision)
    _kill_group(proc.pid)  # the child, or whatever it left behind in its group (a hung compiler, a daemon)
    proc.wait()
    reader.join(timeout=5)
    return proc.returncode, timed_out, memory_exceeded, b"".join(stdout_chunks).decode(errors="replace")


def _unframe(out: str, nonce: str) -> dict | None:
    start_tag, end_tag = f"<<{nonce}>>", f"<</{nonce}>>"
    i = out.rfind(start_tag)
    j = out.rfind(end_tag)
    if i < 0 or j < i:
        return None
    try:
        return json.loads(out[i + len(start_tag):j])
    except json.JSONDecodeError:
        return None


def _read_log(path: Path, limit: int = 20000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-limit:].decode(errors="replace")
