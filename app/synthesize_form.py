"""The Synthesize page's form: the problem, the target, the agents, the budgets, an optional cross-platform reference
and profiler screenshots; then start the run in a worker process.

Everything a user can get wrong is checked in place, in one sentence: a module that does not parse or lacks
`Model`/`get_inputs`/`get_init_inputs` (with the line), an unavailable target, an unreachable endpoint or a refused
key, an image that is not PNG/JPEG. The pasted module is only parsed in this process (`load_problem`); running it
("Check by running the reference") happens in an evaluation child, never here.

The sections live in their own modules (`form_problem` with `gallery_picker`, `form_agents`, `form_settings`); this
one holds the target section and the start, and is what the pages import.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import streamlit as st

from . import services
from .form_agents import (BLOCKING_ENDPOINT_ERRORS, ENDPOINT_CHECK_TIMEOUT_S, AgentChoice, agent_section,
                          show_endpoint_check)
from .form_problem import (PLACEHOLDER, VALIDATE_TIMEOUT_S, ProblemChoice, check_problem, has_cpu_sizes,
                           problem_section, reference_check)
from .form_settings import (advanced_section, budget_section, budget_text, reference_section, save_screenshots,
                            screenshots_section)
from .gallery_picker import cpu_sizes

START_TIMEOUT_S = 120.0


# --------------------------------------------------------------------------------------------------- target

def target_section() -> services.TargetInfo | None:
    st.markdown("##### 2 · Target")
    all_targets = services.targets()
    available = [t for t in all_targets if t.available]
    unavailable = [t for t in all_targets if not t.available]
    chosen = None
    if available:
        names = [t.name for t in available]
        by_name = {t.name: t for t in available}
        name = st.radio("Run and time the kernels on", names, key="kf-target", persist_state="session",
                        format_func=lambda n: by_name[n].title,
                        captions=[f"{t.device_name} · {t.reason}" for t in available])
        chosen = by_name.get(name)
    else:
        st.error("No target is available on this machine; see why below.", icon=":material/error:")
    if unavailable:
        missing = {t.name: t for t in unavailable}
        st.radio("Not available on this machine", [t.name for t in unavailable], index=None, disabled=True,
                 key="kf-target-unavailable", format_func=lambda n: missing[n].title,
                 captions=[t.reason for t in unavailable])
    return chosen


# --------------------------------------------------------------------------------------------------- start

def build_config(loop, **values: Any) -> Any:
    """A validated RunConfig from the form's values (raises UsageError with every problem in one line)."""
    known = {f.name for f in fields(loop.RunConfig)}
    config = loop.RunConfig(**{k: v for k, v in values.items() if k in known})
    config.validate()
    return config


def start_run(config: Any) -> str:
    """Create the run and start its detached worker (the run goes on if this tab closes); return the run id.

    Done in a child process (`app.child start`): creating a run checks the target through platform discovery,
    which imports torch."""
    from dataclasses import asdict

    from .child import run_job

    answer = run_job("start", {"db": str(services.db_path()), "config": asdict(config)}, timeout_s=START_TIMEOUT_S)
    return answer["run_id"]


__all__ = ["PLACEHOLDER", "BLOCKING_ENDPOINT_ERRORS", "ENDPOINT_CHECK_TIMEOUT_S", "VALIDATE_TIMEOUT_S", "AgentChoice",
           "ProblemChoice", "advanced_section", "agent_section", "budget_section", "budget_text", "build_config",
           "check_problem", "cpu_sizes", "has_cpu_sizes", "problem_section", "reference_check", "reference_section",
           "save_screenshots", "screenshots_section", "show_endpoint_check", "start_run", "target_section"]
