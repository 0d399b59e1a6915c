"""Linear projection (no built-in bias) followed by a separate bias add and GELU.

Chain: x @ W^T -> + bias -> GELU (erf). The bias add and activation are the GEMM's epilogue
candidates. About 1.1 TFLOP at the GPU size.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8192
in_features = 8192
out_features = 8192

CPU_SIZES = {"batch_size": 1024, "in_features": 1024, "out_features": 1024}


class Model(nn.Module):
    """y = gelu(x @ W^T + bias)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(0.1 * torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.fc(x)
        x = x + self.bias
        return F.gelu(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
