//! `isobench serve --model FILE.gguf`: the real server on 127.0.0.1:0 with
//! a GGUF file written from models/tiny-llama, against the folder itself.

mod common;

use common::{completion_text, greedy, start, tiny_model};
use isobench_model::{GgufType, ModelFolder, export_gguf};
use isobench_server::ServerConfig;

#[tokio::test]
async fn a_gguf_file_serves_the_folders_greedy_text_under_its_file_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    let folder = ModelFolder::open(tiny_model()).unwrap();
    export_gguf(&folder, &path, GgufType::F32).unwrap();

    let from_folder = start(|_| {}).await;
    let from_file = start(|c: &mut ServerConfig| c.model = path.clone()).await;
    assert_eq!(from_file.model_name(), "tiny");
    for prompt in ["Once upon a time", "The rain in Spain"] {
        let (want, want_tokens) =
            completion_text(&from_folder, &greedy(&from_folder, prompt, 12)).await;
        let (got, got_tokens) = completion_text(&from_file, &greedy(&from_file, prompt, 12)).await;
        assert_eq!((got_tokens, want_tokens), (12, 12));
        assert_eq!(got, want, "greedy text of {prompt:?}");
    }
    from_folder.shutdown().await;
    from_file.shutdown().await;
}

#[tokio::test]
async fn a_truncated_gguf_file_fails_at_start_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.gguf");
    let folder = ModelFolder::open(tiny_model()).unwrap();
    export_gguf(&folder, &path, GgufType::Q8_0).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 1000]).unwrap();
    let mut config = ServerConfig::new(&path);
    config.port = 0;
    let Err(err) = isobench_server::Server::start(config).await else {
        panic!("a truncated GGUF file must not start a server");
    };
    let message = err.to_string();
    assert!(
        message.contains("cut.gguf") && message.contains("truncated"),
        "{message}"
    );
}
