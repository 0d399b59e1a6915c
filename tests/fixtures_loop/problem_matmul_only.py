"""A bare matrix product (an unsupported-problem test): nothing for the built-in synthesizer to write, the product
stays in the vendor library."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(8, 8), torch.randn(8, 8)]


def get_init_inputs():
    return []
