//! Helpers shared by the binary's end-to-end tests: the `isobench` command
//! run from the repository root, its stderr, a file written for it (a
//! workload), a mock endpoint on loopback, and a child process that is
//! always reaped.

#![allow(dead_code)] // each test binary uses its own subset

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};

use isobench_mock::{MockConfig, MockHandle, MockServer};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `isobench` binary, run from the repository root, without the
/// variables a user's environment could lend it (an API key, a device).
pub fn isobench() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_isobench"));
    command
        .current_dir(repo_root())
        .env_remove("OPENAI_API_KEY")
        .env_remove("ISOBENCH_DEVICE");
    command
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Writes `body` to `dir/name`; returns the path.
pub fn write_file(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path
}

/// `isobench mock`'s server with `config`, on a free port of 127.0.0.1.
pub async fn loopback_mock(config: MockConfig) -> MockHandle {
    MockServer::start(config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

/// A spawned child that is killed (if still running) and waited for when
/// the test ends, even when an assertion fails first: a test never leaves
/// a process running, and loading the CPU, behind it.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}
