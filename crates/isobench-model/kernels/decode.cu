// Single-token kernels on CUDA: the projections of a step of one token
// (a decode step of one sequence), each streaming every weight row from
// memory once, with the ops around them fused in. Behind isobench-model's
// src/decode.rs; compiled by build.rs with nvcc (machine code and PTX).
//
// Why: a decode step of one sequence reads every weight once and does
// almost no arithmetic, so its time is the bytes it reads over memory
// bandwidth plus what the GPU spends between and around the big reads.
// cuBLAS's gemv-shaped gemms read the weights well under the bandwidth,
// and the small ops (norms, rotary embeddings, K/V writes, residual adds,
// SiLU) are a dozen more kernels per layer. Here a layer is four
// projection kernels and the attention:
//
//   qkv_rope    RMSNorm(h) -> q, k, v; RoPE on q and k; k and v written
//               into the token's cache slot; q out
//   residual    h += x W^T                         (o_proj, down_proj)
//   swiglu      RMSNorm(h) -> silu(x Wg^T) * (x Wu^T)
//   logits      RMSNorm(h[row]) W^T -> f32         (the LM head)
//
// Layouts (contiguous, row-major): weights [out, in] as in the
// checkpoint; activations [tokens, features]; the caches
// [blocks, block_size, kv_heads, D], i.e. [slots, kv_heads * D].
//
// One warp computes a pair of output features: a row and its partner,
// which the epilogue combines (RoPE rotates feature i with i + D/2;
// SwiGLU multiplies silu(gate j) with up j) or writes as they are
// (features 2j and 2j + 1). Its lanes walk the two weight rows with
// 16-byte loads, LOADS in flight per lane, each warp from its own
// starting offset (bypassing L1, which keeps the activations that every
// warp of a block reads), and reduce across the warp. RMSNorm needs
// sum(x^2) over the whole input row, which every warp reads anyway: it
// accumulates it alongside, so the norm costs no kernel and no pass of
// its own: y = (W (x * g)) * rsqrt(mean(x^2) + eps).
// Accumulation is f32; outputs are rounded where an unfused step rounds
// them. Launch shapes are fixed, and nothing reads host memory, allocates
// or synchronises: a decode step can be captured in a CUDA graph.
//
// Steps of several tokens run on candle's ops and cuBLAS: a version that
// streamed each row once for up to 8 tokens on the CUDA cores, and one on
// the tensor cores (mma.sync, 16 rows a unit, K split over a block's
// warps) for up to 64, were both slower than cuBLAS from two tokens on an
// H200 (docs/performance.md, "GPU decode steps").

#include "common.cuh"

