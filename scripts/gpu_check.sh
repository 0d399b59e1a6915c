#!/usr/bin/env bash
# GPU check for the CUDA and Triton targets, in ONE device call: what the machine has, the GPU tests, then the
# time-to-verdict benchmark. Logs and JSON go to $OUT (default ./gpu_check_out); the last lines are the tables.
#
#   bash scripts/gpu_check.sh [all|probe|tests|judge|pool|isolation|bench|fidelity|builtin|footprint|scaling|rayoverhead|kernelbench|single|handover] [args...]
#   e.g.  bash scripts/gpu_check.sh bench --runs 5
#   judge: the judge split on the GPU (docs/EVALUATOR.md): the examples judged out of process and in one process,
#   hostile variants that must fail because the judge is out of reach, then time to verdict judged vs one process
#   isolation: the OS isolation of evaluation children on the GPU (docs/EVALUATOR.md), required rather than best
#   effort: the CPU isolation tests, the CUDA/Triton examples, the hostile GPU candidates and the device-memory
#   handover, as root and as an ordinary user (ISOLATION_AS=user: the ordinary user alone)
#   fidelity: bench/timer_parts.py, then bench/timing_fidelity.py on CUDA at two sizes (same candidate evaluated 5
#     times: spread of its speedup); the timer's own checks: tests/gpu/test_gpu_device_timer.py (in `tests`)
#   builtin: bench/builtin_gallery.py on CUDA, resumable (copy a returned builtin_cuda.json into $OUT to go on)
#   footprint: bench/eval_footprint.py on CUDA: the evaluator's peak device memory against the problem's own tensors,
#   for a GELU at KernelBench's own 26_GELU_ sizes (4096 x 393216 fp32: 6 GiB in, 6 GiB out); goal peak <= 3x
#   (per phase, the judge's and the candidate's process's own account); `footprint --baselines` adds the torch.compile
#   server; nvidia-smi sampled beside it gives the device's peak and each process's share then
#   scaling: scripts/ray_multi_gpu.py (issue 28: Ray over 1, 2 and all GPUs of this host), stopped after
#   $SCALING_TIMEOUT s (default 560, inside a 600 s call) so that the finished benches are still copied to $OUT;
#   its own folder (bench/out/ray_multi_gpu) stays for --reuse on a warm machine; a machine goes back 30 s after a
#   call, so to go on in a later call, copy the returned <suite>-<k>gpu/scaling_run.json (and runs.db) back into
#   bench/out/ray_multi_gpu/ here and name that folder in the call's carry: --reuse reads a bench made on the same
#   kind of device only. Ray's wheel (79 MB) is over the carry limit: .whlray/ holds it without ray/jars (Java),
#   rllib, serve, llm, data, train, tune and the dashboard's client (40 MB; its RECORD rewritten to match), with
#   jsonschema, referencing, rpds-py, jsonschema-specifications and .whlkb's wheels but pygments (55 MB in all);
#   a device call returns at most 8 files: tar a folder of results into $OUT rather than many files
#   kernelbench: `bench --agent builtin --target cuda` over KernelBench's level 1/2 carried in .kb/, one worker per
#   GPU, stopped at KB_TIME_LIMIT (480 s) and resumable across calls (see the function); the device has no
#   sqlite-utils/openai/plotly: carry their wheels (.whlkb/: .whlray/ without ray, 18 MB; all of .whlray plus the
#   tree is over the 64 MiB carry limit) and install them first, as for scaling
#   rayoverhead: bench/ray_overhead.py on one GPU (issue 27: the local executor vs Ray, fresh processes, same suite)
#   handover: the device-memory handover's GPU tests and the judge's, then bench/stage_timeline.py at KernelBench's
#   sizes with it and without it (HANDOVER_PROBLEMS, default KernelBench's 19_ReLU and 23_Softmax from .kb/)
#   single: one GPU's measurements in one call, each under its own limit: time to verdict, timing fidelity, a run's
#   first verdict prepared or not, Ray vs local over 6 gallery problems (SINGLE_SUITE to change them); SINGLE_STEPS
#   picks steps ("ttv rayoverhead"), SINGLE_LIMIT_<step> sets a step's seconds; time to verdict pauses 3 s between
#   evaluations as a run's model does (the pool refills a used child only after its evaluation)
#   (both need Ray: pip install -r requirements-ray.txt, or its wheels carried where nothing can be fetched)
#
# Never changes GPU settings (clocks, power, MIG); ncu runs with --clock-control none.
set -uo pipefail
cd "$(dirname "$0")/.."
MODE="${1:-all}"; shift || true
export OUT="${OUT:-$PWD/gpu_check_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export KFORGE_CACHE_DIR="${KFORGE_CACHE_DIR:-/tmp/kforge-gpu-cache}"
PY="${PYTHON:-python3}"
PY="$(command -v "$PY" || echo "$PY")"  # absolute: `su` gives the ordinary user another PATH (python3 without torch)
status=0
# The log accumulates: several calls in one device session (tests, then builtin) each add their part.
echo "== gpu_check.sh $MODE $* ($(date -u +%FT%TZ))" >> "$OUT/gpu_check.log"

