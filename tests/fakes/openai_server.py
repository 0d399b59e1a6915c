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
    from tests.fakes.openai_replies import rate_limited, reply, truncated
    from tests.fakes.openai_server import FakeOpenAIServer

    with FakeOpenAIServer() as server:                       # or server.start() ... server.stop()
        server.enqueue(rate_limited(retry_after=0), "hello")   # first call gets 429, the second "hello"
        cfg = server.llm_config(model="gpt-test")              # an LLMConfig with tiny timeouts/retry delays
        ...
        assert server.chat_requests[-1].model == "gpt-test"
        assert server.pending == 0                             # every scripted reply was used

    # pytest: import the fixture into your test module (or conftest) and take `fake_openai_server` as an argument
    from tests.fakes.openai_server import fake_openai_server  # noqa: F401

Scripting (one scripted item is consumed per chat request, in order; see also `enqueue_for`; the items and
their factories are in tests/fakes/openai_replies.py)
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

Recording (thread-safe snapshots; RecordedRequest is in tests/fakes/openai_recording.py)
    server.requests        every request, as `RecordedRequest`
    server.chat_requests   only POST .../chat/completions
    server.last_request    the most recent request or None
    RecordedRequest: method, path, headers (lower-case keys), body (bytes), json (parsed or None), time (monotonic)
        .model  .messages  .stream  .authorization  .bearer  .texts (all text parts, in order)  .prompt (joined)
        .image_urls (data: URLs of image parts)
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from typing import Any, Iterator

from tests.fakes.openai_handler import ChatHandler, FakeHTTPServer
from tests.fakes.openai_recording import RecordedRequest
from tests.fakes.openai_replies import Reply, Responder, Scripted, error


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
        self._httpd: FakeHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle
    def start(self) -> FakeOpenAIServer:
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = FakeHTTPServer((self._host, 0), ChatHandler)
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
