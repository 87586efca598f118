//! The HTTP listener: executor routes, the execute API and the operations
//! endpoints, behind one guard (client address, allowlist, keys) and the
//! per-peer connection limit.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, MatchedPath, Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Extension, Json, Router};
use futures_util::stream::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use uuid::Uuid;

use super::api::CancelRequest;
use super::protocol::{
    self, valid_executor_id, LogRequest, PollRequest, RegisterRequest, ReportRequest,
};
use super::{key_matches, Caller, Ingress, IngressError};
use crate::contract::Problem;
use crate::policy::principals::Principal;

/// The executor id header of executor routes.
pub const EXECUTOR_HEADER: &str = "x-execplane-executor";
/// How long shutdown waits for open HTTP requests.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How long an upload waits for a slot before it is answered 503.
const UPLOAD_SLOT_WAIT: Duration = Duration::from_secs(10);
/// How long an upload's body may take to arrive once it holds a slot.
const UPLOAD_READ_TIMEOUT: Duration = Duration::from_secs(60);
/// How often an SSE stream looks for new events.
/// How long an event stream waits for the feed before it reads anyway (a
/// safety net: the feed wakes it when its attempt has new events).
const SSE_FALLBACK: Duration = Duration::from_secs(15);

impl IntoResponse for IngressError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, Json(self.body())).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// Open connections per client address.
pub struct PeerLimits {
    max: usize,
    max_total: usize,
    open: Arc<Mutex<OpenConnections>>,
}

#[derive(Debug, Default)]
struct OpenConnections {
    by_peer: HashMap<IpAddr, usize>,
    total: usize,
    /// Connections a principal's key (or console session) was presented
    /// on, per principal: each connection counts for the first it carried.
    by_principal: HashMap<String, usize>,
    max_per_principal: usize,
    /// The connections open now (a request may outlive its connection's
    /// slot: closed to make room, or by its client), each with the
    /// principal it counts for.
    live: HashMap<u64, Option<String>>,
    next_id: u64,
    /// Connections that have not yet presented a key, oldest first: at
    /// the global cap the oldest is closed to make room, so clients
    /// without a key never hold the cap against executors that have one.
    unauthenticated: std::collections::BTreeMap<u64, (IpAddr, CancellationToken)>,
}

impl OpenConnections {
    /// `id` is closed: it counts for its principal no more.
    fn release_principal(&mut self, id: u64) {
        if let Some(Some(principal)) = self.live.remove(&id) {
            if let Some(count) = self.by_principal.get_mut(&principal) {
                *count -= 1;
                if *count == 0 {
                    self.by_principal.remove(&principal);
                }
            }
        }
    }

    fn release(&mut self, address: IpAddr) {
        self.total = self.total.saturating_sub(1);
        if let Some(count) = self.by_peer.get_mut(&address) {
            *count -= 1;
            if *count == 0 {
                self.by_peer.remove(&address);
            }
        }
    }
}

/// Holds one connection's place; released on drop (or when the
/// connection is closed to make room, [`PeerSlot::evicted`]).
pub struct PeerSlot {
    address: IpAddr,
    handle: SlotHandle,
    evicted: CancellationToken,
}

/// What a request on a connection uses to mark it authenticated, or to
/// close it.
#[derive(Clone, Debug)]
pub struct SlotHandle {
    id: u64,
    open: Arc<Mutex<OpenConnections>>,
    close: CancellationToken,
}

impl SlotHandle {
    /// Closes the connection at once, whatever it is sending.
    pub fn close(&self) {
        self.close.cancel();
    }

    /// The connection presented a valid key: it is never closed to make
    /// room. Idempotent.
    pub fn authenticated(&self) {
        lock(&self.open).unauthenticated.remove(&self.id);
    }

    /// The connection presented `principal`'s key or session: it counts
    /// toward that principal's connections, and is then never closed to
    /// make room. False, and nothing marked, when the principal already
    /// holds its most (one viewer's streams cannot take every slot from
    /// every tenant and executor).
    pub fn authenticated_as(&self, principal: &str) -> bool {
        let mut open = lock(&self.open);
        match open.live.get(&self.id) {
            // Gone already: nothing to count, nothing that would release it.
            None => return true,
            Some(Some(_)) => {}
            Some(None) => {
                let held = open.by_principal.get(principal).copied().unwrap_or(0);
                if held >= open.max_per_principal {
                    return false;
                }
                *open.by_principal.entry(principal.to_owned()).or_insert(0) += 1;
                open.live.insert(self.id, Some(principal.to_owned()));
            }
        }
        open.unauthenticated.remove(&self.id);
        true
    }
}

