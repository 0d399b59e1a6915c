"""What the kforge_core.llm tests share: a started fake OpenAI server (tests/fakes/openai_server.py), a client
of it, an environment without the developer's LLM settings, small image files, one message.
"""

from __future__ import annotations

import pytest

from kforge_core.llm import LLMClient
from tests.fakes.openai_server import fake_openai_server  # noqa: F401 - pytest fixture


PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + b"\x00" * 16
JPEG = b"\xff\xd8\xff\xe0" + b"\x00\x10JFIF\x00" + b"\x00" * 16
GIF = b"GIF89a" + b"\x00" * 16
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def server(fake_openai_server):  # noqa: F811 - the imported fixture
    return fake_openai_server


@pytest.fixture
def client(server):
    with LLMClient(server.llm_config()) as c:
        yield c


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No LLM variables from the developer's shell, and no real settings file."""
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "KFORGE_MODEL", "KFORGE_ANALYSIS_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KFORGE_SETTINGS", str(tmp_path / "absent.toml"))
    return monkeypatch


def assert_clean_message(err: Exception, *, endpoint: str) -> None:
    text = str(err)
    assert "\n" not in text and "Traceback" not in text
    assert endpoint in text
    assert err.__cause__ is None and err.__suppress_context__
