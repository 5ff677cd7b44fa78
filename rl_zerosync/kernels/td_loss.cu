// The routed / flat TD loss of one batch, its gradient with respect to Q, |TD| and the Q stats, in
// one launch (learner/loss.py has the formulas; twin: reference.td_loss).
//
// grid = td_loss_num_blocks(rows) blocks of ZS_TD_BLOCK threads, one warp per row (grid-stride over
// warps; lane l reads and writes columns l, l + 32, ...).
// Row i: a* = argmax q_select[i] (the first NaN if any, else the first maximum, as torch.argmax);
// y = r + d * q_target[i, a*] with d = terminated ? 0 : discount (one multiply and one add, each
// rounded: no FMA); td = q[i, a_i] - y; L = huber (delta 1) or squared error; the row's gradient is
// dq[i, a_i] = w_i * L'(td) / rows (L' = clamp(td, -1, 1) or 2 td), 0 in every other column.
// An action outside [0, cols) gives a NaN loss term and a NaN gradient row (the guard then skips the
// step as non-finite); nothing is clamped.
//
// Each block writes one ZS_TDPART record (double) to scratch[ZS_TDPART_SIZE * blockIdx.x:]: the sum
// of w_i * L_i over its rows (summed by lane 0 of each warp) and the ZsQPart fold of its q rows
// (qpart.cuh). Thread 0 then fences and counts the block in blocks_done; the block that counts last reduces every record in a fixed
// order (deterministic), writes loss[0] = sum / rows and the QSTATS record of q to qstats_out, and
// resets blocks_done to 0 (it must be 0 at launch).
//
// Strided columns: actions (int64), rewards, discounts, weights (f32) and terminateds (bytes) are
// read at i * <column>_stride elements; weights and td_abs may be null (all-ones weights; no |TD|).

// The better of two (value, column) candidates for argmax: a NaN beats any number, then the larger
// value; ties (and two NaNs) go to the lower column (torch.argmax: the first NaN, else the first max).
__device__ __forceinline__ bool zs_argmax_better(float v, int i, float best_v, int best_i) {
    const bool nan_v = zs_isnan(v), nan_b = zs_isnan(best_v);
    if (nan_v != nan_b) return nan_v;
    if (!nan_v && v != best_v) return v > best_v;
    return i < best_i;
}

