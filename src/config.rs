//! Configuration: defaults, then an optional TOML file, then `EXECPLANE_*`
//! environment variables (which win). Every default is in the README.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::contract::DurationMs;
pub use crate::secrets::Secret;

/// The defaults, documented in the README's configuration table.
pub mod defaults {
    pub const DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/execplane";
    pub const DATABASE_MAX_CONNECTIONS: u32 = 10;
    pub const LOG: &str = "info,sqlx=warn";
    pub const KAFKA_BROKERS: &str = "127.0.0.1:9092";
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// The whole configuration of one process.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `EXECPLANE_DATABASE_URL`, else `DATABASE_URL`.
    pub database_url: String,
    /// `EXECPLANE_DATABASE_MAX_CONNECTIONS`.
    pub database_max_connections: u32,
    /// `EXECPLANE_LOG`: a tracing filter, e.g. `info,execplane=debug`.
    pub log: String,
    /// `EXECPLANE_LOG_FORMAT`: `text` or `json`.
    pub log_format: LogFormat,
    /// `EXECPLANE_KAFKA_BROKERS`: bootstrap servers.
    pub kafka_brokers: String,
    /// `EXECPLANE_TOPIC_PREFIX`: prefixes every topic name.
    pub topic_prefix: String,
    /// `EXECPLANE_KAFKA_FETCH_WAIT_MS`: consumers' `fetch.wait.max.ms`.
    pub kafka_fetch_wait_ms: u32,
    /// `EXECPLANE_AVRO_FRAMING`: `single-object` (no registry) or `confluent`.
    pub avro_framing: String,
    /// `EXECPLANE_CONFLUENT_SCHEMA_IDS`: the registry id of each family's
    /// current schema, `commands=1,attempt-events=2,...` (written and read).
    pub confluent_schema_ids: String,
    /// `EXECPLANE_CONFLUENT_PREVIOUS_SCHEMA_IDS`: ids under which the previous
    /// release's schemas were registered (read, resolved to the current).
    pub confluent_previous_schema_ids: String,
    /// `EXECPLANE_DISPATCHER_GROUP`: the dispatchers' consumer group.
    pub dispatcher_group: String,
    /// `EXECPLANE_DISPATCHER_MAX_BATCH`: records decided per transaction.
    pub dispatcher_max_batch: usize,
    /// `EXECPLANE_DISPATCHER_BATCH_WINDOW`: wait for more records after the first.
    pub dispatcher_batch_window: DurationMs,
    /// `EXECPLANE_CANCEL_GRACE`: default grace for a runner to confirm a cancel.
    pub cancel_grace: DurationMs,
    /// `EXECPLANE_SWEEP_INTERVAL`: how often due timers are swept.
    pub sweep_interval: DurationMs,
    /// `EXECPLANE_PRESENCE_INTERVAL`: how often runners announce themselves.
    pub presence_interval: DurationMs,
    /// `EXECPLANE_PRESENCE_TTL`: a presence older than this is not live.
    pub presence_ttl: DurationMs,
    /// `EXECPLANE_RUNNER_CAPACITY`: concurrent attempts per runner instance.
    pub runner_capacity: u32,
    /// `EXECPLANE_RUNNER_POOL`: pool labels, `key=value,key=value`.
    pub runner_pool: String,
    /// `EXECPLANE_RUNNER_DRAIN_TIMEOUT`: shutdown waits this long for running attempts.
    pub runner_drain_timeout: DurationMs,
    /// `EXECPLANE_INBOX_RETENTION`: how long processed input ids are kept.
    pub inbox_retention: DurationMs,
    /// `EXECPLANE_CALLBACK_MAX_ATTEMPTS`: HTTP callback deliveries before giving up.
    pub callback_max_attempts: i32,
    /// `EXECPLANE_VERIFY_PROBES`: allowlisted `verify.custom.probe` ids (comma-separated).
    pub verify_probes: String,
    /// `EXECPLANE_VERIFY_MAX_TIMEOUT`: the longest per-sample timeout a probe may ask for.
    pub verify_max_timeout: DurationMs,
    /// `EXECPLANE_VERIFY_MAX_BODY_BYTES`: the most response body bytes an HTTP probe reads.
    pub verify_max_body_bytes: usize,
    /// `EXECPLANE_POLICY_FILE`: the operator's policy (TOML); empty: the defaults.
    pub policy_file: String,
    /// The policy file, loaded and checked (not a setting of its own).
    #[serde(skip)]
    pub policy: std::sync::Arc<crate::policy::OperatorPolicy>,
    /// `EXECPLANE_METRICS_ADDR`: where long-running roles serve Prometheus
    /// `/metrics`; empty turns the listener off.
    pub metrics_addr: String,
    /// `EXECPLANE_INGRESS_BIND`: the address both ingress listeners bind.
    pub ingress_bind: String,
    /// `EXECPLANE_INGRESS_HTTP_PORT`.
    pub ingress_http_port: u16,
    /// `EXECPLANE_INGRESS_TCP_PORT`.
    pub ingress_tcp_port: u16,
    /// `EXECPLANE_INGRESS_KEY`: the executors' shared key. No default.
    pub ingress_key: Secret,
    /// `EXECPLANE_API_KEY`: the execute API's shared key. No default.
    pub api_key: Secret,
    /// `EXECPLANE_INGRESS_ALLOW_CIDRS`: client addresses admitted (comma-separated CIDRs).
    pub ingress_allow_cidrs: String,
    /// `EXECPLANE_INGRESS_TRUST_PROXY`: honour X-Forwarded-For from trusted proxies.
    pub ingress_trust_proxy: bool,
    /// `EXECPLANE_INGRESS_TRUSTED_PROXIES`: the proxies' CIDRs.
    pub ingress_trusted_proxies: String,
    /// `EXECPLANE_INGRESS_MAX_BODY`: largest HTTP request body, in bytes.
    pub ingress_max_body: usize,
    /// `EXECPLANE_INGRESS_MAX_FRAME`: largest TCP frame, in bytes.
    pub ingress_max_frame: usize,
    /// `EXECPLANE_INGRESS_MAX_CONNECTIONS_PER_PEER`: open connections per client address.
    pub ingress_max_connections_per_peer: usize,
    /// `EXECPLANE_INGRESS_MAX_CONNECTIONS`: open HTTP + TCP connections in all.
    pub ingress_max_connections: usize,
    /// `EXECPLANE_INGRESS_HEADER_TIMEOUT`: an HTTP request's headers must arrive within this.
    pub ingress_header_timeout: DurationMs,
    /// `EXECPLANE_INGRESS_PARTIAL_FRAME_BUDGET`: bytes all TCP connections may hold in unfinished frames.
    pub ingress_partial_frame_budget: usize,
    /// `EXECPLANE_INGRESS_READ_TIMEOUT`: a TCP frame (and a connection's first frame)
    /// must be complete within this.
    pub ingress_read_timeout: DurationMs,
    /// `EXECPLANE_INGRESS_IDLE_TIMEOUT`: a connection that moves no byte for this long is closed.
    pub ingress_idle_timeout: DurationMs,
    /// `EXECPLANE_INGRESS_SESSION_TTL`: an executor session with no request for this long ends.
    pub ingress_session_ttl: DurationMs,
    /// `EXECPLANE_INGRESS_METRICS_UPSTREAM`: the dispatcher's `/metrics` URL, appended
    /// to the ingress's own when the roles run as separate processes.
    pub ingress_metrics_upstream: String,
    /// `EXECPLANE_VAULT_ADDR`: the Vault-API server runners resolve secrets from.
    pub vault_addr: String,
    /// `EXECPLANE_VAULT_TOKEN`: token auth.
    pub vault_token: Secret,
    /// `EXECPLANE_VAULT_ROLE_ID`: AppRole auth (with the secret id).
    pub vault_role_id: String,
    /// `EXECPLANE_VAULT_SECRET_ID`.
    pub vault_secret_id: Secret,
    /// `EXECPLANE_VAULT_APPROLE_MOUNT`.
    pub vault_approle_mount: String,
    /// `EXECPLANE_ARTIFACT_DIR`: where the artifact worker stores bundles.
    pub artifact_dir: String,
    /// `EXECPLANE_ARTIFACT_GROUP`: the artifact workers' consumer group.
    pub artifact_group: String,
    /// `EXECPLANE_ARTIFACT_GRACE`: how long after an attempt ends its bundle waits for late chunks.
    pub artifact_grace: DurationMs,
    /// `EXECPLANE_ARTIFACT_DETECTORS`: the detectors that mask secret-shaped text (comma-separated).
    pub artifact_detectors: String,
    /// `EXECPLANE_ARTIFACT_RETENTION_LOGS`.
    pub artifact_retention_logs: DurationMs,
    /// `EXECPLANE_ARTIFACT_RETENTION_RENDERED`.
    pub artifact_retention_rendered: DurationMs,
    /// `EXECPLANE_ARTIFACT_RETENTION_EVIDENCE`.
    pub artifact_retention_evidence: DurationMs,
    /// `EXECPLANE_ARTIFACT_GC_INTERVAL`: how often the worker collects expired artifacts.
    pub artifact_gc_interval: DurationMs,
    /// `EXECPLANE_S3_ENDPOINT`: S3-compatible storage for artifacts; empty: `artifact_dir`.
    pub s3_endpoint: String,
    /// `EXECPLANE_S3_REGION`.
    pub s3_region: String,
    /// `EXECPLANE_S3_BUCKET`.
    pub s3_bucket: String,
    /// `EXECPLANE_S3_ACCESS_KEY_ID`.
    pub s3_access_key_id: String,
    /// `EXECPLANE_S3_SECRET_ACCESS_KEY`.
    pub s3_secret_access_key: Secret,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            database_url: defaults::DATABASE_URL.to_owned(),
            database_max_connections: defaults::DATABASE_MAX_CONNECTIONS,
            log: defaults::LOG.to_owned(),
            log_format: LogFormat::Text,
            kafka_brokers: defaults::KAFKA_BROKERS.to_owned(),
            topic_prefix: String::new(),
            kafka_fetch_wait_ms: 5,
            avro_framing: "single-object".into(),
            confluent_schema_ids: String::new(),
            confluent_previous_schema_ids: String::new(),
            dispatcher_group: "execplane-dispatcher".into(),
            dispatcher_max_batch: 1_000,
            dispatcher_batch_window: DurationMs(2),
            cancel_grace: DurationMs::from_secs(10),
            sweep_interval: DurationMs(100),
            presence_interval: DurationMs::from_secs(1),
            presence_ttl: DurationMs::from_secs(6),
            runner_capacity: 16,
            runner_pool: String::new(),
            runner_drain_timeout: DurationMs::from_secs(30),
            inbox_retention: DurationMs::from_secs(7 * 24 * 3600),
            callback_max_attempts: 8,
            verify_probes: crate::runners::verification::BUILTIN_PROBES.join(","),
            verify_max_timeout: DurationMs::from_secs(60),
            verify_max_body_bytes: 1024 * 1024,
            policy_file: String::new(),
            policy: std::sync::Arc::default(),
            metrics_addr: "127.0.0.1:9464".into(),
            ingress_bind: "127.0.0.1".into(),
            ingress_http_port: 3000,
            ingress_tcp_port: 3001,
            ingress_key: Secret::default(),
            api_key: Secret::default(),
            ingress_allow_cidrs: "127.0.0.0/8,::1/128".into(),
            ingress_trust_proxy: false,
            ingress_trusted_proxies: String::new(),
            ingress_max_body: 1024 * 1024,
            ingress_max_frame: 1024 * 1024,
            ingress_max_connections_per_peer: 64,
            ingress_max_connections: 1024,
            ingress_header_timeout: DurationMs::from_secs(10),
            ingress_partial_frame_budget: 64 * 1024 * 1024,
            ingress_read_timeout: DurationMs::from_secs(10),
            ingress_idle_timeout: DurationMs::from_secs(60),
            ingress_session_ttl: DurationMs::from_secs(30),
            ingress_metrics_upstream: String::new(),
            vault_addr: String::new(),
            vault_token: Secret::default(),
            vault_role_id: String::new(),
            vault_secret_id: Secret::default(),
            vault_approle_mount: "approle".into(),
            artifact_dir: "execplane-artifacts".into(),
            artifact_group: "execplane-artifacts".into(),
            artifact_grace: DurationMs::from_secs(2),
            artifact_detectors: crate::artifacts::detect::BUILTIN.join(","),
            artifact_retention_logs: DurationMs::from_secs(7 * 24 * 3600),
            artifact_retention_rendered: DurationMs::from_secs(30 * 24 * 3600),
            artifact_retention_evidence: DurationMs::from_secs(365 * 24 * 3600),
            artifact_gc_interval: DurationMs::from_secs(3600),
            s3_endpoint: String::new(),
            s3_region: "garage".into(),
            s3_bucket: "execplane-artifacts".into(),
            s3_access_key_id: String::new(),
            s3_secret_access_key: Secret::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("environment variable {name}: {message}")]
    Env { name: &'static str, message: String },
}

