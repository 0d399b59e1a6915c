"""Turn the Metal compiler's log, as `torch.mps.compile_shader` raises it, into the candidate's own line numbers.

compile_shader raises `SyntaxError("program_source:12:5: error: ...")` (torch >= 2.7) or, for other library
errors, `RuntimeError("Failed to create metal library, error: Error Domain=MTLLibraryErrorDomain Code=3
\"program_source:...\" UserInfo={NSLocalizedDescription=...}")`, where the log is repeated. Lines are numbered in
the source *after* torch embedded the headers it ships (`#include <c10/metal/utils.h>` is replaced by that file's
text, `#pragma once` lines are dropped), so the numbers are mapped back through the same expansion before
`kforge_core.source_map` maps kernel lines to candidate lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kforge_core.source_map import map_diagnostics, summarize_errors

LOG_FILE = "program_source"  # the file name the Metal compiler gives a library built from a source string
_INCLUDE = re.compile(r'^\s*#include\s*[<"]([^>"]+)[>"]')
_LOCATION = re.compile(rf"{LOG_FILE}:(\d+):(\d+)?:?")


def torch_include_dir() -> Path | None:
    try:
        import torch.mps

        d = Path(torch.mps.__file__).parent.parent / "include"
        return d if d.is_dir() else None
    except Exception:  # noqa: BLE001 - without torch's headers, includes simply do not expand
        return None


@dataclass(frozen=True)
class LineOrigin:
    line: int  # 1-based line of the candidate's kernel source
    header: str | None = None  # set when the expanded line came from an embedded header


def _expand(lines: list[str], include_dirs: list[Path], seen: set[str]) -> list[str]:
    """Mirror of torch.mps.compile_shader's header embedding: returns one expansion string per input line."""
    out = []
    for line in lines:
        if line.startswith("#pragma once"):
            out.append("")
            continue
        m = _INCLUDE.match(line)
        text = line
        if m:
            for d in include_dirs:
                path = d / m.group(1)
                if not path.exists():
                    continue
                if str(path) in seen:
                    text = ""
                    break
                seen.add(str(path))
                text = "".join(_expand(path.read_text().splitlines(keepends=True), include_dirs, seen))
                break
        out.append(text)
    return out


def expansion_map(source: str, include_dir: Path | None = None) -> list[LineOrigin]:
    """Index k-1 holds where line k of the source the Metal compiler saw came from."""
    include_dirs = [include_dir] if include_dir is not None else ([d] if (d := torch_include_dir()) else [])
    lines = [line + "\n" for line in source.split("\n")]
    origins: list[LineOrigin] = []
    pending = ""  # text of an expansion that did not end with a newline joins the next line
    for i, text in enumerate(_expand(lines, include_dirs, set()), start=1):
        m = _INCLUDE.match(lines[i - 1])
        header = m.group(1) if (m and text != lines[i - 1]) else None
        text = pending + text
        n = text.count("\n")
        origins.extend(LineOrigin(i, header) for _ in range(n))
        pending = text[text.rfind("\n") + 1:] if "\n" in text else text
    if pending:
        origins.append(LineOrigin(len(lines)))
    return origins


def extract_log(message: str) -> str:
    """The compiler's diagnostics from the exception text, one per line, without the NSError wrapping."""
    text = message
    if "UserInfo={" in text:
        text = text[:text.index("UserInfo={")]
    m = re.search(r'Code=\d+\s+"', text)
    if m:
        text = text[m.end():]
        text = text.rstrip().rstrip('"')
    text = text.replace("\\n", "\n")
    # every diagnostic on its own line, so `file:line:col: message` parses
    text = re.sub(rf"(?<!^)(?<!\n)({LOG_FILE}:\d+)", r"\n\1", text)
    return text.strip()


def remap_log(log: str, origins: list[LineOrigin]) -> str:
    """Rewrite `program_source:K:C:` (expanded numbering) to the candidate kernel's numbering."""

    def repl(m: re.Match) -> str:
        k = int(m.group(1))
        col = m.group(2)
        if not origins or not 0 < k <= len(origins):
            return m.group(0)
        o = origins[k - 1]
        loc = f"{LOG_FILE}:{o.line}:{col}:" if col else f"{LOG_FILE}:{o.line}:"
        return f"{loc} [in {o.header}, included here]" if o.header else loc

    return _LOCATION.sub(repl, log)


def compile_error_details(message: str, kernel_source: str, start_line: int | None,
                          include_dir: Path | None = None) -> tuple[str, str]:
    """(one-line summary, full mapped log) for a compile_shader exception message."""
    log = remap_log(extract_log(message), expansion_map(kernel_source, include_dir))
    mapped, diags = map_diagnostics(log, (LOG_FILE,), start_line, kernel_source)
    summary = summarize_errors(diags)
    if not summary:
        lines = [ln for ln in log.splitlines() if ln.strip()]
        summary = (lines[0] if lines else message.strip().splitlines()[0] if message.strip() else "unknown error")
    return summary, mapped
