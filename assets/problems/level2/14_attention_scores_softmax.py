"""Attention probabilities: batched Q @ K^T, scaled by 1/sqrt(head_dim), then softmax over keys.

Chain: batched matmul -> * scale -> softmax(dim=-1). The (seq x seq) score matrix is the
output, so the softmax can be fused into the GEMM epilogue only row-block-wise.
GPU size: q, k 8x16x2048x64 fp32; output 8x16x2048x2048 (2 GiB).
"""
import math

import torch
import torch.nn as nn

batch_size = 8
num_heads = 16
seq_len = 2048
head_dim = 64

CPU_SIZES = {"batch_size": 3, "num_heads": 8, "seq_len": 512, "head_dim": 64}


class Model(nn.Module):
    """p = softmax(q @ k^T / sqrt(head_dim), dim=-1)."""

    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(q, k.transpose(-2, -1))
        scores = scores * (1.0 / math.sqrt(q.shape[-1]))
        return torch.softmax(scores, dim=-1)


def get_inputs():
    q = torch.randn(batch_size, num_heads, seq_len, head_dim)
    k = torch.randn(batch_size, num_heads, seq_len, head_dim)
    return [q, k]


def get_init_inputs():
    return []
