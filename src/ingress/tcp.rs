//! The TCP listener: length-prefixed JSON frames (see [`super::frame`]).
//! The first frame must authenticate; then each request frame gets exactly
//! one reply frame, in order: `{"id", "ok": true, "status": 200, "body"}` or
//! `{"id", "ok": false, "status", "error"}`. A frame that is not JSON, too
//! large or empty, a failed authentication, a frame left half-sent past the
//! read timeout, or a connection idle past the idle timeout is closed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::frame::{encode, FrameDecoder, FrameError};
use super::protocol::{self, valid_executor_id, AuthRequest, TcpOp, TcpRequest};
use super::{key_matches, Caller, Ingress, IngressError};
use crate::contract::Problem;

pub async fn serve(ingress: Arc<Ingress>, listener: TcpListener, shutdown: CancellationToken) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    warn!(%error, "ingress TCP accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some(slot) = ingress.peers.acquire(peer.ip()) else {
            crate::telemetry::metrics::ingress_connection_refused("tcp");
            warn!(%peer, "TCP connection over the per-peer limit closed");
            continue;
        };
        let (ingress, shutdown) = (ingress.clone(), shutdown.clone());
        connections.spawn(async move {
            let evicted = slot.evicted();
            tokio::select! {
                _ = connection(ingress, stream, peer, &slot, shutdown) => {}
                // Closed to make room: it never authenticated.
                _ = evicted.cancelled() => {}
            }
        });
    }
    connections.shutdown().await;
    info!("ingress TCP stopped");
}

/// The largest first frame: it must authenticate (a key and an executor
/// id), so an unauthenticated client cannot make the ingress hold a full
/// `EXECPLANE_INGRESS_MAX_FRAME` for it.
pub const MAX_AUTH_FRAME: usize = 4 * 1024;

/// Bytes held in unfinished frames by every TCP connection together: a
/// connection that would take the total past the budget is closed (503).
#[derive(Debug)]
pub struct FrameBudget {
    max: usize,
    used: Arc<std::sync::atomic::AtomicUsize>,
}

/// One connection's share of the [`FrameBudget`]; returned on drop.
struct FrameShare {
    held: usize,
    used: Arc<std::sync::atomic::AtomicUsize>,
    max: usize,
}

impl FrameBudget {
    pub fn new(max: usize) -> Self {
        Self {
            max,
            used: Arc::default(),
        }
    }

    fn share(&self) -> FrameShare {
        FrameShare {
            held: 0,
            used: self.used.clone(),
            max: self.max,
        }
    }

