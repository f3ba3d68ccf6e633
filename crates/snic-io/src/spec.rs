//! Port specifications: the strings that name a port on the command line and in config files.
//!
//! | spec | port |
//! |---|---|
//! | `pcap:IN[,OUT]` | read frames from pcap/pcapng file `IN`, write what is sent to `OUT` (an empty `IN`, as in `pcap:,out.pcap`, makes a write-only port) |
//! | `afpacket:IFNAME` | an AF_PACKET socket on interface `IFNAME` (a `TPACKET_V2` receive ring; `SNIC_AFPACKET_MODE=v3` in the environment selects the `TPACKET_V3` block ring, `mmsg` `recvmmsg`/`sendmmsg`, `tx-ring` V3 rings both ways) |
//! | `afxdp:IFNAME[,QUEUE]` | an AF_XDP socket on queue `QUEUE` (default 0) of interface `IFNAME` |
//! | `tap:NAME` | a TAP device |
//! | `udp:LOCAL,REMOTE` | a UDP tunnel, one Ethernet frame per datagram (`udp:127.0.0.1:7000,127.0.0.1:7001`) |
//! | `gen:COUNT[,SEED]` | `COUNT` generated frames, a deterministic mix chosen by `SEED` (default 1) |
//! | `null` | a sink that counts what it is sent and never receives |
//!
//! [`PortSpec`] parses with [`str::parse`] and deserialises from the same string in TOML
//! (`ports = ["gen:1000", "null"]`).

use crate::Port;
use core::fmt;
use core::str::FromStr;
use serde::{Deserialize, Serialize};
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Default seed of `gen:COUNT` without a seed.
pub const DEFAULT_GEN_SEED: u64 = 1;

/// Which port to open, and its parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum PortSpec {
    /// Read `input` (pcap or pcapng), write sent frames to `output` as pcap.
    Pcap {
        /// File to read; `None` for a write-only port.
        input: Option<PathBuf>,
        /// File to write what is sent to this port; `None` drops (and counts) sent frames.
        output: Option<PathBuf>,
    },
    /// An AF_PACKET socket bound to an interface.
    AfPacket {
        /// Interface name.
        ifname: String,
    },
    /// An AF_XDP socket bound to one queue of an interface.
    AfXdp {
        /// Interface name.
        ifname: String,
        /// Queue to bind (default 0). With several workers, worker `k` binds queue
        /// `queue + k`.
        queue: u32,
    },
    /// A TAP device.
    Tap {
        /// Device name.
        name: String,
    },
    /// A UDP tunnel carrying one Ethernet frame per datagram.
    Udp {
        /// Address to bind.
        local: SocketAddr,
        /// Address to send to (and accept from).
        remote: SocketAddr,
    },
    /// Generated traffic.
    Gen {
        /// Number of frames to produce.
        count: u64,
        /// Seed of the traffic mix.
        seed: u64,
    },
    /// A sink that counts.
    Null,
}

/// Why a port spec string was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpecError {
    /// The spec is empty.
    Empty,
    /// The part before `:` is not a port kind we know.
    UnknownKind {
        /// What was given.
        kind: String,
    },
    /// A required argument is missing.
    Missing {
        /// Port kind.
        kind: &'static str,
        /// What is missing.
        what: &'static str,
    },
    /// More comma-separated arguments than the kind takes.
    TooManyArgs {
        /// Port kind.
        kind: &'static str,
        /// Most arguments it takes.
        max: usize,
    },
    /// An argument could not be parsed.
    BadArg {
        /// Port kind.
        kind: &'static str,
        /// Which argument.
        what: &'static str,
        /// The text given.
        got: String,
    },
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpecError::Empty => write!(f, "empty port spec"),
            SpecError::UnknownKind { kind } => write!(
                f,
                "unknown port kind {kind:?} (expected pcap, afpacket, afxdp, tap, udp, gen or null)"
            ),
            SpecError::Missing { kind, what } => write!(f, "{kind} port: missing {what}"),
            SpecError::TooManyArgs { kind, max } => {
                write!(f, "{kind} port: too many arguments (at most {max})")
            }
            SpecError::BadArg { kind, what, got } => {
                write!(f, "{kind} port: bad {what} {got:?}")
            }
        }
    }
}

