//! Configuration: one layered read — the defaults, then an optional TOML
//! file, then the environment (which wins) — and the checks of each
//! setting on its own terms. Each setting is declared once, in
//! [`SETTINGS`]: its variable, its aliases, and where it lives in the
//! nested structs; the README's configuration table lists exactly these (a
//! test holds it to that). Config imports no area (docs/ARCHITECTURE.md):
//! a process loads with `cli::assemble::load`, which adds the checks only
//! an area can make and the operator's policy to the same pass, so every
//! problem is reported at once, and builds each area's configuration.

use std::path::{Path, PathBuf};

use crate::contract::DurationMs;
pub use crate::secrets::Secret;

pub use crate::telemetry::{LogFormat, TelemetrySettings};

/// A scalar of the configuration file as the text a setting reads; else
/// the kind of value it is.
fn toml_text(value: toml::Value) -> Result<String, &'static str> {
    match value {
        toml::Value::String(text) => Ok(text),
        toml::Value::Integer(number) => Ok(number.to_string()),
        toml::Value::Boolean(flag) => Ok(flag.to_string()),
        toml::Value::Float(number) => Ok(number.to_string()),
        other => Err(other.type_str()),
    }
}

/// The prefix of pass-through librdkafka properties in the environment.
pub const KAFKA_PROPERTY_PREFIX: &str = "EXECPLANE_KAFKA_PROPERTY_";

/// `SOCKET_KEEPALIVE_ENABLE` → `socket.keepalive.enable`; `__` is `_`.
fn kafka_property_name(variable: &str) -> String {
    variable
        .to_ascii_lowercase()
        .split("__")
        .map(|part| part.replace('_', "."))
        .collect::<Vec<_>>()
        .join("_")
}

/// librdkafka properties execplane relies on (docs/ARCHITECTURE.md,
/// "Kafka clients"): a pass-through of one is refused.
const KAFKA_RESERVED: &[(&str, &str)] = &[
    ("bootstrap.servers", "set EXECPLANE_KAFKA_BROKERS"),
    ("metadata.broker.list", "set EXECPLANE_KAFKA_BROKERS"),
    ("enable.idempotence", "every producer is idempotent"),
    ("acks", "every producer waits for all in-sync replicas"),
    (
        "request.required.acks",
        "every producer waits for all in-sync replicas",
    ),
    (
        "max.in.flight.requests.per.connection",
        "idempotence bounds it",
    ),
    ("max.in.flight", "idempotence bounds it"),
    (
        "enable.auto.commit",
        "offsets are stored after a batch is decided, and committed from there",
    ),
    (
        "enable.auto.offset.store",
        "offsets are stored after a batch is decided, and committed from there",
    ),
    (
        "auto.offset.reset",
        "each consumer's starting point is part of its design",
    ),
    (
        "group.id",
        "set EXECPLANE_DISPATCHER_GROUP or EXECPLANE_ARTIFACT_GROUP",
    ),
    (
        "transactional.id",
        "execplane's producers are not transactional",
    ),
    (
        "message.timeout.ms",
        "the relay's takeover rule counts on its own",
    ),
    (
        "delivery.timeout.ms",
        "the relay's takeover rule counts on its own",
    ),
    (
        "isolation.level",
        "consumers read committed records as they are",
    ),
];

/// librdkafka properties that have a setting of their own.
const KAFKA_OWN_SETTINGS: &[(&str, &str)] = &[
    ("security.protocol", "EXECPLANE_KAFKA_SECURITY_PROTOCOL"),
    ("ssl.ca.location", "EXECPLANE_KAFKA_SSL_CA_FILE"),
    ("ssl.certificate.location", "EXECPLANE_KAFKA_SSL_CERT_FILE"),
    ("ssl.key.location", "EXECPLANE_KAFKA_SSL_KEY_FILE"),
    ("ssl.key.password", "EXECPLANE_KAFKA_SSL_KEY_PASSWORD"),
    (
        "ssl.endpoint.identification.algorithm",
        "EXECPLANE_KAFKA_SSL_VERIFY_HOSTNAME",
    ),
    ("sasl.mechanism", "EXECPLANE_KAFKA_SASL_MECHANISM"),
    ("sasl.mechanisms", "EXECPLANE_KAFKA_SASL_MECHANISM"),
    ("sasl.username", "EXECPLANE_KAFKA_SASL_USERNAME"),
    ("sasl.password", "EXECPLANE_KAFKA_SASL_PASSWORD"),
    ("fetch.wait.max.ms", "EXECPLANE_KAFKA_FETCH_WAIT_MS"),
];

/// Defaults shared with other modules.
pub mod defaults {
    pub const DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/execplane";
    pub const KAFKA_BROKERS: &str = "127.0.0.1:9092";
}

/// Postgres.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatabaseSettings {
    /// `EXECPLANE_DATABASE_URL` (else `DATABASE_URL`).
    pub url: String,
    /// `EXECPLANE_DATABASE_MAX_CONNECTIONS`: pool size per process.
    pub max_connections: u32,
}

impl Default for DatabaseSettings {
    fn default() -> Self {
        Self {
            url: defaults::DATABASE_URL.to_owned(),
            max_connections: 10,
        }
    }
}

/// The broker and the records on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaSettings {
    /// `EXECPLANE_KAFKA_BROKERS`: bootstrap servers.
    pub brokers: String,
    /// `EXECPLANE_TOPIC_PREFIX`: prefixes every topic name.
    pub topic_prefix: String,
    /// `EXECPLANE_TOPIC_REPLICATION_FACTOR`: replicas of created topics
    /// instead of the topology's (0: the topology's).
    pub topic_replication_factor: u16,
    /// `EXECPLANE_KAFKA_FETCH_WAIT_MS`: consumers' `fetch.wait.max.ms`.
    pub fetch_wait_ms: u32,
    /// `EXECPLANE_AVRO_FRAMING`: `single-object` or `confluent`.
    pub avro_framing: String,
    /// `EXECPLANE_CONFLUENT_SCHEMA_IDS`: `family=id,...` of the current schemas.
    pub confluent_schema_ids: String,
    /// `EXECPLANE_CONFLUENT_PREVIOUS_SCHEMA_IDS`: `family=id,...` of the previous release's.
    pub confluent_previous_schema_ids: String,
    /// `EXECPLANE_KAFKA_SECURITY_PROTOCOL`: `plaintext`, `ssl`,
    /// `sasl_plaintext` or `sasl_ssl`.
    pub security_protocol: String,
    /// `EXECPLANE_KAFKA_SSL_CA_FILE`: the PEM CAs the brokers' certificates
    /// are checked against (empty: the system's).
    pub ssl_ca_file: String,
    /// `EXECPLANE_KAFKA_SSL_CERT_FILE`: this client's PEM certificate (mutual TLS).
    pub ssl_cert_file: String,
    /// `EXECPLANE_KAFKA_SSL_KEY_FILE`: its PEM private key.
    pub ssl_key_file: String,
    /// `EXECPLANE_KAFKA_SSL_KEY_PASSWORD`: the key's password, if it has one.
    pub ssl_key_password: Secret,
    /// `EXECPLANE_KAFKA_SSL_KEY_PASSWORD_FILE`: the same, read from a file.
    pub ssl_key_password_file: String,
    /// `EXECPLANE_KAFKA_SSL_VERIFY_HOSTNAME`: the broker's name must match
    /// its certificate.
    pub ssl_verify_hostname: bool,
    /// `EXECPLANE_KAFKA_SASL_MECHANISM`: `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub sasl_mechanism: String,
    /// `EXECPLANE_KAFKA_SASL_USERNAME`.
    pub sasl_username: String,
    /// `EXECPLANE_KAFKA_SASL_PASSWORD`.
    pub sasl_password: Secret,
    /// `EXECPLANE_KAFKA_SASL_PASSWORD_FILE`: the password read from a file
    /// (a mounted secret); its last line break is not part of it.
    pub sasl_password_file: String,
    /// Any other librdkafka property: `EXECPLANE_KAFKA_PROPERTY_<NAME>`
    /// (`_` for `.`, `__` for `_`) or the file's `[kafka_properties]`
    /// table; values are kept as secrets (never shown).
    pub properties: Vec<(String, Secret)>,
}

impl Default for KafkaSettings {
    fn default() -> Self {
        Self {
            brokers: defaults::KAFKA_BROKERS.to_owned(),
            topic_prefix: String::new(),
            topic_replication_factor: 0,
            fetch_wait_ms: 500,
            avro_framing: "single-object".into(),
            confluent_schema_ids: String::new(),
            confluent_previous_schema_ids: String::new(),
            security_protocol: "plaintext".into(),
            ssl_ca_file: String::new(),
            ssl_cert_file: String::new(),
            ssl_key_file: String::new(),
            ssl_key_password: Secret::default(),
            ssl_key_password_file: String::new(),
            ssl_verify_hostname: true,
            sasl_mechanism: String::new(),
            sasl_username: String::new(),
            sasl_password: Secret::default(),
            sasl_password_file: String::new(),
            properties: Vec::new(),
        }
    }
}

