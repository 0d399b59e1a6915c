"""The Synthesize form's agents section: the built-in synthesizer or an OpenAI-compatible endpoint (checked in
place: an unreachable endpoint or a refused key is said before a run starts)."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from kforge_core.llm import LLMConfig, LLMConfigError, check_endpoint

from . import services
from .run_view import BUILTIN_LABEL

# Errors from the endpoint check that make a run pointless: it would fail on its first call.
BLOCKING_ENDPOINT_ERRORS = ("LLMAuthError", "LLMConnectionError", "LLMTimeoutError", "LLMConfigError")
ENDPOINT_CHECK_TIMEOUT_S = 8.0


@dataclass
class AgentChoice:
    agent: str  # "builtin" | "llm"
    base_url: str | None = None
    api_key: str | None = None
    model: str | None = None
    analysis_model: str | None = None

    def llm_config(self) -> LLMConfig:
        return LLMConfig(base_url=self.base_url or None, api_key=self.api_key or None, model=self.model or None,
                         analysis_model=self.analysis_model or None)


def agent_section() -> AgentChoice:
    st.markdown("##### 3 · Agents")
    cfg, cfg_error = services.llm_defaults()
    if cfg_error:
        st.warning(f"{cfg_error}. Using the built-in synthesizer until it is fixed (Settings).",
                   icon=":material/warning:")
    configured = cfg is not None and cfg.is_configured
    labels = {"builtin": f"Built-in synthesizer ({BUILTIN_LABEL})",
              "llm": "LLM agents — an OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, LM Studio, OpenRouter…)"}
    agent = st.radio("Who writes and analyses the kernels", list(labels), format_func=labels.get,
                     index=1 if configured else 0, key="kf-agent", persist_state="session",
                     captions=["Works offline with no API key: rule-based rewrites of common PyTorch patterns.",
                               "A generation agent writes programs; an analysis agent reads the profile and "
                               "recommends the next change."])
    if agent == "builtin":
        return AgentChoice("builtin")
    if not configured:
        st.info("No endpoint is configured yet: enter one here, or save defaults in Settings.",
                icon=":material/info:")
    c1, c2 = st.columns(2)
    base_url = c1.text_input("Endpoint (base URL)", value=(cfg.base_url or "") if cfg else "",
                             placeholder="https://api.openai.com/v1 or http://localhost:11434/v1", key="kf-base-url")
    saved_key = cfg.api_key if cfg else None
    typed_key = c2.text_input("API key", type="password", key="kf-api-key",
                              placeholder=f"saved key {services.mask_key(saved_key)} (leave empty to use it)"
                              if saved_key else "leave empty for local servers",
                              help="Used for this run only; never stored with the run.")
    c3, c4 = st.columns(2)
    model = c3.text_input("Generation model", value=(cfg.model or "") if cfg else "", key="kf-model",
                          placeholder="e.g. gpt-4o, qwen2.5-coder:32b")
    analysis = c4.text_input("Analysis model (empty: same as generation)",
                             value=(cfg.analysis_model or "") if cfg else "", key="kf-analysis-model")
    choice = AgentChoice("llm", base_url.strip() or None, typed_key.strip() or saved_key, model.strip() or None,
                         analysis.strip() or None)
    if st.button("Check endpoint", icon=":material/network_check:", key="kf-check-endpoint"):
        show_endpoint_check(choice, test_call=True)
    return choice


def show_endpoint_check(choice: AgentChoice, test_call: bool) -> bool:
    """Check the endpoint in place; True when a run could use it."""
    try:
        config = choice.llm_config()
    except LLMConfigError as exc:
        st.error(str(exc), icon=":material/error:")
        return False
    with st.spinner(f"Asking {config.endpoint}…"):
        result = check_endpoint(config, timeout_s=ENDPOINT_CHECK_TIMEOUT_S, test_call=test_call)
    if not result.ok:
        st.error(f"Endpoint check failed: {result.error}", icon=":material/cloud_off:")
        if result.models:
            st.caption("Models served there: " + ", ".join(f"`{m}`" for m in result.models[:30]))
        return result.error_type not in BLOCKING_ENDPOINT_ERRORS and bool(result.model)
    latency = f" in {result.latency_s:.2f} s" if result.latency_s is not None else ""
    st.success(f"{result.endpoint} answered{latency}; model `{result.model}`"
               + (" is listed" if result.model_listed else ""), icon=":material/cloud_done:")
    if result.models:
        st.caption(f"{len(result.models)} model(s) served there: " + ", ".join(f"`{m}`" for m in result.models[:40])
                   + (" …" if len(result.models) > 40 else ""))
    for note in result.notes:
        st.caption(note)
    return True
