"""Pooling problems of our own in KernelBench's format (MaxPool / AvgPool / adaptive pooling, 1d to 3d, with the
kernel size, stride, padding, dilation and ceil_mode variants KernelBench uses), small: the CPU tests
(`test_builtin_pooling.py`) and the GPU tests (`gpu/test_gpu_builtin_kernelbench.py`) judge the same sources."""

from __future__ import annotations

from tests.kernelbench_cases import problem


def _pool(ctor: str, shape: str, post: str = "") -> str:
    return problem(forward=f"return {post.replace('@', 'self.pool(x)') if post else 'self.pool(x)'}",
                   inputs=f"[torch.randn({shape})]", ctor=f"self.pool = nn.{ctor}")


# supported: every case below is written with nothing kept in PyTorch and must match PyTorch
POOL_CASES = {
    # KernelBench level 1: 41 (1d max, stride 1, padding, dilation), 42 (2d max, stride 1, padding 1), 43 (3d max,
    # stride 2, padding 1, dilation 3), 44 (1d avg, padding 4), 45 (2d avg, non-overlapping, floor drops a tail),
    # 46 (3d avg, stride 2, padding 1)
    "maxpool1d": _pool("MaxPool1d(kernel_size=4, stride=1, padding=2, dilation=3)", "2, 3, 29"),
    "maxpool2d": _pool("MaxPool2d(kernel_size=2, stride=1, padding=1)", "2, 3, 11, 13"),
    "maxpool3d": _pool("MaxPool3d(kernel_size=3, stride=2, padding=1, dilation=3)", "2, 2, 13, 12, 11"),
    "avgpool1d": _pool("AvgPool1d(kernel_size=8, stride=4, padding=4)", "2, 3, 37"),
    "avgpool2d": _pool("AvgPool2d(kernel_size=3)", "2, 3, 17, 20"),
    "avgpool3d": _pool("AvgPool3d(kernel_size=3, stride=2, padding=1)", "2, 2, 9, 10, 11"),
    # level 2 shapes: a pool after a pointwise prologue, with an epilogue fused into the pool's kernel
    "maxpool2d_epilogue": _pool("MaxPool2d(2)", "2, 4, 10, 12", post="torch.clamp(@ * 2.0, -1.0, 1.0)"),
    "maxpool3d_ceil": _pool("MaxPool3d(kernel_size=2, ceil_mode=True)", "1, 2, 8, 6, 4"),
    "global_avg3d": _pool("AdaptiveAvgPool3d((1, 1, 1))", "2, 3, 5, 6, 7", post="torch.tanh(@) + 1.0"),
    "adaptive_avg2d": _pool("AdaptiveAvgPool2d((3, 4))", "2, 3, 9, 12"),
    "adaptive_max1d": _pool("AdaptiveMaxPool1d(1)", "2, 3, 19"),
    "functional": problem(forward="return torch.nn.functional.avg_pool2d(torch.nn.functional.max_pool2d(x, 2), "
                                  "kernel_size=2, stride=1) + torch.nn.functional.adaptive_avg_pool2d(x, 1).mean()",
                          inputs="[torch.randn(2, 3, 12, 10)]"),
    "maxpool_2d_input": _pool("MaxPool1d(3, stride=2)", "5, 31"),
    # the window kernel's own reach (each output reads its window in place): KernelBench level1/42's window (4x4 at
    # stride 1: a 16x copy as a window view), ceil_mode with a partial last window, count_include_pad=False and
    # divisor_override at padded borders
    "maxpool2d_k4s1": _pool("MaxPool2d(kernel_size=4, stride=1, padding=1)", "2, 3, 11, 13"),
    "maxpool2d_ceil_partial": _pool("MaxPool2d(3, stride=2, padding=1, ceil_mode=True)", "3, 10, 12"),
    "avgpool3d_exclude_pad": _pool("AvgPool3d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)",
                                   "2, 2, 9, 10, 12"),
    "avgpool2d_divisor": _pool("AvgPool2d(3, stride=2, padding=1, ceil_mode=True, divisor_override=5)",
                               "2, 2, 10, 12"),
    # a window kernel's chains reading one value per row too (KernelBench level 2's 50, 82, 74 shapes): 0-d
    # scales, a per-channel bias before and after a pool, a bias broadcast over a lead dim that is not the last
    "window_chains": problem(
        forward="return (self.p3(x * self.s1) + self.b3) * self.s2, "
                "self.p2(torch.tanh(x[:, :, 0]) * 2.0 + self.b2), self.p2(x[0] * self.w) - self.v",
        inputs="[torch.randn(2, 4, 6, 8, 10)]",
        ctor="self.p3 = nn.AvgPool3d(2); self.p2 = nn.AvgPool2d(3, stride=2, padding=1); "
             "self.s1 = nn.Parameter(torch.tensor(0.5)); self.s2 = nn.Parameter(torch.tensor(1.5)); "
             "self.b3 = nn.Parameter(torch.randn(4, 1, 1, 1)); self.b2 = nn.Parameter(torch.randn(4, 1, 1)); "
             "self.w = nn.Parameter(torch.randn(4, 1, 1, 1)); self.v = nn.Parameter(torch.randn(6, 1, 1))"),
}
# the cases only writers with window kernels (C++, CUDA, Triton) write; Metal keeps them in PyTorch
WINDOW_ONLY = {"maxpool2d_k4s1", "maxpool2d_ceil_partial", "avgpool3d_exclude_pad", "avgpool2d_divisor"}

