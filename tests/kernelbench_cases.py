"""Problems of our own in KernelBench's format for the families the built-in synthesizer added for KernelBench's
reach; the CPU tests (`test_builtin_kernelbench.py`) and the GPU tests (`gpu/test_gpu_builtin_kernelbench.py`) judge
the same sources."""

from __future__ import annotations



def problem(forward: str, inputs: str, init: str = "[]", ctor: str = "pass", params: str = "",
            args: str = "x") -> str:
    """A KernelBench-format problem: `Model(<params>)` whose forward(<args>) body is `forward`."""
    head = ["import math", "import torch", "import torch.nn as nn", "", "", "class Model(nn.Module):",
            f"    def __init__(self{', ' + params if params else ''}):", "        super().__init__()", f"        {ctor}",
            "", f"    def forward(self, {args}):", f"        {forward}"]
    tail = [("get_inputs", inputs), ("get_init_inputs", init)]
    return "\n".join(head + [line for fn, value in tail for line in ("", "", f"def {fn}():", f"    return {value}")]) \
        + "\n"


# `**` / pow: operator and function spellings, Python-number and tensor exponents and bases, negative bases with
# integer exponents; the bases are kept away from 0 so the mean stays well conditioned
POW_FORMS = ["x ** 2", "x.pow(3)", "torch.pow(x, exponent=2)", "x.abs() ** 0.5", "x ** self.p", "2.0 ** x",
             "torch.pow(x.abs() + 1.0, x)", "(x.abs() + 0.5) ** -1", "(x.abs() + 0.5) ** 1.7",
             "torch.pow(-(x.abs() + 0.5), torch.floor(x))", "x ** 5"]

CASES = {
    # reductions whose dims are not the last ones: one block of dims a column kernel, scattered dims (0, 2) a
    # permuted view feeding the row kernel
    "anydim": problem(forward="return (torch.sum(x, dim=1, keepdim=True), x.mean(0), torch.max(x, dim=1)[0], "
                              "torch.amin(x, dim=(0, 2)), x.sum(dim=(0, 2), keepdim=True), torch.min(x, 2)[0])",
                      inputs="[torch.randn(4, 33, 17)]"),
    # softmax / logsumexp over the channels of an NCHW tensor (KernelBench level 2's conv + softmax(dim=1))
    "softmax_dim1": problem(forward="return (torch.sigmoid(torch.softmax(x, dim=1) * 3.0) + torch.log_softmax(x, 2), "
                                    "torch.logsumexp(x, dim=1, keepdim=True) * 2.0, torch.logsumexp(x, 0))",
                            inputs="[torch.randn(2, 7, 5, 6)]"),
    # InstanceNorm2d without affine parameters (KernelBench's default): a layer norm over each channel's plane
    "instance_norm": problem(forward="return torch.relu(self.inorm(x)) * 2.0", inputs="[torch.randn(2, 5, 9, 11)]",
                             ctor="self.inorm = nn.InstanceNorm2d(5)"),
    # int64 index outputs: argmax / argmin over the last dim, another dim, keepdim, all dims; ties (rounded
    # values, floored) take the first occurrence, a NaN row gives its first NaN
    "argminmax": problem(forward="x = torch.floor(x * 2.0); return (torch.argmax(x, dim=2), torch.argmin(x, dim=1), "
                                 "torch.argmax(x, 0, keepdim=True), torch.argmin(x), "
                                 "torch.argmax(torch.relu(x) * 2.0, dim=-1, keepdim=True))",
                         inputs="[torch.where(torch.rand(4, 33, 17) < 0.01, float('nan'), torch.randn(4, 33, 17))]"),
    # scans (KernelBench's cumsum family): along the last dim (a row scan, rows longer than a warp's 32 with a
    # carry), along another dim (a column scan), reversed through flips, masked, cumprod
    "scans": problem(forward="return (torch.cumsum(x, dim=2), torch.cumprod(x * 0.1 + 1.0, 2), "
                             "torch.cumsum(x.flip(2), dim=2).flip(2), x.cumsum(1), torch.cumsum(x * (x > 0), dim=-1), "
                             "torch.cumprod((x * 0.1 + 1.0).flip(1), 1).flip(1))",
                     inputs="[torch.randn(4, 6, 75)]"),
    # BatchNorm in training mode (KernelBench's default): batch statistics per channel, running statistics updated
    # as PyTorch does (momentum; the cumulative average with momentum=None)
    "batch_norm_train": problem(forward="y = torch.relu(self.bn(x)) * 2.0; return y, self.bn1(y.mean(dim=(2, 3)))",
                                inputs="[torch.randn(4, 6, 9, 11) * 3.0 + 1.0]",
                                ctor="self.bn = nn.BatchNorm2d(6); self.bn1 = nn.BatchNorm1d(6, momentum=None, "
                                     "affine=False)"),
    "pow": problem(forward="return torch.mean((" + " + ".join(POW_FORMS) + ") * 0.5, dim=-1)",
                   inputs="[torch.randn(4, 33)]", ctor="self.p = 2"),
    # elementwise chains fused into column and window kernels (`plan.col_fusion`, under the fuse move): a
    # prologue and an epilogue around a reduction, softmax, logsumexp, column scan, row scan and pool over x's
    # channels; argmax takes a prologue only (int64 result); `x * 0.25` is read twice (no fusion into either)
    "column_chains": problem(
        forward="y = x * 0.25; return (torch.tanh(torch.min(x * 2.0, dim=1)[0]), "
                "torch.sigmoid(torch.softmax(x - 1.0, dim=1)) * 3.0, "
                "torch.relu(torch.logsumexp(torch.tanh(x), dim=1, keepdim=True)), torch.cumsum(x * 0.5, 1) + 1.0, "
                "torch.cumsum(x[0, 0] * 0.5, -1) + 1.0, "
                "torch.clamp(self.pool(torch.nn.functional.hardswish(x - 0.5)), -1.0, 1.0) * 2.0, "
                "torch.argmax(x * -1.0, dim=1), torch.mean(y, dim=1) + y.sum())",
        inputs="[torch.randn(2, 8, 6, 7)]", ctor="self.pool = nn.MaxPool2d(3, stride=2, padding=1)"),
    # per-channel (and per-sample, per-position) tensors around column kernels, fused as row values: a sum over the
    # channels after x * scale + bias (KernelBench level 2's conv / scale / channel sum), softmax over the channels
    # with a bias before and a scale after, a column scan, a row scan reading a tensor along its own dim, a max
    # over the channels of x times a per-sample value, an argmax
    "column_rows": problem(
        forward="return (torch.tanh(torch.sum(x * self.s + self.b, dim=1)), torch.softmax(x + self.b, dim=1) * self.s, "
                "torch.cumsum(x * self.b, 1) - self.s, torch.cumsum(x * self.w, -1) + self.w, "
                "torch.amax(x * self.n, dim=1), torch.argmax(x - self.b, dim=1))",
        inputs="[torch.randn(2, 8, 6, 7)]",
        ctor="self.s = nn.Parameter(torch.rand(8, 1, 1) + 0.5); self.b = nn.Parameter(torch.randn(8, 1, 1)); "
             "self.w = nn.Parameter(torch.randn(7)); self.n = nn.Parameter(torch.randn(2, 1, 1, 1))"),
}

# the families only writers with column kernels (C++, CUDA, Triton) write; Metal keeps them in PyTorch
COLUMN_ONLY = {"scans", "batch_norm_train", "column_chains", "column_rows"}
