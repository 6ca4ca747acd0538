//! GGUF files: models/tiny-llama's seeded weights written by
//! `export_gguf` and read back through `ModelFolder::open`, against the
//! folder itself; and the errors for files that are not usable.

mod common;

use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{self, Content, Value};
use common::{Pool, Seq, load, relative_error, repo_path, step};
use isobench_model::{CausalLm, GgufType, ModelFolder, argmax, export_gguf};

const BLOCK_SIZE: usize = 4;
const NEW_TOKENS: usize = 12;

fn tiny() -> ModelFolder {
    ModelFolder::open(repo_path("models/tiny-llama")).expect("tiny-llama opens")
}

fn exported(dir: &Path, ty: GgufType) -> PathBuf {
    let path = dir.join(format!("tiny-{ty:?}.gguf"));
    export_gguf(&tiny(), &path, ty).expect("export");
    path
}

/// Greedy continuation of `prompt` and every step's logits.
fn greedy(model: &mut dyn CausalLm, prompt: &[u32]) -> (Vec<u32>, Vec<Vec<f32>>) {
    let blocks = (prompt.len() + NEW_TOKENS).div_ceil(BLOCK_SIZE) + 1;
    let mut pool = Pool::new(model, blocks, BLOCK_SIZE);
    let mut seq = Seq::new(prompt.to_vec());
    let mut new = prompt.len();
    let (mut tokens, mut rows) = (Vec::new(), Vec::new());
    for _ in 0..NEW_TOKENS {
        let row = step(model, &mut pool, &mut [(&mut seq, new)]).remove(0);
        let next = argmax(&row);
        tokens.push(next);
        rows.push(row);
        seq.tokens.push(next);
        new = 1;
    }
    (tokens, rows)
}

#[test]
fn an_f32_file_generates_the_folders_greedy_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let path = exported(dir.path(), GgufType::F32);
    let (folder, file) = (
        tiny(),
        ModelFolder::open(&path).expect("the GGUF file opens"),
    );
    assert!(file.is_gguf());
    assert_eq!(file.name(), "tiny-F32");
    let (a, b) = (folder.config(), file.config());
    assert_eq!(
        (
            a.vocab_size,
            a.hidden_size,
            a.intermediate_size,
            a.num_hidden_layers
        ),
        (
            b.vocab_size,
            b.hidden_size,
            b.intermediate_size,
            b.num_hidden_layers
        )
    );
    assert_eq!(
        (a.num_attention_heads, a.num_key_value_heads, a.head_dim),
        (b.num_attention_heads, b.num_key_value_heads, b.head_dim)
    );
    assert_eq!(a.rope_theta, b.rope_theta);
    assert_eq!(a.tie_word_embeddings, b.tie_word_embeddings);
    // The tokenizer rebuilt from the metadata encodes and decodes alike.
    let text = "The quick brown fox, déjà vu: 1234 <|eot_id|>";
    let (ta, tb) = (folder.tokenizer(), file.tokenizer());
    assert_eq!(
        ta.encode(text, true).unwrap(),
        tb.encode(text, true).unwrap()
    );
    assert_eq!(
        ta.encode(text, false).unwrap(),
        tb.encode(text, false).unwrap()
    );
    assert_eq!(ta.eos_token_ids(), tb.eos_token_ids());
    assert_eq!(ta.bos_token_id(), tb.bos_token_id());
    assert_eq!(ta.chat_template(), tb.chat_template());
    let ids = ta.encode(text, true).unwrap();
    assert_eq!(
        ta.decode(&ids, false).unwrap(),
        tb.decode(&ids, false).unwrap()
    );

    let prompt = ta.encode("Once upon a time", true).unwrap();
    let (want, want_rows) = greedy(load(&folder, None).as_mut(), &prompt);
    let (got, got_rows) = greedy(load(&file, None).as_mut(), &prompt);
    assert_eq!(got, want, "greedy tokens from the GGUF file");
    for (g, w) in got_rows.iter().zip(&want_rows) {
        assert!(relative_error(g, w) < 1e-5);
    }
}

#[test]
fn f16_and_q8_0_files_load_and_stay_close_to_the_folder() {
    let dir = tempfile::tempdir().unwrap();
    let folder = tiny();
    let prompt = folder.tokenizer().encode("Hello there", true).unwrap();
    let (_, reference) = greedy(load(&folder, None).as_mut(), &prompt);
    for (ty, tolerance) in [(GgufType::F16, 0.01), (GgufType::Q8_0, 0.05)] {
        let file = ModelFolder::open(exported(dir.path(), ty)).expect("opens");
        let mut model = load(&file, None);
        // Teacher-forced on the reference's tokens: the same contexts.
        let (tokens, rows) = greedy(model.as_mut(), &prompt);
        assert_eq!(tokens.len(), NEW_TOKENS);
        let error = relative_error(&rows[0], &reference[0]);
        assert!(error < tolerance, "{ty:?}: first logits off by {error}");
        assert!(rows.iter().flatten().all(|v| v.is_finite()), "{ty:?}");
    }
}