/// The dispatcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DispatcherSettings {
    /// `EXECPLANE_DISPATCHER_GROUP`: the dispatchers' consumer group.
    pub group: String,
    /// `EXECPLANE_DISPATCHER_MAX_BATCH`: records decided per transaction.
    pub max_batch: usize,
    /// `EXECPLANE_DISPATCHER_BATCH_WINDOW`: wait for more records after the first.
    pub batch_window: DurationMs,
    /// `EXECPLANE_CANCEL_GRACE`: default grace for a runner to confirm a cancel.
    pub cancel_grace: DurationMs,
    /// `EXECPLANE_SWEEP_INTERVAL`: how often due timers are swept.
    pub sweep_interval: DurationMs,
    /// `EXECPLANE_PRESENCE_TTL`: a presence older than this is not live.
    pub presence_ttl: DurationMs,
    /// `EXECPLANE_INBOX_RETENTION`: how long processed input ids are kept.
    pub inbox_retention: DurationMs,
    /// `EXECPLANE_CALLBACK_MAX_ATTEMPTS`: HTTP callback deliveries before giving up.
    pub callback_max_attempts: i32,
    /// `EXECPLANE_CALLBACK_SIGNING_SECRETS`: where each tenant's callback
    /// signing secrets are in the secret store, `<mount>/<path>` with
    /// `{tenant}` in the path (key `signing_secrets`); empty: unsigned.
    pub callback_signing_secrets: String,
}

impl Default for DispatcherSettings {
    fn default() -> Self {
        Self {
            group: "execplane-dispatcher".into(),
            max_batch: 1_000,
            batch_window: DurationMs(2),
            cancel_grace: DurationMs::from_secs(10),
            sweep_interval: DurationMs(100),
            presence_ttl: DurationMs::from_secs(6),
            inbox_retention: DurationMs::from_secs(7 * 24 * 3600),
            callback_max_attempts: 8,
            callback_signing_secrets: String::new(),
        }
    }
}

/// Runner instances (the SDK).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerSettings {
    /// `EXECPLANE_RUNNER_CAPACITY`: concurrent attempts per instance.
    pub capacity: u32,
    /// `EXECPLANE_RUNNER_POOL`: pool labels, `key=value,key=value`.
    pub pool: String,
    /// `EXECPLANE_RUNNER_DRAIN_TIMEOUT`: shutdown waits this long for running attempts.
    pub drain_timeout: DurationMs,
    /// `EXECPLANE_PRESENCE_INTERVAL`: how often instances (and executor sessions) announce themselves.
    pub presence_interval: DurationMs,
    /// `EXECPLANE_RUNNER_STOP_GRACE`: a stopped tool's time between SIGINT and SIGKILL.
    pub stop_grace: DurationMs,
    /// `EXECPLANE_RUNNER_WORK_DIR`: where tools' private working directories go; empty: `$TMPDIR/execplane-work`.
    pub work_dir: String,
    /// `EXECPLANE_RUNNER_MAX_OUTPUT_MIB`: the output an attempt's tools may log, all runs together.
    pub max_output_mib: u32,
    /// `EXECPLANE_SANDBOX`: `on` (each tool in a sandbox of its own) or `off` (as the runner's user; one tenant only).
    pub sandbox: String,
    /// `EXECPLANE_SANDBOX_BWRAP`: the bubblewrap binary that builds the sandbox.
    pub sandbox_bwrap: String,
    /// `EXECPLANE_SANDBOX_UID_BASE`: the first uid (and gid) of the sandbox's pool.
    pub sandbox_uid_base: u32,
    /// `EXECPLANE_SANDBOX_UIDS`: how many uids the pool holds (attempts with tools at once on this host).
    pub sandbox_uids: u32,
    /// `EXECPLANE_SANDBOX_READ_ONLY`: more host paths every tool sees read-only, comma-separated.
    pub sandbox_read_only: String,
    /// `EXECPLANE_SANDBOX_MEMORY_MIB`: memory and swap of one tool and what it starts.
    pub sandbox_memory_mib: u32,
    /// `EXECPLANE_SANDBOX_PIDS`: processes and threads of one tool at once.
    pub sandbox_pids: u32,
    /// `EXECPLANE_SANDBOX_CPU_PERCENT`: the CPU time of one tool and what it starts together, in percent of one CPU.
    pub sandbox_cpu_percent: u32,
    /// `EXECPLANE_SANDBOX_CPU_SECONDS`: CPU seconds of each process of a tool.
    pub sandbox_cpu_seconds: u32,
    /// `EXECPLANE_SANDBOX_OPEN_FILES`: open files of each process of a tool.
    pub sandbox_open_files: u32,
    /// `EXECPLANE_SANDBOX_DISK_MIB`: the size of an attempt's working directory (a tmpfs).
    pub sandbox_disk_mib: u32,
    /// `EXECPLANE_SANDBOX_NETWORK`: `guarded` (the host's network, but not the platform's endpoints nor the deny list) or `host` (all of it).
    pub sandbox_network: String,
    /// `EXECPLANE_SANDBOX_DENY`: more destinations no tool may reach (`host:port`, `[v6]:port`, CIDR), comma-separated.
    pub sandbox_deny: String,
}

impl Default for RunnerSettings {
    fn default() -> Self {
        Self {
            capacity: 16,
            pool: String::new(),
            drain_timeout: DurationMs::from_secs(30),
            presence_interval: DurationMs::from_secs(1),
            stop_grace: DurationMs::from_secs(2),
            work_dir: String::new(),
            max_output_mib: 64,
            sandbox: "on".into(),
            sandbox_bwrap: "/usr/bin/bwrap".into(),
            sandbox_uid_base: 1_900_000_000,
            sandbox_uids: 1024,
            sandbox_read_only: String::new(),
            sandbox_memory_mib: 2048,
            sandbox_pids: 512,
            sandbox_cpu_percent: 100,
            sandbox_cpu_seconds: 3600,
            sandbox_open_files: 4096,
            sandbox_disk_mib: 1024,
            sandbox_network: "guarded".into(),
            // Cloud metadata services: credentials of the host's own.
            sandbox_deny: "169.254.0.0/16,fd00:ec2::254".into(),
        }
    }
}

/// The ansible runner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnsibleSettings {
    /// `EXECPLANE_ANSIBLE_BIN_DIR`: where `ansible-playbook` and
    /// `ansible-inventory` are (ansible-core's scripts, e.g. a virtualenv's
    /// `bin`).
    pub bin_dir: String,
}

impl Default for AnsibleSettings {
    fn default() -> Self {
        Self {
            bin_dir: "/usr/bin".into(),
        }
    }
}

/// The ssh runner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SshSettings {
    /// `EXECPLANE_SSH_CLIENT`: the OpenSSH client it drives.
    pub client: String,
    /// `EXECPLANE_SSH_CONNECT_TIMEOUT`: the longest one connection may take.
    pub connect_timeout: DurationMs,
    /// `EXECPLANE_SFTP_CLIENT`: the OpenSSH sftp client file transfers use.
    pub sftp_client: String,
}

impl Default for SshSettings {
    fn default() -> Self {
        Self {
            client: "/usr/bin/ssh".into(),
            connect_timeout: DurationMs::from_secs(10),
            sftp_client: "/usr/bin/sftp".into(),
        }
    }
}

/// The helm runner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelmSettings {
    /// `EXECPLANE_HELM_BIN`: the helm 3 CLI it drives.
    pub bin: String,
}

impl Default for HelmSettings {
    fn default() -> Self {
        Self {
            bin: "/usr/local/bin/helm".into(),
        }
    }
}

/// The opentofu runner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TofuSettings {
    /// `EXECPLANE_TOFU_BIN`: the Terraform-compatible CLI it drives (`tofu`
    /// or `terraform`).
    pub bin: String,
    /// `EXECPLANE_TOFU_PROVIDER_MIRROR`: a filesystem mirror of providers
    /// (empty: the CLI installs them from their registries).
    pub provider_mirror: String,
    /// `EXECPLANE_TOFU_STATE_DIR`: where the `local` backend's states live.
    pub state_dir: String,
}

impl Default for TofuSettings {
    fn default() -> Self {
        Self {
            bin: "/usr/local/bin/tofu".into(),
            provider_mirror: String::new(),
            state_dir: "/var/lib/execplane/opentofu-state".into(),
        }
    }
}

/// The kubernetes runner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubernetesSettings {
    /// `EXECPLANE_KUBERNETES_CONNECT_TIMEOUT`: the longest a connection to
    /// an API server may take.
    pub connect_timeout: DurationMs,
    /// `EXECPLANE_KUBERNETES_REQUEST_TIMEOUT`: the longest one API request
    /// may take to answer.
    pub request_timeout: DurationMs,
    /// `EXECPLANE_KUBERNETES_POLL_INTERVAL`: how often `kubernetes.wait`
    /// and `kubernetes.rollout.status` look at their object.
    pub poll_interval: DurationMs,
}

impl Default for KubernetesSettings {
    fn default() -> Self {
        Self {
            connect_timeout: DurationMs::from_secs(10),
            request_timeout: DurationMs::from_secs(30),
            poll_interval: DurationMs(500),
        }
    }
}

/// The verification runner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerificationSettings {
    /// `EXECPLANE_VERIFY_PROBES`: allowlisted `verify.custom.probe` ids.
    pub probes: String,
    /// `EXECPLANE_VERIFY_MAX_TIMEOUT`: the longest per-sample timeout a probe may ask for.
    pub max_timeout: DurationMs,
    /// `EXECPLANE_VERIFY_MAX_BODY_BYTES`: the most body bytes an HTTP probe reads.
    pub max_body_bytes: usize,
    /// `EXECPLANE_VERIFY_PROBE_DIR`: the operator's probe programs; empty: none.
    pub probe_dir: String,
}

impl Default for VerificationSettings {
    fn default() -> Self {
        Self {
            // The verification runner's built-in probes (`cli::assemble`'s
            // tests hold the two lists equal).
            probes: String::new(),
            max_timeout: DurationMs::from_secs(60),
            max_body_bytes: 1024 * 1024,
            probe_dir: String::new(),
        }
    }
}

/// The operator's policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicySettings {
    /// `EXECPLANE_POLICY_FILE` (alias `EXECPLANE_POLICY`): the policy file
    /// (YAML for `.yaml`/`.yml`, else TOML); empty: the defaults.
    pub file: String,
}

