// Shared helpers for the rl_zerosync kernels; prepended to every .cu source by compile.py.
// NVRTC built-ins only (no standard headers): `long long`, `unsigned int`, CUDA math intrinsics.
#ifndef ZS_COMMON_CUH
#define ZS_COMMON_CUH

#define ZS_INF_F __int_as_float(0x7f800000)
#define ZS_NAN_F __int_as_float(0x7fffffff)
#define ZS_FLT_MAX __int_as_float(0x7f7fffff)
#define ZS_FULL_MASK 0xffffffffu

// True for every float except NaN and +-Inf (the comparison is false for NaN).
__device__ __forceinline__ bool zs_isfinite(float x) { return fabsf(x) <= ZS_FLT_MAX; }

__device__ __forceinline__ bool zs_isnan(float x) { return x != x; }

// Global index of this thread in a 1-D launch.
__device__ __forceinline__ long long zs_thread_index() {
    return (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x;
}

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024): warp shuffles, then warp 0
// sums the warp totals; the result is valid in thread 0 (in a fixed order: deterministic).
template <typename T>
__device__ __forceinline__ T zs_block_sum(T v) {
    __shared__ T warp_sums[32];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(ZS_FULL_MASK, v, offset);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        const int num_warps = (int)(blockDim.x >> 5);
        v = lane < num_warps ? warp_sums[lane] : (T)0;
        for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(ZS_FULL_MASK, v, offset);
    }
    return v;
}

#endif  // ZS_COMMON_CUH
