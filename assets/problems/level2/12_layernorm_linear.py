"""Pre-norm projection: LayerNorm over the hidden dimension followed by a linear layer with bias.

Chain: LayerNorm(affine) -> x @ W^T + b. The normalization can be fused into the GEMM prologue.
About 550 GFLOP at the GPU size.
"""
import torch
import torch.nn as nn

batch_size = 16
seq_len = 1024
hidden = 4096
out_features = 4096

CPU_SIZES = {"batch_size": 4, "seq_len": 256, "hidden": 1024, "out_features": 1024}


class Model(nn.Module):
    """y = linear(layer_norm(x))."""

    def __init__(self, hidden: int, out_features: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.proj = nn.Linear(hidden, out_features)
        with torch.no_grad():
            self.norm.weight.add_(0.1 * torch.randn(hidden))
            self.norm.bias.add_(0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.norm(x))


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden, out_features]
