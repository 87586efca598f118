//! The ingress (docs/INGRESS.md): a front door for executors that do not speak
//! Kafka (HTTP and a length-prefixed TCP protocol) and the internal execute
//! API (HTTP). It opens no second path into the state: reports and commands
//! are validated, checked against the runner catalog and produced to the
//! same topics a Kafka runner or control plane uses; everything it answers
//! with is read from the projection.
//!
//! An executor registers a session; the ingress announces a runner instance
//! for it on `exec.runner-presence.v1`, so placement treats it like any
//! runner, and hands it the leases granted to that instance (read from
//! Postgres, where a lease is committed before its work record is even
//! relayed) when it polls.

pub mod access;
pub mod api;
pub mod console;
pub mod executor;
pub mod feed;
pub mod frame;
pub mod http;
pub mod net;
pub mod protocol;
pub mod tcp;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rdkafka::producer::FutureProducer;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::config::Config;
use crate::contract::Problem;
use crate::kafka::KafkaConfig;
use crate::secrets::Secret;
use crate::store::Store;
use net::{Cidrs, ClientResolver};

/// Shortest shared key accepted.
pub const MIN_KEY_CHARS: usize = 16;

/// Settings, checked: the ingress refuses to start on any problem.
#[derive(Clone, Debug)]
pub struct IngressConfig {
    pub http: SocketAddr,
    pub tcp: SocketAddr,
    pub ingress_key: Secret,
    pub api_key: Secret,
    pub allow: Cidrs,
    pub resolver: ClientResolver,
    pub max_body: usize,
    pub max_frame: usize,
    /// Largest output file an executor uploads.
    pub max_output: usize,
    pub max_connections_per_peer: usize,
    /// Open HTTP connections that carried one principal's key or session.
    pub max_connections_per_principal: usize,
    /// Open HTTP + TCP connections, all peers together.
    pub max_connections: usize,
    /// An HTTP request's headers must arrive within this.
    pub header_timeout: Duration,
    /// Bytes all TCP connections together may hold in unfinished frames.
    pub partial_frame_budget: usize,
    pub read_timeout: Duration,
    pub idle_timeout: Duration,
    /// A download not sent whole within this is cut off: its slot is one
    /// of [`api::MAX_CONCURRENT_DOWNLOADS`], and a client reading slowly
    /// would otherwise hold it as long as it liked.
    pub download_timeout: Duration,
    pub session_ttl: Duration,
    pub presence_interval: Duration,
    pub metrics_upstream: Option<String>,
    /// The operator's policy: a JobSpec it refuses gets 403, nothing produced.
    pub policy: crate::policy::SharedPolicy,
}

