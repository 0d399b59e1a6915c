"""Problem and scripted model replies for end-to-end runs through the real loop with FakeOpenAIServer (the
OpenAI-compatible test server): a build failure, a correct kernel, then a faster one."""

from __future__ import annotations

import json

PROBLEM = '''"""ReLU times two."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2


def get_inputs():
    return [torch.randn(512, 1024)]


def get_init_inputs():
    return []
'''

_PROGRAM = '''import torch
import torch.nn as nn
from platforms.cpu import compile_cpp

SOURCE = r"""
#include <cstdint>
extern "C" void relu2(const float* x, float* out, int64_t n) {
    PRAGMA
    for (int64_t i = 0; i < n; ++i) {
        float v = x[i] SEMI
        out[i] = v > 0.0f ? 2.0f * v : 0.0f;
    }
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.lib = compile_cpp(SOURCE)

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        self.lib.relu2(x, out, x.numel())
        return out
'''
BROKEN = _PROGRAM.replace("PRAGMA\n", "\n").replace(" SEMI", "")  # missing ';': a compile error
CORRECT = _PROGRAM.replace("PRAGMA\n", "\n").replace(" SEMI", ";")
FASTER = _PROGRAM.replace("PRAGMA", "#pragma omp parallel for simd").replace(" SEMI", ";")
PROGRAMS = (BROKEN, CORRECT, FASTER)

ANALYSIS = "```json\n" + json.dumps([{
    "title": "Parallelize the loop", "change": "add `#pragma omp parallel for simd` before the loop",
    "why": "the custom kernel takes most of the time on one core", "expected_gain": "~2x"}]) + "\n```"

GEN_MODEL, ANALYSIS_MODEL = "fake-coder", "fake-analyst"


def responder():
    """A FakeOpenAIServer responder: generation requests get the programs in order (then the last one again),
    analysis requests the recommendation list."""
    served = {"n": 0}

    def respond(request: dict):
        if request.get("model") == ANALYSIS_MODEL:
            return ANALYSIS
        program = PROGRAMS[min(served["n"], len(PROGRAMS) - 1)]
        served["n"] += 1
        return f"Here is the program.\n```python\n{program}```\n"

    return respond
