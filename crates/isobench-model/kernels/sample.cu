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
// far, scanned from the heaviest bin; then, among the tokens of the
// boundary weight, the one of the needed rank by id (the lowest, kept by
// the last pass, unless several of equal weight are needed). The first
// pass's histogram is built with the weights and serves both cuts. The
// draw: each warp sums the kept mass of its slice of the row, the block
// scans the warps' sums, and the warp whose slice holds the target walks
// it 32 tokens at a time. Five passes over the row in all (the logits
// twice, 16 bytes a load), the row staying in L2: 0.16 ms for a 128k row
// with top_p on an H200, 0.18 ms for 64 rows at once (docs/performance.md,
// "Sampling on the GPU").

#include <stdint.h>

namespace {

constexpr int THREADS = 1024;
constexpr int WARPS = THREADS / 32;
// The weights' 31 bits (the sign is 0) in three digits: the first, 8
// exponent bits and 3 of the mantissa (the weights of a row spread over a
// few dozen exponents, so few of a warp's tokens share a bin, and an
// atomic address, even in the first pass), then 10 and 10 bits.
constexpr int FIRST_BINS = 1 << 11;
constexpr int FIRST_SHIFT = 20;
constexpr int LATER_BINS = 1 << 10;
// Fixed point of the masses: a weight w in [0, 1] is w * 2^40, truncated.
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

// Shared state of a row's draw.
struct Shared {
    // The first pass's histogram, built with the weights.
    unsigned int first_counts[FIRST_BINS];
    unsigned long long first_masses[FIRST_BINS];
    // The later passes', and the lowest id in each bin of the last.
    unsigned int counts[LATER_BINS];
    unsigned long long masses[LATER_BINS];
    unsigned int lowest_id[LATER_BINS];
    unsigned long long scan[WARPS];
    float warp_max[WARPS];
    unsigned int bin;
    unsigned long long above_count;
    unsigned long long above_mass;
    uint32_t cut_id;
    unsigned int found;
};

// The first token in the ranking at which the ranking's prefix reaches
// `target` tokens (BY_MASS false) or fixed-point mass (true); keep_all
// when the whole row does not reach it.
template <bool BY_MASS>
__device__ __forceinline__ Cut select(
    const float* weights, int vocab, unsigned long long target, unsigned long long total,
    Shared& s) {
    uint32_t prefix = 0, mask = 0;
    unsigned long long above_count = 0, above_mass = 0;
    unsigned int last_bin = 0;
    for (int pass = 0; pass < 3; ++pass) {
        const int bins = pass == 0 ? FIRST_BINS : LATER_BINS;
        const int shift = pass == 0 ? FIRST_SHIFT : pass == 1 ? 10 : 0;
        const unsigned int* counts = pass == 0 ? s.first_counts : s.counts;
        const unsigned long long* masses = pass == 0 ? s.first_masses : s.masses;
        if (pass > 0) {
            for (int b = threadIdx.x; b < LATER_BINS; b += THREADS) {
                s.counts[b] = 0;
                s.masses[b] = 0;
                s.lowest_id[b] = 0xffffffffu;
            }
            __syncthreads();
#pragma unroll 4
            for (int i = threadIdx.x; i < vocab; i += THREADS) {
                const float w = weights[i];
                const uint32_t key = __float_as_uint(w);
                if ((key & mask) == prefix) {
                    const int bin = (key >> shift) & (LATER_BINS - 1);
                    atomicAdd(&s.counts[bin], 1u);
                    atomicAdd(&s.masses[bin], fixed(w));
                    if (pass == 2) atomicMin(&s.lowest_id[bin], (unsigned int)i);
                }
            }
            __syncthreads();
        }
        // Thread t takes bins `per` at a time from the heaviest down; the
        // block scans their sums, and the thread in whose bins the target
        // is reached walks them.
        const int per = bins / THREADS;
        const int top = bins - 1 - threadIdx.x * per;
        unsigned long long count = 0, mass = 0;
        for (int k = 0; k < per; ++k) {
            count += counts[top - k];
            mass += masses[top - k];
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
                    BY_MASS ? masses[bin] : (unsigned long long)counts[bin];
                if (counts[bin] > 0 && reached + in_bin >= target) {
                    s.bin = bin;
                    s.above_count = counted;
                    s.above_mass = weighed;
                    break;
                }
                reached += in_bin;
                counted += counts[bin];
                weighed += masses[bin];
            }
        }
        __syncthreads();
        if (s.bin == (unsigned int)bins) return keep_all(total);
        last_bin = s.bin;
        prefix |= last_bin << shift;
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
    const unsigned long long equal_total = s.counts[last_bin];
    if (needed > equal_total) needed = equal_total;  // cannot happen; keeps the walk in range
    if (needed == 1) {
        return Cut{prefix, s.lowest_id[last_bin], above_mass + fixed(__uint_as_float(prefix))};
    }
    // Several tokens of one weight: contiguous slices of the row per
    // thread, in id order, and a scan of how many each holds.
    const int slice = (vocab + THREADS - 1) / THREADS;
    const int begin = min(vocab, (int)threadIdx.x * slice), end = min(vocab, begin + slice);
    unsigned long long equal = 0;
    for (int i = begin; i < end; ++i) equal += __float_as_uint(weights[i]) == prefix;
    unsigned long long all_equal;
    const unsigned long long before = exclusive_scan(equal, s.scan, all_equal);
    if (before < needed && needed <= before + equal) {
        unsigned long long seen = before;
        for (int i = begin; i < end; ++i) {
            if (__float_as_uint(weights[i]) == prefix && ++seen == needed) {
                s.cut_id = (uint32_t)i;
                break;
            }
        }
    }
    __syncthreads();
    const uint32_t cut_id = s.cut_id;
    __syncthreads();  // s.cut_id may be written again by the next cut
    return Cut{prefix, cut_id, above_mass + needed * fixed(__uint_as_float(prefix))};
}

// The weight of a logit; its fixed-point mass goes to `mass` and the
// first pass's histogram.
__device__ __forceinline__ float weigh(
    float logit, float max, float inv_temperature, unsigned long long& mass, Shared& s) {
    const float e = host_exp(__fmul_rn(__fsub_rn(logit, max), inv_temperature));
    const float weight = e >= 0.0f ? fminf(e, 1.0f) : 0.0f;
    const unsigned long long m = fixed(weight);
    mass += m;
    const int bin = __float_as_uint(weight) >> FIRST_SHIFT;
    atomicAdd(&s.first_counts[bin], 1u);
    // The u64 sum as its two 32-bit words (little-endian), with the carry:
    // a 64-bit atomic add on shared memory is a compare-and-swap loop, and
    // this one runs for every token (0.25 ms a 128k row so on an H200,
    // 0.16 ms with the words; the later passes' few tokens keep the u64).
    unsigned int* words = reinterpret_cast<unsigned int*>(&s.first_masses[bin]);
    const unsigned int lo = (unsigned int)m, hi = (unsigned int)(m >> 32);
    const unsigned int old = atomicAdd(&words[0], lo);
    const unsigned int carry = old > 0xffffffffu - lo ? 1u : 0u;
    if (hi + carry != 0) atomicAdd(&words[1], hi + carry);
    return weight;
}

__device__ __forceinline__ unsigned long long warp_sum_u64(unsigned long long x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

}  // namespace

// Grid (rows); THREADS threads. `weights` is scratch of rows x vocab
// floats; `tokens` gets one id per row.
extern "C" __global__ void __launch_bounds__(THREADS, 1) sample_f32(
    const float* __restrict__ logits, float* __restrict__ weights, const Draw* __restrict__ draws,
    uint32_t* __restrict__ tokens, int vocab) {
    __shared__ Shared s;
    const int row = blockIdx.x;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const Draw draw = draws[row];
    const float* l = logits + (size_t)row * vocab;
    float* w = weights + (size_t)row * vocab;
    // 16 bytes a load where the rows allow it.
    const bool wide = vocab % 4 == 0 && ((uintptr_t)l % 16) == 0 && ((uintptr_t)w % 16) == 0;
    const int quads = wide ? vocab / 4 : 0;
    for (int b = threadIdx.x; b < FIRST_BINS; b += THREADS) {
        s.first_counts[b] = 0;
        s.first_masses[b] = 0;
    }

    // The row's largest logit (NaN is not).
    float max = -INFINITY;
    for (int q = threadIdx.x; q < quads; q += THREADS) {
        const float4 v = reinterpret_cast<const float4*>(l)[q];
        max = fmaxf(max, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
    }
    for (int i = 4 * quads + threadIdx.x; i < vocab; i += THREADS) max = fmaxf(max, l[i]);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
        max = fmaxf(max, __shfl_xor_sync(0xffffffffu, max, offset));
    }
    if (lane == 0) s.warp_max[warp] = max;
    __syncthreads();  // also publishes the zeroed histogram
    for (int k = 0; k < WARPS; ++k) max = fmaxf(max, s.warp_max[k]);

    // The weights, their total and the first pass's histogram.
    unsigned long long mine = 0;
    for (int q = threadIdx.x; q < quads; q += THREADS) {
        const float4 v = reinterpret_cast<const float4*>(l)[q];
        float4 out;
        out.x = weigh(v.x, max, draw.inv_temperature, mine, s);
        out.y = weigh(v.y, max, draw.inv_temperature, mine, s);
        out.z = weigh(v.z, max, draw.inv_temperature, mine, s);
        out.w = weigh(v.w, max, draw.inv_temperature, mine, s);
        reinterpret_cast<float4*>(w)[q] = out;
    }
    for (int i = 4 * quads + threadIdx.x; i < vocab; i += THREADS) {
        w[i] = weigh(l[i], max, draw.inv_temperature, mine, s);
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
    // 0 is never drawn). Warp w holds a slice of the row.
    const double scaled = ceil((double)draw.uniform * (double)cut.mass);
    const unsigned long long target = scaled < 1.0 ? 1ull : (unsigned long long)scaled;
    const int chunk = (vocab + WARPS - 1) / WARPS;
    const int begin = min(vocab, warp * chunk), end = min(vocab, begin + chunk);
    unsigned long long kept = 0;
#pragma unroll 4
    for (int i = begin + lane; i < end; i += 32) {
        if (keeps(cut, __float_as_uint(w[i]), (uint32_t)i)) kept += fixed(w[i]);
    }
    kept = warp_sum_u64(kept);
    unsigned long long unused;
    // Lane 0 carries its warp's sum: its exclusive prefix is the warps' before.
    unsigned long long before = exclusive_scan(lane == 0 ? kept : 0ull, s.scan, unused);
    before = __shfl_sync(0xffffffffu, before, 0);
    if (threadIdx.x == 0) s.found = 0;
    __syncthreads();
    if (before < target && before + kept >= target) {  // one warp
        unsigned long long sum = before;
        for (int base = begin; base < end; base += 32) {
            const int i = base + lane;
            const unsigned long long m =
                i < end && keeps(cut, __float_as_uint(w[i]), (uint32_t)i) ? fixed(w[i]) : 0ull;
            unsigned long long inclusive = m;
#pragma unroll
            for (int offset = 1; offset < 32; offset *= 2) {
                const unsigned long long other = __shfl_up_sync(0xffffffffu, inclusive, offset);
                if (lane >= offset) inclusive += other;
            }
            const unsigned int reached = __ballot_sync(0xffffffffu, sum + inclusive >= target);
            if (reached != 0) {
                if (lane == __ffs(reached) - 1) {
                    tokens[row] = (uint32_t)i;
                    s.found = 1;
                }
                break;
            }
            sum += __shfl_sync(0xffffffffu, inclusive, 31);
        }
    }
    __syncthreads();
    // No weight kept at all (a row of NaN or infinities): every token
    // weighs the same, and the first is kept.
    if (s.found == 0 && threadIdx.x == 0) tokens[row] = 0;
}