    /// Bytes held now, all connections together.
    pub fn used(&self) -> usize {
        self.used.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl FrameShare {
    /// Holds `pending` bytes from now on; false when the budget is spent.
    fn hold(&mut self, pending: usize) -> bool {
        use std::sync::atomic::Ordering;
        if pending <= self.held {
            self.used.fetch_sub(self.held - pending, Ordering::SeqCst);
            self.held = pending;
            return true;
        }
        let more = pending - self.held;
        let before = self.used.fetch_add(more, Ordering::SeqCst);
        if before + more > self.max {
            self.used.fetch_sub(more, Ordering::SeqCst);
            return false;
        }
        self.held = pending;
        true
    }
}

impl Drop for FrameShare {
    fn drop(&mut self) {
        self.used
            .fetch_sub(self.held, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A connection ends after this reply.
struct Close(Value);

async fn connection(
    ingress: Arc<Ingress>,
    mut stream: TcpStream,
    peer: SocketAddr,
    slot: &super::http::PeerSlot,
    shutdown: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    // No X-Forwarded-For on TCP: the client is the socket peer.
    let client = crate::ingress::net::normalize(peer.ip());
    if !ingress.config.allow.contains(client) {
        crate::telemetry::metrics::ingress_auth_refused("client_not_allowed");
        let _ = write(&mut stream, &error_frame(None, &IngressError::NotAllowed)).await;
        return;
    }
    // Small until the first frame has authenticated the connection.
    let mut decoder = FrameDecoder::new(MAX_AUTH_FRAME.min(ingress.config.max_frame));
    let mut share = ingress.frames.share();
    let mut buffer = vec![0u8; 16 * 1024];
    let mut caller: Option<Caller> = None;
    let mut frame_started: Option<Instant> = None;
    let connected = Instant::now();
    loop {
        // Answer every whole frame received so far.
        loop {
            let frame = match decoder.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(error) => {
                    debug!(%peer, %error, "TCP frame refused");
                    let refusal = match error {
                        FrameError::TooLarge { .. } => IngressError::TooLarge,
                        FrameError::Empty => {
                            IngressError::BadRequest(vec![Problem::new("", error.to_string())])
                        }
                    };
                    crate::telemetry::metrics::ingress_request(
                        "tcp",
                        "frame",
                        refusal.status(),
                        0.0,
                    );
                    let _ = write(&mut stream, &error_frame(None, &refusal)).await;
                    return;
                }
            };
            frame_started = None;
            match handle(&ingress, &mut caller, client, &frame).await {
                Ok(reply) => {
                    if caller.is_some() {
                        decoder.set_max(ingress.config.max_frame);
                        slot.handle().authenticated();
                    }
                    if write(&mut stream, &reply).await.is_err() {
                        return;
                    }
                }
                Err(Close(reply)) => {
                    let _ = write(&mut stream, &reply).await;
                    return;
                }
            }
        }
        if decoder.pending() > 0 && frame_started.is_none() {
            frame_started = Some(Instant::now());
        }
        // A frame started must finish within the read timeout, and so must
        // the first (authenticating) one; otherwise the idle timeout.
        let deadline = match (frame_started, &caller) {
            (Some(started), _) => started + ingress.config.read_timeout,
            (None, None) => connected + ingress.config.read_timeout,
            (None, Some(_)) => Instant::now() + ingress.config.idle_timeout,
        };
        let read = tokio::select! {
            _ = shutdown.cancelled() => return,
            read = tokio::time::timeout_at(deadline.into(), stream.read(&mut buffer)) => read,
        };
        match read {
            Err(_) => {
                crate::telemetry::metrics::ingress_connection_timed_out("tcp");
                debug!(%peer, half_frame = frame_started.is_some(), "TCP connection timed out");
                return;
            }
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(read)) => {
                decoder.push(&buffer[..read]);
                // Whole frames are answered (and dropped) before the next
                // read, so what is held is at most one unfinished frame.
                if !share.hold(decoder.pending()) {
                    crate::telemetry::metrics::ingress_connection_refused("tcp_frame_budget");
                    warn!(%peer, "TCP connection closed: the partial-frame memory budget is spent");
                    let refusal = IngressError::Unavailable(
                        "the ingress is holding too many unfinished frames; retry later".into(),
                    );
                    let _ = write(&mut stream, &error_frame(None, &refusal)).await;
                    return;
                }
            }
        }
    }
}

/// How long a reply may take to be written: a client that stops reading
/// does not hold its connection.
const WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

async fn write(stream: &mut TcpStream, reply: &Value) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(reply)?;
    match tokio::time::timeout(WRITE_TIMEOUT, stream.write_all(&encode(&bytes))).await {
        Ok(result) => result,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "reply not read by the client",
        )),
    }
}

fn error_frame(id: Option<u64>, error: &IngressError) -> Value {
    json!({"id": id, "ok": false, "status": error.status(), "error": error.body()})
}

fn ok_frame(id: Option<u64>, body: Value) -> Value {
    json!({"id": id, "ok": true, "status": 200, "body": body})
}

