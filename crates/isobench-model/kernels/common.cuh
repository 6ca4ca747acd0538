// Helpers shared by the CUDA kernels of isobench-model (paged_attention.cu,
// decode.cu, prefill_attention.cu, sample.cu): conversions between the cache/weight
// types and f32, the waits of programmatic dependent launch, an
// asynchronous copy to shared memory and a warp-wide sum. Included by
// each; nvcc finds it beside them.

#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace {

template <typename T> __device__ __forceinline__ float to_float(T x);
template <> __device__ __forceinline__ float to_float(float x) { return x; }
template <> __device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_float(__nv_bfloat16 x) {
    return __bfloat162float(x);
}

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float(float x) { return x; }
template <> __device__ __forceinline__ __half from_float(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float(float x) {
    return __float2bfloat16_rn(x);
}

// 16 bytes of T as floats.
template <typename T> __device__ __forceinline__ void unpack(uint4 raw, float* out);
template <> __device__ __forceinline__ void unpack<float>(uint4 raw, float* out) {
    out[0] = __uint_as_float(raw.x);
    out[1] = __uint_as_float(raw.y);
    out[2] = __uint_as_float(raw.z);
    out[3] = __uint_as_float(raw.w);
}
template <> __device__ __forceinline__ void unpack<__half>(uint4 raw, float* out) {
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float2 f = __half22float2(*reinterpret_cast<const __half2*>(&words[i]));
        out[2 * i] = f.x;
        out[2 * i + 1] = f.y;
    }
}
template <> __device__ __forceinline__ void unpack<__nv_bfloat16>(uint4 raw, float* out) {
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[i]));
        out[2 * i] = f.x;
        out[2 * i + 1] = f.y;
    }
}

// Programmatic dependent launch (sm_90 and later; nothing before): a
// kernel that src/kernels.rs's `Launch` starts may run while the kernel
// before it drains. launch_dependents() lets the next such kernel start
// once every block of this one has called it (or exited);
// wait_for_prerequisites() waits until the kernel before has finished and
// its writes are visible. Every such kernel calls it before it reads what
// another kernel writes (activations, the cache, scratch) and before it
// writes anything; before it, only weights and the step's metadata.
__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void wait_for_prerequisites() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// 16 bytes from global to shared memory without passing through
// registers (cp.async; sm_80 and later).
__device__ __forceinline__ void copy_async(void* shared, const void* global) {
    const uint32_t address = (uint32_t)__cvta_generic_to_shared(shared);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(address), "l"(global));
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
        x += __shfl_xor_sync(0xffffffffu, x, offset);
    }
    return x;
}

}  // namespace
