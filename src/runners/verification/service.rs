use std::time::Duration;

use super::probes::{self, Bounds, Sample};
use super::VerificationConfig;
use crate::contract::inputs::OperationInputs;
use crate::contract::{FailureCategory, RunnerType};
use crate::runner::{Assignment, ExecutionContext, ExecutionOutcome, Executor};

/// Redirects an HTTP probe follows, each hop checked against the policy.
const MAX_REDIRECTS: usize = 5;

/// The verification runner's executor.
pub struct VerificationRunner {
    config: VerificationConfig,
    /// One policy-bound HTTP client per tenant (bounded: cleared when full).
    clients: std::sync::Mutex<std::collections::HashMap<String, reqwest::Client>>,
}

impl VerificationRunner {
    pub fn new(config: VerificationConfig) -> Self {
        Self {
            config,
            clients: Default::default(),
        }
    }

    /// The HTTP client of `tenant`: it connects only where its policy allows.
    fn client(&self, tenant: &str, bounds: &Bounds) -> Result<reqwest::Client, String> {
        let mut clients = self
            .clients
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(client) = clients.get(tenant) {
            return Ok(client.clone());
        }
        let client = crate::policy::http_client(&bounds.destinations, MAX_REDIRECTS)?;
        if clients.len() >= 256 {
            clients.clear();
        }
        clients.insert(tenant.to_owned(), client.clone());
        Ok(client)
    }
}

impl Executor for VerificationRunner {
    fn runner_type(&self) -> RunnerType {
        RunnerType::Verification
    }

    fn capabilities(&self) -> Vec<String> {
        vec![
            "http".into(),
            "tcp".into(),
            "postgres".into(),
            "custom".into(),
        ]
    }

    async fn execute(&self, assignment: Assignment, context: ExecutionContext) -> ExecutionOutcome {
        let spec = &assignment.spec;
        let inputs = match OperationInputs::parse(spec.operation, &spec.inputs) {
            Ok(inputs) => inputs,
            Err((path, message)) => {
                return ExecutionOutcome::failed(
                    FailureCategory::Contract,
                    format!("inputs.{path}: {message}"),
                    None,
                )
            }
        };
        if let OperationInputs::VerifyCustomProbe(probe) = &inputs {
            if !self.config.allowed_probes.contains(&probe.probe_id) {
                return ExecutionOutcome::failed(
                    FailureCategory::Policy,
                    format!(
                        "probe `{}` is not on this runner's allowlist",
                        probe.probe_id
                    ),
                    Some(serde_json::json!({"allowed_probes": self.config.allowed_probes})),
                );
            }
        }
        let timeout = |explicit: Option<crate::contract::DurationMs>| {
            explicit
                .map_or(self.config.default_timeout, |duration| duration.as_std())
                .min(self.config.max_timeout)
        };
        // The operator's policy, again, before anything connects: the
        // dispatcher checked it at intake; the file may have changed since.
        let policy_problems = self.config.policy.check_jobspec(spec);
        if !policy_problems.is_empty() {
            let problems = crate::contract::Problems(policy_problems);
            return ExecutionOutcome::failed(FailureCategory::Policy, problems.to_string(), None);
        }
        let bounds = Bounds {
            destinations: self.config.policy.tenant(&spec.tenant).destinations,
            max_body_bytes: self.config.max_body_bytes,
        };
        let http_client = match self.client(&spec.tenant, &bounds) {
            Ok(client) => client,
            Err(error) => {
                return ExecutionOutcome::failed(FailureCategory::RunnerError, error, None)
            }
        };
        let retry = spec.retry;
        let samples_wanted = retry.max_attempts.max(1);
        let mut samples: Vec<Sample> = Vec::new();
        for n in 1..=samples_wanted {
            if context.cancel.is_cancelled() {
                break;
            }
            context.progress(
                format!("sample {n}/{samples_wanted}"),
                Some(u8::try_from(n * 100 / samples_wanted).unwrap_or(100)),
            );
            let sample = match &inputs {
                OperationInputs::VerifyHttpEndpoint(http) => {
                    probes::http(&http_client, http, &bounds, timeout(http.timeout), n).await
                }
                OperationInputs::VerifyTcpConnect(tcp) => {
                    probes::tcp(tcp, &bounds, timeout(tcp.timeout), n).await
                }
                OperationInputs::VerifyPostgresReady(postgres) => {
                    probes::postgres(postgres, &bounds, timeout(None), n).await
                }
                OperationInputs::VerifyCustomProbe(probe) => {
                    probes::custom(probe, &context, n).await
                }
                _ => {
                    return ExecutionOutcome::failed(
                        FailureCategory::RunnerError,
                        format!(
                            "{} is not supported by this verification runner yet",
                            spec.operation
                        ),
                        None,
                    )
                }
            };
            // A refusal by the policy will not change with another sample.
            let done = sample.passed() || sample.refused_by_policy;
            samples.push(sample);
            if done {
                break;
            }
            if n < samples_wanted {
                let delay: Duration = retry.backoff_before(n + 1).as_std();
                tokio::select! {
                    _ = context.cancel.cancelled() => break,
                    _ = tokio::time::sleep(delay) => {}
                }
            }
        }
        let passed = samples.last().is_some_and(Sample::passed);
        let reached = samples.iter().any(|sample| sample.reached);
        let refused = samples.iter().any(|sample| sample.refused_by_policy);
        let recommended = if passed {
            None
        } else if refused {
            Some(FailureCategory::Policy)
        } else if reached {
            Some(FailureCategory::VerificationFailed)
        } else {
            Some(FailureCategory::TargetUnreachable)
        };
        let evidence = serde_json::json!({
            "operation": spec.operation.as_str(),
            "samples": samples,
            "passed": passed,
            "recommended_failure_category": recommended.map(FailureCategory::as_str),
        });
        match recommended {
            None => ExecutionOutcome::succeeded(
                format!(
                    "{} passed after {} sample(s)",
                    spec.operation,
                    samples.len()
                ),
                evidence,
            ),
            Some(category) => {
                let last = samples.last();
                let why = last
                    .and_then(|sample| sample.error.clone())
                    .or_else(|| {
                        last.and_then(|sample| {
                            sample.assertions.iter().find(|assertion| !assertion.passed)
                        })
                        .map(|assertion| {
                            format!(
                                "assertion `{}` failed: expected {}, got {}",
                                assertion.name, assertion.expected, assertion.actual
                            )
                        })
                    })
                    .unwrap_or_else(|| "no sample taken".into());
                ExecutionOutcome::failed(
                    category,
                    format!(
                        "{} failed after {} sample(s): {why}",
                        spec.operation,
                        samples.len()
                    ),
                    Some(evidence),
                )
            }
        }
    }
}
