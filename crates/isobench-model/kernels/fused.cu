// Three fusions of candle's elementwise ops for steps of several tokens,
// and the logits' widening to f32 (src/fused.rs says where they run):
//
//   silu_mul_DT:     out = silu(gate) * up, SwiGLU's product, one pass
//                    instead of candle's usilu and bmul (the SiLU is no
//                    longer rounded to DT before the product), reading
//                    gate and up as the two halves of each row of the
//                    merged gate/up projection's output;
//   add_rms_norm_DT: sum = x + residual (DT's own add, as candle's badd:
//                    the same bits), normed = RMSNorm(sum) * weight, one
//                    block a row, instead of badd and candle's rmsnorm;
//   rope_write_kv_DT: the merged q/k/v projection's output split into its
//                    three parts, RoPE on q and k (f32, rounded once, as
//                    the single-token kernels of decode.cu), q written
//                    out, k and v written into their cache slots, instead
//                    of two copies, two of candle's rope_thd and two
//                    write_kv launches;
//   to_f32_DT:       the LM head's logits widened to f32 (exact), 16 bytes
//                    read and 32 written a thread and turn, where
//                    candle's cast moved a value a thread.
//
// DT is bf16, f16 or f32. For silu_mul, add_rms_norm and to_f32 every pointer is
// 16-byte aligned and every length a multiple of the 16-byte vector (16 /
// sizeof(DT) values), which src/fused.rs checks before it launches.
// Launched with programmatic dependent launch: each waits for its
// predecessor before it reads.

#include "common.cuh"

namespace {

constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;

// 16 bytes of T from floats, each rounded once.
template <typename T> __device__ __forceinline__ uint4 pack(const float* in) {
    constexpr int VEC = 16 / sizeof(T);
    uint4 raw;
    T* out = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < VEC; ++i) out[i] = from_float<T>(in[i]);
    return raw;
}

// `vectors` 16-byte vectors of out, grid-strided: rows of `half`
// vectors, each from the row of gate_up ([rows, 2 * half] vectors) whose
// first half is gate and second half up.
template <typename T>
__device__ void silu_mul(const uint4* gate_up, uint4* out, uint32_t vectors, uint32_t half) {
    constexpr int VEC = 16 / sizeof(T);
    wait_for_prerequisites();
    for (uint32_t v = blockIdx.x * THREADS + threadIdx.x; v < vectors; v += gridDim.x * THREADS) {
        const size_t gate = (size_t)(v / half) * 2 * half + v % half;
        float g[VEC], u[VEC], product[VEC];
        unpack<T>(gate_up[gate], g);
        unpack<T>(gate_up[gate + half], u);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            // candle's silu, then the product, in f32.
            const float silu = g[i] / (1.0f + expf(-g[i]));
            product[i] = silu * u[i];
        }
        out[v] = pack<T>(product);
    }
}

// Row blockIdx.x of [rows, cols]: the sum first (kept in `sum`, reread by
// the same thread), then its mean square across the block, then the norm.
template <typename T>
__device__ void add_rms_norm(const uint4* x, const uint4* residual, const uint4* weight,
                             uint4* sum, uint4* normed, uint32_t cols, float eps) {
    constexpr int VEC = 16 / sizeof(T);
    __shared__ float partial[WARPS];
    const uint32_t vectors = cols / VEC;
    const size_t first = (size_t)blockIdx.x * vectors;
    wait_for_prerequisites();
    float squares = 0.0f;
    for (uint32_t v = threadIdx.x; v < vectors; v += THREADS) {
        const uint4 x_raw = x[first + v], residual_raw = residual[first + v];
        const T* a = reinterpret_cast<const T*>(&x_raw);
        const T* b = reinterpret_cast<const T*>(&residual_raw);
        uint4 sum_raw;
        T* s = reinterpret_cast<T*>(&sum_raw);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            // DT's own add, rounded once, as candle's badd.
            s[i] = a[i] + b[i];
            const float f = to_float(s[i]);
            squares += f * f;
        }
        sum[first + v] = sum_raw;
    }
    squares = warp_sum(squares);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = squares;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) total += partial[w];
    // candle's rmsnorm: scale * x * weight in f32, rounded once.
    const float scale = rsqrtf(total / cols + eps);
    for (uint32_t v = threadIdx.x; v < vectors; v += THREADS) {
        float s[VEC], w[VEC], out[VEC];
        unpack<T>(sum[first + v], s);
        unpack<T>(weight[v], w);
#pragma unroll
        for (int i = 0; i < VEC; ++i) out[i] = scale * s[i] * w[i];
        normed[first + v] = pack<T>(out);
    }
}

