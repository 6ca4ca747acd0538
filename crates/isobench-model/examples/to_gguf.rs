//! Writes a model folder as a GGUF file llama.cpp loads (see the model
//! crate's `export_gguf`), for scripts/compare-llama-cpp.sh.
//!
//! ```text
//! cargo run --release --example to_gguf -p isobench-model -- FOLDER OUT.gguf TYPE
//!   TYPE: f32, f16, q8_0, q4_k or q6_k
//! ```

use std::process::ExitCode;

use isobench_model::{GgufType, ModelFolder, export_gguf};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [folder, out, ty] = args.as_slice() else {
        eprintln!(
            "usage: to_gguf FOLDER OUT.gguf TYPE (TYPE: {})",
            GgufType::ACCEPTED
        );
        return ExitCode::from(2);
    };
    let Some(ty) = GgufType::parse(ty) else {
        eprintln!("to_gguf: type `{ty}` is not one of {}", GgufType::ACCEPTED);
        return ExitCode::from(2);
    };
    let result = ModelFolder::open(folder).and_then(|f| export_gguf(&f, out.as_ref(), ty));
    match result {
        Ok(written) => {
            println!("{out}: {} tensors as {ty:?}", written.tensors);
            if !written.fallbacks.is_empty() {
                println!(
                    "in f16 (rows not whole {ty:?} blocks): {}",
                    written.fallbacks.join(", ")
                );
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("to_gguf: {err}");
            ExitCode::FAILURE
        }
    }
}
