// The greedy token of each row of a step's f32 logits [rows, vocab]: the
// index of the row's largest value, the lowest index on ties (-0 equals
// +0), NaN below every number. Behind isobench-model's src/argmax.rs
// (whose `argmax` makes the same choice on the host); compiled by
// build.rs with nvcc (machine code and PTX).
//
// A value and its index are one 64-bit key whose unsigned order is the
// choice's: the float's bits made monotonic in the high word (negative
// values flipped, positive ones given the top bit, NaN 0), u32 max -
// index in the low word. Grid (ceil(vocab / PER_BLOCK), rows) of THREADS
// threads: each block takes the largest key of its PER_BLOCK values and
// merges it into keys[row] (zeroed before the launch) with one
// atomicMax, so a row of a 128k vocabulary is read by 32 blocks at once.
// One block per row (what candle's argmax launches) took 93 us on an
// H200, about a tenth of the 1B shape's decode step.

#include <stdint.h>

namespace {

constexpr int THREADS = 256;
// Values per block; must match PER_BLOCK in src/argmax.rs.
constexpr int PER_BLOCK = 4096;

__device__ __forceinline__ unsigned long long key(float value, int index) {
    const uint32_t bits = __float_as_uint(value + 0.0f);  // +0 for -0
    const uint32_t ordered =
        isnan(value) ? 0u : (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
    return ((unsigned long long)ordered << 32) | (0xffffffffu - (uint32_t)index);
}

__device__ __forceinline__ unsigned long long warp_max(unsigned long long x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
        const unsigned long long other = __shfl_xor_sync(0xffffffffu, x, offset);
        x = other > x ? other : x;
    }
    return x;
}

}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS) argmax_f32(
    const float* __restrict__ logits, unsigned long long* keys, int vocab) {
    __shared__ unsigned long long warp_best[THREADS / 32];
    const float* row = logits + (size_t)blockIdx.y * vocab;
    const int begin = blockIdx.x * PER_BLOCK;
    const int end = min(begin + PER_BLOCK, vocab);
    unsigned long long best = 0;
#pragma unroll 4
    for (int i = begin + threadIdx.x; i < end; i += THREADS) {
        const unsigned long long k = key(__ldg(row + i), i);
        best = k > best ? k : best;
    }
    best = warp_max(best);
    if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = best;
    __syncthreads();
    if (threadIdx.x < 32) {
        best = threadIdx.x < THREADS / 32 ? warp_best[threadIdx.x] : 0;
        best = warp_max(best);
        if (threadIdx.x == 0) atomicMax(keys + blockIdx.y, best);
    }
}
