"""What an evaluation child gives back travels through files the caller created before the child started.

Each channel (the framed result, the harness's log, the candidate's output) is an anonymous file: created with
O_TMPFILE where the kernel has it (no name anywhere), else created and unlinked at once. The child receives the
descriptor; the caller reads its own descriptor afterwards. So a child cannot swap a log for a symlink to the
settings file, point the caller at a FIFO that blocks it, or make it read a sparse multi-gigabyte file: nothing is
reopened by path, only regular files are read, and every read is bounded (the tail, by pread at a computed offset).
"""

from __future__ import annotations

import os
import stat
import tempfile

NAMES = ("result", "harness", "candidate")


def anonymous_file() -> int:
    directory = tempfile.gettempdir()
    flag = getattr(os, "O_TMPFILE", 0)
    if flag:
        try:
            return os.open(directory, flag | os.O_RDWR | os.O_CLOEXEC, 0o600)
        except OSError:  # a filesystem without O_TMPFILE support
            pass
    fd, path = tempfile.mkstemp(prefix=".kforge-chan-", dir=directory)
    os.unlink(path)
    return fd


def read_tail(fd: int, limit: int) -> bytes:
    """At most the last `limit` bytes of the regular file open at `fd` (b"" for anything else)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size <= 0:
        return b""
    offset = max(0, st.st_size - limit)
    chunks, want = [], st.st_size - offset
    while want > 0:
        chunk = os.pread(fd, min(want, 1 << 20), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        want -= len(chunk)
    return b"".join(chunks)


class Channels:
    def __init__(self) -> None:
        self._fds = {name: anonymous_file() for name in NAMES}

    def fds(self) -> tuple[int, int, int]:
        """(result, harness log, candidate log), in the order children expect them."""
        return tuple(self._fds[n] for n in NAMES)

    def read(self, name: str, limit: int) -> str:
        return read_tail(self._fds[name], limit).decode(errors="replace")

    def close(self) -> None:
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = {}
