//! Opening model folders: sharded weights, and the errors a user gets for a
//! broken folder (each names the file and what was expected).

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::{fixture_path, load, recompute};
use isobench_model::{Device, ModelError, ModelFolder, Tensor, load_model};

/// A copy of the Llama fixture folder to break.
fn llama_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture_path("llama")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    dir
}

fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(path, config.to_string()).unwrap();
}

fn open_and_load(dir: &Path) -> Result<(), ModelError> {
    let folder = ModelFolder::open(dir)?;
    load_model(&folder, &Device::Cpu, None).map(drop)
}

fn fixture_tensors(dir: &Path) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(dir.join("model.safetensors"), &Device::Cpu).unwrap()
}

#[test]
fn sharded_weights_with_an_index_load_like_one_file() {
    let dir = llama_copy();
    let tensors = fixture_tensors(dir.path());
    let mut names: Vec<&String> = tensors.keys().collect();
    names.sort();
    let (first, second) = names.split_at(names.len() / 2);
    let mut weight_map = serde_json::Map::new();
    for (shard, names) in [
        ("model-00001-of-00002.safetensors", first),
        ("model-00002-of-00002.safetensors", second),
    ] {
        let part: HashMap<&String, Tensor> =
            names.iter().map(|&n| (n, tensors[n].clone())).collect();
        candle_core::safetensors::save(&part, dir.path().join(shard)).unwrap();
        for name in names {
            weight_map.insert(name.to_string(), shard.into());
        }
    }
    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    let index = serde_json::json!({"metadata": {}, "weight_map": weight_map});
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();

    let sharded = ModelFolder::open(dir.path()).unwrap();
    assert_eq!(sharded.weight_files().len(), 2);
    let single = ModelFolder::open(fixture_path("llama")).unwrap();
    let tokens = [256, 10, 20, 30, 40, 50];
    assert_eq!(
        recompute(load(&sharded, None).as_mut(), &tokens, 4),
        recompute(load(&single, None).as_mut(), &tokens, 4)
    );

    std::fs::remove_file(dir.path().join("model-00002-of-00002.safetensors")).unwrap();
    let err = ModelFolder::open(dir.path()).unwrap_err();
    assert_eq!(err.kind(), "missing_file");
    assert!(
        err.to_string().contains("model-00002-of-00002.safetensors"),
        "{err}"
    );
    assert!(err.to_string().contains("weight_map"), "{err}");
}

#[test]
fn a_missing_folder_or_config_is_named() {
    let err = ModelFolder::open("/nonexistent/model").unwrap_err();
    assert_eq!(err.kind(), "missing_file");
    assert!(err.to_string().contains("/nonexistent/model"), "{err}");

    let dir = llama_copy();
    std::fs::remove_file(dir.path().join("config.json")).unwrap();
    let err = ModelFolder::open(dir.path()).unwrap_err();
    assert_eq!(err.kind(), "missing_file");
    assert!(err.to_string().contains("config.json"), "{err}");
}

#[test]
fn an_unknown_architecture_lists_the_accepted_ones() {
    let dir = llama_copy();
    edit_config(dir.path(), |c| c["model_type"] = "gpt_neox".into());
    let err = ModelFolder::open(dir.path()).unwrap_err();
    assert_eq!(err.kind(), "unsupported_architecture");
    let message = err.to_string();
    assert!(
        message.contains("config.json") && message.contains("gpt_neox"),
        "{message}"
    );
    assert!(message.contains("llama, mistral, qwen2"), "{message}");
}

#[test]
fn a_missing_tokenizer_is_named() {
    let dir = llama_copy();
    std::fs::remove_file(dir.path().join("tokenizer.json")).unwrap();
    let err = ModelFolder::open(dir.path()).unwrap_err();
    assert_eq!(err.kind(), "missing_file");
    assert!(err.to_string().contains("tokenizer.json"), "{err}");

    std::fs::write(
        dir.path().join("tokenizer.json"),
        "{\"not\": \"a tokenizer\"}",
    )
    .unwrap();
    let err = ModelFolder::open(dir.path()).unwrap_err();
    assert_eq!(err.kind(), "invalid_tokenizer");
    assert!(err.to_string().contains("tokenizer.json"), "{err}");
}

