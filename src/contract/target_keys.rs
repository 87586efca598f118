//! Target keys: what an attempt acts on, named so that two attempts on one
//! thing (two playbooks on a host, two applies on a state, two upgrades of a
//! release) never hold leases at once beyond what the operator allows
//! (docs/ARCHITECTURE.md, "Per-target concurrency").
//!
//! The keys are derived from the JobSpec alone, so every process derives the
//! same ones; how many attempts may hold a key at once is the operator's
//! (`concurrency` in the policy), recorded with the key in the attempt's
//! `created` event.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

pub use super::key_kind::KeyKind;
use super::ops::ByRunner;
use super::{JobSpec, Target};

/// The most attempts the policy may let hold one key at once.
pub const MAX_KEY_LIMIT: u32 = 1_000;

/// A key an attempt holds while it has a lease, and how many attempts may
/// hold it at once (as the policy said when the attempt was created).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetKey {
    /// `<kind>:<name>`, e.g. `node:10.0.0.5`, `release:prod/web/shop`.
    pub key: String,
    /// At least 1.
    pub limit: u32,
}

impl TargetKey {
    /// The kind this key's name starts with.
    pub fn kind(&self) -> Option<KeyKind> {
        KeyKind::parse(self.key.split_once(':')?.0)
    }
}

/// The keys of `spec`, sorted and without repeats. Inputs that do not parse
/// (they never reach this past validation) contribute no key of their own.
pub fn derive(spec: &JobSpec) -> Vec<(KeyKind, String)> {
    let mut keys = BTreeSet::new();
    let mut add = |kind: KeyKind, name: String| {
        keys.insert((kind, format!("{}:{name}", kind.as_str())));
    };
    for target in &spec.targets {
        add(KeyKind::Node, node_name(target));
    }
    if let Some(inputs) = ByRunner::parse(spec.operation, &spec.inputs) {
        // What the operation's own inputs name, each runner's in its
        // vocabulary (`ops::<runner>`).
        for (kind, name) in inputs.target_keys(&spec.tenant) {
            add(kind, name);
        }
    }
    keys.into_iter().collect()
}

/// The host a target stands for: what a runner connects to.
fn node_name(target: &Target) -> String {
    target
        .address
        .as_deref()
        .unwrap_or(&target.id)
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::Operation;
    use serde_json::json;

    fn spec(operation: Operation, inputs: serde_json::Value, targets: Vec<Target>) -> JobSpec {
        let mut spec: JobSpec = serde_json::from_value(json!({
            "command_id": "00000000-0000-0000-0000-000000000001",
            "job_id": "j",
            "tenant": "t",
            "requested_by": "r",
            "operation": operation.as_str(),
            "inputs": inputs,
        }))
        .expect("spec");
        spec.targets = targets;
        spec
    }

    fn target(id: &str, address: Option<&str>) -> Target {
        Target {
            kind: "host".into(),
            id: id.into(),
            address: address.map(Into::into),
            attributes: Default::default(),
        }
    }

    #[test]
    fn a_node_is_what_is_connected_to_whatever_the_target_is_called() {
        let keys = derive(&spec(
            Operation::SshCommandRun,
            json!({"template_id": "uptime"}),
            vec![
                target("web-1", Some("10.0.0.5")),
                target("alias", Some("10.0.0.5")),
                target("DB-1", None),
            ],
        ));
        assert_eq!(
            keys,
            vec![
                (KeyKind::Node, "node:10.0.0.5".to_owned()),
                (KeyKind::Node, "node:db-1".to_owned()),
            ]
        );
    }

    #[test]
    fn releases_namespaces_and_workspaces_come_from_the_inputs() {
        let cluster = json!({"name": "prod", "credentials": {"$secret": "kube"}});
        let chart =
            json!({"repository": "https://charts.example", "name": "shop", "version": "1.0.0"});
        let helm = derive(&spec(
            Operation::HelmUpgrade,
            json!({"cluster": cluster, "release": "shop", "namespace": "web", "chart": chart}),
            vec![],
        ));
        assert_eq!(
            helm,
            vec![(KeyKind::Release, "release:prod/web/shop".to_owned())]
        );
        let apply = derive(&spec(
            Operation::KubernetesManifestApply,
            json!({"cluster": cluster, "namespace": "web", "manifests": [], "field_manager": "execplane"}),
            vec![],
        ));
        assert_eq!(
            apply,
            vec![(KeyKind::Namespace, "namespace:prod/web".to_owned())]
        );
        let module = json!({"package": {"name": "net", "version": "1"}, "workspace": "blue"});
        let tofu = derive(&spec(Operation::OpentofuPlan, module.clone(), vec![]));
        assert_eq!(
            tofu,
            vec![(KeyKind::Workspace, "workspace:t/net/./blue".to_owned())]
        );
        // Another tenant's same module and workspace is another state.
        let mut other = spec(Operation::OpentofuPlan, module, vec![]);
        other.tenant = "u".into();
        assert_ne!(derive(&other), tofu);
    }

    #[test]
    fn every_kind_reads_back_from_its_key() {
        for kind in KeyKind::ALL {
            let key = TargetKey {
                key: format!("{}:x", kind.as_str()),
                limit: 1,
            };
            assert_eq!(key.kind(), Some(kind));
        }
    }
}