/// The ingress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IngressSettings {
    /// `EXECPLANE_INGRESS_BIND`: the address both listeners bind.
    pub bind: String,
    /// `EXECPLANE_INGRESS_HTTP_PORT` (alias `RUNTIME_CONTROL_PLANE_HTTP_PORT`).
    pub http_port: u16,
    /// `EXECPLANE_INGRESS_TCP_PORT` (alias `RUNTIME_CONTROL_PLANE_TCP_PORT`).
    pub tcp_port: u16,
    /// `EXECPLANE_INGRESS_KEY` (alias `PLUGIN_CONTROL_PLANE_KEY`): the executors' key. No default.
    pub key: Secret,
    /// `EXECPLANE_API_KEY`: the execute API's key. No default.
    pub api_key: Secret,
    /// `EXECPLANE_INGRESS_ALLOW_CIDRS` (alias `PLUGIN_CONTROL_PLANE_ALLOW_CIDRS`).
    pub allow_cidrs: String,
    /// `EXECPLANE_INGRESS_TRUST_PROXY` (alias `PLUGIN_CONTROL_PLANE_TRUST_PROXY`).
    pub trust_proxy: bool,
    /// `EXECPLANE_INGRESS_TRUSTED_PROXIES`: the proxies' CIDRs.
    pub trusted_proxies: String,
    /// `EXECPLANE_INGRESS_MAX_BODY`: largest HTTP body, in bytes.
    pub max_body: usize,
    /// `EXECPLANE_INGRESS_MAX_FRAME`: largest TCP frame, in bytes.
    pub max_frame: usize,
    /// `EXECPLANE_INGRESS_MAX_OUTPUT`: largest output file an executor uploads, in bytes.
    pub max_output: usize,
    /// `EXECPLANE_INGRESS_MAX_CONNECTIONS_PER_PEER`: open connections per client address.
    pub max_connections_per_peer: usize,
    /// `EXECPLANE_INGRESS_MAX_CONNECTIONS_PER_PRINCIPAL`: open HTTP connections that carried one principal's key or console session.
    pub max_connections_per_principal: usize,
    /// `EXECPLANE_INGRESS_MAX_CONNECTIONS`: open connections in all.
    pub max_connections: usize,
    /// `EXECPLANE_INGRESS_HEADER_TIMEOUT`: an HTTP request's headers must arrive within this.
    pub header_timeout: DurationMs,
    /// `EXECPLANE_INGRESS_PARTIAL_FRAME_BUDGET`: bytes all TCP connections may hold in unfinished frames.
    pub partial_frame_budget: usize,
    /// `EXECPLANE_INGRESS_READ_TIMEOUT`: a TCP frame started must be complete within this.
    pub read_timeout: DurationMs,
    /// `EXECPLANE_INGRESS_IDLE_TIMEOUT`: a connection that moves no byte for this long is closed.
    pub idle_timeout: DurationMs,
    /// `EXECPLANE_INGRESS_DOWNLOAD_TIMEOUT`: an artifact download not sent whole within this is cut off.
    pub download_timeout: DurationMs,
    /// `EXECPLANE_INGRESS_SESSION_TTL`: an executor session with no request for this long ends.
    pub session_ttl: DurationMs,
    /// `EXECPLANE_INGRESS_METRICS_UPSTREAM`: the dispatcher's `/metrics` URL to append.
    pub metrics_upstream: String,
}

impl Default for IngressSettings {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1".into(),
            http_port: 3000,
            tcp_port: 3001,
            key: Secret::default(),
            api_key: Secret::default(),
            allow_cidrs: "127.0.0.0/8,::1/128".into(),
            trust_proxy: false,
            trusted_proxies: String::new(),
            max_body: 1024 * 1024,
            max_frame: 1024 * 1024,
            max_output: 16 * 1024 * 1024,
            max_connections_per_peer: 64,
            max_connections_per_principal: 64,
            max_connections: 1024,
            header_timeout: DurationMs::from_secs(10),
            partial_frame_budget: 64 * 1024 * 1024,
            read_timeout: DurationMs::from_secs(10),
            idle_timeout: DurationMs::from_secs(60),
            download_timeout: DurationMs::from_secs(300),
            session_ttl: DurationMs::from_secs(30),
            metrics_upstream: String::new(),
        }
    }
}

/// The artifact worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArtifactSettings {
    /// `EXECPLANE_ARTIFACT_DIR`: where bundles are stored without S3.
    pub dir: String,
    /// `EXECPLANE_ARTIFACT_GROUP`: the workers' consumer group.
    pub group: String,
    /// `EXECPLANE_ARTIFACT_GRACE`: how long after an attempt ends its bundle waits for late chunks.
    pub grace: DurationMs,
    /// `EXECPLANE_ARTIFACT_DETECTORS`: detectors that mask secret-shaped text.
    pub detectors: String,
    /// `EXECPLANE_ARTIFACT_RETENTION_LOGS`.
    pub retention_logs: DurationMs,
    /// `EXECPLANE_ARTIFACT_RETENTION_RENDERED`.
    pub retention_rendered: DurationMs,
    /// `EXECPLANE_ARTIFACT_RETENTION_EVIDENCE`.
    pub retention_evidence: DurationMs,
    /// `EXECPLANE_ARTIFACT_GC_INTERVAL`: how often expired artifacts are collected.
    pub gc_interval: DurationMs,
}

impl Default for ArtifactSettings {
    fn default() -> Self {
        Self {
            dir: "execplane-artifacts".into(),
            group: "execplane-artifacts".into(),
            grace: DurationMs::from_secs(2),
            // Every built-in detector (`cli::assemble`'s tests hold the two
            // lists equal).
            detectors: "pem_private_key,aws_access_key_id,bearer_token".into(),
            retention_logs: DurationMs::from_secs(7 * 24 * 3600),
            retention_rendered: DurationMs::from_secs(30 * 24 * 3600),
            retention_evidence: DurationMs::from_secs(365 * 24 * 3600),
            gc_interval: DurationMs::from_secs(3600),
        }
    }
}

/// S3-compatible storage for artifacts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Settings {
    /// `EXECPLANE_S3_ENDPOINT`: empty: the local directory.
    pub endpoint: String,
    /// `EXECPLANE_S3_REGION`.
    pub region: String,
    /// `EXECPLANE_S3_BUCKET`.
    pub bucket: String,
    /// `EXECPLANE_S3_ACCESS_KEY_ID`.
    pub access_key_id: String,
    /// `EXECPLANE_S3_SECRET_ACCESS_KEY`.
    pub secret_access_key: Secret,
}

impl Default for S3Settings {
    fn default() -> Self {
        Self {
            endpoint: String::new(),
            region: "garage".into(),
            bucket: "execplane-artifacts".into(),
            access_key_id: String::new(),
            secret_access_key: Secret::default(),
        }
    }
}

/// The Vault-API secret store runners resolve references from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VaultConfig {
    /// `EXECPLANE_VAULT_ADDR`: empty: no secret store.
    pub addr: String,
    /// `EXECPLANE_VAULT_TOKEN`: token auth.
    pub token: Secret,
    /// `EXECPLANE_VAULT_ROLE_ID`: AppRole auth (with the secret id).
    pub role_id: String,
    /// `EXECPLANE_VAULT_SECRET_ID`.
    pub secret_id: Secret,
    /// `EXECPLANE_VAULT_APPROLE_MOUNT`.
    pub approle_mount: String,
}

impl Default for VaultConfig {
    fn default() -> Self {
        Self {
            addr: String::new(),
            token: Secret::default(),
            role_id: String::new(),
            secret_id: Secret::default(),
            approle_mount: "approle".into(),
        }
    }
}

/// The whole configuration of one process, by area.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    pub database: DatabaseSettings,
    pub kafka: KafkaSettings,
    pub telemetry: TelemetrySettings,
    pub dispatcher: DispatcherSettings,
    pub runner: RunnerSettings,
    pub verification: VerificationSettings,
    pub ssh: SshSettings,
    pub ansible: AnsibleSettings,
    pub kubernetes: KubernetesSettings,
    pub helm: HelmSettings,
    pub opentofu: TofuSettings,
    pub policy: PolicySettings,
    pub ingress: IngressSettings,
    pub artifacts: ArtifactSettings,
    pub s3: S3Settings,
    pub vault: VaultConfig,
}

/// A value a setting holds: read from text (a variable, or a TOML value
/// written as text), and shown back.
pub trait SettingValue: Sized {
    fn read(text: &str) -> Result<Self, String>;
    fn show(&self) -> String;
}

impl SettingValue for String {
    fn read(text: &str) -> Result<Self, String> {
        Ok(text.to_owned())
    }
    fn show(&self) -> String {
        self.clone()
    }
}

impl SettingValue for Secret {
    fn read(text: &str) -> Result<Self, String> {
        Ok(Secret::new(text))
    }
    fn show(&self) -> String {
        self.expose().to_owned()
    }
}

impl SettingValue for bool {
    fn read(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" | "" => Ok(false),
            other => Err(format!("`{other}` is not a boolean (true/false)")),
        }
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

impl SettingValue for DurationMs {
    fn read(text: &str) -> Result<Self, String> {
        DurationMs::parse(text)
    }
    fn show(&self) -> String {
        self.0.to_string()
    }
}

impl SettingValue for LogFormat {
    fn read(text: &str) -> Result<Self, String> {
        match text.trim() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("`{other}` is neither `text` nor `json`")),
        }
    }
    fn show(&self) -> String {
        match self {
            LogFormat::Text => "text".into(),
            LogFormat::Json => "json".into(),
        }
    }
}

