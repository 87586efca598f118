//! Per-target concurrency: how many attempts may hold one target key at
//! once (docs/ARCHITECTURE.md, "Per-target concurrency"). Operator-wide:
//!
//! ```yaml
//! concurrency:
//!   limits: { node: 1, release: 1 }   # by key kind; 1 when not named
//!   operations: [verify.custom.probe] # idempotent ones that take keys too
//! ```
//!
//! Every operation that is not idempotent takes the keys of its JobSpec
//! (`contract::target_keys::derive`); an idempotent one only when listed.
//! What the requester writes never changes a limit: the policy does.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::contract::target_keys::{derive, KeyKind, MAX_KEY_LIMIT};
use crate::contract::{JobSpec, TargetKey};

use super::rules::{operation_matches, operation_pattern_problem};

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Concurrency {
    /// Attempts that may hold one key of a kind at once (default 1).
    #[serde(default)]
    limits: BTreeMap<String, u32>,
    /// Idempotent operations (or `prefix.*`) that take their keys too.
    #[serde(default)]
    operations: Vec<String>,
}

impl Concurrency {
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (kind, limit) in &self.limits {
            if KeyKind::parse(kind).is_none() {
                let kinds: Vec<&str> = KeyKind::ALL.iter().map(|kind| kind.as_str()).collect();
                problems.push(format!(
                    "concurrency.limits: `{kind}` is not a key kind (one of {})",
                    kinds.join(", ")
                ));
            }
            if !(1..=MAX_KEY_LIMIT).contains(limit) {
                problems.push(format!(
                    "concurrency.limits.{kind}: {limit} is not between 1 and {MAX_KEY_LIMIT}"
                ));
            }
        }
        for entry in &self.operations {
            if let Some(problem) = operation_pattern_problem(entry) {
                problems.push(format!("concurrency.operations: {problem}"));
            }
        }
        problems
    }

    /// The keys an attempt of `spec` holds while leased, with their limits.
    pub fn keys_for(&self, spec: &JobSpec) -> Vec<TargetKey> {
        let takes_keys = !spec.operation.is_idempotent()
            || self
                .operations
                .iter()
                .any(|entry| operation_matches(entry, spec.operation));
        if !takes_keys {
            return Vec::new();
        }
        derive(spec)
            .into_iter()
            .map(|(kind, key)| TargetKey {
                key,
                limit: self.limits.get(kind.as_str()).copied().unwrap_or(1),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{Operation, Target};

    fn spec(operation: Operation, hosts: &[&str]) -> JobSpec {
        let mut spec: JobSpec = serde_json::from_value(serde_json::json!({
            "command_id": "00000000-0000-0000-0000-000000000001",
            "job_id": "j", "tenant": "t", "requested_by": "r",
            "operation": operation.as_str(), "inputs": {},
        }))
        .expect("spec");
        spec.targets = hosts
            .iter()
            .map(|host| Target {
                kind: "host".into(),
                id: (*host).into(),
                address: None,
                attributes: Default::default(),
            })
            .collect();
        spec
    }

    #[test]
    fn only_what_is_not_idempotent_takes_keys_unless_the_operator_says() {
        let none = Concurrency::default();
        assert_eq!(
            none.keys_for(&spec(Operation::SshCommandRun, &["a"])),
            vec![TargetKey {
                key: "node:a".into(),
                limit: 1
            }]
        );
        assert!(none
            .keys_for(&spec(Operation::VerifyCustomProbe, &["a"]))
            .is_empty());
        let listed: Concurrency =
            serde_yaml::from_str("limits: {node: 3}\noperations: [verify.*]").expect("yaml");
        assert!(listed.problems().is_empty());
        assert_eq!(
            listed.keys_for(&spec(Operation::VerifyCustomProbe, &["a", "b"])),
            vec![
                TargetKey {
                    key: "node:a".into(),
                    limit: 3
                },
                TargetKey {
                    key: "node:b".into(),
                    limit: 3
                }
            ]
        );
    }

    #[test]
    fn every_problem_is_named() {
        let bad: Concurrency =
            serde_yaml::from_str("limits: {host: 1, node: 0}\noperations: [verify.nothing]")
                .expect("yaml");
        let problems = bad.problems();
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].contains("`host` is not a key kind"));
        assert!(problems[1].contains("concurrency.limits.node: 0"));
        assert!(problems[2].contains("concurrency.operations"));
    }
}
