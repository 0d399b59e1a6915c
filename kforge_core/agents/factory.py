"""Build the two agents a run uses from its `RunConfig` (`--agent llm|builtin`).

`llm`: one `LLMClient` shared by both agents (the openai client is thread-safe, so best-of-k generation calls can
run in parallel through it); the analysis agent uses `analysis_model` when set. Endpoint and key come from the
config first, then the environment and the settings file (`kforge_core.llm.resolve_config`).

`builtin`: the rule-based agents (`builtin_generation`, `builtin_analysis`, over the compiler in `kforge_core.synth`),
imported only when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import UsageError
from .base import AnalysisAgent, GenerationAgent

if TYPE_CHECKING:
    from ..llm import LLMConfig
    from ..loop.config import RunConfig

AGENT_KINDS = ("llm", "builtin")  # RunConfig.agent: an OpenAI-compatible endpoint, or the rule-based pair
BUILTIN_LABEL = "built-in, rule-based (no LLM)"


def llm_config_for(config: RunConfig) -> LLMConfig:
    """The LLM settings of a run: its own fields, then env and settings file, then `llm_options` (extra
    `LLMConfig` fields: timeout_s, max_retries, max_tokens, temperature, context_tokens, prices, retry delays)."""
    from ..llm import resolve_config

    return resolve_config(base_url=config.base_url, api_key=config.api_key, model=config.model,
                          analysis_model=config.analysis_model, **dict(config.llm_options or {}))


def build_agents(config: RunConfig) -> tuple[GenerationAgent, AnalysisAgent]:
    if config.agent == "llm":
        return _llm_agents(config)
    if config.agent == "builtin":
        return _builtin_agents(config)
    raise UsageError(f"unknown agent {config.agent!r}; choose one of {', '.join(AGENT_KINDS)}")


def _llm_agents(config: RunConfig) -> tuple[GenerationAgent, AnalysisAgent]:
    from ..llm import LLMClient, LLMConfigError
    from .llm_analysis import LLMAnalysisAgent
    from .llm_generation import LLMGenerationAgent

    cfg = llm_config_for(config)
    if not cfg.model:
        raise LLMConfigError(f"no model set for LLM endpoint {cfg.endpoint}; set --model, KFORGE_MODEL or [llm] "
                             "model in the settings file", endpoint=cfg.endpoint)
    client = LLMClient(cfg)
    return LLMGenerationAgent(client, cfg.model_for("generation")), LLMAnalysisAgent(client, cfg.model_for("analysis"))


def _builtin_agents(config: RunConfig) -> tuple[GenerationAgent, AnalysisAgent]:
    """The rule-based pair, imported only when asked for; the generator traces at the run's size class."""
    from .builtin_analysis import BuiltinAnalysisAgent
    from .builtin_generation import BuiltinGenerationAgent

    size_class = getattr(config, "size_class", None)
    return BuiltinGenerationAgent(size_class=size_class if size_class else None), BuiltinAnalysisAgent()
