"""The CUDA column reductions to one value a column (`columns.SPLIT_KINDS`: sum, mean, max, min, argmax, argmin):
each column shared among k threads (`kf_col_split`, chosen at launch: up to 8 unless the columns alone fill the GPU
many times over). A block is 128 columns by k threads, thread y reading rows y, y + k, y + 2k, ... four loads ahead,
and the k partials are combined through shared memory in a fixed order, so a result is the same bits on every run
(argmax / argmin compare (value, index) pairs: the first index of the extreme, the first NaN). At KernelBench's
(128, 4096, 4095) over dim 1 a block then reads 8 consecutive rows of its 128 columns at a time; a thread walking
its column alone ran slower than eager (0.86x a sum on an H100), and so did each thread taking one contiguous
segment of the rows, and blocks 64 or 32 columns wide."""

from __future__ import annotations

import re

from ..col_chains import c_read
from ..col_programs import base_program, expand, out_type, program, row_loads, row_params
from ...lower.colops import ColOp

# a CUDA column reduction's block: SPLIT_COLS consecutive columns by k threads; each thread reads UNROLL of its rows
# before folding them in, in order. Sums at KernelBench's size on an H100 (eager 3.03-3.06 ms): 128 x 8 3.02 ms,
# 128 x 4 3.04, 64 x 8 3.12-3.13, 32 x 16 3.31; 4 loads ahead faster than 8 on an H200 (2.00 vs 2.17 ms), 2 no
# faster on an H100
SPLIT_COLS = 128
UNROLL = 4


def shared_bytes(col: ColOp) -> int:
    """Dynamic shared memory a `columns.SPLIT_KINDS` kernel's block needs per thread a column (times k): an 8-byte slot per
    column per state value for the partials."""
    return 8 * SPLIT_COLS * len(base_program(col, gpu=True)["state"])


def cuda_split_column(col: ColOp) -> list[str]:
    """A column reduction (`columns.SPLIT_KINDS`): blocks of SPLIT_COLS consecutive columns by k = blockDim.y threads
    (`kf_col_split`); thread y folds in rows y, y + k, ... in order, UNROLL of them loaded before any is folded in,
    then thread 0 of each column combines the k partials from shared memory, in thread order."""
    prog = program(col, gpu=True)
    (step,), u = prog["passes"], UNROLL
    body, loads = expand(step, False), row_loads(col)
    at_r = "const long long r = kf_r + u * kf_k; " if re.search(r"\br\b", body + loads) else ""
    state = prog["state"]
    partials = " ".join(f"const {ctype} kf_p_{name} = kf_sh_{name}[kf_j * blockDim.x + threadIdx.x];"
                        for ctype, name, _ in state)
    # the partials live in the launch's dynamic shared memory (`shared_bytes`), a slot of 8 bytes per thread per
    # state value: none for k = 1, so a thread owning its column costs no shared memory and blocks stay resident
    slots = [f"{ctype}* kf_sh_{name} = ({ctype}*)(kf_colsh + {j} * blockDim.x * blockDim.y);"
             for j, (ctype, name, _) in enumerate(state)]
    combine = re.sub(r"P\((\w+)\)", r"kf_p_\1", expand(prog["combine"], False))
    return ([f"// {col.label}: column reduction ({col.kind}), a column shared by blockDim.y threads (coalesced over i), "
             "their partials combined in a fixed order",
             # up to SPLIT_COLS * 8 threads a block, two blocks an SM: at most 32 registers a thread, so the largest
             # block launches and the SM stays full (128 x 8 sums at KernelBench's size on an H100 took 3.79 ms with
             # the bound at one block an SM, the compiler's registers leaving half the SM idle, 3.02 ms with 32)
             f'extern "C" __global__ void __launch_bounds__({SPLIT_COLS * 8}, 2) {col.kname}('
             f"const float* __restrict__ x, {out_type(col, True)}* __restrict__ out, {row_params(col, ' __restrict__')}"
             "long long O, long long R, long long I, long long sO, long long sR, long long sI) {"]
            + ["    extern __shared__ double kf_colsh[];",
               "    const long long kf_k = blockDim.y;  // this thread's rows: threadIdx.y, threadIdx.y + kf_k, ...",
               # every thread of the block runs every round (it takes part in the combine's barriers)
               "    for (long long kf_c = blockIdx.x * (long long)blockDim.x; kf_c < O * I; "
               "kf_c += (long long)gridDim.x * blockDim.x) {",
               "        const long long t = kf_c + threadIdx.x;",
               "        const bool kf_live = t < O * I;",
               "        const long long o = kf_live ? t / I : 0, i = kf_live ? t - o * I : 0;",
               "        const float* xo = x + o * sO + i * sI;"]
            + [f"        {ctype} {name} = {init};" for ctype, name, init in state]
            + ["        if (kf_live) {",
               "            long long kf_r = threadIdx.y;",
               f"            for (; kf_r + {u - 1} * kf_k < R; kf_r += {u} * kf_k) {{",
               f"                float kf_v[{u}];",
               "                #pragma unroll",
               f"                for (int u = 0; u < {u}; ++u) kf_v[u] = xo[(kf_r + u * kf_k) * sR];",
               "                #pragma unroll",
               f"                for (int u = 0; u < {u}; ++u) {{ {at_r}{loads}const float v = "
               f"{c_read(col, 'kf_v[u]')}; {body} }}",
               "            }",
               f"            for (long long r = kf_r; r < R; r += kf_k) {{ {loads}const float v = "
               f"{c_read(col, 'xo[r * sR]')}; {body} }}",
               "        }",
               "        if (kf_k > 1) {",
               "            " + " ".join(slots),
               "            const unsigned int kf_me = threadIdx.y * blockDim.x + threadIdx.x;",
               "            " + " ".join(f"kf_sh_{name}[kf_me] = {name};" for _, name, _ in state),
               "            __syncthreads();",
               "            if (threadIdx.y == 0) {",
               f"                for (unsigned int kf_j = 1; kf_j < kf_k; ++kf_j) {{ {partials} {combine} }}",
               "            }",
               "            __syncthreads();  // the block's next round writes its partials again",
               "        }",
               "        if (kf_live && threadIdx.y == 0) " + expand(prog["final"], False).replace("OUT", "out[t]"),
               "    }", "}"])
