// Q-value statistics over Q [rows, cols] in two launches, no host sync, graph-capturable:
//   pass 1 (zs_qstats_partial): grid=qstats_num_blocks(rows) blocks of ZS_QSTATS_BLOCK threads, one
//     row per thread (grid-stride); each block writes one ZS_QPART record to
//     scratch[ZS_QPART_SIZE * blockIdx.x:] (min row-max, max row-max, sum row-max, sum Q,
//     any non-finite 0/1).
//   pass 2 (zs_qstats_final): grid=1 block of ZS_QSTATS_BLOCK threads reduces the partials into
//     out (layout ZS_QSTATS: min / max / mean of row-max Q, mean Q, nan_flag); NaN stats if nan_flag.
// Sums run in double inside a block (ZsQPart and its reductions: qpart.cuh). Twin: reference.qstats.
// ZS_QSTATS_BLOCK, ZS_QPART_* and ZS_QSTATS_* are generated from qstats.py and layouts.py (compile.py).

extern "C" __global__ void __launch_bounds__(ZS_QSTATS_BLOCK)
zs_qstats_partial(const float* __restrict__ q, long long rows, int cols, float* __restrict__ scratch) {
    ZsQPart p = zs_qpart_identity();
    const long long stride = (long long)gridDim.x * (long long)blockDim.x;
    for (long long r = zs_thread_index(); r < rows; r += stride) {
        zs_qpart_add_row(p, q + r * (long long)cols, cols);
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
    if (threadIdx.x == 0) zs_qstats_write(p, rows, cols, out);
}
