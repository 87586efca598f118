//! Loading the settings, and what each role is given, assembled from
//! them: the checks of the settings only an area can make, and each
//! area's runtime configuration (built without I/O). This is the process
//! edge: `config` reads the settings and imports no area
//! (docs/ARCHITECTURE.md); here each area's runtime configuration is built
//! from them, and [`load`] runs the areas' checks in the same pass as the
//! settings' own, so every problem is still reported at once.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::{entries, Config, ConfigError};
use crate::policy::SharedPolicy;
use crate::runner::sandbox::egress::Destination;

/// Loads the settings (the file, when given or named by
/// `EXECPLANE_CONFIG`, and the environment), checks them, and loads the
/// operator's policy they name: every problem at once.
pub fn load(file: Option<&Path>) -> Result<(Config, SharedPolicy), ConfigError> {
    let properties = Config::kafka_properties_of_environment();
    let names: Vec<String> = std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .collect();
    let leftovers = crate::config::seed_leftovers(names.iter().map(String::as_str));
    match load_with(file, |name| std::env::var(name).ok(), &properties) {
        Ok(_) if !leftovers.is_empty() => Err(ConfigError::Invalid(leftovers)),
        Err(ConfigError::Invalid(mut problems)) => {
            problems.extend(leftovers);
            Err(ConfigError::Invalid(problems))
        }
        loaded => loaded,
    }
}

/// As [`load`], with the environment passed in (`Config::read_with`).
pub fn load_with(
    file: Option<&Path>,
    env: impl Fn(&str) -> Option<String>,
    kafka_properties: &[(String, String)],
) -> Result<(Config, SharedPolicy), ConfigError> {
    let (config, mut problems) = Config::read_with(file, env, kafka_properties)?;
    let policy = check(&config, &mut problems);
    if problems.is_empty() {
        Ok((config, policy))
    } else {
        Err(ConfigError::Invalid(problems))
    }
}

/// The checks of the settings only an area can make; the policy file
/// loaded (the defaults when none is named, or when it is refused).
fn check(config: &Config, problems: &mut Vec<String>) -> SharedPolicy {
    if let Err(message) = codec(config) {
        problems.push(message);
    }
    if let Err(message) = sandbox_deny(config) {
        problems.push(format!("EXECPLANE_SANDBOX_DENY: {message}"));
    }
    if let Err(message) = crate::artifacts::Detectors::new(&config.detector_names()) {
        problems.push(format!("EXECPLANE_ARTIFACT_DETECTORS: {message}"));
    }
    let file = config.policy.file.trim();
    let policy = if file.is_empty() {
        SharedPolicy::default()
    } else {
        SharedPolicy::from_file(Path::new(file)).unwrap_or_else(|found| {
            problems.extend(
                found
                    .into_iter()
                    .map(|problem| format!("EXECPLANE_POLICY_FILE: {problem}")),
            );
            SharedPolicy::default()
        })
    };
    // The callback signing secrets are execplane's: reserved in every role
    // that has the setting (the dispatcher's intake, and a runner's own
    // check before it resolves or writes a secret). A bad setting is
    // reported by the setting's own check.
    // (An empty setting, unsigned callbacks, is no location either.)
    match crate::contract::callbacks::signing_location(&config.dispatcher.callback_signing_secrets)
    {
        Ok(location) => policy.reserving_secrets(location),
        Err(_) => policy,
    }
}

pub fn kafka(config: &Config) -> crate::kafka::KafkaConfig {
    crate::kafka::KafkaConfig {
        brokers: config.kafka.brokers.clone(),
        topic_prefix: config.kafka.topic_prefix.clone(),
        fetch_wait_ms: config.kafka.fetch_wait_ms,
        // Checked by the validation pass.
        codec: codec(config).unwrap_or_default(),
        properties: config.kafka_client_properties(),
        replication_factor: match config.kafka.topic_replication_factor {
            0 => None,
            factor => Some(i32::from(factor)),
        },
    }
}

