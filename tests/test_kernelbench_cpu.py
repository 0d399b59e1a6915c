"""scripts/kernelbench_cpu.py over a KernelBench-layout tree of our own, at GPU sizes: the copies keep the text
and the structure, shrink the sizes (not kernel sizes, strides or group counts), keep the relations between sizes,
run on the CPU, and a problem that cannot be sized is left out with its reason."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

ELEMENTWISE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

batch_size = 4096
dim = 16384 * 2

def get_inputs():
    return [torch.rand(batch_size, dim)]

def get_init_inputs():
    return []
'''

# LayerNorm over the channel count applied to the last dimension: valid only while W == out_channels
CONV_NORM = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, num_groups):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=1)
        self.norm = nn.LayerNorm(out_channels)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x):
        return self.group_norm(self.norm(self.conv(x)))

batch_size = 128
in_channels = 64
out_channels = 256
height, width = 128, 256
kernel_size = 3
num_groups = 8

def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups]
'''

HARD_CODED = ELEMENTWISE.replace("return torch.relu(x)", "return torch.relu(x) + torch.ones(32768)")


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("kernelbench_cpu", REPO / "scripts" / "kernelbench_cpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tree(root: Path) -> Path:
    for level, name, text in ((1, "19_ReLU.py", ELEMENTWISE), (1, "7_Hard_coded.py", HARD_CODED),
                              (2, "3_Conv2d_LayerNorm_GroupNorm.py", CONV_NORM)):
        (root / f"level{level}").mkdir(parents=True, exist_ok=True)
        (root / f"level{level}" / name).write_text(text)
    return root


def _run(path: Path):
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102 - our own test problems
    model = namespace["Model"](*namespace["get_init_inputs"]())
    return model(*namespace["get_inputs"]())


def test_copies_are_cpu_sized_and_keep_the_structure(script, tmp_path, capsys):
    src, out = _tree(tmp_path / "KernelBench"), tmp_path / "cpu"
    assert script.main([str(src), str(out)]) == 0
    sizes = json.loads((out / "sizes.json").read_text())["problems"]

    relu = sizes["level1/19_ReLU"]
    assert relu["changed"]["batch_size"][0] == 4096 and relu["changed"]["dim"][0] == 32768
    assert relu["elements"] <= script.ELEMENTS
    copy = (out / "level1" / "19_ReLU.py").read_text()
    # the same text but for the two size literals (`16384 * 2` became one number)
    assert copy.replace(str(relu["changed"]["batch_size"][1]), "4096", 1).replace(
        f"dim = {relu['changed']['dim'][1]}", "dim = 16384 * 2") == ELEMENTWISE
    assert _run(out / "level1" / "19_ReLU.py").numel() == relu["changed"]["batch_size"][1] * \
        relu["changed"]["dim"][1]

    conv = sizes["level2/3_Conv2d_LayerNorm_GroupNorm"]
    copy = (out / "level2" / "3_Conv2d_LayerNorm_GroupNorm.py").read_text()
    assert "kernel_size = 3" in copy and "num_groups = 8" in copy  # structural numbers keep their values
    assert conv["changed"]["out_channels"][1] == conv["changed"]["width"][1]  # the relation LayerNorm needs
    assert conv["changed"]["out_channels"][1] % 8 == 0  # still divisible by the group count
    assert conv["flops"] <= script.FLOPS * conv["budget_x"]
    assert _run(out / "level2" / "3_Conv2d_LayerNorm_GroupNorm.py").shape[1] == conv["changed"]["out_channels"][1]

    # `+ torch.ones(32768)`: a size hard-coded in forward cannot follow the shrunk one
    why = sizes["level1/7_Hard_coded"]["left_out"]
    assert "broadcast a dimension of length 32768" in why and "uniform" in why  # every strategy was tried
    assert not (out / "level1" / "7_Hard_coded.py").exists()
    assert "2 of 3 problems written" in capsys.readouterr().out


def test_refuses_to_write_into_the_repository(script, tmp_path):
    with pytest.raises(SystemExit):
        script.main([str(_tree(tmp_path / "kb")), str(REPO / "kernelbench_copies")])
    assert not (REPO / "kernelbench_copies").exists()
