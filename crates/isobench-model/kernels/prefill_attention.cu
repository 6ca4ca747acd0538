// Attention of a step that carries prompt tokens, on tensor cores: what
// src/paged_attention/cuda.rs launches for bf16 and f16 caches of
// head_dim 64 or 128 when a step has more query rows than sequences (a
// prefill, or prompt chunks beside decodes). Same inputs and result as
// paged_attention_* in paged_attention.cu, which reads a row's visible
// context once per query row and KV head on the CUDA cores: for one
// 2,048-token prompt of the 8B shape that kernel took 3.9 ms a layer on
// an H200 (ncu), three times the layer's matrix products.
//
// Layouts as in paged_attention.cu:
//   cache    [num_blocks, block_size, num_kv_heads, D]  (keys or values)
//   q, out   [rows, num_heads, D]
//   block_tables [B, W], context_lens [B], query_starts [B + 1]  (u32)
//
// A thread block takes a tile of up to 64 / G consecutive query rows of
// one sequence and G query heads of one KV head: 64 query vectors, 16 per
// warp, each warp's 16 the A operand of mma.m16n8k16 (f32 accumulators).
// It walks the keys visible to the tile's last row in chunks of CHUNK
// tokens, whose K and V rows are copied from the paged cache into shared
// memory (cp.async, two stages: the next chunk loads while this one is
// computed). Per chunk each warp computes its 16 x CHUNK scores
// S = Q K^T, masks the keys after each vector's position, updates each
// vector's running max and sum (online softmax, base 2), and adds P V,
// with P rounded to T as the tensor cores take it. A key chunk wholly
// after a vector's position leaves its sums bit for bit as they were, and
// rows of two sequences never share a tile, so a row's result does not
// depend on what else the step holds.
//
// Tiles are numbered in sequence order, ceil(new tokens / tile rows) per
// sequence. The grid's x is ceil(rows / tile rows) + sequences, a bound
// that follows from shapes alone, so every replay of a CUDA graph
// launches the same grid; blocks past the last tile return at once.
// Nothing reads host memory, allocates or synchronises the device.

#include "common.cuh"

namespace {

constexpr int THREADS = 128;
constexpr int VECTORS = 64;  // query vectors (row, head) per block
constexpr int CHUNK = 32;    // keys per shared-memory stage
constexpr unsigned FULL = 0xffffffffu;

// The tensor-core product of T: d += a b for one 16 x 8 x 16 tile, and
// two floats packed as the operand's pair of T (lower index in the
// lower half).
template <typename T> struct Mma;

template <> struct Mma<__nv_bfloat16> {
    static __device__ __forceinline__ void run(
        float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&pair);
    }
};

template <> struct Mma<__half> {
    static __device__ __forceinline__ void run(
        float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __half2 pair = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&pair);
    }
};

// Four 8 x 8 matrices of 16-bit elements from shared memory, lane l
// giving the address of row l % 8 of matrix l / 8; `trans` transposes each.
template <bool TRANS>
__device__ __forceinline__ void load_matrices(uint32_t (&r)[4], const void* shared) {
    const uint32_t address = (uint32_t)__cvta_generic_to_shared(shared);
    if (TRANS) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(address));
    } else {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(address));
    }
}

__device__ __forceinline__ void commit_copies() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// Waits until at most N of this thread's committed groups of copies are
// still in flight.
template <int N> __device__ __forceinline__ void wait_copy_groups() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

struct Params {
    const uint32_t* block_tables;
    const uint32_t* context_lens;
    const uint32_t* query_starts;
    int num_seqs;
    int table_width;
    int block_size;
    int num_heads;
    int num_kv_heads;
    float scale;
};