impl std::error::Error for SpecError {}

fn split_args<'a>(
    kind: &'static str,
    rest: Option<&'a str>,
    max: usize,
) -> Result<Vec<&'a str>, SpecError> {
    let args: Vec<&str> = match rest {
        None => Vec::new(),
        Some(r) => r.split(',').map(str::trim).collect(),
    };
    if args.len() > max {
        return Err(SpecError::TooManyArgs { kind, max });
    }
    Ok(args)
}

fn non_empty<'a>(
    kind: &'static str,
    what: &'static str,
    arg: Option<&&'a str>,
) -> Result<&'a str, SpecError> {
    match arg {
        Some(a) if !a.is_empty() => Ok(a),
        _ => Err(SpecError::Missing { kind, what }),
    }
}

fn addr(kind: &'static str, what: &'static str, s: &str) -> Result<SocketAddr, SpecError> {
    s.parse().map_err(|_| SpecError::BadArg { kind, what, got: s.to_string() })
}

fn number(kind: &'static str, what: &'static str, s: &str) -> Result<u64, SpecError> {
    s.parse().map_err(|_| SpecError::BadArg { kind, what, got: s.to_string() })
}

impl FromStr for PortSpec {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, SpecError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(SpecError::Empty);
        }
        let (kind, rest) = match s.split_once(':') {
            Some((k, r)) => (k, Some(r)),
            None => (s, None),
        };
        match kind {
            "pcap" => {
                let args = split_args("pcap", rest, 2)?;
                let input = args.first().filter(|a| !a.is_empty()).map(PathBuf::from);
                let output = args.get(1).filter(|a| !a.is_empty()).map(PathBuf::from);
                if input.is_none() && output.is_none() {
                    return Err(SpecError::Missing { kind: "pcap", what: "input or output file" });
                }
                Ok(PortSpec::Pcap { input, output })
            }
            "afpacket" => {
                let args = split_args("afpacket", rest, 1)?;
                let ifname = non_empty("afpacket", "interface name", args.first())?;
                Ok(PortSpec::AfPacket { ifname: ifname.to_string() })
            }
            "afxdp" => {
                let args = split_args("afxdp", rest, 2)?;
                let ifname = non_empty("afxdp", "interface name", args.first())?;
                let queue = match args.get(1) {
                    Some(a) if !a.is_empty() => {
                        u32::try_from(number("afxdp", "queue", a)?).map_err(|_| {
                            SpecError::BadArg { kind: "afxdp", what: "queue", got: a.to_string() }
                        })?
                    }
                    _ => 0,
                };
                Ok(PortSpec::AfXdp { ifname: ifname.to_string(), queue })
            }
            "tap" => {
                let args = split_args("tap", rest, 1)?;
                let name = non_empty("tap", "device name", args.first())?;
                Ok(PortSpec::Tap { name: name.to_string() })
            }
            "udp" => {
                let args = split_args("udp", rest, 2)?;
                let local =
                    addr("udp", "local address", non_empty("udp", "local address", args.first())?)?;
                let remote = addr(
                    "udp",
                    "remote address",
                    non_empty("udp", "remote address", args.get(1))?,
                )?;
                Ok(PortSpec::Udp { local, remote })
            }
            "gen" => {
                let args = split_args("gen", rest, 2)?;
                let count = number("gen", "count", non_empty("gen", "count", args.first())?)?;
                let seed = match args.get(1) {
                    Some(a) if !a.is_empty() => number("gen", "seed", a)?,
                    _ => DEFAULT_GEN_SEED,
                };
                Ok(PortSpec::Gen { count, seed })
            }
            "null" => {
                if rest.is_some_and(|r| !r.is_empty()) {
                    return Err(SpecError::TooManyArgs { kind: "null", max: 0 });
                }
                Ok(PortSpec::Null)
            }
            other => Err(SpecError::UnknownKind { kind: other.to_string() }),
        }
    }
}

