"""Training-mode BatchNorm's per-channel statistics on the GPU (`bnstats`: mean and biased variance over (N, S) of
x viewed as (N, C, S)), and its launch.

Unsplit (`kf_split` 1: many channels, or few elements a channel) a block takes a channel, two passes (the mean, then
squared deviations from it) with double accumulators, as it always did. A few channels of many elements each
(KernelBench's 64 channels of 16.7M: 64 blocks on a 132-SM GPU) are split over several blocks a channel
(`split`): each block sums x - k and (x - k)^2 in double over its segment of the channel in one pass (k the
channel's first element, when finite, shared by every block of the channel, so the variance keeps its digits when
the mean is far from zero, as GroupNorm's pipelined statistics do), and the channel's last block adds the partials
in segment order: mean = k + E[x - k], var = E[(x - k)^2] - E[x - k]^2.
"""

from __future__ import annotations

from .split import launch_buffers

THREADS = 256


def _unsplit() -> list[str]:
    """A block a channel, two passes (the kernel's path when kf_split is 1)."""
    def sweep(term: str) -> list[str]:
        return ["        s = 0.0;",
                "        if (I >= blockDim.x) {",
                "            for (long long n = 0; n < O; ++n)",
                f"                for (long long j = threadIdx.x; j < I; j += blockDim.x) {{ "
                f"{term.format(v='x[n * sO + c * sR + j * sI]')} }}",
                "        } else {",
                "            for (long long e = threadIdx.x; e < O * I; e += blockDim.x) {",
                "                const long long n = e / I, j = e - n * I;",
                f"                {term.format(v='x[n * sO + c * sR + j * sI]')}",
                "            }", "        }",
                "        red[threadIdx.x] = s;", "        __syncthreads();",
                "        for (int w = blockDim.x >> 1; w > 0; w >>= 1) {",
                "            if (threadIdx.x < w) red[threadIdx.x] += red[threadIdx.x + w];",
                "            __syncthreads();", "        }",
                "        s = red[0];", "        __syncthreads();"]

    return (["    for (long long c = blockIdx.x; c < R; c += gridDim.x) {", "        double s;"] +
            sweep("s += (double){v};") + ["        const double mean = s / cnt;"] +
            sweep("const double d = (double){v} - mean; s += d * d;") +
            ["        if (threadIdx.x == 0) { out[c] = (float)mean; out[R + c] = (float)(s / cnt); }", "    }"])


def _split() -> list[str]:
    """Tasks (channel c, segment s: elements [e0, e1) of the channel in (n, j) order), one pass of shifted sums, the
    channel's last block combining (`split`)."""
    add = "{{ const double d = (double)({v}) - k; su += d; sq += d * d; }}"
    return [
        "    for (long long t = blockIdx.x; t < R * kf_split; t += gridDim.x) {",
        "        const long long c = t / kf_split, s = t - c * kf_split;",
        "        const long long e0 = s * kf_seg, e1 = min(O * I, e0 + kf_seg);",
        "        const float k0 = x[c * sR];",
        "        const double k = isfinite(k0) ? (double)k0 : 0.0;",
        "        double su = 0.0, sq = 0.0;",
        "        if (I >= blockDim.x) {",
        "            for (long long n = e0 / I; n * I < e1; ++n) {",
        "                const float* xr = x + n * sO + c * sR;",
        "                const long long j0 = max(e0 - n * I, 0ll), j1 = min(e1 - n * I, I);",
        "                if (sI == 1 && ((j0 | j1) & 3) == 0 && (((unsigned long long)xr) & 15) == 0) {",
        "                    // 16-byte loads: one float at a time leaves a reduction at about half the bandwidth",
        "                    for (long long q = j0 / 4 + threadIdx.x; q < j1 / 4; q += blockDim.x) {",
        "                        const float4 v = reinterpret_cast<const float4*>(xr)[q];",
        "                        " + " ".join(add.format(v=f"v.{lane}") for lane in "xyzw"),
        "                    }",
        "                } else {",
        "                    for (long long j = j0 + threadIdx.x; j < j1; j += blockDim.x) "
        + add.format(v="xr[j * sI]"),
        "                }",
        "            }",
        "        } else {",
        "            for (long long e = e0 + threadIdx.x; e < e1; e += blockDim.x) {",
        "                const long long n = e / I, j = e - n * I;",
        "                " + add.format(v="x[n * sO + c * sR + j * sI]"),
        "            }",
        "        }",
        "        su = kf_block_sum_d(su, red, true);",
        "        sq = kf_block_sum_d(sq, red, true);",
        "        double* p = kf_part + c * 2 * kf_split;",
        "        if (threadIdx.x == 0) { p[s] = su; p[kf_split + s] = sq; }",
        "        if (!kf_split_last(kf_done + c, kf_split)) continue;",
        "        su = kf_block_sum_d(kf_split_sum(p, kf_split), red, true);",
        "        sq = kf_block_sum_d(kf_split_sum(p + kf_split, kf_split), red, true);",
        "        if (threadIdx.x == 0) {",
        "            const double m = su / cnt, v = sq / cnt - m * m;",
        "            // rounding can leave a tiny negative; NaN (a channel holding inf or NaN) stays NaN",
        "            out[c] = (float)(k + m);",
        "            out[R + c] = (float)(v < 0.0 ? 0.0 : v);",
        "        }",
        "    }"]


def cuda_bnstats(col) -> list[str]:
    """The kernel's text (after the prelude's `kf_block_sum_d` and `split.CUDA_SPLIT`)."""
    return ([f"// {col.label}: per-channel batch statistics of x viewed as (N, C, S), a block a channel, or several "
             "(kf_split) a channel",
             f'extern "C" __global__ void {col.kname}(const float* __restrict__ x, float* __restrict__ out, '
             "long long O, long long R, long long I, long long sO, long long sR, long long sI, long long kf_split, "
             "long long kf_seg, double* __restrict__ kf_part, unsigned int* __restrict__ kf_done) {",
             f"    __shared__ double red[{THREADS}];",
             "    const double cnt = (double)O * (double)I;",
             "    if (kf_split == 1) {"] + ["    " + line for line in _unsplit()] +
            ["        return;", "    }"] + _split() + ["}"])


def bnstats_call(col) -> str:
    """The launch (after `kf_col_view` and `out`): the split chosen from the sizes, its buffers, the call."""
    return "\n".join([f"kf_split, kf_seg = kf_split_of(R, O * I, {THREADS}, self.kf_sms)"]
                     + launch_buffers(2, "R", "xc.device")
                     + [f"self.kf_mod.{col.kname}(grid=(max(1, min(R * kf_split, self.kf_sms * 8)),), "
                        f"block=({THREADS},), args=(xc, out, O, R, I, sO, sR, sI, kf_split, kf_seg, kf_part, kf_done))"])


__all__ = ["bnstats_call", "cuda_bnstats"]
