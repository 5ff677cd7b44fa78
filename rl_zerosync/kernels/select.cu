// Action selection: epsilon-greedy over one Q matrix, epsilon-greedy over the rows of P population
// members (each with its own epsilon and seed), and per-branch epsilon-greedy for the branching
// head. One thread per env; launched with grid=grid_for(rows), block=ELEMENTWISE_BLOCK
// (launch.py). Twins: reference.epsilon_greedy / reference.epsilon_greedy_members /
// reference.branching_select.
// Greedy: the first NaN of a row wins if there is one, else the first maximum (ties -> lowest).
// Random draws (rng.cuh): explore if uniform24(coin stream) < epsilon; random action
// (bits24(action stream) * n) >> 24. epsilon-greedy uses streams ZS_STREAM_EXPLORE (coin) and
// ZS_STREAM_RANDOM_ACTION (action); branch b of branching select adds ZS_STREAMS_PER_BRANCH * b.
// Branch widths and the factored index e * (order types * urgencies) + o * urgencies + u follow
// the generated action layout (ZS_NUM_*, from rl_zerosync.actions).

__device__ __forceinline__ int zs_greedy(const float* __restrict__ row, int n) {
    float best = row[0];
    if (zs_isnan(best)) return 0;
    int best_index = 0;
    for (int a = 1; a < n; ++a) {
        const float v = row[a];
        if (zs_isnan(v)) return a;
        if (v > best) {
            best = v;
            best_index = a;
        }
    }
    return best_index;
}

__device__ __forceinline__ int zs_select(const float* __restrict__ row, int n, float epsilon,
                                         unsigned int coin_key, unsigned int action_key,
                                         unsigned int i) {
    if (zs_uniform24(zs_bits(coin_key, i)) < epsilon) {
        return zs_random_index(zs_bits(action_key, i), n);
    }
    return zs_greedy(row, n);
}

extern "C" __global__ void zs_epsilon_greedy(const float* __restrict__ q, long long rows, int cols,
                                             const float* __restrict__ epsilon,
                                             const long long* __restrict__ step,
                                             unsigned int seed_key, long long* __restrict__ actions) {
    const long long i = zs_thread_index();
    if (i >= rows) return;
    const long long s = step[0];
    const unsigned int coin_key = zs_stream_key(seed_key, s, ZS_STREAM_EXPLORE);
    const unsigned int action_key = zs_stream_key(seed_key, s, ZS_STREAM_RANDOM_ACTION);
    actions[i] = (long long)zs_select(q + i * (long long)cols, cols, epsilon[0], coin_key,
                                      action_key, (unsigned int)i);
}

// Rows [m * rows_per_member, (m + 1) * rows_per_member) belong to member m and draw what
// zs_epsilon_greedy draws for member m's rows alone: member m's epsilon and seed key, and the row's
// index within the member (not within the batch) as the element index of the random draws.
extern "C" __global__ void zs_epsilon_greedy_members(const float* __restrict__ q, long long rows,
                                                     int cols, const float* __restrict__ epsilon,
                                                     const long long* __restrict__ step,
                                                     const long long* __restrict__ seed_keys,
                                                     long long rows_per_member,
                                                     long long* __restrict__ actions) {
    const long long i = zs_thread_index();
    if (i >= rows) return;
    const long long m = i / rows_per_member;
    const long long j = i - m * rows_per_member;
    const long long s = step[0];
    const unsigned int seed_key = (unsigned int)seed_keys[m];
    const unsigned int coin_key = zs_stream_key(seed_key, s, ZS_STREAM_EXPLORE);
    const unsigned int action_key = zs_stream_key(seed_key, s, ZS_STREAM_RANDOM_ACTION);
    actions[i] = (long long)zs_select(q + i * (long long)cols, cols, epsilon[m], coin_key,
                                      action_key, (unsigned int)j);
}

extern "C" __global__ void zs_branching_select(const float* __restrict__ q_exposure,
                                               const float* __restrict__ q_order,
                                               const float* __restrict__ q_urgency, long long rows,
                                               const float* __restrict__ epsilon,
                                               const long long* __restrict__ step,
                                               unsigned int seed_key,
                                               long long* __restrict__ actions) {
    const long long i = zs_thread_index();
    if (i >= rows) return;
    const long long s = step[0];
    const float eps = epsilon[0];
    const unsigned int u = (unsigned int)i;
    const int e = zs_select(q_exposure + i * ZS_NUM_EXPOSURES, ZS_NUM_EXPOSURES, eps,
                            zs_stream_key(seed_key, s, ZS_STREAM_EXPLORE),
                            zs_stream_key(seed_key, s, ZS_STREAM_RANDOM_ACTION), u);
    const int o = zs_select(q_order + i * ZS_NUM_ORDER_TYPES, ZS_NUM_ORDER_TYPES, eps,
                            zs_stream_key(seed_key, s, ZS_STREAMS_PER_BRANCH + ZS_STREAM_EXPLORE),
                            zs_stream_key(seed_key, s, ZS_STREAMS_PER_BRANCH + ZS_STREAM_RANDOM_ACTION), u);
    const int g = zs_select(q_urgency + i * ZS_NUM_URGENCIES, ZS_NUM_URGENCIES, eps,
                            zs_stream_key(seed_key, s, 2 * ZS_STREAMS_PER_BRANCH + ZS_STREAM_EXPLORE),
                            zs_stream_key(seed_key, s, 2 * ZS_STREAMS_PER_BRANCH + ZS_STREAM_RANDOM_ACTION), u);
    actions[i] = (long long)(e * (ZS_NUM_ORDER_TYPES * ZS_NUM_URGENCIES) + o * ZS_NUM_URGENCIES + g);
}
