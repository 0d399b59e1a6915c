"""The bench's cluster options without a cluster: where the address comes from, what a problem asks Ray for, the
per-device figures of a bench that ran on mixed devices, and the errors a user gets (bad address, no Ray)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kforge_core.bench.cluster import check_address, resolve_address, task_resources
from kforge_core.bench.metrics import summarize
from kforge_core.bench.report import render_html
from kforge_core.errors import UsageError
from tests.cli_env import REPO, cli_env


@pytest.mark.parametrize("address", ["auto", "ray://head.example:10001", "10.0.0.5:6379", "local", "[::1]:6379"])
def test_addresses_accepted(address):
    assert check_address(f" {address} ") == address


@pytest.mark.parametrize("address", ["ray://head", "http://head:8265", "head", "auto; rm -rf /", ""])
def test_bad_addresses_are_refused(address):
    with pytest.raises(UsageError, match="is not 'local', 'auto'"):
        check_address(address)


def test_address_precedence(tmp_path):
    settings = tmp_path / "settings.toml"
    settings.write_text('[cluster]\naddress = "ray://from-file:10001"\n')
    env = {"KFORGE_RAY_ADDRESS": "auto"}
    assert resolve_address("10.0.0.1:6379", env, settings) == ("10.0.0.1:6379", "flag")
    assert resolve_address(None, env, settings) == ("auto", "env:KFORGE_RAY_ADDRESS")
    assert resolve_address(None, {}, settings) == ("ray://from-file:10001", "settings")
    assert resolve_address("local", env, settings) == (None, "flag")  # this machine, whatever else says
    assert resolve_address(None, {}, tmp_path / "missing.toml") == (None, "")
    settings.write_text('[cluster]\naddress = "nonsense"\n')
    with pytest.raises(UsageError):
        resolve_address(None, {}, settings)


def test_resources_per_device_type():
    assert task_resources("cuda") == {"num_gpus": 1, "num_cpus": 1}
    assert task_resources("cpu", 2) == {"num_cpus": 2}
    assert task_resources("mps") == {"num_cpus": 1, "resources": {"metal": 1}}
    assert task_resources("npu") == {"num_cpus": 1, "resources": {"npu": 1}}  # a third-party platform's device
    with pytest.raises(UsageError, match="positive"):
        task_resources("cpu", 0)


def _rec(problem, device, speedup):
    return {"problem": problem, "level": 1, "status": "succeeded", "correct": True, "device": device,
            "speedup_vs_eager": speedup, "speedup_vs_compiled": speedup}


def test_mixed_devices_get_their_own_figures_and_a_warning():
    records = [_rec("a", "NVIDIA H100", 2.0), _rec("b", "NVIDIA H100", 2.0), _rec("c", "NVIDIA A10G", 0.5)]
    summary = summarize(records)
    assert summary["mixed_devices"] == ["NVIDIA A10G", "NVIDIA H100"]
    assert summary["per_device"]["NVIDIA H100"]["geomean_speedup_vs_eager_failures_as_1"] == pytest.approx(2.0)
    assert summary["per_device"]["NVIDIA A10G"]["geomean_speedup_vs_eager_failures_as_1"] == pytest.approx(0.5)
    assert "Mixed devices" in render_html(records, summary, {})
    one = summarize(records[:2])
    assert "mixed_devices" not in one and "per_device" not in one and one["devices"] == ["NVIDIA H100"]
    assert "Mixed devices" not in render_html(records[:2], one, {})


def _cli(tmp_path, *args, env_extra=None):
    env = {**cli_env(tmp_path), **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "kforge_core", "bench", "--suite", "level1/01_relu", "--target",
                           "cpu", "--agent", "builtin", "--out", str(tmp_path / "out"), "--db",
                           str(tmp_path / "runs.db"), *args], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=120)


def test_cli_refuses_a_bad_address(tmp_path):
    done = _cli(tmp_path, "--cluster", "not an address")
    assert done.returncode == 2 and "Error:" in done.stderr and "not 'local', 'auto'" in done.stderr
    done = _cli(tmp_path, env_extra={"KFORGE_RAY_ADDRESS": "bogus"})
    assert done.returncode == 2 and "'bogus'" in done.stderr
    done = _cli(tmp_path, "--cluster", "auto", "--devices", "2")
    assert done.returncode == 2 and "--devices is for this machine" in done.stderr
    done = _cli(tmp_path, "--cluster", "auto", "--best-of", "0")
    assert done.returncode == 2 and "--best-of must be at least 1, got 0" in done.stderr
    assert not (tmp_path / "out" / "progress.jsonl").exists()


def test_cli_without_ray_says_how_to_install_it(tmp_path):
    blocked = tmp_path / "noray"
    (blocked / "ray").mkdir(parents=True)
    (blocked / "ray" / "__init__.py").write_text("raise ImportError('ray is not installed (test)')\n")
    done = _cli(tmp_path, "--cluster", "auto", env_extra={"PYTHONPATH": f"{blocked}:{REPO}"})
    assert done.returncode == 2, done.stderr
    assert "--cluster needs Ray" in done.stderr and "requirements-ray.txt" in done.stderr
