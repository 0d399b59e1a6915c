"""The fake OpenAI server's HTTP side (`tests/fakes/openai_server.py`): requests dispatched and recorded, replies
written as JSON or as an SSE stream, faults acted out (delays, stalls, dropped connections), tokens counted."""

from __future__ import annotations

import json
import math
import socket
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from tests.fakes.openai_recording import RecordedRequest
from tests.fakes.openai_replies import Reply, error

if TYPE_CHECKING:
    from tests.fakes.openai_server import FakeOpenAIServer


class FakeHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeOpenAIServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out and hung up is a scripted, expected event; stay quiet about it.
        import sys

        if isinstance(sys.exc_info()[1], (ConnectionError, socket.timeout, OSError)):
            return
        super().handle_error(request, client_address)


class ChatHandler(BaseHTTPRequestHandler):
    # HTTP/1.1 so that the client's keep-alive pool and chunked SSE behave as with real servers.
    protocol_version = "HTTP/1.1"
    # Real servers set TCP_NODELAY; without it each small SSE write can wait ~40 ms on Nagle + delayed ACK.
    disable_nagle_algorithm = True
    server: FakeHTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    # ---- entry points
    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        fake = self.server.fake
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        path = self.path.split("?", 1)[0]
        fake._record(
            RecordedRequest(
                method=method,
                path=path,
                headers={k.lower(): v for k, v in self.headers.items()},
                body=body,
                json=parsed,
                time=time.monotonic(),
            )
        )
        try:
            if fake.api_key is not None and self.headers.get("Authorization") != f"Bearer {fake.api_key}":
                sent = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                self._send_reply(error(401, f"Incorrect API key provided: {sent}.", code="invalid_api_key"), {})
            elif method == "POST" and path == "/v1/chat/completions":
                if not isinstance(parsed, dict):
                    self._send_reply(error(400, "request body is not a JSON object"), {})
                elif fake.context_limit is not None and _requested_tokens(parsed) > fake.context_limit:
                    asked = _requested_tokens(parsed)
                    self._send_reply(error(400, f"This model's maximum context length is {fake.context_limit} "
                                                f"tokens. However, you requested {asked} tokens "
                                                f"({_prompt_tokens(parsed)} in the messages). Please reduce the "
                                                "length of the messages or completion.", code="context_length_exceeded"),
                                     {})
                else:
                    self._send_reply(fake._next_reply(parsed), parsed)
            elif method == "GET" and path == "/v1/models":
                self._send_models()
            else:
                self._send_reply(error(404, f"Invalid URL ({method} {path})", code="unknown_url"), {})
        except (ConnectionError, socket.timeout):
            # The client gave up (timeout) while we were waiting or writing: that is the scripted fault.
            self.close_connection = True

    # ---- responses
    def _send_models(self) -> None:
        fake = self.server.fake
        if fake.models_reply is not None:
            self._send_reply(fake.models_reply, {})
            return
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake", **fake.model_info.get(m, {})}
                for m in fake.models]
        self._send_json(200, {"object": "list", "data": data}, {})

    def _send_json(self, status: int, payload: Any, headers: dict[str, str]) -> None:
        raw = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if not isinstance(payload, str) else "text/plain")
        self.send_header("Content-Length", str(len(raw)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(raw)
        self.wfile.flush()

    def _wait(self, seconds: float) -> None:
        self.server.fake._stopping.wait(seconds)

    def _abort(self) -> None:
        """Drop the connection mid-response, as a crashed or restarted server does."""
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _send_reply(self, r: Reply, request: dict) -> None:
        if r.delay_s:
            self._wait(r.delay_s)
        if r.status != 200 or r.body is not None:
            self._send_json(r.status, r.body if r.body is not None else {"error": {"message": "error"}}, r.headers)
            return
        fake = self.server.fake
        meta = {
            "id": f"chatcmpl-fake-{next(fake._ids)}",
            "created": int(time.time()),
            "model": r.model or request.get("model") or "fake-model",
        }
        usage = _usage(r, request, self.server.fake.silent_context)
        if request.get("stream"):
            self._send_stream(r, request, meta, usage)
        else:
            self._send_completion(r, meta, usage)

    def _send_completion(self, r: Reply, meta: dict, usage: dict) -> None:
        choices = [] if r.empty_choices else [
            {
                "index": 0,
                "message": {"role": "assistant", "content": r.text,
                            **({"reasoning_content": r.reasoning} if r.reasoning else {})},
                "finish_reason": r.finish_reason,
                "logprobs": None,
            }
        ]
        payload: dict[str, Any] = {"object": "chat.completion", **meta, "choices": choices}
        if r.usage:
            payload["usage"] = usage
        if r.truncate_after is None:
            self._send_json(200, payload, r.headers)
            return
        # Promise the full body, send half of it, hang up.
        raw = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw[: len(raw) // 2])
        self._abort()

    def _send_stream(self, r: Reply, request: dict, meta: dict, usage: dict) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for k, v in r.headers.items():
            self.send_header(k, v)
        self.end_headers()

        def event(choices: list, extra: dict | None = None) -> None:
            data = {"object": "chat.completion.chunk", **meta, "choices": choices, **(extra or {})}
            self._chunk(f"data: {json.dumps(data)}\n\n".encode())

        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        step = max(1, r.chunk_chars)
        pieces = [] if r.empty_choices else [r.text[i : i + step] for i in range(0, len(r.text), step)]
        if r.empty_choices:
            event([])
        else:
            event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
            for i in range(0, len(r.reasoning), step):
                event([{"index": 0, "delta": {"reasoning_content": r.reasoning[i : i + step]}, "finish_reason": None}])
        for n in range(len(pieces) + 1):
            if r.truncate_after is not None and n == r.truncate_after:
                self._abort()  # no terminating chunk: the client sees an incomplete chunked body
                return
            if r.stall_after is not None and n == r.stall_after:
                self._wait(r.stall_s)
            if n < len(pieces):
                event([{"index": 0, "delta": {"content": pieces[n]}, "finish_reason": None}])
        if r.finish_reason is not None and not r.empty_choices:
            event([{"index": 0, "delta": {}, "finish_reason": r.finish_reason}])
        if r.truncate_after is not None and r.truncate_after > len(pieces):
            self._abort()  # the answer is complete, but usage and [DONE] never come
            return
        if include_usage and r.usage:
            event([], {"usage": usage})
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%X\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

def _prompt_tokens(request: dict) -> int:
    """The fake's tokenizer: characters of the message texts / 4 (what the client estimates too)."""
    chars = 0
    for m in request.get("messages") or []:
        content = m.get("content", "")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            chars += sum(len(p.get("text") or "") for p in content if isinstance(p, dict))
    return max(1, math.ceil(chars / 4))


def _requested_tokens(request: dict) -> int:
    return _prompt_tokens(request) + int(request.get("max_tokens") or request.get("max_completion_tokens") or 0)


def _usage(r: Reply, request: dict, silent_context: int | None = None) -> dict:
    prompt = r.prompt_tokens if r.prompt_tokens is not None else _prompt_tokens(request)
    if silent_context is not None:
        prompt = min(prompt, silent_context)
    completion = r.completion_tokens if r.completion_tokens is not None else max(1, math.ceil(len(r.text) / 4))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
