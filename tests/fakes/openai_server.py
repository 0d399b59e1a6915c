"""A real, local, scriptable OpenAI-compatible HTTP server for tests.

It is a stdlib `ThreadingHTTPServer` on 127.0.0.1 (free port) in a background thread, so the code under test goes
through the real `openai` package, real HTTP, real SSE parsing and real socket timeouts -- no mocks.

Endpoints
    POST /v1/chat/completions   JSON reply, or SSE when the body has "stream": true (chunked transfer encoding,
                                 `data: {...}\\n\\n` ... `data: [DONE]\\n\\n`; a final usage chunk with `choices: []`
                                 when the body has "stream_options": {"include_usage": true})
    GET  /v1/models              {"object": "list", "data": [{"id": ...}, ...]}
    anything else                404 with an OpenAI-style error body

Quick use
    from tests.fakes.openai_server import FakeOpenAIServer, reply, rate_limited, truncated

    with FakeOpenAIServer() as server:                       # or server.start() ... server.stop()
        server.enqueue(rate_limited(retry_after=0), "hello")   # first call gets 429, the second "hello"
        cfg = server.llm_config(model="gpt-test")              # an LLMConfig with tiny timeouts/retry delays
        ...
        assert server.chat_requests[-1].model == "gpt-test"
        assert server.pending == 0                             # every scripted reply was used

    # pytest: import the fixture into your test module (or conftest) and take `fake_openai_server` as an argument
    from tests.fakes.openai_server import fake_openai_server  # noqa: F401

Scripting (one scripted item is consumed per chat request, in order; see also `enqueue_for`)
    An item is a `Reply`, a plain `str` (shorthand for `reply(text)`), or a callable `fn(request_json) -> Reply | str`
    (dynamic steps inside a fixed sequence). When the queue is empty the server uses `server.responder` (same
    callable signature) if set, else `default` (constructor), else it answers HTTP 400 "no scripted reply left" (not
    retryable) so an unexpected extra call fails fast and loudly.

    Factories for `Reply` (all keyword arguments of `Reply` are accepted where `**kw` is shown):
        reply(text, *, finish_reason="stop", **kw)   normal answer; finish_reason "length", None (no finish), ...
        no_usage(text, **kw)                         no `usage` in JSON / no usage chunk in the stream
        slow(seconds, text="late", **kw)             wait `seconds` before sending headers (> client timeout)
        stall(text, after_chunks, seconds, **kw)     stream some content chunks, then go silent for `seconds`
        truncated(text, after_chunks=2, **kw)        stream some content chunks, then drop the connection
                                                     (no finish_reason, no [DONE]; a JSON reply is cut mid-body);
                                                     after_chunks > number of content chunks: drop right after
                                                     the finish chunk (complete answer, no usage, no [DONE])
        empty_choices(**kw)                          200 with `choices: []` (JSON and stream)
        error(status, message, *, type=, code=, headers=, body=)   any HTTP error with an OpenAI error body
        rate_limited(retry_after=0, **kw)            429 with a Retry-After header (None: no header)
        server_error(status=500, message=...)        5xx
        image_rejected(message=...)                  400 as OpenAI says it for a text-only model given images
        garbage(body="<html>...", status=200)        a body that is not a chat completion (str: text/plain,
                                                     dict/list: JSON), for JSON and stream requests alike

        thinking(reasoning, text, **kw)              a reasoning model behind a reasoning parser: `reasoning` is
                                                     streamed as `reasoning_content` deltas before the answer

    `Reply` fields: text, finish_reason, model (default: the requested model), usage, prompt_tokens,
    completion_tokens (default: ~len/4 estimates), chunk_chars (characters per streamed delta), delay_s, status,
    body (error body: dict -> JSON, str -> raw text), headers, empty_choices, truncate_after, stall_after, stall_s,
    reasoning (streamed as `reasoning_content` first; in the JSON reply's message).

Context windows (checked before the scripted reply is taken; prompt size = characters of the messages / 4)
    server.context_limit = 4096       a prompt + max_tokens over it is refused with vLLM's HTTP 400 ("This model's
                                      maximum context length is 4096 tokens. However, you requested ...")
    server.silent_context = 2048      Ollama's way: the prompt is cut silently, usage reports at most this many
                                      prompt tokens
    server.model_info = {"m": {"max_model_len": 8192}}   extra fields of a model's GET /v1/models entry

Server options
    FakeOpenAIServer(*items, models=("fake-model",), api_key=None, responder=None, default=None)
        api_key: when set, every request must carry `Authorization: Bearer <api_key>`; otherwise 401 whose message
                 echoes the key that was sent (as some servers do) -- handy to test that clients scrub secrets.
    server.base_url        "http://127.0.0.1:<port>/v1"  (what an OpenAI client takes)
    server.enqueue(*items) append scripted items; returns the server
    server.enqueue_for(model, *items)  items only for requests naming `model` (used before the shared queue)
    server.responder       callable used when the queue is empty (settable at any time)
    server.models          list of model ids served by GET /v1/models (mutable)
    server.models_reply    a Reply (e.g. `error(500, ...)`) to answer GET /v1/models with instead, or None
    server.pending         number of scripted items not consumed yet
    server.reset()         clear queue, responder and recorded requests

Recording (thread-safe snapshots)
    server.requests        every request, as `RecordedRequest`
    server.chat_requests   only POST .../chat/completions
    server.last_request    the most recent request or None
    RecordedRequest: method, path, headers (lower-case keys), body (bytes), json (parsed or None), time (monotonic)
        .model  .messages  .stream  .authorization  .bearer  .texts (all text parts, in order)  .prompt (joined)
        .image_urls (data: URLs of image parts)
"""

