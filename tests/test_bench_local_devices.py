"""The local executor's devices: one worker per GPU the bench may use (a 2-GPU H200 bench ran one worker, the
platform base class's count), pinned by CUDA_VISIBLE_DEVICES as the user spelled it."""

from __future__ import annotations

import torch

from kforge_core.bench.executors import visible_devices
from platforms.cuda._common import GpuPlatform


def test_gpu_count_comes_from_nvml(monkeypatch):
    monkeypatch.setattr(torch.cuda, "_device_count_nvml", lambda: 2)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: (_ for _ in ()).throw(AssertionError("runtime asked")))
    assert GpuPlatform().device_count() == 2


def test_gpu_count_falls_back_to_the_runtime(monkeypatch):
    monkeypatch.setattr(torch.cuda, "_device_count_nvml", lambda: -1)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    assert GpuPlatform().device_count() == 3
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert GpuPlatform().device_count() == 1  # never zero workers


def test_workers_keep_the_users_device_names(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 3")
    assert visible_devices(2) == ["2", "3"]
    assert visible_devices(1) == ["2"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert visible_devices(2) == ["0", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc")
    assert visible_devices(1) == ["GPU-abc"]
