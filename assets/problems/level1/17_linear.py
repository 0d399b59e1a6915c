"""Fully connected layer y = x @ W^T + b (nn.Linear) on a batch of feature vectors.

Compute-bound GEMM with a transposed weight and a bias epilogue: 2*B*in*out FLOPs
(about 1.1 TFLOP at 8192 x 8192 x 8192).
"""
import torch
import torch.nn as nn

batch_size = 8192
in_features = 8192
out_features = 8192

CPU_SIZES = {"batch_size": 1024, "in_features": 1024, "out_features": 1024}


class Model(nn.Module):
    """y = linear(x)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
