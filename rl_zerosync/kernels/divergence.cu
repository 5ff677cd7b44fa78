// Q-value divergence check: a device patience counter and a sticky flag. One thread; launched
// with grid=1, block=1. Twin: reference.divergence.

// stats = qstats output (layout ZS_QSTATS: min / max / mean of row-max Q, mean Q, nan_flag).
// The counter saturates at ZS_INT32_MAX.
extern "C" __global__ void zs_divergence(const float* stats, int* counter, int* flag,
                                         float threshold, int patience) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    const bool bad = fabsf(stats[ZS_QSTATS_MIN]) > threshold || fabsf(stats[ZS_QSTATS_MAX]) > threshold ||
                     stats[ZS_QSTATS_NAN_FLAG] != 0.0f;
    int c = counter[0];
    c = bad ? (c < ZS_INT32_MAX ? c + 1 : c) : 0;
    counter[0] = c;
    if (c >= patience) flag[0] = 1;
}