fn lock(open: &Mutex<OpenConnections>) -> std::sync::MutexGuard<'_, OpenConnections> {
    open.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl PeerSlot {
    pub fn handle(&self) -> SlotHandle {
        self.handle.clone()
    }

    /// Cancelled when a request closed its connection ([`SlotHandle::close`]).
    pub fn closed(&self) -> CancellationToken {
        self.handle.close.clone()
    }

    /// Cancelled when the connection was closed to make room for another:
    /// its place is already released, and it must stop at once.
    pub fn evicted(&self) -> CancellationToken {
        self.evicted.clone()
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = lock(&self.handle.open);
        // Closed to make room, its place is released already; a principal
        // its first request named meanwhile is not.
        open.release_principal(self.handle.id);
        if self.evicted.is_cancelled() {
            return;
        }
        open.unauthenticated.remove(&self.handle.id);
        open.release(self.address);
    }
}

impl PeerLimits {
    /// At most `max` connections per peer address and `max_total` in all:
    /// a client with many source addresses is held by the second.
    pub fn new(max: usize, max_total: usize) -> Self {
        let open = OpenConnections {
            max_per_principal: max_total,
            ..OpenConnections::default()
        };
        Self {
            max,
            max_total,
            open: Arc::new(Mutex::new(open)),
        }
    }

    /// At most `max` connections carrying one principal's key or session.
    pub fn per_principal(self, max: usize) -> Self {
        lock(&self.open).max_per_principal = max;
        self
    }

    /// A slot for one more connection from `address`, if it has one left
    /// and the whole listener has one, or can make one by closing its
    /// oldest connection that has not presented a key.
    pub fn acquire(&self, address: IpAddr) -> Option<PeerSlot> {
        let address = super::net::normalize(address);
        let mut open = lock(&self.open);
        if open.by_peer.get(&address).copied().unwrap_or(0) >= self.max {
            return None;
        }
        if open.total >= self.max_total {
            let (evicted_id, (oldest, evicted)) = open.unauthenticated.pop_first()?;
            // Cancelled under the lock, so its Drop releases nothing twice.
            evicted.cancel();
            open.release_principal(evicted_id);
            open.release(oldest);
            crate::telemetry::metrics::ingress_connection_evicted();
            // The per-peer count may have been freed for this very address.
            if open.by_peer.get(&address).copied().unwrap_or(0) >= self.max {
                return None;
            }
        }
        *open.by_peer.entry(address).or_insert(0) += 1;
        open.total += 1;
        let id = open.next_id;
        open.next_id += 1;
        open.live.insert(id, None);
        let evicted = CancellationToken::new();
        open.unauthenticated.insert(id, (address, evicted.clone()));
        Some(PeerSlot {
            address,
            handle: SlotHandle {
                id,
                open: self.open.clone(),
                close: CancellationToken::new(),
            },
            evicted,
        })
    }
}

/// A connection that is closed after `idle` without reading or writing a
/// byte, and that holds its peer slot while open.
pub struct GuardedStream {
    inner: TcpStream,
    idle: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
    _slot: PeerSlot,
}

impl GuardedStream {
    fn touch(&mut self) {
        self.sleep
            .as_mut()
            .reset(tokio::time::Instant::now() + self.idle);
    }

    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Error> {
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "idle connection closed",
            )),
            Poll::Pending => Poll::Pending,
        }
    }
}

use std::future::Future;

impl AsyncRead for GuardedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    self.touch();
                }
                Poll::Ready(result)
            }
            Poll::Pending => match self.poll_idle(cx) {
                Poll::Ready(error) => Poll::Ready(Err(error)),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl AsyncWrite for GuardedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        match result {
            Poll::Ready(Ok(written)) if written > 0 => self.touch(),
            // A client that stops reading holds nothing past the idle timeout.
            Poll::Pending => {
                if let Poll::Ready(error) = self.poll_idle(cx) {
                    return Poll::Ready(Err(error));
                }
            }
            _ => {}
        }
        result
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Pending => match self.poll_idle(cx) {
                Poll::Ready(error) => Poll::Ready(Err(error)),
                Poll::Pending => Poll::Pending,
            },
            ready => ready,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The socket peer of a request.
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub SocketAddr);

/// The resolved client address, set by the guard.
#[derive(Clone, Copy, Debug)]
pub struct Client(pub IpAddr);

/// Serves HTTP/1.1 until `shutdown`. Each connection holds a slot of the
/// per-peer and global connection limits (over either it is closed at
/// once), is closed when idle, and must send each request's headers within
/// the header timeout: a client trickling bytes cannot hold a connection.
pub async fn serve(
    ingress: Arc<Ingress>,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let app = router(ingress.clone());
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    warn!(%error, "ingress accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some(slot) = ingress.peers.acquire(peer.ip()) else {
            crate::telemetry::metrics::ingress_connection_refused("http");
            warn!(%peer, "connection over the connection limits closed");
            continue;
        };
        let (handle, evicted, closed) = (slot.handle(), slot.evicted(), slot.closed());
        let _ = stream.set_nodelay(true);
        let idle = ingress.config.idle_timeout;
        let stream = GuardedStream {
            inner: stream,
            idle,
            sleep: Box::pin(tokio::time::sleep(idle)),
            _slot: slot,
        };
        let service =
            hyper_util::service::TowerToHyperService::new(tower::ServiceExt::map_request(
                app.clone(),
                move |mut request: Request<hyper::body::Incoming>| {
                    request.extensions_mut().insert(ConnectInfo(Peer(peer)));
                    request.extensions_mut().insert(handle.clone());
                    request
                },
            ));
        let header_timeout = ingress.config.header_timeout;
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_timeout)
                .keep_alive(true);
            let connection =
                builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                // Closed to make room: it never presented a key.
                _ = evicted.cancelled() => {}
                // A download past its time (`artifact_response`).
                _ = closed.cancelled() => {}
                _ = shutdown.cancelled() => {
                    // Finish the request in flight, take no new one.
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
    // Graceful, within bounds: long polls and event streams end at
    // shutdown; whatever still holds on after the grace is cut.
    if tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        warn!("ingress HTTP connections still open after the shutdown grace; closing");
        connections.shutdown().await;
    }
    info!("ingress HTTP stopped");
    Ok(())
}

