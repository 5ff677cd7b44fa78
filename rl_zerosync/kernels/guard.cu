// Training guard: per-update check (flags, clipped loss, loss scale, found_inf for fused Adam) and
// the running accumulators read once per training iteration. One thread; launched with grid=1,
// block=1. Twins: reference.guard_check / reference.guard_accumulate / reference.guard_record.

// flags = (nonfinite, loss_clipped, grad_collapse).
// warmup_ptr may be null: then warmup_value (a host float) is used.
extern "C" __global__ void zs_guard_check(const float* loss, const float* grad_norm,
                                          const float* warmup_ptr, float warmup_value, int* flags,
                                          float* clipped_loss, float* loss_scale, float* found_inf,
                                          float loss_clip, float collapse_threshold) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    const float l = loss[0];
    const float g = grad_norm[0];
    const float warm = warmup_ptr != 0 ? warmup_ptr[0] : warmup_value;
    const bool nonfinite = !(zs_isfinite(l) && zs_isfinite(g));
    const bool clipped = !nonfinite && l > loss_clip;
    const bool collapse = warm != 0.0f && !nonfinite && g < collapse_threshold;
    const float cl = nonfinite ? 0.0f : (clipped ? loss_clip : l);
    const float scale = nonfinite ? 0.0f : (clipped ? cl / l : 1.0f);
    flags[0] = nonfinite ? 1 : 0;
    flags[1] = clipped ? 1 : 0;
    flags[2] = collapse ? 1 : 0;
    clipped_loss[0] = cl;
    loss_scale[0] = scale;
    found_inf[0] = nonfinite ? 1.0f : 0.0f;
}

// accum += (loss, grad_norm, 1, nonfinite, clipped, collapse); loss and grad_norm are added only
// for finite steps. Shared by zs_guard_accumulate and zs_guard_record.
__device__ __forceinline__ void zs_guard_accumulate_one(const float* clipped_loss, const float* grad_norm,
                                                        const int* flags, double* accum) {
    const bool nonfinite = flags[0] != 0;
    accum[0] += nonfinite ? 0.0 : (double)clipped_loss[0];
    accum[1] += nonfinite ? 0.0 : (double)grad_norm[0];
    accum[2] += 1.0;
    accum[3] += (double)flags[0];
    accum[4] += (double)flags[1];
    accum[5] += (double)flags[2];
}

extern "C" __global__ void zs_guard_accumulate(const float* clipped_loss, const float* grad_norm,
                                               const int* flags, double* accum) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    zs_guard_accumulate_one(clipped_loss, grad_norm, flags, accum);
}

#define ZS_GUARD_CHECKS 3
#define ZS_GUARD_RECORD_FIELDS 6

// Everything the guard stores after the optimizer step, in one launch (after qstats and
// divergence):
// 1. accum as zs_guard_accumulate;
// 2. the Q stats (qstats output: min / max / mean of row-max Q, mean Q, nan_flag) folded into the
//    iteration aggregate qagg = (fmin of min, fmax of max, sum of mean row-max, sum of mean Q,
//    finite updates); the sums and the count take only updates whose Q was all finite;
// 3. per check c (triggers: flags[0] nonfinite, flags[2] grad collapse, div_flag divergence), the
//    first triggering update since the row was cleared: records[c] = (1, update_index, loss,
//    grad_norm, q min, q max), written only while records[c][0] == 0;
// 4. update_index += 1.
extern "C" __global__ void zs_guard_record(const float* clipped_loss, const float* loss,
                                           const float* grad_norm, const int* flags,
                                           const float* qstats, const int* div_flag, double* accum,
                                           double* qagg, double* records, double* update_index) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    zs_guard_accumulate_one(clipped_loss, grad_norm, flags, accum);
    const double q_min = (double)qstats[0];
    const double q_max = (double)qstats[1];
    const bool finite = qstats[4] == 0.0f;
    qagg[0] = fmin(qagg[0], q_min);
    qagg[1] = fmax(qagg[1], q_max);
    qagg[2] += finite ? (double)qstats[2] : 0.0;
    qagg[3] += finite ? (double)qstats[3] : 0.0;
    qagg[4] += finite ? 1.0 : 0.0;
    const double index = update_index[0];
    const int trig[ZS_GUARD_CHECKS] = {flags[0], flags[2], div_flag[0]};
    const double cur[ZS_GUARD_RECORD_FIELDS] = {1.0, index, (double)loss[0], (double)grad_norm[0], q_min, q_max};
    for (int c = 0; c < ZS_GUARD_CHECKS; ++c) {
        double* row = records + c * ZS_GUARD_RECORD_FIELDS;
        if (row[0] == 0.0 && trig[c] > 0) {
            for (int j = 0; j < ZS_GUARD_RECORD_FIELDS; ++j) row[j] = cur[j];
        }
    }
    update_index[0] = index + 1.0;
}
