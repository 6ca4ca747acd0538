//! The embedded server's default model folder, `models/small-llama`,
//! carried inside the binary. Its weights are seeded (generated from
//! `config.json`), so the folder is four small text files; an installed
//! binary run from any directory writes them once into a cache folder and
//! loads the model from there, without reaching back into the source tree
//! it was built from.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The `--server-model` default.
pub const DEFAULT_SERVER_MODEL: &str = "models/small-llama";

/// The default folder's files, as built into the binary.
const FILES: [(&str, &str); 4] = [
    (
        "config.json",
        include_str!("../../../models/small-llama/config.json"),
    ),
    (
        "generation_config.json",
        include_str!("../../../models/small-llama/generation_config.json"),
    ),
    (
        "tokenizer.json",
        include_str!("../../../models/small-llama/tokenizer.json"),
    ),
    (
        "tokenizer_config.json",
        include_str!("../../../models/small-llama/tokenizer_config.json"),
    ),
];

/// The embedded server's model folder: `folder` when it holds a
/// `config.json` (relative to the current directory); else, for the
/// default, the copy built into the binary, written to `cache_root()`.
pub fn resolve_model_folder(folder: &Path) -> anyhow::Result<PathBuf> {
    if folder.join("config.json").is_file() {
        return Ok(folder.to_path_buf());
    }
    if folder == Path::new(DEFAULT_SERVER_MODEL) {
        return write_default(&cache_root().join("small-llama"));
    }
    bail!(
        "--server-model {}: no config.json there; pass a model folder (Hugging Face layout, see docs/models.md) or --target URL",
        folder.display()
    )
}

/// `$XDG_CACHE_HOME/isobench/models`, else `~/.cache/isobench/models`, else
/// the system's temporary folder.
fn cache_root() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("isobench/models")
}

/// Writes the built-in files into `dir` (rewriting any that differ) and
/// returns it.
fn write_default(dir: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| {
        format!(
            "writing the built-in default model to {} (pass --server-model DIR to use a folder of your own)",
            dir.display()
        )
    })?;
    for (name, contents) in FILES {
        let path = dir.join(name);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(contents) {
            std::fs::write(&path, contents).with_context(|| {
                format!("writing the built-in default model's {}", path.display())
            })?;
        }
    }
    Ok(dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_default_is_a_loadable_model_folder() {
        let dir = tempfile::tempdir().unwrap();
        let folder = write_default(&dir.path().join("small-llama")).unwrap();
        let model = isobench_model::ModelFolder::open(&folder).unwrap();
        assert_eq!(model.name(), "small-llama");
        // A second call finds the files in place and leaves them.
        assert_eq!(write_default(&folder).unwrap(), folder);
    }

    #[test]
    fn another_missing_folder_is_an_error_naming_it() {
        let err = resolve_model_folder(Path::new("no/such/model"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no/such/model") && err.contains("--server-model"),
            "{err}"
        );
    }
}