impl Config {
    /// Loads the file (when given, or named by `EXECPLANE_CONFIG`) and the
    /// environment.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_from(file, |name| std::env::var(name).ok())
    }

    /// As [`Config::load`], with the environment passed in (for tests).
    pub fn load_from(
        file: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let file = file
            .map(Path::to_path_buf)
            .or_else(|| env("EXECPLANE_CONFIG").map(PathBuf::from));
        let mut config = match &file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                })?;
                toml::from_str(&text).map_err(|error| ConfigError::Parse {
                    path: path.clone(),
                    message: error.to_string(),
                })?
            }
            None => Config::default(),
        };
        if let Some(url) = env("EXECPLANE_DATABASE_URL").or_else(|| env("DATABASE_URL")) {
            config.database_url = url;
        }
        if let Some(value) = env("EXECPLANE_DATABASE_MAX_CONNECTIONS") {
            config.database_max_connections = value.parse().map_err(|_| ConfigError::Env {
                name: "EXECPLANE_DATABASE_MAX_CONNECTIONS",
                message: format!("`{value}` is not a positive integer"),
            })?;
        }
        if let Some(value) = env("EXECPLANE_LOG") {
            config.log = value;
        }
        if let Some(value) = env("EXECPLANE_LOG_FORMAT") {
            config.log_format = match value.as_str() {
                "text" => LogFormat::Text,
                "json" => LogFormat::Json,
                other => {
                    return Err(ConfigError::Env {
                        name: "EXECPLANE_LOG_FORMAT",
                        message: format!("`{other}` is neither `text` nor `json`"),
                    })
                }
            };
        }
        if let Some(value) = env("EXECPLANE_KAFKA_BROKERS") {
            config.kafka_brokers = value;
        }
        if let Some(value) = env("EXECPLANE_TOPIC_PREFIX") {
            config.topic_prefix = value;
        }
        fn parse<T: std::str::FromStr>(name: &'static str, value: &str) -> Result<T, ConfigError> {
            value.trim().parse().map_err(|_| ConfigError::Env {
                name,
                message: format!("`{value}` is not a valid value"),
            })
        }
        fn duration(name: &'static str, value: &str) -> Result<DurationMs, ConfigError> {
            DurationMs::parse(value).map_err(|message| ConfigError::Env { name, message })
        }
        for (name, field) in [
            ("EXECPLANE_AVRO_FRAMING", &mut config.avro_framing),
            (
                "EXECPLANE_CONFLUENT_SCHEMA_IDS",
                &mut config.confluent_schema_ids,
            ),
            (
                "EXECPLANE_CONFLUENT_PREVIOUS_SCHEMA_IDS",
                &mut config.confluent_previous_schema_ids,
            ),
        ] {
            if let Some(value) = env(name) {
                *field = value;
            }
        }
        if let Some(value) = env("EXECPLANE_KAFKA_FETCH_WAIT_MS") {
            config.kafka_fetch_wait_ms = parse("EXECPLANE_KAFKA_FETCH_WAIT_MS", &value)?;
        }
        if let Some(value) = env("EXECPLANE_DISPATCHER_GROUP") {
            config.dispatcher_group = value;
        }
        if let Some(value) = env("EXECPLANE_DISPATCHER_MAX_BATCH") {
            config.dispatcher_max_batch = parse("EXECPLANE_DISPATCHER_MAX_BATCH", &value)?;
        }
        if let Some(value) = env("EXECPLANE_DISPATCHER_BATCH_WINDOW") {
            config.dispatcher_batch_window = duration("EXECPLANE_DISPATCHER_BATCH_WINDOW", &value)?;
        }
        if let Some(value) = env("EXECPLANE_CANCEL_GRACE") {
            config.cancel_grace = duration("EXECPLANE_CANCEL_GRACE", &value)?;
        }
        if let Some(value) = env("EXECPLANE_SWEEP_INTERVAL") {
            config.sweep_interval = duration("EXECPLANE_SWEEP_INTERVAL", &value)?;
        }
        if let Some(value) = env("EXECPLANE_PRESENCE_INTERVAL") {
            config.presence_interval = duration("EXECPLANE_PRESENCE_INTERVAL", &value)?;
        }
        if let Some(value) = env("EXECPLANE_PRESENCE_TTL") {
            config.presence_ttl = duration("EXECPLANE_PRESENCE_TTL", &value)?;
        }
        if let Some(value) = env("EXECPLANE_RUNNER_CAPACITY") {
            config.runner_capacity = parse("EXECPLANE_RUNNER_CAPACITY", &value)?;
        }
        if let Some(value) = env("EXECPLANE_RUNNER_POOL") {
            config.runner_pool = value;
        }
        if let Some(value) = env("EXECPLANE_RUNNER_DRAIN_TIMEOUT") {
            config.runner_drain_timeout = duration("EXECPLANE_RUNNER_DRAIN_TIMEOUT", &value)?;
        }
        if let Some(value) = env("EXECPLANE_INBOX_RETENTION") {
            config.inbox_retention = duration("EXECPLANE_INBOX_RETENTION", &value)?;
        }
        if let Some(value) = env("EXECPLANE_CALLBACK_MAX_ATTEMPTS") {
            config.callback_max_attempts = parse("EXECPLANE_CALLBACK_MAX_ATTEMPTS", &value)?;
        }
        if let Some(value) = env("EXECPLANE_VERIFY_PROBES") {
            config.verify_probes = value;
        }
        if let Some(value) = env("EXECPLANE_VERIFY_MAX_BODY_BYTES") {
            config.verify_max_body_bytes = parse("EXECPLANE_VERIFY_MAX_BODY_BYTES", &value)?;
        }
        if let Some(value) = env("EXECPLANE_VERIFY_MAX_TIMEOUT") {
            config.verify_max_timeout = duration("EXECPLANE_VERIFY_MAX_TIMEOUT", &value)?;
        }
        if let Some(value) = env("EXECPLANE_POLICY_FILE") {
            config.policy_file = value;
        }
        if let Some(value) = env("EXECPLANE_INGRESS_MAX_CONNECTIONS") {
            config.ingress_max_connections = parse("EXECPLANE_INGRESS_MAX_CONNECTIONS", &value)?;
        }
        if let Some(value) = env("EXECPLANE_INGRESS_HEADER_TIMEOUT") {
            config.ingress_header_timeout = duration("EXECPLANE_INGRESS_HEADER_TIMEOUT", &value)?;
        }
        if let Some(value) = env("EXECPLANE_INGRESS_PARTIAL_FRAME_BUDGET") {
            config.ingress_partial_frame_budget =
                parse("EXECPLANE_INGRESS_PARTIAL_FRAME_BUDGET", &value)?;
        }
        if let Some(value) = env("EXECPLANE_METRICS_ADDR") {
            config.metrics_addr = value;
        }
        if let Some(value) = env("EXECPLANE_INGRESS_BIND") {
            config.ingress_bind = value;
        }
        if let Some(value) = env("EXECPLANE_INGRESS_HTTP_PORT") {
            config.ingress_http_port = parse("EXECPLANE_INGRESS_HTTP_PORT", &value)?;
        }
        if let Some(value) = env("EXECPLANE_INGRESS_TCP_PORT") {
            config.ingress_tcp_port = parse("EXECPLANE_INGRESS_TCP_PORT", &value)?;
        }
        if let Some(value) = env("EXECPLANE_INGRESS_KEY") {
            config.ingress_key = Secret::new(value);
        }
        if let Some(value) = env("EXECPLANE_API_KEY") {
            config.api_key = Secret::new(value);
        }
        if let Some(value) = env("EXECPLANE_INGRESS_ALLOW_CIDRS") {
            config.ingress_allow_cidrs = value;
        }
        if let Some(value) = env("EXECPLANE_INGRESS_TRUST_PROXY") {
            config.ingress_trust_proxy = match value.trim() {
                "true" | "1" | "yes" => true,
                "false" | "0" | "no" | "" => false,
                other => {
                    return Err(ConfigError::Env {
                        name: "EXECPLANE_INGRESS_TRUST_PROXY",
                        message: format!("`{other}` is neither true nor false"),
                    })
                }
            };
        }
        if let Some(value) = env("EXECPLANE_INGRESS_TRUSTED_PROXIES") {
            config.ingress_trusted_proxies = value;
        }
        if let Some(value) = env("EXECPLANE_INGRESS_MAX_BODY") {
            config.ingress_max_body = parse("EXECPLANE_INGRESS_MAX_BODY", &value)?;
        }
        if let Some(value) = env("EXECPLANE_INGRESS_MAX_FRAME") {
            config.ingress_max_frame = parse("EXECPLANE_INGRESS_MAX_FRAME", &value)?;
        }
        if let Some(value) = env("EXECPLANE_INGRESS_MAX_CONNECTIONS_PER_PEER") {
            config.ingress_max_connections_per_peer =
                parse("EXECPLANE_INGRESS_MAX_CONNECTIONS_PER_PEER", &value)?;
        }
        if let Some(value) = env("EXECPLANE_INGRESS_READ_TIMEOUT") {
            config.ingress_read_timeout = duration("EXECPLANE_INGRESS_READ_TIMEOUT", &value)?;
        }
        if let Some(value) = env("EXECPLANE_INGRESS_IDLE_TIMEOUT") {
            config.ingress_idle_timeout = duration("EXECPLANE_INGRESS_IDLE_TIMEOUT", &value)?;
        }
        if let Some(value) = env("EXECPLANE_INGRESS_SESSION_TTL") {
            config.ingress_session_ttl = duration("EXECPLANE_INGRESS_SESSION_TTL", &value)?;
        }
        if let Some(value) = env("EXECPLANE_INGRESS_METRICS_UPSTREAM") {
            config.ingress_metrics_upstream = value;
        }
        if let Some(value) = env("EXECPLANE_ARTIFACT_DIR") {
            config.artifact_dir = value;
        }
        if let Some(value) = env("EXECPLANE_ARTIFACT_GROUP") {
            config.artifact_group = value;
        }
        if let Some(value) = env("EXECPLANE_ARTIFACT_GRACE") {
            config.artifact_grace = duration("EXECPLANE_ARTIFACT_GRACE", &value)?;
        }
        if let Some(value) = env("EXECPLANE_ARTIFACT_DETECTORS") {
            config.artifact_detectors = value;
        }
        for (name, field) in [
            (
                "EXECPLANE_ARTIFACT_RETENTION_LOGS",
                &mut config.artifact_retention_logs,
            ),
            (
                "EXECPLANE_ARTIFACT_RETENTION_RENDERED",
                &mut config.artifact_retention_rendered,
            ),
            (
                "EXECPLANE_ARTIFACT_RETENTION_EVIDENCE",
                &mut config.artifact_retention_evidence,
            ),
            (
                "EXECPLANE_ARTIFACT_GC_INTERVAL",
                &mut config.artifact_gc_interval,
            ),
        ] {
            if let Some(value) = env(name) {
                *field = duration(name, &value)?;
            }
        }
        if let Some(value) = env("EXECPLANE_S3_ENDPOINT") {
            config.s3_endpoint = value;
        }
        if let Some(value) = env("EXECPLANE_S3_REGION") {
            config.s3_region = value;
        }
        if let Some(value) = env("EXECPLANE_S3_BUCKET") {
            config.s3_bucket = value;
        }
        if let Some(value) = env("EXECPLANE_S3_ACCESS_KEY_ID") {
            config.s3_access_key_id = value;
        }
        if let Some(value) = env("EXECPLANE_S3_SECRET_ACCESS_KEY") {
            config.s3_secret_access_key = Secret::new(value);
        }
        if !config.s3_endpoint.trim().is_empty()
            && (config.s3_access_key_id.is_empty() || config.s3_secret_access_key.is_empty())
        {
            return Err(ConfigError::Env {
                name: "EXECPLANE_S3_ENDPOINT",
                message: "set EXECPLANE_S3_ACCESS_KEY_ID and EXECPLANE_S3_SECRET_ACCESS_KEY too"
                    .into(),
            });
        }
        if config.artifact_retention_evidence < config.artifact_retention_logs {
            return Err(ConfigError::Env {
                name: "EXECPLANE_ARTIFACT_RETENTION_EVIDENCE",
                message: "evidence must be kept at least as long as logs".into(),
            });
        }
        if let Some(value) = env("EXECPLANE_VAULT_ADDR") {
            config.vault_addr = value;
        }
        if let Some(value) = env("EXECPLANE_VAULT_TOKEN") {
            config.vault_token = Secret::new(value);
        }
        if let Some(value) = env("EXECPLANE_VAULT_ROLE_ID") {
            config.vault_role_id = value;
        }
        if let Some(value) = env("EXECPLANE_VAULT_SECRET_ID") {
            config.vault_secret_id = Secret::new(value);
        }
        if let Some(value) = env("EXECPLANE_VAULT_APPROLE_MOUNT") {
            config.vault_approle_mount = value;
        }
        if !config.vault_addr.trim().is_empty()
            && config.vault_token.is_empty()
            && (config.vault_role_id.is_empty() || config.vault_secret_id.is_empty())
        {
            return Err(ConfigError::Env {
                name: "EXECPLANE_VAULT_ADDR",
                message: "set EXECPLANE_VAULT_TOKEN, or EXECPLANE_VAULT_ROLE_ID and EXECPLANE_VAULT_SECRET_ID".into(),
            });
        }
        if !config.metrics_addr.trim().is_empty()
            && config
                .metrics_addr
                .trim()
                .parse::<std::net::SocketAddr>()
                .is_err()
        {
            return Err(ConfigError::Env {
                name: "EXECPLANE_METRICS_ADDR",
                message: format!(
                    "`{}` is not an address such as 127.0.0.1:9464",
                    config.metrics_addr
                ),
            });
        }
        if config.runner_capacity == 0 || config.dispatcher_max_batch == 0 {
            return Err(ConfigError::Env {
                name: "EXECPLANE_RUNNER_CAPACITY / EXECPLANE_DISPATCHER_MAX_BATCH",
                message: "must be at least 1".into(),
            });
        }
        config.codec()?;
        if !config.policy_file.trim().is_empty() {
            let policy = crate::policy::OperatorPolicy::load(Path::new(config.policy_file.trim()))
                .map_err(|message| ConfigError::Env {
                    name: "EXECPLANE_POLICY_FILE",
                    message,
                })?;
            config.policy = std::sync::Arc::new(policy);
        }
        if config.verify_max_body_bytes == 0 {
            return Err(ConfigError::Env {
                name: "EXECPLANE_VERIFY_MAX_BODY_BYTES",
                message: "must be at least 1".into(),
            });
        }
        if config.database_max_connections == 0 {
            return Err(ConfigError::Env {
                name: "EXECPLANE_DATABASE_MAX_CONNECTIONS",
                message: "must be at least 1".into(),
            });
        }
        Ok(config)
    }
}

