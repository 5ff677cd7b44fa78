// Q-value statistics partials shared by qstats.cu and td_loss.cu; prepended to every .cu source by
// compile.py. A ZsQPart folds rows of Q: min / max / sum of the row-max, sum of all Q, any
// non-finite. zs_qstats_write turns the fold of all rows into the QSTATS layout (layouts.py).
#ifndef ZS_QPART_CUH
#define ZS_QPART_CUH

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

// Fold one row of Q (cols values) into p (row max with fmaxf, row sum in float, added in double).
__device__ __forceinline__ void zs_qpart_add_row(ZsQPart& p, const float* __restrict__ row, int cols) {
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

// Fold one row of Q into lane 0's p with the 32 lanes of a warp (all lanes call it; lane l reads
// columns l, l + 32, ...): the row max (fmaxf) and the row sum (float, a warp tree) reach lane 0.
__device__ __forceinline__ void zs_qpart_add_row_warp(ZsQPart& p, const float* __restrict__ row, int cols) {
    const int lane = threadIdx.x & 31;
    float row_max = -ZS_INF_F;
    float row_sum = 0.0f;
    int bad = 0;
    for (int a = lane; a < cols; a += 32) {
        const float v = __ldg(row + a);
        bad |= zs_isfinite(v) ? 0 : 1;
        row_max = fmaxf(row_max, v);
        row_sum += v;
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        row_max = fmaxf(row_max, __shfl_down_sync(ZS_FULL_MASK, row_max, offset));
        row_sum += __shfl_down_sync(ZS_FULL_MASK, row_sum, offset);
        bad |= __shfl_down_sync(ZS_FULL_MASK, bad, offset);
    }
    if (lane == 0) {
        p.bad |= bad;
        p.mn = fminf(p.mn, row_max);
        p.mx = fmaxf(p.mx, row_max);
        p.sum_rowmax += (double)row_max;
        p.sum_all += (double)row_sum;
    }
}

// The QSTATS record of the fold of all rows x cols values (NaN stats and nan_flag 1 if any was not finite).
__device__ __forceinline__ void zs_qstats_write(const ZsQPart& p, long long rows, int cols, float* __restrict__ out) {
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

#endif  // ZS_QPART_CUH
