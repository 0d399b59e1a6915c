"""The Ray cluster option in the app: the address benches use (Settings) and what the Benchmark page says about
where a bench ran. The app never joins the cluster itself: benches are started from the command line."""

from __future__ import annotations

import streamlit as st

from app import services
from kforge_core.bench.cluster import ENV_ADDRESS, SETTINGS_TABLE, check_address, resolve_address, settings_address
from kforge_core.bench.metrics import mixed_devices_note
from kforge_core.errors import UsageError
from kforge_core.llm import LLMConfigError


def configured_address() -> tuple[str | None, str]:
    """(the address a bench started now would use, where it comes from); (None, why) when it is unusable."""
    try:
        return resolve_address(None)
    except UsageError as exc:
        return None, str(exc)


def settings_section(path) -> None:
    """Settings: the Ray cluster `bench --cluster` uses by default (saved as `[cluster] address`)."""
    st.markdown("##### Ray cluster for benchmarks")
    st.caption("`python -m kforge_core bench` runs each problem as a task on this Ray cluster when set: `auto` "
               "(the cluster this machine joined with `ray start`), `ray://HOST:10001`, or `HOST:6379`. Empty: "
               f"this machine. `{ENV_ADDRESS}` and `--cluster` override it (`--cluster local`: this machine).")
    address, source = configured_address()
    if source.startswith("env:"):
        st.info(f"Set by the environment ({source[4:]} = `{address}`), taking precedence over this field.",
                icon=":material/info:")
    typed = st.text_input("Cluster address", value=settings_address(path) or "", key="kf-set-cluster",
                          placeholder="auto, ray://head:10001 or head:6379")
    if st.button("Save cluster", icon=":material/save:", key="kf-set-cluster-save"):
        try:
            value = check_address(typed) if typed.strip() else None
            written = services.write_settings({SETTINGS_TABLE: {"address": value}}, path)
        except (UsageError, LLMConfigError, OSError) as exc:
            st.error(f"Not saved: {exc}", icon=":material/error:")
        else:
            st.success(f"Saved to {written}.", icon=":material/check_circle:")


def bench_notes(summary: dict) -> None:
    """Benchmark: how to run one on the cluster, and a warning when the results mix kinds of device."""
    address, _ = configured_address()
    if address:
        st.caption(f"New benches run on the Ray cluster `{address}` (Settings): `python -m kforge_core bench "
                   "--suite gallery --target cuda --out DIR` places each problem on a free device of the cluster.")
    if summary.get("mixed_devices"):
        st.warning(mixed_devices_note(summary["mixed_devices"]), icon=":material/warning:")
        st.dataframe([{"device": d, "correct": f"{s['correct']}/{s['problems']}",
                       "fast_1 vs eager": s["fast_1_vs_eager"],
                       "geomean vs eager (failures = 1.0×)": s["geomean_speedup_vs_eager_failures_as_1"]}
                      for d, s in summary["per_device"].items()], hide_index=True, width="stretch")
