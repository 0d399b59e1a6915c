"""GroupNorm (32 groups, affine) followed by SiLU on an NCHW feature map (diffusion U-Net style).

Chain: per-(sample, group) mean and variance -> normalize -> per-channel scale and shift -> SiLU.
GPU size: 64x512x128x128 fp32 (2 GiB in, 2 GiB out).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 64
channels = 512
height = 128
width = 128
num_groups = 32

CPU_SIZES = {"batch_size": 12, "channels": 128, "height": 64, "width": 64}


class Model(nn.Module):
    """y = silu(group_norm(x))."""

    def __init__(self, num_groups: int, channels: int):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, channels)
        with torch.no_grad():
            self.norm.weight.add_(0.1 * torch.randn(channels))
            self.norm.bias.add_(0.1 * torch.randn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.norm(x))


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [num_groups, channels]
