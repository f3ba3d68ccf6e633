//! Configuration reload on SIGHUP for `snic run --config FILE.toml` (issue 19).
//!
//! On SIGHUP the run re-reads its configuration the way it read it at start (the file, then
//! the command line on top) and compares it with the configuration in force:
//!
//! - **applied live**: the vSwitch policy (`[vswitch] policy`: the file it names is read again,
//!   so a changed file with the same name counts; the switch goes to the new policy in one
//!   transaction, as `snic vswitch load` does: connections the new policy still allows keep
//!   their state);
//! - **reported and left as they were**: everything the runtime sets up once at start (ports,
//!   stages, workers, RSS key, batch size, queue depth, poll waits, the trace filter, the flow
//!   table's size and idle timeout, the exception queue). The reload names each such field.
//!
//! A file that does not parse, a policy that does not load or validate, changes nothing: the
//! reload is counted as failed with its error. Every outcome is logged (stderr) and kept in the
//! counters document (`snic stats`, the control socket) as its `reload` object.

use anyhow::Result;
use serde::Serialize;
use snic_io::runtime::RunConfig;
use snic_vswitch::engine::VSwitch;
use snic_vswitch::policy::Policy;
use snic_vswitch::policy::validate::validate;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the reloads of a run did: counts and the last outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReloadStatus {
    /// Reloads asked for (SIGHUP).
    pub requests: u64,
    /// Reloads that applied what could change (even when nothing had changed).
    pub ok: u64,
    /// Reloads refused (bad file, bad policy): nothing changed.
    pub failed: u64,
    /// What the last reload changed live.
    pub applied: Vec<String>,
    /// What the last reload found changed but could not apply live (left as it was).
    pub not_applied: Vec<String>,
    /// Why the last reload was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The settings of `next` that differ from `current` and cannot change in a running NIC.
pub fn fixed_changes(current: &RunConfig, next: &RunConfig) -> Vec<String> {
    let mut out = Vec::new();
    let mut check = |differs: bool, name: &str| {
        if differs {
            out.push(name.to_string());
        }
    };
    check(current.ports != next.ports, "ports");
    check(current.stages != next.stages, "stages");
    check(current.workers != next.workers, "workers");
    check(current.rss_key != next.rss_key, "rss_key");
    check(current.batch_size != next.batch_size, "batch_size");
    check(current.trace != next.trace, "trace");
    check(current.queue_depth != next.queue_depth, "queue_depth");
    check(current.idle_wait_ms != next.idle_wait_ms, "idle_wait_ms");
    check(current.rx_coalesce_us != next.rx_coalesce_us, "rx_coalesce_us");
    check(current.idle_exit_ms != next.idle_exit_ms, "idle_exit_ms");
    let (a, b) = (&current.vswitch, &next.vswitch);
    check(a.flows != b.flows, "vswitch.flows");
    check(a.idle_timeout_ms != b.idle_timeout_ms, "vswitch.idle_timeout_ms");
    check(a.exception_queue != b.exception_queue, "vswitch.exception_queue");
    out
}

/// The policy `settings` name (the embedded default without a file), loaded and validated.
fn load_policy(next: &RunConfig) -> Result<Policy, String> {
    let policy = match &next.vswitch.policy {
        Some(path) => snic_vswitch::policy::toml::load_policy(std::path::Path::new(path))
            .map_err(|e| e.to_string())?,
        None => snic_vswitch::policy::default_policy(),
    };
    validate(&policy).map_err(|e| format!("policy: {e}"))?;
    Ok(policy)
}

/// One reload: `next` (already read) against `current`, applied to `vs`. Returns the outcome;
/// on success `current` takes the settings that were applied.
pub fn reload(
    current: &mut RunConfig,
    next: Result<RunConfig, String>,
    vs: Option<&VSwitch>,
) -> ReloadStatus {
    let mut st = ReloadStatus::default();
    let next = match next {
        Ok(n) => n,
        Err(e) => {
            st.error = Some(e);
            return st;
        }
    };
    st.not_applied = fixed_changes(current, &next);
    // Everything is checked before anything is applied.
    let policy = match vs {
        Some(vs) => match load_policy(&next) {
            Ok(p) if p == *vs.policy() => None,
            Ok(p) => Some((vs, p)),
            Err(e) => {
                st.error = Some(e);
                st.not_applied.clear();
                return st;
            }
        },
        None => {
            if next.vswitch.policy != current.vswitch.policy {
                st.not_applied.push("vswitch.policy (the run has no vswitch stage)".into());
            }
            None
        }
    };
    if let Some((vs, p)) = policy {
        match vs.replace(p) {
            Ok(a) => st.applied.push(format!("vswitch.policy (generation {})", a.generation)),
            Err(e) => {
                st.error = Some(format!("policy: {e}"));
                st.not_applied.clear();
                return st;
            }
        }
    }
    current.vswitch.policy = next.vswitch.policy;
    st
}

/// The SIGHUP handler of a run: a thread that reloads each time the signal comes.
#[derive(Debug)]
pub struct Reloader {
    status: Arc<Mutex<ReloadStatus>>,
    done: Arc<AtomicBool>,
}

impl Reloader {
    /// Install the SIGHUP handler and start the thread. `read` reads the configuration again
    /// (the same file and command line as at start); `current` is the one in force.
    pub fn start(
        current: RunConfig,
        read: impl Fn() -> Result<RunConfig> + Send + 'static,
        vs: Option<VSwitch>,
    ) -> Result<Reloader> {
        let hup = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&hup))?;
        let status = Arc::new(Mutex::new(ReloadStatus::default()));
        let done = Arc::new(AtomicBool::new(false));
        let (st, stop) = (Arc::clone(&status), Arc::clone(&done));
        std::thread::Builder::new().name("snic-reload".into()).spawn(move || {
            let mut current = current;
            while !stop.load(Ordering::Relaxed) {
                if hup.swap(false, Ordering::Relaxed) {
                    let next = read().map_err(|e| format!("{e:#}"));
                    let out = reload(&mut current, next, vs.as_ref());
                    log(&out);
                    let mut s = st.lock().unwrap_or_else(|p| p.into_inner());
                    s.requests += 1;
                    if out.error.is_some() {
                        s.failed += 1;
                    } else {
                        s.ok += 1;
                    }
                    (s.applied, s.not_applied, s.error) = (out.applied, out.not_applied, out.error);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })?;
        Ok(Reloader { status, done })
    }

    /// The reloads so far.
    pub fn status(&self) -> ReloadStatus {
        self.status.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Put the `reload` object into a counters document.
    pub fn annotate(&self, doc: &mut serde_json::Value) {
        if let (Some(o), Ok(v)) = (doc.as_object_mut(), serde_json::to_value(self.status())) {
            o.insert("reload".into(), v);
        }
    }
}

impl Drop for Reloader {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
    }
}

/// Log one reload's outcome on stderr.
fn log(st: &ReloadStatus) {
    match &st.error {
        Some(e) => eprintln!("snic: reload (SIGHUP) refused, nothing changed: {e}"),
        None => eprintln!(
            "snic: reload (SIGHUP): applied [{}]; changed but not applied live, left as they \
             were: [{}]",
            st.applied.join(", "),
            st.not_applied.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use snic_io::spec::PortSpec;

    fn cfg() -> RunConfig {
        RunConfig::new(vec![PortSpec::Null, PortSpec::Null])
    }

    #[test]
    fn fixed_settings_are_named_and_left_as_they_were() {
        let mut cur = cfg();
        let mut next = cfg();
        next.ports.push(PortSpec::Null);
        next.workers = 4;
        next.vswitch.flows = Some(1024);
        let st = reload(&mut cur, Ok(next), None);
        assert_eq!(st.not_applied, ["ports", "workers", "vswitch.flows"]);
        assert!(st.applied.is_empty() && st.error.is_none());
        assert_eq!(cur, cfg(), "nothing fixed was taken over");
    }

    #[test]
    fn a_new_policy_is_applied_and_a_bad_one_changes_nothing() {
        let dir = std::env::temp_dir().join(format!("snic-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("p.toml");
        let mut policy = snic_vswitch::policy::default_policy();
        std::fs::write(&file, snic_vswitch::policy::toml::to_toml(&policy)).unwrap();
        let mut cur = cfg();
        cur.vswitch.policy = Some(file.to_str().unwrap().into());
        let vs = cur.vswitch.build().unwrap();
        let g0 = vs.generation();
        // The same file again: nothing to do.
        let st = reload(&mut cur.clone(), Ok(cur.clone()), Some(&vs));
        assert_eq!((st.applied.len(), st.error.is_none(), vs.generation()), (0, true, g0));
        // A changed file under the same name is applied.
        policy.vports[0].name = "renamed".into();
        std::fs::write(&file, snic_vswitch::policy::toml::to_toml(&policy)).unwrap();
        let same = cur.clone();
        let st = reload(&mut cur, Ok(same), Some(&vs));
        assert_eq!(st.applied, [format!("vswitch.policy (generation {})", g0 + 1)]);
        assert_eq!(vs.policy().vports[0].name, "renamed");
        // A file that does not load changes nothing.
        std::fs::write(&file, "this is [not a policy").unwrap();
        let mut next = cur.clone();
        next.workers = 3;
        let st = reload(&mut cur, Ok(next), Some(&vs));
        assert!(st.error.is_some() && st.applied.is_empty() && st.not_applied.is_empty());
        assert_eq!((vs.generation(), vs.policy().vports[0].name.as_str()), (g0 + 1, "renamed"));
        // A run configuration that does not read changes nothing either.
        let st = reload(&mut cur, Err("bad toml".into()), Some(&vs));
        assert_eq!(st.error.as_deref(), Some("bad toml"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
