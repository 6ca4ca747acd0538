// Paged attention on CUDA: the kernels behind isobench-model's
// src/paged_attention/cuda.rs (same semantics as the CPU kernels in
// src/paged_attention/cpu.rs). Compiled by build.rs with nvcc
// (machine code and PTX).
//
// Layouts (all contiguous, row-major):
//   cache    [num_blocks, block_size, num_kv_heads, D]  (keys or values)
//   q        [rows, num_heads, D]       rows = new tokens of the step
//   out      [rows, num_heads, D]
//   block_tables [B, W], context_lens [B], query_starts [B + 1]  (u32)
//
// One thread block handles one query row, one KV head and up to G query
// heads of that KV head's group, so each K/V row is read from memory once
// for all of them. Each K/V row of D elements is read by LPT lanes with
// 16-byte loads; the block walks the visible context in chunks of
// PARTITION tokens: scores into shared memory, softmax with a running
// max (online softmax across chunks, accumulators rescaled), then the
// weighted sum of V. The K rows and then the V rows of a chunk stream
// through a ring of shared-memory stages (cp.async), several passes of
// the block's threads (PASS tokens each) in flight ahead of the one being
// read; the first V passes are fetched while the softmax runs, so a chunk
// of one pass fetches its K and V rows together.
//
// Decode steps (one new token per sequence, rows == B) that would not
// fill the GPU are split along the context (flash decoding): the context
// is cut into partitions of partition_size (<= PARTITION) tokens, and
// block z of grid.z (the split) attends partitions z, z + grid.z, ... up
// to its row's context, as chunks of one online softmax, writing one
// partial (max, sum, unnormalised output) into a scratch buffer that
// `paged_attention_reduce_*` combines. The split, not the partition
// count, sizes the grid and the scratch: a graph's shapes follow the
// table's width (131,072 tokens for a Llama-3 shape), not the context.
// No kernel reads host memory, allocates or synchronises: a decode step
// can be captured in a CUDA graph.

#include "common.cuh"

namespace {

constexpr int NUM_THREADS = 128;
constexpr int NUM_WARPS = NUM_THREADS / 32;
// Tokens per chunk (shared-memory scores) and the largest decode
// partition; must match PARTITION in src/paged_attention/launch.rs.
constexpr int PARTITION = 512;

// Closes a group of this thread's copy_async (common.cuh).
__device__ __forceinline__ void commit_copies() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// Waits until at most PENDING of this thread's newest groups are in flight.
template <int PENDING>
__device__ __forceinline__ void wait_copies() {
    asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
    }
    return x;
}

// The parameters shared by every instantiation.
struct Params {
    const uint32_t* block_tables;
    const uint32_t* context_lens;
    const uint32_t* query_starts;
    int num_seqs;
    int rows;
    int table_width;
    int block_size;
    int num_heads;
    int num_kv_heads;
    int partition_size;
    float scale;
};

