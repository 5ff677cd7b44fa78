// Q-value divergence check: a device patience counter and a sticky flag. One thread; launched
// with grid=1, block=1. Twin: reference.divergence.

// stats = qstats output (min row-max, max row-max, mean row-max, mean Q, nan_flag).
extern "C" __global__ void zs_divergence(const float* stats, int* counter, int* flag,
                                         float threshold, int patience) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    const bool bad = fabsf(stats[0]) > threshold || fabsf(stats[1]) > threshold || stats[4] != 0.0f;
    int c = counter[0];
    c = bad ? (c < 2147483647 ? c + 1 : c) : 0;
    counter[0] = c;
    if (c >= patience) flag[0] = 1;
}