/// Every route, as (method, path); `docs/openapi.yaml` documents exactly
/// these (a unit test holds it to that).
pub const ROUTES: [(&str, &str); 16] = [
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("post", "/v1/executor/register"),
    ("post", "/v1/executor/poll"),
    ("post", "/v1/executor/reports"),
    ("post", "/v1/executor/logs"),
    ("post", "/v1/jobs"),
    ("get", "/v1/jobs/{*job_id}"),
    ("get", "/v1/attempts/{attempt_id}"),
    ("get", "/v1/attempts/{attempt_id}/events"),
    ("post", "/v1/attempts/{attempt_id}/cancel"),
    ("post", "/v1/attempts/{attempt_id}/approve"),
    ("put", "/v1/executor/outputs/{attempt_id}/{name}"),
    ("get", "/v1/attempts/{attempt_id}/artifacts"),
    ("get", "/v1/attempts/{attempt_id}/artifacts/{name}"),
];

pub fn router(ingress: Arc<Ingress>) -> Router {
    let max_body = ingress.config.max_body;
    Router::new()
        .route(ROUTES[0].1, get(|| async { "ok\n" }))
        .route(ROUTES[1].1, get(readyz))
        .route(ROUTES[2].1, get(metrics))
        .route(ROUTES[3].1, post(register))
        .route(ROUTES[4].1, post(poll))
        .route(ROUTES[5].1, post(report))
        .route(ROUTES[6].1, post(log))
        .route(ROUTES[7].1, post(submit))
        .route(ROUTES[8].1, get(job))
        .route(ROUTES[9].1, get(attempt))
        .route(ROUTES[10].1, get(events))
        .route(ROUTES[11].1, post(cancel))
        .route(ROUTES[12].1, post(approve))
        .route(ROUTES[13].1, put(output))
        .route(ROUTES[14].1, get(artifacts))
        .route(ROUTES[15].1, get(artifact))
        .merge(super::console::router())
        .fallback(|| async { IngressError::NotFound("route".into()) })
        .layer(axum::middleware::from_fn_with_state(ingress.clone(), guard))
        .layer(axum::extract::DefaultBodyLimit::max(max_body))
        .with_state(ingress)
}

pub(crate) const EXECUTE_API_OFF: &str =
    "the execute API (off: this ingress has no EXECPLANE_API_KEY and its policy no principals)";

/// Which key a route needs.
enum Needs {
    Nothing,
    ExecutorKey,
    ApiKey,
}

fn needs(path: &str) -> Needs {
    if path.starts_with("/v1/executor/") {
        Needs::ExecutorKey
    } else if path.starts_with("/v1/") {
        Needs::ApiKey
    } else {
        Needs::Nothing
    }
}

fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    let token = value
        .strip_prefix(b"Bearer ")
        .or_else(|| value.strip_prefix(b"bearer "))?;
    Some(token)
}