impl fmt::Display for PortSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortSpec::Pcap { input, output } => {
                write!(f, "pcap:")?;
                if let Some(i) = input {
                    write!(f, "{}", i.display())?;
                }
                if let Some(o) = output {
                    write!(f, ",{}", o.display())?;
                }
                Ok(())
            }
            PortSpec::AfPacket { ifname } => write!(f, "afpacket:{ifname}"),
            PortSpec::AfXdp { ifname, queue } => write!(f, "afxdp:{ifname},{queue}"),
            PortSpec::Tap { name } => write!(f, "tap:{name}"),
            PortSpec::Udp { local, remote } => write!(f, "udp:{local},{remote}"),
            PortSpec::Gen { count, seed } => write!(f, "gen:{count},{seed}"),
            PortSpec::Null => write!(f, "null"),
        }
    }
}

impl TryFrom<String> for PortSpec {
    type Error = SpecError;
    fn try_from(s: String) -> Result<Self, SpecError> {
        s.parse()
    }
}

impl From<PortSpec> for String {
    fn from(p: PortSpec) -> String {
        p.to_string()
    }
}

impl PortSpec {
    /// True for ports that produce a finite stream and then report
    /// [`Port::is_exhausted`] (pcap with an input file, generators).
    pub fn is_finite_source(&self) -> bool {
        matches!(self, PortSpec::Pcap { input: Some(_), .. } | PortSpec::Gen { .. })
    }

    /// Open the port. Errors carry the spec in their message.
    pub fn open(&self) -> io::Result<Box<dyn Port>> {
        let with_ctx = |e: io::Error| io::Error::new(e.kind(), format!("opening {self}: {e}"));
        let port: Box<dyn Port> = match self {
            PortSpec::Pcap { input, output } => Box::new(
                crate::pcap::PcapPort::open(input.as_deref(), output.as_deref())
                    .map_err(with_ctx)?,
            ),
            PortSpec::AfPacket { ifname } => shim::afpacket(ifname).map_err(with_ctx)?,
            PortSpec::AfXdp { ifname, queue } => shim::afxdp(ifname, *queue).map_err(with_ctx)?,
            PortSpec::Tap { name } => shim::tap(name).map_err(with_ctx)?,
            PortSpec::Udp { local, remote } => {
                Box::new(crate::udp::UdpPort::open(*local, *remote).map_err(with_ctx)?)
            }
            PortSpec::Gen { count, seed } => {
                Box::new(crate::generator::GenPort::new(*count, *seed))
            }
            PortSpec::Null => Box::new(crate::null::NullPort::new()),
        };
        Ok(port)
    }

    /// Carry on with a port (or one queue of it) another process handed over: its state and
    /// its descriptors (see [`crate::handover`]). Errors carry the spec in their message: a
    /// state of another kind, a descriptor count other than the kind's (one, but for AF_XDP),
    /// a descriptor the kind's driver refuses.
    pub fn adopt(
        &self,
        state: &crate::handover::PortState,
        fds: Vec<std::os::fd::OwnedFd>,
    ) -> io::Result<Box<dyn Port>> {
        use crate::handover::PortState;
        let with_ctx = |e: io::Error| io::Error::new(e.kind(), format!("adopting {self}: {e}"));
        let invalid = |what: String| with_ctx(io::Error::new(io::ErrorKind::InvalidInput, what));
        if let (PortSpec::AfXdp { ifname, .. }, PortState::AfXdp(s)) = (self, state) {
            return crate::afxdp::adopt(ifname, s, fds).map_err(with_ctx);
        }
        let [fd]: [std::os::fd::OwnedFd; 1] = fds
            .try_into()
            .map_err(|f: Vec<_>| invalid(format!("{} descriptors, one expected", f.len())))?;
        let port: Box<dyn Port> = match (self, state) {
            (PortSpec::AfPacket { ifname }, PortState::AfPacket(s)) => {
                Box::new(crate::afpacket::AfPacketPort::adopt(ifname, fd, s).map_err(with_ctx)?)
            }
            (PortSpec::Tap { name }, PortState::Tap(s)) => {
                Box::new(crate::tap::TapPort::adopt(name, fd, s).map_err(with_ctx)?)
            }
            (PortSpec::Udp { local, remote }, PortState::Udp) => {
                Box::new(crate::udp::UdpPort::adopt(*local, *remote, fd).map_err(with_ctx)?)
            }
            (_, s) => return Err(invalid(format!("the handed state is of a {} port", s.kind()))),
        };
        Ok(port)
    }

