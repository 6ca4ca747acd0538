// A token drawn at random from each row of a step's f32 logits
// [rows, vocab], as isobench-model's src/sample.rs defines it (its host
// reference computes the same draw); compiled by build.rs with nvcc
// (machine code and PTX).
//
// Per row: weights w = e^((logit - max) / T) in [0, 1] (NaN weighs 0),
// computed with the host's own exp (isobench-common's math::exp, rounded
// step by step as on the host, so the weights are the same bits); the
// tokens ranked heaviest first, equal weights by the lower id; the ranking
// cut after the top_k tokens and after the shortest prefix whose weight
// reaches top_p of what top_k kept (the earlier cut wins); then the token
// at which the kept tokens' weights, summed in id order, first reach
// `uniform` times their total. Masses are sums of weights in fixed point
// (2^-40 units, u64), so every sum is exact and the draw does not depend
// on the order of the threads' atomics.
//
// One block of THREADS threads per row; the weights go to a scratch row.
// A cut is found by radix selection over the weights' bits (which order
// non-negative floats): three passes of 11, 10 and 10 bits, each a
// histogram of counts and masses of the tokens that match the digits so
// far, scanned from the heaviest bin; then, among the tokens of the boundary weight,
// the one of the needed rank by id. The draw is a block-wide scan of the
// threads' contiguous slices of the row. About ten passes over a row that
// stays in L2: 0.32 ms for a 128k row with top_p on an H200, 0.38 ms for
// 64 rows at once (docs/performance.md, "Sampling on the GPU"); the host
// sampler, which a GPU server used before, needed the row copied to the
// host and about a millisecond of the host's time a row.

#include <stdint.h>

namespace {

constexpr int THREADS = 512;
constexpr int WARPS = THREADS / 32;
// The weights' 31 bits (the sign is 0) in three digits, the first 8
// exponent bits and 3 of the mantissa: weights of a row spread over a few
// dozen exponents, so that few of a warp's tokens share a bin (and an
// atomic address) even in the first pass.
__device__ __forceinline__ int digit_bits(int pass) { return pass == 0 ? 11 : 10; }
__device__ __forceinline__ int digit_shift(int pass) { return pass == 0 ? 20 : pass == 1 ? 10 : 0; }
constexpr int BINS = 1 << 11;
// Fixed point of the masses: a weight w in [0, 1] is w * 2^40, rounded.
constexpr double FIXED_ONE = 1099511627776.0;  // 2^40

// What a row draws with; `Draw` in src/sample.rs (16 bytes).
struct Draw {
    float inv_temperature;
    float top_p;
    uint32_t top_k;  // 0: no top_k
    float uniform;   // in [0, 1)
};

// isobench-common's math::exp, each operation rounded as Rust does
// (no contraction into fused multiply-adds).
__device__ __forceinline__ float host_exp(float x) {
    const float ROUND = 12582912.0f;  // 1.5 * 2^23
    const float clamped = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    const float shifted = __fadd_rn(__fmul_rn(clamped, 1.44269504088896341f), ROUND);
    const float n = __fsub_rn(shifted, ROUND);
    const float r =
        __fsub_rn(__fsub_rn(clamped, __fmul_rn(n, 0.6933594f)), __fmul_rn(n, -2.1219444e-4f));
    float p = 1.9875691e-4f;
    p = __fadd_rn(__fmul_rn(p, r), 1.3981999e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 8.333452e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 4.1665796e-2f);
    p = __fadd_rn(__fmul_rn(p, r), 0.16666665f);
    p = __fadd_rn(__fmul_rn(p, r), 0.5f);
    const float e_r = __fadd_rn(__fadd_rn(__fmul_rn(__fmul_rn(p, r), r), r), 1.0f);
    const uint32_t exponent =
        (__float_as_uint(shifted) - __float_as_uint(ROUND) + 127u) << 23;
    const float value = __fmul_rn(e_r, __uint_as_float(exponent));
    return x < -87.0f ? 0.0f : value;
}

__device__ __forceinline__ unsigned long long fixed(float weight) {
    return (unsigned long long)__dmul_rn((double)weight, FIXED_ONE);
}

// A block-wide exclusive prefix sum of one value per thread, in thread
// order, and the total. `scratch` holds WARPS values.
__device__ __forceinline__ unsigned long long exclusive_scan(
    unsigned long long value, unsigned long long* scratch, unsigned long long& total) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    unsigned long long inclusive = value;
#pragma unroll
    for (int offset = 1; offset < 32; offset *= 2) {
        const unsigned long long other = __shfl_up_sync(0xffffffffu, inclusive, offset);
        if (lane >= offset) inclusive += other;
    }
    __syncthreads();  // scratch may still be read from a previous call
    if (lane == 31) scratch[warp] = inclusive;
    __syncthreads();
    unsigned long long before = 0;
    total = 0;
    for (int w = 0; w < WARPS; ++w) {
        if (w < warp) before += scratch[w];
        total += scratch[w];
    }
    return before + inclusive - value;
}

