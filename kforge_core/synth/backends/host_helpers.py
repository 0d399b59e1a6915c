"""The host helpers a candidate program may embed (Python text): broadcast shapes, rows and columns, operands as a
kernel reads them (`kf_prep`), the launch set-up cache keyed by operand layout, and the strided operands' metadata
for the kernels (`kf_meta`: row dims, strides, and each operand's (n, s) offset pair from `kf_fast`).

A program embeds only the helpers its own code calls (`helpers_for`), with the helpers those call in turn: a reader
of the generated program then sees no dead code between its kernels and `ModelNew`."""

import ast
import functools

from ...pyast import parse_ast

HELPERS = '''
KF_META = {}


def kf_shape(*shapes):
    n = max(len(s) for s in shapes)
    out = [1] * n
    for s in shapes:
        for i, d in enumerate(s):
            j = n - len(s) + i
            if d != 1:
                if out[j] not in (1, d):
                    raise ValueError(f"shapes {[tuple(x) for x in shapes]} do not broadcast")
                out[j] = d
    return tuple(out)


def kf_rows_cols(shape, rank, k):
    if len(shape) != rank:
        raise ValueError(f"this synthesized kernel expects rank-{rank} operands, got shape {tuple(shape)}")
    rows, cols = 1, 1
    for s in shape[:rank - k]:
        rows *= s
    for s in shape[rank - k:]:
        cols *= s
    return rows, cols


def kf_prep(t, shape, nl, inner, mode):
    """An operand as the kernel reads it: (tensor whose memory the kernel indexes, strides of the row dims).

    inner: 1 when the operand varies along the row (read at stride 1), 0 when it holds one value per row.
    mode: 0 dense rows, 1 the same for every row, 2 any strides (passed to the kernel).
    """
    if not isinstance(t, torch.Tensor):
        t = torch.tensor(t, dtype=torch.float32)
    e = t.expand(shape)
    st = e.stride()
    n = len(shape)
    if inner:
        acc, ok = 1, True
        for i in range(n - 1, nl - 1, -1):
            if shape[i] != 1 and st[i] != acc:
                ok = False
            acc *= shape[i]
        if not ok or (mode == 0 and not (t.is_contiguous() and t.numel() == e.numel())):
            t = e[(0,) * nl].contiguous() if mode == 1 else e.contiguous()
            e = t.expand(shape)
            st = e.stride()
    else:
        for i in range(nl, n):
            if shape[i] != 1 and st[i] != 0:
                raise ValueError("synthesized kernel: an operand varies along the row where one value per row was "
                                 "expected (input shapes differ from the traced ones)")
        rows = 1
        for s in shape[:nl]:
            rows *= s
        if mode == 0 and not (t.is_contiguous() and t.numel() == rows):
            t = e[(slice(None),) * nl + (0,) * (n - nl)].contiguous()
            e = t
            st = t.stride()
    lead = [0 if shape[i] == 1 else st[i] for i in range(nl)]
    if mode == 1 and any(lead):
        raise ValueError("synthesized kernel: an operand varies across rows where it was constant when traced")
    if not t.is_contiguous():
        span = 1 + sum((s - 1) * x for s, x in zip(t.shape, t.stride())) if t.numel() else 0
        t = torch.as_strided(t, (span,), (1,))
    return t, lead


def kf_layout(k, *ts):
    """The key of kernel k's cached launch set-up: every operand's shape, strides, dtype and device (never its
    address or values: the set-up depends on nothing else). None when an operand is not a tensor."""
    key = [k]
    for t in ts:
        if not isinstance(t, torch.Tensor):
            return None
        key += (t.shape, t.stride(), t.dtype, t.device)
    return tuple(key)


def kf_views(*pairs):
    """How kf_prep's operands (a, t) derive from the tensors t given: True when each is t itself; else, per operand,
    0 (t itself) or its length as a flat view of t's memory (a strided operand); None when one is a copy, which a
    cached set-up cannot replay."""
    if all(a is t for a, t in pairs):
        return True
    views = []
    for a, t in pairs:
        if a is t:
            views.append(0)
        elif (isinstance(t, torch.Tensor) and a.dim() == 1 and a.is_contiguous() and a.dtype == t.dtype
              and a.device == t.device and (base := kf_address(t)) is not None and kf_address(a) == base):
            views.append(a.numel())
        else:
            return None
    return tuple(views)


def kf_address(t):
    try:
        return t.data_ptr()
    except RuntimeError:  # a device without addressable memory: nothing is cached
        return None


def kf_replay(views, *ts):
    return tuple(t if n == 0 else torch.as_strided(t, (n,), (1,)) for t, n in zip(ts, views))


def kf_split_of(rows, n, threads, sms):
    """(blocks sharing each of `rows` reductions of n elements, the elements each block takes: a multiple of 4, so
    vector loads stay aligned). Rows fewer than two rounds of the GPU's resident blocks are split until they are
    not, each block keeping at least 64 elements a thread; (1, n), a block a row as before, when the rows fill the
    GPU or are too short to share."""
    rounds = sms * (2048 // threads) * 2
    split = min((rounds + rows - 1) // max(rows, 1), n // (64 * threads))
    if split <= 1:
        return 1, n
    seg = ((n + split - 1) // split + 3) // 4 * 4
    return (n + seg - 1) // seg, seg


def kf_remember(plans, key, plan):
    if len(plans) > 64:
        plans.clear()
    plans[key] = plan


def kf_fast(dims, st):
    """(n, s) such that row r of an operand with these row dims and strides starts at (r % n) * s, or r * s when
    n is 0; (-1, 0) when no such pair exists (a division per dim). Most operands are linear over their trailing
    row dims and broadcast (stride 0) over the rest, so kernels need no per-dim division for them."""
    nl = len(dims)
    if nl == 0:
        return 0, 0
    s, n, d = st[-1], dims[-1], nl - 2
    while d >= 0 and (dims[d] == 1 or st[d] == s * n):
        n *= dims[d]
        d -= 1
    e = d
    while e >= 0 and (dims[e] == 1 or st[e] == 0):
        e -= 1
    if e >= 0:
        return -1, 0
    return (0, s) if d < 0 else (n, s)


def kf_meta(lead, strides, device):
    """The row dims, each operand's row strides, then each operand's kf_fast pair, as one int64 device tensor."""
    key = (tuple(lead), tuple(tuple(s) for s in strides), str(device))
    m = KF_META.get(key)
    if m is None:
        if len(KF_META) > 256:
            KF_META.clear()
        fast = [x for s in strides for x in kf_fast(lead, s)]
        m = torch.tensor(list(lead) + [x for s in strides for x in s] + fast, dtype=torch.int64, device=device)
        KF_META[key] = m
    return m
'''.strip("\n")



def names_used(tree: ast.AST) -> set[str]:
    """The names a parsed program reads (docstrings and comments do not count)."""
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


@functools.lru_cache(maxsize=1)
def _blocks() -> list[tuple[str, str, frozenset[str]]]:
    """[(name, text, names of other helpers it uses)] of HELPERS' top-level definitions, in their order."""
    lines = HELPERS.splitlines()
    out = []
    for node in parse_ast(HELPERS).body:
        name = node.name if isinstance(node, ast.FunctionDef) else node.targets[0].id
        out.append((name, "\n".join(lines[node.lineno - 1:node.end_lineno]), frozenset(names_used(node) - {name})))
    return out


def helpers_for(used: set[str]) -> str:
    """The helpers among `used` (names a program reads) and, transitively, the helpers those call, in HELPERS'
    order ("" for none)."""
    blocks = _blocks()
    uses = {name: deps for name, _, deps in blocks}
    need: set[str] = set()
    stack = [n for n in used if n in uses]
    while stack:
        name = stack.pop()
        if name not in need:
            need.add(name)
            stack.extend(d for d in uses[name] if d in uses)
    return "\n\n\n".join(text for name, text, _ in blocks if name in need)