// The tile of block `index`: (sequence, first row, rows), or sequence -1.
// Run by one warp: sequences 32 at a time, a prefix sum of their tiles.
template <int TILE_ROWS>
__device__ __forceinline__ void find_tile(const Params& p, int index, int* tile) {
    const int lane = threadIdx.x % 32;
    int before = 0;  // tiles of the sequences already scanned
    for (int first_seq = 0; first_seq < p.num_seqs && before <= index; first_seq += 32) {
        const int seq = first_seq + lane;
        const int new_tokens =
            seq < p.num_seqs ? (int)(p.query_starts[seq + 1] - p.query_starts[seq]) : 0;
        const int tiles = (new_tokens + TILE_ROWS - 1) / TILE_ROWS;
        int inclusive = tiles;
#pragma unroll
        for (int offset = 1; offset < 32; offset *= 2) {
            const int up = __shfl_up_sync(FULL, inclusive, offset);
            if (lane >= offset) inclusive += up;
        }
        const int first = before + inclusive - tiles;
        if (index >= first && index < first + tiles) {
            const int rows_before = (index - first) * TILE_ROWS;
            tile[0] = seq;
            tile[1] = (int)p.query_starts[seq] + rows_before;
            tile[2] = min(TILE_ROWS, new_tokens - rows_before);
        }
        before += __shfl_sync(FULL, inclusive, 31);
    }
}

template <typename T, int D, int G>
__device__ __forceinline__ void prefill_attend(
    T* __restrict__ out,
    const T* __restrict__ q,
    const T* __restrict__ k_cache,
    const T* __restrict__ v_cache,
    const Params& p) {
    constexpr int TILE_ROWS = VECTORS / G;
    constexpr int STRIDE = D + 8;  // a padded shared row: ldmatrix without bank conflicts
    constexpr int K_STEPS = D / 16;
    constexpr int D_TILES = D / 8;
    constexpr int S_TILES = CHUNK / 8;
    constexpr int VEC = 16 / sizeof(T);
    constexpr int ROW_PIECES = D / VEC;  // 16-byte pieces of a K/V row
    static_assert(D % 32 == 0 && VECTORS % G == 0 && sizeof(T) == 2, "shape");
    __shared__ __align__(16) T keys[2][CHUNK][STRIDE];
    __shared__ __align__(16) T values[2][CHUNK][STRIDE];
    __shared__ int tile[3];

    launch_dependents();
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (threadIdx.x == 0) tile[0] = -1;
    __syncthreads();
    if (warp == 0) find_tile<TILE_ROWS>(p, blockIdx.x, tile);
    __syncthreads();
    const int seq = tile[0];
    if (seq < 0) return;
    const int first_row = tile[1];
    const int tile_rows = tile[2];

    const int group = p.num_heads / p.num_kv_heads;
    const int head_chunks = (group + G - 1) / G;
    const int kv_head = blockIdx.y / head_chunks;
    const int first_in_group = (blockIdx.y % head_chunks) * G;
    const int first_head = kv_head * group + first_in_group;
    const int new_tokens = (int)(p.query_starts[seq + 1] - p.query_starts[seq]);
    // Context position of the tile's first row; keys up to its last row's.
    const int first_position = (int)p.context_lens[seq] - new_tokens +
                               (first_row - (int)p.query_starts[seq]);
    const int last_key = first_position + tile_rows - 1;
    const uint32_t* table = p.block_tables + (size_t)seq * p.table_width;

    // This thread's two vectors: rows g and g + 8 of its warp's A operand
    // (vector v = row * G + head within the tile).
    const int g = lane / 4;
    const int tig = lane % 4;
    int position[2];
    const T* query[2];
    T* output[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int vector = warp * 16 + g + 8 * i;
        const int row = vector / G;
        const int head = vector % G;
        const bool valid = row < tile_rows && first_in_group + head < group;
        const size_t offset = ((size_t)(first_row + row) * p.num_heads + first_head + head) * D;
        position[i] = valid ? first_position + row : -1;
        query[i] = valid ? q + offset : nullptr;
        output[i] = valid ? out + offset : nullptr;
    }
    int warp_last = max(position[0], position[1]);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
        warp_last = max(warp_last, __shfl_xor_sync(FULL, warp_last, offset));
    }

    // q and the step's K/V rows are the kernels before's output.
    wait_for_prerequisites();

    // The A operand: a[0] row g, columns 2 tig and 2 tig + 1 of the
    // 16-column step; a[1] row g + 8; a[2] and a[3] the same 8 columns on.
    uint32_t q_frags[K_STEPS][4];
