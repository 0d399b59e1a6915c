"""Write the candidate's Python: the kernel source, the host helpers it calls, `ModelNew.__init__` (the same
state_dict as `Model`), and `forward` (PyTorch calls for kept nodes, kernel launches for synthesized ones)."""

from __future__ import annotations

import ast
import keyword
import re
from dataclasses import dataclass

from ..lower.args import render
from ..lower.graph import Py, py_name
from .columns import col_helpers_for
from .host_helpers import HELPERS, helpers_for, names_used
from ..plan.plans import KernelPlan, ProgramPlan
from ...pyast import parse_ast

_MODE = {"rowmajor": 0, "zero": 1, "general": 2}


@dataclass
class Launch:
    """The Python lines of one kernel launch. `setup` (shapes, operands, launch geometry) depends only on the
    operands' layouts, so `candidate` caches what it computes per layout; `outputs` and `call` run every time."""
    setup: list[str]
    outputs: list[str]
    call: list[str]


def prep_lines(plan: KernelPlan, names: dict) -> tuple[list[str], list[str], dict]:
    """Lines computing S, rows, cols and the operands, and lines allocating the outputs, for a kernel launch;
    returns (set-up lines, output lines, arg names by signature role: 'slot:i', 'out:j', 'meta', 'rows', ...)."""
    k, rank, nl = plan.k, plan.rank, plan.nl
    lines: list[str] = []
    outs: list[str] = []
    tensor_slots = [plan.slots[i] for i in plan.shape_slots]
    pieces = [s for s in plan.slots if s.kind == "tensor" and s.piece_w is not None]
    width = next((sum(pc["w"] for pc in n.attrs["pieces"]) for n in plan.nodes if n.fn == "cat"), 0)
    shapes = [names[s.value] + ".shape" for s in tensor_slots]
    shapes += [f"tuple({names[s.value]}.shape[:-1]) + ({width},)" for s in pieces]  # cat pieces: their rows
    if len(shapes) == 1 and not pieces:
        lines.append(f"S = tuple({shapes[0]})")
    elif shapes:
        lines.append(f"S = kf_shape({', '.join(shapes)})")
    else:
        raise ValueError("kernel without tensor operands")
    if pieces:
        lines.append(f"if len(S) != {rank} or S[-1] != {width}:")
        lines.append(f"    raise ValueError(f'this synthesized kernel concatenates rows to width {width}, got shape "
                     f"{{tuple(S)}}')")
    lines.append(f"rows, cols = kf_rows_cols(S, {rank}, {k})")
    args: dict = {"rows": "rows", "cols": "cols"}
    general = []
    for s in plan.slots:
        src = names[s.value]
        if s.kind == "scalar":
            args[f"scalar:{s.index}"] = f"float({src})"
            continue
        if s.kind != "tensor":  # computed by the kernel itself
            continue
        target = f"S[:{nl}]" if s.drop else ("S" if s.piece_w is None else f"S[:-1] + ({s.piece_w},)")
        snl = nl
        lines.append(f"a{s.index}, l{s.index} = kf_prep({src}, {target}, {snl}, {s.inner if not s.drop else 0}, "
                     f"{_MODE[s.mode]})")
        args[f"slot:{s.index}"] = f"a{s.index}"
        if s.mode == "general":
            general.append(f"l{s.index}")
    if general:
        first = next(f"a{s.index}" for s in plan.slots if s.kind == "tensor")
        lines.append(f"meta = kf_meta(S[:{nl}], [{', '.join(general)}], {first}.device)")
        args["meta"] = "meta"
    for j, o in enumerate(plan.outputs):
        if o.inplace_slot is not None:
            outs.append(f"o{j} = a{o.inplace_slot}  # the matmul result is written in place")
        else:
            if o.level == "E":
                shape = "S"
            elif o.drop:
                shape = f"S[:{nl}]"
            else:
                shape = f"S[:{nl}] + {(1,) * k!r}"
            dtype = {"bool": "torch.bool", "kf_bf16": "torch.bfloat16", "kf_f16": "torch.float16"}.get(
                o.dtype, "torch.float32")
            first = plan.shape_slots[0] if plan.shape_slots else pieces[0].index
            outs.append(f"o{j} = torch.empty({shape}, dtype={dtype}, device=a{first}.device)")
        args[f"out:{j}"] = f"o{j}"
    return lines, outs, args


