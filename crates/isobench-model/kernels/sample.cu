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
// on the order of the threads' atomics, or on how the row is split.
//
// A row is drawn by a thread block cluster (sm_90 and later; src/sample.rs
// chooses its size: 8, 4 or 2 blocks of THREADS threads a row, so that
// the rows' clusters all run at once; one block for short rows), each
// block taking a contiguous slice of the row; the weights go to a scratch
// row. Each block works on its slice and reads the other blocks' shared
// memory (distributed shared memory) where a step needs the whole row:
// the row's max, its mass, the histograms' bins, the kept mass before its
// slice. Every block then makes the same decisions from the same integer
// sums, and each cluster barrier is reached by all of them.
//
// A cut is found by radix selection over the weights' bits (which order
// non-negative floats): three passes of 11, 10 and 10 bits, each a
// histogram of counts and masses of the tokens that match the digits so
// far (each block over its slice), scanned from the heaviest bin: the
// bins split in ranges, one a block, which sums its range's bins over the
// cluster and scans them; the block whose range holds the target finds
// its bin. Then, among the tokens of the boundary weight, the one of the
// needed rank by id (the lowest, kept by the last pass, unless several of
// equal weight are needed). The first pass's histogram is built with the
// weights and serves both cuts. The draw: each warp sums the kept mass of
// its part of the slice, the cluster scans the warps' sums, and the block
// whose slice holds the target walks the part that holds it, a few tokens
// a thread. Five passes over the row in all (the
// logits twice, 16 bytes a load), the row staying in L2. On an H200, with
// top_p, a 128k row takes 62 us with 8 blocks (106 with one block a row,
// as before), 128 rows 209 us with 2 blocks a row (260): docs/
// performance.md, "A sampled row drawn by a cluster of blocks".

#include <cooperative_groups.h>
#include <stdint.h>

#include "common.cuh"

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

// The part of a row one block (or thread, or warp) takes: [begin, end).
struct Slice {
    int begin;
    int end;
};

// Shared state of a block; the fields marked "read by the cluster" are
// read by the row's other blocks too.
struct Shared {
    // The first pass's histogram of the block's slice, built with the
    // weights (read by the cluster).
    unsigned int first_counts[FIRST_BINS];
    unsigned long long first_masses[FIRST_BINS];
    // The later passes', and the lowest id in each bin of the last (read
    // by the cluster).
    unsigned int counts[LATER_BINS];
    unsigned long long masses[LATER_BINS];
    unsigned int lowest_id[LATER_BINS];
    unsigned long long scan[WARPS];
    float warp_max[WARPS];
    // The slice's largest logit, mass, tokens of a cut's boundary weight
    // and kept mass; the boundary token if this block holds it (read by
    // the cluster).
    float block_max;
    unsigned long long block_mass;
    unsigned long long block_equal;
    unsigned long long block_kept;
    uint32_t cut_id;
    // The part of the slice that holds the drawn token, and the kept mass
    // before it.
    Slice walk;
    unsigned long long walk_before;
    // A pass of a cut: the row's count and mass in this block's range of
    // bins, and the bin where the target is reached if in this range,
    // with the count and mass ranked above it (read by the cluster).
    unsigned long long range_count;
    unsigned long long range_mass;
    unsigned int bin;
    unsigned long long above_count;
    unsigned long long above_mass;
};

// The blocks that draw one row: a thread block cluster on sm_90 and later,
// a single block before (src/sample.rs launches one block a row there).
struct Row {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    __device__ __forceinline__ int blocks() const { return (int)cluster.num_blocks(); }
    __device__ __forceinline__ int rank() const { return (int)cluster.block_rank(); }
    // Every thread of every block of the row; orders the memory accesses
    // before it (shared and global) before those after it.
    __device__ __forceinline__ void sync() { cluster.sync(); }
    // Block `rank`'s shared state.
    __device__ __forceinline__ Shared& on(Shared& s, int rank) {
        return rank == this->rank() ? s : *cluster.map_shared_rank(&s, (unsigned int)rank);
    }
#else
    __device__ __forceinline__ int blocks() const { return 1; }
    __device__ __forceinline__ int rank() const { return 0; }
    __device__ __forceinline__ void sync() { __syncthreads(); }
    __device__ __forceinline__ Shared& on(Shared& s, int) { return s; }
#endif
};

