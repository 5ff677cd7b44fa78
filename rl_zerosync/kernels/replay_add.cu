// A [T, N] rollout into the replay's packed rows as n-step transitions, in one launch (twin:
// reference.replay_add; the n-step rule is learner/nstep.py's). One warp per written transition,
// ZS_ADD_ROWS_PER_BLOCK per block; grid = ceil((T * N - first_row) / ZS_ADD_ROWS_PER_BLOCK).
//
// Transition r (time-major, r = t * N + i; rows r < first_row are not written) goes to packed row
// (start + r - first_row) % capacity. Every lane computes its window: k = the steps j < min(n, T - t)
// up to and including the first done[t + j] (done = terminated | truncated);
// return = sum_{j < k} rewards[t + j] * return_scales[j] (each product and sum rounded in float32,
// as torch's ops); last = t + k - 1; discount = discount_table[k]. The lanes copy obs[t, i] and
// next_obs[last, i] word by word; lane 0 writes actions[t, i] (int64), the return, the discount,
// terminateds[last, i] (the first byte of its word) and, with priorities, max_priority[0].
// Word offsets of the row layout (learner/replay.py _RowLayout) come as arguments.

extern "C" __global__ void __launch_bounds__(32 * ZS_ADD_ROWS_PER_BLOCK)
zs_replay_add(const float* __restrict__ obs, const float* __restrict__ next_obs,
              const long long* __restrict__ actions, const float* __restrict__ rewards,
              const unsigned char* __restrict__ terminateds, const unsigned char* __restrict__ truncateds,
              long long t_len, long long n_envs, long long obs_words, int* __restrict__ packed,
              long long capacity, long long words, const float* __restrict__ return_scales,
              const float* __restrict__ discount_table, int n_step, double* __restrict__ priorities,
              const double* __restrict__ max_priority, long long start, long long first_row, int obs_at,
              int next_obs_at, int actions_at, int rewards_at, int discounts_at, int terminateds_at) {
    const long long w = (long long)blockIdx.x * ZS_ADD_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    const long long r = first_row + w;
    if (r >= t_len * n_envs) return;
    const long long t = r / n_envs;
    const long long i = r - t * n_envs;
    const long long steps = t_len - t < (long long)n_step ? t_len - t : (long long)n_step;
    float ret = 0.0f;
    long long k = 0;
    for (long long j = 0; j < steps; ++j) {
        const long long at = (t + j) * n_envs + i;
        ret = __fadd_rn(ret, __fmul_rn(rewards[at], return_scales[j]));
        ++k;
        if (terminateds[at] | truncateds[at]) break;
    }
    const long long last = (t + k - 1) * n_envs + i;
    const long long slot = (start + w) % capacity;
    int* row = packed + slot * words;
    const int* src_obs = reinterpret_cast<const int*>(obs + r * obs_words);
    const int* src_next = reinterpret_cast<const int*>(next_obs + last * obs_words);
    for (long long j = lane; j < obs_words; j += 32) {
        row[obs_at + j] = src_obs[j];
        row[next_obs_at + j] = src_next[j];
    }
    if (lane == 0) {
        *reinterpret_cast<long long*>(row + actions_at) = actions[r];
        row[rewards_at] = __float_as_int(ret);
        row[discounts_at] = __float_as_int(discount_table[k]);
        *reinterpret_cast<unsigned char*>(row + terminateds_at) = terminateds[last];
        if (priorities != nullptr) priorities[slot] = max_priority[0];
    }
}
