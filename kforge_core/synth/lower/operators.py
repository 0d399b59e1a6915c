"""Operator vocabulary: which traced call is which operator, with which arguments, and what kind of lowering it gets.

`OperatorCanon.canon` normalizes a call node (torch function, tensor method, `operator.*`, aten overload, or
`nn.Module` call) to one operator name and its arguments bound to parameter names. The sets below classify those
names for `Lowerer._call`: glue, casts, library products, row operators, elementwise functions.
"""

from __future__ import annotations

from .args import Arg
from .colops import BN_MODULES, bn_module_canon
from .losses import LOSS_MODULES, LOSS_SIGS, loss_module_canon

UNARY = {
    "relu", "sigmoid", "tanh", "exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "abs", "neg", "sqrt",
    "rsqrt", "reciprocal", "square", "erf", "sin", "cos", "floor", "ceil", "round", "trunc", "sign", "silu",
    "mish", "relu6", "hardsigmoid", "hardswish", "selu", "logical_not", "erfc", "softsign", "tan", "atan",
    "sinh", "cosh", "asin", "acos", "frac",
}
_ALIASES = {
    "negative": "neg", "absolute": "abs", "clip": "clamp", "true_divide": "div", "divide": "div", "multiply": "mul",
    "subtract": "sub", "greater": "gt", "less": "lt", "greater_equal": "ge", "less_equal": "le", "not_equal": "ne",
    "expit": "sigmoid", "truediv": "div", "fmax": "maximum", "fmin": "minimum", "swish": "silu",
    "special_expit": "sigmoid",
}
_SIGS = {
    "gelu": ["input", "approximate"],
    "leaky_relu": ["input", "negative_slope", "inplace"],
    "elu": ["input", "alpha", "inplace"],
    "celu": ["input", "alpha", "inplace"],
    "softplus": ["input", "beta", "threshold"],
    "hardtanh": ["input", "min_val", "max_val", "inplace"],
    "threshold": ["input", "threshold", "value", "inplace"],
    "clamp": ["input", "min", "max"],
    "clamp_min": ["input", "min"],
    "clamp_max": ["input", "max"],
    "add": ["input", "other", "alpha"],
    "sub": ["input", "other", "alpha"],
    "rsub": ["input", "other", "alpha"],
    "mul": ["input", "other"],
    "div": ["input", "other", "rounding_mode"],
    "pow": ["input", "exponent"],
    "float_power": ["input", "exponent"],
    "maximum": ["input", "other"], "minimum": ["input", "other"],
    "gt": ["input", "other"], "lt": ["input", "other"], "ge": ["input", "other"], "le": ["input", "other"],
    "eq": ["input", "other"], "ne": ["input", "other"],
    "logical_and": ["input", "other"], "logical_or": ["input", "other"],
    "where": ["condition", "input", "other"],
    "lerp": ["input", "end", "weight"],
    "addcmul": ["input", "tensor1", "tensor2", "value"],
    "sum": ["input", "dim", "keepdim", "dtype"],
    "mean": ["input", "dim", "keepdim", "dtype"],
    "amax": ["input", "dim", "keepdim"], "amin": ["input", "dim", "keepdim"],
    "max": ["input", "dim", "keepdim"], "min": ["input", "dim", "keepdim"],
    "argmax": ["input", "dim", "keepdim"], "argmin": ["input", "dim", "keepdim"],
    "var": ["input", "dim", "unbiased", "keepdim"], "std": ["input", "dim", "unbiased", "keepdim"],
    "logsumexp": ["input", "dim", "keepdim"],
    "softmax": ["input", "dim", "dtype"], "log_softmax": ["input", "dim", "dtype"],
    "layer_norm": ["input", "normalized_shape", "weight", "bias", "eps"],
    "rms_norm": ["input", "normalized_shape", "weight", "eps"],
    "group_norm": ["input", "num_groups", "weight", "bias", "eps"],
    "normalize": ["input", "p", "dim", "eps", "out"],
    "norm": ["input", "p", "dim", "keepdim", "dtype"],
    "batch_norm": ["input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"],
    "linear": ["input", "weight", "bias"],
    "matmul": ["input", "other"], "mm": ["input", "mat2"], "bmm": ["input", "mat2"],
    "addmm": ["input", "mat1", "mat2", "beta", "alpha"],
    "baddbmm": ["input", "batch1", "batch2", "beta", "alpha"],
}
_F_SIGS = {  # torch.nn.functional spellings that differ from torch.<name>
    "softmax": ["input", "dim", "_stacklevel", "dtype"],
    "log_softmax": ["input", "dim", "_stacklevel", "dtype"],
    "relu": ["input", "inplace"], "silu": ["input", "inplace"], "mish": ["input", "inplace"],
    "relu6": ["input", "inplace"], "hardsigmoid": ["input", "inplace"], "hardswish": ["input", "inplace"],
    "selu": ["input", "inplace"],
    "dropout": ["input", "p", "training", "inplace"],
    **LOSS_SIGS,
}
_OPERATOR = {"add": "add", "sub": "sub", "mul": "mul", "truediv": "div", "neg": "neg", "pow": "pow",
             "gt": "gt", "lt": "lt", "ge": "ge", "le": "le", "eq": "eq", "ne": "ne", "abs": "abs",
             "getitem": "getitem", "floordiv": "floordiv", "mod": "mod", "and_": "logical_and",
             "or_": "logical_or", "invert": "logical_not", "matmul": "matmul", "pos": "identity"}
