"""OpenAI-compatible LLM client: configuration, chat completions (streaming, retries, usage, images), endpoint check.

    cfg = resolve_config(model="qwen2.5-coder")            # flags > env > settings file
    with LLMClient(cfg) as llm:
        result = llm.chat([{"role": "user", "content": "..."}], on_token=print)
        analysis = llm.chat(msgs, model=cfg.model_for("analysis"))

Modules: config (LLMConfig, resolve_config), client (LLMClient, ChatResult), errors (the LLMError family),
images (image messages), context (context windows and prompt budgets), endpoint (check_endpoint), retry (backoff policy), translate (SDK errors -> ours),
tokens (usage estimates).
"""

from .client import ChatResult, LLMClient, RetryEvent
from .context import DEFAULT_CONTEXT_TOKENS, prompt_budget
from .config import (
    DEFAULT_BASE_URL,
    DEFAULT_SETTINGS_PATH,
    PLACEHOLDER_API_KEY,
    LLMConfig,
    is_configured,
    load_settings,
    resolve_config,
    settings_path,
)
from .endpoint import EndpointCheck, check_endpoint
from .errors import (
    LLMAuthError,
    LLMBadResponseError,
    LLMConfigError,
    LLMConnectionError,
    LLMContextError,
    LLMError,
    LLMImageError,
    LLMImagesUnsupportedError,
    LLMRateLimitError,
    LLMRequestError,
    LLMServerError,
    LLMStreamError,
    LLMTimeoutError,
)
from .images import has_images, image_data_url, image_message, image_part, sniff_image_type
from .tokens import estimate_prompt_tokens, estimate_tokens

__all__ = [
    "ChatResult",
    "LLMClient",
    "RetryEvent",
    "DEFAULT_BASE_URL",
    "DEFAULT_SETTINGS_PATH",
    "PLACEHOLDER_API_KEY",
    "LLMConfig",
    "is_configured",
    "load_settings",
    "resolve_config",
    "settings_path",
    "EndpointCheck",
    "check_endpoint",
    "LLMAuthError",
    "LLMBadResponseError",
    "LLMConfigError",
    "LLMConnectionError",
    "LLMContextError",
    "LLMError",
    "LLMImageError",
    "LLMImagesUnsupportedError",
    "LLMRateLimitError",
    "LLMRequestError",
    "LLMServerError",
    "LLMStreamError",
    "LLMTimeoutError",
    "has_images",
    "image_data_url",
    "image_message",
    "image_part",
    "sniff_image_type",
    "estimate_prompt_tokens",
    "estimate_tokens",
    "DEFAULT_CONTEXT_TOKENS",
    "prompt_budget",
]
