"""Problems whose reductions have few outputs over many elements each, in KernelBench's format: the CUDA writer splits
them over several blocks (`synth/backends/cuda/split.py`). KernelBench's MSELoss, BatchNorm and sum / mean over a
dim, and level 2's ConvTranspose + BatchNorm and Conv3d + GroupNorm + mean, at sizes a test run affords, plus
reductions of everything (sum, max, min, a variance: its mean and squares in one pass) and a BatchNorm whose mean is
far from zero. The CPU tests read and compile the candidates' kernels (`test_builtin_split_reductions.py`), the GPU
tests judge them (`gpu/test_gpu_split_reductions.py`)."""

from __future__ import annotations

from tests.kernelbench_cases import problem


def mse_loss(n: int) -> str:
    """KernelBench level1/94_MSELoss with n x n inputs (KernelBench's n: 32768)."""
    return "\n".join([
        "import torch", "import torch.nn as nn", "", "",
        "class Model(nn.Module):", "    def __init__(self):", "        super().__init__()", "",
        "    def forward(self, predictions, targets):",
        "        return torch.mean((predictions - targets) ** 2)", "", "",
        "def get_inputs():", "    scale = torch.rand(())",
        f"    return [torch.rand({n}, {n}) * scale, torch.rand({n}, {n})]", "", "",
        "def get_init_inputs():", "    return []", ""])


CASES = {
    "mse_loss": mse_loss(4096),
    # a few values over everything, and the mean of each of a few long rows
    "full_reductions": problem(forward="return (x.sum(), x.amax(), x.amin(), torch.var(x), x.mean(dim=(1, 2)))",
                               inputs="[torch.randn(4, 512, 1024) + 0.5]"),
    # KernelBench level1/33 (64 channels) on a smaller batch and map; the second's mean is far from zero (100 stds:
    # E[x^2] - E[x]^2 in float would keep about one digit of the variance). Not further: the mean is stored as a
    # float on both sides, and eager's is itself a few ulps off (at a 0.01 std, eager's own error against float64
    # is 5.7e-4, at 0.1 two ulps of 100 are 1.5e-4 of a std: both more than the default fp32 bound, measured on an
    # H100)
    "batch_norm": problem(forward="return self.bn(x)", inputs="[torch.rand(16, 64, 128, 128)]",
                          ctor="self.bn = nn.BatchNorm2d(64)"),
    "batch_norm_offset": problem(forward="return self.bn(x)", inputs="[torch.randn(8, 16, 256, 256) + 100.0]",
                                 ctor="self.bn = nn.BatchNorm2d(16)"),
    # KernelBench level1/47 and 48 (column kernels: many outputs, left as they are) on a smaller batch
    "sum_dim": problem(forward="return torch.sum(x, dim=1, keepdim=True)", inputs="[torch.rand(16, 4096, 4095)]"),
    "mean_dim": problem(forward="return torch.mean(x, dim=1)", inputs="[torch.rand(16, 4096, 4095)]"),
    # KernelBench level2/15, 11 and 23 on smaller batches
    "convt3d_bn_subtract": problem(
        forward="x = self.bn(self.conv_transpose(x)); return x - torch.mean(x, dim=(2, 3, 4), keepdim=True)",
        inputs="[torch.rand(4, 16, 16, 32, 32)]",
        ctor="self.conv_transpose = nn.ConvTranspose3d(16, 32, 3, stride=2, padding=1); "
             "self.bn = nn.BatchNorm3d(32)"),
    "convt2d_bn_tanh_pool_gn": problem(
        forward="return self.gn(self.pool(torch.tanh(self.bn(self.conv_transpose(x)))))",
        inputs="[torch.rand(64, 64, 32, 32)]",
        ctor="self.conv_transpose = nn.ConvTranspose2d(64, 128, 5, stride=1, padding=1); "
             "self.bn = nn.BatchNorm2d(128); self.pool = nn.MaxPool2d(kernel_size=2, stride=2); "
             "self.gn = nn.GroupNorm(8, 128)"),
    "conv3d_gn_mean": problem(forward="return self.gn(self.conv(x)).mean(dim=[1, 2, 3, 4])",
                              inputs="[torch.rand(32, 3, 24, 32, 32)]",
                              ctor="self.conv = nn.Conv3d(3, 24, 3); self.gn = nn.GroupNorm(8, 24)"),
}

# the cases whose built-in candidates have a kernel that may split (the column kernels of sum_dim / mean_dim do not)
SPLITTING = ("mse_loss", "full_reductions", "batch_norm", "batch_norm_offset", "convt3d_bn_subtract",
             "convt2d_bn_tanh_pool_gn", "conv3d_gn_mean")
