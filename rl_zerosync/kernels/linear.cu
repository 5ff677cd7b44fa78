// The Q network's Linear layers as float32 tiled GEMMs with their epilogues fused (twins:
// reference.linear_forward / reference.linear_backward, which are torch's addmm, relu, mm and sum).
//
// One launch runs up to three GEMM jobs: C[m, n] = sum_k A(m, k) B(k, n), element (i, j) of A at
// a[i * sam + j * sak], of B at b[i * sbk + j * sbn]. Each job is cut into ZS_GM_BM x ZS_GM_BN
// output tiles and its k range into `splits` chunks; one block of ZS_GM_THREADS threads (16 x 16,
// 4 x 4 outputs each) computes one (tile, chunk). With one chunk the block applies the epilogue
// itself. With more, every block writes its partial tile into `part` and counts itself in the
// tile's counter; the block that counts last sums the partials in chunk order (a fixed order, so the
// result does not depend on which block finishes last), applies the epilogue and resets the counter
// to 0 (the counters must be 0 at launch).
//
// Epilogues (float32 throughout, as torch's float32 matmul without TF32):
//   ZS_GEMM_FWD  y = A B + bias[n], then ReLU when `relu` (a NaN stays NaN, as torch.relu);
//   ZS_GEMM_DW   dW = A B (A = dZ^T), and the bias gradient db[m] = sum_k A(m, k) from the
//                tiles of the first tile column;
//   ZS_GEMM_DX   dX = A B (A = dZ, B = W), 0 where the layer's input (a ReLU output) is <= 0
//                (torch's threshold_backward: a NaN input keeps the gradient).

#define ZS_GM_PART (ZS_GM_BM * ZS_GM_BN + ZS_GM_BM)
#define ZS_GEMM_FWD 0
#define ZS_GEMM_DW 1
#define ZS_GEMM_DX 2
#define ZS_GM_PAD 4

struct ZsGemm {
    const float* a;
    long long sam, sak;
    const float* b;
    long long sbk, sbn;
    float* c;
    long long ldc;
    int m, n, k, splits, kind, relu;
    const float* aux;  // FWD: bias [n]; DX: the layer input whose sign masks dX
    long long ldaux;
    float* aux_out;    // DW: the bias gradient [m]
    float* part;       // splits > 1: tiles * splits partial records of ZS_GM_PART floats
    int* counters;     // splits > 1: one per tile
};

__device__ __forceinline__ int zs_gemm_blocks(const ZsGemm& g) {
    return ((g.m + ZS_GM_BM - 1) / ZS_GM_BM) * ((g.n + ZS_GM_BN - 1) / ZS_GM_BN) * g.splits;
}

// The four A and four B elements thread `tid` loads of the k tile starting at `kt` (0 outside).
__device__ __forceinline__ void zs_gemm_load(const ZsGemm& g, int m0, int n0, int kt, int k1, int tid,
                                             float ra[4], float rb[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int i = tid + j * ZS_GM_THREADS;
        int mm, ka;
        if (g.sak == 1) { mm = i / ZS_GM_BK; ka = i % ZS_GM_BK; } else { mm = i % ZS_GM_BM; ka = i / ZS_GM_BM; }
        const int gm = m0 + mm, gka = kt + ka;
        ra[j] = (gm < g.m && gka < k1) ? g.a[(long long)gm * g.sam + (long long)gka * g.sak] : 0.0f;
        int nn, kb;
        if (g.sbn == 1) { nn = i % ZS_GM_BN; kb = i / ZS_GM_BN; } else { nn = i / ZS_GM_BK; kb = i % ZS_GM_BK; }
        const int gn = n0 + nn, gkb = kt + kb;
        rb[j] = (gn < g.n && gkb < k1) ? g.b[(long long)gkb * g.sbk + (long long)gn * g.sbn] : 0.0f;
    }
}

__device__ __forceinline__ void zs_gemm_store(const ZsGemm& g, int tid, const float ra[4], const float rb[4],
                                              float (*as)[ZS_GM_BM + ZS_GM_PAD],
                                              float (*bs)[ZS_GM_BN + ZS_GM_PAD]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int i = tid + j * ZS_GM_THREADS;
        if (g.sak == 1) as[i % ZS_GM_BK][i / ZS_GM_BK] = ra[j]; else as[i / ZS_GM_BM][i % ZS_GM_BM] = ra[j];
        if (g.sbn == 1) bs[i / ZS_GM_BN][i % ZS_GM_BN] = rb[j]; else bs[i % ZS_GM_BK][i / ZS_GM_BK] = rb[j];
    }
}