from __future__ import annotations

import itertools
import json
import math
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator, Union

# --------------------------------------------------------------------------------------------------- scripting


@dataclass
class Reply:
    """One scripted answer to a chat request (a normal reply or a fault). Build it with the factories below."""

    text: str = ""
    finish_reason: str | None = "stop"
    model: str | None = None
    usage: bool = True
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    chunk_chars: int = 4
    delay_s: float = 0.0
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    empty_choices: bool = False
    truncate_after: int | None = None
    stall_after: int | None = None
    stall_s: float = 0.0
    reasoning: str = ""


Responder = Callable[[dict], Union[Reply, str]]
Scripted = Union[Reply, str, Responder]


def reply(text: str, *, finish_reason: str | None = "stop", **kw: Any) -> Reply:
    return Reply(text=text, finish_reason=finish_reason, **kw)


def no_usage(text: str, **kw: Any) -> Reply:
    return Reply(text=text, usage=False, **kw)


def slow(seconds: float, text: str = "late", **kw: Any) -> Reply:
    return Reply(text=text, delay_s=seconds, **kw)


def stall(text: str, after_chunks: int, seconds: float, **kw: Any) -> Reply:
    return Reply(text=text, stall_after=after_chunks, stall_s=seconds, **kw)


def truncated(text: str, after_chunks: int = 2, **kw: Any) -> Reply:
    return Reply(text=text, truncate_after=after_chunks, **kw)


def thinking(reasoning: str, text: str, **kw: Any) -> Reply:
    return Reply(text=text, reasoning=reasoning, **kw)


def empty_choices(**kw: Any) -> Reply:
    return Reply(empty_choices=True, **kw)


def error(
    status: int,
    message: str = "error",
    *,
    type: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
    body: Any = None,
) -> Reply:
    if body is None:
        body = {"error": {"message": message, "type": type or "invalid_request_error", "param": None, "code": code}}
    return Reply(status=status, body=body, headers=dict(headers or {}))


def rate_limited(retry_after: float | None = 0, message: str = "Rate limit reached, slow down", **kw: Any) -> Reply:
    headers = {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}
    return error(429, message, type="rate_limit_error", code="rate_limit_exceeded", headers=headers, **kw)


def garbage(body: Any = "<html><body>502 Bad Gateway</body></html>", status: int = 200, **kw: Any) -> Reply:
    """A body that is not a chat completion (a proxy's HTML page, a different API's JSON), sent as-is."""
    return Reply(status=status, body=body, **kw)


def server_error(status: int = 500, message: str = "The server had an error while processing your request") -> Reply:
    return error(status, message, type="server_error")


def image_rejected(message: str = "Invalid content type. image_url is only supported by certain models.") -> Reply:
    return error(400, message, code="invalid_value")


# --------------------------------------------------------------------------------------------------- recording


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: Any
    time: float

    @property
    def model(self) -> str | None:
        return self.json.get("model") if isinstance(self.json, dict) else None

    @property
    def messages(self) -> list[dict]:
        return list(self.json.get("messages") or []) if isinstance(self.json, dict) else []

    @property
    def stream(self) -> bool:
        return bool(self.json.get("stream")) if isinstance(self.json, dict) else False

    @property
    def authorization(self) -> str | None:
        return self.headers.get("authorization")

    @property
    def bearer(self) -> str | None:
        auth = self.authorization or ""
        return auth[len("Bearer ") :] if auth.startswith("Bearer ") else None

    def _parts(self) -> Iterator[dict]:
        for message in self.messages:
            content = message.get("content")
            if isinstance(content, str):
                yield {"type": "text", "text": content}
            elif isinstance(content, list):
                yield from (p for p in content if isinstance(p, dict))

    @property
    def texts(self) -> list[str]:
        return [p.get("text", "") for p in self._parts() if p.get("type") == "text"]

    @property
    def prompt(self) -> str:
        return "\n".join(self.texts)

    @property
    def image_urls(self) -> list[str]:
        return [(p.get("image_url") or {}).get("url", "") for p in self._parts() if p.get("type") == "image_url"]


