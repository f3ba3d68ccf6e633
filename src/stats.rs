//! `snic stats` and the control socket it talks to.
//!
//! A `snic run --control PATH` listens on a Unix stream socket at `PATH`. The protocol is as
//! small as it gets: a client connects, the server writes one JSON document (the current
//! counters) followed by a newline and closes the connection. `snic stats --control PATH` prints
//! that document. `snic stats --pid PID` instead sends SIGUSR1 to the process, which prints its
//! counters on its own stderr.

use anyhow::{Context, Result, bail};
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Arguments of `snic stats`.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// Control socket of the running `snic run` (its `--control PATH`); prints its counters as JSON.
    #[arg(long, value_name = "PATH", required_unless_present = "pid", conflicts_with = "pid")]
    pub control: Option<PathBuf>,
    /// Process id of a running `snic run`: send it SIGUSR1 so it prints its counters on its stderr.
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
}

/// Entry point of `snic stats`.
pub fn run(args: StatsArgs) -> Result<()> {
    if let Some(path) = &args.control {
        let doc = query(path)?;
        println!("{doc}");
        return Ok(());
    }
    if let Some(pid) = args.pid {
        let status = std::process::Command::new("kill")
            .arg("-USR1")
            .arg(pid.to_string())
            .status()
            .context("cannot run kill(1)")?;
        if !status.success() {
            bail!("could not signal process {pid} (is it running, and ours?)");
        }
        eprintln!("sent SIGUSR1 to {pid}: it prints its counters on its stderr");
        return Ok(());
    }
    bail!("give --control PATH or --pid PID")
}

/// Fetch the counters document from a control socket.
pub fn query(path: &Path) -> Result<String> {
    let mut stream = UnixStream::connect(path).with_context(|| {
        format!(
            "cannot connect to control socket {} (is `snic run --control` running?)",
            path.display()
        )
    })?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut doc = String::new();
    stream.read_to_string(&mut doc).context("reading from control socket")?;
    let doc = doc.trim_end().to_owned();
    // Check it is the JSON we expect before handing it on.
    serde_json::from_str::<serde_json::Value>(&doc)
        .context("control socket sent something that is not JSON")?;
    Ok(doc)
}

/// The server side: a thread answering each connection with `snapshot()`.
#[derive(Debug)]
pub struct ControlServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ControlServer {
    /// Bind `path` (replacing a stale socket file) and start answering connections.
    pub fn spawn<F>(path: &Path, snapshot: F) -> Result<Self>
    where
        F: Fn() -> String + Send + 'static,
    {
        if path.exists() {
            // Only replace a socket nobody answers on: never delete a live one or a regular file.
            if UnixStream::connect(path).is_ok() {
                bail!("control socket {} is in use by another process", path.display());
            }
            let meta = std::fs::symlink_metadata(path)?;
            use std::os::unix::fs::FileTypeExt;
            if !meta.file_type().is_socket() {
                bail!("{} exists and is not a socket", path.display());
            }
            std::fs::remove_file(path)?;
        }
        let listener = UnixListener::bind(path)
            .with_context(|| format!("cannot bind control socket {}", path.display()))?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let thread = std::thread::Builder::new().name("snic-control".into()).spawn(move || {
            while !stop2.load(Ordering::Acquire) {
                match listener.accept() {
                    Ok((mut conn, _)) => {
                        let _ = conn.set_nonblocking(false);
                        let mut doc = snapshot();
                        doc.push('\n');
                        if let Err(e) = conn.write_all(doc.as_bytes()) {
                            tracing::debug!("control client went away: {e}");
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => {
                        tracing::warn!("control socket accept failed: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        })?;
        Ok(ControlServer { path: path.to_owned(), stop, thread: Some(thread) })
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn control_socket_round_trip_returns_the_current_snapshot() {
        let path = std::env::temp_dir().join(format!("snic-ctl-test-{}.sock", std::process::id()));
        let n = Arc::new(AtomicU64::new(7));
        let n2 = Arc::clone(&n);
        let server = ControlServer::spawn(&path, move || {
            format!("{{\"packets\":{}}}", n2.load(Ordering::Relaxed))
        })
        .unwrap();
        assert_eq!(query(&path).unwrap(), "{\"packets\":7}");
        n.store(8, Ordering::Relaxed);
        assert_eq!(query(&path).unwrap(), "{\"packets\":8}");
        // A second server on a live socket is refused.
        assert!(ControlServer::spawn(&path, String::new).is_err());
        drop(server);
        assert!(!path.exists(), "socket file removed on drop");
        assert!(query(&path).is_err());
    }
}
