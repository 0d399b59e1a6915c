"""Multi-head self-attention block written out in torch ops: QKV projection, softmax(QK^T/sqrt(d))V, output projection.

Fused QKV linear -> split heads -> scores = Q @ K^T * scale -> softmax -> @ V -> merge heads ->
output linear. No mask, no dropout. About 275 GFLOP at the GPU size (8 x 2048 tokens, d_model
1024, 16 heads), plus a 2 GiB score matrix if materialized.
"""
import math

import torch
import torch.nn as nn

batch_size = 8
seq_len = 2048
d_model = 1024
num_heads = 16

CPU_SIZES = {"batch_size": 8, "seq_len": 256, "d_model": 256, "num_heads": 4}


class Model(nn.Module):
    """y = out_proj(softmax(q k^T / sqrt(head_dim)) v)."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        assert d_model % num_heads == 0
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        qkv = self.qkv(x).view(b, s, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (b, heads, s, head_dim)
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v)  # (b, heads, s, head_dim)
        ctx = ctx.transpose(1, 2).reshape(b, s, d)
        return self.out_proj(ctx)


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model)]


def get_init_inputs():
    return [d_model, num_heads]
