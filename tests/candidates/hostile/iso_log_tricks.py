"""The caller made to read what it did not open (issue 20): log names in the private directory replaced by symlinks
to the settings file and by a FIFO, and the descriptors it was given grown into sparse 1.5 GB files, so a caller
that reopened logs by path, or read them whole, would leak the key, block, or allocate 1.5 GB."""

import os

from tests.candidates.hostile._probe import attempt, run


def body(request):
    for name in ("child.log", "candidate.log", "result.out"):
        attempt(lambda name=name: os.symlink(request["settings"], name))
    attempt(lambda: os.mkfifo("fifo.log"))
    size = 1536 << 20
    grown = {fd: attempt(lambda fd=fd: os.ftruncate(fd, size)) for fd in (1, 2)}
    # the result goes to the end of the (now sparse) result file, where a bounded tail read still finds it
    os.lseek(1, 0, os.SEEK_END)
    return {"grown": {str(k): v for k, v in grown.items()}}


if __name__ == "__main__":
    run(body)
