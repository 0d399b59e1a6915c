"""Settings: the LLM endpoint and per-agent defaults (saved to the settings file), prices for the cost column, the
detected devices and their measured ceilings, and the evaluator's rules and tolerances."""

from __future__ import annotations

import streamlit as st

from app import ceilings, cluster, services
from app.synthesize_form import AgentChoice, show_endpoint_check
from kforge_core.llm import LLMConfigError, settings_path
from kforge_core.eval.rules import rules_markdown
from kforge_core.eval.tolerance import POLICIES

st.title("Settings")
path = settings_path()
endpoint_tab, devices_tab, rules_tab, files_tab = st.tabs(["LLM endpoint", "Devices", "Evaluator rules", "Files"])

# --------------------------------------------------------------------------------------------------- endpoint
with endpoint_tab:
    try:
        saved = services.read_settings_file(path)
        file_error = None
    except LLMConfigError as exc:
        saved, file_error = {}, str(exc)
    if file_error:
        st.error(file_error, icon=":material/error:")
    llm = saved.get("llm", {}) if isinstance(saved.get("llm"), dict) else {}
    pricing = saved.get(services.PRICING_TABLE, {}) if isinstance(saved.get(services.PRICING_TABLE), dict) else {}
    cfg, cfg_error = services.llm_defaults()
    st.caption(f"Defaults for new runs, saved to `{path}` (`KFORGE_SETTINGS` moves it). Environment variables "
               "(OPENAI_BASE_URL, OPENAI_API_KEY, KFORGE_MODEL, KFORGE_ANALYSIS_MODEL) override the file.")
    overridden = {k: v for k, v in (cfg.sources if cfg else {}).items() if v.startswith("env:")}
    if overridden:
        st.info("Set by the environment (and so taking precedence over this page): "
                + ", ".join(f"{k} ({v[4:]})" for k, v in overridden.items()), icon=":material/info:")

    c1, c2 = st.columns(2)
    base_url = c1.text_input("Endpoint (base URL)", value=llm.get("base_url", ""), key="kf-set-base-url",
                             placeholder="https://api.openai.com/v1, http://localhost:11434/v1 (Ollama), "
                                         "http://localhost:8000/v1 (vLLM)")
    saved_key = llm.get("api_key") if isinstance(llm.get("api_key"), str) else None
    new_key = c2.text_input("API key", type="password", key="kf-set-api-key",
                            placeholder=f"saved: {services.mask_key(saved_key)} — type to replace" if saved_key
                            else "none saved (local servers need none)",
                            help="Stored in the settings file (owner-only permissions); never shown again in full.")
    c3, c4 = st.columns(2)
    model = c3.text_input("Generation agent: model", value=llm.get("model", ""), key="kf-set-model")
    analysis = c4.text_input("Analysis agent: model (empty: the generation model)",
                             value=llm.get("analysis_model", ""), key="kf-set-analysis-model")
    p1, p2, p3 = st.columns([1, 1, 1])
    price_in = p1.number_input("Price per 1M prompt tokens", min_value=0.0, value=pricing.get(services.PRICE_KEYS[0]),
                               key="kf-set-price-in", placeholder="not set", format="%.4f")
    price_out = p2.number_input("Price per 1M completion tokens", min_value=0.0,
                                value=pricing.get(services.PRICE_KEYS[1]), key="kf-set-price-out",
                                placeholder="not set", format="%.4f")
    p3.caption("With both prices set, run views show the cost of the tokens used (in your currency). Unset, no "
               "cost is shown: an unknown price is not zero.")
    forget_key = st.checkbox("Remove the saved API key", key="kf-set-forget", disabled=not saved_key)

    buttons = st.container(horizontal=True)
    if buttons.button("Save", type="primary", icon=":material/save:", key="kf-set-save", disabled=bool(file_error)):
        key_value = None if forget_key else (new_key.strip() or saved_key)
        try:
            written = services.write_settings({
                "llm": {"base_url": base_url.strip(), "api_key": key_value, "model": model.strip(),
                        "analysis_model": analysis.strip()},
                services.PRICING_TABLE: {services.PRICE_KEYS[0]: price_in, services.PRICE_KEYS[1]: price_out}},
                path)
        except (LLMConfigError, OSError) as exc:
            st.error(f"Could not save: {exc}", icon=":material/error:")
        else:
            st.success(f"Saved to {written}.", icon=":material/check_circle:")
    if buttons.button("Check endpoint", icon=":material/network_check:", key="kf-set-check"):
        choice = AgentChoice("llm", base_url.strip() or None, new_key.strip() or saved_key, model.strip() or None,
                             analysis.strip() or None)
        show_endpoint_check(choice, test_call=True)

