// One fused Adam / AdamW step over flat float32 buffers, skipped on the device when found_inf is set.
// One thread per element; launched with grid=grid_for(n), block=ELEMENTWISE_BLOCK (launch.py).
// Twin: reference.adam_step.
//
// s = loss_scale[0], times min(1, clip / (grad_norm[0] * loss_scale[0] + ZS_ADAM_CLIP_EPS)) with
// use_clip; t = step[0] + 1; per element: g = grads[i] * s (grads is not written),
// p = params[i] * decay, m = beta1 * m + c1 * g, v = beta2 * v + (c2 * g) * g,
// params[i] = p - (lr / (1 - beta1^t)) * (m / (sqrt(v) / sqrt(1 - beta2^t) + eps)).
// c1 = 1 - beta1, c2 = 1 - beta2 and decay = 1 - lr * weight_decay (1 for Adam) come from the host.
// The _rn intrinsics keep the compiler from contracting a multiply and an add into one FMA, so every
// operation rounds as the twin's does.
//
// step[0] = t is written once, after every thread of every block has read step[0]: after its threads
// are done (__syncthreads), thread 0 of each block fences and counts the block in blocks_done; the
// block that counts last writes the step and resets blocks_done to 0 (it must be 0 at launch). With
// found_inf set every thread returns at once: nothing is written and blocks_done stays 0.

extern "C" __global__ void zs_adam_step(float* __restrict__ params, const float* __restrict__ grads,
                                        float* __restrict__ exp_avg, float* __restrict__ exp_avg_sq,
                                        float* step, const float* found_inf, const float* loss_scale,
                                        const float* grad_norm, int* blocks_done, long long n, float lr,
                                        float beta1, float beta2, float eps, float c1, float c2, float decay,
                                        float clip, int use_clip) {
    if (found_inf[0] != 0.0f) return;  // the same for every thread: a skipped step writes nothing
    const float ls = loss_scale[0];
    float s = ls;
    if (use_clip) {
        const float total = __fadd_rn(__fmul_rn(grad_norm[0], ls), ZS_ADAM_CLIP_EPS);
        s = __fmul_rn(s, fminf(1.0f, __fdiv_rn(clip, total)));
    }
    const float t = __fadd_rn(step[0], 1.0f);
    const long long i = zs_thread_index();
    if (i < n) {
        const float g = __fmul_rn(grads[i], s);
        const float p = __fmul_rn(params[i], decay);
        const float m = __fadd_rn(__fmul_rn(beta1, exp_avg[i]), __fmul_rn(c1, g));
        const float v = __fadd_rn(__fmul_rn(beta2, exp_avg_sq[i]), __fmul_rn(__fmul_rn(c2, g), g));
        exp_avg[i] = m;
        exp_avg_sq[i] = v;
        const float bc1 = __fsub_rn(1.0f, powf(beta1, t));
        const float bc2 = __fsub_rn(1.0f, powf(beta2, t));
        const float denom = __fadd_rn(__fdiv_rn(sqrtf(v), sqrtf(bc2)), eps);
        const float step_size = __fdiv_rn(lr, bc1);
        params[i] = __fsub_rn(p, __fmul_rn(step_size, __fdiv_rn(m, denom)));
    }
    __syncthreads();  // every thread of this block has read step[0]
    if (threadIdx.x == 0) {
        __threadfence();
        const int done = atomicAdd(blocks_done, 1);
        if (done == (int)gridDim.x - 1) {  // the last block: every block has read step[0]
            step[0] = t;
            blocks_done[0] = 0;
        }
    }
}
