// Exposure -> factored action: order type and urgency from the spread and volatility ratios.
// One thread per env; launched with grid=grid_for(rows), block=ELEMENTWISE_BLOCK (launch.py).
// Twin: reference.route.
//                      rs < wide          rs >= wide
//   rv >= high_vol     MARKET, HIGH       LIMIT, HIGH
//   rv <  high_vol     LIMIT, u(rv)       PASSIVE, u(rv)      u(rv) = LOW if rv <= low_vol else NORMAL
// A ratio is 1 when its median is <= 0 or either input is not finite. Exposure is clamped to
// 0..ZS_NUM_EXPOSURES-1. Order types, urgencies and the factored index follow the generated action
// layout (ZS_ORDER_*, ZS_URGENCY_*, ZS_NUM_*, from rl_zerosync.actions).

__device__ __forceinline__ float zs_ratio(float x, float median) {
    return (zs_isfinite(x) && zs_isfinite(median) && median > 0.0f) ? x / median : 1.0f;
}

extern "C" __global__ void zs_route(const long long* __restrict__ exposure,
                                    const float* __restrict__ spread,
                                    const float* __restrict__ median_spread,
                                    const float* __restrict__ vol,
                                    const float* __restrict__ median_vol, long long rows,
                                    float wide, float high_vol, float low_vol,
                                    long long* __restrict__ actions) {
    const long long i = zs_thread_index();
    if (i >= rows) return;
    const float rs = zs_ratio(spread[i], median_spread[i]);
    const float rv = zs_ratio(vol[i], median_vol[i]);
    const bool is_wide = rs >= wide;
    const bool is_high = rv >= high_vol;
    const int order = is_high ? (is_wide ? ZS_ORDER_LIMIT : ZS_ORDER_MARKET)
                              : (is_wide ? ZS_ORDER_PASSIVE : ZS_ORDER_LIMIT);
    const int urgency = is_high ? ZS_URGENCY_HIGH : (rv <= low_vol ? ZS_URGENCY_LOW : ZS_URGENCY_NORMAL);
    long long e = exposure[i];
    e = e < 0 ? 0 : (e > ZS_NUM_EXPOSURES - 1 ? ZS_NUM_EXPOSURES - 1 : e);
    actions[i] = e * (ZS_NUM_ORDER_TYPES * ZS_NUM_URGENCIES) + (long long)(order * ZS_NUM_URGENCIES + urgency);
}
