"""ResNet basic block: conv3x3-BN-ReLU-conv3x3-BN plus identity shortcut, then ReLU.

Both BatchNorms use running statistics (training=False in every mode), so they fold into the
convolutions. About 120 GFLOP at the GPU size (64 x 128 x 56 x 56).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 64
channels = 128
height = 56
width = 56

CPU_SIZES = {"batch_size": 8, "channels": 64, "height": 32, "width": 32}


class Model(nn.Module):
    """y = relu(bn2(conv2(relu(bn1(conv1(x))))) + x)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        with torch.no_grad():
            for bn in (self.bn1, self.bn2):
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.uniform_(-0.2, 0.2)
                bn.running_mean.uniform_(-0.1, 0.1)
                bn.running_var.uniform_(0.5, 1.5)

    @staticmethod
    def _bn(x: torch.Tensor, bn: nn.BatchNorm2d) -> torch.Tensor:
        return F.batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias,
                            training=False, eps=bn.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self._bn(self.conv1(x), self.bn1))
        out = self._bn(self.conv2(out), self.bn2)
        return torch.relu(out + x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