impl Config {
    pub fn kafka(&self) -> crate::kafka::KafkaConfig {
        crate::kafka::KafkaConfig {
            brokers: self.kafka_brokers.clone(),
            topic_prefix: self.topic_prefix.clone(),
            fetch_wait_ms: self.kafka_fetch_wait_ms,
            // Checked when the configuration was loaded.
            codec: self.codec().unwrap_or_default(),
        }
    }

    /// The codec the framing settings describe.
    pub fn codec(&self) -> Result<crate::codec::Codec, ConfigError> {
        use crate::codec::{Codec, Family, Framing, RegistryIds};
        fn ids(
            name: &'static str,
            list: &str,
        ) -> Result<std::collections::HashMap<Family, u32>, ConfigError> {
            let mut ids = std::collections::HashMap::new();
            for pair in list
                .split(',')
                .map(str::trim)
                .filter(|pair| !pair.is_empty())
            {
                let parsed = pair.split_once('=').and_then(|(stem, id)| {
                    Some((
                        Family::from_file_stem(stem.trim())?,
                        id.trim().parse::<u32>().ok()?,
                    ))
                });
                let Some((family, id)) = parsed else {
                    let families: Vec<&str> = Family::ALL
                        .iter()
                        .map(|family| family.file_stem())
                        .collect();
                    return Err(ConfigError::Env {
                        name,
                        message: format!(
                            "`{pair}` is not <family>=<registry id>; families: {}",
                            families.join(", ")
                        ),
                    });
                };
                ids.insert(family, id);
            }
            Ok(ids)
        }
        let framing = match self.avro_framing.trim() {
            "single-object" | "" => Framing::SingleObject,
            "confluent" => Framing::Confluent,
            other => {
                return Err(ConfigError::Env {
                    name: "EXECPLANE_AVRO_FRAMING",
                    message: format!("`{other}` is neither `single-object` nor `confluent`"),
                })
            }
        };
        let registry = RegistryIds {
            current: ids("EXECPLANE_CONFLUENT_SCHEMA_IDS", &self.confluent_schema_ids)?,
            previous: ids(
                "EXECPLANE_CONFLUENT_PREVIOUS_SCHEMA_IDS",
                &self.confluent_previous_schema_ids,
            )?,
        };
        Codec::new(framing, registry).map_err(|error| ConfigError::Env {
            name: "EXECPLANE_CONFLUENT_SCHEMA_IDS",
            message: error.to_string(),
        })
    }

