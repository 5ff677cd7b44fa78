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

#endif  // ZS_COMMON_CUH
