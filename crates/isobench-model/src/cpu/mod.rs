//! The CPU step: the whole Llama forward pass on this crate's own kernels,
//! over f32 activations in buffers that live as long as the model.
//!
//! candle's general CPU ops cost a step more than its arithmetic: a
//! projection of one token through gemm reads the weights at a third of the
//! memory bandwidth, each op allocates its output, and each parallel op
//! hands work to a thread pool. Here instead:
//!
//! - `matmul` multiplies activations with row-major weights (f32, f16 or
//!   bf16, widened as they are loaded, f32 accumulation) in register tiles,
//!   reading each weight once per step for up to 64 rows, with AVX-512 or
//!   AVX2 + FMA tiles chosen at run time (`x86`), or portable code the
//!   compiler vectorises for the build's baseline (NEON on aarch64);
//! - `projection` fuses q/k/v and gate/up into one pass each;
//!   `quantized` runs a GGUF file's quantized weights with candle's block
//!   types and dot products, on the same team;
//! - `ops` holds the per-token RMSNorm, rotary embedding, SwiGLU and
//!   residual adds, on the calling thread, and a vectorisable `exp`;
//! - `team` is the thread pool: one persistent team whose workers spin
//!   between the step's parallel sections (four projections and one
//!   attention per layer) instead of being woken for each, and take work
//!   from a shared cursor, so a descheduled worker delays nobody;
//! - `network` runs the layers over a `Workspace` of buffers that grow to
//!   the largest step seen and are reused, so a step allocates only its
//!   logits and a few small vectors of step metadata.
//!
//! `attention` is the step's paged attention: runs of new tokens (prefill
//! chunks) in query tiles that read each cache block once per tile, with
//! an online softmax; decode tokens on the per-token kernel of
//! `crate::paged_attention::cpu`; both on the team. The candle graph (`crate::llama::Network`) stays the
//! GPU path and the CPU's plain path (`ModelOptions::own_kernels` off), which
//! the tests compare this one with.

mod attention;
mod matmul;
mod network;
mod ops;
mod projection;
mod quantized;
mod team;
#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(test)]
mod tests;

pub(crate) use matmul::Matrix;
pub(crate) use network::{CpuLayer, CpuNetwork, Shapes};
pub(crate) use projection::{Projection, Weight};

/// The instruction sets the kernels are compiled for, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Isa {
    /// AVX-512 F, BW and VL with FMA: 16 floats per instruction.
    Avx512,
    /// AVX2, FMA and F16C: 8 floats per instruction.
    Avx2,
    /// Whatever the build targets (SSE2 on x86-64, NEON on aarch64).
    Portable,
}

impl Isa {
    /// The best this CPU runs.
    pub(crate) fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx512f") && has!("avx512bw") && has!("avx512vl") && has!("fma") {
                return Isa::Avx512;
            }
            if has!("avx2") && has!("fma") && has!("f16c") {
                return Isa::Avx2;
            }
        }
        Isa::Portable
    }

    /// Every ISA this CPU runs, for tests.
    #[cfg(test)]
    pub(crate) fn available() -> Vec<Self> {
        let mut all = vec![Isa::Portable];
        if Self::detect() != Isa::Portable {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
                && std::arch::is_x86_feature_detected!("f16c")
            {
                all.push(Isa::Avx2);
            }
            if Self::detect() == Isa::Avx512 {
                all.push(Isa::Avx512);
            }
        }
        all
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512",
            Isa::Avx2 => "avx2+fma",
            Isa::Portable => "portable",
        }
    }
}