impl IngressConfig {
    /// Every reason the configuration cannot start an ingress, at once.
    pub fn from_config(
        config: &Config,
        policy: crate::policy::SharedPolicy,
    ) -> Result<Self, Vec<String>> {
        let mut problems = Vec::new();
        // The executors' key is required; the execute API's is not (the
        // seed's settings name one key): without it the execute API is off,
        // never opened to the executors' key, which would let any executor
        // submit jobs for every tenant.
        if config.ingress.key.is_empty() {
            problems.push(
                "EXECPLANE_INGRESS_KEY (or PLUGIN_CONTROL_PLANE_KEY) is not set: the ingress has no default key"
                    .into(),
            );
        }
        for (name, key) in [
            ("EXECPLANE_INGRESS_KEY", &config.ingress.key),
            ("EXECPLANE_API_KEY", &config.ingress.api_key),
        ] {
            if !key.is_empty() && key.expose().chars().count() < MIN_KEY_CHARS {
                problems.push(format!("{name} is shorter than {MIN_KEY_CHARS} characters"));
            }
        }
        if !config.ingress.key.is_empty() && config.ingress.key == config.ingress.api_key {
            problems.push(
                "EXECPLANE_INGRESS_KEY and EXECPLANE_API_KEY are the same: executors could call the execute API".into(),
            );
        }
        let allow = Cidrs::parse(&config.ingress.allow_cidrs).unwrap_or_else(|error| {
            problems.push(format!("EXECPLANE_INGRESS_ALLOW_CIDRS: {error}"));
            Cidrs::default()
        });
        if allow.is_empty() {
            problems.push("EXECPLANE_INGRESS_ALLOW_CIDRS admits nobody".into());
        }
        let trusted = Cidrs::parse(&config.ingress.trusted_proxies).unwrap_or_else(|error| {
            problems.push(format!("EXECPLANE_INGRESS_TRUSTED_PROXIES: {error}"));
            Cidrs::default()
        });
        if config.ingress.trust_proxy && trusted.is_empty() {
            tracing::warn!(
                "EXECPLANE_INGRESS_TRUST_PROXY is on and EXECPLANE_INGRESS_TRUSTED_PROXIES is empty: \
                 every peer is taken for the one proxy in front, and the rightmost \
                 X-Forwarded-For hop for the client; a client that reaches the ingress \
                 directly can name any address. Name the proxies to close that"
            );
        }
        let bind: Option<IpAddr> = config.ingress.bind.trim().parse().ok();
        if bind.is_none() {
            problems.push(format!(
                "EXECPLANE_INGRESS_BIND: `{}` is not an IP address",
                config.ingress.bind
            ));
        }
        if config.ingress.max_body == 0 || config.ingress.max_frame == 0 {
            problems.push("EXECPLANE_INGRESS_MAX_BODY and _MAX_FRAME must be positive".into());
        }
        let most = crate::contract::outputs::MAX_OUTPUT_BYTES;
        if config.ingress.max_output == 0 || config.ingress.max_output as u64 > most {
            problems.push(format!(
                "EXECPLANE_INGRESS_MAX_OUTPUT must be 1 to {most} bytes"
            ));
        }
        if config.ingress.max_connections_per_peer == 0
            || config.ingress.max_connections == 0
            || config.ingress.max_connections_per_principal == 0
        {
            problems.push(
                "EXECPLANE_INGRESS_MAX_CONNECTIONS, _MAX_CONNECTIONS_PER_PEER and _MAX_CONNECTIONS_PER_PRINCIPAL must be positive"
                    .into(),
            );
        }
        if config.ingress.partial_frame_budget < config.ingress.max_frame {
            problems.push(
                "EXECPLANE_INGRESS_PARTIAL_FRAME_BUDGET must hold at least one frame of EXECPLANE_INGRESS_MAX_FRAME"
                    .into(),
            );
        }
        if config.ingress.header_timeout.as_std().is_zero() {
            problems.push("EXECPLANE_INGRESS_HEADER_TIMEOUT must be positive".into());
        }
        if config.ingress.download_timeout.as_std().is_zero() {
            problems.push("EXECPLANE_INGRESS_DOWNLOAD_TIMEOUT must be positive".into());
        }
        let idle_timeout = config.ingress.idle_timeout.as_std();
        if idle_timeout < Duration::from_millis(2 * protocol::MAX_POLL_WAIT_MS) {
            problems.push(format!(
                "EXECPLANE_INGRESS_IDLE_TIMEOUT must be at least {} s (twice the longest poll)",
                2 * protocol::MAX_POLL_WAIT_MS / 1000
            ));
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        let bind = bind.unwrap_or(IpAddr::from([127, 0, 0, 1]));
        Ok(Self {
            http: SocketAddr::new(bind, config.ingress.http_port),
            tcp: SocketAddr::new(bind, config.ingress.tcp_port),
            ingress_key: config.ingress.key.clone(),
            api_key: config.ingress.api_key.clone(),
            allow,
            resolver: ClientResolver {
                trust_proxy: config.ingress.trust_proxy,
                trusted,
            },
            max_body: config.ingress.max_body,
            max_frame: config.ingress.max_frame,
            max_output: config.ingress.max_output,
            max_connections_per_peer: config.ingress.max_connections_per_peer,
            max_connections_per_principal: config.ingress.max_connections_per_principal,
            max_connections: config.ingress.max_connections,
            header_timeout: config.ingress.header_timeout.as_std(),
            partial_frame_budget: config.ingress.partial_frame_budget,
            read_timeout: config.ingress.read_timeout.as_std(),
            idle_timeout,
            download_timeout: config.ingress.download_timeout.as_std(),
            session_ttl: config.ingress.session_ttl.as_std(),
            presence_interval: config.runner.presence_interval.as_std(),
            metrics_upstream: Some(config.ingress.metrics_upstream.trim().to_owned())
                .filter(|url| !url.is_empty()),
            policy,
        })
    }
}

impl Ingress {
    /// Encodes a record for the broker with the configured framing.
    pub(crate) fn encode<T: serde::Serialize>(
        &self,
        family: crate::codec::Family,
        record: &T,
    ) -> Result<Vec<u8>, IngressError> {
        self.kafka
            .codec
            .encode(family, record)
            .map_err(|error| IngressError::Unavailable(error.to_string()))
    }
}

/// Constant-time comparison of a presented key with the configured one.
pub fn key_matches(presented: &[u8], expected: &Secret) -> bool {
    use subtle::ConstantTimeEq;
    // Lengths differ in constant time too: compare fixed-size digests.
    use sha2::{Digest, Sha256};
    if expected.is_empty() {
        return false;
    }
    let presented = Sha256::digest(presented);
    let expected = Sha256::digest(expected.expose().as_bytes());
    bool::from(presented.ct_eq(&expected))
}

/// Why a request was not served. Each maps to one HTTP status and one TCP
/// error frame.
#[derive(Debug, thiserror::Error)]
pub enum IngressError {
    #[error("invalid request")]
    BadRequest(Vec<Problem>),
    /// Never says why: a missing key and a wrong one look the same.
    #[error("unauthorized")]
    Unauthorized,
    /// The client address is not admitted.
    #[error("forbidden")]
    NotAllowed,
    /// An authenticated executor outside its grant; recorded in the audit.
    #[error("forbidden by policy: {0}")]
    Policy(Refusal),
    /// A JobSpec the operator's policy refuses for its tenant.
    #[error("refused by the operator's policy")]
    PolicyProblems(Vec<Problem>),
    /// A principal without the role the call needs, on what it may see.
    #[error("forbidden: {0}")]
    Forbidden(String),
    #[error("{0} not found")]
    NotFound(String),
    #[error("session unknown: register again")]
    SessionUnknown,
    #[error("{0}")]
    Conflict(String),
    #[error("request too large")]
    TooLarge,
    /// A principal at its cap of open connections.
    #[error("too many connections: {0}")]
    TooMany(String),
    /// Stored content that fails its recorded digest: never served.
    #[error("{0}")]
    Corrupt(String),
    #[error("unavailable: {0}")]
    Unavailable(String),
}

/// Policy refusals, by reason (a bounded metric label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("unknown_executor")]
    UnknownExecutor,
    #[error("executor_disabled")]
    Disabled,
    #[error("runner_type_not_allowed")]
    RunnerType,
    #[error("tenant_not_allowed")]
    Tenant,
    #[error("instance_not_owned")]
    InstanceNotOwned,
}

