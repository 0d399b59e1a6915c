"""Square matrix multiplication C = A @ B of two N x N fp32 matrices.

Compute-bound: 2*N^3 FLOPs (about 1.1 TFLOP at N = 8192).
"""
import torch
import torch.nn as nn

N = 8192

CPU_SIZES = {"N": 1024}


class Model(nn.Module):
    """C = A @ B."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
