//! The gRPC service (tonic) over a [`Device`], on its own thread with its own tokio runtime,
//! beside snic's workers.
//!
//! Unary calls lock the device, do their work and answer. Each StreamChannel gets an id and an
//! outbound queue; a pump task moves what the p4 stage queued for the controller (packet-ins,
//! digests) to the primary client of the default role, woken by the stage and at least every
//! 10 ms (digest lists wait at most `max_timeout_ns`); every 100 ms it also looks for entries
//! idle past their `idle_timeout_ns` and sends them as an IdleTimeoutNotification. While no client is primary, the stage
//! drops what it would send to the CPU port (`p4_cpu_full`) and counts digests as errors.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use snic_io::p4::P4Control;
use tokio::sync::{Notify, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use crate::device::{API_VERSION, Device, Notice, ReadError, StreamId};
use crate::proto::p4::v1 as p4;
use crate::proto::p4::v1::p4_runtime_server::{P4Runtime, P4RuntimeServer};
use crate::status::{Code, Fail, read_status, write_status};

/// How the server is set up.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where to listen (`127.0.0.1:9559`).
    pub addr: SocketAddr,
    /// The device id clients must name.
    pub device_id: u64,
    /// The P4 port that reaches the controller (packet-in / packet-out).
    pub cpu_port: u32,
    /// `#include` directories for pushed programs (after the built-ins).
    pub include: Vec<PathBuf>,
    /// The program the p4 stage was started with (`--stage p4:PROG.p4`), served as the
    /// pipeline until a client pushes another; `None`: no pipeline until then.
    pub program: Option<PathBuf>,
}

/// Entities per ReadResponse message (each well under gRPC's 4 MiB default).
const READ_CHUNK: usize = 1000;

/// How often idle entries are looked for (the resolution of idle timeouts).
const IDLE_SCAN: Duration = Duration::from_millis(100);

/// Messages waiting on one stream before more are dropped.
const STREAM_QUEUE: usize = 4096;

type Out = mpsc::Sender<Result<p4::StreamMessageResponse, Status>>;

/// Digests waiting to be sent, and lists waiting for their ack.
#[derive(Debug, Default)]
struct Digests {
    /// Digest id -> (first queued at, data).
    pending: HashMap<u32, (Instant, Vec<p4::P4Data>)>,
    /// List id -> (digest id, data, sent at).
    /// List id -> (digest id, data, expires at: sent + its digest's `ack_timeout_ns`).
    unacked: HashMap<u64, (u32, Vec<p4::P4Data>, Instant)>,
    next_list: u64,
}

struct Shared {
    dev: Mutex<Device>,
    streams: Mutex<HashMap<StreamId, Out>>,
    next_stream: AtomicU64,
    wake: Arc<Notify>,
    digests: Mutex<Digests>,
    /// Messages for the controller dropped (a full stream queue).
    dropped: AtomicU64,
    /// When idle entries were last looked for.
    last_idle_scan: Mutex<Instant>,
}

