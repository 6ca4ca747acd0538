//! With the `cuda` feature, compiles each of kernels/*.cu (which include
//! kernels/common.cuh) to PTX with nvcc
//! (`NVCC`, else `nvcc` on PATH) for `sm_$CUDA_COMPUTE_CAP` (default 90),
//! into `$OUT_DIR/NAME.ptx`, which the Rust side embeds
//! (src/paged_attention/cuda.rs, src/decode.rs). Without the feature it
//! does nothing: CPU builds and CI need no CUDA toolkit.

use std::path::PathBuf;
use std::process::Command;

const KERNELS: [&str; 2] = ["paged_attention", "decode"];

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
                "--ptx",
                "-O3",
                "-std=c++17",
                &format!("-arch=sm_{cap}"),
                "-o",
            ])
            .arg(out_dir.join(format!("{kernel}.ptx")))
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