impl Refusal {
    pub const fn as_str(self) -> &'static str {
        match self {
            Refusal::UnknownExecutor => "unknown_executor",
            Refusal::Disabled => "executor_disabled",
            Refusal::RunnerType => "runner_type_not_allowed",
            Refusal::Tenant => "tenant_not_allowed",
            Refusal::InstanceNotOwned => "instance_not_owned",
        }
    }
}

impl IngressError {
    pub fn status(&self) -> u16 {
        match self {
            IngressError::BadRequest(_) => 400,
            IngressError::Unauthorized => 401,
            IngressError::NotAllowed
            | IngressError::Policy(_)
            | IngressError::PolicyProblems(_)
            | IngressError::Forbidden(_) => 403,
            IngressError::NotFound(_) | IngressError::SessionUnknown => 404,
            IngressError::Conflict(_) => 409,
            IngressError::TooLarge => 413,
            IngressError::TooMany(_) => 429,
            IngressError::Corrupt(_) => 502,
            IngressError::Unavailable(_) => 503,
        }
    }

    /// The JSON body: a stable `error` code, and details only where they
    /// tell the caller nothing it may not know.
    pub fn body(&self) -> serde_json::Value {
        match self {
            IngressError::BadRequest(problems) => {
                json!({"error": "invalid_request", "problems": problems})
            }
            IngressError::Unauthorized => json!({"error": "unauthorized"}),
            IngressError::NotAllowed => json!({"error": "forbidden"}),
            IngressError::Policy(reason) => {
                json!({"error": "forbidden", "reason": reason.as_str()})
            }
            IngressError::PolicyProblems(problems) => {
                json!({"error": "forbidden_by_policy", "problems": problems})
            }
            IngressError::Forbidden(message) => {
                json!({"error": "forbidden", "reason": "role", "message": message})
            }
            IngressError::NotFound(what) => {
                json!({"error": "not_found", "message": format!("{what} not found")})
            }
            IngressError::SessionUnknown => {
                json!({"error": "session_unknown", "message": "register again"})
            }
            IngressError::Conflict(message) => json!({"error": "conflict", "message": message}),
            IngressError::TooLarge => json!({"error": "too_large"}),
            IngressError::TooMany(message) => {
                json!({"error": "too_many_connections", "message": message})
            }
            IngressError::Corrupt(message) => {
                json!({"error": "artifact_corrupt", "message": message})
            }
            IngressError::Unavailable(message) => {
                json!({"error": "unavailable", "message": message})
            }
        }
    }
}

