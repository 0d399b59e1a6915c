"""Pre-norm causal transformer decoder block: x + Attn(LN(x)), then + MLP(LN(x)) with GELU.

LayerNorm -> fused QKV linear -> causal F.scaled_dot_product_attention -> output linear -> residual;
LayerNorm -> Linear(d, 4d) -> GELU -> Linear(4d, d) -> residual. About 480-550 GFLOP at the GPU size
(8 x 2048 tokens, d_model 1024, 16 heads).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8
seq_len = 2048
d_model = 1024
num_heads = 16
mlp_ratio = 4

CPU_SIZES = {"batch_size": 4, "seq_len": 256, "d_model": 256, "num_heads": 4}


class Model(nn.Module):
    """GPT-2 style block (no dropout)."""

    def __init__(self, d_model: int, num_heads: int, mlp_ratio: int):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.attn_out = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, mlp_ratio * d_model)
        self.fc2 = nn.Linear(mlp_ratio * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, s, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_out(attn.transpose(1, 2).reshape(b, s, d))
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model)]


def get_init_inputs():
    return [d_model, num_heads, mlp_ratio]
