"""3x3 convolution, GELU, 3x3 max pooling (stride 2, padding 1), then a per-channel bias and a sigmoid.

Chain: conv2d(+bias) -> GELU -> max_pool2d over overlapping padded windows -> + bias[C, 1, 1] -> sigmoid
(KernelBench level 2's conv / activation / pool / bias-add pattern). The activation before the pool and the bias
and sigmoid after it can run inside the pooling kernel. About 75 GFLOP at the GPU size.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 128
in_channels = 32
out_channels = 64
height = 128
width = 128

CPU_SIZES = {"batch_size": 8, "in_channels": 16, "out_channels": 32, "height": 64, "width": 64}


class Model(nn.Module):
    """y = sigmoid(max_pool2d(gelu(conv2d(x)), 3, 2, 1) + bias)."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3)
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.bias = nn.Parameter(0.1 * torch.randn(out_channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.conv(x))
        x = self.pool(x) + self.bias
        return torch.sigmoid(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
