"""Other evaluations' directories (the temporary directories issue): every private directory sits under its caller's
one temporary directory, beside the fork server's and the other evaluations' ones. The child lists the directory
above its own, reads a sibling's file by its path, and runs KForge's sweep of stale temporary directories on its
/tmp (where its caller's directory name exists only to hold its own directory's mount): it must see nothing but its
own directory, read nothing, and lose nothing of its own."""

import os
from pathlib import Path

from tests.candidates.hostile._probe import attempt, read, run


def body(request):
    from kforge_core import tempdirs

    Path("mine.txt").write_text("mine")
    here = os.getcwd()
    return {"cwd": here,
            "listing": attempt(lambda: sorted(os.listdir(os.path.dirname(here)))),
            "reads": {p: attempt(lambda p=p: read(p)) for p in request["paths"]},
            "swept": attempt(lambda: [str(p) for p in tempdirs.sweep(Path("/tmp"))]),
            "mine": attempt(lambda: Path(here, "mine.txt").read_text())}


if __name__ == "__main__":
    run(body)
