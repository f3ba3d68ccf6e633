//! `snic run --p4runtime ADDR` driven by real P4Runtime clients from PyPI: p4runtime-shell
//! (`tests/p4runtime/shell_session.py`), finsy (`tests/p4runtime/finsy_session.py`) and a raw
//! gRPC client on the `p4runtime` package's stubs (`tests/p4runtime/bad_requests.py`).
//!
//! Each test writes the P4Info of its program with `snic p4 info --p4info`, starts `snic run`
//! with a P4 stage and the P4Runtime server on a free loopback port (plus a UDP port whose peer
//! the script plays, for data-plane packets), waits until the server accepts connections, runs
//! the script with its venv's python (bounded in time) and checks its exit status and output.
//! The snic child is killed when the test ends, however it ends.
//!
//! The clients live in one venv each (`scripts/p4rt-venvs.sh` makes them under
//! `/opt/snic-venv`, or `$SNIC_VENV_ROOT`). A missing venv skips the test with a message, unless
//! `CI` is set: then it fails.

mod common;

use std::io::Write as _;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Longest wait for `snic run` to accept P4Runtime connections.
const START_WAIT: Duration = Duration::from_secs(30);
/// Longest run of one client script (they finish in seconds; grpc's import alone takes ~1 s).
const SCRIPT_WAIT: Duration = Duration::from_secs(180);
/// `snic run --duration`: a run the test failed to kill still ends by itself.
const RUN_SECS: &str = "600";

fn snic() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_snic"));
    c.env_remove("RUST_LOG");
    c
}

fn venv_root() -> PathBuf {
    std::env::var_os("SNIC_VENV_ROOT")
        .map_or_else(|| PathBuf::from("/opt/snic-venv"), PathBuf::from)
}