// argmax of a row with the 32 lanes of a warp (lane l reads columns l, l + 32, ...); every lane gets it.
__device__ __forceinline__ int zs_row_argmax_warp(const float* __restrict__ row, int cols) {
    const int lane = threadIdx.x & 31;
    float best_v = -ZS_INF_F;
    int best = cols;  // no column yet: loses to any real one
    for (int a = lane; a < cols; a += 32) {
        const float v = __ldg(row + a);
        if (best == cols || zs_argmax_better(v, a, best_v, best)) {
            best_v = v;
            best = a;
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float o_v = __shfl_xor_sync(ZS_FULL_MASK, best_v, offset);
        const int o = __shfl_xor_sync(ZS_FULL_MASK, best, offset);
        if (o != cols && (best == cols || zs_argmax_better(o_v, o, best_v, best))) {
            best_v = o_v;
            best = o;
        }
    }
    return best;
}

extern "C" __global__ void __launch_bounds__(ZS_TD_BLOCK)
zs_td_loss(const float* __restrict__ q, const float* __restrict__ q_select, const float* __restrict__ q_target,
           const long long* __restrict__ actions, long long actions_stride, const float* __restrict__ rewards,
           long long rewards_stride, const float* __restrict__ discounts, long long discounts_stride,
           const unsigned char* __restrict__ terminateds, long long terminateds_stride,
           const float* __restrict__ weights, long long weights_stride, long long rows, int cols, int huber,
           float inv_rows, float* __restrict__ dq, float* __restrict__ loss, float* __restrict__ td_abs,
           float* __restrict__ qstats_out, double* scratch, int* blocks_done) {
    ZsQPart p = zs_qpart_identity();
    double loss_sum = 0.0;
    const int lane = threadIdx.x & 31;
    const long long warps = (long long)gridDim.x * (long long)(blockDim.x >> 5);
    for (long long i = zs_thread_index() >> 5; i < rows; i += warps) {
        const long long base = i * (long long)cols;
        const float* q_row = q + base;
        const float* t_row = q_target + base;
        // Every load that does not depend on the reductions is issued first (latency, not bandwidth,
        // bounds this kernel): the row's columns, the target row's first 64 entries, Q(s, a).
        const long long action = actions[i * actions_stride];
        const float reward = rewards[i * rewards_stride];
        const float boot = terminateds[i * terminateds_stride] ? 0.0f : discounts[i * discounts_stride];
        const float w = weights != nullptr ? weights[i * weights_stride] : 1.0f;
        const float t_lo = lane < cols ? __ldg(t_row + lane) : 0.0f;
        const float t_hi = lane + 32 < cols ? __ldg(t_row + lane + 32) : 0.0f;
        const bool valid = action >= 0 && action < (long long)cols;
        const float q_sa = valid ? __ldg(q_row + action) : ZS_NAN_F;
        zs_qpart_add_row_warp(p, q_row, cols);
        const int a_star = zs_row_argmax_warp(q_select + base, cols);
        const float q_next = cols <= 64 ? __shfl_sync(ZS_FULL_MASK, a_star < 32 ? t_lo : t_hi, a_star & 31)
                                        : __ldg(t_row + a_star);
        const float y = __fadd_rn(reward, __fmul_rn(boot, q_next));
        const float td = valid ? __fsub_rn(q_sa, y) : ZS_NAN_F;
        const float abs_td = fabsf(td);
        float term, grad;
        if (huber) {
            term = abs_td < 1.0f ? __fmul_rn(__fmul_rn(0.5f, td), td) : __fsub_rn(abs_td, 0.5f);
            grad = zs_isnan(td) ? td : fminf(fmaxf(td, -1.0f), 1.0f);
        } else {
            term = __fmul_rn(td, td);
            grad = __fmul_rn(2.0f, td);
        }
        const float g = __fmul_rn(__fmul_rn(w, inv_rows), grad);
        float* dq_row = dq + base;
        for (int a = lane; a < cols; a += 32) dq_row[a] = valid ? (a == (int)action ? g : 0.0f) : ZS_NAN_F;
        if (lane == 0) {
            loss_sum += (double)__fmul_rn(w, term);
            if (td_abs != nullptr) td_abs[i] = abs_td;
        }
    }
    p = zs_qpart_block_reduce(p);
    loss_sum = zs_block_sum<double>(loss_sum);
    __shared__ bool last;
    if (threadIdx.x == 0) {
        double* part = scratch + (long long)ZS_TDPART_SIZE * blockIdx.x;
        part[ZS_TDPART_LOSS] = loss_sum;
        part[ZS_TDPART_MIN] = (double)p.mn;
        part[ZS_TDPART_MAX] = (double)p.mx;
        part[ZS_TDPART_SUM_ROWMAX] = p.sum_rowmax;
        part[ZS_TDPART_SUM_ALL] = p.sum_all;
        part[ZS_TDPART_BAD] = (double)p.bad;
        __threadfence();
        last = atomicAdd(blocks_done, 1) == (int)gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    // The last block: every record is written and fenced.
    __threadfence();
    ZsQPart total = zs_qpart_identity();
    double total_loss = 0.0;
    for (int b = threadIdx.x; b < (int)gridDim.x; b += blockDim.x) {
        const volatile double* part = scratch + (long long)ZS_TDPART_SIZE * b;
        ZsQPart o;
        o.mn = (float)part[ZS_TDPART_MIN];
        o.mx = (float)part[ZS_TDPART_MAX];
        o.sum_rowmax = part[ZS_TDPART_SUM_ROWMAX];
        o.sum_all = part[ZS_TDPART_SUM_ALL];
        o.bad = part[ZS_TDPART_BAD] != 0.0 ? 1 : 0;
        total = zs_qpart_merge(total, o);
        total_loss += part[ZS_TDPART_LOSS];
    }
    __syncthreads();  // the shared reduction buffers are reused
    total = zs_qpart_block_reduce(total);
    total_loss = zs_block_sum<double>(total_loss);
    if (threadIdx.x == 0) {
        loss[0] = (float)(total_loss / (double)rows);
        zs_qstats_write(total, rows, cols, qstats_out);
        blocks_done[0] = 0;
    }
}
