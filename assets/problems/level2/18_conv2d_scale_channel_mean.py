"""3x3 convolution, per-channel scale, LeakyReLU, mean over the channels, then tanh.

Chain: conv2d(+bias) -> * scale[C, 1, 1] -> LeakyReLU(0.1) -> mean over dim 1 (keepdim) -> tanh (KernelBench level
2's conv / scale / channel-reduction pattern). The reduction runs over a leading dim (a column kernel, no
transposing copy); the scale and activation before it and the tanh after it can run inside that kernel. About
76 GFLOP at the GPU size.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 64
in_channels = 16
out_channels = 64
height = 256
width = 256

CPU_SIZES = {"batch_size": 8, "in_channels": 8, "out_channels": 32, "height": 64, "width": 64}


class Model(nn.Module):
    """y = tanh(mean(leaky_relu(conv2d(x) * scale, 0.1), dim=1, keepdim=True))."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3)
        self.scale = nn.Parameter(1.0 + 0.2 * torch.randn(out_channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.leaky_relu(self.conv(x) * self.scale, 0.1)
        return torch.tanh(torch.mean(x, dim=1, keepdim=True))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
