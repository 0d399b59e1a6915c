"""A child that waits `request["seconds"]` and returns nothing: an evaluation in progress, for the tests that kill
its caller (tests/test_tempdirs.py)."""

import json
import sys
import time

if __name__ == "__main__":
    time.sleep(float(json.loads(sys.stdin.read())["seconds"]))