/// Client address and allowlist, then the route's key; counts every
/// request by route and result.
async fn guard(
    State(ingress): State<Arc<Ingress>>,
    ConnectInfo(Peer(peer)): ConnectInfo<Peer>,
    mut request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    // Lossy, so that one odd byte cannot make a whole header line vanish
    // (the unreadable hop then refuses the request).
    let forwarded: Vec<String> = request
        .headers()
        .get_all("x-forwarded-for")
        .iter()
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
        .collect();
    let client = ingress
        .config
        .resolver
        .resolve(peer.ip(), forwarded.iter().map(String::as_str));
    let admitted = match client {
        Some(client) => admit(&ingress, client, &mut request).map(|()| client),
        None => {
            crate::telemetry::metrics::ingress_auth_refused("forwarded_for_unreadable");
            Err(IngressError::NotAllowed)
        }
    };
    let response = match admitted {
        Ok(client) => {
            request.extensions_mut().insert(Client(client));
            next.run(request).await
        }
        Err(error) => error.into_response(),
    };
    crate::telemetry::metrics::ingress_request(
        "http",
        &route,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

/// Counts the request's connection toward `principal`'s (the shared key,
/// the operator's own client, is not held to a number).
fn hold_for(
    request: &Request,
    principal: &crate::policy::principals::Principal,
) -> Result<(), IngressError> {
    let Some(slot) = request.extensions().get::<SlotHandle>() else {
        return Ok(());
    };
    if principal.is_shared_key() || slot.authenticated_as(&principal.name) {
        return Ok(());
    }
    crate::telemetry::metrics::ingress_auth_refused("principal_connections");
    Err(IngressError::TooMany(format!(
        "`{}` holds its most open connections (EXECPLANE_INGRESS_MAX_CONNECTIONS_PER_PRINCIPAL); close some",
        principal.name
    )))
}

fn admit(ingress: &Ingress, client: IpAddr, request: &mut Request) -> Result<(), IngressError> {
    if !ingress.config.allow.contains(client) {
        crate::telemetry::metrics::ingress_auth_refused("client_not_allowed");
        return Err(IngressError::NotAllowed);
    }
    let needs = needs(request.uri().path());
    if matches!(needs, Needs::Nothing) {
        // A console page with a live session holds its connection as
        // its principal's.
        if let Some(principal) = super::console::session_principal(ingress, request.headers()) {
            hold_for(request, &principal)?;
        }
        return Ok(());
    }
    if matches!(needs, Needs::ApiKey) && !ingress.api_on() {
        return Err(IngressError::NotFound(EXECUTE_API_OFF.into()));
    }
    let Some(presented) = bearer(request.headers()).map(<[u8]>::to_vec) else {
        crate::telemetry::metrics::ingress_auth_refused("key_missing");
        return Err(IngressError::Unauthorized);
    };
    match needs {
        Needs::ExecutorKey if !key_matches(&presented, &ingress.config.ingress_key) => {
            crate::telemetry::metrics::ingress_auth_refused("key_wrong");
            return Err(IngressError::Unauthorized);
        }
        Needs::ExecutorKey | Needs::Nothing => {}
        Needs::ApiKey => match ingress.principal_of(&presented) {
            // No key of its own: the execute API is off, whatever is presented.
            Ok(None) => return Err(IngressError::NotFound(EXECUTE_API_OFF.into())),
            Ok(Some(principal)) => {
                hold_for(request, &principal)?;
                request.extensions_mut().insert(principal);
            }
            Err(error) => {
                crate::telemetry::metrics::ingress_auth_refused("key_wrong");
                return Err(error);
            }
        },
    }
    if let Some(slot) = request.extensions().get::<SlotHandle>() {
        slot.authenticated();
    }
    if matches!(needs, Needs::ExecutorKey) {
        let executor_id = request
            .headers()
            .get(EXECUTOR_HEADER)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        if !valid_executor_id(&executor_id) {
            return Err(IngressError::BadRequest(vec![Problem::new(
                format!("header {EXECUTOR_HEADER}"),
                "an executor id of 1 to 64 characters A-Z a-z 0-9 _ - is required",
            )]));
        }
        request.extensions_mut().insert(Caller {
            executor_id,
            client,
            transport: "http",
        });
    }
    Ok(())
}

fn body(result: Result<Bytes, BytesRejection>) -> Result<Bytes, IngressError> {
    result.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            IngressError::TooLarge
        } else {
            IngressError::BadRequest(vec![Problem::new("", rejection.body_text())])
        }
    })
}

fn traceparent(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("traceparent")
        .and_then(|value| value.to_str().ok())
        .filter(|value| crate::contract::is_traceparent(value))
}

fn caller(request_caller: Option<axum::Extension<Caller>>) -> Result<Caller, IngressError> {
    request_caller
        .map(|axum::Extension(caller)| caller)
        .ok_or(IngressError::Unauthorized)
}

async fn readyz(State(ingress): State<Arc<Ingress>>) -> Response {
    match ingress.ready().await {
        Ok(warnings) => {
            let mut body = String::from("ready\n");
            for warning in warnings {
                body.push_str(&format!("warning: {warning}\n"));
            }
            (StatusCode::OK, body).into_response()
        }
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        )
            .into_response(),
    }
}

async fn metrics(State(ingress): State<Arc<Ingress>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        ingress.metrics_text().await,
    )
        .into_response()
}