#pragma unroll
    for (int step = 0; step < K_STEPS; ++step) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const int column = step * 16 + half * 8 + tig * 2;
                q_frags[step][i + 2 * half] =
                    query[i] ? *reinterpret_cast<const uint32_t*>(query[i] + column) : 0u;
            }
        }
    }

    // Copies chunk `chunk`'s K and V rows into `stage`; keys past the
    // tile's last are zeros (no NaN from an unwritten slot reaches P V).
    const auto load_chunk = [&](int chunk, int stage) {
        for (int i = threadIdx.x; i < CHUNK * ROW_PIECES; i += THREADS) {
            const int t = i / ROW_PIECES;
            const int piece = i % ROW_PIECES;
            const int key = chunk * CHUNK + t;
            T* k_shared = &keys[stage][t][piece * VEC];
            T* v_shared = &values[stage][t][piece * VEC];
            if (key <= last_key) {
                const size_t slot =
                    (size_t)table[key / p.block_size] * p.block_size + key % p.block_size;
                const size_t offset = (slot * p.num_kv_heads + kv_head) * D + piece * VEC;
                copy_async(k_shared, k_cache + offset);
                copy_async(v_shared, v_cache + offset);
            } else {
                *reinterpret_cast<uint4*>(k_shared) = make_uint4(0, 0, 0, 0);
                *reinterpret_cast<uint4*>(v_shared) = make_uint4(0, 0, 0, 0);
            }
        }
        commit_copies();
    };

    const float scale_log2 = p.scale * 1.4426950408889634f;
    float acc[D_TILES][4];
#pragma unroll
    for (int d = 0; d < D_TILES; ++d) acc[d][0] = acc[d][1] = acc[d][2] = acc[d][3] = 0.0f;
    float running_max[2] = {-INFINITY, -INFINITY};
    float sums[2] = {0.0f, 0.0f};  // this thread's part of each row's sum

    const int chunks = last_key / CHUNK + 1;
    load_chunk(0, 0);
    for (int chunk = 0; chunk < chunks; ++chunk) {
        const int stage = chunk & 1;
        if (chunk + 1 < chunks) {
            load_chunk(chunk + 1, stage ^ 1);
            wait_copy_groups<1>();
        } else {
            wait_copy_groups<0>();
        }
        __syncthreads();
        const int first_key = chunk * CHUNK;
        if (first_key <= warp_last) {
            // S = Q K^T: scores of 16 vectors x CHUNK keys, 8 keys a tile.
            float scores[S_TILES][4];
#pragma unroll
            for (int s = 0; s < S_TILES; ++s) {
                scores[s][0] = scores[s][1] = scores[s][2] = scores[s][3] = 0.0f;
#pragma unroll
                for (int step = 0; step < K_STEPS; step += 2) {
                    uint32_t b[4];
                    load_matrices<false>(
                        b, &keys[stage][s * 8 + lane % 8][step * 16 + (lane / 8) * 8]);
                    Mma<T>::run(scores[s], q_frags[step], b[0], b[1]);
                    Mma<T>::run(scores[s], q_frags[step + 1], b[2], b[3]);
                }
            }
            // Online softmax of rows g (i = 0) and g + 8 (i = 1).
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                float chunk_max = -INFINITY;
#pragma unroll
                for (int s = 0; s < S_TILES; ++s) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int key = first_key + s * 8 + tig * 2 + e;
                        float& x = scores[s][2 * i + e];
                        x = key <= position[i] ? x * scale_log2 : -INFINITY;
                        chunk_max = fmaxf(chunk_max, x);
                    }
                }
                chunk_max = fmaxf(chunk_max, __shfl_xor_sync(FULL, chunk_max, 1));
                chunk_max = fmaxf(chunk_max, __shfl_xor_sync(FULL, chunk_max, 2));
                const float new_max = fmaxf(running_max[i], chunk_max);
                // A row with nothing visible yet keeps zeros.
                const float base = new_max == -INFINITY ? 0.0f : new_max;
                const float rescale = exp2f(running_max[i] - base);
                running_max[i] = new_max;
                float sum = 0.0f;
