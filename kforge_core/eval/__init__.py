"""The evaluator: verdicts on candidate programs, hard to fool (`evaluator.evaluate`).

Parent side (the caller's process): `evaluator` (request -> verdict), `sandbox` (the child process: private
directory, limits, timeouts), `child_setup` (its scrubbed environment and isolation plan), `forkserver`
(pre-imported CPU and CUDA/Triton children), `warm_pool` (pre-started children), `rules` (the static
rules; `refusals`, `python_check`, `native_scan` apply them), `tolerance`, `verdict`, `roofline`, `ceilings`. Child
side: `harness/`, which runs next to the candidate.
"""
