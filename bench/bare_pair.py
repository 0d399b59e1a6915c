"""A problem's reference and a candidate, loaded outside KForge's evaluator, for benches that time them bare in one
process (bench/timing_fidelity.py's back-to-back columns, bench/timing_states.py)."""

from __future__ import annotations

from pathlib import Path


def load_pair(problem_path: str, candidate_path: str, tag: str):
    """(problem module, eager Model, candidate ModelNew) built from the problem's init inputs, the candidate given the
    reference's weights where their names match."""
    from kforge_core.eval.harness.loading import candidate_class, import_file

    prob = import_file(Path(problem_path), f"kforge_{tag}_problem")
    cand = import_file(Path(candidate_path), f"kforge_{tag}_candidate")
    init = prob.get_init_inputs()
    ref, new = prob.Model(*init), candidate_class(cand)(*init)
    new.load_state_dict(ref.state_dict(), strict=False)
    return prob, ref, new