macro_rules! number_setting {
    ($($kind:ty),*) => {$(
        impl SettingValue for $kind {
            fn read(text: &str) -> Result<Self, String> {
                text.trim()
                    .parse()
                    .map_err(|error| format!("`{}` is not a number ({error})", text.trim()))
            }
            fn show(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
number_setting!(u16, u32, i32, usize);

/// One setting: its variable, the other names it is read from (the
/// variable wins when both are set), and where it lives.
pub struct Setting {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub set: fn(&mut Config, &str) -> Result<(), String>,
    pub get: fn(&Config) -> String,
}

impl Setting {
    /// Its key in the TOML file: the name without `EXECPLANE_`, lowercase.
    pub fn file_key(&self) -> String {
        self.name
            .strip_prefix("EXECPLANE_")
            .unwrap_or(self.name)
            .to_ascii_lowercase()
    }
}

macro_rules! settings {
    ($($name:literal $([$($alias:literal),*])? => $($field:ident).+;)*) => {
        /// Every setting, once.
        pub const SETTINGS: &[Setting] = &[$(
            Setting {
                name: $name,
                aliases: &[$($($alias),*)?],
                set: |config, text| {
                    config.$($field).+ = SettingValue::read(text)?;
                    Ok(())
                },
                get: |config| SettingValue::show(&config.$($field).+),
            },
        )*];
    };
}

settings! {
    "EXECPLANE_DATABASE_URL" ["DATABASE_URL"] => database.url;
    "EXECPLANE_DATABASE_MAX_CONNECTIONS" => database.max_connections;
    "EXECPLANE_KAFKA_BROKERS" => kafka.brokers;
    "EXECPLANE_TOPIC_PREFIX" => kafka.topic_prefix;
    "EXECPLANE_TOPIC_REPLICATION_FACTOR" => kafka.topic_replication_factor;
    "EXECPLANE_KAFKA_FETCH_WAIT_MS" => kafka.fetch_wait_ms;
    "EXECPLANE_AVRO_FRAMING" => kafka.avro_framing;
    "EXECPLANE_CONFLUENT_SCHEMA_IDS" => kafka.confluent_schema_ids;
    "EXECPLANE_CONFLUENT_PREVIOUS_SCHEMA_IDS" => kafka.confluent_previous_schema_ids;
    "EXECPLANE_KAFKA_SECURITY_PROTOCOL" => kafka.security_protocol;
    "EXECPLANE_KAFKA_SSL_CA_FILE" => kafka.ssl_ca_file;
    "EXECPLANE_KAFKA_SSL_CERT_FILE" => kafka.ssl_cert_file;
    "EXECPLANE_KAFKA_SSL_KEY_FILE" => kafka.ssl_key_file;
    "EXECPLANE_KAFKA_SSL_KEY_PASSWORD" => kafka.ssl_key_password;
    "EXECPLANE_KAFKA_SSL_KEY_PASSWORD_FILE" => kafka.ssl_key_password_file;
    "EXECPLANE_KAFKA_SSL_VERIFY_HOSTNAME" => kafka.ssl_verify_hostname;
    "EXECPLANE_KAFKA_SASL_MECHANISM" => kafka.sasl_mechanism;
    "EXECPLANE_KAFKA_SASL_USERNAME" => kafka.sasl_username;
    "EXECPLANE_KAFKA_SASL_PASSWORD" => kafka.sasl_password;
    "EXECPLANE_KAFKA_SASL_PASSWORD_FILE" => kafka.sasl_password_file;
    "EXECPLANE_DISPATCHER_GROUP" => dispatcher.group;
    "EXECPLANE_DISPATCHER_MAX_BATCH" => dispatcher.max_batch;
    "EXECPLANE_DISPATCHER_BATCH_WINDOW" => dispatcher.batch_window;
    "EXECPLANE_CANCEL_GRACE" => dispatcher.cancel_grace;
    "EXECPLANE_SWEEP_INTERVAL" => dispatcher.sweep_interval;
    "EXECPLANE_PRESENCE_INTERVAL" => runner.presence_interval;
    "EXECPLANE_PRESENCE_TTL" => dispatcher.presence_ttl;
    "EXECPLANE_RUNNER_CAPACITY" => runner.capacity;
    "EXECPLANE_RUNNER_POOL" => runner.pool;
    "EXECPLANE_RUNNER_DRAIN_TIMEOUT" => runner.drain_timeout;
    "EXECPLANE_RUNNER_STOP_GRACE" => runner.stop_grace;
    "EXECPLANE_RUNNER_WORK_DIR" => runner.work_dir;
    "EXECPLANE_RUNNER_MAX_OUTPUT_MIB" => runner.max_output_mib;
    "EXECPLANE_SANDBOX" => runner.sandbox;
    "EXECPLANE_SANDBOX_BWRAP" => runner.sandbox_bwrap;
    "EXECPLANE_SANDBOX_UID_BASE" => runner.sandbox_uid_base;
    "EXECPLANE_SANDBOX_UIDS" => runner.sandbox_uids;
    "EXECPLANE_SANDBOX_READ_ONLY" => runner.sandbox_read_only;
    "EXECPLANE_SANDBOX_MEMORY_MIB" => runner.sandbox_memory_mib;
    "EXECPLANE_SANDBOX_PIDS" => runner.sandbox_pids;
    "EXECPLANE_SANDBOX_CPU_PERCENT" => runner.sandbox_cpu_percent;
    "EXECPLANE_SANDBOX_CPU_SECONDS" => runner.sandbox_cpu_seconds;
    "EXECPLANE_SANDBOX_OPEN_FILES" => runner.sandbox_open_files;
    "EXECPLANE_SANDBOX_DISK_MIB" => runner.sandbox_disk_mib;
    "EXECPLANE_SANDBOX_NETWORK" => runner.sandbox_network;
    "EXECPLANE_SANDBOX_DENY" => runner.sandbox_deny;
    "EXECPLANE_INBOX_RETENTION" => dispatcher.inbox_retention;
    "EXECPLANE_CALLBACK_MAX_ATTEMPTS" => dispatcher.callback_max_attempts;
    "EXECPLANE_CALLBACK_SIGNING_SECRETS" => dispatcher.callback_signing_secrets;
    "EXECPLANE_VERIFY_PROBES" => verification.probes;
    "EXECPLANE_VERIFY_MAX_TIMEOUT" => verification.max_timeout;
    "EXECPLANE_VERIFY_MAX_BODY_BYTES" => verification.max_body_bytes;
    "EXECPLANE_VERIFY_PROBE_DIR" => verification.probe_dir;
    "EXECPLANE_SSH_CLIENT" => ssh.client;
    "EXECPLANE_SSH_CONNECT_TIMEOUT" => ssh.connect_timeout;
    "EXECPLANE_SFTP_CLIENT" => ssh.sftp_client;
    "EXECPLANE_ANSIBLE_BIN_DIR" => ansible.bin_dir;
    "EXECPLANE_KUBERNETES_CONNECT_TIMEOUT" => kubernetes.connect_timeout;
    "EXECPLANE_KUBERNETES_REQUEST_TIMEOUT" => kubernetes.request_timeout;
    "EXECPLANE_KUBERNETES_POLL_INTERVAL" => kubernetes.poll_interval;
    "EXECPLANE_HELM_BIN" => helm.bin;
    "EXECPLANE_TOFU_BIN" => opentofu.bin;
    "EXECPLANE_TOFU_PROVIDER_MIRROR" => opentofu.provider_mirror;
    "EXECPLANE_TOFU_STATE_DIR" => opentofu.state_dir;
    "EXECPLANE_POLICY_FILE" ["EXECPLANE_POLICY"] => policy.file;
    "EXECPLANE_METRICS_ADDR" => telemetry.metrics_addr;
    "EXECPLANE_INGRESS_KEY" ["PLUGIN_CONTROL_PLANE_KEY"] => ingress.key;
    "EXECPLANE_API_KEY" => ingress.api_key;
    "EXECPLANE_INGRESS_BIND" => ingress.bind;
    "EXECPLANE_INGRESS_HTTP_PORT" ["RUNTIME_CONTROL_PLANE_HTTP_PORT"] => ingress.http_port;
    "EXECPLANE_INGRESS_TCP_PORT" ["RUNTIME_CONTROL_PLANE_TCP_PORT"] => ingress.tcp_port;
    "EXECPLANE_INGRESS_ALLOW_CIDRS" ["PLUGIN_CONTROL_PLANE_ALLOW_CIDRS"] => ingress.allow_cidrs;
    "EXECPLANE_INGRESS_TRUST_PROXY" ["PLUGIN_CONTROL_PLANE_TRUST_PROXY"] => ingress.trust_proxy;
    "EXECPLANE_INGRESS_TRUSTED_PROXIES" => ingress.trusted_proxies;
    "EXECPLANE_INGRESS_MAX_BODY" => ingress.max_body;
    "EXECPLANE_INGRESS_MAX_FRAME" => ingress.max_frame;
    "EXECPLANE_INGRESS_MAX_OUTPUT" => ingress.max_output;
    "EXECPLANE_INGRESS_MAX_CONNECTIONS_PER_PEER" => ingress.max_connections_per_peer;
    "EXECPLANE_INGRESS_MAX_CONNECTIONS_PER_PRINCIPAL" => ingress.max_connections_per_principal;
    "EXECPLANE_INGRESS_MAX_CONNECTIONS" => ingress.max_connections;
    "EXECPLANE_INGRESS_HEADER_TIMEOUT" => ingress.header_timeout;
    "EXECPLANE_INGRESS_PARTIAL_FRAME_BUDGET" => ingress.partial_frame_budget;
    "EXECPLANE_INGRESS_READ_TIMEOUT" => ingress.read_timeout;
    "EXECPLANE_INGRESS_IDLE_TIMEOUT" => ingress.idle_timeout;
    "EXECPLANE_INGRESS_DOWNLOAD_TIMEOUT" => ingress.download_timeout;
    "EXECPLANE_INGRESS_SESSION_TTL" => ingress.session_ttl;
    "EXECPLANE_INGRESS_METRICS_UPSTREAM" => ingress.metrics_upstream;
    "EXECPLANE_ARTIFACT_DIR" => artifacts.dir;
    "EXECPLANE_S3_ENDPOINT" => s3.endpoint;
    "EXECPLANE_S3_REGION" => s3.region;
    "EXECPLANE_S3_BUCKET" => s3.bucket;
    "EXECPLANE_S3_ACCESS_KEY_ID" => s3.access_key_id;
    "EXECPLANE_S3_SECRET_ACCESS_KEY" => s3.secret_access_key;
    "EXECPLANE_ARTIFACT_GROUP" => artifacts.group;
    "EXECPLANE_ARTIFACT_GRACE" => artifacts.grace;
    "EXECPLANE_ARTIFACT_DETECTORS" => artifacts.detectors;
    "EXECPLANE_ARTIFACT_RETENTION_LOGS" => artifacts.retention_logs;
    "EXECPLANE_ARTIFACT_RETENTION_RENDERED" => artifacts.retention_rendered;
    "EXECPLANE_ARTIFACT_RETENTION_EVIDENCE" => artifacts.retention_evidence;
    "EXECPLANE_ARTIFACT_GC_INTERVAL" => artifacts.gc_interval;
    "EXECPLANE_VAULT_ADDR" => vault.addr;
    "EXECPLANE_VAULT_TOKEN" => vault.token;
    "EXECPLANE_VAULT_ROLE_ID" => vault.role_id;
    "EXECPLANE_VAULT_SECRET_ID" => vault.secret_id;
    "EXECPLANE_VAULT_APPROLE_MOUNT" => vault.approle_mount;
    "EXECPLANE_LOG" => telemetry.log;
    "EXECPLANE_LOG_FORMAT" => telemetry.log_format;
}

/// The variable naming the TOML file (not a setting of its own).
pub const CONFIG_FILE_VARIABLE: &str = "EXECPLANE_CONFIG";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Every problem found, from the file, the environment and the checks.
    #[error("{} problem(s) in the configuration:\n  - {}", .0.len(), .0.join("\n  - "))]
    Invalid(Vec<String>),
}

/// Settings of the seed's services that have no meaning here (a name, or a
/// prefix ending in `_`), and what replaces each: refused at start, by
/// name, rather than ignored.
pub const SEED_LEFTOVERS: [(&str, &str); 5] = [
    (
        "RUNTIME_ENGINE_",
        "there is no runtime engine RPC: the dispatcher and the runners speak Kafka (EXECPLANE_KAFKA_BROKERS)",
    ),
    (
        "SECRETS_TCP_CONNECT",
        "there is no secret manager service: secrets come from Vault (EXECPLANE_VAULT_ADDR)",
    ),
    (
        "FILE_SERVICE_BASE_URL",
        "there is no file service: artifacts live in S3-compatible storage (EXECPLANE_S3_ENDPOINT) or EXECPLANE_ARTIFACT_DIR",
    ),
    (
        "API_BASE_URL",
        "there is no API service to call: the execute API is the ingress's own (EXECPLANE_INGRESS_HTTP_PORT), and commands arrive on Kafka",
    ),
    (
        "REDIS_",
        "nothing is kept in Redis: attempts, leases and sessions are in Postgres (EXECPLANE_DATABASE_URL)",
    ),
];

/// A problem for each of `names` (the environment's variable names) that
/// is a seed setting without meaning here ([`SEED_LEFTOVERS`]).
pub fn seed_leftovers<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut problems: Vec<String> = names
        .into_iter()
        .filter_map(|name| {
            SEED_LEFTOVERS.iter().find_map(|(setting, instead)| {
                let matches = if setting.ends_with('_') {
                    name.starts_with(setting)
                } else {
                    name == *setting
                };
                matches.then(|| format!("{name} has no meaning here: {instead}"))
            })
        })
        .collect();
    problems.sort();
    problems
}

impl Config {
    /// The environment's `EXECPLANE_KAFKA_PROPERTY_*` variables.
    pub fn kafka_properties_of_environment() -> Vec<(String, String)> {
        std::env::vars()
            .filter(|(name, _)| name.starts_with(KAFKA_PROPERTY_PREFIX))
            .collect()
    }

    /// Reads the file (when given, or named by `EXECPLANE_CONFIG`), then the
    /// environment (`env`, and its `EXECPLANE_KAFKA_PROPERTY_*` variables as
    /// `(name, value)`), and checks each setting on its own terms: the
    /// settings and every problem found. Fails only when the file cannot be
    /// read. This is half of loading: a process loads with
    /// `cli::assemble::load`, which adds the checks only an area can make
    /// and the operator's policy, and fails on any problem.
    pub fn read_with(
        file: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
        kafka_properties: &[(String, String)],
    ) -> Result<(Self, Vec<String>), ConfigError> {
        let mut config = Config::default();
        let mut problems = Vec::new();
        let file = file
            .map(Path::to_path_buf)
            .or_else(|| env(CONFIG_FILE_VARIABLE).map(PathBuf::from));
        if let Some(path) = &file {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.clone(),
                source,
            })?;
            config.apply_file(path, &text, &mut problems);
        }
        for setting in SETTINGS {
            let value =
                env(setting.name).or_else(|| setting.aliases.iter().find_map(|alias| env(alias)));
            if let Some(value) = value {
                if let Err(message) = (setting.set)(&mut config, &value) {
                    problems.push(format!("{}: {message}", setting.name));
                }
            }
        }
        for (variable, value) in kafka_properties {
            let name = kafka_property_name(&variable[KAFKA_PROPERTY_PREFIX.len()..]);
            config.set_kafka_property(name, value, variable, &mut problems);
        }
        config.check(&mut problems);
        Ok((config, problems))
    }

    /// The TOML file: flat keys, each a setting's variable without the
    /// prefix, lowercase (`kafka_brokers = "…"`).
    fn apply_file(&mut self, path: &Path, text: &str, problems: &mut Vec<String>) {
        let table: toml::Table = match toml::from_str(text) {
            Ok(table) => table,
            Err(error) => {
                problems.push(format!("config file {}: {error}", path.display()));
                return;
            }
        };
        for (key, value) in table {
            if key == "kafka_properties" {
                self.apply_kafka_properties(path, value, problems);
                continue;
            }
            let Some(setting) = SETTINGS.iter().find(|setting| setting.file_key() == key) else {
                problems.push(format!(
                    "config file {}: unknown key `{key}`",
                    path.display()
                ));
                continue;
            };
            let text = match toml_text(value) {
                Ok(text) => text,
                Err(kind) => {
                    problems.push(format!(
                        "config file {}: `{key}` must be a string, number or boolean, not {kind}",
                        path.display(),
                    ));
                    continue;
                }
            };
            if let Err(message) = (setting.set)(self, &text) {
                problems.push(format!(
                    "config file {}: `{key}`: {message}",
                    path.display()
                ));
            }
        }
    }

    /// The file's `[kafka_properties]` table: librdkafka property names,
    /// string, number or boolean values.
    fn apply_kafka_properties(
        &mut self,
        path: &Path,
        value: toml::Value,
        problems: &mut Vec<String>,
    ) {
        let toml::Value::Table(table) = value else {
            problems.push(format!(
                "config file {}: `kafka_properties` must be a table",
                path.display()
            ));
            return;
        };
        for (name, value) in table {
            let text = match toml_text(value) {
                Ok(text) => text,
                Err(kind) => {
                    problems.push(format!(
                        "config file {}: kafka_properties.`{name}` must be a string, number or boolean, not {kind}",
                        path.display(),
                    ));
                    continue;
                }
            };
            let origin = format!("config file {}: kafka_properties", path.display());
            self.set_kafka_property(name, &text, &origin, problems);
        }
    }

    /// One pass-through librdkafka property, unless execplane relies on it
    /// or it has a setting of its own.
    fn set_kafka_property(
        &mut self,
        name: String,
        value: &str,
        origin: &str,
        problems: &mut Vec<String>,
    ) {
        if let Some((_, why)) = KAFKA_RESERVED
            .iter()
            .find(|(reserved, _)| *reserved == name)
        {
            problems.push(format!("{origin}: `{name}` cannot be overridden: {why}"));
            return;
        }
        if let Some((_, setting)) = KAFKA_OWN_SETTINGS.iter().find(|(own, _)| *own == name) {
            problems.push(format!(
                "{origin}: `{name}` has a setting of its own: use {setting}"
            ));
            return;
        }
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '_');
        if !valid {
            problems.push(format!(
                "{origin}: `{name}` is not a librdkafka property name"
            ));
            return;
        }
        self.kafka
            .properties
            .retain(|(existing, _)| *existing != name);
        self.kafka.properties.push((name, Secret::new(value)));
    }

    /// The one validation pass: every rule across settings, every problem.
    fn check(&mut self, problems: &mut Vec<String>) {
        self.check_kafka_security(problems);
        if let Err(message) = self.runner_pool() {
            problems.push(message);
        }
        if !matches!(self.runner.sandbox.trim(), "on" | "off") {
            problems.push(format!(
                "EXECPLANE_SANDBOX: `{}` is neither `on` nor `off`",
                self.runner.sandbox.trim()
            ));
        }
        if !matches!(self.runner.sandbox_network.trim(), "guarded" | "host") {
            problems.push(format!(
                "EXECPLANE_SANDBOX_NETWORK: `{}` is neither `guarded` nor `host`",
                self.runner.sandbox_network.trim()
            ));
        }
        for path in entries(&self.runner.sandbox_read_only) {
            if !Path::new(path).is_absolute() {
                problems.push(format!(
                    "EXECPLANE_SANDBOX_READ_ONLY: `{path}` is not an absolute path"
                ));
            }
        }
        let runner = &self.runner;
        for (name, value) in [
            ("EXECPLANE_RUNNER_MAX_OUTPUT_MIB", runner.max_output_mib),
            ("EXECPLANE_SANDBOX_UIDS", runner.sandbox_uids),
            ("EXECPLANE_SANDBOX_MEMORY_MIB", runner.sandbox_memory_mib),
            ("EXECPLANE_SANDBOX_PIDS", runner.sandbox_pids),
            ("EXECPLANE_SANDBOX_CPU_PERCENT", runner.sandbox_cpu_percent),
            ("EXECPLANE_SANDBOX_CPU_SECONDS", runner.sandbox_cpu_seconds),
            ("EXECPLANE_SANDBOX_OPEN_FILES", runner.sandbox_open_files),
            ("EXECPLANE_SANDBOX_DISK_MIB", runner.sandbox_disk_mib),
        ] {
            if value == 0 {
                problems.push(format!("{name}: must be at least 1"));
            }
        }
        if runner.sandbox_uid_base < 65_536
            || u64::from(runner.sandbox_uid_base) + u64::from(runner.sandbox_uids)
                > u64::from(u32::MAX - 1)
        {
            problems.push(
                "EXECPLANE_SANDBOX_UID_BASE: the pool must lie between uid 65536 and 4294967294"
                    .into(),
            );
        }
        for (name, path) in [
            ("EXECPLANE_RUNNER_WORK_DIR", &self.runner.work_dir),
            ("EXECPLANE_VERIFY_PROBE_DIR", &self.verification.probe_dir),
            ("EXECPLANE_HELM_BIN", &self.helm.bin),
            ("EXECPLANE_TOFU_BIN", &self.opentofu.bin),
            (
                "EXECPLANE_TOFU_PROVIDER_MIRROR",
                &self.opentofu.provider_mirror,
            ),
            ("EXECPLANE_TOFU_STATE_DIR", &self.opentofu.state_dir),
            ("EXECPLANE_SANDBOX_BWRAP", &self.runner.sandbox_bwrap),
        ] {
            let path = path.trim();
            if !path.is_empty() && !Path::new(path).is_absolute() {
                problems.push(format!("{name}: `{path}` is not an absolute path"));
            }
        }
        let grace = self.runner.stop_grace.as_std();
        if grace < std::time::Duration::from_millis(100)
            || grace > std::time::Duration::from_secs(300)
        {
            problems.push("EXECPLANE_RUNNER_STOP_GRACE: must be between 100ms and 5m".into());
        }
        let kubernetes = &self.kubernetes;
        for (name, value, least) in [
            (
                "EXECPLANE_KUBERNETES_CONNECT_TIMEOUT",
                kubernetes.connect_timeout,
                100,
            ),
            (
                "EXECPLANE_KUBERNETES_REQUEST_TIMEOUT",
                kubernetes.request_timeout,
                100,
            ),
            (
                "EXECPLANE_KUBERNETES_POLL_INTERVAL",
                kubernetes.poll_interval,
                50,
            ),
        ] {
            if value.0 < least || value.0 > 600_000 {
                problems.push(format!("{name}: must be between {least}ms and 10m"));
            }
        }
        let s3 = &self.s3;
        if !s3.endpoint.trim().is_empty()
            && (s3.access_key_id.is_empty() || s3.secret_access_key.is_empty())
        {
            problems.push(
                "EXECPLANE_S3_ENDPOINT: set EXECPLANE_S3_ACCESS_KEY_ID and EXECPLANE_S3_SECRET_ACCESS_KEY too"
                    .into(),
            );
        }
        let artifacts = &self.artifacts;
        if artifacts.retention_evidence < artifacts.retention_logs {
            problems.push(
                "EXECPLANE_ARTIFACT_RETENTION_EVIDENCE: evidence must be kept at least as long as logs"
                    .into(),
            );
        }
        let vault = &self.vault;
        if !vault.addr.trim().is_empty()
            && vault.token.is_empty()
            && (vault.role_id.is_empty() || vault.secret_id.is_empty())
        {
            problems.push("EXECPLANE_VAULT_ADDR: set EXECPLANE_VAULT_TOKEN, or EXECPLANE_VAULT_ROLE_ID and EXECPLANE_VAULT_SECRET_ID".into());
        }
        let signing = self.dispatcher.callback_signing_secrets.trim();
        if !signing.is_empty() {
            if let Err(problem) = crate::contract::callbacks::signing_location(signing) {
                problems.push(format!("EXECPLANE_CALLBACK_SIGNING_SECRETS: {problem}"));
            } else if vault.addr.trim().is_empty() {
                problems.push(
                    "EXECPLANE_CALLBACK_SIGNING_SECRETS: the secrets are read from the secret store: set EXECPLANE_VAULT_ADDR"
                        .into(),
                );
            }
        }
        let metrics = self.telemetry.metrics_addr.trim();
        if !metrics.is_empty() && metrics.parse::<std::net::SocketAddr>().is_err() {
            problems.push(format!(
                "EXECPLANE_METRICS_ADDR: `{metrics}` is not an address such as 127.0.0.1:9464"
            ));
        }
        for (name, positive) in [
            ("EXECPLANE_RUNNER_CAPACITY", self.runner.capacity > 0),
            (
                "EXECPLANE_DISPATCHER_MAX_BATCH",
                self.dispatcher.max_batch > 0,
            ),
            (
                "EXECPLANE_DATABASE_MAX_CONNECTIONS",
                self.database.max_connections > 0,
            ),
            (
                "EXECPLANE_VERIFY_MAX_BODY_BYTES",
                self.verification.max_body_bytes > 0,
            ),
        ] {
            if !positive {
                problems.push(format!("{name}: must be at least 1"));
            }
        }
    }

    pub fn detector_names(&self) -> Vec<String> {
        entries(&self.artifacts.detectors)
            .map(str::to_owned)
            .collect()
    }

    pub fn runner_pool(&self) -> Result<std::collections::BTreeMap<String, String>, String> {
        let mut pool = std::collections::BTreeMap::new();
        for pair in entries(&self.runner.pool) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("EXECPLANE_RUNNER_POOL: `{pair}` is not key=value"))?;
            pool.insert(key.trim().to_owned(), value.trim().to_owned());
        }
        Ok(pool)
    }
}

