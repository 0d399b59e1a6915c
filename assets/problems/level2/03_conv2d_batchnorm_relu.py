"""3x3 convolution, inference-mode BatchNorm (running statistics), then ReLU.

Chain: conv2d(+bias) -> batch_norm(eval, fixed running mean/var, affine) -> ReLU. The norm uses
the running statistics in every mode (training=False is passed explicitly), so the forward is pure
and BN can be folded into the convolution. About 240 GFLOP at the GPU size.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32
in_channels = 64
out_channels = 128
height = 224
width = 224

CPU_SIZES = {"batch_size": 4, "in_channels": 32, "out_channels": 64, "height": 96, "width": 96}


class Model(nn.Module):
    """y = relu(batch_norm_eval(conv2d(x)))."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.bn = nn.BatchNorm2d(out_channels)
        with torch.no_grad():
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.2, 0.2)
            self.bn.running_mean.uniform_(-0.1, 0.1)
            self.bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        x = F.batch_norm(x, self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias,
                         training=False, eps=self.bn.eps)
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
