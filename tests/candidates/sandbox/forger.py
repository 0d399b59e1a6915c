"""A child that prints forged result frames (a guessed nonce, an empty one) and never the real one: the caller
must find no result."""

import json
import sys


def main() -> None:
    json.loads(sys.stdin.read())  # the request, with the real nonce this code pretends not to use
    for fake in ("0123456789abcdef0123456789abcdef", "", "nonce"):
        sys.stdout.write(f'<<{fake}>>{{"status": "correct", "reason": "forged"}}<</{fake}>>\n')
    sys.stdout.flush()


if __name__ == "__main__":
    main()