#[test]
fn a_q4_k_file_with_whole_blocks_loads_and_generates() {
    // tiny-llama's rows (64, 176 values) are shorter than a K-quant block
    // (256): widen the model so every matrix but one quantizes.
    let dir = tempfile::tempdir().unwrap();
    let folder_dir = dir.path().join("wide");
    std::fs::create_dir(&folder_dir).unwrap();
    let source = repo_path("models/tiny-llama");
    for name in [
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    ] {
        std::fs::copy(source.join(name), folder_dir.join(name)).unwrap();
    }
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(source.join("config.json")).unwrap())
            .unwrap();
    config["hidden_size"] = 256.into();
    config["intermediate_size"] = 512.into();
    config["head_dim"] = 64.into();
    std::fs::write(folder_dir.join("config.json"), config.to_string()).unwrap();
    let folder = ModelFolder::open(&folder_dir).unwrap();
    let path = dir.path().join("wide-q4k.gguf");
    let written = export_gguf(&folder, &path, GgufType::Q4K).unwrap();
    assert!(written.fallbacks.is_empty(), "{:?}", written.fallbacks);
    let file = ModelFolder::open(&path).unwrap();
    let prompt = folder.tokenizer().encode("Hello there", true).unwrap();
    let (_, reference) = greedy(load(&folder, None).as_mut(), &prompt);
    let (tokens, rows) = greedy(load(&file, None).as_mut(), &prompt);
    assert_eq!(tokens.len(), NEW_TOKENS);
    let error = relative_error(&rows[0], &reference[0]);
    assert!(error < 0.25, "Q4_K first logits off by {error}");
}

/// A copy of `path` with `edit` applied to its metadata.
fn rewritten(path: &Path, out: &Path, edit: impl FnOnce(&mut Vec<(String, Value)>)) {
    let mut file = std::fs::File::open(path).unwrap();
    let content = Content::read(&mut file).unwrap();
    let mut metadata: Vec<(String, Value)> = content.metadata.clone().into_iter().collect();
    edit(&mut metadata);
    let names: Vec<String> = content.tensor_infos.keys().cloned().collect();
    let tensors: Vec<_> = names
        .iter()
        .map(|n| {
            content
                .tensor(&mut file, n, &candle_core::Device::Cpu)
                .unwrap()
        })
        .collect();
    let meta: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let refs: Vec<(&str, &_)> = names.iter().map(String::as_str).zip(&tensors).collect();
    let mut out = std::fs::File::create(out).unwrap();
    gguf_file::write(&mut out, &meta, &refs).unwrap();
}

#[test]
fn unusable_files_are_errors_that_name_the_file_and_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let good = exported(dir.path(), GgufType::F32);
    let bytes = std::fs::read(&good).unwrap();

    let truncated = dir.path().join("truncated.gguf");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let err = ModelFolder::open(&truncated).unwrap_err().to_string();
    assert!(
        err.contains("truncated.gguf") && err.contains("truncated"),
        "{err}"
    );

    let header_only = dir.path().join("header.gguf");
    std::fs::write(&header_only, &bytes[..100]).unwrap();
    let err = ModelFolder::open(&header_only).unwrap_err().to_string();
    assert!(
        err.contains("header.gguf") && err.contains("not a readable GGUF file"),
        "{err}"
    );

    let not_gguf = dir.path().join("text.gguf");
    std::fs::write(&not_gguf, "hello, not a model").unwrap();
    let err = ModelFolder::open(&not_gguf).unwrap_err().to_string();
    assert!(
        err.contains("text.gguf") && err.contains("not a readable GGUF file"),
        "{err}"
    );

    let spm = dir.path().join("spm.gguf");
    rewritten(&good, &spm, |meta| {
        for (key, value) in meta.iter_mut() {
            if key == "tokenizer.ggml.model" {
                *value = Value::String("llama".into());
            }
        }
    });
    let err = ModelFolder::open(&spm).unwrap_err().to_string();
    assert!(
        err.contains("spm.gguf") && err.contains("tokenizer.ggml.model") && err.contains("gpt2"),
        "{err}"
    );

    let no_shape = dir.path().join("no-shape.gguf");
    rewritten(&good, &no_shape, |meta| {
        meta.retain(|(key, _)| key != "llama.embedding_length")
    });
    let err = ModelFolder::open(&no_shape).unwrap_err().to_string();
    assert!(
        err.contains("llama.embedding_length") && err.contains("missing"),
        "{err}"
    );

    let other_arch = dir.path().join("gpt.gguf");
    rewritten(&good, &other_arch, |meta| {
        for (key, value) in meta.iter_mut() {
            if key == "general.architecture" {
                *value = Value::String("gptneox".into());
            }
        }
    });
    let err = ModelFolder::open(&other_arch).unwrap_err().to_string();
    assert!(
        err.contains("general.architecture") && err.contains("gptneox"),
        "{err}"
    );
}
