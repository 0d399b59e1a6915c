"""Nsight Compute adapter: profile only the candidate's kernels, parse `ncu --csv`, keep numbers and rule hints.

`ncu_profile()` runs inside the evaluation child (trusted: it starts a process). It re-runs the candidate in a fresh
process under `ncu` — this module's `__main__`, which installs the same run-time guards as the evaluation child before
importing candidate code — warms it up once (compilation, autotuning), then runs one forward inside the NVTX range
`kforge_profile`. ncu profiles only kernels in that range whose names are the candidate's own (`--kernel-name
regex:...`), with the sections SpeedOfLight, Occupancy and MemoryWorkloadAnalysis, and `--clock-control none`: the GPU
keeps its own clocks (ncu's default would lock them to base clocks; we never change clock settings), so durations are
comparable with the evaluator's timings but vary with boost state.

Set KFORGE_NCU=0 to skip it (an evaluation's `device_profiler=False` does too: the built-in analysis, which does not
read its metrics); KFORGE_NCU_TIMEOUT (seconds, default 180) bounds it.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

SECTIONS = ("SpeedOfLight", "Occupancy", "MemoryWorkloadAnalysis")
NVTX_RANGE = "kforge_profile"
CLOCK_NOTE = ("--clock-control none: the GPU ran at its own (boost) clocks; ncu did not lock clocks, so durations "
              "match the evaluator's timing conditions but vary with the clock state")
_TIME_UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6,
               "second": 1e6}
_NUMBER = re.compile(r"^[+-]?(\d{1,3}(,\d{3})+|\d+)?(\.\d+)?([eE][+-]?\d+)?$")
HEADLINE = {  # (section name contains, metric name) -> short key
    ("Speed Of Light", "Duration"): "duration",
    ("Speed Of Light", "Compute (SM) Throughput"): "sm_throughput_pct",
    ("Speed Of Light", "Memory Throughput"): "memory_throughput_pct",
    ("Speed Of Light", "DRAM Throughput"): "dram_throughput_pct",
    ("Speed Of Light", "L1/TEX Cache Throughput"): "l1_throughput_pct",
    ("Speed Of Light", "L2 Cache Throughput"): "l2_throughput_pct",
    ("Speed Of Light", "SM Frequency"): "sm_frequency",
    ("Speed Of Light", "DRAM Frequency"): "dram_frequency",
    ("Occupancy", "Achieved Occupancy"): "achieved_occupancy_pct",
    ("Occupancy", "Theoretical Occupancy"): "theoretical_occupancy_pct",
    ("Occupancy", "Registers Per Thread"): "registers_per_thread",
    ("Occupancy", "Block Limit Registers"): "block_limit_registers",
    ("Occupancy", "Block Limit Shared Mem"): "block_limit_shared_mem",
    ("Memory Workload Analysis", "Memory Throughput"): "memory_throughput",
    ("Memory Workload Analysis", "L1/TEX Hit Rate"): "l1_hit_rate_pct",
    ("Memory Workload Analysis", "L2 Hit Rate"): "l2_hit_rate_pct",
    ("Memory Workload Analysis", "Mem Busy"): "mem_busy_pct",
    ("Memory Workload Analysis", "Max Bandwidth"): "max_bandwidth_pct",
}


def parse_number(text: str):
    """'1,234.5' -> 1234.5, '42' -> 42, anything else stays a string (units, '(256, 1, 1)', 'n/a')."""
    t = (text or "").strip()
    if t and _NUMBER.match(t) and any(ch.isdigit() for ch in t):
        v = float(t.replace(",", ""))
        return int(v) if v.is_integer() and "." not in t and "e" not in t.lower() else v
    return t


def _csv_block(text: str) -> list[list[str]]:
    """The CSV rows of ncu's output (its own ==PROF== / ==WARNING== lines and the program's output skipped)."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return []
    body = [ln for ln in lines[start:] if ln.startswith('"')]
    return list(csv.reader(io.StringIO("\n".join(body))))


def parse_ncu_csv(text: str) -> list[dict]:
    """`ncu --csv --page details` output -> [{"id", "name", "block", "grid", "metrics": {section: {metric: {"value",
    "unit"}}}, "headline": {...}, "rules": [{"section", "rule", "type", "description", "speedup"}]}]."""
    rows = _csv_block(text)
    if not rows:
        return []
    header = rows[0]
    col = {name: i for i, name in enumerate(header)}

    def get(row, name):
        i = col.get(name)
        return row[i] if i is not None and i < len(row) else ""

    kernels: dict[str, dict] = {}
    for row in rows[1:]:
        if len(row) < 3 or row == header:
            continue
        kid = get(row, "ID")
        k = kernels.setdefault(kid, {"id": parse_number(kid), "name": get(row, "Kernel Name"),
                                     "block": get(row, "Block Size"), "grid": get(row, "Grid Size"),
                                     "metrics": {}, "headline": {}, "rules": []})
        section = get(row, "Section Name")
        metric = get(row, "Metric Name")
        rule = get(row, "Rule Name")
        desc = get(row, "Rule Description")
        if metric:
            value, unit = parse_number(get(row, "Metric Value")), get(row, "Metric Unit")
            k["metrics"].setdefault(section, {})[metric] = {"value": value, "unit": unit}
            for (sec, name), key in HEADLINE.items():
                if sec in section and metric == name:
                    k["headline"][key] = value if not unit or unit == "%" else f"{value} {unit}".strip()
            if metric == "Duration" and isinstance(value, (int, float)) and unit in _TIME_UNITS:
                k["duration_us"] = value * _TIME_UNITS[unit]
        if rule or desc:
            entry = {"section": section, "rule": rule, "type": get(row, "Rule Type"),
                     "description": re.sub(r"\s+", " ", desc).strip()}
            speedup = get(row, "Estimated Speedup")
            if speedup:
                entry["speedup"] = parse_number(speedup)
                entry["speedup_type"] = get(row, "Estimated Speedup Type")
            if entry not in k["rules"]:
                k["rules"].append(entry)
    return list(kernels.values())


