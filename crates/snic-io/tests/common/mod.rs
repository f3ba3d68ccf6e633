//! What the real-interface tests of this crate share: running commands under `timeout`, and
//! whether a tool exists and the test runs as root.

#![allow(dead_code, reason = "each test file uses its own subset")]

use std::process::{Command, Stdio};

/// Run `args` under `timeout` (killed 2 s after `secs`), returning (success, stdout). A failure
/// prints the command, its status and its stderr.
pub fn run(secs: u32, args: &[&str]) -> (bool, String) {
    let out = Command::new("timeout")
        .args(["-k", "2", &secs.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(o) => {
            if !o.status.success() {
                eprintln!(
                    "command {args:?} failed: {}\n{}",
                    o.status,
                    String::from_utf8_lossy(&o.stderr)
                );
            }
            (o.status.success(), String::from_utf8_lossy(&o.stdout).into_owned())
        }
        Err(e) => {
            eprintln!("command {args:?} could not start: {e}");
            (false, String::new())
        }
    }
}

/// [`run`], failing the test when the command fails.
pub fn must(secs: u32, args: &[&str]) -> String {
    let (ok, out) = run(secs, args);
    assert!(ok, "command failed: {args:?}");
    out
}

/// Whether `tool` is an executable file in a `PATH` directory (not a shell builtin: `kill`
/// must exist as a program for `Command` to run it).
pub fn have(tool: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(tool))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// Whether the effective user id is 0, from `/proc/self/status` (no tool needed).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}
