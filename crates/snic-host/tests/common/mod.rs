//! An in-process snic server for the host library's tests.

#![allow(dead_code, reason = "each test file uses part of it")]

use std::path::PathBuf;

use snic_device::{Server, ServerConfig, ServerHandle};

/// A running server on a socket in a fresh temporary directory.
pub struct TestServer {
    pub handle: Option<ServerHandle>,
    pub dir: PathBuf,
}

impl TestServer {
    pub fn start(tag: &str, workers: u32) -> TestServer {
        let dir = std::env::temp_dir().join(format!("snic-host-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let cfg = ServerConfig {
            socket: dir.join("snic.sock"),
            on_chip: 4 << 20,
            on_board: 64 << 20,
            workers,
            ..Default::default()
        };
        let handle = Server::start(cfg).expect("server starts");
        TestServer { handle: Some(handle), dir }
    }

    pub fn socket(&self) -> PathBuf {
        self.handle.as_ref().expect("running").socket_path().to_path_buf()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            let _ = h.shutdown();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A deterministic byte pattern.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}
