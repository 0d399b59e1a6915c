"""Rotary position embedding (RoPE, rotate-half form) applied to a (batch, heads, seq, head_dim) tensor.

Chain: x * cos -> rotate_half(x) = cat(-x2, x1) -> * sin -> add. cos and sin are (seq, head_dim)
tables broadcast over batch and heads. GPU size: x 32x32x4096x128 fp32 (2 GiB in, 2 GiB out).
"""
import torch
import torch.nn as nn

batch_size = 32
num_heads = 32
seq_len = 4096
head_dim = 128
rope_base = 10000.0

CPU_SIZES = {"batch_size": 10, "num_heads": 8, "seq_len": 1024, "head_dim": 64}


class Model(nn.Module):
    """y = x * cos + rotate_half(x) * sin."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        x1 = x[..., :half]
        x2 = x[..., half:]
        rotated = torch.cat((-x2, x1), dim=-1)
        return x * cos + rotated * sin


def get_inputs():
    x = torch.randn(batch_size, num_heads, seq_len, head_dim)
    inv_freq = 1.0 / (rope_base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return [x, angles.cos(), angles.sin()]


def get_init_inputs():
    return []