/// The codec the framing settings describe.
pub fn codec(config: &Config) -> Result<crate::codec::Codec, String> {
    use crate::codec::{Codec, Family, Framing, RegistryIds};
    fn ids(
        name: &'static str,
        list: &str,
    ) -> Result<std::collections::HashMap<Family, u32>, String> {
        let mut ids = std::collections::HashMap::new();
        for pair in entries(list) {
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
                return Err(format!(
                    "{name}: `{pair}` is not <family>=<registry id>; families: {}",
                    families.join(", ")
                ));
            };
            ids.insert(family, id);
        }
        Ok(ids)
    }
    let framing = match config.kafka.avro_framing.trim() {
        "single-object" | "" => Framing::SingleObject,
        "confluent" => Framing::Confluent,
        other => {
            return Err(format!(
                "EXECPLANE_AVRO_FRAMING: `{other}` is neither `single-object` nor `confluent`"
            ))
        }
    };
    let registry = RegistryIds {
        current: ids(
            "EXECPLANE_CONFLUENT_SCHEMA_IDS",
            &config.kafka.confluent_schema_ids,
        )?,
        previous: ids(
            "EXECPLANE_CONFLUENT_PREVIOUS_SCHEMA_IDS",
            &config.kafka.confluent_previous_schema_ids,
        )?,
    };
    Codec::new(framing, registry)
        .map_err(|error| format!("EXECPLANE_CONFLUENT_SCHEMA_IDS: {error}"))
}

pub fn dispatcher(config: &Config, policy: &SharedPolicy) -> crate::dispatcher::DispatcherConfig {
    let settings = &config.dispatcher;
    crate::dispatcher::DispatcherConfig {
        group: settings.group.clone(),
        max_batch: settings.max_batch,
        batch_window: settings.batch_window.as_std(),
        cancel_grace: settings.cancel_grace.as_std(),
        sweep_interval: settings.sweep_interval.as_std(),
        presence_ttl: settings.presence_ttl.as_std(),
        inbox_retention: settings.inbox_retention.as_std(),
        callbacks: crate::dispatcher::CallbackConfig {
            max_attempts: settings.callback_max_attempts,
            policy: policy.clone(),
            ..Default::default()
        },
        policy: policy.clone(),
        ..Default::default()
    }
}

pub fn runner(config: &Config, policy: &SharedPolicy) -> crate::runner::RunnerConfig {
    crate::runner::RunnerConfig {
        capacity: config.runner.capacity,
        // Checked by the validation pass.
        pool: config.runner_pool().unwrap_or_default(),
        presence_interval: config.runner.presence_interval.as_std(),
        drain_timeout: config.runner.drain_timeout.as_std(),
        stop_grace: config.runner.stop_grace.as_std(),
        tools: Arc::new(tools(config)),
        // The caller opens the storage (`Storage::open(&config.storage())`).
        storage: None,
        policy: policy.clone(),
        ..Default::default()
    }
}

/// Where tool processes run (the supervisor is this very binary) and
/// the sandbox they run in.
pub fn tools(config: &Config) -> crate::runner::tool::ToolSettings {
    use crate::runner::sandbox::{Limits, Network, SandboxSettings};
    let defaults = crate::runner::tool::ToolSettings::default();
    let runner = &config.runner;
    let work_dir = runner.work_dir.trim();
    let mib = |value: u32| u64::from(value) * 1024 * 1024;
    crate::runner::tool::ToolSettings {
        work_root: if work_dir.is_empty() {
            defaults.work_root.clone()
        } else {
            work_dir.into()
        },
        max_output_bytes: mib(runner.max_output_mib),
        sandbox: SandboxSettings {
            enabled: runner.sandbox.trim() != "off",
            bwrap: runner.sandbox_bwrap.trim().into(),
            uid_base: runner.sandbox_uid_base,
            uid_count: runner.sandbox_uids,
            read_only: sandbox_read_only(config),
            limits: Limits {
                memory_bytes: mib(runner.sandbox_memory_mib),
                pids: runner.sandbox_pids.into(),
                cpu_percent: runner.sandbox_cpu_percent.into(),
                cpu_seconds: runner.sandbox_cpu_seconds.into(),
                open_files: runner.sandbox_open_files.into(),
                disk_bytes: mib(runner.sandbox_disk_mib),
            },
            network: if runner.sandbox_network.trim() == "host" {
                Network::Host
            } else {
                let mut deny = platform_endpoints(config);
                // Checked by the validation pass.
                deny.extend(sandbox_deny(config).unwrap_or_default());
                Network::Guarded {
                    deny,
                    nft: crate::runner::sandbox::egress::NFT.into(),
                }
            },
            ..SandboxSettings::default()
        },
        ..defaults
    }
}

fn sandbox_deny(config: &Config) -> Result<Vec<Destination>, String> {
    entries(&config.runner.sandbox_deny)
        .map(Destination::parse)
        .collect()
}