_MODULE_FNS = {  # torch.nn module class -> (function, {attr: argument})
    "ReLU": ("relu", {}), "GELU": ("gelu", {"approximate": "approximate"}), "SiLU": ("silu", {}),
    "Sigmoid": ("sigmoid", {}), "Tanh": ("tanh", {}), "Mish": ("mish", {}), "ReLU6": ("relu6", {}),
    "Hardsigmoid": ("hardsigmoid", {}), "Hardswish": ("hardswish", {}), "SELU": ("selu", {}),
    "LeakyReLU": ("leaky_relu", {"negative_slope": "negative_slope"}), "ELU": ("elu", {"alpha": "alpha"}),
    "CELU": ("celu", {"alpha": "alpha"}), "Softplus": ("softplus", {"beta": "beta", "threshold": "threshold"}),
    "Hardtanh": ("hardtanh", {"min_val": "min_val", "max_val": "max_val"}), "Softsign": ("softsign", {}),
    "Softmax": ("softmax", {"dim": "dim"}), "LogSoftmax": ("log_softmax", {"dim": "dim"}),
    "Threshold": ("threshold", {"threshold": "threshold", "value": "value"}),
}

# Classes `Lowerer._call` routes by. Scalar arithmetic (PY_SCALAR_OPS on a non-tensor value) is shape arithmetic,
# so it is glue too; COMPARE names produce bool masks.
GLUE = {
    "getitem", "getattr", "size", "dim", "numel", "view", "reshape", "flatten", "unflatten", "squeeze", "unsqueeze",
    "transpose", "permute", "t", "expand", "expand_as", "chunk", "split", "unbind", "narrow", "select",
    "contiguous", "view_as", "reshape_as", "movedim", "swapaxes", "detach", "identity", "slice", "alias",
    "tensor_split", "split_with_sizes", "_unsafe_view", "floordiv", "mod", "squeeze_", "unsqueeze_", "clone",
}
CASTS = {"float", "to", "type_as", "double", "half", "bfloat16", "type", "_to_copy"}
LIB = {"linear", "matmul", "mm", "bmm", "addmm", "baddbmm"}
COMPARE = {"gt", "lt", "ge", "le", "eq", "ne", "logical_and", "logical_or", "logical_not"}
PY_SCALAR_OPS = {"add", "sub", "mul", "div", "neg", "pow", "abs", "gt", "lt", "ge", "le", "eq", "ne"}
# Dropout in training mode (nn.Module's default, and KernelBench's) zeroes elements by draws from torch's
# generator; a kernel cannot draw the same numbers, and the evaluator judges a candidate against the reference run
# after the same seed, so the draw stays in PyTorch. With p=0 or in eval mode it is the identity.
DROPOUT_KEPT = ("Dropout in training mode draws its mask from torch's random number generator, which a kernel "
                "cannot reproduce; it stays in PyTorch (the reference and the candidate run after the same seed)")
ROW_OPS = {"sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "softmax", "log_softmax", "logsumexp", "layer_norm",
           "rms_norm", "group_norm", "normalize", "norm", "var", "std", "batch_norm"}


