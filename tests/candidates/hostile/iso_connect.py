"""Network (issue 20): connects to a port the caller listens on at 127.0.0.1 (the app, the LLM endpoint, a fake
one in tests) to exfiltrate or to redirect."""

import socket

from tests.candidates.hostile._probe import attempt, run


def body(request):
    def connect():
        socket.create_connection(("127.0.0.1", request["port"]), timeout=2).close()
        return "connected"

    return {"connect": attempt(connect)}


if __name__ == "__main__":
    run(body)