/// The platform's own endpoints this configuration names, which no
/// tool may reach (docs/SECURITY.md, "Network"): the brokers, the
/// database, the secret store, the artifact storage, the ingress and
/// the metrics listener. Only hosts and ports: never a URL's
/// credentials.
fn platform_endpoints(config: &Config) -> Vec<Destination> {
    let mut found = Vec::new();
    let mut url = |text: &str, default_port: u16| {
        if let Ok(url) = url::Url::parse(text.trim()) {
            if let Some(host) = url.host_str().filter(|host| !host.is_empty()) {
                let host = host.trim_start_matches('[').trim_end_matches(']');
                let port = url.port_or_known_default().unwrap_or(default_port);
                found.push(Destination::Endpoint {
                    host: host.to_owned(),
                    port,
                });
            }
        }
    };
    url(&config.database.url, 5432);
    url(&config.vault.addr, 8200);
    url(&config.s3.endpoint, 443);
    let mut endpoint = |text: &str| {
        if let Ok(destination @ Destination::Endpoint { .. }) = Destination::parse(text) {
            found.push(destination);
        }
    };
    for broker in config.kafka.brokers.split(',').map(str::trim) {
        match broker.rsplit_once(':') {
            Some((_, port)) if port.parse::<u16>().is_ok() => endpoint(broker),
            // librdkafka's default port.
            _ if !broker.is_empty() => endpoint(&format!("{broker}:9092")),
            _ => {}
        }
    }
    endpoint(&config.telemetry.metrics_addr);
    let bind = config.ingress.bind.trim();
    let bind = if bind.contains(':') {
        format!("[{bind}]")
    } else {
        bind.to_owned()
    };
    endpoint(&format!("{bind}:{}", config.ingress.http_port));
    endpoint(&format!("{bind}:{}", config.ingress.tcp_port));
    found
}

fn sandbox_read_only(config: &Config) -> Vec<PathBuf> {
    entries(&config.runner.sandbox_read_only)
        .map(PathBuf::from)
        .collect()
}

/// The secret store runners use, when one is configured (AppRole wins
/// over a token when both are set).
pub fn secret_store(config: &Config) -> Option<crate::secrets::VaultSettings> {
    let vault = &config.vault;
    let address = vault.addr.trim();
    if address.is_empty() {
        return None;
    }
    let auth = if !vault.role_id.is_empty() && !vault.secret_id.is_empty() {
        crate::secrets::VaultAuth::AppRole {
            mount: vault.approle_mount.clone(),
            role_id: vault.role_id.clone(),
            secret_id: vault.secret_id.clone(),
        }
    } else {
        crate::secrets::VaultAuth::Token(vault.token.clone())
    };
    Some(crate::secrets::VaultSettings {
        address: address.to_owned(),
        auth,
        timeout: std::time::Duration::from_secs(5),
    })
}

/// Where artifacts are stored: S3 when an endpoint is configured, else
/// the local directory (the storage itself is opened by its user).
pub fn storage(config: &Config) -> crate::artifacts::StorageSettings {
    if config.s3.endpoint.trim().is_empty() {
        crate::artifacts::StorageSettings::Local(config.artifacts.dir.clone().into())
    } else {
        crate::artifacts::StorageSettings::S3(crate::artifacts::S3Settings {
            endpoint: config.s3.endpoint.trim().to_owned(),
            region: config.s3.region.clone(),
            bucket: config.s3.bucket.clone(),
            access_key_id: config.s3.access_key_id.clone(),
            secret_access_key: config.s3.secret_access_key.clone(),
        })
    }
}

pub fn retention(config: &Config) -> crate::store::Retention {
    crate::store::Retention {
        logs: config.artifacts.retention_logs.as_std(),
        rendered: config.artifacts.retention_rendered.as_std(),
        evidence: config.artifacts.retention_evidence.as_std(),
    }
}

pub fn artifacts(config: &Config) -> crate::artifacts::ArtifactConfig {
    crate::artifacts::ArtifactConfig {
        group: config.artifacts.group.clone(),
        grace: config.artifacts.grace.as_std(),
        retention: retention(config),
        gc_interval: config.artifacts.gc_interval.as_std(),
        // Checked by the validation pass.
        detectors: crate::artifacts::Detectors::new(&config.detector_names())
            .unwrap_or_else(|_| crate::artifacts::Detectors::all()),
    }
}