#pragma unroll
                for (int s = 0; s < S_TILES; ++s) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        float& x = scores[s][2 * i + e];
                        x = exp2f(x - base);
                        sum += x;
                    }
                }
                sums[i] = sums[i] * rescale + sum;
#pragma unroll
                for (int d = 0; d < D_TILES; ++d) {
                    acc[d][2 * i] *= rescale;
                    acc[d][2 * i + 1] *= rescale;
                }
            }
            // acc += P V: P's 16 keys a step straight from the score tiles.
#pragma unroll
            for (int step = 0; step < CHUNK / 16; ++step) {
                const uint32_t p_frag[4] = {
                    Mma<T>::pack(scores[2 * step][0], scores[2 * step][1]),
                    Mma<T>::pack(scores[2 * step][2], scores[2 * step][3]),
                    Mma<T>::pack(scores[2 * step + 1][0], scores[2 * step + 1][1]),
                    Mma<T>::pack(scores[2 * step + 1][2], scores[2 * step + 1][3]),
                };
#pragma unroll
                for (int d = 0; d < D_TILES; d += 2) {
                    uint32_t b[4];
                    load_matrices<true>(
                        b,
                        &values[stage][step * 16 + lane % 8 + ((lane / 8) % 2) * 8]
                               [d * 8 + (lane / 16) * 8]);
                    Mma<T>::run(acc[d], p_frag, b[0], b[1]);
                    Mma<T>::run(acc[d + 1], p_frag, b[2], b[3]);
                }
            }
        }
        __syncthreads();  // the stage is loaded again two chunks on
    }

#pragma unroll
    for (int i = 0; i < 2; ++i) {
        float sum = sums[i];
        sum += __shfl_xor_sync(FULL, sum, 1);
        sum += __shfl_xor_sync(FULL, sum, 2);
        if (!output[i]) continue;
        const float inverse = 1.0f / sum;
#pragma unroll
        for (int d = 0; d < D_TILES; ++d) {
            *reinterpret_cast<uint32_t*>(output[i] + d * 8 + tig * 2) =
                Mma<T>::pack(acc[d][2 * i] * inverse, acc[d][2 * i + 1] * inverse);
        }
    }
}

}  // namespace

// The parameters of paged_attention_* (one launch path serves both);
// partials, rows and partition_size are not read here.
#define PREFILL_KERNEL(DT, T, D, G)                                                            \
    extern "C" __global__ void __launch_bounds__(THREADS) prefill_attention_##DT##_d##D##_g##G( \
        T* out, float* partials, const T* q, const T* k_cache, const T* v_cache,               \
        const uint32_t* block_tables, const uint32_t* context_lens,                            \
        const uint32_t* query_starts, int num_seqs, int rows, int table_width,                 \
        int block_size, int num_heads, int num_kv_heads, int partition_size, float scale) {    \
        const Params p{block_tables, context_lens, query_starts, num_seqs,  table_width,       \
                       block_size,   num_heads,    num_kv_heads, scale};                       \
        prefill_attend<T, D, G>(out, q, k_cache, v_cache, p);                                  \
    }

#define PREFILL_GROUPS(DT, T, D) \
    PREFILL_KERNEL(DT, T, D, 1)  \
    PREFILL_KERNEL(DT, T, D, 2)  \
    PREFILL_KERNEL(DT, T, D, 4)  \
    PREFILL_KERNEL(DT, T, D, 8)

PREFILL_GROUPS(bf16, __nv_bfloat16, 64)
PREFILL_GROUPS(bf16, __nv_bfloat16, 128)
PREFILL_GROUPS(f16, __half, 64)
PREFILL_GROUPS(f16, __half, 128)