    /// Open the port as `n` independent queues, one per worker, for runtimes where each worker
    /// receives and sends its own packets: `Some(queues)` (`queues.len() == n`, queue `k` for
    /// worker `k`) for kinds that can split (AF_PACKET through `PACKET_FANOUT` hash, AF_XDP one
    /// socket per interface queue starting at the spec's queue, multi-queue TAP, null), `None`
    /// for kinds that cannot (pcap, generators, UDP tunnels: one reader only). Any queue may
    /// send any frame. With `n == 1` a splittable kind gives `Some(vec![port])`, like `open`.
    /// Errors carry the spec in their message.
    pub fn open_queues(&self, n: usize) -> io::Result<Option<Vec<Box<dyn Port>>>> {
        let with_ctx = |e: io::Error| io::Error::new(e.kind(), format!("opening {self}: {e}"));
        if n == 0 {
            return Err(with_ctx(io::Error::new(io::ErrorKind::InvalidInput, "zero queues")));
        }
        let queues = match self {
            PortSpec::AfPacket { ifname } => shim::afpacket_queues(ifname, n).map_err(with_ctx)?,
            PortSpec::AfXdp { ifname, queue } => {
                shim::afxdp_queues(ifname, *queue, n).map_err(with_ctx)?
            }
            PortSpec::Tap { name } => shim::tap_queues(name, n).map_err(with_ctx)?,
            PortSpec::Null => Some(
                (0..n).map(|_| Box::new(crate::null::NullPort::new()) as Box<dyn Port>).collect(),
            ),
            PortSpec::Pcap { .. } | PortSpec::Udp { .. } | PortSpec::Gen { .. } => None,
        };
        Ok(queues)
    }
}

/// Where AF_PACKET and TAP ports are opened (their drivers live in `afpacket.rs` and `tap.rs`).
mod shim {
    use crate::Port;
    use std::io;

    pub(super) fn afpacket(ifname: &str) -> io::Result<Box<dyn Port>> {
        Ok(Box::new(crate::afpacket::AfPacketPort::open_with(ifname, afpacket_options())?))
    }

    /// AF_PACKET options of ports opened from a spec: the defaults (the `TPACKET_V2` receive
    /// ring, `sendmmsg`), or, for comparison and as a fallback, with `SNIC_AFPACKET_MODE` in
    /// the environment: `v3` the `TPACKET_V3` block ring (frames handed over a block at a
    /// time, up to 1 ms late on a quiet link), `tx-ring` V3 rings both ways, `mmsg`
    /// `recvmmsg`/`sendmmsg`, `v2` the default.
    fn afpacket_options() -> crate::afpacket::AfPacketOptions {
        use crate::afpacket::{AfPacketMode, AfPacketOptions, RingSizes};
        match std::env::var("SNIC_AFPACKET_MODE").as_deref() {
            Ok("mmsg") => AfPacketOptions { mode: AfPacketMode::Mmsg, ..Default::default() },
            Ok("v3") => AfPacketOptions {
                mode: AfPacketMode::Ring(RingSizes::default()),
                ..Default::default()
            },
            Ok("tx-ring") => {
                let sizes = RingSizes { tx_ring: true, ..RingSizes::default() };
                AfPacketOptions { mode: AfPacketMode::Ring(sizes), ..Default::default() }
            }
            _ => AfPacketOptions::default(),
        }
    }

    pub(super) fn tap(name: &str) -> io::Result<Box<dyn Port>> {
        Ok(Box::new(crate::tap::TapPort::open(name)?))
    }

    /// One AF_XDP port: the queue asked for, or with queue 0 (the default) every receive queue
    /// of the interface, so that no frame bypasses snic on a multi-queue interface.
    pub(super) fn afxdp(ifname: &str, queue: u32) -> io::Result<Box<dyn Port>> {
        if queue == 0 && crate::afxdp::rx_queue_count(ifname).is_some_and(|n| n > 1) {
            return Ok(Box::new(crate::afxdp::AfXdpQueuesPort::open(ifname)?));
        }
        Ok(Box::new(crate::afxdp::AfXdpPort::open(ifname, queue)?))
    }

