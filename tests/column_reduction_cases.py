"""KernelBench level 1's reductions over dim 1 (47 sum with keepdim, 48 mean, 49 max, 53 min, 51 argmax, 52 argmin)
in its format, at its size or any other: the CUDA column reductions whose rows may be split into segments
(`synth/backends/columns.py`, `kf_col_split`). The CPU tests (`test_builtin_column_split.py`), the GPU tests
(`gpu/test_gpu_column_split.py`) and `bench/column_kernels.py` use the same sources."""

from __future__ import annotations

from tests.kernelbench_cases import problem

# KernelBench's (batch_size, dim1, dim2), reduced over dim1
KERNELBENCH = (128, 4096, 4095)

OPS = {
    "47_sum_keepdim": "torch.sum(x, dim=self.dim, keepdim=True)",
    "48_mean": "torch.mean(x, dim=self.dim)",
    "49_max": "torch.max(x, dim=self.dim)[0]",
    "53_min": "torch.min(x, dim=self.dim)[0]",
    "51_argmax": "torch.argmax(x, dim=self.dim)",
    "52_argmin": "torch.argmin(x, dim=self.dim)",
}
# exact results: the extreme values and their indices (sums and means within the float tolerance)
EXACT = {"49_max", "53_min", "51_argmax", "52_argmin"}


def column_problem(op: str, shape: tuple = KERNELBENCH, inputs: str | None = None) -> str:
    """KernelBench's problem `op` (a key of OPS) over an input of `shape` (torch.rand, as KernelBench draws it), or
    over `inputs` (an expression for get_inputs' list)."""
    return problem(forward=f"return {OPS[op]}", inputs=inputs or f"[torch.rand{tuple(shape)}]", init="[1]",
                   ctor="self.dim = dim", params="dim")