__device__ __forceinline__ void zs_gemm_epilogue(const ZsGemm& g, int m0, int n0, int tx, int ty,
                                                 const float acc[4][4], const float rs[4], bool rowsum) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int m = m0 + ty * 4 + i;
        if (m >= g.m) continue;
        if (rowsum && tx == 0) g.aux_out[m] = rs[i];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int n = n0 + tx * 4 + j;
            if (n >= g.n) continue;
            float v = acc[i][j];
            if (g.kind == ZS_GEMM_FWD) {
                v += g.aux[n];
                if (g.relu && v < 0.0f) v = 0.0f;  // NaN < 0 is false: NaN stays NaN
            } else if (g.kind == ZS_GEMM_DX) {
                v = g.aux[(long long)m * g.ldaux + n] <= 0.0f ? 0.0f : v;  // a NaN input keeps v, as torch
            }
            g.c[(long long)m * g.ldc + n] = v;
        }
    }
}

__device__ void zs_gemm_run(const ZsGemm& g, int block) {
    __shared__ __align__(16) float as[ZS_GM_BK][ZS_GM_BM + ZS_GM_PAD];
    __shared__ __align__(16) float bs[ZS_GM_BK][ZS_GM_BN + ZS_GM_PAD];
    __shared__ bool last;
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int tiles_n = (g.n + ZS_GM_BN - 1) / ZS_GM_BN;
    const int split = block % g.splits, tile = block / g.splits;
    const int m0 = (tile / tiles_n) * ZS_GM_BM, n0 = (tile % tiles_n) * ZS_GM_BN;
    const int chunk = ((g.k + g.splits - 1) / g.splits + ZS_GM_BK - 1) / ZS_GM_BK * ZS_GM_BK;
    const int k0 = split * chunk;
    const int k1 = min(g.k, k0 + chunk);
    const bool rowsum = g.kind == ZS_GEMM_DW && n0 == 0;
    float acc[4][4];
    float rs[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        rs[i] = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
    }
    float ra[4], rb[4];
    if (k0 < k1) zs_gemm_load(g, m0, n0, k0, k1, tid, ra, rb);
    for (int kt = k0; kt < k1; kt += ZS_GM_BK) {
        zs_gemm_store(g, tid, ra, rb, as, bs);
        __syncthreads();
        if (kt + ZS_GM_BK < k1) zs_gemm_load(g, m0, n0, kt + ZS_GM_BK, k1, tid, ra, rb);  // next tile in flight
#pragma unroll
        for (int kk = 0; kk < ZS_GM_BK; ++kk) {
            const float4 av = *reinterpret_cast<const float4*>(&as[kk][ty * 4]);
            const float4 bv = *reinterpret_cast<const float4*>(&bs[kk][tx * 4]);
            const float a[4] = {av.x, av.y, av.z, av.w};
            const float b[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                if (rowsum) rs[i] += a[i];
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
            }
        }
        __syncthreads();
    }
    if (g.splits == 1) {
        zs_gemm_epilogue(g, m0, n0, tx, ty, acc, rs, rowsum);
        return;
    }
    float* mine = g.part + ((long long)tile * g.splits + split) * ZS_GM_PART;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        *reinterpret_cast<float4*>(&mine[(ty * 4 + i) * ZS_GM_BN + tx * 4]) =
            make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
        if (rowsum && tx == 0) mine[ZS_GM_BM * ZS_GM_BN + ty * 4 + i] = rs[i];
    }
    __threadfence();
    __syncthreads();
    if (tid == 0) last = atomicAdd(&g.counters[tile], 1) == g.splits - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        rs[i] = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
    }
    for (int s = 0; s < g.splits; ++s) {
        const float* p = g.part + ((long long)tile * g.splits + s) * ZS_GM_PART;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float4 v = __ldcg(reinterpret_cast<const float4*>(&p[(ty * 4 + i) * ZS_GM_BN + tx * 4]));
            acc[i][0] += v.x;
            acc[i][1] += v.y;
            acc[i][2] += v.z;
            acc[i][3] += v.w;
            if (rowsum && tx == 0) rs[i] += __ldcg(&p[ZS_GM_BM * ZS_GM_BN + ty * 4 + i]);
        }
    }
    if (tid == 0) g.counters[tile] = 0;
    zs_gemm_epilogue(g, m0, n0, tx, ty, acc, rs, rowsum);
}

