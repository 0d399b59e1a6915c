"""The CUDA C++ device helpers every NVRTC candidate starts with: the `kf_*` math wrappers (`KF_FAST_MATH` picks
`__expf`), the strided row offset `kf_off`, and the warp- and block-wide reductions the row kernels call."""

# the bit casts `exprs.HALF_MATH` (bf16/fp16 storage) is written over
CUDA_HALF_BITS = r"""
__device__ __forceinline__ unsigned int kf_as_uint(float f) { return __float_as_uint(f); }
__device__ __forceinline__ float kf_as_float(unsigned int b) { return __uint_as_float(b); }
"""

CUDA_PRELUDE = r"""
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
#ifdef KF_FAST_MATH
__device__ __forceinline__ float kf_exp(float x) { return __expf(x); }
#else
__device__ __forceinline__ float kf_exp(float x) { return expf(x); }
#endif
__device__ __forceinline__ float kf_log(float x) { return logf(x); }
__device__ __forceinline__ float kf_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ float kf_erf(float x) { return erff(x); }
__device__ __forceinline__ float kf_log1p(float x) { return log1pf(x); }
__device__ __forceinline__ float kf_expm1(float x) { return expm1f(x); }
__device__ __forceinline__ float kf_fabs(float x) { return fabsf(x); }
__device__ __forceinline__ float kf_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ float kf_pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ float kf_sin(float x) { return sinf(x); }
__device__ __forceinline__ float kf_cos(float x) { return cosf(x); }
__device__ __forceinline__ float kf_tan(float x) { return tanf(x); }
__device__ __forceinline__ float kf_atan(float x) { return atanf(x); }
__device__ __forceinline__ float kf_sinh(float x) { return sinhf(x); }
__device__ __forceinline__ float kf_cosh(float x) { return coshf(x); }
__device__ __forceinline__ float kf_asin(float x) { return asinf(x); }
__device__ __forceinline__ float kf_acos(float x) { return acosf(x); }
__device__ __forceinline__ float kf_floor(float x) { return floorf(x); }
__device__ __forceinline__ float kf_ceil(float x) { return ceilf(x); }
__device__ __forceinline__ float kf_rint(float x) { return rintf(x); }
__device__ __forceinline__ float kf_trunc(float x) { return truncf(x); }
__device__ __forceinline__ long long kf_off(long long r, const long long* shape, const long long* st, int nl) {
    long long off = 0;
    for (int d = nl - 1; d >= 0; --d) {
        const long long n = shape[d];
        off += (r % n) * st[d];
        r /= n;
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