impl Config {
    /// The librdkafka properties of the security settings, then the
    /// pass-through ones.
    pub fn kafka_client_properties(&self) -> Vec<(String, Secret)> {
        let kafka = &self.kafka;
        let mut properties = vec![(
            "security.protocol".to_owned(),
            Secret::new(kafka.security_protocol.trim().to_ascii_lowercase()),
        )];
        let mut set = |name: &str, value: &str| {
            if !value.trim().is_empty() {
                properties.push((name.to_owned(), Secret::new(value.trim())));
            }
        };
        set("ssl.ca.location", &kafka.ssl_ca_file);
        set("ssl.certificate.location", &kafka.ssl_cert_file);
        set("ssl.key.location", &kafka.ssl_key_file);
        set("ssl.key.password", kafka.ssl_key_password.expose());
        set(
            "ssl.endpoint.identification.algorithm",
            if kafka.ssl_verify_hostname {
                "https"
            } else {
                "none"
            },
        );
        set("sasl.mechanism", &kafka.sasl_mechanism);
        set("sasl.username", &kafka.sasl_username);
        set("sasl.password", kafka.sasl_password.expose());
        properties.extend(kafka.properties.iter().cloned());
        properties
    }

    /// The security settings agree with each other, and the files they
    /// name can be read; a password file is read here.
    fn check_kafka_security(&mut self, problems: &mut Vec<String>) {
        let kafka = &mut self.kafka;
        let protocol = kafka.security_protocol.trim().to_ascii_lowercase();
        let (tls, sasl) = match protocol.as_str() {
            "plaintext" => (false, false),
            "ssl" => (true, false),
            "sasl_plaintext" => (false, true),
            "sasl_ssl" => (true, true),
            other => {
                problems.push(format!(
                    "EXECPLANE_KAFKA_SECURITY_PROTOCOL: `{other}` is not one of plaintext, ssl, sasl_plaintext, sasl_ssl"
                ));
                return;
            }
        };
        for (variable, file, secret) in [
            (
                "EXECPLANE_KAFKA_SASL_PASSWORD_FILE",
                &kafka.sasl_password_file,
                &mut kafka.sasl_password,
            ),
            (
                "EXECPLANE_KAFKA_SSL_KEY_PASSWORD_FILE",
                &kafka.ssl_key_password_file,
                &mut kafka.ssl_key_password,
            ),
        ] {
            if file.trim().is_empty() {
                continue;
            }
            if !secret.is_empty() {
                problems.push(format!(
                    "{variable}: the password is set directly too; set one of them"
                ));
                continue;
            }
            match std::fs::read_to_string(file.trim()) {
                Ok(text) => {
                    *secret = Secret::new(
                        text.strip_suffix('\n')
                            .unwrap_or(&text)
                            .trim_end_matches('\r'),
                    )
                }
                Err(error) => {
                    problems.push(format!("{variable}: cannot read {}: {error}", file.trim()))
                }
            }
        }
        for (variable, file) in [
            ("EXECPLANE_KAFKA_SSL_CA_FILE", &kafka.ssl_ca_file),
            ("EXECPLANE_KAFKA_SSL_CERT_FILE", &kafka.ssl_cert_file),
            ("EXECPLANE_KAFKA_SSL_KEY_FILE", &kafka.ssl_key_file),
        ] {
            if file.trim().is_empty() {
                continue;
            }
            if !tls {
                problems.push(format!("{variable}: set, but EXECPLANE_KAFKA_SECURITY_PROTOCOL is `{protocol}` (no TLS)"));
            } else if let Err(error) = std::fs::File::open(file.trim()) {
                problems.push(format!("{variable}: cannot read {}: {error}", file.trim()));
            }
        }
        if kafka.ssl_cert_file.trim().is_empty() != kafka.ssl_key_file.trim().is_empty() {
            problems.push(
                "EXECPLANE_KAFKA_SSL_CERT_FILE and EXECPLANE_KAFKA_SSL_KEY_FILE go together".into(),
            );
        }
        let mechanism = kafka.sasl_mechanism.trim();
        if sasl {
            if !matches!(mechanism, "PLAIN" | "SCRAM-SHA-256" | "SCRAM-SHA-512") {
                problems.push(format!(
                    "EXECPLANE_KAFKA_SASL_MECHANISM: `{mechanism}` is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (required with `{protocol}`)"
                ));
            }
            if kafka.sasl_username.trim().is_empty() || kafka.sasl_password.is_empty() {
                problems.push(format!(
                    "EXECPLANE_KAFKA_SASL_USERNAME and EXECPLANE_KAFKA_SASL_PASSWORD (or _FILE) are required with `{protocol}`"
                ));
            }
            if mechanism == "PLAIN" && !tls {
                tracing::warn!("SASL PLAIN without TLS sends the Kafka password in the clear");
            }
        } else if !mechanism.is_empty()
            || !kafka.sasl_username.trim().is_empty()
            || !kafka.sasl_password.is_empty()
        {
            problems.push(format!(
                "EXECPLANE_KAFKA_SASL_*: set, but EXECPLANE_KAFKA_SECURITY_PROTOCOL is `{protocol}` (no SASL)"
            ));
        }
    }
}

