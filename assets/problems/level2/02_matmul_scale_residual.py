"""Square linear layer, scaled output, then residual add of the layer input.

Chain: linear(x) -> * scale -> + x. The residual requires in_features == out_features.
About 1.1 TFLOP at the GPU size.
"""
import torch
import torch.nn as nn

batch_size = 8192
features = 8192
scale = 0.5

CPU_SIZES = {"batch_size": 1024, "features": 1024}


class Model(nn.Module):
    """y = linear(x) * scale + x."""

    def __init__(self, features: int, scale: float):
        super().__init__()
        self.fc = nn.Linear(features, features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        y = y * self.scale
        return y + x


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features, scale]