    pub fn dispatcher(&self) -> crate::dispatcher::DispatcherConfig {
        crate::dispatcher::DispatcherConfig {
            group: self.dispatcher_group.clone(),
            max_batch: self.dispatcher_max_batch,
            batch_window: self.dispatcher_batch_window.as_std(),
            cancel_grace: self.cancel_grace.as_std(),
            sweep_interval: self.sweep_interval.as_std(),
            presence_ttl: self.presence_ttl.as_std(),
            inbox_retention: self.inbox_retention.as_std(),
            callbacks: crate::dispatcher::CallbackConfig {
                max_attempts: self.callback_max_attempts,
                policy: self.policy.clone(),
                ..Default::default()
            },
            policy: self.policy.clone(),
            ..Default::default()
        }
    }

    pub fn runner(&self) -> Result<crate::runner::RunnerConfig, ConfigError> {
        let mut pool = std::collections::BTreeMap::new();
        for pair in self
            .runner_pool
            .split(',')
            .map(str::trim)
            .filter(|pair| !pair.is_empty())
        {
            let (key, value) = pair.split_once('=').ok_or_else(|| ConfigError::Env {
                name: "EXECPLANE_RUNNER_POOL",
                message: format!("`{pair}` is not key=value"),
            })?;
            pool.insert(key.trim().to_owned(), value.trim().to_owned());
        }
        Ok(crate::runner::RunnerConfig {
            capacity: self.runner_capacity,
            pool,
            presence_interval: self.presence_interval.as_std(),
            drain_timeout: self.runner_drain_timeout.as_std(),
            policy: self.policy.clone(),
            ..Default::default()
        })
    }

