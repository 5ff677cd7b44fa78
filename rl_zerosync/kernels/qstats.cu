// Q-value statistics over Q [rows, cols] in two launches, no host sync, graph-capturable:
//   pass 1 (zs_qstats_partial): grid=min(1024, ceil(rows/256)) blocks of 256 threads, one row per
//     thread (grid-stride); each block writes 5 partials to scratch[5 * blockIdx.x + k]:
//     (min row-max, max row-max, sum row-max, sum Q, any non-finite 0/1).
//   pass 2 (zs_qstats_final): grid=1 block of 256 threads reduces the partials into
//     out = (min row-max, max row-max, mean row-max, mean Q, nan_flag); NaN stats if nan_flag.
// Sums run in double inside a block. Twin: reference.qstats.

#define ZS_QSTATS_BLOCK 256
#define ZS_QSTATS_FIELDS 5

struct ZsQPart {
    float mn;
    float mx;
    double sum_rowmax;
    double sum_all;
    int bad;
};

__device__ __forceinline__ ZsQPart zs_qpart_identity() {
    ZsQPart p;
    p.mn = ZS_INF_F;
    p.mx = -ZS_INF_F;
    p.sum_rowmax = 0.0;
    p.sum_all = 0.0;
    p.bad = 0;
    return p;
}

__device__ __forceinline__ ZsQPart zs_qpart_merge(ZsQPart a, const ZsQPart& b) {
    a.mn = fminf(a.mn, b.mn);
    a.mx = fmaxf(a.mx, b.mx);
    a.sum_rowmax += b.sum_rowmax;
    a.sum_all += b.sum_all;
    a.bad |= b.bad;
    return a;
}

__device__ __forceinline__ ZsQPart zs_qpart_warp_reduce(ZsQPart p) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        ZsQPart o;
        o.mn = __shfl_down_sync(ZS_FULL_MASK, p.mn, offset);
        o.mx = __shfl_down_sync(ZS_FULL_MASK, p.mx, offset);
        o.sum_rowmax = __shfl_down_sync(ZS_FULL_MASK, p.sum_rowmax, offset);
        o.sum_all = __shfl_down_sync(ZS_FULL_MASK, p.sum_all, offset);
        o.bad = __shfl_down_sync(ZS_FULL_MASK, p.bad, offset);
        p = zs_qpart_merge(p, o);
    }
    return p;
}

// Block-wide reduction (blockDim.x a multiple of 32, at most 1024); the result is valid in thread 0.
__device__ __forceinline__ ZsQPart zs_qpart_block_reduce(ZsQPart p) {
    __shared__ ZsQPart warp_parts[32];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    p = zs_qpart_warp_reduce(p);
    if (lane == 0) warp_parts[warp] = p;
    __syncthreads();
    if (warp == 0) {
        const int num_warps = (int)(blockDim.x >> 5);
        p = lane < num_warps ? warp_parts[lane] : zs_qpart_identity();
        p = zs_qpart_warp_reduce(p);
    }
    return p;
}

extern "C" __global__ void __launch_bounds__(ZS_QSTATS_BLOCK)
zs_qstats_partial(const float* __restrict__ q, long long rows, int cols, float* __restrict__ scratch) {
    ZsQPart p = zs_qpart_identity();
    const long long stride = (long long)gridDim.x * (long long)blockDim.x;
    for (long long r = zs_thread_index(); r < rows; r += stride) {
        const float* row = q + r * (long long)cols;
        float row_max = -ZS_INF_F;
        float row_sum = 0.0f;
        for (int a = 0; a < cols; ++a) {
            const float v = __ldg(row + a);
            p.bad |= zs_isfinite(v) ? 0 : 1;
            row_max = fmaxf(row_max, v);
            row_sum += v;
        }
        p.mn = fminf(p.mn, row_max);
        p.mx = fmaxf(p.mx, row_max);
        p.sum_rowmax += (double)row_max;
        p.sum_all += (double)row_sum;
    }
    p = zs_qpart_block_reduce(p);
    if (threadIdx.x == 0) {
        float* out = scratch + (long long)ZS_QSTATS_FIELDS * blockIdx.x;
        out[0] = p.mn;
        out[1] = p.mx;
        out[2] = (float)p.sum_rowmax;
        out[3] = (float)p.sum_all;
        out[4] = p.bad ? 1.0f : 0.0f;
    }
}

extern "C" __global__ void __launch_bounds__(ZS_QSTATS_BLOCK)
zs_qstats_final(const float* __restrict__ scratch, int num_partials, long long rows, int cols,
                float* __restrict__ out) {
    ZsQPart p = zs_qpart_identity();
    for (int i = threadIdx.x; i < num_partials; i += blockDim.x) {
        const float* part = scratch + (long long)ZS_QSTATS_FIELDS * i;
        ZsQPart o;
        o.mn = part[0];
        o.mx = part[1];
        o.sum_rowmax = (double)part[2];
        o.sum_all = (double)part[3];
        o.bad = part[4] != 0.0f ? 1 : 0;
        p = zs_qpart_merge(p, o);
    }
    p = zs_qpart_block_reduce(p);
    if (threadIdx.x == 0) {
        if (p.bad) {
            out[0] = ZS_NAN_F;
            out[1] = ZS_NAN_F;
            out[2] = ZS_NAN_F;
            out[3] = ZS_NAN_F;
            out[4] = 1.0f;
        } else {
            out[0] = p.mn;
            out[1] = p.mx;
            out[2] = (float)(p.sum_rowmax / (double)rows);
            out[3] = (float)(p.sum_all / ((double)rows * (double)cols));
            out[4] = 0.0f;
        }
    }
}
