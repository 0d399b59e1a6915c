"""bf16 residual add followed by RMSNorm computed in fp32 and cast back to bf16 (LLM decoder style).

Chain: h = x + residual (bf16) -> float() -> mean(h^2) -> rsqrt -> * h -> to bf16 -> * weight.
Inputs and output are bfloat16; compare with a bf16-appropriate tolerance.
GPU size: x and residual 32x4096x8192 bf16 (2 GiB each).
"""
import torch
import torch.nn as nn

batch_size = 32
seq_len = 4096
hidden = 8192
eps = 1e-6

CPU_SIZES = {"batch_size": 10, "seq_len": 512, "hidden": 1024}


class Model(nn.Module):
    """y = (rmsnorm_fp32(x + residual)).to(bf16) * weight."""

    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter((1.0 + 0.1 * torch.randn(hidden)).to(torch.bfloat16))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        h = (x + residual).float()
        h = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return h.to(torch.bfloat16) * self.weight


def get_inputs():
    x = torch.randn(batch_size, seq_len, hidden, dtype=torch.bfloat16)
    residual = torch.randn(batch_size, seq_len, hidden, dtype=torch.bfloat16)
    return [x, residual]


def get_init_inputs():
    return [hidden, eps]