    /// The secret store runners use, when one is configured (AppRole wins
    /// over a token when both are set).
    pub fn vault(&self) -> Option<crate::secrets::VaultSettings> {
        let address = self.vault_addr.trim();
        if address.is_empty() {
            return None;
        }
        let auth = if !self.vault_role_id.is_empty() && !self.vault_secret_id.is_empty() {
            crate::secrets::VaultAuth::AppRole {
                mount: self.vault_approle_mount.clone(),
                role_id: self.vault_role_id.clone(),
                secret_id: self.vault_secret_id.clone(),
            }
        } else {
            crate::secrets::VaultAuth::Token(self.vault_token.clone())
        };
        Some(crate::secrets::VaultSettings {
            address: address.to_owned(),
            auth,
            timeout: std::time::Duration::from_secs(5),
        })
    }

    /// Where artifacts are stored: S3 when an endpoint is configured, else
    /// the local directory.
    pub fn storage(&self) -> crate::artifacts::Storage {
        if self.s3_endpoint.trim().is_empty() {
            crate::artifacts::Storage::Local(crate::artifacts::LocalDir::new(&self.artifact_dir))
        } else {
            crate::artifacts::Storage::S3(crate::artifacts::S3::new(
                &crate::artifacts::S3Settings {
                    endpoint: self.s3_endpoint.trim().to_owned(),
                    region: self.s3_region.clone(),
                    bucket: self.s3_bucket.clone(),
                    access_key_id: self.s3_access_key_id.clone(),
                    secret_access_key: self.s3_secret_access_key.clone(),
                },
            ))
        }
    }