    /// `n` AF_PACKET sockets, each with its own rings, in one `PACKET_FANOUT` (hash) group.
    pub(super) fn afpacket_queues(
        ifname: &str,
        n: usize,
    ) -> io::Result<Option<Vec<Box<dyn Port>>>> {
        let qs = crate::afpacket::AfPacketPort::open_queues(ifname, n, afpacket_options())?;
        Ok(Some(qs.into_iter().map(|q| Box::new(q) as Box<dyn Port>).collect()))
    }

    /// `n` AF_XDP sockets on queues `queue..queue + n`, sharing one XDP program and XSKMAP.
    /// `None` when the interface has fewer receive queues than that (one socket then gets
    /// everything and the caller spreads the packets itself).
    pub(super) fn afxdp_queues(
        ifname: &str,
        queue: u32,
        n: usize,
    ) -> io::Result<Option<Vec<Box<dyn Port>>>> {
        let have = crate::afxdp::rx_queue_count(ifname);
        let want = u64::from(queue) + n as u64;
        if have.is_some_and(|have| u64::from(have) < want) {
            return Ok(None);
        }
        let ports = crate::afxdp::AfXdpPort::open_queues(ifname, queue, n)?;
        Ok(Some(ports.into_iter().map(|p| Box::new(p) as Box<dyn Port>).collect()))
    }