probe() {
  {
    echo "== machine"; nvidia-smi -L 2>&1; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv 2>&1
    "$PY" - <<'EOF'
import importlib, sys, torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "gpu", torch.cuda.get_device_name() if torch.cuda.is_available() else None)
for m in ("triton", "cupy"):
    try:
        print(m, importlib.import_module(m).__version__)
    except Exception as e:
        print(m, "missing:", e)
from kforge_core.platform import all_platforms
for n, p in all_platforms().items():
    print(f"target {n}: {p.availability()}")
from platforms.cuda._binding import api
from platforms.cuda._locate import include_dirs
a = api(); print("nvrtc", a.nvrtc_path, a.nvrtc_version, "driver", a.driver_version, "archs", a.supported_archs)
print("include dirs", include_dirs())
EOF
    echo "== tools"; command -v nvcc && nvcc --version | tail -2; command -v ncu && ncu --version | tail -1; command -v ninja
  } 2>&1 | tee -a "$OUT/gpu_check.log"
}

tests() {
  echo "== GPU tests"
  "$PY" -m pytest -q -rA -s --timeout=420 -p no:cacheprovider tests/gpu tests/test_cuda_platform.py \
    tests/test_triton_platform.py 2>&1 | tee -a "$OUT/gpu_check.log"
  local rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || status=$rc
  grep -E "passed|failed|error" "$OUT/gpu_check.log" | tail -1
}

inline_report() {  # what CUDA load_inline builds' own objects import outside the allow-list (should be nothing)
  echo "== load_inline CUDA builds: object imports outside the allow-list"
  "$PY" - <<'EOF' 2>&1 | tee -a "$OUT/gpu_check.log"
import glob, os
from pathlib import Path
from kforge_core.eval.harness import native
dirs = sorted({os.path.dirname(p) for p in glob.glob("/tmp/pytest-of-*/pytest-*/kforge-cache*/builds/load_inline/*/*.so") +
               glob.glob(os.environ.get("KFORGE_CACHE_DIR", "/nonexistent") + "/builds/load_inline/*/*.so")})
for d in dirs[:6]:
    for obj in sorted(glob.glob(d + "/*.o")):
        syms = native.imported_symbols(Path(obj), dynamic=False) or []
        print(os.path.basename(d), os.path.basename(obj), len(syms), "imports; outside the allow-list:",
              sorted(s for s in syms if not native.symbol_allowed(s, "load_inline_cuda")))
EOF
}

