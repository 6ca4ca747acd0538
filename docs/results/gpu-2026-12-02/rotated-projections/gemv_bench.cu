// Microbenchmark: single-token projection kernels (warp per row pair) with
// different load pipelines, on the 8B and 1B layer shapes. nvcc -O3 -arch=sm_90.
#include <stdint.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <string>
#include <algorithm>
#include <cmath>

typedef __nv_bfloat16 T;
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s at %d: %s\n", #x, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)

constexpr int WARPS = 8, THREADS = 256;

__device__ __forceinline__ void unpack(uint4 raw, float* out) {
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[i]));
        out[2 * i] = f.x; out[2 * i + 1] = f.y;
    }
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ __forceinline__ uint4 load_stream(const void* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ void cp_async(void* s, const void* g) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(s);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(a), "l"(g));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

struct P { const T* w; const T* x; float* y; int pairs; int k; int mode; int half; };

__device__ __forceinline__ void rows_of(const P& p, int pair, const T*& a, const T*& b) {
    int r0, r1;
    if (p.mode == 0) { r0 = 2 * pair; r1 = r0 + 1; }
    else if (p.mode == 1) { r0 = pair; r1 = pair + p.pairs; }
    else { r0 = (pair / p.half) * 2 * p.half + pair % p.half; r1 = r0 + p.half; }
    a = p.w + (size_t)r0 * p.k; b = p.w + (size_t)r1 * p.k;
}

__device__ __forceinline__ void fma8(uint4 wa, uint4 wb, const T* x, int i, float& a, float& b) {
    float fa[8], fb[8], xf[8];
    unpack(wa, fa); unpack(wb, fb);
    unpack(__ldg(reinterpret_cast<const uint4*>(x) + i), xf);
#pragma unroll
    for (int e = 0; e < 8; ++e) { a = fmaf(fa[e], xf[e], a); b = fmaf(fb[e], xf[e], b); }
}

__device__ __forceinline__ void finish(const P& p, int pair, float a, float b) {
    a = warp_sum(a); b = warp_sum(b);
    if (threadIdx.x % 32 == 0) { p.y[2 * pair] = a; p.y[2 * pair + 1] = b; }
}

// V0: the committed design: U loads per row in flight, lockstep batches.
template <int U>
__global__ void __launch_bounds__(THREADS) v_lockstep(P p) {
    const int pair = blockIdx.x * WARPS + threadIdx.x / 32;
    if (pair >= p.pairs) return;
    const T *ra, *rb; rows_of(p, pair, ra, rb);
    const int lane = threadIdx.x % 32, vecs = p.k / 8;
    float a = 0, b = 0;
    for (int base = 0; base < vecs; base += 32 * U) {
        uint4 r[2][U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int i = base + u * 32 + lane;
            r[0][u] = i < vecs ? load_stream(ra + (size_t)i * 8) : make_uint4(0, 0, 0, 0);
            r[1][u] = i < vecs ? load_stream(rb + (size_t)i * 8) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int i = base + u * 32 + lane;
            if (i < vecs) fma8(r[0][u], r[1][u], p.x, i, a, b);
        }
    }
    finish(p, pair, a, b);
}

// V0r: lockstep, each pair starting its walk at a rotated batch (spreads
// the concurrent accesses of a single-wave kernel over the row offsets).
template <int U, int ROT>
__global__ void __launch_bounds__(THREADS) v_rot(P p) {
    const int pair = blockIdx.x * WARPS + threadIdx.x / 32;
    if (pair >= p.pairs) return;
    const T *ra, *rb; rows_of(p, pair, ra, rb);
    const int lane = threadIdx.x % 32, vecs = p.k / 8;
    const int step = 32 * U, batches = (vecs + step - 1) / step;
    const int start = (ROT == 1 ? pair : ROT == 2 ? blockIdx.x : pair * 5 + 3) % batches;
    float a = 0, b = 0;
    for (int jj = 0; jj < batches; ++jj) {
        int j = jj + start; if (j >= batches) j -= batches;
        const int base = j * step;
        uint4 r[2][U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int i = base + u * 32 + lane;
            r[0][u] = i < vecs ? load_stream(ra + (size_t)i * 8) : make_uint4(0, 0, 0, 0);
            r[1][u] = i < vecs ? load_stream(rb + (size_t)i * 8) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int i = base + u * 32 + lane;
            if (i < vecs) fma8(r[0][u], r[1][u], p.x, i, a, b);
        }
    }
    finish(p, pair, a, b);
}

