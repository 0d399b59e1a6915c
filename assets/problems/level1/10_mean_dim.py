"""Mean reduction over the middle dimension of a 3-D tensor (B, N, D) -> (B, D).

Memory-bound reduction over a non-contiguous (strided) axis: each output element averages N values
that are D elements apart in memory.
GPU size: 64x4096x4096 fp32 (4 GiB read).
"""
import torch
import torch.nn as nn

batch_size = 64
reduce_dim = 4096
feature_dim = 4096

CPU_SIZES = {"batch_size": 64, "reduce_dim": 1024, "feature_dim": 1024}


class Model(nn.Module):
    """out[b, d] = mean_n x[b, n, d]."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, reduce_dim, feature_dim)]


def get_init_inputs():
    return []
