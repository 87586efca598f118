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

use super::ops::{
    ClusterRef, HelmReleaseRef, HelmTestInputs, InventoryRef, OperationInputs, TofuModule,
};
use super::{JobSpec, Target};

/// What a key names. The policy's limits are per kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyKind {
    /// A host the runner connects to: a target's address, else its id.
    Node,
    /// An inventory artifact whose hosts are not named in `targets`.
    Inventory,
    /// A Kubernetes namespace of one cluster (every object in it).
    Namespace,
    /// A Helm release: cluster, namespace, release name.
    Release,
    /// An OpenTofu state: module package, path, workspace.
    Workspace,
}

impl KeyKind {
    pub const ALL: [KeyKind; 5] = [
        KeyKind::Node,
        KeyKind::Inventory,
        KeyKind::Namespace,
        KeyKind::Release,
        KeyKind::Workspace,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            KeyKind::Node => "node",
            KeyKind::Inventory => "inventory",
            KeyKind::Namespace => "namespace",
            KeyKind::Release => "release",
            KeyKind::Workspace => "workspace",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == text)
    }
}

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
    if let Ok(inputs) = OperationInputs::parse(spec.operation, &spec.inputs) {
        for (kind, name) in input_keys(&spec.tenant, &inputs) {
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

/// The keys the operation's own inputs name (besides its targets).
fn input_keys(tenant: &str, inputs: &OperationInputs) -> Vec<(KeyKind, String)> {
    use OperationInputs as I;
    let namespace = |cluster: &ClusterRef, namespace: &str| {
        vec![(KeyKind::Namespace, format!("{}/{namespace}", cluster.name))]
    };
    let release = |cluster: &ClusterRef, namespace: &str, release: &str| {
        vec![(
            KeyKind::Release,
            format!("{}/{namespace}/{release}", cluster.name),
        )]
    };
    match inputs {
        I::AnsiblePlaybookRun(run) | I::AnsibleCheckModeRun(run) => inventory(&run.inventory),
        I::AnsibleRoleRun(run) => inventory(&run.inventory),
        I::AnsibleInventoryValidate(run) => inventory(&Some(run.inventory.clone())),
        I::KubernetesManifestApply(apply) => namespace(&apply.cluster, &apply.namespace),
        I::KubernetesManifestDelete(delete) => namespace(&delete.cluster, &delete.namespace),
        I::KubernetesWait(wait) => namespace(&wait.cluster, &wait.namespace),
        I::KubernetesRolloutStatus(read) | I::KubernetesResourceRead(read) => {
            namespace(&read.cluster, &read.namespace)
        }
        I::KubernetesResourcePatch(patch) => namespace(&patch.cluster, &patch.namespace),
        I::VerifyKubernetesCondition(verify) => namespace(&verify.cluster, &verify.namespace),
        I::HelmInstall(helm) | I::HelmUpgrade(helm) => {
            release(&helm.cluster, &helm.namespace, &helm.release)
        }
        I::HelmRollback(helm) => release(&helm.cluster, &helm.namespace, &helm.release),
        I::HelmUninstall(HelmReleaseRef {
            cluster,
            namespace,
            release: name,
        })
        | I::HelmTest(HelmTestInputs {
            cluster,
            namespace,
            release: name,
            ..
        }) => release(cluster, namespace, name),
        I::OpentofuPlan(module)
        | I::OpentofuDestroy(module)
        | I::OpentofuOutput(module)
        | I::OpentofuStateInspect(module) => workspace(tenant, module),
        I::OpentofuApply(apply) => workspace(tenant, &apply.module),
        // Rendering touches nothing; ssh and verification act on targets.
        I::HelmTemplate(_)
        | I::SshCommandRun(_)
        | I::SshFileUpload(_)
        | I::SshFileDownload(_)
        | I::SshServiceRestart(_)
        | I::SshSystemFactCollect(_)
        | I::VerifyHttpEndpoint(_)
        | I::VerifyTcpConnect(_)
        | I::VerifyPostgresReady(_)
        | I::VerifyResourceCapability(_)
        | I::VerifyCustomProbe(_) => Vec::new(),
        #[cfg(feature = "testkit")]
        I::TestkitEchoRun(_) => Vec::new(),
    }
}

/// An inventory artifact's hosts are unknown until it is read: the artifact
/// itself is the key (inventories built from `targets` add nothing here).
fn inventory(inventory: &Option<InventoryRef>) -> Vec<(KeyKind, String)> {
    inventory
        .as_ref()
        .and_then(|inventory| inventory.artifact.clone())
        .map(|artifact| vec![(KeyKind::Inventory, artifact)])
        .unwrap_or_default()
}

/// A state is the tenant's own (its local state directory is per tenant,
/// its backend the tenant's): the key names the tenant, so no other tenant
/// can queue work on it and stall it.
fn workspace(tenant: &str, module: &TofuModule) -> Vec<(KeyKind, String)> {
    vec![(
        KeyKind::Workspace,
        format!(
            "{tenant}/{}/{}/{}",
            module.package.name,
            module.path.as_deref().unwrap_or("."),
            module.workspace.as_deref().unwrap_or("default")
        ),
    )]
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
