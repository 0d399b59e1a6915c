"""Add a per-channel tensor to an NCHW activation with broadcasting (C,1,1 -> N,C,H,W).

Memory-bound: the large operand is read once and the output written once; the small operand
is broadcast over batch and spatial dims.
GPU size: 128x256x128x128 fp32 (2 GiB in, 2 GiB out).
"""
import torch
import torch.nn as nn

batch_size = 128
channels = 256
height = 128
width = 128

CPU_SIZES = {"batch_size": 48, "channels": 64, "height": 64, "width": 64}


class Model(nn.Module):
    """out = x + y, with x of shape (N, C, H, W) and y of shape (C, 1, 1)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    y = torch.randn(channels, 1, 1)
    return [x, y]


def get_init_inputs():
    return []
