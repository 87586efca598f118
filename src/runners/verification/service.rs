use std::time::Duration;

use super::probes::{self, Bounds, Sample};
use super::VerificationConfig;
use crate::contract::ops::EvidenceRequirements;
use crate::contract::ops::{VerifyInputs, VerifyInputs as I};
use crate::contract::{FailureCategory, RetentionClass, RunnerType};
use crate::runner::{Assignment, ExecutionContext, ExecutionOutcome, Executor, Failure};

/// Redirects an HTTP probe follows, each hop checked against the policy.
const MAX_REDIRECTS: usize = 5;

/// The verification runner's executor.
pub struct VerificationRunner {
    config: VerificationConfig,
    /// One policy-bound HTTP client per tenant, with the destinations it
    /// was bound to (bounded: cleared when full).
    clients: std::sync::Mutex<
        std::collections::HashMap<String, (crate::policy::DestinationPolicy, reqwest::Client)>,
    >,
}

impl VerificationRunner {
    pub fn new(config: VerificationConfig) -> Self {
        Self {
            config,
            clients: Default::default(),
        }
    }

    /// The HTTP client of `tenant`: it connects only where its policy
    /// allows. A client is bound to the destinations it was built with (its
    /// resolver and redirect check), so a reload that changes them builds
    /// a new one; the old one's pooled connections go with it.
    fn client(&self, tenant: &str, bounds: &Bounds) -> Result<reqwest::Client, String> {
        let mut clients = self
            .clients
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((bound, client)) = clients.get(tenant) {
            if *bound == bounds.destinations {
                return Ok(client.clone());
            }
        }
        let client = crate::policy::http_client(&bounds.destinations, MAX_REDIRECTS)?;
        if clients.len() >= 256 {
            clients.clear();
        }
        clients.insert(
            tenant.to_owned(),
            (bounds.destinations.clone(), client.clone()),
        );
        Ok(client)
    }
}

impl Executor for VerificationRunner {
    type Inputs = VerifyInputs;

    fn runner_type(&self) -> RunnerType {
        RunnerType::Verification
    }

    fn capabilities(&self) -> Vec<String> {
        vec![
            "http".into(),
            "tcp".into(),
            "postgres".into(),
            "kubernetes".into(),
            "custom".into(),
        ]
    }

