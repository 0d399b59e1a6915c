"""Post-norm transformer MLP block: LayerNorm(x + Linear(GELU(Linear(x)))).

Linear(d_model -> d_ff) -> GELU -> Linear(d_ff -> d_model) -> residual add -> LayerNorm.
About 1.1 TFLOP at the GPU size (16384 tokens, d_model 2048, d_ff 8192).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8
seq_len = 2048
d_model = 2048
d_ff = 8192

CPU_SIZES = {"batch_size": 2, "seq_len": 256, "d_model": 512, "d_ff": 2048}


class Model(nn.Module):
    """y = layer_norm(x + fc2(gelu(fc1(x))))."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc2(F.gelu(self.fc1(x)))
        return self.norm(x + h)


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model)]


def get_init_inputs():
    return [d_model, d_ff]