pub fn ssh(config: &Config) -> crate::runners::ssh::SshConfig {
    crate::runners::ssh::SshConfig {
        client: config.ssh.client.trim().into(),
        connect_timeout: config.ssh.connect_timeout.as_std(),
        sftp_client: config.ssh.sftp_client.trim().into(),
    }
}

pub fn ansible(config: &Config) -> crate::runners::ansible::AnsibleConfig {
    crate::runners::ansible::AnsibleConfig {
        bin_dir: config.ansible.bin_dir.trim().into(),
        connect_timeout: config.ssh.connect_timeout.as_std(),
    }
}

pub fn helm(config: &Config) -> crate::runners::helm::HelmConfig {
    crate::runners::helm::HelmConfig {
        helm: config.helm.bin.trim().into(),
        kubernetes: kubernetes_client(config),
    }
}

pub fn opentofu(config: &Config) -> crate::runners::opentofu::TofuConfig {
    let mirror = config.opentofu.provider_mirror.trim();
    crate::runners::opentofu::TofuConfig {
        cli: config.opentofu.bin.trim().into(),
        provider_mirror: (!mirror.is_empty()).then(|| mirror.into()),
        state_dir: config.opentofu.state_dir.trim().into(),
    }
}

/// How every role that reads a cluster connects to it.
fn kubernetes_client(config: &Config) -> crate::runner::kit::kube::ClientSettings {
    crate::runner::kit::kube::ClientSettings {
        connect_timeout: config.kubernetes.connect_timeout.as_std(),
        request_timeout: config.kubernetes.request_timeout.as_std(),
    }
}

pub fn kubernetes(config: &Config) -> crate::runners::kubernetes::KubernetesConfig {
    crate::runners::kubernetes::KubernetesConfig {
        client: kubernetes_client(config),
        poll_interval: config.kubernetes.poll_interval.as_std(),
    }
}

pub fn verification(config: &Config) -> crate::runners::verification::VerificationConfig {
    crate::runners::verification::VerificationConfig {
        allowed_probes: entries(&config.verification.probes)
            .map(str::to_owned)
            .collect(),
        max_timeout: config.verification.max_timeout.as_std(),
        max_body_bytes: config.verification.max_body_bytes,
        probe_dir: Some(config.verification.probe_dir.trim())
            .filter(|dir| !dir.is_empty())
            .map(Into::into),
        kubernetes: kubernetes_client(config),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(env: &[(&str, &str)]) -> Result<(Config, SharedPolicy), ConfigError> {
        load_with(
            None,
            |name| {
                env.iter()
                    .find(|(variable, _)| *variable == name)
                    .map(|(_, value)| (*value).to_owned())
            },
            &[],
        )
    }

    #[test]
    fn the_areas_problems_are_reported_with_the_settings_own_at_once() {
        let error = load(&[
            ("EXECPLANE_SWEEP_INTERVAL", "soon"),
            ("EXECPLANE_AVRO_FRAMING", "protobuf"),
            ("EXECPLANE_SANDBOX_DENY", "not a destination"),
            (
                "EXECPLANE_ARTIFACT_DETECTORS",
                "pem_private_key,crystal_ball",
            ),
            (
                "EXECPLANE_POLICY_FILE",
                "/nonexistent/execplane-policy.yaml",
            ),
        ])
        .unwrap_err();
        let ConfigError::Invalid(problems) = &error else {
            panic!("{error}");
        };
        for expected in [
            "EXECPLANE_SWEEP_INTERVAL",
            "EXECPLANE_AVRO_FRAMING",
            "EXECPLANE_SANDBOX_DENY",
            "EXECPLANE_ARTIFACT_DETECTORS",
            "EXECPLANE_POLICY_FILE",
        ] {
            assert!(
                problems.iter().any(|problem| problem.contains(expected)),
                "{expected} missing from {problems:#?}"
            );
        }
    }

    #[test]
    fn the_defaults_allow_no_test_probe_and_name_every_detector() {
        let config = Config::default();
        // The built-in probes are the tests' and the demo's: an operator
        // names one to run it.
        assert!(!crate::runners::verification::BUILTIN_PROBES.is_empty());
        assert_eq!(config.verification.probes, "");
        assert_eq!(
            config.artifacts.detectors,
            crate::artifacts::detect::BUILTIN.join(",")
        );
        let (_, policy) = load(&[]).expect("the defaults load");
        assert_eq!(
            policy.current().digest(),
            SharedPolicy::default().current().digest()
        );
    }
}