namespace {

constexpr int WARPS = 8;   // warps per block
constexpr int THREADS = WARPS * 32;
// Blocks resident per SM (at most 64 registers a thread): 32 warps' loads
// in flight per SM. At three (the 72-90 registers the kernels take
// unbounded) the 8B batch-1 step took 4.76 ms instead of 4.43 on an H200,
// and in a stand-alone benchmark the spread walk of pair_dot gained
// nothing (docs/performance.md).
constexpr int MIN_BLOCKS = 4;

// x rounded to T and back, as an unfused step stores it.
template <typename T> __device__ __forceinline__ float round_to(float x) {
    return to_float(from_float<T>(x));
}

// A weight load: read once, so not kept in L1.
__device__ __forceinline__ uint4 load_stream(const void* p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

// What a projection reads: the token's activations x [k] and the RMSNorm
// weight, for the epilogues that norm their input (E::NORM; the others
// take a null `norm`).
template <typename T>
struct Input {
    const T* x;
    const T* norm;
    float eps;
    int k;
};

constexpr int LOADS = 8;  // 16-byte weight loads in flight per lane

// The dot products of x (normed: x * g) with the warp's two rows,
// reduced over the warp (every lane holds them), and the token's RMSNorm
// factor (1 without a norm).
struct PairSums {
    float first;
    float partner;
    float scale;
};

// 2 * U weight loads of batch `batch` (zeros past the rows' ends).
template <typename T, int U>
__device__ __forceinline__ void load_batch(
    uint4 (&raw)[2][U], const T* first, const T* partner, int batch, int vecs) {
    constexpr int V = 16 / sizeof(T);
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int i = batch * 32 * U + u * 32 + lane;
        raw[0][u] = i < vecs ? load_stream(first + (size_t)i * V) : make_uint4(0, 0, 0, 0);
        raw[1][u] = i < vecs ? load_stream(partner + (size_t)i * V) : make_uint4(0, 0, 0, 0);
    }
}

// The warp's sums for pair `pair`. It walks the rows in batches of 32 * U
// loads, starting at batch `pair * 5 + 3` (mod the batch count) and
// wrapping around. Started at their rows' first bytes, the warps of a
// kernel that fits in one wave (q/k/v, o_proj, down_proj) all read the
// same offsets of rows 8 KB or more apart at once, and an H200 served
// them at 2.7-3.3 TB/s; spread, at 2.9-3.8 (docs/performance.md, "Fourth
// session"). The first batch's loads are issued before `ready()`, which
// waits for the kernel before this one: weights are never written.
template <typename T, bool NORM, typename Ready>
__device__ __forceinline__ PairSums pair_dot(
    const T* first, const T* partner, const Input<T>& in, int pair, Ready ready) {
    constexpr int V = 16 / sizeof(T);  // elements per load
    constexpr int U = LOADS / 2;       // loads in flight per row
    const int lane = threadIdx.x % 32;
    const int vecs = in.k / V;
    const int batches = (vecs + 32 * U - 1) / (32 * U);
    const int start = (pair * 5 + 3) % batches;
    uint4 raw[2][U];
    load_batch<T, U>(raw, first, partner, start, vecs);
    ready();
    float a = 0.0f, b = 0.0f, ss = 0.0f;
    for (int walked = 0; walked < batches; ++walked) {
        const int batch = walked + start < batches ? walked + start : walked + start - batches;
        const int base = batch * 32 * U;
        if (walked > 0) load_batch<T, U>(raw, first, partner, batch, vecs);
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int i = base + u * 32 + lane;
            if (i >= vecs) break;
            float w0[V], w1[V], xf[V], gain[V];
            unpack<T>(raw[0][u], w0);
            unpack<T>(raw[1][u], w1);
            unpack<T>(__ldg(reinterpret_cast<const uint4*>(in.x) + i), xf);
            if (NORM) unpack<T>(__ldg(reinterpret_cast<const uint4*>(in.norm) + i), gain);
#pragma unroll
            for (int e = 0; e < V; ++e) {
                if (NORM) {
                    ss = fmaf(xf[e], xf[e], ss);
                    xf[e] *= gain[e];
                }
                a = fmaf(w0[e], xf[e], a);
                b = fmaf(w1[e], xf[e], b);
            }
        }
    }
    const float scale = NORM ? rsqrtf(warp_sum(ss) / (float)in.k + in.eps) : 1.0f;
    return PairSums{warp_sum(a), warp_sum(b), scale};
}

// ---------------------------------------------------------------------
// The epilogues: what a warp's pair becomes, given its index, the two
// sums and the norm factor. NORM says whether the input is normed: known
// at compile time, so that the residual kernels hold no norm state.

// q, k and v with RoPE: pairs (i, i + D/2) of one head of q, k or v
// (pairs run through the q heads, then k, then v). q to q_out, k and v to
// the token's cache slot (none for a slot past the cache: a padding row).
template <typename T>
struct QkvRope {
    static constexpr bool NORM = true;
    T* q_out;
    T* k_cache;
    T* v_cache;
    const T* wq;
    const T* wk;
    const T* wv;
    const T* bq;
    const T* bk;
    const T* bv;
    const T* cos;
    const T* sin;
    const uint32_t* positions;
    const uint32_t* slots;
    uint32_t num_slots;
    int hidden;
    int heads;
    int kv_heads;
    int d;

    __device__ __forceinline__ int pairs() const { return (heads + 2 * kv_heads) * (d / 2); }

    // Section (0 q, 1 k, 2 v) and feature index of pair `pair`.
    __device__ __forceinline__ void locate(int pair, int& section, int& feature) const {
        const int half = d / 2;
        const int q_pairs = heads * half;
        const int kv_pairs = kv_heads * half;
        section = pair < q_pairs ? 0 : pair < q_pairs + kv_pairs ? 1 : 2;
        const int local = pair - (section == 0 ? 0 : section == 1 ? q_pairs : q_pairs + kv_pairs);
        feature = (local / half) * d + local % half;
    }

    __device__ __forceinline__ void rows(int pair, const T*& first, const T*& partner) const {
        int section, feature;
        locate(pair, section, feature);
        const T* w = section == 0 ? wq : section == 1 ? wk : wv;
        first = w + (size_t)feature * hidden;
        partner = w + (size_t)(feature + d / 2) * hidden;
    }

    // What the epilogue reads besides the sums (bias, rotation, slot),
    // loaded before the weights stream so that its latency overlaps them.
    struct Pre {
        float bias_first, bias_partner, co, si;
        uint32_t slot;
    };

    __device__ __forceinline__ Pre prepare(int pair) const {
        int section, feature;
        locate(pair, section, feature);
        const int half = d / 2;
        const T* bias = section == 0 ? bq : section == 1 ? bk : bv;
        Pre pre{0.0f, 0.0f, 1.0f, 0.0f, 0};
        if (bias) {
            pre.bias_first = to_float(bias[feature]);
            pre.bias_partner = to_float(bias[feature + half]);
        }
        if (section < 2) {
            const size_t angle = (size_t)positions[0] * half + feature % d;
            pre.co = to_float(cos[angle]);
            pre.si = to_float(sin[angle]);
        }
        if (section > 0) pre.slot = slots[0];
        return pre;
    }