// V1: register double buffer: the next batch is issued before the current is used.
template <int U>
__global__ void __launch_bounds__(THREADS, 3) v_double(P p) {
    const int pair = blockIdx.x * WARPS + threadIdx.x / 32;
    if (pair >= p.pairs) return;
    const T *ra, *rb; rows_of(p, pair, ra, rb);
    const int lane = threadIdx.x % 32, vecs = p.k / 8;
    float a = 0, b = 0;
    uint4 c[2][U], n[2][U];
    auto load = [&](uint4 (&r)[2][U], int base) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int i = base + u * 32 + lane;
            r[0][u] = i < vecs ? load_stream(ra + (size_t)i * 8) : make_uint4(0, 0, 0, 0);
            r[1][u] = i < vecs ? load_stream(rb + (size_t)i * 8) : make_uint4(0, 0, 0, 0);
        }
    };
    auto use = [&](uint4 (&r)[2][U], int base) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int i = base + u * 32 + lane;
            if (i < vecs) fma8(r[0][u], r[1][u], p.x, i, a, b);
        }
    };
    const int step = 32 * U;
    load(c, 0);
    for (int base = 0; base < vecs; base += 2 * step) {
        if (base + step < vecs) load(n, base + step);
        use(c, base);
        if (base + step >= vecs) break;
        if (base + 2 * step < vecs) load(c, base + 2 * step);
        use(n, base + step);
    }
    finish(p, pair, a, b);
}

// V2: cp.async ring in shared memory: S stages of U loads per row per lane;
// each lane reads back only its own copies.
template <int S, int U>
__global__ void __launch_bounds__(THREADS) v_ring(P p) {
    extern __shared__ uint4 ring[];  // [S][2][U][THREADS]
    const int pair = blockIdx.x * WARPS + threadIdx.x / 32;
    if (pair >= p.pairs) return;
    const T *ra, *rb; rows_of(p, pair, ra, rb);
    const int lane = threadIdx.x % 32, vecs = p.k / 8;
    const int step = 32 * U;
    const int batches = (vecs + step - 1) / step;
    auto slot = [&](int s, int r, int u) -> uint4* { return &ring[((s * 2 + r) * U + u) * THREADS + threadIdx.x]; };
    auto issue = [&](int j) {
        if (j < batches) {
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int i = j * step + u * 32 + lane;
                if (i < vecs) {
                    cp_async(slot(j % S, 0, u), ra + (size_t)i * 8);
                    cp_async(slot(j % S, 1, u), rb + (size_t)i * 8);
                }
            }
        }
        cp_commit();
    };
#pragma unroll
    for (int s = 0; s < S - 1; ++s) issue(s);
    float a = 0, b = 0;
    for (int j = 0; j < batches; ++j) {
        issue(j + S - 1);
        cp_wait<S - 1>();
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int i = j * step + u * 32 + lane;
            if (i < vecs) fma8(*slot(j % S, 0, u), *slot(j % S, 1, u), p.x, i, a, b);
        }
    }
    finish(p, pair, a, b);
}

__global__ void fill(T* w, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed; h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
        w[i] = __float2bfloat16(((h & 0xffff) / 65536.0f - 0.5f) * 0.1f);
    }
}

typedef void (*Kern)(P);
struct Variant { const char* name; Kern k; int smem; };
struct Shape { const char* name; int pairs; int k; int mode; int half; };

