"""The judge's steps around one call of the candidate, the same whether it runs in its own process
(`remote.RemoteCandidate`: the step is carried out there, or asked of it) or beside the checks (`KFORGE_JUDGE=0`):
its copy of the inputs, the inputs' check after the call, the poisoning of fresh memory before it, and the random
numbers it draws. Used by correctness.py and timing.py."""

from __future__ import annotations

import random

from .compare import fingerprint
from .loading import clone
from .remote import RemoteCandidate


def input_print(model, inputs):
    """What `inputs_modified` compares with after the call: nothing for a candidate in its own process (it checks
    its own copy), the inputs' fingerprint otherwise."""
    return None if isinstance(model, RemoteCandidate) else fingerprint(inputs)


def inputs_modified(model, inputs, pristine) -> bool:
    """Whether the candidate's last call left its inputs changed (`pristine`: `input_print` from before it)."""
    if isinstance(model, RemoteCandidate):
        return model.inputs_changed
    return fingerprint(inputs) != pristine


def fresh_rng_seed() -> int:
    """A seed for the random numbers a forward draws (Dropout...), drawn apart from the input seeds: a candidate
    told it learns nothing about the inputs to come."""
    return random.SystemRandom().getrandbits(62)


def candidate_copy(model, inputs: list) -> list:
    """The candidate's own copy of the inputs: for a candidate in its own process, written straight into the
    arena it reads them from (`RemoteCandidate.stage`: the judge holds no second copy); otherwise a clone."""
    if isinstance(model, RemoteCandidate):
        staged = model.stage(inputs)
        if staged is not None:
            return staged
    return clone(inputs)


def poison_for_call(platform, model, sizes: list[int]) -> None:
    """Fill fresh memory of these sizes with NaN and free it, in the process the candidate's next call runs in
    (correctness.py, step 2): for a candidate in its own process that is there, right before its forward (the
    judge's own memory is out of its reach, and poisoning it would only add to the judge's peak)."""
    if isinstance(model, RemoteCandidate):
        model.next_poison = list(sizes)
    else:
        platform.poison_allocations(sizes)


def seed_for_call(platform, model, rng_seed: int) -> None:
    """The same random numbers for the reference and the candidate (the policy for problems that draw random
    numbers): this process's generators, and for a candidate in its own process the seed its next call starts
    from."""
    platform.seed(rng_seed)
    if isinstance(model, RemoteCandidate):
        model.next_rng_seed = rng_seed