def ncu_version(ncu: str) -> str:
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    m = re.search(r"Version\s+([\w.\-]+)", out)
    return m.group(1) if m else out.strip().splitlines()[-1] if out.strip() else "unknown"


def kernel_regex(names) -> str:
    names = sorted({n for n in names if re.fullmatch(r"[A-Za-z_]\w*", n)})
    return "regex:" + "|".join(names) if names else ""


REPORT_FILE = "kforge_ncu_report.csv"


def ncu_command(ncu: str, names, workdir: str, target: str, size_class: str | None) -> list[str]:
    cmd = [ncu, "--csv", "--log-file", os.path.join(workdir, REPORT_FILE), "--page", "details",
           "--clock-control", "none", "--target-processes", "all", "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/",
           "--launch-count", "20"]
    for s in SECTIONS:
        cmd += ["--section", s]
    regex = kernel_regex(names)
    if regex:
        cmd += ["--kernel-name", regex]
    from kforge_core.eval.child_setup import python_command

    cmd += [*python_command("platforms.cuda._ncu"), workdir, target, size_class or ""]
    return cmd


def ncu_profile(target: str, names, request: dict) -> dict | None:
    """Run the candidate under ncu; None when ncu is absent or disabled, {"error": ...} when it failed."""
    from kforge_core.eval.harness import context, guards

    if os.environ.get("KFORGE_NCU", "1") == "0" or request.get("device_profiler") is False:
        return None
    ncu = shutil.which("ncu")
    if ncu is None or context.candidate_path is None:
        return None
    workdir = str(Path(context.candidate_path).parent)
    timeout = float(os.environ.get("KFORGE_NCU_TIMEOUT", "180"))
    cmd = ncu_command(ncu, names, workdir, target, request.get("size_class"))
    start = time.perf_counter()
    with guards.trusted():
        version = ncu_version(ncu)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=workdir)
        except subprocess.TimeoutExpired:
            return {"tool": f"Nsight Compute {version}", "error": f"ncu did not finish within {timeout:g} s",
                    "clock_control": CLOCK_NOTE}
    out = {"tool": f"Nsight Compute {version}", "clock_control": CLOCK_NOTE, "sections": list(SECTIONS),
           "kernel_filter": kernel_regex(names) or "all kernels in the NVTX range",
           "wall_s": time.perf_counter() - start}
    try:  # ncu's own output (the CSV report) went to the log file; the program's output stayed on stdout
        report = Path(workdir, REPORT_FILE).read_text(errors="replace")
    except OSError:
        report = ""
    kernels = parse_ncu_csv(report) or parse_ncu_csv(proc.stdout)
    out["kernels"] = kernels
    if not kernels:
        tail = "\n".join((report + "\n" + proc.stdout + "\n" + proc.stderr).strip().splitlines()[-8:])
        out["error"] = f"ncu profiled no kernel (exit {proc.returncode}): {tail[-1500:]}"
    if os.environ.get("KFORGE_NCU_KEEP_RAW"):
        out["raw"] = (report or proc.stdout)[-200000:]
    return out


def _profiled_run(workdir: Path, target: str, size_class: str | None) -> None:
    """Under ncu: build the models like the evaluation child does, warm up, then one forward in the NVTX range."""
    import torch

    from kforge_core.eval.harness import context, guards
    from kforge_core.eval.harness.loading import candidate_class, import_file, size_overrides, to_device
    from kforge_core.platform import get_platform

    platform = get_platform(target)
    with guards.trusted():
        platform.prepare_child()
    guards.install()
    problem = import_file(workdir / "problem.py", "kforge_problem")
    for key, value in size_overrides(problem, size_class).items():
        setattr(problem, key, value)
    device = platform.device()
    platform.seed(0)
    init = list(problem.get_init_inputs())
    platform.seed(0)
    ref = problem.Model(*init).to(device)
    context.set_candidate(workdir / "candidate.py")
    cand = import_file(workdir / "candidate.py", "kforge_candidate")
    platform.seed(0)
    new = candidate_class(cand)(*init).to(device)
    ref_sd, new_sd = ref.state_dict(), new.state_dict()
    if ref_sd and ref_sd.keys() == new_sd.keys() and all(ref_sd[k].shape == new_sd[k].shape for k in ref_sd):
        with torch.no_grad():
            new.load_state_dict(ref_sd)
    platform.seed(0)
    inputs = to_device(list(problem.get_inputs()), device)
    with torch.no_grad():
        new(*inputs)
        platform.synchronize()
        torch.cuda.nvtx.range_push(NVTX_RANGE)
        new(*inputs)
        platform.synchronize()
        torch.cuda.nvtx.range_pop()


if __name__ == "__main__":
    _profiled_run(Path(sys.argv[1]), sys.argv[2], sys.argv[3] or None)