/// The entries of a comma-separated setting, trimmed, empty ones dropped.
pub fn entries(list: &str) -> impl Iterator<Item = &str> {
    list.split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// The settings' own checks, failing on any problem.
    fn load_with(
        file: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
        kafka_properties: &[(String, String)],
    ) -> Result<Config, ConfigError> {
        let (config, problems) = Config::read_with(file, env, kafka_properties)?;
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError::Invalid(problems))
        }
    }

    fn load(env: &[(&str, &str)], file: Option<&Path>) -> Result<Config, ConfigError> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect();
        load_with(file, |name| env.get(name).cloned(), &[])
    }

    /// A value of the right kind for a setting, different from its
    /// default, and the partners it needs to pass the checks.
    fn sample(setting: &Setting, policy: &Path) -> (String, Vec<(&'static str, String)>) {
        let all_ids = "commands=1,attempt-events=2,runner-events=3,work-items=4,results=5,artifacts=6,runner-presence=7,log-chunks=8";
        let special = match setting.name {
            "EXECPLANE_POLICY_FILE" => Some(policy.display().to_string()),
            "EXECPLANE_METRICS_ADDR" => Some("127.0.0.1:9999".into()),
            "EXECPLANE_AVRO_FRAMING" => Some("confluent".into()),
            "EXECPLANE_CONFLUENT_SCHEMA_IDS" => Some(all_ids.into()),
            "EXECPLANE_CONFLUENT_PREVIOUS_SCHEMA_IDS" => Some("attempt-events=99".into()),
            "EXECPLANE_ARTIFACT_DETECTORS" => Some("bearer_token".into()),
            "EXECPLANE_ARTIFACT_RETENTION_LOGS" => Some("1d".into()),
            "EXECPLANE_ARTIFACT_RETENTION_EVIDENCE" => Some("400d".into()),
            "EXECPLANE_RUNNER_POOL" => Some("zone=a".into()),
            "EXECPLANE_CALLBACK_SIGNING_SECRETS" => {
                Some("secret/execplane/{tenant}/callbacks".into())
            }
            "EXECPLANE_RUNNER_WORK_DIR"
            | "EXECPLANE_VERIFY_PROBE_DIR"
            | "EXECPLANE_HELM_BIN"
            | "EXECPLANE_TOFU_BIN"
            | "EXECPLANE_TOFU_PROVIDER_MIRROR"
            | "EXECPLANE_TOFU_STATE_DIR"
            | "EXECPLANE_SANDBOX_BWRAP"
            | "EXECPLANE_SANDBOX_READ_ONLY" => Some("/var/lib/execplane-sample".into()),
            "EXECPLANE_SANDBOX" => Some("off".into()),
            "EXECPLANE_SANDBOX_NETWORK" => Some("host".into()),
            "EXECPLANE_SANDBOX_DENY" => Some("10.0.0.0/8,db.internal:5432".into()),
            "EXECPLANE_SANDBOX_UID_BASE" => Some("2000000000".into()),
            "EXECPLANE_KAFKA_SECURITY_PROTOCOL" => Some("ssl".into()),
            "EXECPLANE_KAFKA_SSL_CA_FILE"
            | "EXECPLANE_KAFKA_SSL_CERT_FILE"
            | "EXECPLANE_KAFKA_SSL_KEY_FILE"
            | "EXECPLANE_KAFKA_SSL_KEY_PASSWORD_FILE" => Some(policy.display().to_string()),
            "EXECPLANE_KAFKA_SASL_PASSWORD_FILE" => {
                Some(policy.with_extension("password").display().to_string())
            }
            "EXECPLANE_KAFKA_SSL_VERIFY_HOSTNAME" => Some("false".into()),
            "EXECPLANE_KAFKA_SASL_MECHANISM" => Some("SCRAM-SHA-256".into()),
            _ => None,
        };
        let sasl = |except: &str| -> Vec<(&'static str, String)> {
            [
                ("EXECPLANE_KAFKA_SECURITY_PROTOCOL", "sasl_plaintext"),
                ("EXECPLANE_KAFKA_SASL_MECHANISM", "PLAIN"),
                ("EXECPLANE_KAFKA_SASL_USERNAME", "someone"),
                ("EXECPLANE_KAFKA_SASL_PASSWORD", "pw"),
            ]
            .into_iter()
            .filter(|(name, _)| *name != except)
            .map(|(name, value)| (name, value.to_owned()))
            .collect()
        };
        let partners = match setting.name {
            "EXECPLANE_S3_ENDPOINT" => vec![
                ("EXECPLANE_S3_ACCESS_KEY_ID", "k".to_owned()),
                ("EXECPLANE_S3_SECRET_ACCESS_KEY", "s".to_owned()),
            ],
            "EXECPLANE_VAULT_ADDR" => vec![("EXECPLANE_VAULT_TOKEN", "t".to_owned())],
            "EXECPLANE_CALLBACK_SIGNING_SECRETS" => vec![
                ("EXECPLANE_VAULT_ADDR", "http://127.0.0.1:8200".to_owned()),
                ("EXECPLANE_VAULT_TOKEN", "t".to_owned()),
            ],
            "EXECPLANE_AVRO_FRAMING" => {
                vec![("EXECPLANE_CONFLUENT_SCHEMA_IDS", all_ids.to_owned())]
            }
            "EXECPLANE_KAFKA_SSL_CA_FILE" => {
                vec![("EXECPLANE_KAFKA_SECURITY_PROTOCOL", "ssl".to_owned())]
            }
            "EXECPLANE_KAFKA_SSL_CERT_FILE" => vec![
                ("EXECPLANE_KAFKA_SECURITY_PROTOCOL", "ssl".to_owned()),
                ("EXECPLANE_KAFKA_SSL_KEY_FILE", policy.display().to_string()),
            ],
            "EXECPLANE_KAFKA_SSL_KEY_FILE" => vec![
                ("EXECPLANE_KAFKA_SECURITY_PROTOCOL", "ssl".to_owned()),
                (
                    "EXECPLANE_KAFKA_SSL_CERT_FILE",
                    policy.display().to_string(),
                ),
            ],
            "EXECPLANE_KAFKA_SASL_MECHANISM"
            | "EXECPLANE_KAFKA_SASL_USERNAME"
            | "EXECPLANE_KAFKA_SASL_PASSWORD" => sasl(setting.name),
            "EXECPLANE_KAFKA_SASL_PASSWORD_FILE" => sasl("EXECPLANE_KAFKA_SASL_PASSWORD"),
            _ => Vec::new(),
        };
        if let Some(value) = special {
            return (value, partners);
        }
        let default = (setting.get)(&Config::default());
        let mut probe = Config::default();
        for candidate in ["8123", "2m", "true", "json", "sample-value"] {
            if (setting.set)(&mut probe, candidate).is_ok() && (setting.get)(&probe) != default {
                return (candidate.to_owned(), partners);
            }
        }
        panic!("no sample for {}", setting.name)
    }

    #[test]
    fn every_variable_and_alias_is_read_into_its_place() {
        let policy =
            std::env::temp_dir().join(format!("execplane-policy-{}.toml", std::process::id()));
        std::fs::write(&policy, "").unwrap();
        std::fs::write(policy.with_extension("password"), "pw\n").unwrap();
        for setting in SETTINGS {
            let (value, partners) = sample(setting, &policy);
            let expected = {
                let mut config = Config::default();
                (setting.set)(&mut config, &value).unwrap();
                (setting.get)(&config)
            };
            assert_ne!(
                expected,
                (setting.get)(&Config::default()),
                "{}",
                setting.name
            );
            for name in std::iter::once(&setting.name).chain(setting.aliases) {
                let mut env: Vec<(&str, &str)> = vec![(name, value.as_str())];
                env.extend(partners.iter().map(|(key, value)| (*key, value.as_str())));
                let config =
                    load(&env, None).unwrap_or_else(|error| panic!("{name}={value}: {error}"));
                assert_eq!((setting.get)(&config), expected, "{name}");
            }
        }
    }

    #[test]
    fn the_variable_wins_over_its_alias_and_the_file_over_the_defaults() {
        let config = load(
            &[
                ("PLUGIN_CONTROL_PLANE_KEY", "from-the-alias-0123"),
                ("EXECPLANE_INGRESS_KEY", "from-the-variable-01"),
            ],
            None,
        )
        .unwrap();
        assert_eq!(config.ingress.key.expose(), "from-the-variable-01");
        let config = load(&[("RUNTIME_CONTROL_PLANE_HTTP_PORT", "4000")], None).unwrap();
        assert_eq!(config.ingress.http_port, 4000);
        let dir = std::env::temp_dir().join(format!("execplane-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("execplane.toml");
        std::fs::write(
            &path,
            "database_url = \"postgres://file/db\"\nlog_format = \"json\"\ntopic_prefix = \"t1.\"\nrunner_capacity = 3\ningress_trust_proxy = true\ningress_trusted_proxies = \"10.0.0.0/8\"\n",
        )
        .unwrap();
        let config = load(
            &[
                ("DATABASE_URL", "postgres://generic/db"),
                ("EXECPLANE_TOPIC_PREFIX", "t2."),
            ],
            Some(&path),
        )
        .unwrap();
        assert_eq!(config.database.url, "postgres://generic/db");
        assert_eq!(config.telemetry.log_format, LogFormat::Json);
        assert_eq!(config.kafka.topic_prefix, "t2.");
        assert_eq!(config.runner.capacity, 3);
        assert!(config.ingress.trust_proxy);
        assert_eq!(config.kafka.brokers, defaults::KAFKA_BROKERS);
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let dir = std::env::temp_dir().join(format!("execplane-config-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.toml");
        std::fs::write(&path, "databse_url = 1\nrunner_capacity = \"many\"\n").unwrap();
        let error = load(
            &[
                ("EXECPLANE_INGRESS_HTTP_PORT", "99999"),
                ("EXECPLANE_SWEEP_INTERVAL", "soon"),
                ("EXECPLANE_LOG_FORMAT", "xml"),
                ("EXECPLANE_S3_ENDPOINT", "http://127.0.0.1:3900"),
                ("EXECPLANE_RUNNER_POOL", "zone"),
                ("EXECPLANE_METRICS_ADDR", "here"),
            ],
            Some(&path),
        )
        .unwrap_err();
        let ConfigError::Invalid(problems) = &error else {
            panic!("{error}");
        };
        for expected in [
            "unknown key `databse_url`",
            "`runner_capacity`",
            "EXECPLANE_INGRESS_HTTP_PORT",
            "EXECPLANE_SWEEP_INTERVAL",
            "EXECPLANE_LOG_FORMAT",
            "EXECPLANE_S3_ENDPOINT",
            "EXECPLANE_RUNNER_POOL",
            "EXECPLANE_METRICS_ADDR",
        ] {
            assert!(
                problems.iter().any(|problem| problem.contains(expected)),
                "{expected} missing from {problems:#?}"
            );
        }
        assert_eq!(problems.len(), 8, "{problems:#?}");
    }

    #[test]
    fn kafka_properties_pass_through_except_the_ones_execplane_relies_on() {
        let dir =
            std::env::temp_dir().join(format!("execplane-config-kafka-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kafka.toml");
        std::fs::write(
            &path,
            "[kafka_properties]\n\"socket.send.buffer.bytes\" = 1048576\n\"statistics.interval.ms\" = \"0\"\n",
        )
        .unwrap();
        let properties = [
            ("EXECPLANE_KAFKA_PROPERTY_SOCKET_KEEPALIVE_ENABLE", "false"),
            ("EXECPLANE_KAFKA_PROPERTY_LOG__LEVEL", "6"),
        ]
        .map(|(name, value)| (name.to_owned(), value.to_owned()));
        let config = load_with(Some(&path), |_| None, &properties).unwrap();
        let properties = config.kafka_client_properties();
        let names: Vec<&str> = properties.iter().map(|(name, _)| name.as_str()).collect();
        for name in [
            "socket.send.buffer.bytes",
            "statistics.interval.ms",
            "socket.keepalive.enable",
            "log_level",
        ] {
            assert!(names.contains(&name), "{name} in {names:?}");
        }
        // Shown nowhere: the configuration's Debug has no value of them.
        assert!(
            !format!("{properties:?}").contains("1048576"),
            "{properties:?}"
        );

        let refused = [
            ("EXECPLANE_KAFKA_PROPERTY_ACKS", "1"),
            ("EXECPLANE_KAFKA_PROPERTY_ENABLE_IDEMPOTENCE", "false"),
            ("EXECPLANE_KAFKA_PROPERTY_ENABLE_AUTO_COMMIT", "true"),
            ("EXECPLANE_KAFKA_PROPERTY_SASL_PASSWORD", "x"),
            ("EXECPLANE_KAFKA_PROPERTY_BAD-NAME", "x"),
        ]
        .map(|(name, value)| (name.to_owned(), value.to_owned()));
        let error = load_with(None, |_| None, &refused).unwrap_err();
        let ConfigError::Invalid(problems) = &error else {
            panic!("{error}");
        };
        for expected in [
            "`acks` cannot be overridden",
            "`enable.idempotence` cannot be overridden",
            "`enable.auto.commit` cannot be overridden",
            "use EXECPLANE_KAFKA_SASL_PASSWORD",
            "not a librdkafka property name",
        ] {
            assert!(
                problems.iter().any(|problem| problem.contains(expected)),
                "{expected} missing from {problems:#?}"
            );
        }
        assert_eq!(problems.len(), 5, "{problems:#?}");
    }

    #[test]
    fn kafka_security_settings_are_checked_together() {
        let error = load(
            &[
                ("EXECPLANE_KAFKA_SECURITY_PROTOCOL", "sasl_ssl"),
                ("EXECPLANE_KAFKA_SASL_MECHANISM", "GSSAPI"),
                ("EXECPLANE_KAFKA_SSL_CA_FILE", "/nonexistent/ca.pem"),
                (
                    "EXECPLANE_KAFKA_SASL_PASSWORD_FILE",
                    "/nonexistent/password",
                ),
            ],
            None,
        )
        .unwrap_err();
        let ConfigError::Invalid(problems) = &error else {
            panic!("{error}");
        };
        for expected in [
            "EXECPLANE_KAFKA_SASL_MECHANISM: `GSSAPI`",
            "EXECPLANE_KAFKA_SSL_CA_FILE: cannot read /nonexistent/ca.pem",
            "EXECPLANE_KAFKA_SASL_PASSWORD_FILE: cannot read /nonexistent/password",
            "EXECPLANE_KAFKA_SASL_USERNAME and EXECPLANE_KAFKA_SASL_PASSWORD (or _FILE) are required",
        ] {
            assert!(problems.iter().any(|problem| problem.contains(expected)), "{expected} missing from {problems:#?}");
        }
        let error = load(
            &[
                ("EXECPLANE_KAFKA_SASL_USERNAME", "someone"),
                ("EXECPLANE_KAFKA_SECURITY_PROTOCOL", "tls"),
            ],
            None,
        )
        .unwrap_err();
        assert!(error.to_string().contains("`tls` is not one of"), "{error}");
        let config = load(
            &[
                ("EXECPLANE_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT"),
                ("EXECPLANE_KAFKA_SASL_MECHANISM", "SCRAM-SHA-256"),
                ("EXECPLANE_KAFKA_SASL_USERNAME", "execplane"),
                ("EXECPLANE_KAFKA_SASL_PASSWORD", "pw-value-9"),
            ],
            None,
        )
        .unwrap();
        let properties = config.kafka_client_properties();
        let property = |name: &str| {
            properties
                .iter()
                .find(|(property, _)| property == name)
                .map(|(_, value)| value.expose().to_owned())
        };
        assert_eq!(
            property("security.protocol").as_deref(),
            Some("sasl_plaintext")
        );
        assert_eq!(property("sasl.mechanism").as_deref(), Some("SCRAM-SHA-256"));
        assert_eq!(property("sasl.password").as_deref(), Some("pw-value-9"));
        assert!(!format!("{config:?}").contains("pw-value-9"));
    }

    #[test]
    fn the_readme_table_and_the_settings_agree_both_ways() {
        let readme = include_str!("../README.md");
        let table: Vec<&str> = readme
            .lines()
            .skip_while(|line| !line.starts_with("| variable | default | meaning |"))
            .skip(2)
            .take_while(|line| line.starts_with('|'))
            .collect();
        assert!(!table.is_empty(), "the README has a configuration table");
        let mut documented = std::collections::BTreeSet::new();
        for row in &table {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let names: Vec<&str> = cells[1].split('`').skip(1).step_by(2).collect();
            for name in &names {
                documented.insert((*name).to_owned());
            }
            // A single default in backticks is the setting's default.
            let defaults: Vec<&str> = cells[2].split('`').skip(1).step_by(2).collect();
            if let ([name], [default]) = (names.as_slice(), defaults.as_slice()) {
                if let Some(setting) = SETTINGS.iter().find(|setting| setting.name == *name) {
                    let mut parsed = Config::default();
                    (setting.set)(&mut parsed, default).unwrap();
                    assert_eq!(
                        (setting.get)(&parsed),
                        (setting.get)(&Config::default()),
                        "README default of {name}"
                    );
                }
            }
        }
        let mut declared = std::collections::BTreeSet::new();
        declared.insert(CONFIG_FILE_VARIABLE.to_owned());
        for setting in SETTINGS {
            declared.insert(setting.name.to_owned());
            for alias in setting.aliases {
                declared.insert((*alias).to_owned());
            }
        }
        assert_eq!(documented, declared, "README table vs config::SETTINGS");
    }
}
