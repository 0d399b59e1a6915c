"""kforge_core.llm's configuration: flags, environment and settings file in priority order, defaults, clear
errors for a bad file or no model, prices and context size from the settings file, the API key kept out of
errors and reprs.
"""

from __future__ import annotations

import pytest

from kforge_core.llm import (
    PLACEHOLDER_API_KEY, LLMAuthError, LLMClient, LLMConfig, LLMConfigError, LLMServerError, is_configured,
    resolve_config)
from tests.fakes.openai_replies import server_error
from tests.fakes.openai_server import FakeOpenAIServer  # noqa: F401 - pytest fixture
from tests.fakes.openai_server import fake_openai_server  # noqa: F401 - pytest fixture
from tests.llm_fixtures import HI, clean_env, server  # noqa: F401 - pytest fixtures


# --------------------------------------------------------------------------------------------------- config


def test_config_priority_flags_env_settings(clean_env, tmp_path):
    settings = tmp_path / "settings.toml"
    settings.write_text(
        '[llm]\nbase_url = "http://file:1/v1"\napi_key = "file-key"\nmodel = "file-model"\n'
        'analysis_model = "file-analysis"\ntimeout_s = 12\n'
    )
    clean_env.setenv("KFORGE_SETTINGS", str(settings))
    cfg = resolve_config()
    assert (cfg.base_url, cfg.api_key, cfg.model, cfg.analysis_model, cfg.timeout_s) == (
        "http://file:1/v1", "file-key", "file-model", "file-analysis", 12.0,
    )
    assert cfg.sources["model"] == f"settings:{settings}"

    clean_env.setenv("OPENAI_BASE_URL", "http://env:2/v1")
    clean_env.setenv("KFORGE_MODEL", "env-model")
    clean_env.setenv("KFORGE_ANALYSIS_MODEL", "env-analysis")
    cfg = resolve_config()
    assert (cfg.base_url, cfg.api_key, cfg.model, cfg.analysis_model) == (
        "http://env:2/v1", "file-key", "env-model", "env-analysis",
    )
    assert cfg.sources["base_url"] == "env:OPENAI_BASE_URL" and cfg.sources["api_key"].startswith("settings:")

    clean_env.setenv("OPENAI_API_KEY", "env-key")
    cfg = resolve_config(base_url="http://flag:3/v1", model="flag-model", api_key="")
    assert (cfg.base_url, cfg.api_key, cfg.model, cfg.analysis_model) == (
        "http://flag:3/v1", "env-key", "flag-model", "env-analysis",
    )
    assert cfg.sources["model"] == "flag"

    other = tmp_path / "other.toml"
    other.write_text('[llm]\nmodel = "other-model"\n')
    clean_env.delenv("KFORGE_MODEL")
    assert resolve_config(settings_path=other).model == "other-model"  # explicit path beats $KFORGE_SETTINGS


def test_config_defaults_and_is_configured(clean_env):
    cfg = resolve_config()
    assert cfg.base_url is None and cfg.api_key is None and cfg.model is None
    assert cfg.effective_api_key == PLACEHOLDER_API_KEY
    assert not cfg.is_configured and not is_configured()
    assert LLMConfig(base_url="http://localhost:11434/v1").is_configured
    assert LLMConfig(api_key="sk-abc").is_configured
    clean_env.setenv("OPENAI_BASE_URL", "http://localhost:8000/v1")
    assert is_configured()


def test_config_file_errors_are_clear(clean_env, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[llm\nmodel = 1")
    with pytest.raises(LLMConfigError, match="not valid TOML"):
        resolve_config(settings_path=bad)
    wrong = tmp_path / "wrong.toml"
    wrong.write_text("[llm]\ntimeout_s = \"fast\"\n")
    with pytest.raises(LLMConfigError, match="timeout_s must be a number"):
        resolve_config(settings_path=wrong)
    with pytest.raises(LLMConfigError, match="max_retries must be >= 0"):
        LLMConfig(max_retries=-1)
    with pytest.raises(LLMConfigError, match="must start with http"):
        resolve_config(base_url="localhost:8000/v1")


def test_no_model_is_a_config_error(server):
    with LLMClient(server.llm_config(model=None)) as c, pytest.raises(LLMConfigError, match="KFORGE_MODEL"):
        c.chat(HI)
    assert server.chat_requests == []


# --------------------------------------------------------------------------------------------------- secrets


def test_api_key_never_in_errors_or_reprs():
    secret = "sk-test-SECRET-0123456789abcdef"
    with FakeOpenAIServer(api_key="sk-the-right-one-000000") as server:
        cfg = server.llm_config(api_key=secret)
        with LLMClient(cfg) as c:
            with pytest.raises(LLMAuthError) as info:
                c.chat(HI)
            assert server.last_request.bearer == secret  # the key was sent, and the server echoed it back...
            server.api_key = None
            server.enqueue(server_error(500, f"upstream rejected {secret}"), server_error(500, "Bearer " + secret))
            with pytest.raises(LLMServerError) as info5:
                c.chat(HI, max_retries=1)
            check = c.check_endpoint()
            server.api_key = "sk-the-right-one-000000"
            check_auth = c.check_endpoint()
        texts = [str(info.value), repr(info.value), str(info5.value), repr(cfg), str(cfg), repr(c), str(check),
                 str(check_auth)]
        for text in texts:
            assert secret not in text and "SECRET" not in text
        assert "rejected the API key" in str(info.value) and info.value.attempts == 1
        assert check_auth.error_type == "LLMAuthError" and not check_auth.ok


def test_settings_file_context_and_prices(clean_env, tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('[llm]\nmodel = "m"\nanalysis_model = "a"\ncontext_tokens = 8192\n'
                    '[pricing]\nprompt_price_per_1m_tokens = 2.5\ncompletion_price_per_1m_tokens = 10\n'
                    'analysis_prompt_price_per_1m_tokens = 0.15\nanalysis_completion_price_per_1m_tokens = 0.6\n')
    cfg = resolve_config(settings_path=path)
    assert cfg.context_tokens == 8192
    assert cfg.price_for("generation") == (2.5, 10.0) and cfg.price_for("analysis") == (0.15, 0.6)
    path.write_text('[pricing]\nprompt_price_per_1m_tokens = 1\ncompletion_price_per_1m_tokens = 2\n')
    assert resolve_config(settings_path=path).price_for("analysis") == (1.0, 2.0)  # one price for every call
    path.write_text('[pricing]\nprompt_price_per_1m_tokens = "cheap"\n')
    with pytest.raises(LLMConfigError, match="must both be numbers"):
        resolve_config(settings_path=path)
    with pytest.raises(LLMConfigError, match="context_tokens must be > 0"):
        LLMConfig(context_tokens=0)
    assert LLMConfig(model="m").price_for("analysis") is None  # unknown is not zero