#[test]
fn no_weights_and_no_seed_says_what_would_do() {
    let dir = llama_copy();
    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    let err = ModelFolder::open(dir.path()).unwrap_err();
    assert_eq!(err.kind(), "missing_file");
    let message = err.to_string();
    assert!(
        message.contains("model.safetensors.index.json") && message.contains("isobench_seed"),
        "{message}"
    );
}

#[test]
fn a_shape_mismatch_names_the_file_tensor_and_expected_shape() {
    let dir = llama_copy();
    edit_config(dir.path(), |c| c["intermediate_size"] = 128.into());
    let err = open_and_load(dir.path()).unwrap_err();
    assert_eq!(err.kind(), "weight_shape");
    let message = err.to_string();
    assert!(message.contains("model.safetensors"), "{message}");
    assert!(
        message.contains("model.layers.0.mlp.gate_proj.weight"),
        "{message}"
    );
    assert!(
        message.contains("[128, 64]") && message.contains("[176, 64]"),
        "{message}"
    );
}

#[test]
fn a_missing_tensor_is_named() {
    let dir = llama_copy();
    let mut tensors = fixture_tensors(dir.path());
    tensors.remove("model.norm.weight");
    candle_core::safetensors::save(&tensors, dir.path().join("model.safetensors")).unwrap();
    let err = open_and_load(dir.path()).unwrap_err();
    assert_eq!(err.kind(), "missing_weight");
    let message = err.to_string();
    assert!(
        message.contains("model.norm.weight") && message.contains("model.safetensors"),
        "{message}"
    );
}

#[test]
fn a_corrupt_weight_file_is_named() {
    let dir = llama_copy();
    std::fs::write(
        dir.path().join("model.safetensors"),
        b"definitely not safetensors",
    )
    .unwrap();
    let err = open_and_load(dir.path()).unwrap_err();
    assert_eq!(err.kind(), "invalid_weights");
    assert!(err.to_string().contains("model.safetensors"), "{err}");
}

#[test]
fn a_config_error_names_the_field() {
    let dir = llama_copy();
    edit_config(dir.path(), |c| c["hidden_act"] = "gelu".into());
    let err = ModelFolder::open(dir.path()).unwrap_err();
    assert_eq!(err.kind(), "invalid_config");
    assert!(
        err.to_string().contains("hidden_act") && err.to_string().contains("silu"),
        "{err}"
    );

    edit_config(dir.path(), |c| {
        c["hidden_act"] = "silu".into();
        c.as_object_mut().unwrap().remove("hidden_size");
    });
    let err = ModelFolder::open(dir.path()).unwrap_err();
    assert_eq!(err.kind(), "invalid_json");
    assert!(
        err.to_string().contains("missing field `hidden_size`"),
        "{err}"
    );
}

/// The GPU benchmark folders: the real architectures' shapes, and a
/// tokenizer that gives every one of their 128256 ids some text while
/// encoding exactly like the small models' tokenizer.
#[test]
fn llama_shaped_folders_open_and_every_id_has_text() {
    let small = ModelFolder::open(common::repo_path("models/small-llama")).unwrap();
    for (name, params, hidden, layers) in [
        ("llama-3.2-1b-shape", 1_235_814_400, 2048, 16),
        ("llama-3-8b-shape", 8_030_261_248, 4096, 32),
    ] {
        let folder = ModelFolder::open(common::repo_path(&format!("models/{name}"))).unwrap();
        let config = folder.config();
        assert_eq!(config.num_parameters(), params, "{name}");
        assert_eq!(
            (config.hidden_size, config.num_hidden_layers),
            (hidden, layers)
        );
        assert_eq!(config.torch_dtype, Some(isobench_model::DType::BF16));
        assert!(config.seed.is_some(), "{name}: seeded weights");
        let tokenizer = folder.tokenizer();
        assert_eq!(tokenizer.vocab_size(), config.vocab_size);
        let text = "Hello, wörld: 12 tokens?";
        assert_eq!(
            tokenizer.encode(text, true).unwrap(),
            small.tokenizer().encode(text, true).unwrap()
        );
        for id in [8191, 8192, 100_000, 128_255] {
            let decoded = tokenizer.decode(&[id], true).unwrap();
            assert!(
                !decoded.trim().is_empty(),
                "{name}: id {id} decodes to {decoded:?}"
            );
        }
        assert_ne!(
            tokenizer.decode(&[8192], true).unwrap(),
            tokenizer.decode(&[128_255], true).unwrap()
        );
    }
}