isolation() {  # KFORGE_ISOLATION=require: an evaluation that cannot be isolated fails instead of falling back
  echo "== isolation (as $(id -un))"
  # the honest examples, the hostile GPU candidates (tests/gpu/cases, the judge's hostile variants) and the handover,
  # isolated, as root and as an ordinary user (issue 20's done-when)
  local sel="nvrtc_example_correct or triton_example_correct or load_inline_cuda_correct or illegal_address or hostile_candidates or side_stream or infinite_loop or loosened_tolerance or forged_timer or says_which_memory"
  local rc
  if [ "${ISOLATION_AS:-both}" != user ]; then  # ISOLATION_AS=user: the ordinary user's half alone
    KFORGE_ISOLATION=require "$PY" -m pytest -q -rA -p no:cacheprovider tests/test_isolation.py tests/test_isolation_submounts.py tests/gpu/test_gpu_eval.py tests/gpu/test_gpu_judge.py tests/gpu/test_gpu_handover.py \
      -k "test_isolation or $sel" 2>&1 | tee -a "$OUT/gpu_check.log"
    rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || status=$rc
  fi
  if [ "$(id -u)" = 0 ]; then  # and as an ordinary user, where this interpreter is reachable by one
    id kforge-check >/dev/null 2>&1 || useradd -M kforge-check 2>/dev/null
    local cache; cache=$(mktemp -d); chmod 777 "$cache"
    local why
    if why=$(su kforge-check -s /bin/sh -c "PYTHONPATH='${PYTHONPATH:-}' '$PY' -c 'import torch'" 2>&1); then
      echo "== isolation (as kforge-check)"
      # the interpreter's own bin first (ninja, for load_inline builds, lives beside it), and an OUT it can write
      su kforge-check -s /bin/sh -c "cd '$PWD' && PYTHONPATH='${PYTHONPATH:-}' KFORGE_ISOLATION=require \
        PATH='$(dirname "$PY"):$PATH' OUT='$cache' KFORGE_CACHE_DIR='$cache' HOME='$cache' \
        '$PY' -m pytest -q -rA -p no:cacheprovider tests/test_isolation.py tests/test_isolation_submounts.py tests/gpu/test_gpu_eval.py tests/gpu/test_gpu_judge.py tests/gpu/test_gpu_handover.py \
        -k 'test_isolation or $sel'" 2>&1 | tee -a "$OUT/gpu_check.log"
      rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || status=$rc
    else
      echo "== isolation as an ordinary user: skipped ($PY is not usable by kforge-check: $(echo "$why" | tail -1))" \
        | tee -a "$OUT/gpu_check.log"
    fi
  fi
}

bench() {
  echo "== time to verdict"
  "$PY" bench/time_to_verdict_gpu.py --out "$OUT" "$@" 2>&1 | tee "$OUT/bench.log"
  local rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || status=$rc
}

fidelity() {  # same candidate evaluated 5 times: the spread of its speedup (goal <= 3 % for kernels >= 100 us)
  echo "== the CUDA timer on its own: its parts per call, busy and just woken (bench/timer_parts.py)"
  "$PY" bench/timer_parts.py --processes 2 --trials 40 2>&1 | tail -9 | tee "$OUT/timer_parts.log"
  echo "== timing fidelity, CUDA: the example (a ~0.05 ms kernel on an H200)"
  "$PY" bench/timing_fidelity.py --target cuda "$@" 2>&1 | tee "$OUT/fidelity.log"
  local rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || status=$rc
  echo "== timing fidelity, CUDA: the example at 256 MiB (a ~0.16 ms kernel: the goal's size)"
  "$PY" bench/timing_fidelity.py --target cuda --no-bare --problem bench/fixtures/swish_bias_256mib.py \
    --candidate platforms/examples/cuda/candidate.py 2>&1 | tee "$OUT/fidelity_256mib.log"
  rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || status=$rc
}

judge() {  # the judge split: tests, then time to verdict (NVRTC and Triton, cached: judged vs one process)
  echo "== judge split, GPU"
  "$PY" -m pytest -q -rA -s --timeout=420 -p no:cacheprovider tests/gpu/test_gpu_judge.py 2>&1 | tee -a "$OUT/gpu_check.log"
  local rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || status=$rc
  "$PY" bench/time_to_verdict_gpu.py --out "$OUT" --cases a2,a20,d2,d20 "$@" 2>&1 | tee "$OUT/bench_judge.log"
  rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || status=$rc
}

pool() {  # GPU children through the fork server and the warm pool: tests, then time to verdict before/after
  echo "== fork server + pre-started children, GPU"
  "$PY" -m pytest -q -rA -s --timeout=420 -p no:cacheprovider tests/gpu/test_gpu_pool.py 2>&1 | tee -a "$OUT/gpu_check.log"
  local rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || status=$rc
  for target in cuda triton; do  # one child's start alone: spawned / forked on demand / pre-started
    "$PY" bench/child_startup.py --target "$target" --runs 8 2>&1 | tee "$OUT/child_startup_$target.log"
    rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || status=$rc
  done
  "$PY" bench/time_to_verdict_gpu.py --out "$OUT" --cases a2s,a2f,a2,d2s,d2f,d2 "$@" 2>&1 | tee "$OUT/bench_pool.log"
  rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || status=$rc
}