// One forward job: y[m, n] = act(x[m, :k] W^T + bias), x rows `ldx` apart, W [n, k] contiguous.
__device__ __forceinline__ ZsGemm zs_forward_job(const float* x, long long ldx, const float* w, const float* bias,
                                                 float* y, long long ldy, int m, int n, int k, int relu,
                                                 int splits, float* part, int* counters) {
    ZsGemm g;
    g.a = x; g.sam = ldx; g.sak = 1;
    g.b = w; g.sbk = 1; g.sbn = k;
    g.c = y; g.ldc = ldy;
    g.m = m; g.n = n; g.k = k; g.splits = splits; g.kind = ZS_GEMM_FWD; g.relu = relu;
    g.aux = bias; g.ldaux = 0; g.aux_out = nullptr;
    g.part = part; g.counters = counters;
    return g;
}

// grid = the jobs' blocks in job order; up to three jobs sharing n, k and relu.
extern "C" __global__ void __launch_bounds__(ZS_GM_THREADS)
zs_linear_forward(const float* x0, long long ldx0, const float* w0, const float* b0, float* y0, long long ldy0,
                  int m0, int s0, float* p0, int* c0,
                  const float* x1, long long ldx1, const float* w1, const float* b1, float* y1, long long ldy1,
                  int m1, int s1, float* p1, int* c1,
                  const float* x2, long long ldx2, const float* w2, const float* b2, float* y2, long long ldy2,
                  int m2, int s2, float* p2, int* c2,
                  int njobs, int n, int k, int relu) {
    int block = blockIdx.x;
    ZsGemm g = zs_forward_job(x0, ldx0, w0, b0, y0, ldy0, m0, n, k, relu, s0, p0, c0);
    int blocks = zs_gemm_blocks(g);
    if (block >= blocks && njobs > 1) {
        block -= blocks;
        g = zs_forward_job(x1, ldx1, w1, b1, y1, ldy1, m1, n, k, relu, s1, p1, c1);
        blocks = zs_gemm_blocks(g);
        if (block >= blocks && njobs > 2) {
            block -= blocks;
            g = zs_forward_job(x2, ldx2, w2, b2, y2, ldy2, m2, n, k, relu, s2, p2, c2);
        }
    }
    zs_gemm_run(g, block);
}

// One layer's backward: dW = dZ^T x and db = colsum(dZ) (job 1), and when dx is not null
// dx = (dZ W) masked by x > 0 (job 2, the blocks after job 1's). dZ [rows, n] rows `lddz` apart,
// x [rows, k] rows `ldx` apart, W, dW [n, k] and dx [rows, k] contiguous.
extern "C" __global__ void __launch_bounds__(ZS_GM_THREADS)
zs_linear_backward(const float* dz, long long lddz, const float* x, long long ldx, const float* w,
                   float* dw, float* db, float* dx, int rows, int n, int k,
                   int s_dw, float* p_dw, int* c_dw, int s_dx, float* p_dx, int* c_dx) {
    ZsGemm g;
    g.a = dz; g.sam = 1; g.sak = lddz;
    g.b = x; g.sbk = ldx; g.sbn = 1;
    g.c = dw; g.ldc = k;
    g.m = n; g.n = k; g.k = rows; g.splits = s_dw; g.kind = ZS_GEMM_DW; g.relu = 0;
    g.aux = nullptr; g.ldaux = 0; g.aux_out = db;
    g.part = p_dw; g.counters = c_dw;
    int block = blockIdx.x;
    const int blocks = zs_gemm_blocks(g);
    if (block >= blocks) {
        block -= blocks;
        g.a = dz; g.sam = lddz; g.sak = 1;
        g.b = w; g.sbk = k; g.sbn = 1;
        g.c = dx; g.ldc = k;
        g.m = rows; g.n = k; g.k = n; g.splits = s_dx; g.kind = ZS_GEMM_DX;
        g.aux = x; g.ldaux = ldx; g.aux_out = nullptr;
        g.part = p_dx; g.counters = c_dx;
    }
    zs_gemm_run(g, block);
}