    async fn execute(
        &self,
        assignment: Assignment,
        inputs: VerifyInputs,
        context: ExecutionContext,
    ) -> ExecutionOutcome {
        let mut inputs = inputs;
        if let Err(problem) = inputs.aim(&assignment.spec.targets) {
            return Failure::contract(format!("{}: {}", problem.path, problem.message)).into();
        }
        let prepared = self.prepare(&assignment.spec.tenant, inputs, context.policy());
        let mut prepared = match prepared {
            Ok(prepared) => prepared,
            Err(refusal) => return refusal.into(),
        };
        if let Err(refusal) = self.fetch_inputs(&mut prepared, &context).await {
            return refusal.into();
        }
        let spec = &assignment.spec;
        let retry = spec.retry;
        let needed = prepared.inputs.evidence().consecutive_passes.max(1);
        let samples_wanted = retry.max_attempts.max(needed);
        let mut samples: Vec<Sample> = Vec::new();
        for n in 1..=samples_wanted {
            if context.cancel.is_cancelled() {
                break;
            }
            context.progress(
                format!("sample {n}/{samples_wanted}"),
                Some(u8::try_from(n * 100 / samples_wanted).unwrap_or(100)),
            );
            let Some(sample) = self.sample(&prepared, &context, n).await else {
                return ExecutionOutcome::failed(
                    FailureCategory::RunnerError,
                    format!(
                        "{} is not supported by this verification runner yet",
                        spec.operation
                    ),
                    None,
                );
            };
            let mut sample = sample;
            keep_body(&context, &mut sample).await;
            // A refusal by the policy will not change with another sample;
            // after a failure, too few samples may be left to pass.
            let failed = !sample.passed();
            let refused = sample.refused_by_policy;
            samples.push(sample);
            // An output judged again is judged the same.
            let settled = matches!(prepared.inputs, I::VerifyAttemptOutput(_));
            if refused
                || passes_in_a_row(&samples) >= needed
                || (failed && (settled || samples_wanted - n < needed))
            {
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
        let outcome = verdict(spec.operation.as_str(), samples, needed);
        if prepared.inputs.evidence().keep.samples {
            keep_samples(&context, outcome).await
        } else {
            outcome
        }
    }
}

/// A sample's body, when the evidence keeps bodies, stored as output
/// `body-<n>` (the first [`EvidenceRequirements::MAX_KEPT_BODIES`]
/// samples' only) and named in its `observed.body_artifact`; never kept in
/// memory past its sample.
async fn keep_body(context: &ExecutionContext, sample: &mut Sample) {
    let Some(body) = sample.body.take() else {
        return;
    };
    if sample.n > EvidenceRequirements::MAX_KEPT_BODIES {
        return;
    }
    let name = format!("body-{}", sample.n);
    let stored = context
        .store_output_bytes(body, &name, RetentionClass::Evidence)
        .await;
    let artifact = match stored {
        Ok(_) => serde_json::Value::String(name),
        Err(error) => {
            context.log(
                crate::codec::LogStream::Stderr,
                format!(
                    "execplane: sample {}'s body was not kept: {error}\n",
                    sample.n
                ),
            );
            serde_json::Value::Null
        }
    };
    if let Some(observed) = sample.observed.as_object_mut() {
        observed.insert("body_artifact".into(), artifact);
    }
}

/// The evidence stored as output `evidence.json`, and named in the result
/// (`evidence_artifact`); as it was when it could not be stored, which the
/// log says.
async fn keep_samples(
    context: &ExecutionContext,
    mut outcome: ExecutionOutcome,
) -> ExecutionOutcome {
    const NAME: &str = "evidence.json";
    let Some(evidence) = &outcome.result_json else {
        return outcome;
    };
    let stored = context
        .store_output_bytes(
            evidence.clone().into_bytes(),
            NAME,
            RetentionClass::Evidence,
        )
        .await;
    let named = stored.map_err(|error| error.to_string()).and_then(|_| {
        let mut evidence: serde_json::Value =
            serde_json::from_str(evidence).map_err(|error| error.to_string())?;
        if let Some(object) = evidence.as_object_mut() {
            object.insert("evidence_artifact".into(), NAME.into());
        }
        Ok(evidence.to_string())
    });
    match named {
        Ok(evidence) => outcome.result_json = Some(evidence),
        Err(error) => context.log(
            crate::codec::LogStream::Stderr,
            format!("execplane: the evidence was not kept: {error}\n"),
        ),
    }
    outcome
}

/// How many of the last samples passed, in a row.
fn passes_in_a_row(samples: &[Sample]) -> u32 {
    let run = samples
        .iter()
        .rev()
        .take_while(|sample| sample.passed())
        .count();
    u32::try_from(run).unwrap_or(u32::MAX)
}

/// What one execution needs before its first sample.
struct Prepared {
    inputs: VerifyInputs,
    bounds: Bounds,
    http: reqwest::Client,
    /// The input artifacts a probe program reads (removed when done).
    input_files: Option<crate::runner::tool::Workdir>,
    /// The Kubernetes probes: a client of the cluster, and the tenant's
    /// rules its objects are checked against.
    cluster: Option<(kube::Client, crate::policy::OperationRules)>,
    /// `verify.attempt.output`: the output judged, read once.
    output: Option<Vec<u8>>,
}

impl VerificationRunner {
    /// Checks the probe against this runner's allowlist and makes what the
    /// samples need: the tenant's bounds, an HTTP client, a cluster client
    /// (the SDK checked the rest, against the policy handed here).
    fn prepare(
        &self,
        tenant: &str,
        inputs: VerifyInputs,
        policy: &crate::policy::OperatorPolicy,
    ) -> Result<Prepared, Failure> {
        if let I::VerifyCustomProbe(probe) = &inputs {
            if !self.config.allowed_probes.contains(&probe.probe_id) {
                let allowed: Vec<&str> = self
                    .config
                    .allowed_probes
                    .iter()
                    .map(String::as_str)
                    .collect();
                return Err(Failure::policy(format!(
                    "probe `{}` is not on this runner's allowlist ({})",
                    probe.probe_id,
                    allowed.join(", ")
                )));
            }
        }
        // The runner SDK checked the whole JobSpec against the operator's
        // policy before this executor was called; what is left is where
        // each connection may go, checked on every one of them.
        let bounds = Bounds {
            destinations: policy.tenant(tenant).destinations.clone(),
            max_body_bytes: self.config.max_body_bytes,
        };
        let http = self
            .client(tenant, &bounds)
            .map_err(|error| Failure::new(FailureCategory::RunnerError, error))?;
        let cluster_ref = match &inputs {
            I::VerifyKubernetesCondition(condition) => Some(&condition.cluster),
            I::VerifyResourceCapability(capability) => Some(&capability.cluster),
            _ => None,
        };
        let cluster = match cluster_ref {
            Some(cluster_ref) => {
                let client =
                    crate::runner::kit::kube::connect(policy, cluster_ref, self.config.kubernetes)?;
                Some((client, policy.tenant(tenant).operations.clone()))
            }
            None => None,
        };
        Ok(Prepared {
            inputs,
            bounds,
            http,
            input_files: None,
            cluster,
            output: None,
        })
    }

    /// A probe program's `args` may name input artifacts: each is fetched,
    /// checked against its digest and replaced by the read-only file's
    /// path. A missing or different object fails the attempt as
    /// `contract`, naming the reference's field. The output
    /// `verify.attempt.output` judges is fetched too, once.
    async fn fetch_inputs(
        &self,
        prepared: &mut Prepared,
        context: &ExecutionContext,
    ) -> Result<(), Failure> {
        if let I::VerifyAttemptOutput(output) = &prepared.inputs {
            let content = context
                .fetch_output(output.attempt_id, &output.name, &output.sha256)
                .await?;
            prepared.output = Some(content);
            return Ok(());
        }
        let I::VerifyCustomProbe(probe) = &mut prepared.inputs else {
            return Ok(());
        };
        let failed = Failure::new;
        let mut args = serde_json::to_value(&probe.args).map_err(|error| {
            failed(
                FailureCategory::RunnerError,
                format!("inputs.args cannot be read: {error}"),
            )
        })?;
        let mut references = Vec::new();
        crate::artifacts::inputs::references_in(&args, "inputs.args", &mut references);
        if references.is_empty() {
            return Ok(());
        }
        let workdir =
            crate::runner::tool::Workdir::for_tools(context.tools()).map_err(|error| {
                failed(
                    FailureCategory::Infrastructure,
                    format!("no directory for input artifacts: {error}"),
                )
            })?;
        workdir
            .fetch_inputs(context, &mut args, "inputs.args")
            .await
            .map_err(|(path, error)| failed(error.category(), format!("{path}: {error}")))?;
        probe.args = serde_json::from_value(args).map_err(|error| {
            failed(
                FailureCategory::RunnerError,
                format!("inputs.args with the fetched inputs: {error}"),
            )
        })?;
        prepared.input_files = Some(workdir);
        Ok(())
    }

    /// A sample's timeout: the one asked for (or the default), at most the
    /// operator's maximum.
    fn timeout(&self, explicit: Option<crate::contract::DurationMs>) -> Duration {
        explicit
            .map_or(self.config.default_timeout, |duration| duration.as_std())
            .min(self.config.max_timeout)
    }

    /// One sample; `None` for an operation this runner has no probe for.
    async fn sample(
        &self,
        prepared: &Prepared,
        context: &ExecutionContext,
        n: u32,
    ) -> Option<Sample> {
        let bounds = &prepared.bounds;
        Some(match &prepared.inputs {
            I::VerifyHttpEndpoint(http) => {
                probes::http(&prepared.http, http, bounds, self.timeout(http.timeout), n).await
            }
            I::VerifyTcpConnect(tcp) => {
                probes::tcp(tcp, bounds, self.timeout(tcp.timeout), n).await
            }
            I::VerifyPostgresReady(postgres) => {
                probes::postgres(postgres, bounds, self.timeout(None), n).await
            }
            I::VerifyKubernetesCondition(condition) => {
                let (client, rules) = prepared.cluster.as_ref()?;
                let probe = super::cluster::Probe {
                    client,
                    rules,
                    timeout: self.timeout(None),
                };
                probe.condition(condition, n).await
            }
            I::VerifyResourceCapability(capability) => {
                let (client, rules) = prepared.cluster.as_ref()?;
                let probe = super::cluster::Probe {
                    client,
                    rules,
                    timeout: self.timeout(None),
                };
                probe.capability(capability, n).await
            }
            I::VerifyCustomProbe(probe) => match &self.config.probe_dir {
                Some(dir) if !probes::is_built_in(&probe.probe_id) => {
                    probes::program(dir, probe, context, n, prepared.input_files.as_ref()).await
                }
                _ => probes::custom(probe, context, n).await,
            },
            I::VerifyAttemptOutput(output) => {
                probes::attempt_output(output, prepared.output.as_deref()?, n).await
            }
        })
    }
}

/// The outcome the samples support: success when the last `needed` passed;
/// else a failure whose category says what happened (the policy refused,
/// the attempt's deadline stopped the probe, nothing answered, or something
/// answered wrongly), with every sample as evidence.
pub(super) fn verdict(operation: &str, samples: Vec<Sample>, needed: u32) -> ExecutionOutcome {
    let in_a_row = passes_in_a_row(&samples);
    let passed = in_a_row >= needed;
    let reached = samples.iter().any(|sample| sample.reached);
    let refused = samples.iter().any(|sample| sample.refused_by_policy);
    let recommended = if passed {
        None
    } else if refused {
        Some(FailureCategory::Policy)
    } else if samples
        .last()
        .is_some_and(|sample| sample.stopped_at_deadline)
    {
        Some(FailureCategory::Timeout)
    } else if reached {
        Some(FailureCategory::VerificationFailed)
    } else {
        Some(FailureCategory::TargetUnreachable)
    };
    let evidence = serde_json::json!({
        "operation": operation,
        "samples": samples,
        "passed": passed,
        "consecutive_passes": needed,
        "recommended_failure_category": recommended.map(FailureCategory::as_str),
    });
    let Some(category) = recommended else {
        return ExecutionOutcome::succeeded(
            format!("{operation} passed after {} sample(s)", samples.len()),
            evidence,
        );
    };
    let last = samples.last();
    let why = last
        .and_then(|sample| sample.error.clone())
        .or_else(|| {
            last.and_then(|sample| sample.assertions.iter().find(|assertion| !assertion.passed))
                .map(|assertion| {
                    format!(
                        "assertion `{}` failed: expected {}, got {}",
                        assertion.name, assertion.expected, assertion.actual
                    )
                })
        })
        .unwrap_or_else(|| match last {
            Some(_) => format!("{in_a_row} passed in a row, of the {needed} required"),
            None => "no sample taken".into(),
        });
    ExecutionOutcome::failed(
        category,
        format!(
            "{operation} failed after {} sample(s): {why}",
            samples.len()
        ),
        Some(evidence),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::Operation;

    fn sample(reached: bool, passed: bool, refused: bool) -> Sample {
        let mut sample: Sample = serde_json::from_value(serde_json::json!({
            "n": 1, "at": "t", "latency_ms": 1, "reached": reached, "observed": null,
            "assertions": [{"name": "status", "expected": 200, "actual": if passed { 200 } else { 500 }, "passed": passed}],
            "error": null
        }))
        .unwrap();
        sample.refused_by_policy = refused;
        sample
    }

    /// A reload that takes a destination away holds for the next probe:
    /// the tenant's cached client, bound to the old destinations (its
    /// resolver and its redirect check), is not used again.
    #[tokio::test]
    async fn a_reloaded_policy_binds_the_next_http_probe_of_a_tenant() {
        let port = super::super::probes::tests::serve_ok("").await;
        let bounds = |yaml: &str| Bounds {
            destinations: crate::policy::OperatorPolicy::from_yaml(yaml)
                .unwrap()
                .tenant("team-a")
                .destinations
                .clone(),
            max_body_bytes: 1024,
        };
        let open = bounds("tenants: {team-a: {destinations: {allow_private: [\"localhost\"]}}}");
        let closed = bounds("tenants: {team-a: {}}");
        let runner = VerificationRunner::new(VerificationConfig::default());
        let url = format!("http://localhost:{port}/");
        let fetch = |bounds| runner.client("team-a", bounds).unwrap().get(&url).send();
        assert_eq!(fetch(&open).await.unwrap().status(), 200);
        let error = crate::policy::describe_http_error(&fetch(&closed).await.unwrap_err());
        assert!(error.contains("allow_private"), "{error}");
    }

    #[test]
    fn it_runs_exactly_the_catalog_s_verification_operations() {
        let runner = VerificationRunner::new(VerificationConfig::default());
        let mut announced = runner.operations();
        announced.sort();
        let catalog: Vec<Operation> = Operation::implemented_by(RunnerType::Verification).collect();
        assert_eq!(announced, catalog);
    }

    #[test]
    fn no_sample_waits_past_the_operator_s_maximum() {
        let runner = VerificationRunner::new(VerificationConfig {
            default_timeout: Duration::from_secs(5),
            max_timeout: Duration::from_secs(20),
            ..VerificationConfig::default()
        });
        assert_eq!(runner.timeout(None), Duration::from_secs(5));
        let asked = |millis| Some(crate::contract::DurationMs(millis));
        assert_eq!(runner.timeout(asked(3_000)), Duration::from_secs(3));
        assert_eq!(
            runner.timeout(asked(3_600_000)),
            Duration::from_secs(20),
            "an hour asked for is cut to the operator's maximum"
        );
    }

    #[test]
    fn every_verdict_is_the_documented_result_type() {
        for operation in Operation::implemented_by(RunnerType::Verification) {
            for samples in [
                vec![sample(true, true, false)],
                vec![sample(true, false, false)],
                vec![sample(false, false, true)],
                vec![],
            ] {
                let outcome = verdict(operation.as_str(), samples, 1);
                let result: serde_json::Value =
                    serde_json::from_str(outcome.result_json.as_deref().unwrap()).unwrap();
                assert_eq!(
                    crate::contract::ops::check_result(operation, &result),
                    Ok(()),
                    "{operation}: {result}"
                );
            }
        }
    }

    #[test]
    fn the_verdict_says_what_the_samples_saw() {
        let passed = verdict(
            "verify.http.endpoint",
            vec![sample(true, false, false), sample(true, true, false)],
            1,
        );
        assert_eq!(passed.outcome, crate::contract::ReportedOutcome::Succeeded);
        assert!(passed.message.contains("after 2 sample(s)"));
        let wrong = verdict("verify.http.endpoint", vec![sample(true, false, false)], 1);
        assert_eq!(wrong.category, Some(FailureCategory::VerificationFailed));
        assert!(
            wrong
                .message
                .contains("assertion `status` failed: expected 200, got 500"),
            "{}",
            wrong.message
        );
        let silent = verdict("verify.tcp.connect", vec![sample(false, false, false)], 1);
        assert_eq!(silent.category, Some(FailureCategory::TargetUnreachable));
        let refused = verdict("verify.tcp.connect", vec![sample(false, false, true)], 1);
        assert_eq!(refused.category, Some(FailureCategory::Policy));
        let evidence: serde_json::Value =
            serde_json::from_str(refused.result_json.as_deref().unwrap()).unwrap();
        assert_eq!(evidence["recommended_failure_category"], "policy");
        // A probe program the attempt's deadline stopped: the attempt timed
        // out, whatever the target did.
        let mut stopped = sample(false, false, false);
        stopped.stopped_at_deadline = true;
        let late = verdict("verify.custom.probe", vec![stopped], 1);
        assert_eq!(late.category, Some(FailureCategory::Timeout));
        assert_eq!(
            verdict("x", vec![], 1).message,
            "x failed after 0 sample(s): no sample taken"
        );
    }

    #[test]
    fn it_passes_only_on_the_passes_in_a_row_it_requires() {
        let (pass, fail) = (sample(true, true, false), sample(true, false, false));
        let short = verdict(
            "verify.http.endpoint",
            vec![fail.clone(), pass.clone(), pass.clone()],
            3,
        );
        assert_eq!(short.category, Some(FailureCategory::VerificationFailed));
        assert!(
            short
                .message
                .ends_with("2 passed in a row, of the 3 required"),
            "{}",
            short.message
        );
        let evidence: serde_json::Value =
            serde_json::from_str(short.result_json.as_deref().unwrap()).unwrap();
        assert_eq!(evidence["consecutive_passes"], 3);
        let enough = verdict(
            "verify.http.endpoint",
            vec![fail, pass.clone(), pass.clone(), pass],
            3,
        );
        assert_eq!(enough.outcome, crate::contract::ReportedOutcome::Succeeded);
    }
}
