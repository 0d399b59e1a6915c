"""Constants made in forward, in KernelBench's format (our own problems, small): level 2's `torch.min(x,
torch.tensor(c))` in both spellings (fx makes a `_tensor_constant` of the first, a `torch.tensor` call with
`device=x.device` of the second), level 1's exclusive cumsum (`cat` of `zeros_like` and a cumsum), and the fills."""

from __future__ import annotations

from tests.kernelbench_cases import problem

CONSTANT_CASES = {
    # level2/31: conv, min with torch.tensor(constant) (a _tensor_constant attribute under fx), + bias, * scale
    "tensor_constant": problem(
        forward="x = self.conv(x); x = torch.min(x, torch.tensor(self.constant_value)); "
                "return (x + self.bias) * self.scaling_factor",
        inputs="[torch.randn(2, 3, 10, 10)]", params="constant_value", init="[0.5]",
        ctor="self.conv = nn.Conv2d(3, 8, 3); self.constant_value = constant_value; "
             "self.bias = nn.Parameter(torch.randn(8, 1, 1)); self.scaling_factor = 2.0"),
    # level2/93 and 83: torch.tensor(v, device=x.device) (a traced call), then more elementwise work
    "tensor_call": problem(
        forward="x = x + 0.5; x = torch.min(x, torch.tensor(0.0, device=x.device)); "
                "y = torch.max(x * 2.0, torch.tensor(-0.25, device=x.device, dtype=torch.float64)); "
                "return torch.nn.functional.gelu(x) * 2.0, y - torch.tensor(1)",
        inputs="[torch.randn(4, 8, 9)]"),
    # level1/92: exclusive cumsum along dim 1, the leading zero column from zeros_like
    "cumsum_exclusive": problem(
        forward="cumsum = torch.cumsum(x.narrow(dim=self.dim, start=0, length=x.size(self.dim) - 1), dim=self.dim); "
                "return torch.cat((torch.zeros_like(x.select(self.dim, 0).unsqueeze(self.dim)), cumsum), "
                "dim=self.dim)",
        inputs="[torch.randn(16, 75)]", params="dim", init="[1]", ctor="self.dim = dim"),
    # the fills, alone and in elementwise chains
    "fills": problem(
        forward="return (torch.zeros_like(x), torch.ones_like(x) * x + 1.0, torch.full_like(x, 2.5) - x, "
                "x * torch.full(x.shape, -1.5), torch.zeros(x.size()) + torch.relu(x))",
        inputs="[torch.randn(7, 9)]"),
}

# constants the kernels do not take: each stays a PyTorch call, with the reason's words
KEPT_CONSTANT_CASES = {
    "tensor_list": (problem(forward="return x * torch.tensor([1.0, 2.0, 3.0], device=x.device)",
                            inputs="[torch.randn(4, 3)]"),
                    "torch.tensor of anything but a number"),
    "tensor_in_bf16": (problem(forward="return x.bfloat16() + torch.tensor(0.5, device=x.device)",
                               inputs="[torch.randn(4, 3)]"),
                       "0-dim constant tensor in a half-precision add stays in PyTorch"),
}
