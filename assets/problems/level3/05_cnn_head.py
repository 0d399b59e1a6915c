"""Small CNN image classifier: three strided conv-BN-ReLU stages, global average pooling, linear head.

conv3x3/s2 (3 -> c) -> BN(eval) -> ReLU -> conv3x3/s2 (c -> 2c) -> BN -> ReLU -> conv3x3/s2
(2c -> 4c) -> BN -> ReLU -> adaptive avg pool to 1x1 -> flatten -> Linear(4c -> num_classes).
About 130 GFLOP at the GPU size (512 images of 224x224), plus the BN/ReLU passes over large maps.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 512
in_channels = 3
base_channels = 32
height = 224
width = 224
num_classes = 1000

CPU_SIZES = {"batch_size": 32, "height": 160, "width": 160, "base_channels": 16, "num_classes": 100}


class Model(nn.Module):
    """Three downsampling conv stages, global pooling and a classifier."""

    def __init__(self, in_channels: int, base_channels: int, num_classes: int):
        super().__init__()
        chans = [in_channels, base_channels, 2 * base_channels, 4 * base_channels]
        self.convs = nn.ModuleList(
            nn.Conv2d(chans[i], chans[i + 1], kernel_size=3, stride=2, padding=1, bias=False)
            for i in range(3))
        self.bns = nn.ModuleList(nn.BatchNorm2d(chans[i + 1]) for i in range(3))
        with torch.no_grad():
            for bn in self.bns:
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.uniform_(-0.2, 0.2)
                bn.running_mean.uniform_(-0.1, 0.1)
                bn.running_var.uniform_(0.5, 1.5)
        self.fc = nn.Linear(chans[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv, bn in zip(self.convs, self.bns):
            x = conv(x)
            x = F.batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias,
                             training=False, eps=bn.eps)
            x = torch.relu(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, base_channels, num_classes]
