"""Facts about the running evaluation that compile helpers need (the candidate file, for line mapping)."""

from __future__ import annotations

from pathlib import Path

candidate_path: Path | None = None
candidate_text: str = ""
request: dict = {}  # the evaluation request (target, size_class, ...), for adapters that re-run the candidate
call_limit_s: float = 10.0  # how long one forward call of the candidate may take (set from the reference's time)


def set_candidate(path: Path) -> None:
    global candidate_path, candidate_text
    candidate_path = path
    candidate_text = path.read_text()