impl From<crate::store::StoreError> for IngressError {
    fn from(error: crate::store::StoreError) -> Self {
        tracing::warn!(%error, "ingress: store unavailable");
        IngressError::Unavailable("the attempt store did not answer".into())
    }
}

/// Who is calling, as established by the transport.
#[derive(Clone, Debug)]
pub struct Caller {
    pub executor_id: String,
    pub client: IpAddr,
    pub transport: &'static str,
}

/// Shared state of both listeners.
pub struct Ingress {
    pub config: IngressConfig,
    pub store: Store,
    pub kafka: KafkaConfig,
    pub producer: FutureProducer,
    pub executors: executor::Sessions,
    pub peers: http::PeerLimits,
    /// Memory held in unfinished TCP frames, across connections.
    pub frames: tcp::FrameBudget,
    /// What event streams and long polls wait on: one poller per process.
    pub feed: Arc<feed::Feed>,
    /// Ends long polls and event streams at shutdown.
    pub shutdown: CancellationToken,
    /// Where executors' output files go.
    pub storage: Arc<crate::artifacts::Storage>,
    /// Uploads held in memory at once (each up to `max_output` bytes).
    pub uploads: tokio::sync::Semaphore,
    /// Artifact downloads held in memory at once.
    pub downloads: Arc<tokio::sync::Semaphore>,
    /// Each tenant's share of them.
    pub tenant_downloads: Arc<api::TenantDownloads>,
    /// Console sign-in sessions.
    pub sessions: console::session::Sessions,
    /// The console overview's DLQ count.
    pub dlq_count: Recent<Option<i64>>,
    /// `/readyz`'s and `/metrics`' last answers: anyone the allow list
    /// admits may ask, without a key.
    readiness: Recent<Readiness>,
    metrics: Recent<String>,
    http_client: reqwest::Client,
}

/// A value that costs a trip upstream, kept for a while: asked for by
/// one caller at a time, the others waiting for its answer. The asking
/// runs as a task of its own and is kept when it ends, whether or not its
/// caller is still there: a client that disconnects at once cannot make
/// every request start the trip again (nor leave a blocking broker call
/// behind for each).
pub struct Recent<T>(Arc<tokio::sync::Mutex<Option<(std::time::Instant, T)>>>);

impl<T> Default for Recent<T> {
    fn default() -> Self {
        Self(Arc::new(tokio::sync::Mutex::new(None)))
    }
}

impl<T: Clone + Send + 'static> Recent<T> {
    /// The value found less than `fresh` ago, else what `ask` finds now.
    pub async fn get(
        &self,
        fresh: Duration,
        ask: impl std::future::Future<Output = T> + Send + 'static,
    ) -> T {
        let mut held = self.0.clone().lock_owned().await;
        if let Some((at, value)) = &*held {
            if at.elapsed() < fresh {
                return value.clone();
            }
        }
        let asking = tokio::spawn(async move {
            let value = ask.await;
            *held = Some((std::time::Instant::now(), value.clone()));
            value
        });
        match asking.await {
            Ok(value) => value,
            Err(error) => std::panic::resume_unwind(error.into_panic()),
        }
    }
}

/// `/readyz`'s answer: its warnings, or why it is not ready.
type Readiness = Result<Vec<String>, String>;

