"""Cosine-similarity classifier logits: L2-normalize inputs and class weights, matmul, scale by a temperature.

Chain: normalize(x, dim=-1) -> normalize(W, dim=-1) -> x_n @ W_n^T -> * logit_scale (CLIP style).
About 1.1 TFLOP at the GPU size.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8192
features = 8192
num_classes = 8192
logit_scale = 20.0

CPU_SIZES = {"batch_size": 1024, "features": 1024, "num_classes": 1024}


class Model(nn.Module):
    """logits = logit_scale * normalize(x) @ normalize(W)^T."""

    def __init__(self, features: int, num_classes: int, logit_scale: float):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(num_classes, features))
        self.logit_scale = logit_scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_n = F.normalize(x, dim=-1)
        w_n = F.normalize(self.weight, dim=-1)
        return torch.matmul(x_n, w_n.t()) * self.logit_scale


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features, num_classes, logit_scale]
