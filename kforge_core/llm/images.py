"""User messages with images (profiler screenshots), in the chat-completions `image_url` data-URL form.

Only PNG and JPEG are accepted: every vision model takes them, and sniffing the magic bytes (not the file name)
catches a mislabelled or corrupt file before it costs a request.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Iterable, Literal, Union

from .errors import LLMImageError

ImageInput = Union[bytes, bytearray, str, os.PathLike]

_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
)


def sniff_image_type(data: bytes) -> str | None:
    """The MIME type from the magic bytes ("image/png", "image/jpeg"), or None for anything else."""
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    return None


def image_data_url(image: ImageInput, *, name: str | None = None) -> str:
    """`data:image/png;base64,...` for PNG/JPEG bytes or a path to such a file."""
    if isinstance(image, (bytes, bytearray)):
        data, label = bytes(image), name or "image bytes"
    else:
        path = Path(image).expanduser()
        label = name or str(path)
        try:
            data = path.read_bytes()
        except OSError as err:
            raise LLMImageError(f"cannot read image {label}: {err.strerror or err}") from None
    mime = sniff_image_type(data)
    if mime is None:
        raise LLMImageError(
            f"{label} is not a PNG or JPEG image (first bytes {data[:8]!r}); export the screenshot as PNG or JPEG"
        )
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def image_part(image: ImageInput, *, detail: Literal["auto", "low", "high"] | None = None) -> dict:
    url: dict = {"url": image_data_url(image)}
    if detail is not None:
        url["detail"] = detail
    return {"type": "image_url", "image_url": url}


def image_message(
    text: str,
    images: Iterable[ImageInput] = (),
    *,
    role: str = "user",
    detail: Literal["auto", "low", "high"] | None = None,
) -> dict:
    """A chat message with `text` first, then one `image_url` part per image. With no images it is a plain text
    message, so text-only models keep working when there is nothing to show."""
    parts = [image_part(img, detail=detail) for img in images]
    if not parts:
        return {"role": role, "content": text}
    return {"role": role, "content": [{"type": "text", "text": text}, *parts]}


def has_images(messages: Iterable[dict]) -> bool:
    for message in messages:
        content = message.get("content")
        if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "image_url" for p in content):
            return True
    return False