// Attends the block's part of one row's context: all of it unsplit
// (grid.z == 1), else partitions blockIdx.z, blockIdx.z + grid.z, ...
template <typename T, int D, int G, int UNROLL>
__device__ __forceinline__ void attend(
    T* __restrict__ out,
    float* __restrict__ partials,
    const T* __restrict__ q,
    const T* __restrict__ k_cache,
    const T* __restrict__ v_cache,
    const Params& p) {
    constexpr int VEC = 16 / sizeof(T);          // elements per 16-byte load
    constexpr int NVEC = D / VEC;                // 16-byte loads per K/V row
    constexpr int LPT = NVEC < 32 ? NVEC : 32;   // lanes per token
    constexpr int VPL = NVEC / LPT;              // loads per lane and row
    constexpr int EPL = VPL * VEC;               // elements per lane
    constexpr int TPI = NUM_THREADS / LPT;       // tokens per block iteration
    constexpr int PASS = TPI * UNROLL;           // tokens of one pass over the rows
    static_assert(D % VEC == 0 && (NVEC & (NVEC - 1)) == 0, "head dim");
    // Shared memory: a chunk's scores [G][PARTITION] and the ring of
    // STAGES passes of K or V rows, each [UNROLL][NUM_THREADS][VPL] (every
    // thread's own rows); after the chunks, the warps' outputs to combine.
    // As many stages as fit 40 KiB beside the scores, two to four: static
    // shared memory ends at 48 KiB.
    constexpr int LOGIT_BYTES = G * PARTITION * 4;
    constexpr int STAGE_VECS = UNROLL * NUM_THREADS * VPL;
    constexpr int RING_FIT = (40 * 1024 - LOGIT_BYTES) / (STAGE_VECS * 16);
    constexpr int STAGES = RING_FIT > 4 ? 4 : (RING_FIT < 2 ? 2 : RING_FIT);
    constexpr int LOOP_BYTES = LOGIT_BYTES + STAGES * STAGE_VECS * 16;
    constexpr int REDUCE_BYTES = NUM_WARPS * G * D * 4;
    constexpr int SMEM_VECS = (LOOP_BYTES > REDUCE_BYTES ? LOOP_BYTES : REDUCE_BYTES) / 16;
    __shared__ uint4 smem_vecs[SMEM_VECS];
    float* smem = reinterpret_cast<float*>(smem_vecs);
    uint4* ring = smem_vecs + LOGIT_BYTES / 16;
    __shared__ float warp_values[NUM_WARPS][G];

    launch_dependents();
    const int row = blockIdx.x;
    const int group = p.num_heads / p.num_kv_heads;
    const int head_chunks = (group + G - 1) / G;
    const int kv_head = blockIdx.y / head_chunks;
    const int first_in_group = (blockIdx.y % head_chunks) * G;
    const int first_head = kv_head * group + first_in_group;

    // Which sequence this row belongs to, and how much of its context it sees.
    int seq = row;
    if (p.rows != p.num_seqs) {
        int lo = 0, hi = p.num_seqs - 1;  // last seq with query_starts[seq] <= row
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (p.query_starts[mid] <= (uint32_t)row) lo = mid; else hi = mid - 1;
        }
        seq = lo;
    }
    const int new_tokens = (int)(p.query_starts[seq + 1] - p.query_starts[seq]);
    const int visible =
        (int)p.context_lens[seq] - new_tokens + (row - (int)p.query_starts[seq]) + 1;
    const int splits = gridDim.z;
    const int chunk_size = splits > 1 ? p.partition_size : PARTITION;
    const int first = blockIdx.z * chunk_size;
    if (first >= visible) return;  // the reduce reads only splits with work
    const uint32_t* table = p.block_tables + (size_t)seq * p.table_width;
    // The metadata is the step's input; q and the newest K/V rows are the
    // kernel before's output.
    wait_for_prerequisites();

    const int lane = threadIdx.x % LPT;
    const int token_group = threadIdx.x / LPT;
    const int warp = threadIdx.x / 32;
    const int warp_lane = threadIdx.x % 32;

    // This lane's slice of the scaled queries.
    float queries[G][EPL];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        const bool valid = first_in_group + g < group;
        const T* qh = q + ((size_t)row * p.num_heads + first_head + g) * D;
#pragma unroll
        for (int v = 0; v < VPL; ++v) {
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                queries[g][v * VEC + i] =
                    valid ? to_float(qh[(lane + v * LPT) * VEC + i]) * p.scale : 0.0f;
            }
        }
    }

    float running_max[G];
    float sums[G];
    float acc[G][EPL];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        running_max[g] = -INFINITY;
        sums[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < EPL; ++e) acc[g][e] = 0.0f;
    }

    const size_t row_stride = (size_t)p.num_kv_heads * D;  // one slot
    // The K or V row of context position pos.
    const auto row_of = [&](const T* cache, int pos) {
        const size_t slot = (size_t)table[pos / p.block_size] * p.block_size + pos % p.block_size;
        return cache + slot * row_stride + (size_t)kv_head * D;
    };
    for (int chunk = first; chunk < visible; chunk += splits * chunk_size) {
        const int len = min(chunk_size, visible - chunk);
        const int passes = (len + PASS - 1) / PASS;
        // Load i of the chunk: K pass i, then (i >= passes) V pass
        // i - passes, into stage i % STAGES; one group per load, empty
        // past the last, so every thread counts the same groups.
        const auto issue = [&](int i) {
            if (i < 2 * passes) {
                const T* cache = i < passes ? k_cache : v_cache;
                const int base = (i < passes ? i : i - passes) * PASS;
                uint4* stage = ring + (i % STAGES) * STAGE_VECS;
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    const int t = base + u * TPI + token_group;
                    if (t < len) {
                        const uint4* src = reinterpret_cast<const uint4*>(row_of(cache, chunk + t));
#pragma unroll
                        for (int v = 0; v < VPL; ++v) {
                            copy_async(&stage[(u * NUM_THREADS + threadIdx.x) * VPL + v],
                                       src + lane + v * LPT);
                        }
                    }
                }
            }
            commit_copies();
        };
        // Load i, once it has landed: issues load i + STAGES - 1 into the
        // stage this thread read last (its reads were consumed before), and
        // returns this thread's rows of load i.
        const auto take = [&](int i) {
            issue(i + STAGES - 1);
            wait_copies<STAGES - 1>();
            return ring + (i % STAGES) * STAGE_VECS + threadIdx.x * VPL;
        };
