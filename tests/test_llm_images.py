"""kforge_core.llm's image messages: building them from files, what reaches the server, a model that refuses
images (against tests/fakes/openai_server.py).
"""

from __future__ import annotations

import base64

import pytest

from kforge_core.llm import LLMImageError, LLMImagesUnsupportedError, LLMRequestError, image_message, sniff_image_type
from tests.fakes.openai_replies import image_rejected
from tests.fakes.openai_server import fake_openai_server  # noqa: F401 - pytest fixture
from tests.llm_fixtures import GIF, HI, JPEG, PNG, client, server  # noqa: F401 - pytest fixtures


# --------------------------------------------------------------------------------------------------- images


def test_image_message_building(tmp_path):
    jpeg_path = tmp_path / "shot.jpg"
    jpeg_path.write_bytes(JPEG)
    msg = image_message("see the profile", [PNG, jpeg_path], detail="low")
    text, png_part, jpeg_part = msg["content"]
    assert msg["role"] == "user" and text == {"type": "text", "text": "see the profile"}
    assert png_part["type"] == "image_url" and png_part["image_url"]["detail"] == "low"
    prefix, payload = png_part["image_url"]["url"].split(",", 1)
    assert prefix == "data:image/png;base64" and base64.b64decode(payload) == PNG
    assert jpeg_part["image_url"]["url"].startswith("data:image/jpeg;base64,")
    assert image_message("no pictures") == {"role": "user", "content": "no pictures"}
    assert sniff_image_type(PNG) == "image/png" and sniff_image_type(JPEG) == "image/jpeg"
    assert sniff_image_type(GIF) is None


def test_image_message_rejects_other_types(tmp_path):
    with pytest.raises(LLMImageError, match="not a PNG or JPEG"):
        image_message("x", [GIF])
    fake_png = tmp_path / "looks.png"
    fake_png.write_bytes(b"<html>not an image</html>")
    with pytest.raises(LLMImageError, match="looks.png is not a PNG or JPEG"):
        image_message("x", [fake_png])
    with pytest.raises(LLMImageError, match="cannot read image"):
        image_message("x", [tmp_path / "missing.png"])


def test_images_reach_the_server(server, client):
    server.enqueue("I see a roofline")
    client.chat([image_message("what is slow?", [PNG])])
    req = server.chat_requests[-1]
    assert req.prompt == "what is slow?"
    assert req.image_urls == ["data:image/png;base64," + base64.b64encode(PNG).decode()]


def test_model_rejecting_images(server, client):
    server.enqueue(image_rejected(), "unused")
    with pytest.raises(LLMImagesUnsupportedError) as info:
        client.chat([image_message("what is slow?", [PNG])])
    text = str(info.value)
    assert "model 'fake-model'" in text and "does not accept images" in text and "vision model" in text
    assert len(server.chat_requests) == 1
    # The same refusal for a text-only request is an ordinary request error, not an image one.
    server.reset()
    server.enqueue(image_rejected())
    with pytest.raises(LLMRequestError) as info:
        client.chat(HI)
    assert not isinstance(info.value, LLMImagesUnsupportedError)