    /// `n` queues of a multi-queue TAP device (`IFF_MULTI_QUEUE`).
    pub(super) fn tap_queues(name: &str, n: usize) -> io::Result<Option<Vec<Box<dyn Port>>>> {
        let qs = crate::tap::TapPort::open_queues(name, n)?;
        Ok(Some(qs.into_iter().map(|q| Box::new(q) as Box<dyn Port>).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<PortSpec, SpecError> {
        s.parse()
    }

    #[test]
    fn parses_every_kind() {
        assert_eq!(
            p("pcap:in.pcap,out.pcap").unwrap(),
            PortSpec::Pcap { input: Some("in.pcap".into()), output: Some("out.pcap".into()) }
        );
        assert_eq!(
            p("pcap:in.pcap").unwrap(),
            PortSpec::Pcap { input: Some("in.pcap".into()), output: None }
        );
        assert_eq!(
            p("pcap:,o.pcap").unwrap(),
            PortSpec::Pcap { input: None, output: Some("o.pcap".into()) }
        );
        assert_eq!(p("afpacket:veth0").unwrap(), PortSpec::AfPacket { ifname: "veth0".into() });
        assert_eq!(p("tap:tap0").unwrap(), PortSpec::Tap { name: "tap0".into() });
        assert_eq!(p("afxdp:veth0").unwrap(), PortSpec::AfXdp { ifname: "veth0".into(), queue: 0 });
        assert_eq!(
            p("afxdp:veth0,3").unwrap(),
            PortSpec::AfXdp { ifname: "veth0".into(), queue: 3 }
        );
        assert_eq!(
            p("udp:127.0.0.1:7000,127.0.0.1:7001").unwrap(),
            PortSpec::Udp {
                local: "127.0.0.1:7000".parse().unwrap(),
                remote: "127.0.0.1:7001".parse().unwrap()
            }
        );
        assert_eq!(
            p("udp:[::1]:7000,[::1]:7001").unwrap().to_string(),
            "udp:[::1]:7000,[::1]:7001"
        );
        assert_eq!(p("gen:100").unwrap(), PortSpec::Gen { count: 100, seed: DEFAULT_GEN_SEED });
        assert_eq!(p("gen:100,7").unwrap(), PortSpec::Gen { count: 100, seed: 7 });
        assert_eq!(p(" null ").unwrap(), PortSpec::Null);
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "pcap:a.pcap,b.pcap",
            "pcap:a.pcap",
            "pcap:,b.pcap",
            "afpacket:eth0",
            "afxdp:eth0,2",
            "tap:t0",
            "udp:127.0.0.1:1,127.0.0.1:2",
            "gen:5,9",
            "null",
        ] {
            assert_eq!(p(s).unwrap().to_string(), s);
        }
    }

    #[test]
    fn rejects_bad_specs_with_reasons() {
        assert_eq!(p(""), Err(SpecError::Empty));
        assert_eq!(p("eth0"), Err(SpecError::UnknownKind { kind: "eth0".into() }));
        assert_eq!(
            p("pcap:"),
            Err(SpecError::Missing { kind: "pcap", what: "input or output file" })
        );
        assert_eq!(p("pcap:a,b,c"), Err(SpecError::TooManyArgs { kind: "pcap", max: 2 }));
        assert_eq!(
            p("afpacket:"),
            Err(SpecError::Missing { kind: "afpacket", what: "interface name" })
        );
        assert_eq!(
            p("udp:127.0.0.1:1"),
            Err(SpecError::Missing { kind: "udp", what: "remote address" })
        );
        assert_eq!(
            p("udp:localhost,127.0.0.1:2"),
            Err(SpecError::BadArg { kind: "udp", what: "local address", got: "localhost".into() })
        );
        assert_eq!(
            p("gen:x"),
            Err(SpecError::BadArg { kind: "gen", what: "count", got: "x".into() })
        );
        assert_eq!(
            p("gen:1,-2"),
            Err(SpecError::BadArg { kind: "gen", what: "seed", got: "-2".into() })
        );
        assert_eq!(p("null:x"), Err(SpecError::TooManyArgs { kind: "null", max: 0 }));
        assert_eq!(
            p("afxdp:eth0,x"),
            Err(SpecError::BadArg { kind: "afxdp", what: "queue", got: "x".into() })
        );
        assert_eq!(
            p("afxdp:eth0,4294967296"),
            Err(SpecError::BadArg { kind: "afxdp", what: "queue", got: "4294967296".into() })
        );
        assert_eq!(p("afxdp:eth0,1,2"), Err(SpecError::TooManyArgs { kind: "afxdp", max: 2 }));
        assert!(p("bogus:1").unwrap_err().to_string().contains("unknown port kind"));
    }

    #[test]
    fn deserialises_from_toml_strings() {
        #[derive(Deserialize)]
        struct C {
            ports: Vec<PortSpec>,
        }
        let c: C = toml::from_str(r#"ports = ["gen:10,3", "null"]"#).unwrap();
        assert_eq!(c.ports, vec![PortSpec::Gen { count: 10, seed: 3 }, PortSpec::Null]);
        let e = toml::from_str::<C>(r#"ports = ["udp:nope"]"#).err().unwrap();
        assert!(e.to_string().contains("udp port: bad local address"), "{e}");
    }

    #[test]
    fn open_builds_the_named_port_or_says_why_not() {
        let g = p("gen:10,4").unwrap().open().unwrap();
        assert_eq!(g.name(), "gen:10,4");
        assert_eq!(p("null").unwrap().open().unwrap().name(), "null");
        let e = p("pcap:/nonexistent/in.pcap").unwrap().open().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("opening pcap:/nonexistent/in.pcap"), "{e}");
        let u = p("udp:127.0.0.1:0,127.0.0.1:9").unwrap().open().unwrap();
        assert!(u.name().starts_with("udp:127.0.0.1:"));
        assert!(u.poll_fd().is_some());
        let e = p("afpacket:snic-no-such-if0").unwrap().open().unwrap_err();
        assert!(e.to_string().contains("afpacket:snic-no-such-if0"), "{e}");
    }

    #[test]
    fn finite_sources() {
        assert!(p("gen:1").unwrap().is_finite_source());
        assert!(p("pcap:a").unwrap().is_finite_source());
        assert!(!p("pcap:,b").unwrap().is_finite_source());
        assert!(!p("null").unwrap().is_finite_source());
    }

    #[test]
    fn only_splittable_kinds_open_as_queues() {
        let q = p("null").unwrap().open_queues(3).unwrap().unwrap();
        assert_eq!(q.len(), 3);
        assert!(p("gen:5").unwrap().open_queues(2).unwrap().is_none());
        assert!(p("pcap:,o.pcap").unwrap().open_queues(2).unwrap().is_none());
        assert_eq!(
            p("null").unwrap().open_queues(0).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
