"""ViT patch embedding: 16x16 strided conv patchify, flatten to tokens, prepend a class token, add positions, LayerNorm.

conv2d(k=16, s=16) -> flatten(2).transpose(1, 2) -> cat(cls_token) -> + pos_embed -> LayerNorm.
About 120 GFLOP at the GPU size (512 images of 224x224, embed dim 768).
"""
import torch
import torch.nn as nn

batch_size = 512
in_channels = 3
image_size = 224
patch_size = 16
embed_dim = 768

CPU_SIZES = {"batch_size": 16, "image_size": 224, "embed_dim": 256}


class Model(nn.Module):
    """tokens = layer_norm(cat(cls, patchify(x)) + pos_embed)."""

    def __init__(self, in_channels: int, image_size: int, patch_size: int, embed_dim: int):
        super().__init__()
        num_patches = (image_size // patch_size) ** 2
        self.proj = nn.Conv2d(in_channels, embed_dim, kernel_size=patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(0.02 * torch.randn(1, num_patches + 1, embed_dim))
        self.norm = nn.LayerNorm(embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.proj(x).flatten(2).transpose(1, 2)  # (b, num_patches, embed_dim)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat((cls, x), dim=1) + self.pos_embed
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, image_size, image_size)]


def get_init_inputs():
    return [in_channels, image_size, patch_size, embed_dim]