async fn register(
    State(ingress): State<Arc<Ingress>>,
    request_caller: Option<axum::Extension<Caller>>,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Json<protocol::RegisterReply>, IngressError> {
    let caller = caller(request_caller)?;
    let request: RegisterRequest =
        protocol::parse(&body(raw)?).map_err(IngressError::BadRequest)?;
    Ok(Json(ingress.register(&caller, request).await?))
}

async fn poll(
    State(ingress): State<Arc<Ingress>>,
    request_caller: Option<axum::Extension<Caller>>,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Json<protocol::PollReply>, IngressError> {
    let caller = caller(request_caller)?;
    let request: PollRequest = protocol::parse(&body(raw)?).map_err(IngressError::BadRequest)?;
    Ok(Json(ingress.poll(&caller, request).await?))
}

async fn report(
    State(ingress): State<Arc<Ingress>>,
    headers: HeaderMap,
    request_caller: Option<axum::Extension<Caller>>,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Json<protocol::ReportReply>, IngressError> {
    let caller = caller(request_caller)?;
    let request: ReportRequest = protocol::parse(&body(raw)?).map_err(IngressError::BadRequest)?;
    Ok(Json(
        ingress
            .report(&caller, request, traceparent(&headers))
            .await?,
    ))
}

async fn log(
    State(ingress): State<Arc<Ingress>>,
    request_caller: Option<axum::Extension<Caller>>,
    raw: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, IngressError> {
    let caller = caller(request_caller)?;
    let request: LogRequest = protocol::parse(&body(raw)?).map_err(IngressError::BadRequest)?;
    ingress.log_chunk(&caller, request).await?;
    Ok(StatusCode::ACCEPTED)
}

/// An executor's output file: the body is read only once an upload slot
/// is free ([`super::MAX_CONCURRENT_UPLOADS`]), and at most
/// `EXECPLANE_INGRESS_MAX_OUTPUT` bytes of it.
async fn output(
    State(ingress): State<Arc<Ingress>>,
    Path((id, name)): Path<(String, String)>,
    query: Result<
        axum::extract::Query<protocol::OutputQuery>,
        axum::extract::rejection::QueryRejection,
    >,
    headers: HeaderMap,
    request_caller: Option<axum::Extension<Caller>>,
    body: axum::body::Body,
) -> Result<(StatusCode, Json<crate::contract::OutputArtifact>), IngressError> {
    let caller = caller(request_caller)?;
    let attempt_id = attempt_id(&id)?;
    let axum::extract::Query(query) = query.map_err(|rejection| {
        IngressError::BadRequest(vec![Problem::new("query", rejection.body_text())])
    })?;
    let max = ingress.config.max_output;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<usize>().ok());
    if declared.is_some_and(|length| length > max) {
        return Err(IngressError::TooLarge);
    }
    let media_type = match headers.get(header::CONTENT_TYPE) {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .filter(|text| crate::contract::outputs::is_media_type(text))
                .ok_or_else(|| {
                    IngressError::BadRequest(vec![Problem::new(
                        "header content-type",
                        "not a media type (1 to 128 printable ASCII characters)",
                    )])
                })?,
        ),
    };
    // Who may upload what is settled before a slot is taken or a byte read.
    let attempt = ingress
        .admit_output(&caller, attempt_id, &name, &query)
        .await?;
    let _slot = tokio::time::timeout(UPLOAD_SLOT_WAIT, ingress.uploads.acquire())
        .await
        .ok()
        .and_then(Result::ok)
        .ok_or_else(|| IngressError::Unavailable("too many uploads at once; retry".into()))?;
    // A slot is held for the body's whole read, and no longer than this: a
    // client trickling bytes cannot keep it.
    let bytes = tokio::time::timeout(UPLOAD_READ_TIMEOUT, axum::body::to_bytes(body, max))
        .await
        .map_err(|_| IngressError::BadRequest(vec![Problem::new(
            "",
            format!("the body did not arrive within {} s", UPLOAD_READ_TIMEOUT.as_secs()),
        )]))?
        // Over the limit, or the client went away: either way nothing is stored.
        .map_err(|_| IngressError::TooLarge)?;
    let stored = ingress
        .store_output(&attempt, attempt_id, &name, media_type, query, bytes)
        .await?;
    Ok((StatusCode::CREATED, Json(stored)))
}

/// The principal the guard authenticated (execute API routes only).
type Who = Option<axum::Extension<Principal>>;

fn who(principal: Who) -> Result<Principal, IngressError> {
    principal
        .map(|axum::Extension(principal)| principal)
        .ok_or(IngressError::Unauthorized)
}

async fn submit(
    State(ingress): State<Arc<Ingress>>,
    principal: Who,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<super::api::Submitted>), IngressError> {
    let principal = who(principal)?;
    let submitted = ingress
        .submit(&principal, &body(raw)?, traceparent(&headers))
        .await?;
    Ok((StatusCode::ACCEPTED, Json(submitted)))
}

fn attempt_id(text: &str) -> Result<Uuid, IngressError> {
    Uuid::parse_str(text)
        .map_err(|_| IngressError::BadRequest(vec![Problem::new("attempt_id", "not a UUID")]))
}

async fn cancel(
    State(ingress): State<Arc<Ingress>>,
    principal: Who,
    Path(id): Path<String>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<super::api::CancelAccepted>), IngressError> {
    let attempt_id = attempt_id(&id)?;
    let raw = body(raw)?;
    let request: CancelRequest = if raw.iter().all(u8::is_ascii_whitespace) {
        CancelRequest::default()
    } else {
        protocol::parse(&raw).map_err(IngressError::BadRequest)?
    };
    let accepted = ingress
        .cancel(&who(principal)?, attempt_id, request, traceparent(&headers))
        .await?;
    Ok((StatusCode::ACCEPTED, Json(accepted)))
}

async fn approve(
    State(ingress): State<Arc<Ingress>>,
    principal: Who,
    Path(id): Path<String>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<super::api::ApprovalAccepted>), IngressError> {
    let attempt_id = attempt_id(&id)?;
    let request: super::api::ApproveRequest =
        protocol::parse(&body(raw)?).map_err(IngressError::BadRequest)?;
    let accepted = ingress
        .approve(&who(principal)?, attempt_id, request, traceparent(&headers))
        .await?;
    Ok((StatusCode::ACCEPTED, Json(accepted)))
}

async fn attempt(
    State(ingress): State<Arc<Ingress>>,
    principal: Who,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, IngressError> {
    Ok(Json(
        ingress.attempt(&who(principal)?, attempt_id(&id)?).await?,
    ))
}

async fn job(
    State(ingress): State<Arc<Ingress>>,
    principal: Who,
    Path(job_id): Path<String>,
) -> Result<Json<serde_json::Value>, IngressError> {
    Ok(Json(ingress.job(&who(principal)?, &job_id).await?))
}

async fn artifacts(
    State(ingress): State<Arc<Ingress>>,
    principal: Who,
    Path(id): Path<String>,
) -> Result<Json<Vec<super::api::ArtifactView>>, IngressError> {
    let rows = ingress
        .artifacts(&who(principal)?, attempt_id(&id)?)
        .await?;
    Ok(Json(rows.iter().map(Into::into).collect()))
}

/// The header that carries a downloaded artifact's sha256 (hex).
pub const SHA256_HEADER: &str = "x-execplane-sha256";

async fn artifact(
    State(ingress): State<Arc<Ingress>>,
    connection: Option<Extension<SlotHandle>>,
    principal: Who,
    Path((id, name)): Path<(String, String)>,
) -> Result<Response, IngressError> {
    let download = ingress
        .artifact(&who(principal)?, attempt_id(&id)?, &name)
        .await?;
    let connection = connection.map(|Extension(handle)| handle);
    Ok(artifact_response(
        download,
        connection,
        ingress.config.download_timeout,
    ))
}

/// An artifact's bytes as a download: its media type, its sha256 (hex in
/// [`SHA256_HEADER`], and as RFC 9530 `Repr-Digest`), never sniffed or
/// rendered by a browser. Sent in chunks by a body that owns the download
/// slot, so the slot bounds the memory of downloads still being sent, not
/// only of those being read. A download not sent whole within `timeout`
/// closes its `connection`, which drops the body and frees the slot: a
/// client that reads a byte now and then (never idle long enough to be
/// closed for it) holds a slot no longer than that.
pub fn artifact_response(
    download: super::api::Download,
    connection: Option<SlotHandle>,
    timeout: Duration,
) -> Response {
    use base64::Engine;
    let super::api::Download { row, bytes, slot } = download;
    let sent = CancellationToken::new();
    if let Some(connection) = connection {
        let sent = sent.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = sent.cancelled() => {}
                () = tokio::time::sleep(timeout) => {
                    warn!(timeout_ms = timeout.as_millis() as u64, "an artifact download not sent within EXECPLANE_INGRESS_DOWNLOAD_TIMEOUT: its connection is closed");
                    connection.close();
                }
            }
        });
    }
    // Dropped with the body, sent whole or not.
    let sent = sent.drop_guard();
    let row = &row;
    let digest = hex::decode(&row.sha256).unwrap_or_default();
    let headers = [
        (
            header::CONTENT_TYPE,
            HeaderValue::from_str(&row.media_type)
                .unwrap_or(HeaderValue::from_static("application/octet-stream")),
        ),
        (
            header::CONTENT_DISPOSITION,
            // Artifact names are letters, digits, `.`, `_` and `-`.
            HeaderValue::from_str(&format!("attachment; filename=\"{}\"", row.name))
                .unwrap_or(HeaderValue::from_static("attachment")),
        ),
        (
            header::HeaderName::from_static(SHA256_HEADER),
            HeaderValue::from_str(&row.sha256).unwrap_or(HeaderValue::from_static("")),
        ),
        (
            header::HeaderName::from_static("repr-digest"),
            HeaderValue::from_str(&format!(
                "sha-256=:{}:",
                base64::engine::general_purpose::STANDARD.encode(digest)
            ))
            .unwrap_or(HeaderValue::from_static("")),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        // A tenant's file is never a page of the ingress's origin, even
        // if a browser were to render it.
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("default-src 'none'; sandbox"),
        ),
    ];
    const CHUNK: usize = 64 * 1024;
    let bytes = Bytes::from(bytes);
    let chunks = (0..bytes.len())
        .step_by(CHUNK)
        .map(move |at| Ok::<_, Infallible>(bytes.slice(at..(at + CHUNK).min(bytes.len()))));
    let body = futures_util::stream::unfold(
        (chunks, Some(slot), sent),
        |(mut chunks, slot, sent)| async move {
            chunks.next().map(|chunk| (chunk, (chunks, slot, sent)))
        },
    );
    (headers, axum::body::Body::from_stream(body)).into_response()
}

