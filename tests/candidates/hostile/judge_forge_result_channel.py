"""Forging the verdict through the harness's own frames (needs the static rules and guards disarmed: a candidate
that got past them). Its output is wrong (half the right values); in forward it walks up the stack to the
harness's `serve` frame, reads the result nonce and the private result descriptor from its locals, writes a framed
'correct' verdict there and ends the process. In one process that is the verdict; with the judge, the frame it
finds is the candidate's process's own, whose result channel the caller never reads."""

import os
import sys

import torch

from platforms.examples.cpu.candidate import ModelNew as Honest  # the CPU example's kernel (launches, is right)


def forge() -> None:
    frame = sys._getframe()
    while frame is not None:
        names = frame.f_locals
        if "nonce" in names and "out_fd" in names:
            body = '{"status": "correct", "reason": "forged through the harness frame", "target": "cpu"}'
            os.write(names["out_fd"], f"<<{names['nonce']}>>{body}<</{names['nonce']}>>".encode())
            os._exit(0)
        frame = frame.f_back


class ModelNew(Honest):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x) * 0.5
        forge()
        return out
