// LayerNorm + ReLU of the Q network's hidden layers, forward and backward (twins:
// reference.layernorm_relu / reference.layernorm_backward: torch's layer_norm, relu and their
// gradients). Float32; rows are contiguous [rows, n]; eps as nn.LayerNorm's.
//
// zs_layernorm_relu: up to two jobs (online rows, target rows), one warp per row (ZS_LN_WARPS
// rows per block, grid-stride): mean = sum(z) / n, var = sum((z - mean)^2) / n (biased, as torch),
// rstd = rsqrt(var + eps), a = relu((z - mean) * rstd * gamma + beta) (a NaN stays NaN), and
// stats[row] = (mean, rstd) for the backward.
//
// zs_layernorm_backward: dy = the gradient at the LayerNorm's output (ReLU's mask applied), for the
// B rows of the batch. Per row (one warp): xhat = (z - mean) * rstd, g = dy * gamma,
// dz = rstd * (g - mean(g) - xhat * mean(g * xhat)). Each block owns `rows_per_block` consecutive
// rows and sums dgamma = sum(dy * xhat) and dbeta = sum(dy) over them, one thread per column in row
// order, into its record of `part` (2 n floats); the block that counts last in blocks_done sums the
// records in block order into dgamma and dbeta and resets blocks_done to 0 (0 at launch).

__device__ __forceinline__ float zs_warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(ZS_FULL_MASK, v, offset);
    return v;
}

__device__ __forceinline__ void zs_ln_row(const float* __restrict__ z, const float* __restrict__ gamma,
                                          const float* __restrict__ beta, float* __restrict__ a,
                                          float* __restrict__ stats, int n, float eps, int lane) {
    float s = 0.0f;
    for (int c = lane; c < n; c += 32) s += z[c];
    const float mean = zs_warp_sum(s) / (float)n;
    float v = 0.0f;
    for (int c = lane; c < n; c += 32) {
        const float d = z[c] - mean;
        v += d * d;
    }
    const float rstd = rsqrtf(zs_warp_sum(v) / (float)n + eps);
    for (int c = lane; c < n; c += 32) {
        float y = (z[c] - mean) * rstd * gamma[c] + beta[c];
        if (y < 0.0f) y = 0.0f;  // NaN < 0 is false: NaN stays NaN
        a[c] = y;
    }
    if (lane == 0) {
        stats[0] = mean;
        stats[1] = rstd;
    }
}

// grid = blocks0 + blocks1 (blocks_j = ceil(rows_j / ZS_LN_WARPS)), block = 32 * ZS_LN_WARPS.
extern "C" __global__ void __launch_bounds__(32 * ZS_LN_WARPS)
zs_layernorm_relu(const float* z0, const float* g0, const float* b0, float* a0, float* s0, int rows0,
                  const float* z1, const float* g1, const float* b1, float* a1, float* s1, int rows1,
                  int n, float eps) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int blocks0 = (rows0 + ZS_LN_WARPS - 1) / ZS_LN_WARPS;
    const bool first = (int)blockIdx.x < blocks0;
    const int row = (first ? (int)blockIdx.x : (int)blockIdx.x - blocks0) * ZS_LN_WARPS + warp;
    if (row >= (first ? rows0 : rows1)) return;
    const long long off = (long long)row * n;
    if (first) zs_ln_row(z0 + off, g0, b0, a0 + off, s0 + 2LL * row, n, eps, lane);
    else zs_ln_row(z1 + off, g1, b1, a1 + off, s1 + 2LL * row, n, eps, lane);
}

// grid = ceil(rows / rows_per_block), block = 32 * ZS_LN_WARPS; part holds 2 n floats per block.
extern "C" __global__ void __launch_bounds__(32 * ZS_LN_WARPS)
zs_layernorm_backward(const float* __restrict__ dy, const float* __restrict__ z, const float* __restrict__ stats,
                      const float* __restrict__ gamma, float* __restrict__ dz, float* dgamma, float* dbeta,
                      float* part, int* blocks_done, int rows, int n, int rows_per_block) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int r0 = (int)blockIdx.x * rows_per_block;
    const int r1 = min(rows, r0 + rows_per_block);
    for (int r = r0 + warp; r < r1; r += ZS_LN_WARPS) {
        const long long off = (long long)r * n;
        const float mean = stats[2LL * r], rstd = stats[2LL * r + 1];
        float sg = 0.0f, sgx = 0.0f;
        for (int c = lane; c < n; c += 32) {
            const float g = dy[off + c] * gamma[c];
            sg += g;
            sgx += g * ((z[off + c] - mean) * rstd);
        }
        const float c1 = zs_warp_sum(sg) / (float)n, c2 = zs_warp_sum(sgx) / (float)n;
        for (int c = lane; c < n; c += 32) {
            const float xhat = (z[off + c] - mean) * rstd;
            dz[off + c] = rstd * (dy[off + c] * gamma[c] - c1 - xhat * c2);
        }
    }
    float* mine = part + 2LL * n * blockIdx.x;
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        float sgam = 0.0f, sbet = 0.0f;
        for (int r = r0; r < r1; ++r) {
            const long long off = (long long)r * n;
            const float d = dy[off + c];
            sgam += d * ((z[off + c] - stats[2LL * r]) * stats[2LL * r + 1]);
            sbet += d;
        }
        mine[c] = sgam;
        mine[n + c] = sbet;
    }
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(blocks_done, 1) == (int)gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        float sgam = 0.0f, sbet = 0.0f;
        for (int b = 0; b < (int)gridDim.x; ++b) {
            sgam += __ldcg(&part[2LL * n * b + c]);
            sbet += __ldcg(&part[2LL * n * b + n + c]);
        }
        dgamma[c] = sgam;
        dbeta[c] = sbet;
    }
    if (threadIdx.x == 0) blocks_done[0] = 0;
}
