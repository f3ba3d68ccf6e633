//! A private `snic serve` child process for `snic dma` runs without `-d`: zero setup, yet the
//! DMA still crosses a process boundary (shared memory, doorbells, eventfds) as with a real
//! device.

use anyhow::{Context, Result, bail};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long the child may take to print its "listening" line.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A running `snic serve` child; killed (and its socket directory removed) on drop.
#[derive(Debug)]
pub struct ServerChild {
    child: Child,
    dir: PathBuf,
    socket: PathBuf,
}

impl ServerChild {
    /// Start `<this executable> serve --socket <tmp> --workers <workers>` and wait until it
    /// says it is listening. With `verbose`, the child's stderr is passed through.
    pub fn spawn(workers: u32, verbose: bool) -> Result<ServerChild> {
        let exe = std::env::current_exe().context("locating the snic executable")?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("snic-dma-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("creating socket directory {}", dir.display()))?;
        let socket = dir.join("snic.sock");
        let spawned = Command::new(&exe)
            .arg("serve")
            .arg("--socket")
            .arg(&socket)
            .arg("--workers")
            .arg(workers.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(if verbose { Stdio::inherit() } else { Stdio::null() })
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e).with_context(|| format!("spawning {} serve", exe.display()));
            }
        };
        let stdout = child.stdout.take().context("child stdout")?;
        let mut me = ServerChild { child, dir, socket };
        // A reader thread forwards lines so the wait below has a deadline; it keeps draining
        // the pipe afterwards so the child never blocks on a full pipe.
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    // Nobody listens any more: keep draining silently.
                    continue;
                }
            }
        });
        let deadline = std::time::Instant::now() + START_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if verbose {
                        eprintln!("{line}");
                    }
                    if line.contains("listening") {
                        return Ok(me);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    me.stop();
                    bail!("snic serve did not start listening within {START_TIMEOUT:?}");
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = me.child.wait().ok();
                    bail!("snic serve exited before listening ({status:?})");
                }
            }
        }
    }

    /// The server's socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for ServerChild {
    fn drop(&mut self) {
        self.stop();
    }
}
