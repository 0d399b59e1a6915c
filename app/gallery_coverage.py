"""What the built-in synthesizer covers of each gallery problem, per target, worked out statically (traced and
written, never compiled or evaluated) and kept on disk by the problem file's hash, the target and the
synthesizer's own code, so each is worked out once.

Tracing imports torch and runs the module, so it never happens in the app process: `compute` runs in the child job
`python -m app.child coverage` (each trace in the evaluator's sandboxed child besides), one problem after another,
writing each answer as it comes; the picker reads the answers there are (`read`). Only gallery files are surveyed
this way; a pasted module is checked by "Check by running the reference", in a child, on request.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from kforge_core.paths import cache_dir

ROOT = Path(__file__).resolve().parent.parent
# the code whose change can change an answer: the compiler and the agent that drives it
_SYNTH_CODE = ("kforge_core/synth", "kforge_core/agents/builtin_generation.py")
STATUS_MARK = {"covered": "✓", "partly": "◐", "none": "✗"}
STATUS_TEXT = {"covered": "covered", "partly": "partly covered (some nodes stay in PyTorch)", "none": "not covered"}


@functools.lru_cache(maxsize=1)
def synth_digest() -> str:
    h = hashlib.sha256()
    for entry in _SYNTH_CODE:
        path = ROOT / entry
        for f in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            h.update(f.relative_to(ROOT).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def _file(source: str, target: str) -> Path:
    digest = hashlib.sha256(source.encode()).hexdigest()[:24]
    return cache_dir() / "gallery-coverage" / synth_digest() / target / f"{digest}.json"


def read(source: str, target: str) -> dict[str, Any] | None:
    """{'status': covered|partly|none, 'text': the synthesizer's note or why it writes nothing}, or None while
    not worked out yet."""
    try:
        answer = json.loads(_file(source, target).read_text())
    except (OSError, ValueError):
        return None
    return answer if isinstance(answer, dict) and answer.get("status") in STATUS_MARK else None


def classify(program: str | None, notes: str | None, error: str | None, kept: dict | None) -> dict[str, Any]:
    """One answer from what the built-in agent returned for a problem's first candidate."""
    if program is None:
        return {"status": "none", "text": error or "it writes no program for this problem"}
    return {"status": "partly" if kept else "covered", "text": notes or ""}


def compute(sources: list[str], target: str) -> int:
    """Work out and store the answer for each source not stored yet (child side: this traces); returns how many
    were worked out."""
    from kforge_core.agents.builtin_generation import BuiltinGenerationAgent

    agent = BuiltinGenerationAgent(size_class="auto")
    done = 0
    for source in sources:
        path = _file(source, target)
        if path.exists():
            continue
        result = agent.synthesize(source, target)
        answer = classify(result.program, result.notes, result.error, agent.last_report.get("kept"))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(answer))
        os.replace(tmp, path)  # a reader never sees half an answer
        done += 1
    return done