/// How long `/readyz` and `/metrics` answer from what they last found:
/// each asks Postgres, the broker or the dispatcher, and a client without
/// a key must not make every request do that again.
const PROBED_TTL: Duration = Duration::from_secs(1);

/// The most of the dispatcher's metrics read.
const MAX_UPSTREAM_METRICS: usize = 8 * 1024 * 1024;

/// Output uploads one ingress holds in memory at once: with the default
/// `EXECPLANE_INGRESS_MAX_OUTPUT`, at most 64 MiB.
pub const MAX_CONCURRENT_UPLOADS: usize = 4;

impl Ingress {
    pub fn new(
        config: IngressConfig,
        store: Store,
        kafka: KafkaConfig,
        producer: FutureProducer,
        storage: Arc<crate::artifacts::Storage>,
        shutdown: CancellationToken,
    ) -> Result<Arc<Self>, IngressError> {
        let peers = http::PeerLimits::new(config.max_connections_per_peer, config.max_connections)
            .per_principal(config.max_connections_per_principal);
        let frames = tcp::FrameBudget::new(config.partial_frame_budget);
        let http_client = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .map_err(|error| IngressError::Unavailable(format!("HTTP client: {error}")))?;
        Ok(Arc::new(Self {
            config,
            store,
            kafka,
            producer,
            executors: executor::Sessions::default(),
            peers,
            frames,
            feed: Arc::default(),
            shutdown,
            storage,
            uploads: tokio::sync::Semaphore::new(MAX_CONCURRENT_UPLOADS),
            downloads: Arc::new(tokio::sync::Semaphore::new(api::MAX_CONCURRENT_DOWNLOADS)),
            tenant_downloads: Arc::default(),
            sessions: console::session::Sessions::default(),
            dlq_count: Recent::default(),
            readiness: Recent::default(),
            metrics: Recent::default(),
            http_client,
        }))
    }

    /// Produces one record to `topic` (before its prefix) and waits for the
    /// broker's acknowledgement: a reply never promises what is not on the
    /// broker.
    pub(crate) async fn produce(
        &self,
        topic: &str,
        key: &str,
        payload: &[u8],
        headers: rdkafka::message::OwnedHeaders,
    ) -> Result<(), IngressError> {
        let topic = self.kafka.topic(topic);
        self.producer
            .send(
                rdkafka::producer::FutureRecord::to(&topic)
                    .key(key)
                    .payload(payload)
                    .headers(headers),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(error, _)| IngressError::Unavailable(format!("broker: {error}")))?;
        Ok(())
    }

    /// `/readyz`: this process's roles are up (`telemetry::health`), and
    /// Postgres and the broker both answer. The warnings: the process's
    /// own (a runner left out), and the runner instances whose tools run
    /// without the whole sandbox (the operator's choice, said wherever an
    /// operator looks).
    pub async fn ready(self: &Arc<Self>) -> Readiness {
        let this = self.clone();
        let ask = async move { this.probe_ready().await };
        self.readiness.get(PROBED_TTL, ask).await
    }

    async fn probe_ready(&self) -> Readiness {
        // The process's own conditions first (its roles, its runners).
        let mut warnings =
            crate::telemetry::health::report().map_err(|failing| failing.join("; "))?;
        self.store
            .ping()
            .await
            .map_err(|error| format!("postgres: {error}"))?;
        warnings.extend(
            self.store
                .weakly_isolated_instances()
                .await
                .map_err(|error| format!("postgres: {error}"))?
                .into_iter()
                .map(|(instance, runner_type, isolation)| {
                    format!("runner instance {instance} ({runner_type}) runs its tools {isolation}")
                }),
        );
        let producer = self.producer.clone();
        tokio::task::spawn_blocking(move || {
            use rdkafka::producer::Producer;
            producer
                .client()
                .fetch_metadata(None, Duration::from_secs(3))
                .map(|_| ())
                .map_err(|error| format!("broker: {error}"))
        })
        .await
        .map_err(|error| format!("broker check: {error}"))??;
        Ok(warnings)
    }

