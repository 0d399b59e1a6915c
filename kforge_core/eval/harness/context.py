"""Facts about the running evaluation that compile helpers need (the candidate file, for line mapping)."""

from __future__ import annotations

from pathlib import Path

candidate_path: Path | None = None
candidate_text: str = ""
request: dict = {}  # the evaluation request (target, size_class, ...), for adapters that re-run the candidate


def set_candidate(path: Path) -> None:
    global candidate_path, candidate_text
    candidate_path = path
    candidate_text = path.read_text()