    __device__ __forceinline__ void apply(int pair, PairSums sums, const Pre& pre) const {
        int section, feature;
        locate(pair, section, feature);
        const int half = d / 2;
        // Round to T first, as the unfused step does before its RoPE.
        float a = round_to<T>(sums.first * sums.scale + pre.bias_first);
        float b = round_to<T>(sums.partner * sums.scale + pre.bias_partner);
        if (section < 2) {
            const float ra = a * pre.co - b * pre.si;
            b = b * pre.co + a * pre.si;
            a = ra;
        }
        T* out;
        if (section == 0) {
            out = q_out + feature;
        } else {
            if (pre.slot >= num_slots) return;  // a padding row writes nowhere
            out = (section == 1 ? k_cache : v_cache) + (size_t)pre.slot * kv_heads * d + feature;
        }
        out[0] = from_float<T>(a);
        out[half] = from_float<T>(b);
    }
};

// Features 2j and 2j + 1 of a projection with `out` outputs (an odd last
// pair computes its one feature twice).
__device__ __forceinline__ int feature_of(int pair, int r, int out) {
    return min(2 * pair + r, out - 1);
}

// The rows of pair `pair` of W [out, k], read as features 2j and 2j + 1.
template <typename T>
__device__ __forceinline__ void consecutive_rows(
    const T* w, int k, int out, int pair, const T*& first, const T*& partner) {
    first = w + (size_t)feature_of(pair, 0, out) * k;
    partner = w + (size_t)feature_of(pair, 1, out) * k;
}

// write(j, y) for the pair's features (once for an odd last one).
template <typename F>
__device__ __forceinline__ void each_feature(int pair, int out, float first, float partner, F write) {
    const int j = feature_of(pair, 0, out);
    const int j2 = feature_of(pair, 1, out);
    write(j, first);
    if (j2 != j) write(j2, partner);
}

// h[j] += (x W^T)[j] (+ bias[j]).
template <typename T>
struct Residual {
    static constexpr bool NORM = false;
    T* h;
    const T* w;
    const T* bias;
    int k;
    int out;

    __device__ __forceinline__ int pairs() const { return (out + 1) / 2; }

    __device__ __forceinline__ void rows(int pair, const T*& first, const T*& partner) const {
        consecutive_rows(w, k, out, pair, first, partner);
    }

    // The residual (and bias) of the pair's features, loaded before the
    // weights stream; each pair's h is read and written by its warp only.
    struct Pre {
        float h_first, h_partner, bias_first, bias_partner;
    };

    __device__ __forceinline__ Pre prepare(int pair) const {
        const int j = feature_of(pair, 0, out);
        const int j2 = feature_of(pair, 1, out);
        Pre pre{to_float(h[j]), to_float(h[j2]), 0.0f, 0.0f};
        if (bias) {
            pre.bias_first = to_float(bias[j]);
            pre.bias_partner = to_float(bias[j2]);
        }
        return pre;
    }

    // No norm: the sums are the projection, rounded to T, then added, as
    // an unfused step does.
    __device__ __forceinline__ void apply(int pair, PairSums sums, const Pre& pre) const {
        const float first = pre.h_first + round_to<T>(sums.first + pre.bias_first);
        const float partner = pre.h_partner + round_to<T>(sums.partner + pre.bias_partner);
        each_feature(pair, out, first, partner,
                     [&](int j, float y) { h[j] = from_float<T>(y); });
    }
};

// out[j] = silu(gate_j) * up_j, both from RMSNorm(h): pairs are
// (gate row j, up row j).
template <typename T>
struct Swiglu {
    static constexpr bool NORM = true;
    T* out;
    const T* w_gate;
    const T* w_up;
    const T* b_gate;
    const T* b_up;
    int hidden;
    int intermediate;

    __device__ __forceinline__ int pairs() const { return intermediate; }

    __device__ __forceinline__ void rows(int j, const T*& first, const T*& partner) const {
        first = w_gate + (size_t)j * hidden;
        partner = w_up + (size_t)j * hidden;
    }

    // The biases, loaded before the weights stream.
    struct Pre {
        float gate, up;
    };

    __device__ __forceinline__ Pre prepare(int j) const {
        return Pre{b_gate ? to_float(b_gate[j]) : 0.0f, b_up ? to_float(b_up[j]) : 0.0f};
    }

