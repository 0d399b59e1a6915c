"""Built-in KForge targets. Each module here defines `PLATFORM` and is registered exactly like a third-party one.

To add a target: drop `platforms/<name>.py` (a `Platform` subclass instance named `PLATFORM`) and its single-shot
example `platforms/examples/<name>/problem.py` + `candidate.py`. Nothing else changes.
"""
