"""The guards' snapshot of what a candidate's process must not change (kforge_core.eval.harness.process_state), for
the parts a candidate file cannot reach past the static rules: tested on the snapshot itself."""

from __future__ import annotations


def test_platform_classes_are_watched_by_identity():
    """Past the static rules, a flush, synchronisation or timer replaced on a platform or timer class is a changed
    identity in the guards' snapshot (as a patched torch function is), and the worker's flush goes through the class,
    so a replacement set on the instance alone is never called."""
    from kforge_core.eval.harness import guards, process_state
    from kforge_core.platform import Timer, get_platform
    from platforms.cpu import CpuPlatform

    before = guards.snapshot_state()
    saved = CpuPlatform.flush_cache, Timer.time_ms
    try:
        CpuPlatform.flush_cache = lambda self: None
        Timer.time_ms = lambda self, fn: 0.001
        changed = guards.changed_state(before)
    finally:
        CpuPlatform.flush_cache, Timer.time_ms = saved
    assert "platforms.cpu.CpuPlatform.flush_cache" in changed and "kforge_core.platform.Timer.time_ms" in changed
    assert guards.changed_state(before) == []  # put back: nothing else moved

    platform, calls = get_platform("cpu"), []
    platform.flush_cache = lambda: calls.append("instance")  # an instance attribute: not what the worker calls
    try:
        CpuPlatform.flush_cache, real = (lambda self: calls.append("class")), CpuPlatform.flush_cache
        process_state.class_call(platform, "flush_cache")
    finally:
        CpuPlatform.flush_cache = real
        del platform.flush_cache
    assert calls == ["class"]
