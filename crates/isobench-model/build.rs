//! With the `cuda` feature, compiles each of kernels/*.cu (which include
//! kernels/common.cuh) with nvcc (`NVCC`, else `nvcc` on PATH) into a
//! fatbin, `$OUT_DIR/NAME.fatbin`: machine code for `sm_$CUDA_COMPUTE_CAP`
//! (default 90) and the PTX, which a newer GPU compiles when it loads
//! it. The Rust side embeds it (src/kernels.rs). Machine code, because
//! a driver given PTX compiles it at the module's first load: on an H200
//! with an empty compile cache the 1B shape's first steps took 28 s with
//! the kernels as PTX and 13-16 s as fatbins, what remains being candle's
//! own PTX (docs/performance.md).
//! Without the feature this does nothing: CPU builds and CI need no CUDA
//! toolkit.

use std::path::PathBuf;
use std::process::Command;

const KERNELS: [&str; 6] = [
    "paged_attention",
    "prefill_attention",
    "decode",
    "fused",
    "argmax",
    "sample",
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    println!("cargo:rerun-if-env-changed=NVCC");
    println!("cargo:rerun-if-env-changed=CUDA_COMPUTE_CAP");
    let nvcc = std::env::var("NVCC").unwrap_or_else(|_| "nvcc".to_string());
    let cap = std::env::var("CUDA_COMPUTE_CAP").unwrap_or_else(|_| "90".to_string());
    if cap.is_empty() || !cap.chars().all(|c| c.is_ascii_digit()) {
        panic!("CUDA_COMPUTE_CAP must be digits like 90 (for sm_90), not {cap:?}");
    }
    println!("cargo:rerun-if-changed=kernels/common.cuh");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    for kernel in KERNELS {
        let source = format!("kernels/{kernel}.cu");
        println!("cargo:rerun-if-changed={source}");
        let status = Command::new(&nvcc)
            .args([
                "--fatbin",
                "-O3",
                "-std=c++17",
                &format!("-gencode=arch=compute_{cap},code=[sm_{cap},compute_{cap}]"),
                "-o",
            ])
            .arg(out_dir.join(format!("{kernel}.fatbin")))
            .arg(&source)
            .status()
            .unwrap_or_else(|err| {
                panic!(
                    "cannot run {nvcc} for the cuda feature ({err}): install the CUDA compiler \
                     (see docs/gpu.md) or set NVCC to its path"
                )
            });
        if !status.success() {
            panic!("{nvcc} failed to compile {source} ({status})");
        }
    }
}