# not supported, all in one problem: each stays in PyTorch with this reason in the coverage note
POOL_UNSUPPORTED_REASONS = {
    "a": ("MaxPool2d(2, return_indices=True)", "@[0]", "return_indices=True"),
    "e": ("AdaptiveAvgPool2d((4, 4))", "@", "windows of unequal sizes"),
}
# what only the window kernels write: a writer without them (Metal) keeps these in PyTorch with this reason
POOL_WINDOW_ONLY_REASONS = {
    "b": ("MaxPool2d(2, ceil_mode=True)", "@", "ceil_mode=True that adds a partial window"),
    "c": ("AvgPool2d(3, stride=1, padding=1, count_include_pad=False)", "@", "count_include_pad=False with padding"),
    "d": ("AvgPool2d(2, divisor_override=3)", "@", "divisor_override"),
    "f": ("MaxPool2d(kernel_size=4, stride=1, padding=1)", "@", "16x copy of the input"),
}


def _pools_problem(reasons: dict) -> str:
    return problem(forward="return (" + ", ".join(post.replace("@", f"self.{k}(x)") for k, (_, post, _) in
                                                  reasons.items()) + ")",
                   inputs="[torch.randn(1, 2, 9, 9)]",
                   ctor="; ".join(f"self.{k} = nn.{ctor}" for k, (ctor, _, _) in reasons.items()))


POOL_UNSUPPORTED = _pools_problem(POOL_UNSUPPORTED_REASONS)
POOL_WINDOW_ONLY = _pools_problem(POOL_WINDOW_ONLY_REASONS)

# The same variants grouped by input rank, one problem each (one evaluation judges several pools: the CPU test's
# time), with every pooled output returned; `pools_window` holds those only window kernels write.
POOL_COMBINED = {
    "pools_1d": problem(
        forward="return (self.a(x), self.b(x), self.c(x), self.d(x[0]))", inputs="[torch.randn(2, 3, 37)]",
        ctor="self.a = nn.MaxPool1d(4, stride=1, padding=2, dilation=3); self.b = nn.AvgPool1d(8, stride=4, "
             "padding=4); self.c = nn.AdaptiveMaxPool1d(1); self.d = nn.MaxPool1d(3, stride=2)"),
    "pools_2d": problem(
        forward="return (self.a(x), self.b(x), torch.clamp(self.c(x * 2.0), -1.0, 1.0), self.d(x), "
                "torch.nn.functional.avg_pool2d(torch.nn.functional.max_pool2d(x, 2), kernel_size=2, stride=1) "
                "+ torch.nn.functional.adaptive_avg_pool2d(x, 1).mean())",
        inputs="[torch.randn(2, 4, 12, 16)]",
        ctor="self.a = nn.MaxPool2d(2, stride=1, padding=1); self.b = nn.AvgPool2d(3); self.c = nn.MaxPool2d(2); "
             "self.d = nn.AdaptiveAvgPool2d((3, 4))"),
    "pools_3d": problem(
        forward="return (self.a(x), self.b(x), torch.tanh(self.c(x)) + 1.0, self.d(x))",
        inputs="[torch.randn(2, 2, 12, 12, 10)]",
        ctor="self.a = nn.MaxPool3d(3, stride=2, padding=1, dilation=3); self.b = nn.AvgPool3d(3, stride=2, "
             "padding=1); self.c = nn.AdaptiveAvgPool3d((1, 1, 1)); self.d = nn.MaxPool3d(2, ceil_mode=True)"),
    "pools_window": problem(
        forward="return (self.a(x), self.b(torch.tanh(x[0])), self.c(x), self.d(x), self.e(x * 0.5 - 1.0), "
                "torch.nn.functional.max_pool1d(torch.sigmoid(x[0]), 4, stride=1, padding=2, dilation=3), "
                "torch.nn.functional.avg_pool1d(torch.sigmoid(x[1]), 4, stride=3, padding=2))",
        inputs="[torch.randn(2, 3, 11, 13)]",
        ctor="self.a = nn.MaxPool2d(4, stride=1, padding=1); self.b = nn.MaxPool2d(3, stride=2, padding=1, "
             "ceil_mode=True); self.c = nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, "
             "count_include_pad=False); self.d = nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, "
             "divisor_override=5); self.e = nn.AvgPool2d(2, stride=1, padding=1, count_include_pad=False)"),
}
