"""The CUDA C++ device helpers every NVRTC candidate starts with: the `kf_*` math wrappers (`KF_FAST_MATH` picks
`__expf`), the strided row offset `kf_off`, and the warp- and block-wide reductions the row kernels call."""

from ..cfamily import COMMON_FNS, CUDA, SCALAR_FNS, math_wrappers

# the bit casts `exprs.HALF_MATH` (bf16/fp16 storage) is written over
# and the hardware conversions (one cvt instead of a dozen integer ops; round to nearest even, as the bit version)
CUDA_HALF_BITS = r"""
#if __CUDA_ARCH__ >= 800
__device__ __forceinline__ unsigned int kf_hw_bf16_bits(float f) {
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
#define KF_HW_BF16_BITS kf_hw_bf16_bits
#endif
#if __CUDA_ARCH__ >= 530
__device__ __forceinline__ unsigned int kf_hw_f16_bits(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
__device__ __forceinline__ float kf_hw_f16_float(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
#define KF_HW_F16_BITS kf_hw_f16_bits
#define KF_HW_F16_FLOAT kf_hw_f16_float
#endif
__device__ __forceinline__ unsigned int kf_as_uint(float f) { return __float_as_uint(f); }
__device__ __forceinline__ float kf_as_float(unsigned int b) { return __uint_as_float(b); }
"""

# four bf16/fp16 values in one 8-byte word, widened to (or narrowed from) a float4, lane x in the low half
_HALF_VEC = r"""
__device__ __forceinline__ float4 kf_ld4_@T(uint2 v) {
    return make_float4(kf_ld_@T((kf_@T)(v.x & 0xffffu)), kf_ld_@T((kf_@T)(v.x >> 16)),
                       kf_ld_@T((kf_@T)(v.y & 0xffffu)), kf_ld_@T((kf_@T)(v.y >> 16)));
}
__device__ __forceinline__ uint2 kf_st4_@T(float4 f) {
    return make_uint2((unsigned int)kf_st_@T(f.x) | ((unsigned int)kf_st_@T(f.y) << 16),
                      (unsigned int)kf_st_@T(f.z) | ((unsigned int)kf_st_@T(f.w) << 16));
}
"""
CUDA_HALF_VEC = "\n".join(_HALF_VEC.replace("@T", t).strip() for t in ("bf16", "f16"))

_LIMITS = r"""
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
#ifdef KF_FAST_MATH
__device__ __forceinline__ float kf_exp(float x) { return __expf(x); }
#else
"""
_HELPERS = r"""
// the offset of row r of an operand with these row dims and strides. The host reduces most layouts to a pair
// (n, s) (kf_fast in the program's Python): the offset is r * s when n is 0, else (r % n) * s, one division
// (32-bit when the values fit: a 64-bit division costs tens of instructions); n < 0 divides once per dim. Working
// the pair out here for every row cost rotary embedding 14 % of its kernel time on an H200 (1.373 -> 1.184 ms)
__device__ __forceinline__ bool kf_div_fits(long long r, long long n) { return ((unsigned long long)(r | n) >> 32) == 0; }
__device__ __forceinline__ long long kf_off(long long r, const long long* shape, const long long* st, int nl,
                                           long long n, long long s) {
    if (n == 0) return r * s;
    if (n > 0) return (kf_div_fits(r, n) ? (long long)((unsigned int)r % (unsigned int)n) : r % n) * s;
    long long off = 0;
    for (int d = nl - 1; d >= 0; --d) {
        const long long m = shape[d];
        if (kf_div_fits(r, m)) {
            const unsigned int q = (unsigned int)r / (unsigned int)m;
            off += (long long)((unsigned int)r - q * (unsigned int)m) * st[d];
            r = q;
        } else {
            off += (r % m) * st[d];
            r /= m;
        }
    }
    return off;
}
__device__ __forceinline__ float kf_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float kf_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) { const float w = __shfl_xor_sync(0xffffffffu, v, o); v = w > v ? w : v; }
    return v;
}
__device__ __forceinline__ float kf_warp_min(float v) {
    for (int o = 16; o > 0; o >>= 1) { const float w = __shfl_xor_sync(0xffffffffu, v, o); v = w < v ? w : v; }
    return v;
}
// block-wide reductions (blockDim.x a power of two, at most 1024); every thread gets the result
__device__ float kf_block_reduce(float v, int op, float* sh, bool warp) {
    const int t = threadIdx.x;
    if (warp) {
        v = op == 0 ? kf_warp_sum(v) : (op == 1 ? kf_warp_max(v) : kf_warp_min(v));
        if ((t & 31) == 0) sh[t >> 5] = v;
        __syncthreads();
        const int nw = (blockDim.x + 31) >> 5;
        const float ident = op == 0 ? 0.0f : (op == 1 ? -INFINITY : INFINITY);
        v = t < nw ? sh[t] : ident;
        if (t < 32) v = op == 0 ? kf_warp_sum(v) : (op == 1 ? kf_warp_max(v) : kf_warp_min(v));
        if (t == 0) sh[0] = v;
        __syncthreads();
    } else {
        sh[t] = v;
        __syncthreads();
        for (int s = blockDim.x >> 1; s > 0; s >>= 1) {
            if (t < s) {
                const float a = sh[t], b = sh[t + s];
                sh[t] = op == 0 ? a + b : (op == 1 ? (b > a ? b : a) : (b < a ? b : a));
            }
            __syncthreads();
        }
    }
    const float r = sh[0];
    __syncthreads();
    return r;
}
// block-wide double sum (blockDim.x a power of two, 32 to 1024); every thread gets the result
__device__ double kf_block_sum_d(double v, double* sh, bool warp) {
    const int t = threadIdx.x;
    if (warp) {
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if ((t & 31) == 0) sh[t >> 5] = v;
        __syncthreads();
        v = t < (int)(blockDim.x >> 5) ? sh[t] : 0.0;
        if (t < 32) {
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        }
        if (t == 0) sh[0] = v;
        __syncthreads();
    } else {
        sh[t] = v;
        __syncthreads();
        for (int s = blockDim.x >> 1; s > 0; s >>= 1) {
            if (t < s) sh[t] += sh[t + s];
            __syncthreads();
        }
    }
    const double r = sh[0];
    __syncthreads();
    return r;
}
"""
CUDA_PRELUDE = (_LIMITS + math_wrappers(CUDA, ("exp",)) + "#endif\n" + math_wrappers(CUDA, SCALAR_FNS[1:] + COMMON_FNS)
                + _HELPERS.lstrip("\n"))

# Loads of an operand that other rows read again (broadcast over a row dim: an attention mask, RoPE tables) ask L2 to
# keep it ahead of the rows streaming past, which would otherwise evict it between its readers (docs/PERF_NOTES.md).
CUDA_L2_KEEP = r"""
#if __CUDA_ARCH__ >= 800
__device__ __forceinline__ unsigned long long kf_keep_policy() {
    unsigned long long p;
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    return p;
}
__device__ __forceinline__ float4 kf_keep_f4(const float4* a) {
    float4 v;
    asm("ld.global.nc.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
        : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(a), "l"(kf_keep_policy()));
    return v;
}
__device__ __forceinline__ uint2 kf_keep_u2(const uint2* a) {
    uint2 v;
    asm("ld.global.nc.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;" : "=r"(v.x), "=r"(v.y) : "l"(a), "l"(kf_keep_policy()));
    return v;
}
#else
__device__ __forceinline__ float4 kf_keep_f4(const float4* a) { return *a; }
__device__ __forceinline__ uint2 kf_keep_u2(const uint2* a) { return *a; }
#endif
"""
