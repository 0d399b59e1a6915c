"""Lowering matrix products (linear, matmul, mm, bmm, addmm, baddbmm) to vendor-library calls.

The product stays a PyTorch call (`lib`, a fresh tensor); a bias becomes an elementwise `add` primitive on it, a
kernel that the elementwise work after it can fuse into.
"""

from __future__ import annotations

from .args import Arg, render
from .ir import FLOAT, Prim, Py, Unsupported, Value, contig_strides


class MatmulLowering:
    """Mixed into `Lowerer`: uses its `values`, `items`, `counted`, `labels`, `syn` and `tensor_operand`."""

    def _lib(self, n: dict, cname: str, bound: dict) -> None:
        name = n["name"]
        names = self._alias_names()
        out = self.values[name]
        if out.dtype != FLOAT:
            raise Unsupported(f"{cname} on {out.dtype}")
        bias = None
        if cname == "linear":
            x, w = bound["input"], bound["weight"]
            code = f"torch.nn.functional.linear({render(x, names, self.imports)}, {render(w, names, self.imports)})"
            deps = [x, w]
            bias = bound.get("bias")
        elif cname in ("addmm", "baddbmm"):
            if Arg.const(bound.get("beta", 1)) != 1 or Arg.const(bound.get("alpha", 1)) != 1:
                raise Unsupported(f"{cname} with beta/alpha")
            a, b = (bound["mat1"], bound["mat2"]) if cname == "addmm" else (bound["batch1"], bound["batch2"])
            fn = "torch.mm" if cname == "addmm" else "torch.bmm"
            code = f"{fn}({render(a, names, self.imports)}, {render(b, names, self.imports)})"
            deps = [a, b]
            bias = bound["input"]
        else:
            a = bound["input"]
            b = bound.get("other", bound.get("mat2"))
            code = f"torch.{cname}({render(a, names, self.imports)}, {render(b, names, self.imports)})"
            deps = [a, b]
        dep_names = [self.aliases.get(d["n"], d["n"]) for d in deps if Arg.is_node(d)]
        self.labels[name] = cname
        if bias is None or bias == {"n": None}:
            self.items.append(Py(name, code, dep_names, out, "lib", name, label=cname, fresh=True))
            self.counted[name] = "lib"
            return
        mm = self.syn(name + "_mm")
        self.values[mm] = Value("t", out.shape, FLOAT, contig_strides(out.shape), True)
        bias_op = self.tensor_operand(bias, "bias")
        if self.values[bias_op[1]].dtype != FLOAT:
            raise Unsupported("bias is not float32")
        self.items.append(Py(mm, code, dep_names, self.values[mm], "lib", name, label=cname, fresh=True))
        self.items.append(Prim(name, "add", [("v", mm), bias_op], out.shape, FLOAT, name, label="bias"))
        self.counted[name] = "lib+kernel"
