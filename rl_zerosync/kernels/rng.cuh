// Counter-based RNG: the CUDA mirror of rl_zerosync/kernels/rng.py (change both together).
// All maths is uint32 with wrap-around; the torch side does the same on int64 masked to 32 bits.
// ZS_HASH_MUL and ZS_GOLDEN are generated from rng.HASH_MUL / rng.GOLDEN (compile.py).
#ifndef ZS_RNG_CUH
#define ZS_RNG_CUH

// The 0x45d9f3b integer finaliser: two multiply-xorshift rounds.
__device__ __forceinline__ unsigned int zs_hash32(unsigned int x) {
    x = ((x >> 16) ^ x) * ZS_HASH_MUL;
    x = ((x >> 16) ^ x) * ZS_HASH_MUL;
    return (x >> 16) ^ x;
}

// Mix v into the running hash h.
__device__ __forceinline__ unsigned int zs_combine(unsigned int h, unsigned int v) {
    return zs_hash32(h ^ (v + ZS_GOLDEN + (h << 6) + (h >> 2)));
}

// Hash of (seed key, step, stream); seed_key is rng.seed_key(seed), computed on the host.
__device__ __forceinline__ unsigned int zs_stream_key(unsigned int seed_key, long long step,
                                                      unsigned int stream) {
    const unsigned long long s = (unsigned long long)step;
    unsigned int h = zs_combine(seed_key, (unsigned int)(s & 0xffffffffull));
    h = zs_combine(h, (unsigned int)(s >> 32));
    return zs_combine(h, stream);
}

// 32 random bits for element i of a stream.
__device__ __forceinline__ unsigned int zs_bits(unsigned int stream_key, unsigned int i) {
    return zs_combine(stream_key, i);
}

// Uniform in [0, 1) from the top 24 bits (exact in float32).
__device__ __forceinline__ float zs_uniform24(unsigned int bits) {
    return (float)(bits >> 8) * 5.9604644775390625e-08f;
}

// Index in [0, n) from the top 24 bits: (bits24 * n) >> 24.
__device__ __forceinline__ int zs_random_index(unsigned int bits, int n) {
    return (int)(((unsigned long long)(bits >> 8) * (unsigned long long)n) >> 24);
}

#endif  // ZS_RNG_CUH