/// The history as JSON, or, when the client accepts `text/event-stream`,
/// live as Server-Sent Events (`id` = seq, `event` = kind); the stream ends
/// after the terminal event. `Last-Event-ID` resumes after that seq.
async fn events(
    State(ingress): State<Arc<Ingress>>,
    principal: Who,
    Path(id): Path<String>,
    axum::extract::Query(page): axum::extract::Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Response, IngressError> {
    let attempt_id = attempt_id(&id)?;
    let principal = who(principal)?;
    let row = ingress.readable_attempt(&principal, attempt_id).await?;
    let wants_stream = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|accept| accept.contains("text/event-stream"));
    if !wants_stream {
        let events = ingress
            .events_after(attempt_id, page.after.unwrap_or(0))
            .await?;
        return Ok(Json(events).into_response());
    }
    let after = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<i64>().ok())
        .unwrap_or(0);
    let reader = Reader {
        principal,
        tenant: row["tenant"].as_str().unwrap_or_default().to_owned(),
        session: None,
    };
    Ok(live(ingress, reader, attempt_id, after, api_event))
}

/// The execute API's event: `id` = seq, `event` = kind, the event as data.
fn api_event(event: &crate::contract::AttemptEvent) -> Event {
    Event::default()
        .id(event.seq.to_string())
        .event(event.body.kind())
        .json_data(event)
        .unwrap_or_else(|_| Event::default().comment("unencodable event"))
}

