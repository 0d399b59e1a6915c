"""Writes outside (issue 20): a module planted in the project root (the next `python -m kforge_core` would import
it), the settings file's base_url rewritten, the run store replaced, a cached build edited and its index entry
rewritten, a new build planted in the cache; the private directory, the only place it may write, as a control."""

import os

from tests.candidates.hostile._probe import attempt, run


def write(path: str, text: str = "planted by a candidate\n") -> str:
    with open(path, "w") as f:
        f.write(text)
    return path


def body(request):
    return {"writes": {p: attempt(lambda p=p: write(p)) for p in request["paths"]},
            "mkdirs": {p: attempt(lambda p=p: os.makedirs(p)) for p in request.get("dirs", [])},
            "private": attempt(lambda: write(os.path.join(os.getcwd(), "scratch.txt")))}


if __name__ == "__main__":
    run(body)