// Where a cut falls: the boundary token (key, id) and the mass of every
// token up to and including it in the ranking.
struct Cut {
    uint32_t key;
    uint32_t id;
    unsigned long long mass;
};

// A cut that keeps every token (all keys are >= 0).
__device__ __forceinline__ Cut keep_all(unsigned long long total) {
    return Cut{0u, 0xffffffffu, total};
}

__device__ __forceinline__ bool keeps(const Cut& cut, uint32_t key, uint32_t id) {
    return key > cut.key || (key == cut.key && id <= cut.id);
}

// Shared state of the selection.
struct Shared {
    unsigned int counts[BINS];
    unsigned long long masses[BINS];
    unsigned long long scan[WARPS];
    unsigned int bin;
    unsigned long long above_count;
    unsigned long long above_mass;
    unsigned int found;  // a thread's index, or THREADS
};

// The first token in the ranking at which the ranking's prefix reaches
// `target` tokens (BY_MASS false) or fixed-point mass (true); keep_all
// when the whole row does not reach it.
template <bool BY_MASS>
__device__ Cut select(
    const float* weights, int vocab, unsigned long long target, unsigned long long total,
    Shared& s) {
    uint32_t prefix = 0, mask = 0;
    unsigned long long above_count = 0, above_mass = 0;
    for (int pass = 0; pass < 3; ++pass) {
        const int shift = digit_shift(pass);
        const int bins = 1 << digit_bits(pass);
        for (int b = threadIdx.x; b < bins; b += THREADS) {
            s.counts[b] = 0;
            s.masses[b] = 0;
        }
        __syncthreads();
        for (int i = threadIdx.x; i < vocab; i += THREADS) {
            const float w = weights[i];
            const uint32_t key = __float_as_uint(w);
            if ((key & mask) == prefix) {
                const int bin = (key >> shift) & (bins - 1);
                atomicAdd(&s.counts[bin], 1u);
                atomicAdd(&s.masses[bin], fixed(w));
            }
        }
        __syncthreads();
        // Thread t takes bins `per` at a time from the heaviest down; the
        // block scans their sums, and the thread in whose bins the target
        // is reached walks them.
        const int per = bins / THREADS;
        const int top = bins - 1 - threadIdx.x * per;
        unsigned long long count = 0, mass = 0;
        for (int k = 0; k < per; ++k) {
            count += s.counts[top - k];
            mass += s.masses[top - k];
        }
        unsigned long long unused;
        const unsigned long long count_before = above_count + exclusive_scan(count, s.scan, unused);
        const unsigned long long mass_before = above_mass + exclusive_scan(mass, s.scan, unused);
        if (threadIdx.x == 0) s.bin = bins;  // nothing reaches the target
        __syncthreads();
        const unsigned long long before = BY_MASS ? mass_before : count_before;
        const unsigned long long mine = BY_MASS ? mass : count;
        if (count > 0 && before < target && before + mine >= target) {
            unsigned long long reached = before, counted = count_before, weighed = mass_before;
            for (int k = 0; k < per; ++k) {
                const int bin = top - k;
                const unsigned long long in_bin =
                    BY_MASS ? s.masses[bin] : (unsigned long long)s.counts[bin];
                if (s.counts[bin] > 0 && reached + in_bin >= target) {
                    s.bin = bin;
                    s.above_count = counted;
                    s.above_mass = weighed;
                    break;
                }
                reached += in_bin;
                counted += s.counts[bin];
                weighed += s.masses[bin];
            }
        }
        __syncthreads();
        if (s.bin == bins) return keep_all(total);
        prefix |= s.bin << shift;
        mask |= (uint32_t)(bins - 1) << shift;
        above_count = s.above_count;
        above_mass = s.above_mass;
        __syncthreads();  // every thread has read s
    }
    // Every token of weight bits `prefix` weighs the same: the cut is the
    // n-th of them by id, n the fewest that reach the target.
    const unsigned long long unit = BY_MASS ? fixed(__uint_as_float(prefix)) : 1ull;
    const unsigned long long above = BY_MASS ? above_mass : above_count;
    unsigned long long needed = unit == 0 ? 1 : (target - above + unit - 1) / unit;
    if (needed == 0) needed = 1;
    // Contiguous slices of the row per thread, in id order.
    const int slice = (vocab + THREADS - 1) / THREADS;
    const int begin = min(vocab, threadIdx.x * slice), end = min(vocab, begin + slice);
    unsigned long long equal = 0;
    for (int i = begin; i < end; ++i) equal += __float_as_uint(weights[i]) == prefix;
    unsigned long long all_equal;
    const unsigned long long before = exclusive_scan(equal, s.scan, all_equal);
    if (needed > all_equal) needed = all_equal;  // cannot happen; keeps the walk in range
    __shared__ uint32_t cut_id;
    if (before < needed && needed <= before + equal) {
        unsigned long long seen = before;
        for (int i = begin; i < end; ++i) {
            if (__float_as_uint(weights[i]) == prefix && ++seen == needed) {
                cut_id = (uint32_t)i;
                break;
            }
        }
    }
    __syncthreads();
    return Cut{prefix, cut_id, above_mass + needed * fixed(__uint_as_float(prefix))};
}

}  // namespace