    /// `/metrics`: this process's metrics, then the dispatcher's when it
    /// runs elsewhere (families this process already has are not repeated,
    /// so the text stays valid exposition).
    pub async fn metrics_text(self: &Arc<Self>) -> String {
        let this = self.clone();
        let ask = async move { this.gather_metrics().await };
        self.metrics.get(PROBED_TTL, ask).await
    }

    async fn gather_metrics(&self) -> String {
        let mut text = crate::telemetry::metrics::render();
        if let Some(url) = &self.config.metrics_upstream {
            let shown = crate::telemetry::redact(url);
            match self.http_client.get(url).send().await {
                Ok(response) if response.status().is_success() => {
                    match bounded_text(response, MAX_UPSTREAM_METRICS).await {
                        Some(upstream) => text.push_str(
                            &crate::telemetry::metrics::merge_exposition(&text, &upstream),
                        ),
                        None => {
                            tracing::warn!(url = %shown, most = MAX_UPSTREAM_METRICS, "upstream metrics unreadable or over their bound: left out")
                        }
                    }
                }
                Ok(response) => {
                    tracing::warn!(status = %response.status(), url = %shown, "upstream metrics not served")
                }
                Err(error) => {
                    tracing::warn!(error = %error.without_url(), url = %shown, "upstream metrics unreachable")
                }
            }
        }
        text
    }
}

/// A response's body as text, if it is at most `most` bytes of UTF-8.
async fn bounded_text(mut response: reqwest::Response, most: usize) -> Option<String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.ok()? {
        if body.len() + chunk.len() > most {
            return None;
        }
        body.extend_from_slice(&chunk);
    }
    String::from_utf8(body).ok()
}

/// Binds both listeners and serves until `shutdown`.
pub async fn run(
    config: IngressConfig,
    store: Store,
    kafka: KafkaConfig,
    producer: FutureProducer,
    storage: Arc<crate::artifacts::Storage>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let http_listener = tokio::net::TcpListener::bind(config.http)
        .await
        .with_context(|| format!("binding the ingress HTTP listener on {}", config.http))?;
    let tcp_listener = tokio::net::TcpListener::bind(config.tcp)
        .await
        .with_context(|| format!("binding the ingress TCP listener on {}", config.tcp))?;
    info!(http = %config.http, tcp = %config.tcp, "ingress listening");
    let principals = !config.policy.current().principals().is_empty();
    if principals && !config.api_key.is_empty() {
        tracing::warn!("the policy names principals: EXECPLANE_API_KEY no longer opens the execute API or the console (each principal's own key does)");
    } else if !principals && config.api_key.is_empty() {
        tracing::warn!("the execute API and the console are off: no EXECPLANE_API_KEY is set and the policy names no principals (the executors' key never opens them); submit through Kafka, or set a key of its own");
    }
    let ingress = Ingress::new(config, store, kafka, producer, storage, shutdown.clone())?;
    let presence = tokio::spawn(executor::announce_sessions(
        ingress.clone(),
        shutdown.clone(),
    ));
    let feed = tokio::spawn(
        ingress
            .feed
            .clone()
            .run(ingress.store.clone(), shutdown.clone()),
    );
    let tcp = tokio::spawn(tcp::serve(ingress.clone(), tcp_listener, shutdown.clone()));
    let http = http::serve(ingress.clone(), http_listener, shutdown.clone()).await;
    shutdown.cancel();
    let _ = tcp.await;
    let _ = presence.await;
    let _ = feed.await;
    http
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn a_value_asked_for_by_a_caller_that_left_is_kept() {
        let recent: Recent<usize> = Recent::default();
        let asked = Arc::new(AtomicUsize::new(0));
        let ask = |asked: Arc<AtomicUsize>| async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            asked.fetch_add(1, Ordering::SeqCst) + 1
        };
        // The caller goes before the answer comes.
        let left = tokio::time::timeout(
            Duration::from_millis(5),
            recent.get(Duration::from_secs(60), ask(asked.clone())),
        )
        .await;
        assert!(left.is_err());
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(asked.load(Ordering::SeqCst), 1, "the trip was given up");
        // The next caller has that answer, and asks nothing again.
        let value = recent
            .get(Duration::from_secs(60), ask(asked.clone()))
            .await;
        assert_eq!((value, asked.load(Ordering::SeqCst)), (1, 1));
    }
}