# --------------------------------------------------------------------------------------------------- server


class FakeOpenAIServer:
    """See the module docstring. Safe to use from several threads; one instance per test."""

    def __init__(
        self,
        *items: Scripted,
        models: tuple[str, ...] | list[str] = ("fake-model",),
        api_key: str | None = None,
        responder: Responder | None = None,
        default: Reply | str | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.models: list[str] = list(models)
        self.models_reply: Reply | None = None
        self.model_info: dict[str, dict[str, Any]] = {}
        self.context_limit: int | None = None
        self.silent_context: int | None = None
        self.api_key = api_key
        self.responder = responder
        self.default = default
        self._host = host
        self._queue: deque[Scripted] = deque(items)
        self._model_queues: dict[str, deque[Scripted]] = {}
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        # Set on stop so that scripted delays/stalls end at once instead of holding threads.
        self._stopping = threading.Event()
        self._ids = itertools.count(1)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle
    def start(self) -> FakeOpenAIServer:
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = _HTTPServer((self._host, 0), _Handler)
        httpd.fake = self
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.name = f"fake-openai-{self.port}"
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- addresses
    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("FakeOpenAIServer is not started")
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def llm_config(self, **overrides: Any):
        """An `LLMConfig` pointing here, with test-friendly timeouts and retry delays (imported lazily so this
        module stays usable without kforge_core)."""
        from kforge_core.llm import LLMConfig

        values: dict[str, Any] = dict(
            base_url=self.base_url,
            api_key=self.api_key,
            model=self.models[0] if self.models else "fake-model",
            timeout_s=5.0,
            max_retries=2,
            retry_base_delay_s=0.01,
            retry_max_delay_s=0.05,
        )
        values.update(overrides)
        return LLMConfig(**values)

    # ---- scripting
    def enqueue(self, *items: Scripted) -> FakeOpenAIServer:
        with self._lock:
            self._queue.extend(items)
        return self

    def enqueue_for(self, model: str, *items: Scripted) -> FakeOpenAIServer:
        """Script replies for requests naming `model` only (e.g. the analysis agent's model), so a test does not
        depend on how generation and analysis calls interleave. They take precedence over the shared queue."""
        with self._lock:
            self._model_queues.setdefault(model, deque()).extend(items)
        return self

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue) + sum(len(q) for q in self._model_queues.values())

    def reset(self) -> None:
        with self._lock:
            self._queue.clear()
            self._model_queues.clear()
            self._requests.clear()
            self.responder = None

    def _next_reply(self, request_json: dict) -> Reply:
        with self._lock:
            own = self._model_queues.get(str(request_json.get("model")))
            item: Scripted | None = own.popleft() if own else self._queue.popleft() if self._queue else None
            if item is None:
                item = self.responder or self.default
        if item is None:
            # 400, not 5xx: a client must not retry this, so an unexpected extra call fails fast and clearly.
            return error(400, "fake OpenAI server: no scripted reply left for this request", code="unscripted")
        if callable(item) and not isinstance(item, Reply):
            item = item(request_json)
        return Reply(text=item) if isinstance(item, str) else item

    # ---- recording
    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.method == "POST" and r.path.endswith("/chat/completions")]

    @property
    def last_request(self) -> RecordedRequest | None:
        with self._lock:
            return self._requests[-1] if self._requests else None


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeOpenAIServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out and hung up is a scripted, expected event; stay quiet about it.
        import sys

        if isinstance(sys.exc_info()[1], (ConnectionError, socket.timeout, OSError)):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 so that the client's keep-alive pool and chunked SSE behave as with real servers.
    protocol_version = "HTTP/1.1"
    # Real servers set TCP_NODELAY; without it each small SSE write can wait ~40 ms on Nagle + delayed ACK.
    disable_nagle_algorithm = True
    server: _HTTPServer

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


# --------------------------------------------------------------------------------------------------- pytest

try:
    import pytest
except ImportError:  # the server itself does not need pytest
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture
    def fake_openai_server() -> Iterator[FakeOpenAIServer]:
        """A started `FakeOpenAIServer`, stopped after the test."""
        with FakeOpenAIServer() as server:
            yield server
