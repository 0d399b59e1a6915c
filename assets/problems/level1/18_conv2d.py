"""2-D convolution, 3x3 kernel, stride 1, padding 1, with bias, on an NCHW image batch.

Compute-bound: about 2 * N * Cout * H * W * Cin * 9 FLOPs (about 240 GFLOP at the GPU size).
"""
import torch
import torch.nn as nn

batch_size = 32
in_channels = 64
out_channels = 128
height = 224
width = 224
kernel_size = 3

CPU_SIZES = {"batch_size": 4, "in_channels": 32, "out_channels": 64, "height": 96, "width": 96}


class Model(nn.Module):
    """y = conv2d(x, W, b, stride=1, padding=kernel_size // 2)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