/// The python of venv `name` if it imports `module` (else skip, or fail under CI).
fn venv_python(name: &str, module: &str, test: &str) -> Option<PathBuf> {
    let py = venv_root().join(name).join("bin/python");
    let ok = Command::new(&py)
        .args(["-c", &format!("import {module}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let what = format!("{} with {module} (run scripts/p4rt-venvs.sh)", py.display());
    common::need(ok, &what, test).then_some(py)
}

fn script(name: &str) -> PathBuf {
    common::root().join("tests/p4runtime").join(name)
}

fn l3_router() -> PathBuf {
    common::root().join("examples/p4/l3_router.p4")
}

/// `snic p4 info PROG --p4info DIR/NAME.p4info.txt`; returns the written path.
fn p4info(dir: &Path, prog: &Path) -> PathBuf {
    let stem = prog.file_stem().unwrap().to_string_lossy().into_owned();
    let out = dir.join(format!("{stem}.p4info.txt"));
    common::run_ok(snic().args(["p4", "info"]).arg(prog).arg("--p4info").arg(&out));
    let text = std::fs::read_to_string(&out).expect("p4info written");
    assert!(text.contains("tables {"), "{}: {text}", out.display());
    out
}

/// A loopback TCP port nobody listens on right now.
fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Two loopback UDP addresses nobody is bound to right now, and never the same one: both
/// probes are bound at once (probed one after the other, the kernel may hand out the first
/// port again, and snic and the script would then fight over one address).
fn free_udp_pair() -> (SocketAddr, SocketAddr) {
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    (a.local_addr().unwrap(), b.local_addr().unwrap())
}

fn tail(path: &Path, max: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let start = text.len().saturating_sub(max);
    let start = (start..=text.len()).find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    text[start..].to_owned()
}

/// A running `snic run --p4runtime`, killed when dropped.
struct Snic {
    child: Child,
    /// The P4Runtime server's address.
    grpc: SocketAddr,
    /// snic's end of UDP port 0 (`udp:SNIC,PEER`) and the peer's address, which the script binds.
    udp_snic: SocketAddr,
    udp_peer: SocketAddr,
    log: PathBuf,
}

impl Drop for Snic {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Snic {
    /// `snic run --port udp:SNIC,PEER --port null --stage STAGE --p4runtime 127.0.0.1:PORT
    /// extra...`, returned once the server accepts TCP connections.
    fn start(dir: &Path, stage: &str, extra: &[&str]) -> Snic {
        let (udp_snic, udp_peer) = free_udp_pair();
        let log = dir.join("snic.log");
        // A port can be taken between the probe and snic's bind: try a few.
        for _ in 0..3 {
            let grpc: SocketAddr = ([127, 0, 0, 1], free_tcp_port()).into();
            let child = snic()
                .args(["run", "--duration", RUN_SECS, "--port"])
                .arg(format!("udp:{udp_snic},{udp_peer}"))
                .args(["--port", "null", "--stage", stage, "--p4runtime"])
                .arg(grpc.to_string())
                .args(extra)
                .stdout(std::fs::File::create(dir.join("snic.out")).unwrap())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .expect("spawn snic run");
            let mut run = Snic { child, grpc, udp_snic, udp_peer, log: log.clone() };
            match run.wait_listening() {
                Ok(()) => return run,
                Err(status) if tail(&log, 4000).contains("in use") => {
                    eprintln!("snic run on {grpc} exited ({status}), port taken; retrying");
                }
                Err(status) => panic!(
                    "snic run --stage {stage} --p4runtime {grpc} exited ({status}) before it \
                     listened:\n{}",
                    tail(&log, 4000)
                ),
            }
        }
        panic!("no free port for snic run --p4runtime after 3 tries");
    }

    /// Ok once the server accepts a connection; Err(status) if snic exits first. Panics after
    /// [`START_WAIT`].
    fn wait_listening(&mut self) -> Result<(), ExitStatus> {
        let deadline = Instant::now() + START_WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Err(status);
            }
            if TcpStream::connect_timeout(&self.grpc, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            assert!(
                Instant::now() < deadline,
                "snic run did not listen on {} within {START_WAIT:?}:\n{}",
                self.grpc,
                tail(&self.log, 4000)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Run `py SCRIPT --grpc ADDR --udp SNIC,PEER args...` (bounded by [`SCRIPT_WAIT`]); panic
    /// with its output and snic's log unless it exits 0 and its last line is `PASS NAME ...`.
    /// Returns its stdout.
    fn run_script(&mut self, dir: &Path, py: &Path, name: &str, args: &[&Path]) -> String {
        let out_path = dir.join(format!("{name}.out"));
        let err_path = dir.join(format!("{name}.err"));
        let mut child = Command::new(py)
            .arg("-u")
            .arg(script(&format!("{name}.py")))
            .arg("--grpc")
            .arg(self.grpc.to_string())
            .arg("--udp")
            .arg(format!("{},{}", self.udp_snic, self.udp_peer))
            .args(args)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env_remove("http_proxy")
            .env_remove("https_proxy")
            .env_remove("HTTP_PROXY")
            .env_remove("HTTPS_PROXY")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out_path).unwrap())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", py.display()));
        let deadline = Instant::now() + SCRIPT_WAIT;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
        let report = || {
            format!(
                "--- {name}.py stdout\n{stdout}\n--- {name}.py stderr\n{}\n--- snic log\n{}",
                tail(&err_path, 8000),
                tail(&self.log, 4000)
            )
        };
        let Some(status) = status else {
            panic!("{name}.py did not finish within {SCRIPT_WAIT:?}\n{}", report());
        };
        if let Some(s) = self.child.try_wait().unwrap() {
            panic!("snic run exited ({s}) during {name}.py\n{}", report());
        }
        assert!(status.success(), "{name}.py failed ({status})\n{}", report());
        // Known server gaps the scripts report without failing: shown even when libtest
        // captures the output of passing tests.
        for gap in stdout.lines().filter(|l| l.starts_with("GAP ")) {
            let _ = writeln!(std::io::stderr(), "{name}.py: {gap}");
        }
        let last = stdout.lines().last().unwrap_or("");
        assert!(last.starts_with(&format!("PASS {name}")), "{name}.py: no PASS line\n{}", report());
        stdout
    }
}

/// p4runtime-shell pushes l3_router.p4 (P4Info from `snic p4 info`, the P4 source as device
/// config) and programs `ipv4_lpm`: insert, read back, modify, wildcard read, default action,
/// delete; a routed packet through the UDP port shows the entry in the data plane.
#[test]
fn p4runtime_shell_programs_the_l3_router() {
    let test = "p4runtime_shell_programs_the_l3_router";
    let Some(py) = venv_python("p4rt-shell", "p4runtime_sh.shell", test) else { return };
    let dir = common::temp_dir("p4rt-shell-router");
    let info = p4info(&dir, &l3_router());
    let mut run = Snic::start(&dir, "p4", &[]);
    let out =
        run.run_script(&dir, &py, "shell_session", &[Path::new("router"), &info, &l3_router()]);
    assert!(out.contains("ok routed packet"), "{out}");
    drop(run);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run started with the program (`--stage p4:l3_router.p4,entries=FILE`) serves its P4Info
/// to a client that pushes nothing (GetForwardingPipelineConfig), shows the entries file's
/// entry, and takes writes against it.
#[test]
fn p4runtime_shell_reads_the_pipeline_of_a_preloaded_program() {
    let test = "p4runtime_shell_reads_the_pipeline_of_a_preloaded_program";
    let Some(py) = venv_python("p4rt-shell", "p4runtime_sh.shell", test) else { return };
    let dir = common::temp_dir("p4rt-shell-preloaded");
    let info = p4info(&dir, &l3_router());
    let entries = dir.join("entries.txt");
    std::fs::write(
        &entries,
        "table_add ipv4_lpm set_nhop 10.5.0.0/16 => 0 02:00:00:00:00:05 02:00:00:00:00:06\n",
    )
    .unwrap();
    let stage = format!("p4:{},entries={}", l3_router().display(), entries.display());
    let mut run = Snic::start(&dir, &stage, &[]);
    run.run_script(&dir, &py, "shell_session", &[Path::new("preloaded"), &info]);
    drop(run);
    let _ = std::fs::remove_dir_all(&dir);
}

/// p4runtime-shell on tests/p4runtime/features.p4: indirect and direct counters, a meter and a
/// direct meter, a register, action profile members and the tables that use them, a ternary
/// table with priorities, packet-out/packet-in and a digest.
#[test]
fn p4runtime_shell_reads_and_writes_the_externs() {
    let test = "p4runtime_shell_reads_and_writes_the_externs";
    let Some(py) = venv_python("p4rt-shell", "p4runtime_sh.shell", test) else { return };
    let dir = common::temp_dir("p4rt-shell-features");
    let prog = script("features.p4");
    let info = p4info(&dir, &prog);
    let mut run = Snic::start(&dir, "p4", &[]);
    run.run_script(&dir, &py, "shell_session", &[Path::new("features"), &info, &prog]);
    drop(run);
    let _ = std::fs::remove_dir_all(&dir);
}

/// finsy (asyncio) as primary: l3_router table operations, then features.p4 pushed over it
/// with packet-out/packet-in (metadata both ways) and a digest triggered by a packet-out.
#[test]
fn finsy_programs_tables_packet_io_and_digests() {
    let test = "finsy_programs_tables_packet_io_and_digests";
    let Some(py) = venv_python("finsy", "finsy", test) else { return };
    let dir = common::temp_dir("p4rt-finsy");
    let router_info = p4info(&dir, &l3_router());
    let prog = script("features.p4");
    let info = p4info(&dir, &prog);
    let mut run = Snic::start(&dir, "p4", &[]);
    let router = l3_router();
    run.run_script(&dir, &py, "finsy_session", &[&router_info, &router, &info, &prog]);
    drop(run);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Requests the spec says to refuse get its error codes (per update for a Write batch), and
/// leave the state as it was: tables and arbitration on l3_router.p4, then the externs,
/// action profiles, digests and ternary keys of features.p4. Two workers: every write reaches
/// both switches, and counters read as their sum.
#[test]
fn bad_requests_get_the_spec_error_codes() {
    let test = "bad_requests_get_the_spec_error_codes";
    let Some(py) = venv_python("p4rt-shell", "p4.v1.p4runtime_pb2_grpc", test) else { return };
    let dir = common::temp_dir("p4rt-bad");
    let info = p4info(&dir, &l3_router());
    let prog = script("features.p4");
    let features = p4info(&dir, &prog);
    let mut run = Snic::start(&dir, "p4", &["--workers", "2"]);
    run.run_script(&dir, &py, "bad_requests", &[&info, &l3_router(), &features, &prog]);
    drop(run);
    let _ = std::fs::remove_dir_all(&dir);
}