/// Nanoseconds since the Unix epoch (the timestamps of stream notifications).
fn epoch_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn send_notices(&self, notices: Vec<Notice>) {
        let streams = lock(&self.streams);
        for (s, upd) in notices {
            if let Some(tx) = streams.get(&s) {
                let msg = p4::StreamMessageResponse {
                    update: Some(p4::stream_message_response::Update::Arbitration(upd)),
                };
                if tx.try_send(Ok(msg)).is_err() {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// The stage queues for the controller while a primary exists.
    fn update_listener(&self, dev: &Device) {
        let io = dev.control().io();
        if !dev.primary_streams().is_empty() {
            let wake = Arc::clone(&self.wake);
            io.set_listener(Some(Arc::new(move || wake.notify_one())));
        } else {
            io.set_listener(None);
        }
    }

    /// Send `msg` to the primary of every role.
    fn to_primary(&self, dev: &Device, msg: p4::stream_message_response::Update) {
        let streams = lock(&self.streams);
        for p in dev.primary_streams() {
            let sent = streams.get(&p).is_some_and(|tx| {
                let m = p4::StreamMessageResponse { update: Some(msg.clone()) };
                tx.try_send(Ok(m)).is_ok()
            });
            if !sent {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Move packet-ins and digests from the stage to the primary.
    fn pump(&self) {
        let mut dev = lock(&self.dev);
        let io = Arc::clone(dev.control().io());
        for (_, frame) in io.take_packet_ins() {
            let pi = dev.packet_in(frame);
            self.to_primary(&dev, p4::stream_message_response::Update::Packet(pi));
        }
        // Idle entries: a scan of the notifying tables under every worker's lock, so not at
        // every tick.
        let idle = {
            let mut last = lock(&self.last_idle_scan);
            if last.elapsed() >= IDLE_SCAN {
                *last = Instant::now();
                dev.idle_expired()
            } else {
                Vec::new()
            }
        };
        if !idle.is_empty() {
            let msg = p4::IdleTimeoutNotification { table_entry: idle, timestamp: epoch_ns() };
            self.to_primary(
                &dev,
                p4::stream_message_response::Update::IdleTimeoutNotification(msg),
            );
        }
        let now = Instant::now();
        let mut dg = lock(&self.digests);
        // Lists whose ack did not come in time leave the cache.
        dg.unacked.retain(|_, (_, _, until)| now < *until);
        for (index, vals) in io.take_digests() {
            let Some((id, data, _)) = dev.digest(index, &vals) else { continue };
            // The same data is not sent again while a list holding it waits for its ack.
            if dg.unacked.values().any(|(d, list, _)| *d == id && list.contains(&data)) {
                continue;
            }
            let e = dg.pending.entry(id).or_insert_with(|| (now, Vec::new()));
            if !e.1.contains(&data) {
                e.1.push(data);
            }
        }
        let ids: Vec<u32> = dg.pending.keys().copied().collect();
        for id in ids {
            let Some(cfg) = dev.digest_config(id) else {
                dg.pending.remove(&id);
                continue;
            };
            let (first, list) = &dg.pending[&id];
            // max_list_size 0: no size limit, only the timeout sends.
            let full = cfg.max_list_size > 0 && list.len() >= cfg.max_list_size as usize;
            let due = now.duration_since(*first)
                >= Duration::from_nanos(cfg.max_timeout_ns.max(0) as u64);
            if !(full || due) {
                continue;
            }
            let Some((_, list)) = dg.pending.remove(&id) else { continue };
            dg.next_list += 1;
            let list_id = dg.next_list;
            // ack_timeout_ns 0: no cache at all (the same data may come again at once).
            if cfg.ack_timeout_ns > 0 {
                let until = now + Duration::from_nanos(cfg.ack_timeout_ns as u64);
                dg.unacked.insert(list_id, (id, list.clone(), until));
            }
            let msg = p4::DigestList { digest_id: id, list_id, data: list, timestamp: epoch_ns() };
            self.to_primary(&dev, p4::stream_message_response::Update::Digest(msg));
        }
    }
}

/// The service (cheap to clone: it shares its state).
#[derive(Clone)]
pub struct Service {
    shared: Arc<Shared>,
}

impl core::fmt::Debug for Service {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Service").finish_non_exhaustive()
    }
}

impl Service {
    /// A service over the p4 stage `control`.
    pub fn new(control: P4Control, opts: &Options) -> Service {
        control.io().set_cpu_port(Some(opts.cpu_port));
        let dev = Device::new(opts.device_id, control, opts.include.clone());
        Service {
            shared: Arc::new(Shared {
                dev: Mutex::new(dev),
                streams: Mutex::new(HashMap::new()),
                next_stream: AtomicU64::new(1),
                wake: Arc::new(Notify::new()),
                digests: Mutex::new(Digests::default()),
                dropped: AtomicU64::new(0),
                last_idle_scan: Mutex::new(Instant::now()),
            }),
        }
    }

    /// Run the pump until the runtime stops.
    fn spawn_pump(&self) {
        let shared = Arc::clone(&self.shared);
        tokio::spawn(async move {
            loop {
                let _ =
                    tokio::time::timeout(Duration::from_millis(10), shared.wake.notified()).await;
                shared.pump();
            }
        });
    }

    fn stream_message(
        &self,
        sid: StreamId,
        tx: &Out,
        m: p4::StreamMessageRequest,
    ) -> Result<(), Status> {
        use p4::stream_message_request::Update as U;
        let sh = &self.shared;
        match m.update {
            Some(U::Arbitration(a)) => {
                let mut dev = lock(&sh.dev);
                match dev.arbitrate(sid, &a) {
                    Ok(n) => {
                        sh.update_listener(&dev);
                        drop(dev);
                        sh.send_notices(n);
                        Ok(())
                    }
                    Err(f) => Err(f.status()),
                }
            }
            Some(U::Packet(po)) => {
                let dev = lock(&sh.dev);
                let r = if !dev.primary_streams().contains(&sid) {
                    Err(Fail::new(Code::PermissionDenied, "only the primary sends packets"))
                } else {
                    dev.packet_out_frame(&po).and_then(|f| {
                        if dev.control().io().packet_out(f) {
                            Ok(())
                        } else {
                            Err(Fail::new(Code::ResourceExhausted, "the packet-out queue is full"))
                        }
                    })
                };
                if let Err(f) = r {
                    let err = p4::StreamError {
                        canonical_code: f.code as i32,
                        message: f.message,
                        details: Some(p4::stream_error::Details::PacketOut(p4::PacketOutError {
                            packet_out: Some(po),
                        })),
                        ..Default::default()
                    };
                    let msg = p4::StreamMessageResponse {
                        update: Some(p4::stream_message_response::Update::Error(err)),
                    };
                    let _ = tx.try_send(Ok(msg));
                }
                Ok(())
            }
            Some(U::DigestAck(a)) => {
                let mut dg = lock(&sh.digests);
                if dg.unacked.get(&a.list_id).is_some_and(|x| x.0 == a.digest_id) {
                    dg.unacked.remove(&a.list_id);
                }
                Ok(())
            }
            Some(U::Other(_)) | None => {
                let err = p4::StreamError {
                    canonical_code: Code::Unimplemented as i32,
                    message: "unsupported stream message".into(),
                    details: Some(
                        p4::stream_error::Details::Other(p4::StreamOtherError::default()),
                    ),
                    ..Default::default()
                };
                let msg = p4::StreamMessageResponse {
                    update: Some(p4::stream_message_response::Update::Error(err)),
                };
                let _ = tx.try_send(Ok(msg));
                Ok(())
            }
        }
    }
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl P4Runtime for Service {
    async fn write(
        &self,
        req: Request<p4::WriteRequest>,
    ) -> Result<Response<p4::WriteResponse>, Status> {
        let req = req.into_inner();
        let r = lock(&self.shared.dev).write(&req);
        match r {
            Ok(()) => Ok(Response::new(p4::WriteResponse {})),
            Err(Err(f)) => Err(f.status()),
            Err(Ok(results)) => Err(write_status(&results)),
        }
    }

    type ReadStream = BoxStream<p4::ReadResponse>;

    async fn read(
        &self,
        req: Request<p4::ReadRequest>,
    ) -> Result<Response<Self::ReadStream>, Status> {
        let req = req.into_inner();
        let (entities, tail) = match lock(&self.shared.dev).read(&req) {
            Ok(e) => (e, None),
            Err(ReadError::Whole(f)) => return Err(f.status()),
            // One entity asked for: its own code. Several: the good requests' entities, then
            // UNKNOWN with one error per request.
            Err(ReadError::Partial { results, .. }) if results.len() == 1 => {
                return Err(results[0]
                    .clone()
                    .err()
                    .map_or_else(|| read_status(&results), |f| f.status()));
            }
            Err(ReadError::Partial { entities, results }) => {
                (entities, Some(read_status(&results)))
            }
        };
        let mut chunks = Vec::new();
        let mut it = entities.into_iter().peekable();
        while it.peek().is_some() {
            chunks.push(Ok(p4::ReadResponse { entities: it.by_ref().take(READ_CHUNK).collect() }));
        }
        match tail {
            Some(st) => chunks.push(Err(st)),
            None if chunks.is_empty() => chunks.push(Ok(p4::ReadResponse::default())),
            None => {}
        }
        Ok(Response::new(Box::pin(tokio_stream::iter(chunks))))
    }

    async fn set_forwarding_pipeline_config(
        &self,
        req: Request<p4::SetForwardingPipelineConfigRequest>,
    ) -> Result<Response<p4::SetForwardingPipelineConfigResponse>, Status> {
        let req = req.into_inner();
        // Compiling takes a while: do it off the async threads.
        let shared = Arc::clone(&self.shared);
        let r = tokio::task::spawn_blocking(move || lock(&shared.dev).set_pipeline(&req))
            .await
            .map_err(|e| Status::internal(format!("pipeline task: {e}")))?;
        r.map(|()| Response::new(p4::SetForwardingPipelineConfigResponse {}))
            .map_err(|f| f.status())
    }

    async fn get_forwarding_pipeline_config(
        &self,
        req: Request<p4::GetForwardingPipelineConfigRequest>,
    ) -> Result<Response<p4::GetForwardingPipelineConfigResponse>, Status> {
        let c = lock(&self.shared.dev).get_pipeline(req.get_ref()).map_err(|f| f.status())?;
        Ok(Response::new(p4::GetForwardingPipelineConfigResponse { config: c }))
    }

    type StreamChannelStream = BoxStream<p4::StreamMessageResponse>;

    async fn stream_channel(
        &self,
        req: Request<Streaming<p4::StreamMessageRequest>>,
    ) -> Result<Response<Self::StreamChannelStream>, Status> {
        let mut inbound = req.into_inner();
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        let sid = self.shared.next_stream.fetch_add(1, Ordering::Relaxed);
        lock(&self.shared.streams).insert(sid, tx.clone());
        let svc = self.clone();
        tokio::spawn(async move {
            while let Some(m) = inbound.next().await {
                let r = match m {
                    Ok(m) => svc.stream_message(sid, &tx, m),
                    Err(_) => break,
                };
                if let Err(st) = r {
                    let _ = tx.send(Err(st)).await;
                    break;
                }
            }
            let sh = &svc.shared;
            lock(&sh.streams).remove(&sid);
            let mut dev = lock(&sh.dev);
            let n = dev.stream_closed(sid);
            sh.update_listener(&dev);
            drop(dev);
            sh.send_notices(n);
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn capabilities(
        &self,
        _req: Request<p4::CapabilitiesRequest>,
    ) -> Result<Response<p4::CapabilitiesResponse>, Status> {
        Ok(Response::new(p4::CapabilitiesResponse { p4runtime_api_version: API_VERSION.into() }))
    }
}

/// A running server: stops when dropped.
#[derive(Debug)]
pub struct Handle {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Handle {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Start the server for the p4 stage `control` (binds before returning, so a bad address is
/// an error here).
pub fn spawn(control: P4Control, opts: Options) -> std::io::Result<Handle> {
    let listener = std::net::TcpListener::bind(opts.addr)?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let svc = Service::new(control, &opts);
    if let Some(path) = &opts.program {
        lock(&svc.shared.dev).preload(path).map_err(std::io::Error::other)?;
    }
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("snic-p4rt")
        .enable_all()
        .build()?;
    let thread = std::thread::Builder::new().name("snic-p4runtime".into()).spawn(move || {
        rt.block_on(async move {
            let listener = match tokio::net::TcpListener::from_std(listener) {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!("p4runtime: {e}");
                    return;
                }
            };
            svc.spawn_pump();
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let r = tonic::transport::Server::builder()
                .add_service(P4RuntimeServer::new(svc).max_decoding_message_size(64 << 20))
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stop_rx.await;
                })
                .await;
            if let Err(e) = r {
                tracing::error!("p4runtime server: {e}");
            }
        });
    })?;
    Ok(Handle { addr, stop: Some(stop_tx), thread: Some(thread) })
}