def _ident(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("_")


def _access(path: str) -> str:
    if not path:
        return "self"
    out = "self"
    for part in path.split("."):
        if part.isdigit():
            out += f"[{part}]"
        elif _ident(part):
            out += f".{part}"
        else:
            return f"self.get_submodule({path!r})"
    return out


_CTOR_OK = re.compile(r"^torch\.nn\.[A-Z]\w*\(")


def _safe_ctor(text: str | None) -> bool:
    """A constructor from the trace is embedded only when it is a plain call with literal arguments."""
    if not text or not _CTOR_OK.match(text):
        return False
    try:
        tree = parse_ast(text, mode="eval")
    except SyntaxError:
        return False
    node = tree.body
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to":
        if len(node.args) != 1 or not isinstance(node.args[0], ast.Attribute):
            return False
        node = node.func.value
    if not isinstance(node, ast.Call):
        return False
    for a in list(node.args) + [kw.value for kw in node.keywords]:
        if not _literal(a):
            return False
    return all(kw.arg for kw in node.keywords)


def _literal(a) -> bool:
    if isinstance(a, ast.Constant):
        return True
    if isinstance(a, (ast.Tuple, ast.List)):
        return all(_literal(x) for x in a.elts)
    if isinstance(a, ast.UnaryOp) and isinstance(a.op, ast.USub):
        return _literal(a.operand)
    if isinstance(a, ast.Name):
        return a.id in ("inf", "nan", "True", "False", "None")
    return False


_CONTAINERS = {"ModuleList": "torch.nn.ModuleList()", "ModuleDict": "torch.nn.ModuleDict()",
               "Sequential": "torch.nn.Sequential()"}


def _tensor_ctor(entry: dict, shape=None) -> str:
    shape = tuple(entry["shape"] if shape is None else shape)
    return f"torch.zeros({shape!r}, dtype=torch.{entry['dtype']})"


def module_lines(desc: dict, config: dict) -> list[str]:
    """`__init__` lines re-creating the module tree and state of one traced configuration."""
    ctors = {m["path"]: m.get("ctor") for m in config["modules"]}
    state = config["state"]
    lines = []
    covered: set = set()  # paths rebuilt by a torch.nn constructor (their state comes with it)
    for m in desc["modules"]:
        path = m["path"]
        if any(path.startswith(c + ".") for c in covered):
            continue
        if path:
            parent, _, name = path.rpartition(".")
            ctor = ctors.get(path)
            if ctor and _safe_ctor(ctor):
                covered.add(path)
                expr = re.sub(r"\binf\b", "math.inf", ctor)
            else:
                expr = _CONTAINERS.get(m["cls"], "torch.nn.Module()")
            if not parent and _ident(name) and name != "kf_lib":
                lines.append(f"self.{name} = {expr}")
            else:
                lines.append(f"{_access(parent)}.add_module({name!r}, {expr})")
            if path in covered:
                continue
        owner = _access(path)
        for p in m["params"]:
            key = f"{path}.{p['name']}" if path else p["name"]
            shape = state.get(key, [p["shape"]])[0]
            grad = "" if p.get("requires_grad", True) else ", requires_grad=False"
            lines.append(f"{owner}.register_parameter({p['name']!r}, torch.nn.Parameter("
                         f"{_tensor_ctor(p, shape)}{grad}))")
        for b in m["buffers"]:
            key = f"{path}.{b['name']}" if path else b["name"]
            shape = state.get(key, [b["shape"]])[0] if b.get("persistent", True) else b["shape"]
            persistent = "" if b.get("persistent", True) else ", persistent=False"
            lines.append(f"{owner}.register_buffer({b['name']!r}, {_tensor_ctor(b, shape)}{persistent})")
    return lines


def candidate(plan: ProgramPlan, desc: dict, *, header: str, marker: str, imports: list[str],
              source_name: str, source_text: str, init_tail: list[str], launch, columns=None) -> str:
    """Assemble the candidate file; `launch(kernel_plan, names)` returns the Python lines of one launch,
    `columns(col_op, names)` those of one column kernel (a writer without column kernels gets none in its plan)."""
    low = plan.lowered
    names = dict(low.names)
    out: list[str] = [f'"""{header}"""', "", marker]
    configs = desc.get("configs") or []
    known = [c for c in configs if c.get("init_args") is not None]
    init_imports: set = set()
    literals = [render(c["init_args"], {}, init_imports) for c in known]  # tuples as tuples, inf as math.inf
    std_imports = ["import math"] if ("math" in low.imports or "math" in init_imports or _needs_math(desc)) else []
    if "operator" in low.imports:
        std_imports.append("import operator")
    out += std_imports + ["", "import torch", "import torch.nn as nn", ""] + imports + ["", ""]
    if source_name:
        out.append(f"{source_name} = r\"\"\"")
        out.append(source_text.rstrip("\n"))
        out.append('"""')
    else:  # kernels written in Python (Triton)
        out.append(source_text.rstrip("\n"))
    out += ["", ""]
    helpers_at = len(out)
    out.append("class ModelNew(nn.Module):")
    out.append("    def __init__(self, *args):")
    out.append("        super().__init__()")
    if known:
        out.append("        init = list(args)")
        for i, (cfg, literal) in enumerate(zip(known, literals)):
            kw = "if" if i == 0 else "elif"
            out.append(f"        {kw} init == {literal}:  # {cfg['size_class']} size class")
            body = module_lines(desc, cfg) or ["pass"]
            out += ["            " + line for line in body]
        listing = " or ".join(literals)
        out.append("        else:")
        out.append(f"            raise ValueError(f\"this candidate was synthesized for Model init arguments "
                   f"{_escape_braces(listing)}, got {{init}}; synthesize again for these sizes\")")
    elif configs:
        out += ["        " + line for line in module_lines(desc, configs[0])]
    out += ["        " + line for line in init_tail]
    out.append("        self.kf_plans = {}  # launch set-ups by operand layout (see kf_layout)")
    out.append("")
    params = []
    for name, default in low.placeholders:
        params.append(f"{name}={default}" if default is not None else name)
    out.append(f"    def forward(self{''.join(', ' + p for p in params)}):")
    live = _live(plan)
    kernels = 0
    for unit in plan.units:
        if isinstance(unit, Py):
            if unit.role == "input" or unit.name not in live:
                continue
            if unit.role == "colk":
                if columns is None:
                    raise ValueError(f"{unit.label}: this writer has no column kernels")
                out += ["        " + line for line in "\n".join(columns(unit, names)).split("\n")]
                continue
            out.append(f"        {names[unit.name]} = {unit.code}")
        else:
            out.append(f"        # {unit.name}: {unit.label}")
            out += ["        " + line for line in cached_launch(unit, names, launch(unit, names), kernels)]
            kernels += 1
            for j, o in enumerate(unit.outputs):
                out.append(f"        {names[o.node]} = o{j}")
    out.append(f"        return {low.output_code}")
    helpers = _helpers("\n".join(out))
    if plan.columns:  # the column kernels' own helpers, those it calls
        helpers = "\n\n\n".join(h for h in (helpers, col_helpers_for("\n".join(out))) if h)
    if helpers:
        out[helpers_at:helpers_at] = [helpers, "", ""]
    return "\n".join(out) + "\n"


def _helpers(program: str) -> str:
    """The host helpers `program` calls (all of them if it does not parse: its compile error then reads as before)."""
    try:
        return helpers_for(names_used(parse_ast(program)))
    except SyntaxError:
        return HELPERS


def cached_launch(plan: KernelPlan, names: dict, launch: Launch, k: int) -> list[str]:
    """The launch with its set-up computed once per operand layout (kf_layout): the set-up's Python (shape checks,
    kf_prep, launch geometry) costs more host time than the kernel launch itself, and the evaluator times every call
    from a cold start. Kept only when kf_prep passed every operand through as it is, or as a flat view of its memory
    (kf_views); never when it made a copy."""
    srcs = [names[s.value] for s in plan.slots if s.kind == "tensor"]
    slots = [f"a{s.index}" for s in plan.slots if s.kind == "tensor"]
    saved = ["kf_v"] + [n for n in _assigned(launch.setup) if n not in slots]
    lines = [f"kf_key = kf_layout({k}, {', '.join(srcs)})", "kf_p = self.kf_plans.get(kf_key)", "if kf_p is None:"]
    lines += ["    " + line for line in launch.setup]
    lines += [f"    kf_v = kf_views({', '.join(f'({a}, {s})' for a, s in zip(slots, srcs))})",
              "    if kf_key is not None and kf_v is not None:",
              f"        kf_remember(self.kf_plans, kf_key, ({', '.join(saved)}))",
              "else:",
              f"    {', '.join(saved)} = kf_p",
              f"    {_pack(slots)} = ({_pack(srcs)}) if kf_v is True else kf_replay(kf_v, {', '.join(srcs)})"]
    return lines + launch.outputs + launch.call


def _pack(items: list[str]) -> str:
    return ", ".join(items) + ("," if len(items) == 1 else "")


def _assigned(lines: list[str]) -> list[str]:
    """Names the top-level statements of `lines` assign, in order."""
    found: list[str] = []
    for node in parse_ast("\n".join(lines)).body:
        for target in node.targets if isinstance(node, ast.Assign) else ():
            for n in (target.elts if isinstance(target, ast.Tuple) else [target]):
                if isinstance(n, ast.Name) and n.id not in found:
                    found.append(n.id)
    return found


def _escape_braces(s: str) -> str:
    return s.replace("{", "{{").replace("}", "}}")


def _needs_math(desc: dict) -> bool:
    for cfg in desc.get("configs") or []:
        for m in cfg.get("modules", []):
            if m.get("ctor") and re.search(r"\binf\b", m["ctor"]):
                return True
    return False


def _live(plan: ProgramPlan) -> set:
    """Names of Py items whose values are needed (by the output or a kernel)."""
    need = set(plan.lowered.output_names)
    for u in plan.units:
        if isinstance(u, KernelPlan):
            need |= {s.value for s in u.slots if s.kind != "stat"}
    by = {u.name: u for u in plan.units if isinstance(u, Py)}
    stack = list(need)
    live = set()
    while stack:
        n = stack.pop()
        if n in live:
            continue
        live.add(n)
        u = by.get(n)
        if u is not None:
            stack.extend(u.deps)
        for kp in plan.units:
            if isinstance(kp, KernelPlan) and n in {o.node for o in kp.outputs}:
                stack.extend(s.value for s in kp.slots if s.kind != "stat")
    return live


__all__ = ["Launch", "candidate", "prep_lines", "module_lines", "HELPERS", "py_name"]
