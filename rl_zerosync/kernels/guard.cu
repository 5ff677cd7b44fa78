// Training guard: per-update check (flags, clipped loss, loss scale, found_inf for fused Adam) and
// the running accumulators read once per training iteration. One thread; launched with grid=1,
// block=1. Twins: reference.guard_check / reference.guard_accumulate.

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
// for finite steps.
extern "C" __global__ void zs_guard_accumulate(const float* clipped_loss, const float* grad_norm,
                                               const int* flags, double* accum) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    const bool nonfinite = flags[0] != 0;
    accum[0] += nonfinite ? 0.0 : (double)clipped_loss[0];
    accum[1] += nonfinite ? 0.0 : (double)grad_norm[0];
    accum[2] += 1.0;
    accum[3] += (double)flags[0];
    accum[4] += (double)flags[1];
    accum[5] += (double)flags[2];
}