// One pair of features (i, i + d/2) of one head of one token a thread,
// grid-strided: qkv [tokens, (heads + 2 kv_heads) d] holds q's heads, then
// k's, then v's. q's and k's pairs are rotated by the token's angles (cos
// and sin [tokens, d/2]); q's go to q_out [tokens, heads, d], k's and v's
// to the token's slot of k_cache and v_cache ([slots, kv_heads, d]), none
// for a slot past the cache (a padding row).
template <typename T>
__device__ void rope_write_kv(const T* qkv, const T* cos, const T* sin, const uint32_t* slots,
                              T* q_out, T* k_cache, T* v_cache, uint32_t tokens, uint32_t heads,
                              uint32_t kv_heads, uint32_t d, uint32_t num_slots) {
    const uint32_t half = d / 2;
    const uint32_t token_heads = heads + 2 * kv_heads;
    const size_t pairs = (size_t)tokens * token_heads * half;
    wait_for_prerequisites();
    for (size_t p = (size_t)blockIdx.x * THREADS + threadIdx.x; p < pairs;
         p += (size_t)gridDim.x * THREADS) {
        const uint32_t token = p / ((size_t)token_heads * half);
        const uint32_t head = (p / half) % token_heads;
        const uint32_t i = p % half;
        const T* in = qkv + ((size_t)token * token_heads + head) * d;
        float a = to_float(in[i]);
        float b = to_float(in[i + half]);
        if (head < heads + kv_heads) {
            const float co = to_float(cos[(size_t)token * half + i]);
            const float si = to_float(sin[(size_t)token * half + i]);
            const float ra = a * co - b * si;
            b = b * co + a * si;
            a = ra;
        }
        T* out;
        if (head < heads) {
            out = q_out + ((size_t)token * heads + head) * d;
        } else {
            const uint32_t slot = slots[token];
            if (slot >= num_slots) continue;  // a padding row writes nowhere
            const uint32_t kv_head = head - heads;
            T* cache = kv_head < kv_heads ? k_cache : v_cache;
            out = cache + ((size_t)slot * kv_heads + kv_head % kv_heads) * d;
        }
        out[i] = from_float<T>(a);
        out[i + half] = from_float<T>(b);
    }
}

// `vectors` 16-byte vectors of `in`, each widened to VEC floats of `out`,
// grid-strided.
template <typename T>
__device__ void to_f32(const uint4* in, float4* out, uint32_t vectors) {
    constexpr int VEC = 16 / sizeof(T);
    wait_for_prerequisites();
    for (uint32_t v = blockIdx.x * THREADS + threadIdx.x; v < vectors; v += gridDim.x * THREADS) {
        float values[VEC];
        unpack<T>(in[v], values);
#pragma unroll
        for (int i = 0; i < VEC / 4; ++i) {
            out[(size_t)v * (VEC / 4) + i] =
                make_float4(values[4 * i], values[4 * i + 1], values[4 * i + 2], values[4 * i + 3]);
        }
    }
}

}  // namespace

#define FUSED(DT, T)                                                                            \
    extern "C" __global__ void __launch_bounds__(THREADS)                                       \
        silu_mul_##DT(const uint4* gate_up, uint4* out, uint32_t vectors, uint32_t half) {      \
        silu_mul<T>(gate_up, out, vectors, half);                                               \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(THREADS) add_rms_norm_##DT(                    \
        const uint4* x, const uint4* residual, const uint4* weight, uint4* sum, uint4* normed,  \
        uint32_t cols, float eps) {                                                             \
        add_rms_norm<T>(x, residual, weight, sum, normed, cols, eps);                           \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(THREADS) rope_write_kv_##DT(                   \
        const T* qkv, const T* cos, const T* sin, const uint32_t* slots, T* q_out, T* k_cache,  \
        T* v_cache, uint32_t tokens, uint32_t heads, uint32_t kv_heads, uint32_t d,             \
        uint32_t num_slots) {                                                                   \
        rope_write_kv<T>(qkv, cos, sin, slots, q_out, k_cache, v_cache, tokens, heads,         \
                         kv_heads, d, num_slots);                                               \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(THREADS)                                       \
        to_f32_##DT(const uint4* in, float4* out, uint32_t vectors) {                           \
        to_f32<T>(in, out, vectors);                                                            \
    }

FUSED(bf16, __nv_bfloat16)
FUSED(f16, __half)
FUSED(f32, float)
