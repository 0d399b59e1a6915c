"""What the fake OpenAI server (`tests/fakes/openai_server.py`) recorded of one request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator


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