#pragma unroll
        for (int i = 0; i < STAGES - 1; ++i) issue(i);

        // Scores: q . k for every token of the chunk and head of the group.
        float chunk_max[G];
#pragma unroll
        for (int g = 0; g < G; ++g) chunk_max[g] = -INFINITY;
        for (int pass = 0; pass < passes; ++pass) {
            const uint4* rows = take(pass);
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int t = pass * PASS + u * TPI + token_group;
                // Rows past the chunk were not fetched: their lanes compute
                // on stale values and drop the score.
                float k[EPL];
#pragma unroll
                for (int v = 0; v < VPL; ++v) unpack<T>(rows[u * NUM_THREADS * VPL + v], k + v * VEC);
#pragma unroll
                for (int g = 0; g < G; ++g) {
                    float s = 0.0f;
#pragma unroll
                    for (int e = 0; e < EPL; ++e) s = fmaf(queries[g][e], k[e], s);
#pragma unroll
                    for (int offset = LPT / 2; offset > 0; offset /= 2) {
                        s += __shfl_xor_sync(0xffffffffu, s, offset);
                    }
                    if (t < len) {
                        chunk_max[g] = fmaxf(chunk_max[g], s);
                        if (lane == 0) smem[g * PARTITION + t] = s;
                    }
                }
            }
        }
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const float m = warp_max(chunk_max[g]);
            if (warp_lane == 0) warp_values[warp][g] = m;
        }
        __syncthreads();

        // Online softmax: new running max, rescale what came before.
#pragma unroll
        for (int g = 0; g < G; ++g) {
            float m = running_max[g];
#pragma unroll
            for (int w = 0; w < NUM_WARPS; ++w) m = fmaxf(m, warp_values[w][g]);
            const float alpha = expf(running_max[g] - m);
            running_max[g] = m;
            sums[g] *= alpha;
#pragma unroll
            for (int e = 0; e < EPL; ++e) acc[g][e] *= alpha;
            for (int t = threadIdx.x; t < len; t += NUM_THREADS) {
                const float weight = expf(smem[g * PARTITION + t] - m);
                smem[g * PARTITION + t] = weight;
                sums[g] += weight;
            }
        }
        __syncthreads();

        // Weighted sum of the values.
        for (int pass = 0; pass < passes; ++pass) {
            const uint4* rows = take(passes + pass);
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int t = pass * PASS + u * TPI + token_group;
                if (t < len) {
                    float values[EPL];
#pragma unroll
                    for (int v = 0; v < VPL; ++v) {
                        unpack<T>(rows[u * NUM_THREADS * VPL + v], values + v * VEC);
                    }
#pragma unroll
                    for (int g = 0; g < G; ++g) {
                        const float weight = smem[g * PARTITION + t];
#pragma unroll
                        for (int e = 0; e < EPL; ++e) acc[g][e] = fmaf(weight, values[e], acc[g][e]);
                    }
                }
            }
        }
        __syncthreads();  // the scores are overwritten by the next chunk
    }

    // Combine the token groups: within each warp by shuffles, then across
    // warps through shared memory.
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int e = 0; e < EPL; ++e) {
#pragma unroll
            for (int offset = LPT; offset < 32; offset *= 2) {
                acc[g][e] += __shfl_xor_sync(0xffffffffu, acc[g][e], offset);
            }
        }
        const float s = warp_sum(sums[g]);
        if (warp_lane == 0) warp_values[warp][g] = s;
    }
    if (warp_lane < LPT) {
#pragma unroll
        for (int g = 0; g < G; ++g) {
#pragma unroll
            for (int v = 0; v < VPL; ++v) {
#pragma unroll
                for (int i = 0; i < VEC; ++i) {
                    smem[(warp * G + g) * D + (lane + v * LPT) * VEC + i] = acc[g][v * VEC + i];
                }
            }
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < G * D; i += NUM_THREADS) {
        const int g = i / D;
        const int d = i % D;
        if (first_in_group + g >= group) continue;
        float total = 0.0f, sum = 0.0f;
#pragma unroll
        for (int w = 0; w < NUM_WARPS; ++w) {
            total += smem[(w * G + g) * D + d];
            sum += warp_values[w][g];
        }
        const size_t head_row = (size_t)row * p.num_heads + first_head + g;
        if (splits > 1) {
            // partials: [rows, heads, splits] x (max, sum), then
            // [rows, heads, splits, D] unnormalised outputs.
            const size_t index = head_row * splits + blockIdx.z;
            const size_t stats = (size_t)p.rows * p.num_heads * splits;
            if (d == 0) {
                partials[2 * index] = running_max[g];
                partials[2 * index + 1] = sum;
            }
            partials[2 * stats + index * D + d] = total;
        } else {
            out[head_row * D + d] = from_float<T>(total / sum);
        }
    }
}

