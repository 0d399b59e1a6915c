"""Writes outside (issue 20): a module planted in the project root (the next `python -m kforge_core` would import
it), the settings file's base_url rewritten, the run store replaced, a cached build edited and its index entry
rewritten, a new build planted in the cache, files planted in the shared torch.compile / Triton caches (a later
baseline server or judge would load them); the private directory, the only place it may write, and the compile
caches its environment names (its own), as controls."""

import os

from tests.candidates.hostile._probe import attempt, run


def write(path: str, text: str = "planted by a candidate\n") -> str:
    with open(path, "w") as f:
        f.write(text)
    return path


def body(request):
    return {"writes": {p: attempt(lambda p=p: write(p)) for p in request["paths"]},
            "mkdirs": {p: attempt(lambda p=p: os.makedirs(p)) for p in request.get("dirs", [])},
            "private": attempt(lambda: write(os.path.join(os.getcwd(), "scratch.txt"))),
            "own_caches": {var: attempt(lambda var=var: own_cache(var)) for var in CACHE_VARS}}


CACHE_VARS = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR", "XDG_CACHE_HOME")


def own_cache(var: str) -> str:
    os.makedirs(os.environ[var], exist_ok=True)
    return write(os.path.join(os.environ[var], "planted.py"))


if __name__ == "__main__":
    run(body)