async fn handle(
    ingress: &Ingress,
    caller: &mut Option<Caller>,
    client: std::net::IpAddr,
    frame: &[u8],
) -> Result<Value, Close> {
    let started = Instant::now();
    // Not JSON at all: this is not a client of ours.
    let request: TcpRequest = protocol::parse(frame).map_err(|problems| {
        crate::telemetry::metrics::ingress_request("tcp", "frame", 400, 0.0);
        Close(error_frame(None, &IngressError::BadRequest(problems)))
    })?;
    let id = request.id;
    let op = request.op;
    let Some(authenticated) = caller.as_ref() else {
        if op != TcpOp::Auth {
            crate::telemetry::metrics::ingress_auth_refused("key_missing");
            crate::telemetry::metrics::ingress_request("tcp", "auth", 401, 0.0);
            return Err(Close(error_frame(id, &IngressError::Unauthorized)));
        }
        let auth: AuthRequest = body(&request.body).map_err(|error| {
            crate::telemetry::metrics::ingress_request("tcp", "auth", 400, 0.0);
            Close(error_frame(id, &error))
        })?;
        if !key_matches(auth.key.as_bytes(), &ingress.config.ingress_key) {
            crate::telemetry::metrics::ingress_auth_refused("key_wrong");
            crate::telemetry::metrics::ingress_request("tcp", "auth", 401, 0.0);
            return Err(Close(error_frame(id, &IngressError::Unauthorized)));
        }
        if !valid_executor_id(&auth.executor_id) {
            let error = IngressError::BadRequest(vec![Problem::new(
                "body.executor_id",
                "an executor id of 1 to 64 characters A-Z a-z 0-9 _ - is required",
            )]);
            return Err(Close(error_frame(id, &error)));
        }
        *caller = Some(Caller {
            executor_id: auth.executor_id.clone(),
            client,
            transport: "tcp",
        });
        crate::telemetry::metrics::ingress_request("tcp", "auth", 200, 0.0);
        return Ok(ok_frame(id, json!({"executor_id": auth.executor_id})));
    };
    let result: Result<Value, IngressError> = async {
        match op {
            TcpOp::Auth => Err(IngressError::Conflict("already authenticated".into())),
            TcpOp::Register => {
                let reply = ingress
                    .register(authenticated, body(&request.body)?)
                    .await?;
                serde_json::to_value(reply).map_err(|error| {
                    IngressError::Unavailable(format!("encoding the reply: {error}"))
                })
            }
            TcpOp::Poll => {
                let reply = ingress.poll(authenticated, body(&request.body)?).await?;
                serde_json::to_value(reply).map_err(|error| {
                    IngressError::Unavailable(format!("encoding the reply: {error}"))
                })
            }
            TcpOp::Report => {
                let reply = ingress
                    .report(authenticated, body(&request.body)?, None)
                    .await?;
                serde_json::to_value(reply).map_err(|error| {
                    IngressError::Unavailable(format!("encoding the reply: {error}"))
                })
            }
            TcpOp::Log => {
                ingress
                    .log_chunk(authenticated, body(&request.body)?)
                    .await?;
                Ok(json!({"accepted": true}))
            }
        }
    }
    .await;
    let name = match op {
        TcpOp::Auth => "auth",
        TcpOp::Register => "register",
        TcpOp::Poll => "poll",
        TcpOp::Report => "report",
        TcpOp::Log => "log",
    };
    let seconds = started.elapsed().as_secs_f64();
    match result {
        Ok(body) => {
            crate::telemetry::metrics::ingress_request("tcp", name, 200, seconds);
            Ok(ok_frame(id, body))
        }
        Err(error) => {
            crate::telemetry::metrics::ingress_request("tcp", name, error.status(), seconds);
            Ok(error_frame(id, &error))
        }
    }
}

/// A request body, with problems' paths under `body.`.
fn body<T: serde::de::DeserializeOwned>(value: &Value) -> Result<T, IngressError> {
    let bytes = serde_json::to_vec(value)
        .map_err(|error| IngressError::BadRequest(vec![Problem::new("body", error.to_string())]))?;
    protocol::parse(&bytes).map_err(|problems| {
        IngressError::BadRequest(
            problems
                .into_iter()
                .map(|problem| {
                    Problem::new(
                        if problem.path.is_empty() {
                            "body".to_owned()
                        } else {
                            format!("body.{}", problem.path)
                        },
                        problem.message,
                    )
                })
                .collect(),
        )
    })
}
