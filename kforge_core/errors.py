"""Typed errors of the core. The CLI and the app turn each into one clean line; a traceback shown to a user is a bug.

Mistakes made by candidate code (compile errors, wrong results) are *data* (verdicts), not exceptions.
"""

from __future__ import annotations


class KForgeError(Exception):
    """Base class: every error a user can cause derives from it and carries a readable message."""


class UsageError(KForgeError):
    """Bad command-line or API usage: a missing file, an unknown option value."""


class ProblemError(KForgeError):
    """A problem (the PyTorch reference) is unusable. `line` is 1-based in the problem source when known."""

    def __init__(self, message: str, line: int | None = None):
        self.line = line
        super().__init__(f"line {line}: {message}" if line else message)


class UnknownTarget(UsageError):
    def __init__(self, name: str, known: list[str]):
        super().__init__(f"unknown target {name!r}; known targets: {', '.join(sorted(known)) or 'none'}")


class TargetUnavailable(UsageError):
    def __init__(self, name: str, reason: str):
        super().__init__(f"target {name!r} is not available on this machine: {reason}")


class CompileError(KForgeError):
    """Raised by platform compile helpers inside the evaluation child; becomes a `compile_error` verdict."""

    def __init__(self, message: str, log: str = ""):
        self.log = log
        super().__init__(message)


class SandboxError(KForgeError):
    """The evaluation child could not be started at all (not a candidate failure)."""
