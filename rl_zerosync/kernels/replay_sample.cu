// Uniform replay sampling in one launch: draw B row indices from the counter-based RNG, gather their
// packed rows, advance the RNG step. One warp of ZS_SAMPLE_LANES threads per sampled row,
// ZS_SAMPLE_ROWS_PER_BLOCK rows per block; launched with grid=grid_for(rows, ROWS_PER_BLOCK),
// block=BLOCK (replay_sample.py). Twin: reference.replay_sample.
//
// Row i: bits = zs_hash32(row_keys[i] ^ step_word[0]) (the low 32 bits of both),
// index = (bits * n) >> 32 in 64-bit unsigned maths, n = size[0] clamped to [0, capacity];
// indices[i] = index and out_packed[i, :] = packed[index, :] (words int32 words per row). Every lane
// of the row's warp computes the hash; the lanes copy the row with a stride of ZS_SAMPLE_LANES, as
// int4 (ZS_SAMPLE_VEC_WORDS words) when words is a multiple of it and both rows are 16-byte aligned.
//
// rng_step[0] += 1 and step_word[0] = zs_hash32(low 32 bits of the new rng_step ^ seed_key) are
// written once, after every thread of every block has read step_word[0] (adam.cu's pattern): after
// its threads are done (__syncthreads), thread 0 of each block fences and counts the block in
// blocks_done; the block that counts last advances the step and resets blocks_done to 0 (it must be
// 0 at launch).

static_assert(ZS_SAMPLE_VEC_WORDS * sizeof(int) == sizeof(int4), "one vector load is one int4");

// Copy one packed row of `words` int32 words, this lane's share of it.
__device__ __forceinline__ void zs_copy_row(const int* __restrict__ src, int* __restrict__ dst, long long words,
                                            int lane) {
    const unsigned long long addresses = (unsigned long long)src | (unsigned long long)dst;
    if (words % ZS_SAMPLE_VEC_WORDS == 0 && addresses % sizeof(int4) == 0) {
        const int4* __restrict__ src4 = reinterpret_cast<const int4*>(src);
        int4* __restrict__ dst4 = reinterpret_cast<int4*>(dst);
        const long long vectors = words / ZS_SAMPLE_VEC_WORDS;
        for (long long j = lane; j < vectors; j += ZS_SAMPLE_LANES) dst4[j] = src4[j];
        return;
    }
    for (long long j = lane; j < words; j += ZS_SAMPLE_LANES) dst[j] = src[j];
}

extern "C" __global__ void __launch_bounds__(ZS_SAMPLE_LANES * ZS_SAMPLE_ROWS_PER_BLOCK)
zs_replay_sample(const int* __restrict__ packed, long long capacity, long long words,
                 const long long* __restrict__ size, const long long* __restrict__ row_keys,
                 long long* step_word, long long* rng_step, long long* __restrict__ indices,
                 int* __restrict__ out_packed, int* blocks_done, long long rows, unsigned int seed_key) {
    const unsigned int word = (unsigned int)step_word[0];
    const long long i = (long long)blockIdx.x * ZS_SAMPLE_ROWS_PER_BLOCK + threadIdx.x / ZS_SAMPLE_LANES;
    const int lane = (int)(threadIdx.x % ZS_SAMPLE_LANES);
    if (i < rows) {
        const long long s = size[0];
        const unsigned long long n = (unsigned long long)(s < 0 ? 0 : (s > capacity ? capacity : s));
        const unsigned int bits = zs_hash32((unsigned int)row_keys[i] ^ word);
        const long long index = (long long)(((unsigned long long)bits * n) >> 32);
        if (lane == 0) indices[i] = index;
        zs_copy_row(packed + index * words, out_packed + i * words, words, lane);
    }
    __syncthreads();  // every thread of this block has read step_word[0]
    if (threadIdx.x == 0) {
        __threadfence();
        const int done = atomicAdd(blocks_done, 1);
        if (done == (int)gridDim.x - 1) {  // the last block: every block has read step_word[0]
            const unsigned long long next = (unsigned long long)rng_step[0] + 1ull;
            rng_step[0] = (long long)next;
            step_word[0] = (long long)zs_hash32((unsigned int)(next & 0xffffffffull) ^ seed_key);
            blocks_done[0] = 0;
        }
    }
}
