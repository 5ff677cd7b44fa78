// The global L2 norm of a flat float32 buffer in one launch, as two reductions: the norm of each row
// of ZS_NORM_CHUNK elements, then the norm of those (twin: reference.grad_norm, which is
// torch.linalg.vector_norm over the rows and then over the row norms).
//
// grid = n / ZS_NORM_CHUNK blocks (one row each), block = ZS_NORM_BLOCK threads; sums of squares in
// float (as torch's float32 vector_norm: an Inf or NaN element gives an Inf or NaN norm). Block b
// writes row_norms[b]; thread 0 then fences and counts the block in blocks_done; the block that
// counts last reduces every row norm in a fixed order, writes out[0] and resets blocks_done to 0
// (it must be 0 at launch).

extern "C" __global__ void __launch_bounds__(ZS_NORM_BLOCK)
zs_grad_norm(const float* __restrict__ x, float* row_norms, float* __restrict__ out, int* blocks_done) {
    const float* row = x + (long long)blockIdx.x * ZS_NORM_CHUNK;
    float s = 0.0f;
    for (int j = threadIdx.x; j < ZS_NORM_CHUNK; j += ZS_NORM_BLOCK) {
        const float v = row[j];
        s += v * v;
    }
    s = zs_block_sum<float>(s);
    __shared__ bool last;
    if (threadIdx.x == 0) {
        row_norms[blockIdx.x] = sqrtf(s);
        __threadfence();
        last = atomicAdd(blocks_done, 1) == (int)gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    const volatile float* norms = row_norms;
    float t = 0.0f;
    for (int b = threadIdx.x; b < (int)gridDim.x; b += ZS_NORM_BLOCK) {
        const float v = norms[b];
        t += v * v;
    }
    t = zs_block_sum<float>(t);
    if (threadIdx.x == 0) {
        out[0] = sqrtf(t);
        blocks_done[0] = 0;
    }
}
