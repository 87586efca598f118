//! Each operation's typed result: what a runner's `result_json` must be
//! (docs/OPERATIONS.md). The runner SDK checks a result against its
//! operation's type before it reports it, so a consumer of
//! `exec.results.v1` can rely on the documented shape.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{FailureCategory, Operation, RunnerType};

/// The result of every verification operation: the samples taken, whether
/// the last one passed, and the failure category the runner recommends.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerificationEvidence {
    pub operation: String,
    pub samples: Vec<EvidenceSample>,
    pub passed: bool,
    pub recommended_failure_category: Option<FailureCategory>,
}

/// One sample of a verification.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceSample {
    /// 1, 2, ... in the order taken.
    pub n: u32,
    /// When it was taken (RFC 3339).
    pub at: String,
    pub latency_ms: u64,
    /// Something answered (false: refused, timed out, unresolvable).
    pub reached: bool,
    /// What the probe saw (per operation; see docs/OPERATIONS.md).
    pub observed: Value,
    pub assertions: Vec<EvidenceAssertion>,
    pub error: Option<String>,
    /// The operator's destination policy refused the connection.
    #[serde(default)]
    pub refused_by_policy: bool,
}

/// One assertion of a sample.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceAssertion {
    pub name: String,
    pub expected: Value,
    pub actual: Value,
    pub passed: bool,
}

/// The result of `ssh.command.run`: what ran, as whom, and how it ended on
/// each node (its output is the attempt's stdout and stderr logs).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshCommandResult {
    pub template_id: String,
    /// The program and its arguments as the node received them.
    pub argv: Vec<String>,
    /// The user it ran as through sudo; `None`: no sudo.
    pub sudo_as: Option<String>,
    pub nodes: Vec<SshNodeResult>,
}

/// How the command ended on one node.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshNodeResult {
    /// The target's id.
    pub target: String,
    /// `user@host:port` as connected to.
    pub destination: String,
    /// The remote exit code; `None` when it did not exit (stopped,
    /// unreachable, host key refused).
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    pub error: Option<String>,
}

/// Whether `result` is a result of `operation`; the problem when it is not.
/// Operations whose runner has not landed have no documented result yet.
pub fn check_result(operation: Operation, result: &Value) -> Result<(), String> {
    match operation.runner_type() {
        RunnerType::Verification => {
            let evidence: VerificationEvidence = serde_path_to_error::deserialize(result)
                .map_err(|error| format!("{}: {}", error.path(), error.inner()))?;
            if evidence.operation != operation.as_str() {
                return Err(format!(
                    "operation: `{}`, not `{operation}`",
                    evidence.operation
                ));
            }
            if evidence.passed == evidence.recommended_failure_category.is_some() {
                return Err(
                    "recommended_failure_category: set exactly when the verification did not pass"
                        .into(),
                );
            }
            Ok(())
        }
        RunnerType::Ssh if operation == Operation::SshCommandRun => {
            serde_path_to_error::deserialize::<_, SshCommandResult>(result)
                .map(drop)
                .map_err(|error| format!("{}: {}", error.path(), error.inner()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn evidence(passed: bool, recommended: Value) -> Value {
        json!({
            "operation": "verify.tcp.connect", "passed": passed,
            "recommended_failure_category": recommended,
            "samples": [{"n": 1, "at": "2026-12-01T00:00:00Z", "latency_ms": 3, "reached": true,
                         "observed": {"peer": "127.0.0.1:5432"}, "assertions": [], "error": null}]
        })
    }

    #[test]
    fn a_verification_result_has_the_documented_shape() {
        let op = Operation::VerifyTcpConnect;
        assert_eq!(check_result(op, &evidence(true, Value::Null)), Ok(()));
        assert_eq!(
            check_result(op, &evidence(false, json!("target_unreachable"))),
            Ok(())
        );
        assert!(check_result(op, &evidence(false, Value::Null)).is_err());
        assert!(
            check_result(Operation::VerifyHttpEndpoint, &evidence(true, Value::Null))
                .unwrap_err()
                .contains("operation")
        );
        let mut extra = evidence(true, Value::Null);
        extra["samples"][0]["surprise"] = json!(1);
        assert!(check_result(op, &extra).unwrap_err().contains("samples[0]"));
        assert!(check_result(op, &json!({"ok": true})).is_err());
    }
}