builtin() {  # the built-in synthesizer over the gallery on CUDA (resumable: rows accumulate in $OUT)
  echo "== built-in synthesizer, CUDA"
  "$PY" bench/builtin_gallery.py --target cuda --json "$OUT/builtin_cuda.json" --resume "$@" 2>&1 | tee "$OUT/builtin.log"
  local rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || status=$rc
}

footprint() {  # the evaluator's memory at KernelBench's sizes (issue 26: out of memory on 6-8 GiB inputs); with
  # --baselines the torch.compile server too. Beside the verdicts' own reports (the judge's phases and the
  # candidate's process's account), nvidia-smi every 0.5 s: the device's total and each process's share at its peak
  # (the three processes together overflowed an 80 GB H100 at 6 GiB in / 6 GiB out, 2026-11-26)
  echo "== evaluator footprint, CUDA"
  ( while true; do echo "t=$(date +%s.%N)"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits; sleep 0.5; done ) > "$OUT/footprint_smi.log" 2>&1 &
  local mon=$!
  "$PY" bench/eval_footprint.py --target cuda "$@" 2>&1 | tee "$OUT/footprint.log"
  local rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || status=$rc
  kill "$mon" 2>/dev/null
  "$PY" - "$OUT/footprint_smi.log" <<'EOF' | tee -a "$OUT/footprint.log"
import sys
best, cur = (0, []), None
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("t="):
        cur = []
    elif cur is not None and "," in line:
        cur.append(line)
    elif cur is not None and line.isdigit() and int(line) > best[0]:
        best = (int(line), list(cur))
print(f"device memory at its peak (nvidia-smi): {best[0]} MiB; per process (pid, MiB): {'; '.join(best[1]) or '-'}")
EOF
}