    pub fn retention(&self) -> crate::store::Retention {
        crate::store::Retention {
            logs: self.artifact_retention_logs.as_std(),
            rendered: self.artifact_retention_rendered.as_std(),
            evidence: self.artifact_retention_evidence.as_std(),
        }
    }

    pub fn artifacts(&self) -> Result<crate::artifacts::ArtifactConfig, ConfigError> {
        let names: Vec<String> = self
            .artifact_detectors
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .map(str::to_owned)
            .collect();
        Ok(crate::artifacts::ArtifactConfig {
            group: self.artifact_group.clone(),
            grace: self.artifact_grace.as_std(),
            retention: self.retention(),
            gc_interval: self.artifact_gc_interval.as_std(),
            detectors: crate::artifacts::Detectors::new(&names).map_err(|message| {
                ConfigError::Env {
                    name: "EXECPLANE_ARTIFACT_DETECTORS",
                    message,
                }
            })?,
        })
    }

    pub fn verification(&self) -> crate::runners::verification::VerificationConfig {
        crate::runners::verification::VerificationConfig {
            allowed_probes: self
                .verify_probes
                .split(',')
                .map(str::trim)
                .filter(|probe| !probe.is_empty())
                .map(str::to_owned)
                .collect(),
            max_timeout: self.verify_max_timeout.as_std(),
            max_body_bytes: self.verify_max_body_bytes,
            policy: self.policy.clone(),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn environment_wins_over_file_over_defaults() {
        let dir = std::env::temp_dir().join(format!("execplane-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("execplane.toml");
        std::fs::write(&path, "database_url = \"postgres://file/db\"\nlog_format = \"json\"\ntopic_prefix = \"t1.\"\n").unwrap();
        let env: HashMap<&str, &str> = HashMap::from([
            ("DATABASE_URL", "postgres://generic/db"),
            ("EXECPLANE_TOPIC_PREFIX", "t2."),
        ]);
        let config = Config::load_from(Some(&path), |name| {
            env.get(name).map(|value| value.to_string())
        })
        .unwrap();
        assert_eq!(config.database_url, "postgres://generic/db");
        assert_eq!(config.log_format, LogFormat::Json);
        assert_eq!(config.topic_prefix, "t2.");
        let env: HashMap<&str, &str> = HashMap::from([
            ("DATABASE_URL", "postgres://generic/db"),
            ("EXECPLANE_DATABASE_URL", "postgres://own/db"),
        ]);
        let config =
            Config::load_from(None, |name| env.get(name).map(|value| value.to_string())).unwrap();
        assert_eq!(config.database_url, "postgres://own/db");
        assert_eq!(config.kafka_brokers, defaults::KAFKA_BROKERS);
        std::fs::write(&path, "databse_url = 1\n").unwrap();
        assert!(matches!(
            Config::load_from(Some(&path), |_| None),
            Err(ConfigError::Parse { .. })
        ));
    }
}
