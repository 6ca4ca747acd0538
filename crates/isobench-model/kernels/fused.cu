// Two fusions of candle's elementwise ops for steps of several tokens
// (src/fused.rs says where they run):
//
//   silu_mul_DT:     out = silu(gate) * up, SwiGLU's product, one pass
//                    instead of candle's usilu and bmul (the SiLU is no
//                    longer rounded to DT before the product);
//   add_rms_norm_DT: sum = x + residual (DT's own add, as candle's badd:
//                    the same bits), normed = RMSNorm(sum) * weight, one
//                    block a row, instead of badd and candle's rmsnorm.
//
// DT is bf16, f16 or f32; every pointer is 16-byte aligned and every
// length a multiple of the 16-byte vector (16 / sizeof(DT) values), which
// src/fused.rs checks before it launches. Launched with programmatic
// dependent launch: each waits for its predecessor before it reads.

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

// `vectors` 16-byte vectors of gate and up, grid-strided.
template <typename T>
__device__ void silu_mul(const uint4* gate, const uint4* up, uint4* out, uint32_t vectors) {
    constexpr int VEC = 16 / sizeof(T);
    wait_for_prerequisites();
    for (uint32_t v = blockIdx.x * THREADS + threadIdx.x; v < vectors; v += gridDim.x * THREADS) {
        float g[VEC], u[VEC], product[VEC];
        unpack<T>(gate[v], g);
        unpack<T>(up[v], u);
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

}  // namespace

#define FUSED(DT, T)                                                                            \
    extern "C" __global__ void __launch_bounds__(THREADS)                                       \
        silu_mul_##DT(const uint4* gate, const uint4* up, uint4* out, uint32_t vectors) {       \
        silu_mul<T>(gate, up, out, vectors);                                                    \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(THREADS) add_rms_norm_##DT(                    \
        const uint4* x, const uint4* residual, const uint4* weight, uint4* sum, uint4* normed,  \
        uint32_t cols, float eps) {                                                             \
        add_rms_norm<T>(x, residual, weight, sum, normed, cols, eps);                           \
    }

FUSED(bf16, __nv_bfloat16)
FUSED(f16, __half)
FUSED(f32, float)