scaling() {  # Ray over this host's GPUs, stopped inside the call's limit so that the finished benches come back
  echo "== Ray scaling"
  local folder="$PWD/bench/out/ray_multi_gpu"
  timeout "${SCALING_TIMEOUT:-560}" "$PY" scripts/ray_multi_gpu.py --out "$folder" "$@" 2>&1 | grep -v WARNING | \
    tee "$OUT/scaling.log"
  local rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || status=$rc
  for f in "$folder"/*/scaling_run.json "$folder"/*/results.json "$folder"/*/runs.db "$folder"/scaling.json; do
    [ -f "$f" ] && install -D -m 644 "$f" "$OUT/ray_multi_gpu/${f#"$folder"/}"
  done
}

kernelbench() {  # issue 26: the built-in agent over KernelBench's level 1 and 2 (a checkout, unchanged, carried in
  # .kb/), every GPU of the host one worker each, stopped inside the call's limit; resumable: copy the returned
  # kb_cuda/progress.jsonl into bench/out/kb_cuda/ here and name that folder in the next call's carry
  echo "== KernelBench, built-in agent, CUDA"
  local folder="$PWD/bench/out/${KB_OUT:-kb_cuda}"  # KB_OUT: another folder (another suite's resume state)
  mkdir -p "$folder"
  "$PY" -m kforge_core bench --suite "${KB_SUITE:-$PWD/.kb}" --target cuda --agent builtin --out "$folder" \
    --db "$folder/runs.db" --time-limit "${KB_TIME_LIMIT:-480}" --problem-time-limit "${KB_PROBLEM_LIMIT:-240}" \
    "$@" 2>&1 | grep -v -E "WARNING|INFO" | tee -a "$OUT/kernelbench.log"
  local rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || status=$rc
  for f in progress.jsonl results.json results.csv report.html runs.db; do  # runs.db: each run's events, timed
    [ -f "$folder/$f" ] && install -D -m 644 "$folder/$f" "$OUT/${KB_OUT:-kb_cuda}/$f"
  done
}

rayoverhead() {  # the local executor vs Ray on GPU 0, each bench a fresh process
  echo "== Ray vs local, one GPU"
  "$PY" bench/ray_overhead.py --target cuda "$@" 2>&1 | grep -v -E "WARNING|INFO" | tee "$OUT/ray_overhead.log"
  local rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || status=$rc
}

handover() {  # device-memory handover (harness/device_arena.py): its GPU tests and the judge's, then one evaluation
  # at KernelBench's sizes each way (device memory, then host memory with KFORGE_DEVICE_HANDOVER=0), stage by stage
  echo "== handover tests"
  timeout "${HANDOVER_TEST_LIMIT:-200}" "$PY" -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_handover.py \
    tests/gpu/test_gpu_judge.py 2>&1 | tail -15 | tee "$OUT/handover_tests.log"
  local p
  for p in ${HANDOVER_PROBLEMS:-.kb/level1/19_ReLU.py .kb/level1/23_Softmax.py}; do
    echo "== stage timeline, device memory: $p"
    timeout 150 "$PY" bench/stage_timeline.py "$p" --target cuda --runs 2 2>&1 | grep -v -E "WARNING|INFO" | \
      tee -a "$OUT/handover_timeline.log"
    echo "== stage timeline, host memory (KFORGE_DEVICE_HANDOVER=0): $p"
    KFORGE_DEVICE_HANDOVER=0 timeout 150 "$PY" bench/stage_timeline.py "$p" --target cuda --runs 1 2>&1 | \
      grep -v -E "WARNING|INFO" | tee -a "$OUT/handover_timeline.log"
  done
}

single() {  # one GPU, one 10-minute call: each step under its own limit, its log in $OUT as soon as it ends
  # (a step cut by its limit still leaves what it printed; the next step runs regardless)
  local step rc
  for step in "ttv:120:$PY bench/time_to_verdict_gpu.py --out $OUT --runs 5 --cases a2 --think 3" \
              "fidelity:150:$PY bench/timing_fidelity.py --target cuda --no-bare" \
              "first_verdict:130:$PY bench/first_verdict.py --target cuda --latency 10 --runs 2" \
              "rayoverhead:170:$PY bench/ray_overhead.py --target cuda --warm-up local --rounds 1 --suite ${SINGLE_SUITE:-level1/01_relu,level1/03_silu,level1/12_softmax,level2/01_linear_bias_gelu,level2/06_swish_bias_clamp,level2/08_standardize}"; do
    local name="${step%%:*}" rest="${step#*:}"; local limit="${rest%%:*}" cmd="${rest#*:}"
    case " ${SINGLE_STEPS:-ttv fidelity first_verdict rayoverhead} " in *" $name "*) ;; *) continue ;; esac
    limit="$(printenv "SINGLE_LIMIT_$name" || echo "$limit")"
    echo "== $name (limit ${limit} s): $cmd"
    timeout "$limit" $cmd 2>&1 | grep -v -E "WARNING|INFO" | tee "$OUT/single_$name.log" | tail -25
    rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || { echo "   ($name ended with status $rc)"; status=$rc; }
  done
}

case "$MODE" in
  probe) probe ;;
  tests) probe; tests; inline_report ;;
  isolation) probe; isolation ;;
  judge) probe; judge "$@" ;;
  pool) probe; pool "$@" ;;
  bench) bench "$@" ;;
  fidelity) fidelity "$@" ;;
  builtin) probe; builtin "$@" ;;
  footprint) probe; footprint "$@" ;;
  scaling) probe; scaling "$@" ;;
  rayoverhead) probe; rayoverhead "$@" ;;
  kernelbench) probe; kernelbench "$@" ;;
  single) probe; single ;;
  handover) probe; handover ;;
  all) probe; tests; inline_report; isolation; bench "$@"; fidelity ;;
  *) echo "usage: $0 [all|probe|tests|judge|pool|isolation|bench|fidelity|builtin|footprint|scaling|rayoverhead|kernelbench|single|handover] [args]"
     exit 2 ;;
esac
echo "== summary"; grep -E "[0-9]+ (passed|failed)" "$OUT/gpu_check.log" 2>/dev/null | tail -1
[ -f "$OUT/time_to_verdict_gpu.md" ] && cat "$OUT/time_to_verdict_gpu.md"
exit $status
