"""Attention-score softmax: softmax(scores * scale + additive causal mask) over the key dimension.

Chain: * scale -> + mask (seq x seq, broadcast over batch and heads; -1e4 above the diagonal)
-> softmax(dim=-1). GPU size: scores 8x16x2048x2048 fp32 (2 GiB in, 2 GiB out).
"""
import math

import torch
import torch.nn as nn

batch_size = 8
num_heads = 16
seq_len = 2048
head_dim = 64

CPU_SIZES = {"batch_size": 2, "num_heads": 14, "seq_len": 512}


class Model(nn.Module):
    """y = softmax(scores * head_dim**-0.5 + mask, dim=-1)."""

    def __init__(self, head_dim: int):
        super().__init__()
        self.scale = 1.0 / math.sqrt(head_dim)

    def forward(self, scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.softmax(scores * self.scale + mask, dim=-1)


def get_inputs():
    scores = 4.0 * torch.randn(batch_size, num_heads, seq_len, seq_len)
    mask = torch.triu(torch.full((seq_len, seq_len), -10000.0), diagonal=1)
    return [scores, mask]


def get_init_inputs():
    return [head_dim]