class OperatorCanon:
    """Mixed into `Lowerer`: reads its `modules` and calls its `param_ref` for module parameters."""

    def canon(self, n: dict) -> tuple[str, dict]:
        """(normalized operator name, bound arguments) for a call node."""
        op, target = n["op"], n["target"] or ""
        args, kwargs = list(n.get("args", [])), dict(n.get("kwargs", {}))
        if op == "call_module":
            mod = n.get("module") or {}
            cls = mod.get("cls", "")
            if cls in ("Identity",) or (cls.startswith("Dropout") and (mod.get("attrs", {}).get("p") == 0
                                                                         or not mod.get("training", True))):
                return "identity", {"input": args[0] if args else None}
            if cls.startswith("Dropout") or cls in ("AlphaDropout", "FeatureAlphaDropout"):
                return "dropout", {"input": args[0] if args else None, "training": True}
            if cls in _MODULE_FNS:
                fn, attr_map = _MODULE_FNS[cls]
                bound = {"input": args[0] if args else kwargs.get("input")}
                for attr, arg in attr_map.items():
                    if attr in mod.get("attrs", {}):
                        bound[arg] = mod["attrs"][attr]
                return fn, bound
            if cls == "LayerNorm":
                a = mod.get("attrs", {})
                params = {p["name"] for p in self.modules.get(target, {}).get("params", [])}
                return "layer_norm", {"input": args[0], "normalized_shape": a.get("normalized_shape"),
                                      "weight": self.param_ref(f"{target}.weight") if "weight" in params else None,
                                      "bias": self.param_ref(f"{target}.bias") if "bias" in params else None,
                                      "eps": a.get("eps", 1e-5)}
            if cls in BN_MODULES:
                return bn_module_canon(mod, target, args, self.param_ref, self.modules)
            if cls in LOSS_MODULES:
                return loss_module_canon(cls, mod, target, args, kwargs, self.modules)
            if cls == "GroupNorm":
                a = mod.get("attrs", {})
                params = {p["name"] for p in self.modules.get(target, {}).get("params", [])}
                return "group_norm", {"input": args[0], "num_groups": a.get("num_groups"),
                                      "weight": self.param_ref(f"{target}.weight") if "weight" in params else None,
                                      "bias": self.param_ref(f"{target}.bias") if "bias" in params else None,
                                      "eps": a.get("eps", 1e-5)}
            if cls in ("InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"):
                # without affine parameters or running statistics (the defaults) an instance norm is a layer norm
                # over each (sample, channel)'s spatial dims; otherwise it stays in PyTorch
                a = mod.get("attrs", {})
                x = self.values.get(args[0]["n"]) if args and Arg.is_node(args[0]) else None
                if a.get("affine") or a.get("track_running_stats") or x is None or len(x.shape) < 3:
                    return "module:" + cls, {}
                return "layer_norm", {"input": args[0], "normalized_shape": list(x.shape[2:]), "weight": None,
                                      "bias": None, "eps": a.get("eps", 1e-5)}
            if cls == "RMSNorm":
                a = mod.get("attrs", {})
                params = {p["name"] for p in self.modules.get(target, {}).get("params", [])}
                return "rms_norm", {"input": args[0], "normalized_shape": a.get("normalized_shape"),
                                    "weight": self.param_ref(f"{target}.weight") if "weight" in params else None,
                                    "eps": a.get("eps")}
            if cls == "Linear":
                params = {p["name"] for p in self.modules.get(target, {}).get("params", [])}
                return "linear", {"input": args[0], "weight": self.param_ref(f"{target}.weight"),
                                  "bias": self.param_ref(f"{target}.bias") if "bias" in params else None}
            return "module:" + cls, {}
        if op == "call_method":
            name = _ALIASES.get(target, target) or target
            sig = _SIGS.get(name, ["input"] if name in UNARY else None)
            return name, self._bind(name, sig, args, kwargs)
        if op == "call_function":
            if target.startswith("aten."):
                name = target.split(".")[1]
                schema = ["input" if s == "self" else s for s in n.get("schema") or []]
                name = _ALIASES.get(name, name) or name
                if name == "max" and target.endswith(".other") or name == "min" and target.endswith(".other"):
                    name = "maximum" if name == "max" else "minimum"
                return name, self._bind(name, schema or _SIGS.get(name), args, kwargs)
            home, _, fname = target.rpartition(".")
            if home == "operator":
                name = _OPERATOR.get(fname, "operator:" + fname)
                if name in ("neg", "abs", "logical_not", "identity"):
                    return name, {"input": args[0]}
                if name == "pow":  # `a ** b`: the same arguments as torch.pow(a, b)
                    return name, {"input": args[0] if args else None, "exponent": args[1] if len(args) > 1 else None}
                return name, {"input": args[0] if args else None, "other": args[1] if len(args) > 1 else None}
            if home == "builtins":
                return "builtin:" + fname, {}
            if home in ("torch", "torch.nn.functional", "torch.special"):
                name = _ALIASES.get(fname, fname) or fname
                if home == "torch.special" and fname.startswith("erf"):
                    name = fname
                sig = (_F_SIGS.get(name) if home == "torch.nn.functional" else None) or _SIGS.get(name) or (
                    ["input", "inplace"] if name in UNARY else None)
                bound = self._bind(name, sig, args, kwargs)
                if name == "dropout" and home == "torch.nn.functional" and (
                        bound.get("training", True) is False or bound.get("p", 0.5) == 0):
                    return "identity", {"input": bound.get("input")}
                if name in ("max", "min") and Arg.is_node(bound.get("dim")):
                    name = "maximum" if name == "max" else "minimum"
                    bound = {"input": bound["input"], "other": bound["dim"]}
                return name, bound
            return "function:" + target, {}
        return op, {}

    @staticmethod
    def _bind(name: str, sig: list | None, args: list, kwargs: dict) -> dict:
        bound = dict(kwargs)
        if "self" in bound:
            bound["input"] = bound.pop("self")
        if sig is None:
            bound.update({f"arg{i}": a for i, a in enumerate(args)})
            if args:
                bound["input"] = args[0]
            return bound
        for i, a in enumerate(args):
            if i < len(sig):
                bound[sig[i]] = a
            else:
                bound[f"arg{i}"] = a
        return bound