// Part `index` of `parts` contiguous parts of `range`, each a multiple of
// `align` tokens long but the last.
__device__ __forceinline__ Slice part(Slice range, int index, int parts, int align) {
    const int length = range.end - range.begin;
    const int each = ((length + parts - 1) / parts + align - 1) / align * align;
    const int begin = min(range.end, range.begin + index * each);
    return Slice{begin, min(range.end, begin + each)};
}

// The most blocks a row (the largest of CLUSTER_SIZES in src/sample.rs).
constexpr int MAX_BLOCKS = 8;

// The row's count and mass of `bin` in the first pass's histograms
// (`first`) or the later passes': the sums over the row's blocks, two
// blocks' loads in flight at a time (more spill registers).
__device__ __forceinline__ void row_bin(
    Shared& s, Row& row, bool first, int bin, unsigned long long& count,
    unsigned long long& mass) {
    count = 0;
    mass = 0;
    const int blocks = row.blocks();
#pragma unroll 2
    for (int r = 0; r < MAX_BLOCKS; ++r) {
        if (r < blocks) {
            const Shared& other = row.on(s, r);
            count += first ? other.first_counts[bin] : other.counts[bin];
            mass += first ? other.first_masses[bin] : other.masses[bin];
        }
    }
}

// The first token in the ranking at which the ranking's prefix reaches
// `target` tokens (BY_MASS false) or fixed-point mass (true); keep_all
// when the whole row does not reach it. `slice` is this block's part of
// the weights `weights` (of the row).
template <bool BY_MASS>
__device__ __forceinline__ Cut select(
    const float* weights, Slice slice, unsigned long long target, unsigned long long total,
    Shared& s, Row& row) {
    const int blocks = row.blocks(), rank = row.rank();
    uint32_t prefix = 0, mask = 0;
    unsigned long long above_count = 0, above_mass = 0;
    unsigned int last_bin = 0;
    for (int pass = 0; pass < 3; ++pass) {
        const int bins = pass == 0 ? FIRST_BINS : LATER_BINS;
        const int shift = pass == 0 ? FIRST_SHIFT : pass == 1 ? 10 : 0;
        row.sync();  // no block still reads what the previous pass left
        if (pass > 0) {
            for (int b = threadIdx.x; b < LATER_BINS; b += THREADS) {
                s.counts[b] = 0;
                s.masses[b] = 0;
                s.lowest_id[b] = 0xffffffffu;
            }
            __syncthreads();
#pragma unroll 4
            for (int i = slice.begin + threadIdx.x; i < slice.end; i += THREADS) {
                const float w = weights[i];
                const uint32_t key = __float_as_uint(w);
                if ((key & mask) == prefix) {
                    const int bin = (key >> shift) & (LATER_BINS - 1);
                    atomicAdd(&s.counts[bin], 1u);
                    atomicAdd(&s.masses[bin], fixed(w));
                    if (pass == 2) atomicMin(&s.lowest_id[bin], (unsigned int)i);
                }
            }
            row.sync();  // every block's histogram is complete
        }
        // The row's bins, heaviest first, in equal ranges a block: block r
        // sums the row's bins of range r over the blocks' histograms,
        // `per` bins a thread, and scans them.
        const int span = bins / blocks;
        const int range_top = bins - 1 - rank * span;
        const int range_end = range_top - span;  // the next range's top
        const int per = (span + THREADS - 1) / THREADS;
        const int top = range_top - (int)threadIdx.x * per;
        const int end = max(range_end, top - per);
        unsigned long long count = 0, mass = 0;
        for (int bin = top; bin > end; --bin) {
            unsigned long long bin_count, bin_mass;
            row_bin(s, row, pass == 0, bin, bin_count, bin_mass);
            count += bin_count;
            mass += bin_mass;
        }
        unsigned long long range_count, range_mass;
        const unsigned long long count_in = exclusive_scan(count, s.scan, range_count);
        const unsigned long long mass_in = exclusive_scan(mass, s.scan, range_mass);
        if (threadIdx.x == 0) {
            s.range_count = range_count;
            s.range_mass = range_mass;
        }
        row.sync();
        // The range where the target is reached (every block finds the
        // same), and what the ranges before it hold.
        int holder = -1;
        unsigned long long count_above = above_count, mass_above = above_mass;
        for (int r = 0; r < blocks; ++r) {
            const Shared& other = row.on(s, r);
            const unsigned long long in_count = other.range_count, in_mass = other.range_mass;
            const unsigned long long before = BY_MASS ? mass_above : count_above;
            const unsigned long long in_range = BY_MASS ? in_mass : in_count;
            if (in_count > 0 && before < target && before + in_range >= target) {
                holder = r;
                break;
            }
            count_above += in_count;
            mass_above += in_mass;
        }
        if (holder < 0) return keep_all(total);
        // In that range, the thread in whose bins the target is reached
        // walks them.
        const unsigned long long count_before = count_above + count_in;
        const unsigned long long mass_before = mass_above + mass_in;
        const unsigned long long before = BY_MASS ? mass_before : count_before;
        const unsigned long long mine = BY_MASS ? mass : count;
        if (holder == rank && count > 0 && before < target && before + mine >= target) {
            unsigned long long reached = before, counted = count_before, weighed = mass_before;
            for (int bin = top; bin > end; --bin) {
                unsigned long long bin_count, bin_mass;
                row_bin(s, row, pass == 0, bin, bin_count, bin_mass);
                const unsigned long long in_bin = BY_MASS ? bin_mass : bin_count;
                if (bin_count > 0 && reached + in_bin >= target) {
                    s.bin = bin;
                    s.above_count = counted;
                    s.above_mass = weighed;
                    break;
                }
                reached += in_bin;
                counted += bin_count;
                weighed += bin_mass;
            }
        }
        row.sync();
        const Shared& found = row.on(s, holder);
        last_bin = found.bin;
        above_count = found.above_count;
        above_mass = found.above_mass;
        prefix |= last_bin << shift;
        mask |= (uint32_t)(bins - 1) << shift;
    }
    // Every token of weight bits `prefix` weighs the same: the cut is the
    // n-th of them by id, n the fewest that reach the target.
    const unsigned long long unit = BY_MASS ? fixed(__uint_as_float(prefix)) : 1ull;
    const unsigned long long above = BY_MASS ? above_mass : above_count;
    unsigned long long needed = unit == 0 ? 1 : (target - above + unit - 1) / unit;
    if (needed == 0) needed = 1;
    unsigned long long equal_total = 0;
    uint32_t lowest = 0xffffffffu;
#pragma unroll
    for (int r = 0; r < MAX_BLOCKS; ++r) {
        if (r < blocks) {
            const Shared& other = row.on(s, r);
            equal_total += other.counts[last_bin];
            lowest = min(lowest, other.lowest_id[last_bin]);
        }
    }
    if (needed > equal_total) needed = equal_total;  // cannot happen; keeps the walk in range
    if (needed == 1) {
        return Cut{prefix, lowest, above_mass + fixed(__uint_as_float(prefix))};
    }
    // Several tokens of one weight: contiguous parts of the slice per
    // thread, in id order, and a scan of how many each holds, after the
    // blocks before this one.
    const Slice mine = part(slice, threadIdx.x, THREADS, 1);
    unsigned long long equal = 0;
    for (int i = mine.begin; i < mine.end; ++i) equal += __float_as_uint(weights[i]) == prefix;
    unsigned long long block_equal;
    unsigned long long before = exclusive_scan(equal, s.scan, block_equal);
    if (threadIdx.x == 0) s.block_equal = block_equal;
    row.sync();
    // The block whose slice holds the needed token, and the tokens before
    // its slice.
    int holder = blocks - 1;
    unsigned long long before_holder = 0;
    for (int r = 0; r < blocks; ++r) {
        const unsigned long long in_block = row.on(s, r).block_equal;
        if (before_holder + in_block >= needed) {
            holder = r;
            break;
        }
        before_holder += in_block;
    }
    before += before_holder;
    if (holder == row.rank() && before < needed && needed <= before + equal) {
        unsigned long long seen = before;
        for (int i = mine.begin; i < mine.end; ++i) {
            if (__float_as_uint(weights[i]) == prefix && ++seen == needed) {
                s.cut_id = (uint32_t)i;
                break;
            }
        }
    }
    row.sync();
    const uint32_t cut_id = row.on(s, holder).cut_id;
    row.sync();  // no block still reads s.block_equal or s.cut_id
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

// Grid (rows x the cluster's blocks), clusters of 1 to 8 blocks along x,
// one a row; THREADS threads. `weights` is scratch of rows x vocab floats;
// `tokens` gets one id per row. Launched by src/kernels.rs's `Launch`: it
// waits for the kernel before it before reading the logits.
extern "C" __global__ void __launch_bounds__(THREADS, 1) sample_f32(
    const float* __restrict__ logits, float* __restrict__ weights, const Draw* __restrict__ draws,
    uint32_t* __restrict__ tokens, int vocab) {
    __shared__ Shared s;
    Row row;
    const int blocks = row.blocks(), rank = row.rank();
    const int row_index = blockIdx.x / blocks;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int b = threadIdx.x; b < FIRST_BINS; b += THREADS) {
        s.first_counts[b] = 0;
        s.first_masses[b] = 0;
    }
    wait_for_prerequisites();
    const Draw draw = draws[row_index];
    const float* l = logits + (size_t)row_index * vocab;
    float* w = weights + (size_t)row_index * vocab;
    // 16 bytes a load where the rows allow it (slices start at multiples
    // of 4 tokens).
    const bool wide = vocab % 4 == 0 && ((uintptr_t)l % 16) == 0 && ((uintptr_t)w % 16) == 0;
    const Slice slice = part(Slice{0, vocab}, rank, blocks, 4);
    const int quads_begin = wide ? slice.begin / 4 : 0, quads_end = wide ? slice.end / 4 : 0;
    const int singles_begin = wide ? slice.end : slice.begin;

    // The row's largest logit (NaN is not).
    float max = -INFINITY;
    for (int q = quads_begin + threadIdx.x; q < quads_end; q += THREADS) {
        const float4 v = reinterpret_cast<const float4*>(l)[q];
        max = fmaxf(max, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
    }
    for (int i = singles_begin + threadIdx.x; i < slice.end; i += THREADS) max = fmaxf(max, l[i]);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
        max = fmaxf(max, __shfl_xor_sync(0xffffffffu, max, offset));
    }
    if (lane == 0) s.warp_max[warp] = max;
    __syncthreads();  // also publishes the zeroed histogram
    for (int k = 0; k < WARPS; ++k) max = fmaxf(max, s.warp_max[k]);
    if (threadIdx.x == 0) s.block_max = max;
    row.sync();
    for (int r = 0; r < blocks; ++r) max = fmaxf(max, row.on(s, r).block_max);

    // The weights, the row's mass and the first pass's histogram.
    unsigned long long mine = 0;
    for (int q = quads_begin + threadIdx.x; q < quads_end; q += THREADS) {
        const float4 v = reinterpret_cast<const float4*>(l)[q];
        float4 out;
        out.x = weigh(v.x, max, draw.inv_temperature, mine, s);
        out.y = weigh(v.y, max, draw.inv_temperature, mine, s);
        out.z = weigh(v.z, max, draw.inv_temperature, mine, s);
        out.w = weigh(v.w, max, draw.inv_temperature, mine, s);
        reinterpret_cast<float4*>(w)[q] = out;
    }
    for (int i = singles_begin + threadIdx.x; i < slice.end; i += THREADS) {
        w[i] = weigh(l[i], max, draw.inv_temperature, mine, s);
    }
    unsigned long long block_mass;
    exclusive_scan(mine, s.scan, block_mass);
    if (threadIdx.x == 0) s.block_mass = block_mass;
    row.sync();  // publishes the weights, the histograms and the masses
    unsigned long long total = 0;
    for (int r = 0; r < blocks; ++r) total += row.on(s, r).block_mass;

    Cut cut = keep_all(total);
    if (draw.top_k != 0 && draw.top_k < (uint32_t)vocab) {
        cut = select<false>(w, slice, draw.top_k, total, s, row);
    }
    if (draw.top_p < 1.0f) {
        const double target = ceil((double)draw.top_p * (double)cut.mass);
        const Cut by_mass = select<true>(w, slice, (unsigned long long)target, total, s, row);
        if (by_mass.key > cut.key || (by_mass.key == cut.key && by_mass.id < cut.id)) {
            cut = by_mass;
        }
    }

    // The draw: the first kept token at which the kept mass, in id order,
    // reaches ceil(uniform * kept mass), and at least 1 (a token of weight
    // 0 is never drawn). Warp w sums the kept mass of a part of the
    // block's slice; the block whose slice holds the target walks the part
    // that holds it, a few tokens a thread.
    const double scaled = ceil((double)draw.uniform * (double)cut.mass);
    const unsigned long long target = scaled < 1.0 ? 1ull : (unsigned long long)scaled;
    const Slice warp_part = part(slice, warp, WARPS, 1);
    unsigned long long kept = 0;
#pragma unroll 4
    for (int i = warp_part.begin + lane; i < warp_part.end; i += 32) {
        if (keeps(cut, __float_as_uint(w[i]), (uint32_t)i)) kept += fixed(w[i]);
    }
    kept = warp_sum_u64(kept);
    unsigned long long block_kept;
    // Lane 0 carries its warp's sum: its exclusive prefix is the warps' before.
    unsigned long long before = exclusive_scan(lane == 0 ? kept : 0ull, s.scan, block_kept);
    before = __shfl_sync(0xffffffffu, before, 0);
    if (threadIdx.x == 0) s.block_kept = block_kept;
    row.sync();
    unsigned long long row_kept = 0, before_block = 0;
#pragma unroll
    for (int r = 0; r < MAX_BLOCKS; ++r) {
        if (r < blocks) {
            const unsigned long long in_block = row.on(s, r).block_kept;
            if (r < rank) before_block += in_block;
            row_kept += in_block;
        }
    }
    before += before_block;
    if (row_kept < target) {
        // No weight kept at all (a row of NaN or infinities): every token
        // weighs the same, and the first is kept.
        if (rank == 0 && threadIdx.x == 0) tokens[row_index] = 0;
    } else if (before_block < target && target <= before_block + block_kept) {
        if (lane == 0 && before < target && before + kept >= target) {  // one warp
            s.walk = warp_part;
            s.walk_before = before;
        }
        __syncthreads();
        const Slice mine = part(s.walk, threadIdx.x, THREADS, 1);
        unsigned long long mass = 0;
        for (int i = mine.begin; i < mine.end; ++i) {
            if (keeps(cut, __float_as_uint(w[i]), (uint32_t)i)) mass += fixed(w[i]);
        }
        unsigned long long unused;
        unsigned long long sum = s.walk_before + exclusive_scan(mass, s.scan, unused);
        if (sum < target && sum + mass >= target) {  // one thread
            for (int i = mine.begin; i < mine.end; ++i) {
                if (keeps(cut, __float_as_uint(w[i]), (uint32_t)i)) sum += fixed(w[i]);
                if (sum >= target) {
                    tokens[row_index] = (uint32_t)i;
                    break;
                }
            }
        }
    }
    row.sync();  // no block exits while another still reads its shared memory
}