int main(int argc, char** argv) {
    std::vector<Variant> vs = {
        {"lockstep U4 (committed)", v_lockstep<4>, 0},
        {"lockstep U4 at 3/SM", v_lockstep<4>, 72 * 1024},
        {"rot U4 pair", v_rot<4, 1>, 0},
        {"rot U4 pair at 3/SM", v_rot<4, 1>, 72 * 1024},
        {"rot U4 block", v_rot<4, 2>, 0},
        {"rot U4 pair*5+3", v_rot<4, 3>, 0},
        {"rot U2 pair", v_rot<2, 1>, 0},
        {"rot U2 pair at 3/SM", v_rot<2, 1>, 72 * 1024},
        {"lockstep U8", v_lockstep<8>, 0},
        {"double U4", v_double<4>, 0},
        {"double U2", v_double<2>, 0},
        {"ring S2 U4", v_ring<2, 4>, 2 * 2 * 4 * THREADS * 16},
        {"ring S3 U4", v_ring<3, 4>, 3 * 2 * 4 * THREADS * 16},
        {"ring S4 U2", v_ring<4, 2>, 4 * 2 * 2 * THREADS * 16},
        {"ring S3 U2", v_ring<3, 2>, 3 * 2 * 2 * THREADS * 16},
        {"ring S6 U2", v_ring<6, 2>, 6 * 2 * 2 * THREADS * 16},
        {"ring S4 U1", v_ring<4, 1>, 4 * 2 * 1 * THREADS * 16},
        {"ring S8 U1", v_ring<8, 1>, 8 * 2 * 1 * THREADS * 16},
    };
    for (auto& v : vs) if (v.smem > 0) CK(cudaFuncSetAttribute(v.k, cudaFuncAttributeMaxDynamicSharedMemorySize, v.smem));
    for (auto& v : vs) {
        cudaFuncAttributes at; CK(cudaFuncGetAttributes(&at, v.k));
        int blocks; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, v.k, THREADS, v.smem));
        printf("variant %-24s regs %3d smem %6d blocks/SM %d\n", v.name, at.numRegs, v.smem, blocks);
    }
    // 8B: qkv (4096+2*1024 rows, heads of 128), o, swiglu, down; 1B: hidden 2048, d64, inter 8192.
    std::vector<std::vector<Shape>> models = {
        {{"8B qkv", 3072, 4096, 2, 64}, {"8B o", 2048, 4096, 0, 0}, {"8B swiglu", 14336, 4096, 1, 0}, {"8B down", 2048, 14336, 0, 0}},
        {{"1B qkv", 1536, 2048, 2, 32}, {"1B o", 1024, 2048, 0, 0}, {"1B swiglu", 8192, 2048, 1, 0}, {"1B down", 1024, 8192, 0, 0}},
    };
    const int layers[2] = {32, 16};
    float *y, *yref; CK(cudaMalloc(&y, 64 << 20)); CK(cudaMalloc(&yref, 64 << 20));
    T* x; CK(cudaMalloc(&x, 64 << 10)); fill<<<64, 256>>>(x, 32 << 10, 7);
    cudaStream_t st; CK(cudaStreamCreate(&st));
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    for (int m = 0; m < 2; ++m) {
        const int L = layers[m];
        // Weights of every layer, distinct (no L2 reuse across layers).
        std::vector<std::vector<T*>> w(4, std::vector<T*>(L));
        size_t layer_bytes = 0;
        for (int s = 0; s < 4; ++s) {
            const size_t n = (size_t)2 * models[m][s].pairs * models[m][s].k;
            layer_bytes += n * 2;
            for (int l = 0; l < L; ++l) { CK(cudaMalloc(&w[s][l], n * 2)); fill<<<1024, 256>>>(w[s][l], n, 1000 * s + l); }
        }
        CK(cudaDeviceSynchronize());
        printf("\n== model %d: %d layers, %.1f MB of projections per layer\n", m, L, layer_bytes / 1e6);
        for (auto& v : vs) {
            // Per-shape: every layer's copy once, back to back, 5 rounds; median round.
            printf("%-24s", v.name);
            double seq_total = 0;
            for (int s = 0; s < 4; ++s) {
                const Shape& sh = models[m][s];
                const int grid = (sh.pairs + WARPS - 1) / WARPS;
                // correctness against the committed kernel on layer 0
                P p0{w[s][0], x, yref, sh.pairs, sh.k, sh.mode, sh.half};
                v_lockstep<4><<<grid, THREADS, 0, st>>>(p0);
                P p1{w[s][0], x, y, sh.pairs, sh.k, sh.mode, sh.half};
                v.k<<<grid, THREADS, v.smem, st>>>(p1);
                CK(cudaStreamSynchronize(st));
                std::vector<float> a(2 * sh.pairs), b(2 * sh.pairs);
                CK(cudaMemcpy(a.data(), yref, a.size() * 4, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(b.data(), y, b.size() * 4, cudaMemcpyDeviceToHost));
                double err = 0; for (size_t i = 0; i < a.size(); ++i) err = fmax(err, fabs(a[i] - b[i]));
                std::vector<float> ms;
                for (int round = 0; round < 7; ++round) {
                    CK(cudaEventRecord(e0, st));
                    for (int l = 0; l < L; ++l) {
                        P pl{w[s][l], x, y, sh.pairs, sh.k, sh.mode, sh.half};
                        v.k<<<grid, THREADS, v.smem, st>>>(pl);
                    }
                    CK(cudaEventRecord(e1, st)); CK(cudaEventSynchronize(e1));
                    float t; CK(cudaEventElapsedTime(&t, e0, e1)); ms.push_back(t);
                }
                std::sort(ms.begin(), ms.end());
                const double us = ms[3] * 1e3 / L;
                const double bytes = 2.0 * sh.pairs * sh.k * 2;
                printf(" | %s %6.2f us %5.2f TB/s%s", sh.name + 3, us, bytes / us / 1e6, err > 1e-3 ? " WRONG" : "");
                seq_total += us;
            }
            // The layer sequence (qkv, o, swiglu, down) over every layer, in a CUDA graph.
            cudaGraph_t g; cudaGraphExec_t ge;
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
            for (int l = 0; l < L; ++l)
                for (int s = 0; s < 4; ++s) {
                    const Shape& sh = models[m][s];
                    P pl{w[s][l], x, y, sh.pairs, sh.k, sh.mode, sh.half};
                    v.k<<<(sh.pairs + WARPS - 1) / WARPS, THREADS, v.smem, st>>>(pl);
                }
            CK(cudaStreamEndCapture(st, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
            std::vector<float> ms;
            for (int round = 0; round < 9; ++round) {
                CK(cudaEventRecord(e0, st)); CK(cudaGraphLaunch(ge, st)); CK(cudaEventRecord(e1, st));
                CK(cudaEventSynchronize(e1)); float t; CK(cudaEventElapsedTime(&t, e0, e1)); ms.push_back(t);
            }
            std::sort(ms.begin(), ms.end());
            const double us = ms[4] * 1e3 / L;
            printf(" || sum %6.1f | graph layer %6.1f us %5.2f TB/s\n", seq_total, us, layer_bytes / us / 1e6);
            CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
        }
        for (auto& ws : w) for (auto* p : ws) CK(cudaFree(p));
    }
    return 0;
}