// Grid (rows); THREADS threads. `weights` is scratch of rows x vocab
// floats; `tokens` gets one id per row.
extern "C" __global__ void __launch_bounds__(THREADS) sample_f32(
    const float* __restrict__ logits, float* __restrict__ weights, const Draw* __restrict__ draws,
    uint32_t* __restrict__ tokens, int vocab) {
    __shared__ Shared s;
    __shared__ float warp_max[WARPS];
    const int row = blockIdx.x;
    const Draw draw = draws[row];
    const float* l = logits + (size_t)row * vocab;
    float* w = weights + (size_t)row * vocab;

    // The row's largest logit (NaN is not), then the weights.
    float max = -INFINITY;
    for (int i = threadIdx.x; i < vocab; i += THREADS) max = fmaxf(max, l[i]);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
        max = fmaxf(max, __shfl_xor_sync(0xffffffffu, max, offset));
    }
    if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = max;
    __syncthreads();
    for (int k = 0; k < WARPS; ++k) max = fmaxf(max, warp_max[k]);
    unsigned long long mine = 0;
    for (int i = threadIdx.x; i < vocab; i += THREADS) {
        const float e = host_exp(__fmul_rn(__fsub_rn(l[i], max), draw.inv_temperature));
        const float weight = e >= 0.0f ? fminf(e, 1.0f) : 0.0f;
        w[i] = weight;
        mine += fixed(weight);
    }
    unsigned long long total;
    exclusive_scan(mine, s.scan, total);  // its barriers publish the weights

    Cut cut = keep_all(total);
    if (draw.top_k != 0 && draw.top_k < (uint32_t)vocab) {
        cut = select<false>(w, vocab, draw.top_k, total, s);
    }
    if (draw.top_p < 1.0f) {
        const double target = ceil((double)draw.top_p * (double)cut.mass);
        const Cut by_mass = select<true>(w, vocab, (unsigned long long)target, total, s);
        if (by_mass.key > cut.key || (by_mass.key == cut.key && by_mass.id < cut.id)) {
            cut = by_mass;
        }
    }

    // The draw: the first kept token at which the kept mass, in id order,
    // reaches ceil(uniform * kept mass), and at least 1 (a token of weight
    // 0 is never drawn).
    const double scaled = ceil((double)draw.uniform * (double)cut.mass);
    const unsigned long long target = scaled < 1.0 ? 1ull : (unsigned long long)scaled;
    const int slice = (vocab + THREADS - 1) / THREADS;
    const int begin = min(vocab, (int)threadIdx.x * slice), end = min(vocab, begin + slice);
    unsigned long long kept_mass = 0;
    for (int i = begin; i < end; ++i) {
        if (keeps(cut, __float_as_uint(w[i]), (uint32_t)i)) kept_mass += fixed(w[i]);
    }
    unsigned long long kept_total;
    const unsigned long long before = exclusive_scan(kept_mass, s.scan, kept_total);
    if (threadIdx.x == 0) s.found = THREADS;
    __syncthreads();
    if (before < target && before + kept_mass >= target) s.found = threadIdx.x;  // one thread
    __syncthreads();
    if (s.found == threadIdx.x) {
        unsigned long long sum = before;
        for (int i = begin; i < end; ++i) {
            if (!keeps(cut, __float_as_uint(w[i]), (uint32_t)i)) continue;
            sum += fixed(w[i]);
            if (sum >= target) {
                tokens[row] = (uint32_t)i;
                break;
            }
        }
    }
    // No weight kept at all (a row of NaN or infinities): every token
    // weighs the same, and the first is kept.
    if (s.found == THREADS && threadIdx.x == 0) tokens[row] = 0;
}
