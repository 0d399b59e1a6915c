"""Stack of three conv3x3 -> inference BatchNorm -> ReLU stages (VGG / ResNet stem style).

Each stage: conv2d(3x3, padding 1, no bias) -> batch_norm with running statistics
(training=False in every mode) -> ReLU. Channels in -> mid -> mid -> out, resolution kept.
About 100 GFLOP at the GPU size.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32
in_channels = 32
mid_channels = 64
out_channels = 64
height = 128
width = 128

CPU_SIZES = {"batch_size": 8, "in_channels": 16, "mid_channels": 32, "out_channels": 32,
             "height": 64, "width": 64}


class Model(nn.Module):
    """Three (conv3x3 -> BN(eval) -> ReLU) stages."""

    def __init__(self, in_channels: int, mid_channels: int, out_channels: int):
        super().__init__()
        chans = [in_channels, mid_channels, mid_channels, out_channels]
        self.convs = nn.ModuleList(
            nn.Conv2d(chans[i], chans[i + 1], kernel_size=3, padding=1, bias=False) for i in range(3))
        self.bns = nn.ModuleList(nn.BatchNorm2d(chans[i + 1]) for i in range(3))
        with torch.no_grad():
            for bn in self.bns:
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.uniform_(-0.2, 0.2)
                bn.running_mean.uniform_(-0.1, 0.1)
                bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv, bn in zip(self.convs, self.bns):
            x = conv(x)
            x = F.batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias,
                             training=False, eps=bn.eps)
            x = torch.relu(x)
        return x


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, mid_channels, out_channels]
