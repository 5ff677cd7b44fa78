// Q-value statistics over Q [rows, cols] in two launches, no host sync, graph-capturable:
//   pass 1 (zs_qstats_partial): grid=qstats_num_blocks(rows) blocks of ZS_QSTATS_BLOCK threads, one
//     row per thread (grid-stride); each block writes one ZS_QPART record to
//     scratch[ZS_QPART_SIZE * blockIdx.x:] (min row-max, max row-max, sum row-max, sum Q,
//     any non-finite 0/1).
//   pass 2 (zs_qstats_final): grid=1 block of ZS_QSTATS_BLOCK threads reduces the partials into
//     out (layout ZS_QSTATS: min / max / mean of row-max Q, mean Q, nan_flag); NaN stats if nan_flag.
// Sums run in double inside a block. Twin: reference.qstats. ZS_QSTATS_BLOCK, ZS_QPART_* and
// ZS_QSTATS_* are generated from qstats.py and layouts.py (compile.py).

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
        float* out = scratch + (long long)ZS_QPART_SIZE * blockIdx.x;
        out[ZS_QPART_MIN] = p.mn;
        out[ZS_QPART_MAX] = p.mx;
        out[ZS_QPART_SUM_ROWMAX] = (float)p.sum_rowmax;
        out[ZS_QPART_SUM_ALL] = (float)p.sum_all;
        out[ZS_QPART_BAD] = p.bad ? 1.0f : 0.0f;
    }
}

extern "C" __global__ void __launch_bounds__(ZS_QSTATS_BLOCK)
zs_qstats_final(const float* __restrict__ scratch, int num_partials, long long rows, int cols,
                float* __restrict__ out) {
    ZsQPart p = zs_qpart_identity();
    for (int i = threadIdx.x; i < num_partials; i += blockDim.x) {
        const float* part = scratch + (long long)ZS_QPART_SIZE * i;
        ZsQPart o;
        o.mn = part[ZS_QPART_MIN];
        o.mx = part[ZS_QPART_MAX];
        o.sum_rowmax = (double)part[ZS_QPART_SUM_ROWMAX];
        o.sum_all = (double)part[ZS_QPART_SUM_ALL];
        o.bad = part[ZS_QPART_BAD] != 0.0f ? 1 : 0;
        p = zs_qpart_merge(p, o);
    }
    p = zs_qpart_block_reduce(p);
    if (threadIdx.x == 0) {
        if (p.bad) {
            out[ZS_QSTATS_MIN] = ZS_NAN_F;
            out[ZS_QSTATS_MAX] = ZS_NAN_F;
            out[ZS_QSTATS_MEAN] = ZS_NAN_F;
            out[ZS_QSTATS_ALL_MEAN] = ZS_NAN_F;
            out[ZS_QSTATS_NAN_FLAG] = 1.0f;
        } else {
            out[ZS_QSTATS_MIN] = p.mn;
            out[ZS_QSTATS_MAX] = p.mx;
            out[ZS_QSTATS_MEAN] = (float)(p.sum_rowmax / (double)rows);
            out[ZS_QSTATS_ALL_MEAN] = (float)(p.sum_all / ((double)rows * (double)cols));
            out[ZS_QSTATS_NAN_FLAG] = 0.0f;
        }
    }
}