# --------------------------------------------------------------------------------------------------- devices
with devices_tab:
    st.caption("Targets found on this machine and the ceilings the roofline uses, measured on this device (never "
               f"guessed: an unmeasured ceiling shows as unknown). Cache: `{ceilings.cache_path()}`.")
    for t in services.targets():
        with st.container(border=True):
            head, action = st.columns([5, 1], vertical_alignment="center")
            mark = ":green-badge[available]" if t.available else ":gray-badge[not available]"
            head.markdown(f"**{t.title}** `{t.name}` {mark}  \n{t.device_name} — {t.reason}")
            measured = ceilings.cached(t.name, t.device_name) if t.available else None
            if t.available:
                if action.button("Measure now", key=f"kf-measure-{t.name}", icon=":material/speed:",
                                 help="Runs the measurement in a separate process (can take a minute)"):
                    with st.spinner(f"Measuring {t.title}…"):
                        ok, message = ceilings.measure(t.name)
                    if ok:
                        measured = ceilings.cached(t.name, t.device_name)
                        st.success("Measured.", icon=":material/check_circle:")
                    else:
                        st.error(f"The measurement failed: {message}", icon=":material/error:")
                m = st.columns(4)
                m[0].metric("Memory bandwidth", f"{measured['bandwidth_gbs']:.1f} GB/s"
                            if measured and measured.get("bandwidth_gbs") else "unknown")
                m[1].metric("fp32 peak", f"{measured['fp32_tflops']:.3g} TFLOP/s"
                            if measured and measured.get("fp32_tflops") else "unknown")
                m[2].metric("bf16 peak", f"{measured['bf16_tflops']:.3g} TFLOP/s"
                            if measured and measured.get("bf16_tflops") else "unknown")
                m[3].caption(measured.get("method", "") if measured else "Not measured yet on this device.")
                if measured:
                    from kforge_core.eval.ceilings import label

                    spread = ", ".join(f"{k} {v:.0%}" for k, v in (measured.get("spread") or {}).items())
                    text = f"{label(measured)}; best of {measured.get('repeats', 1)}" + \
                        (f", spread {spread}" if spread else "")
                    (st.warning if measured.get("trusted") is False else st.caption)(text)
    if st.button("Look for targets again", icon=":material/refresh:", key="kf-rediscover"):
        st.cache_resource.clear()
        st.rerun()
    cluster.settings_section(path)

# --------------------------------------------------------------------------------------------------- rules
with rules_tab:
    st.markdown("Every candidate program is judged by these rules, in a separate process per evaluation.")
    # Rule texts name dunders (__import__, __init__) that markdown would turn into bold.
    st.markdown(rules_markdown())
    st.markdown("##### Tolerances")
    st.caption("An output passes when every element satisfies |got − want| ≤ atol + rtol·|want| and nothing is NaN "
               "or Inf; a constant output (zeros included) must also have a relative L2 error of at most rel_l2_max, "
               "so it cannot pass on a reference whose values are small next to atol. Integers and booleans compare "
               "exactly.")
    rows = []
    for name, policy in POLICIES.items():
        for dtype_label, tol in (("fp32", policy.fp32), ("fp16", policy.half), ("bf16", policy.bf16),
                                 ("fp64", policy.fp64)):
            rows.append({"policy": name, "dtype": dtype_label, "atol": tol.atol, "rtol": tol.rtol,
                         "rel_l2_max": tol.rel_l2_max})
    st.dataframe(rows, hide_index=True, width="stretch",
                 column_config={k: st.column_config.NumberColumn(format="%.0e") for k in ("atol", "rtol",
                                                                                           "rel_l2_max")})

# --------------------------------------------------------------------------------------------------- files
with files_tab:
    st.markdown(f"- Run store: `{services.db_path()}` (`KFORGE_DB`)\n"
                f"- Settings file: `{path}` (`KFORGE_SETTINGS`)\n"
                f"- Uploaded screenshots: `{services.files_dir()}`\n"
                f"- Build and ceilings cache: `{ceilings.cache_path().parent.parent}` (`KFORGE_CACHE_DIR`)")
