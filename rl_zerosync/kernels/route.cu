// Exposure -> factored action: order type and urgency from the spread and volatility ratios.
// One thread per env; launched with grid=ceil(rows/256), block=256. Twin: reference.route.
//                      rs < wide          rs >= wide
//   rv >= high_vol     MARKET, HIGH       LIMIT, HIGH
//   rv <  high_vol     LIMIT, u(rv)       PASSIVE, u(rv)      u(rv) = LOW if rv <= low_vol else NORMAL
// A ratio is 1 when its median is <= 0 or either input is not finite. Exposure is clamped to 0..4.

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
    // OrderType: MARKET=0, LIMIT=1, PASSIVE=2; Urgency: LOW=0, NORMAL=1, HIGH=2.
    const int order = is_high ? (is_wide ? 1 : 0) : (is_wide ? 2 : 1);
    const int urgency = is_high ? 2 : (rv <= low_vol ? 0 : 1);
    long long e = exposure[i];
    e = e < 0 ? 0 : (e > 4 ? 4 : e);
    actions[i] = e * 9 + (long long)(order * 3 + urgency);
}
