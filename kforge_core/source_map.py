"""Map compiler diagnostics on generated kernel source back to the candidate file's own line numbers.

Kernel source usually sits in a string literal of the candidate. If the compiled text is found verbatim in the
candidate, line k of the source is candidate line (start + k - 1). If it is not (built by concatenation or
f-strings), diagnostics keep the kernel's own line numbers and say so.
"""

from __future__ import annotations

import re

_DIAG = re.compile(r"^(?P<file>[^\s:][^:\n]*?)[:(](?P<line>\d+)(?:[:,](?P<col>\d+))?\)?:?\s*(?P<rest>.*)$")


def source_start_line(kernel_source: str, candidate_text: str) -> int | None:
    """1-based candidate line where kernel line 1 sits, or None when the source is not in the file verbatim."""
    if not kernel_source or not candidate_text:
        return None
    pos = candidate_text.find(kernel_source)
    if pos < 0:
        stripped = kernel_source.strip("\n")
        pos = candidate_text.find(stripped)
        if pos < 0:
            return None
        lead = len(kernel_source) - len(kernel_source.lstrip("\n"))
        return candidate_text.count("\n", 0, pos) + 1 - lead
    return candidate_text.count("\n", 0, pos) + 1


def map_diagnostics(log: str, source_file_names: tuple[str, ...], start_line: int | None,
                    kernel_source: str = "") -> tuple[str, list[dict]]:
    """Rewrite `file:line:col: msg` lines for the kernel's file(s). Returns (mapped text, [{"line", "message"}])."""
    kernel_lines = kernel_source.splitlines()
    out_lines, diagnostics = [], []
    for raw in log.splitlines():
        m = _DIAG.match(raw.strip())
        if m and any(m.group("file").endswith(n) for n in source_file_names):
            k = int(m.group("line"))
            rest = m.group("rest")
            if start_line is not None:
                where = f"candidate line {start_line + k - 1} (kernel line {k})"
                cand_line = start_line + k - 1
            else:
                where = f"kernel line {k}"
                cand_line = None
            code = kernel_lines[k - 1].strip() if 0 < k <= len(kernel_lines) else ""
            out_lines.append(f"{where}: {rest}")
            if "error" in rest.lower():
                diagnostics.append({"line": cand_line, "kernel_line": k, "message": rest, "code": code})
        else:
            out_lines.append(raw)
    return "\n".join(out_lines), diagnostics


def summarize_errors(diagnostics: list[dict], limit: int = 5) -> str:
    parts = []
    for d in diagnostics[:limit]:
        where = f"candidate line {d['line']}" if d.get("line") else f"kernel line {d['kernel_line']}"
        code = f" — `{d['code']}`" if d.get("code") else ""
        parts.append(f"{where}: {d['message']}{code}")
    more = f" (+{len(diagnostics) - limit} more)" if len(diagnostics) > limit else ""
    return "; ".join(parts) + more