    __device__ __forceinline__ void apply(int j, PairSums sums, const Pre& pre) const {
        const float g = round_to<T>(sums.first * sums.scale + pre.gate);
        const float u = round_to<T>(sums.partner * sums.scale + pre.up);
        const float silu = round_to<T>(g / (1.0f + __expf(-g)));
        out[j] = from_float<T>(silu * u);
    }
};

// f32 logits[j] of the normed row. The product is rounded to T, as an
// unfused step's logits are before they become f32.
template <typename T>
struct Logits {
    static constexpr bool NORM = true;
    float* out;
    const T* w;
    int hidden;
    int vocab;

    __device__ __forceinline__ int pairs() const { return (vocab + 1) / 2; }

    __device__ __forceinline__ void rows(int pair, const T*& first, const T*& partner) const {
        consecutive_rows(w, hidden, vocab, pair, first, partner);
    }

    struct Pre {};

    __device__ __forceinline__ Pre prepare(int) const { return Pre{}; }

    __device__ __forceinline__ void apply(int pair, PairSums sums, const Pre&) const {
        each_feature(pair, vocab, sums.first * sums.scale, sums.partner * sums.scale,
                     [&](int j, float y) { out[j] = round_to<T>(y); });
    }
};

// One pair per warp; lane 0 applies the epilogue. The kernel issues its
// first weight loads, then waits for the kernel before it (programmatic
// dependent launch: kernels/common.cuh). It does not let the next one
// start early: started while a projection still runs, the next kernel's
// blocks take the SMs' free slots unevenly, and an H200 ran the 1B step
// 3-12% slower so (docs/performance.md, "Programmatic dependent launch").
// What the epilogue reads besides the sums is loaded right after the wait
// (`prepare`): loaded after the sums, it would add a memory latency to the
// end of every warp, and so of the kernel (all warps finish together).
template <typename T, typename E>
__device__ __forceinline__ void pair_kernel(const E& e, const Input<T>& in) {
    const int pair = blockIdx.x * WARPS + threadIdx.x / 32;
    if (pair >= e.pairs()) return;
    const T* first;
    const T* partner;
    e.rows(pair, first, partner);
    typename E::Pre pre;
    const PairSums sums = pair_dot<T, E::NORM>(first, partner, in, pair, [&] {
        wait_for_prerequisites();
        pre = e.prepare(pair);
    });
    if (threadIdx.x % 32 == 0) e.apply(pair, sums, pre);
}

}  // namespace

// The kernels, per dtype. Every one takes the inputs of its epilogue,
// then (x, norm, eps, k).
#define PROJECTION_KERNEL extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
#define INPUT_PARAMS(T) const T *x, const T *norm, float eps, int k
#define INPUT_ARGS {x, norm, eps, k}

#define DECODE_KERNELS(DT, T)                                                                  \
    PROJECTION_KERNEL qkv_rope_##DT(                                                           \
        T *q_out, T *k_cache, T *v_cache, const T *wq, const T *wk, const T *wv, const T *bq,  \
        const T *bk, const T *bv, const T *cos, const T *sin, const uint32_t *positions,        \
        const uint32_t *slots, uint32_t num_slots, int hidden, int heads, int kv_heads, int d, \
        INPUT_PARAMS(T)) {                                                                     \
        const QkvRope<T> e{q_out, k_cache,   v_cache,   wq,    wk,       wv,                   \
                           bq,    bk,        bv,        cos,   sin,      positions,            \
                           slots, num_slots, hidden,    heads, kv_heads, d};                   \
        pair_kernel<T>(e, Input<T> INPUT_ARGS);                                                \
    }                                                                                          \
    PROJECTION_KERNEL residual_##DT(                                                           \
        T *h, const T *w, const T *bias, int out, INPUT_PARAMS(T)) {                           \
        const Residual<T> e{h, w, bias, k, out};                                               \
        pair_kernel<T>(e, Input<T> INPUT_ARGS);                                                \
    }                                                                                          \
    PROJECTION_KERNEL swiglu_##DT(                                                             \
        T *out, const T *w_gate, const T *w_up, const T *b_gate, const T *b_up,                 \
        int intermediate, INPUT_PARAMS(T)) {                                                   \
        const Swiglu<T> e{out, w_gate, w_up, b_gate, b_up, k, intermediate};                    \
        pair_kernel<T>(e, Input<T> INPUT_ARGS);                                                \
    }                                                                                          \
    PROJECTION_KERNEL logits_##DT(                                                             \
        float *out, const T *w, int vocab, INPUT_PARAMS(T)) {                                  \
        const Logits<T> e{out, w, k, vocab};                                                   \
        pair_kernel<T>(e, Input<T> INPUT_ARGS);                                                \
    }

DECODE_KERNELS(f32, float)
DECODE_KERNELS(f16, __half)
DECODE_KERNELS(bf16, __nv_bfloat16)