/// An attempt's events after `after`, live as Server-Sent Events until its
/// terminal event, each as `render` makes it (the execute API's stream and
/// the console's).
pub fn live(
    ingress: Arc<Ingress>,
    reader: Reader,
    attempt_id: Uuid,
    after: i64,
    render: fn(&crate::contract::AttemptEvent) -> Event,
) -> Response {
    Sse::new(event_stream(ingress, reader, attempt_id, after, render))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// `GET /v1/attempts/{id}/events?after=SEQ`: the page after that seq.
#[derive(Debug, serde::Deserialize)]
struct EventsQuery {
    after: Option<i64>,
}

/// Who follows a live stream, and the tenant of its attempt: checked
/// against the policy in force before each event is sent and each time
/// the stream wakes, so a reload that takes the principal's reading of
/// the tenant away (or, for the console, the end of its session) ends
/// the stream before it sends anything more.
pub struct Reader {
    pub principal: Principal,
    pub tenant: String,
    /// The console session the stream was opened in.
    pub session: Option<String>,
}

impl Reader {
    fn may_read(&self, ingress: &Ingress) -> bool {
        ingress.still_reads(&self.principal, &self.tenant)
            && self
                .session
                .as_ref()
                .is_none_or(|token| ingress.sessions.is_live(token))
    }
}

struct StreamState {
    ingress: Arc<Ingress>,
    reader: Reader,
    attempt_id: Uuid,
    after: i64,
    pending: std::collections::VecDeque<crate::contract::AttemptEvent>,
    done: bool,
    /// Wakes the stream when its attempt has new events.
    watch: super::feed::Watch,
    /// Whether the stream has read its attempt's events once.
    read: bool,
}

fn event_stream(
    ingress: Arc<Ingress>,
    reader: Reader,
    attempt_id: Uuid,
    after: i64,
    render: fn(&crate::contract::AttemptEvent) -> Event,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let watch = ingress.feed.attempt(attempt_id);
    let state = StreamState {
        ingress,
        reader,
        attempt_id,
        after,
        pending: Default::default(),
        done: false,
        watch,
        read: false,
    };
    futures_util::stream::unfold(state, move |mut state| async move {
        loop {
            if !state.reader.may_read(&state.ingress) {
                return None;
            }
            if let Some(event) = state.pending.pop_front() {
                state.after = i64::try_from(event.seq).unwrap_or(i64::MAX);
                if event.body.is_terminal() {
                    state.done = true;
                }
                return Some((Ok(render(&event)), state));
            }
            if state.done || state.ingress.shutdown.is_cancelled() {
                return None;
            }
            if state.read {
                // Everything up to now was read: wait for the feed to say
                // this attempt has more (one read per change, not a poll).
                tokio::select! {
                    _ = state.watch.changed(SSE_FALLBACK) => {}
                    _ = state.ingress.shutdown.cancelled() => return None,
                }
                if !state.reader.may_read(&state.ingress) {
                    return None;
                }
            }
            let first = !state.read;
            state.read = true;
            match state
                .ingress
                .events_after(state.attempt_id, state.after)
                .await
            {
                Ok(events) if !events.is_empty() => {
                    // A full page: more wait; read them once these are
                    // sent, not on the next change.
                    state.read = events.len() < super::api::EVENTS_PAGE;
                    state.pending.extend(events);
                }
                Ok(_) if first => {
                    // A client resuming after the terminal event gets
                    // nothing more: a finished attempt's stream ends.
                    let ended = state
                        .ingress
                        .store
                        .attempt_lease(state.attempt_id)
                        .await
                        .ok()
                        .flatten()
                        .is_none_or(|attempt| attempt.status.is_terminal());
                    if ended {
                        return None;
                    }
                }
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::ROUTES;

    /// A principal holds at most its share of connections; a connection
    /// gone before its first request named a principal holds none of it.
    #[test]
    fn a_principal_holds_its_share_of_connections_and_gives_them_back() {
        let limits = super::PeerLimits::new(8, 8).per_principal(1);
        let address = "127.0.0.1".parse().unwrap();
        let first = limits.acquire(address).unwrap();
        let second = limits.acquire(address).unwrap();
        assert!(first.handle().authenticated_as("alice"));
        assert!(
            first.handle().authenticated_as("alice"),
            "the same connection again"
        );
        assert!(!second.handle().authenticated_as("alice"));
        assert!(second.handle().authenticated_as("bob"));
        drop(first);
        let third = limits.acquire(address).unwrap();
        assert!(third.handle().authenticated_as("alice"));
        // A request that outlives its connection counts for no one.
        let gone = limits.acquire(address).unwrap();
        let handle = gone.handle();
        drop(gone);
        drop(third);
        assert!(handle.authenticated_as("alice"));
        let fourth = limits.acquire(address).unwrap();
        assert!(fourth.handle().authenticated_as("alice"));
    }

    /// A client that reads a little and then slowly (never idle long
    /// enough to be closed for it) is cut off at the download timeout: its
    /// connection is closed, which drops the body and frees its slot. One
    /// sent whole in time is not.
    #[tokio::test]
    async fn a_download_not_sent_in_time_closes_its_connection() {
        use futures_util::StreamExt;
        use std::time::Duration;
        let downloads = std::sync::Arc::new(tokio::sync::Semaphore::new(1));
        let tenants = std::sync::Arc::new(super::super::api::TenantDownloads::default());
        let limits = super::PeerLimits::new(2, 2);
        let download = |bytes: usize| {
            let downloads = downloads.clone();
            let tenant = tenants.take("team-a").unwrap();
            let principal = tenants.take("principal:alice").unwrap();
            async move {
                super::super::api::Download {
                    row: crate::store::ArtifactRow {
                        artifact_id: uuid::Uuid::nil(),
                        attempt_id: uuid::Uuid::nil(),
                        name: "big.log".into(),
                        media_type: "text/plain".into(),
                        size: bytes as i64,
                        sha256: String::new(),
                        producer: "test".into(),
                        retention_class: "logs".into(),
                        storage_key: String::new(),
                        created_at: chrono::Utc::now(),
                    },
                    bytes: vec![b'x'; bytes],
                    slot: (downloads.acquire_owned().await.unwrap(), tenant, principal),
                }
            }
        };
        let timeout = Duration::from_millis(200);

        let slow = limits.acquire("127.0.0.1".parse().unwrap()).unwrap();
        let response =
            super::artifact_response(download(1 << 20).await, Some(slow.handle()), timeout);
        let mut body = response.into_body().into_data_stream();
        assert!(body.next().await.is_some(), "a first chunk");
        tokio::time::sleep(timeout * 2).await;
        assert!(slow.closed().is_cancelled(), "closed at the timeout");
        // The connection's end drops the body, and the slot with it.
        assert_eq!(downloads.available_permits(), 0);
        drop(body);
        assert_eq!(downloads.available_permits(), 1);

        let quick = limits.acquire("127.0.0.1".parse().unwrap()).unwrap();
        let response =
            super::artifact_response(download(1 << 20).await, Some(quick.handle()), timeout);
        let mut body = response.into_body().into_data_stream();
        while body.next().await.is_some() {}
        drop(body);
        tokio::time::sleep(timeout * 2).await;
        assert!(!quick.closed().is_cancelled(), "sent whole in time");
        assert_eq!(downloads.available_permits(), 1);
    }

    #[test]
    fn the_openapi_document_lists_exactly_the_routes() {
        let text = include_str!("../../docs/openapi.yaml");
        let document: serde_yaml::Value = serde_yaml::from_str(text).unwrap();
        let mut documented: Vec<(String, String)> = document["paths"]
            .as_mapping()
            .unwrap()
            .iter()
            .flat_map(|(path, methods)| {
                let path = path.as_str().unwrap().to_owned();
                methods
                    .as_mapping()
                    .unwrap()
                    .keys()
                    .map(move |method| (method.as_str().unwrap().to_owned(), path.clone()))
            })
            .collect();
        let mut served: Vec<(String, String)> = ROUTES
            .iter()
            .map(|(method, path)| ((*method).to_owned(), path.replace("{*", "{")))
            .collect();
        documented.sort();
        served.sort();
        assert_eq!(documented, served);
    }
}