// The block's max and sum of one value per thread (every thread gets
// them). `scratch` holds a value per warp.
__device__ __forceinline__ float block_max(float x, float* scratch) {
    x = warp_max(x);
    __syncthreads();  // scratch may still be read from a previous call
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = x;
    __syncthreads();
    x = scratch[0];
#pragma unroll
    for (int w = 1; w < NUM_WARPS; ++w) x = fmaxf(x, scratch[w]);
    return x;
}

__device__ __forceinline__ float block_sum(float x, float* scratch) {
    x = warp_sum(x);
    __syncthreads();
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = x;
    __syncthreads();
    x = 0.0f;
#pragma unroll
    for (int w = 0; w < NUM_WARPS; ++w) x += scratch[w];
    return x;
}

// The largest head_dim with a kernel (HEAD_DIMS in
// src/paged_attention/launch.rs): sizes the reduce's sums per feature.
constexpr int MAX_HEAD_DIM = 256;

// Combines a decode step's splits: grid (num_heads, rows), one block of
// NUM_THREADS per head and row; dynamic shared memory of `splits` floats.
// Split z has work when partition z starts within the row's context.
// Every read is spread over the threads, several in flight in each: a
// loop over the splits in one thread waits an L2 round trip per split
// (on an H200 the 1B shape's batch-1 step at 4,096 tokens, 66 splits,
// took 1.073 ms with such loops and 1.019 without: docs/performance.md).
template <typename T>
__device__ __forceinline__ void reduce(
    T* __restrict__ out,
    const float* __restrict__ partials,
    const uint32_t* __restrict__ context_lens,
    int rows,
    int num_heads,
    int head_dim,
    int splits,
    int partition_size) {
    extern __shared__ float weights[];
    __shared__ float scratch[NUM_WARPS];
    // Output sums of each (split group, feature): groups = threads per feature.
    __shared__ float totals[NUM_THREADS > MAX_HEAD_DIM ? NUM_THREADS : MAX_HEAD_DIM];
    launch_dependents();
    wait_for_prerequisites();
    const int head = blockIdx.x;
    const int row = blockIdx.y;
    const int used =
        min(((int)context_lens[row] + partition_size - 1) / partition_size, splits);
    const size_t head_row = (size_t)row * num_heads + head;
    const float* stats = partials + 2 * head_row * splits;
    const float* outputs = partials + 2 * (size_t)rows * num_heads * splits +
                           head_row * splits * head_dim;
    float max = -INFINITY;
    for (int i = threadIdx.x; i < used; i += NUM_THREADS) max = fmaxf(max, stats[2 * i]);
    max = block_max(max, scratch);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < used; i += NUM_THREADS) {
        const float weight = expf(stats[2 * i] - max);
        weights[i] = weight;
        sum = fmaf(weight, stats[2 * i + 1], sum);
    }
    const float inverse = 1.0f / block_sum(sum, scratch);  // its barriers publish the weights
    const int groups = head_dim < NUM_THREADS ? NUM_THREADS / head_dim : 1;
    for (int slot = threadIdx.x; slot < groups * head_dim; slot += NUM_THREADS) {
        const int d = slot % head_dim;
        float total = 0.0f;
#pragma unroll 8
        for (int i = slot / head_dim; i < used; i += groups) {
            total = fmaf(weights[i], outputs[(size_t)i * head_dim + d], total);
        }
        totals[slot] = total;
    }
    __syncthreads();
    for (int d = threadIdx.x; d < head_dim; d += NUM_THREADS) {
        float total = 0.0f;
        for (int g = 0; g < groups; ++g) total += totals[g * head_dim + d];
        out[head_row * head_dim + d] = from_float<T>(total * inverse);
    }
}

}  // namespace

