// Training guard: per-update check (flags, clipped loss, loss scale, found_inf for adam_step) and
// the running accumulators read once per training iteration. One thread; launched with grid=1,
// block=1. Twins: reference.guard_check / reference.guard_accumulate / reference.guard_record.
// Buffers are addressed through the generated layouts of layouts.py (compile.py): ZS_FLAG_*,
// ZS_ACCUM_*, ZS_QSTATS_*, ZS_QAGG_*, ZS_RECORD_* and ZS_CHECK_*.

// flags (layout ZS_FLAG) = (nonfinite, loss_clipped, grad_collapse).
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
    flags[ZS_FLAG_NONFINITE] = nonfinite ? 1 : 0;
    flags[ZS_FLAG_LOSS_CLIPPED] = clipped ? 1 : 0;
    flags[ZS_FLAG_GRAD_COLLAPSE] = collapse ? 1 : 0;
    clipped_loss[0] = cl;
    loss_scale[0] = scale;
    found_inf[0] = nonfinite ? 1.0f : 0.0f;
}

// accum (layout ZS_ACCUM) += (loss, grad_norm, 1, nonfinite, clipped, collapse); loss and
// grad_norm are added only for finite steps. Shared by zs_guard_accumulate and zs_guard_record.
__device__ __forceinline__ void zs_guard_accumulate_one(const float* clipped_loss, const float* grad_norm,
                                                        const int* flags, double* accum) {
    const bool nonfinite = flags[ZS_FLAG_NONFINITE] != 0;
    accum[ZS_ACCUM_LOSS_SUM] += nonfinite ? 0.0 : (double)clipped_loss[0];
    accum[ZS_ACCUM_GRAD_NORM_SUM] += nonfinite ? 0.0 : (double)grad_norm[0];
    accum[ZS_ACCUM_UPDATES] += 1.0;
    accum[ZS_ACCUM_NONFINITE] += (double)flags[ZS_FLAG_NONFINITE];
    accum[ZS_ACCUM_CLIPPED] += (double)flags[ZS_FLAG_LOSS_CLIPPED];
    accum[ZS_ACCUM_COLLAPSE] += (double)flags[ZS_FLAG_GRAD_COLLAPSE];
}

extern "C" __global__ void zs_guard_accumulate(const float* clipped_loss, const float* grad_norm,
                                               const int* flags, double* accum) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    zs_guard_accumulate_one(clipped_loss, grad_norm, flags, accum);
}

// Everything the guard stores after the optimizer step, in one launch (after qstats and
// divergence):
// 1. accum as zs_guard_accumulate;
// 2. the Q stats (qstats output: min / max / mean of row-max Q, mean Q, nan_flag) folded into the
//    iteration aggregate qagg = (fmin of min, fmax of max, sum of mean row-max, sum of mean Q,
//    finite updates); the sums and the count take only updates whose Q was all finite;
// 3. per check c (row ZS_CHECK_*; triggers: the nonfinite flag, the grad collapse flag, div_flag),
//    the first triggering update since the row was cleared: records[c] = (1, update_index, loss,
//    grad_norm, q min, q max) (layout ZS_RECORD), written only while its "seen" field is 0;
// 4. update_index += 1.
extern "C" __global__ void zs_guard_record(const float* clipped_loss, const float* loss,
                                           const float* grad_norm, const int* flags,
                                           const float* qstats, const int* div_flag, double* accum,
                                           double* qagg, double* records, double* update_index) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    zs_guard_accumulate_one(clipped_loss, grad_norm, flags, accum);
    const double q_min = (double)qstats[ZS_QSTATS_MIN];
    const double q_max = (double)qstats[ZS_QSTATS_MAX];
    const bool finite = qstats[ZS_QSTATS_NAN_FLAG] == 0.0f;
    qagg[ZS_QAGG_MIN] = fmin(qagg[ZS_QAGG_MIN], q_min);
    qagg[ZS_QAGG_MAX] = fmax(qagg[ZS_QAGG_MAX], q_max);
    qagg[ZS_QAGG_MEAN_SUM] += finite ? (double)qstats[ZS_QSTATS_MEAN] : 0.0;
    qagg[ZS_QAGG_ALL_MEAN_SUM] += finite ? (double)qstats[ZS_QSTATS_ALL_MEAN] : 0.0;
    qagg[ZS_QAGG_COUNT] += finite ? 1.0 : 0.0;
    const double index = update_index[0];
    int trig[ZS_CHECK_SIZE];
    trig[ZS_CHECK_NONFINITE] = flags[ZS_FLAG_NONFINITE];
    trig[ZS_CHECK_GRAD_COLLAPSE] = flags[ZS_FLAG_GRAD_COLLAPSE];
    trig[ZS_CHECK_DIVERGENCE] = div_flag[0];
    double cur[ZS_RECORD_SIZE];
    cur[ZS_RECORD_SEEN] = 1.0;
    cur[ZS_RECORD_UPDATE_INDEX] = index;
    cur[ZS_RECORD_LOSS] = (double)loss[0];
    cur[ZS_RECORD_GRAD_NORM] = (double)grad_norm[0];
    cur[ZS_RECORD_Q_MIN] = q_min;
    cur[ZS_RECORD_Q_MAX] = q_max;
    for (int c = 0; c < ZS_CHECK_SIZE; ++c) {
        double* row = records + c * ZS_RECORD_SIZE;
        if (row[ZS_RECORD_SEEN] == 0.0 && trig[c] > 0) {
            for (int j = 0; j < ZS_RECORD_SIZE; ++j) row[j] = cur[j];
        }
    }
    update_index[0] = index + 1.0;
}