#define ATTENTION_KERNEL(NAME, T, D, G, UNROLL, MIN_BLOCKS)                                    \
    extern "C" __global__ void __launch_bounds__(NUM_THREADS, MIN_BLOCKS) NAME(                \
        T* out, float* partials, const T* q, const T* k_cache, const T* v_cache,               \
        const uint32_t* block_tables, const uint32_t* context_lens,                            \
        const uint32_t* query_starts, int num_seqs, int rows, int table_width,                 \
        int block_size, int num_heads, int num_kv_heads, int partition_size, float scale) {    \
        const Params p{block_tables, context_lens, query_starts, num_seqs,                     \
                       rows,         table_width,  block_size,   num_heads,                    \
                       num_kv_heads, partition_size, scale};                                   \
        attend<T, D, G, UNROLL>(out, partials, q, k_cache, v_cache, p);                        \
    }

// Rows per thread and pass (UNROLL, each VPL 16-byte copies): four, two
// for the widest head groups, whose accumulators take most registers
// (bf16, d128: 64 to 197 registers, no spills); the ring keeps up to three
// passes in flight. Before the ring, eight rows in registers measured
// slower on an H200 than four (fewer resident blocks): 201 against 160 us
// at batch 64. The last argument keeps four blocks resident per SM (at
// most 128 registers a thread; two for the widest groups): without it a
// loop over partitions took the g4 kernel from 128 to 138 registers and
// three blocks, and decode attention at batch 8 to 128 from 28-310 to
// 41-407 us. Five blocks (96 registers, no spills) measured slower on an
// H100: decode steps at batch 64 and 128 took 1-5% longer on both shapes
// (docs/performance.md, "Decode attention at short context").
#define ATTENTION_GROUPS(DT, T, D)                                     \
    ATTENTION_KERNEL(paged_attention_##DT##_d##D##_g1, T, D, 1, 4, 4)  \
    ATTENTION_KERNEL(paged_attention_##DT##_d##D##_g2, T, D, 2, 4, 4)  \
    ATTENTION_KERNEL(paged_attention_##DT##_d##D##_g4, T, D, 4, 4, 4)  \
    ATTENTION_KERNEL(paged_attention_##DT##_d##D##_g8, T, D, 8, 2, 2)

#define ATTENTION_DTYPE(DT, T)                                                               \
    ATTENTION_GROUPS(DT, T, 16)                                                              \
    ATTENTION_GROUPS(DT, T, 32)                                                              \
    ATTENTION_GROUPS(DT, T, 64)                                                              \
    ATTENTION_GROUPS(DT, T, 128)                                                             \
    ATTENTION_GROUPS(DT, T, 256)                                                             \
    extern "C" __global__ void paged_attention_reduce_##DT(                                  \
        T* out, const float* partials, const uint32_t* context_lens, int rows, int num_heads, \
        int head_dim, int splits, int partition_size) {                                      \
        reduce<T>(out, partials, context_lens, rows, num_heads, head_dim, splits,            \
                  partition_size);                                                           \
    }

ATTENTION_DTYPE(f32, float)
ATTENTION_DTYPE(f16, __half)
ATTENTION_DTYPE(bf16, __nv_bfloat16)

// Writes new K or V rows into their cache slots, 16 bytes per thread:
// grid (tokens, ceil(row_vecs / blockDim.x)). Slots at or past num_slots
// (PADDING_SLOT among them) are skipped.
extern "C" __global__ void write_kv_vec16(
    uint4* cache, const uint4* rows, const uint32_t* slots, int row_vecs, uint32_t num_slots) {
    const uint32_t slot = slots[blockIdx.x];
    const int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (slot >= num_slots || i >= row_vecs) return;
    cache[(size_t)slot * row_vecs + i] = rows[(size_t)blockIdx.x * row_vecs + i];
}

// The same, one byte per thread, for rows that are not 16-byte multiples.
extern "C" __global__ void write_kv_bytes(
    uint8_t* cache, const uint8_t* rows, const uint32_t* slots, int row_bytes,
    uint32_t num_slots) {
    const uint32_t slot = slots[blockIdx.x];
    const int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (slot >= num_slots || i >= row_bytes) return;
    cache[(size_t)slot * row_bytes + i] = rows[(size_t)blockIdx.x * row_bytes + i];
}
