//! The operator's rules for what acts on a cluster (kubernetes, helm, the
//! kubernetes probes): the clusters a tenant may use, their namespaces,
//! and whether cluster-scoped kinds are allowed.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::rules::{name_matches, Check, OperationRules};
use crate::contract::ops::ClusterRef;

/// One cluster a tenant may act on.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ClusterRules {
    /// Namespace names, or `prefix*`.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Whether cluster-scoped kinds (Namespace, ClusterRole, CRDs, ...) are allowed.
    #[serde(default)]
    pub cluster_scoped: bool,
}

/// Whether two namespace patterns (names, or `prefix*`) can both match
/// one name.
pub fn patterns_overlap(one: &str, other: &str) -> bool {
    match (one.strip_suffix('*'), other.strip_suffix('*')) {
        (None, None) => one == other,
        (Some(prefix), None) => other.starts_with(prefix),
        (None, Some(prefix)) => one.starts_with(prefix),
        (Some(one), Some(other)) => one.starts_with(other) || other.starts_with(one),
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct KubernetesRules {
    /// By the cluster's access reference (`inputs.cluster.name`).
    #[serde(default)]
    pub clusters: BTreeMap<String, ClusterRules>,
}

impl OperationRules {
    /// Whether the tenant may act on one object of `cluster` as the API
    /// server describes it (`namespace` none: a cluster-scoped object, as
    /// discovery says, so a custom kind counts as well as a built-in one).
    /// A `Namespace` object is one of the tenant's namespaces even where
    /// cluster-scoped kinds are allowed: they are allowed for the tenant's
    /// definitions and roles, not to make, change or delete another
    /// tenant's namespace. The runner's check before each call; the
    /// message names the rule.
    pub fn kubernetes_object(
        &self,
        cluster: &str,
        kind: &str,
        name: &str,
        namespace: Option<&str>,
    ) -> Result<(), String> {
        let Some(rules) = self.kubernetes.clusters.get(cluster) else {
            return Err(format!(
                "cluster `{cluster}` is not allowed (operator policy rule kubernetes.clusters)"
            ));
        };
        let tenants = |namespace: &str| {
            if rules
                .namespaces
                .iter()
                .any(|pattern| name_matches(pattern, namespace))
            {
                Ok(())
            } else {
                Err(format!(
                    "namespace `{namespace}` of cluster `{cluster}` is not allowed \
                     (operator policy rule kubernetes.clusters.{cluster}.namespaces)"
                ))
            }
        };
        match namespace {
            None if !rules.cluster_scoped => Err(format!(
                "`{kind}` is cluster-scoped; cluster `{cluster}` allows only namespaced kinds \
                 (operator policy rule kubernetes.clusters.{cluster}.cluster_scoped)"
            )),
            None if kind == "Namespace" => tenants(name),
            None => Ok(()),
            Some(namespace) => tenants(namespace),
        }
    }
}

/// Kinds that live outside any namespace. A manifest of one of these needs
/// `cluster_scoped: true` for the cluster.
pub const CLUSTER_SCOPED_KINDS: [&str; 20] = [
    "APIService",
    "CertificateSigningRequest",
    "ClusterIssuer",
    "ClusterRole",
    "ClusterRoleBinding",
    "CSIDriver",
    "CSINode",
    "CustomResourceDefinition",
    "IngressClass",
    "MutatingWebhookConfiguration",
    "Namespace",
    "Node",
    "PersistentVolume",
    "PodSecurityPolicy",
    "PriorityClass",
    "RuntimeClass",
    "StorageClass",
    "ValidatingAdmissionPolicy",
    "ValidatingWebhookConfiguration",
    "VolumeAttachment",
];

impl Check<'_> {
    /// Inline manifests: each kind's scope and own namespace. A manifest
    /// artifact is checked by the runner that reads it.
    pub(super) fn manifests(&mut self, apply: &crate::contract::ops::KubernetesApply) {
        let Some(cluster) = self.cluster(&apply.cluster, &apply.namespace) else {
            return;
        };
        for (index, manifest) in apply.manifests.iter().enumerate() {
            let kind = manifest.get("kind").and_then(|kind| kind.as_str());
            let namespace = manifest
                .pointer("/metadata/namespace")
                .and_then(|namespace| namespace.as_str());
            let path = format!("inputs.manifests[{index}]");
            self.object(&cluster, &apply.cluster.name, &path, kind, namespace);
        }
    }

    pub(super) fn deletions(&mut self, delete: &crate::contract::ops::KubernetesDelete) {
        let Some(cluster) = self.cluster(&delete.cluster, &delete.namespace) else {
            return;
        };
        for (index, object) in delete.objects.iter().enumerate() {
            let path = format!("inputs.objects[{index}]");
            let (kind, namespace) = (Some(object.kind.as_str()), object.namespace.as_deref());
            self.object(&cluster, &delete.cluster.name, &path, kind, namespace);
        }
    }

    /// The tenant's rules for the cluster, if it may use it and the namespace.
    pub(super) fn cluster(
        &mut self,
        cluster: &ClusterRef,
        namespace: &str,
    ) -> Option<ClusterRules> {
        let Some(rules) = self.rules.kubernetes.clusters.get(&cluster.name).cloned() else {
            let message = format!(
                "tenant `{}` may not use cluster `{}`",
                self.spec.tenant, cluster.name
            );
            self.refuse("inputs.cluster.name", "kubernetes.clusters", message);
            return None;
        };
        if !rules
            .namespaces
            .iter()
            .any(|pattern| name_matches(pattern, namespace))
        {
            let message = format!(
                "namespace `{namespace}` of cluster `{}` is not allowed",
                cluster.name
            );
            let rule = format!("kubernetes.clusters.{}.namespaces", cluster.name);
            self.refuse("inputs.namespace", &rule, message);
        }
        Some(rules)
    }

    /// One object of a manifest or reference: its kind's scope and its own
    /// namespace, when it names one.
    pub(super) fn object(
        &mut self,
        rules: &ClusterRules,
        cluster: &str,
        path: &str,
        kind: Option<&str>,
        namespace: Option<&str>,
    ) {
        if let Some(kind) = kind {
            if CLUSTER_SCOPED_KINDS.contains(&kind) && !rules.cluster_scoped {
                let message = format!(
                    "`{kind}` is cluster-scoped; cluster `{cluster}` allows only namespaced kinds"
                );
                let rule = format!("kubernetes.clusters.{cluster}.cluster_scoped");
                self.refuse(format!("{path}.kind"), &rule, message);
            }
        }
        if let Some(namespace) = namespace {
            if !rules
                .namespaces
                .iter()
                .any(|pattern| name_matches(pattern, namespace))
            {
                let message =
                    format!("namespace `{namespace}` of cluster `{cluster}` is not allowed");
                let rule = format!("kubernetes.clusters.{cluster}.namespaces");
                self.refuse(format!("{path}.namespace"), &rule, message);
            }
        }
    }

    pub(super) fn one_object(
        &mut self,
        cluster: &ClusterRef,
        namespace: &str,
        object: &crate::contract::ops::ObjectRef,
    ) {
        if let Some(rules) = self.cluster(cluster, namespace) {
            let kind = Some(object.kind.as_str());
            self.object(
                &rules,
                &cluster.name,
                "inputs.object",
                kind,
                object.namespace.as_deref(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cluster-scoped kinds allowed are the tenant's definitions and
    /// roles, never another tenant's namespace.
    #[test]
    fn two_tenants_that_could_name_one_namespace_are_refused_at_load() {
        let policy = |b: &str| {
            format!(
                "clusters:\n  dev: {{server: \"https://k.example:6443\", ca_file: /ca.pem}}\ntenants:\n  team-a:\n    kubernetes: {{clusters: {{dev: {{namespaces: [\"team-a\", \"team-a-*\"]}}}}}}\n  team-a-b:\n    kubernetes: {{clusters: {{dev: {{namespaces: [{b}]}}}}}}\n"
            )
        };
        let problems =
            crate::policy::OperatorPolicy::from_yaml(&policy("\"team-a-b\"")).unwrap_err();
        assert!(
            problems
                .iter()
                .any(|problem| problem.contains("team-a-*") && problem.contains("team-a-b")),
            "{problems:?}"
        );
        crate::policy::OperatorPolicy::from_yaml(&policy("\"b-team\"")).unwrap();
    }

    #[test]
    fn namespace_patterns_overlap_where_one_name_matches_both() {
        for (one, other) in [
            ("team-a", "team-a"),
            ("team-a-*", "team-a-b"),
            ("team-a-b", "team-a-*"),
            ("team-a-*", "team-a-b-*"),
            ("*", "anything"),
        ] {
            assert!(patterns_overlap(one, other), "{one} {other}");
        }
        for (one, other) in [
            ("team-a", "team-b"),
            ("team-a-*", "team-b-*"),
            ("team-a", "team-a-*"),
        ] {
            assert!(!patterns_overlap(one, other), "{one} {other}");
        }
    }

    #[test]
    fn a_namespace_object_is_one_of_the_tenant_s_namespaces() {
        let rules = OperationRules {
            operations: Vec::new(),
            grants: Default::default(),
            kubernetes: KubernetesRules {
                clusters: BTreeMap::from([(
                    "dev".to_owned(),
                    ClusterRules {
                        namespaces: vec!["team-a*".into()],
                        cluster_scoped: true,
                    },
                )]),
            },
            helm: Default::default(),
            ansible: Default::default(),
            ssh: Default::default(),
            opentofu: Default::default(),
        };
        assert!(rules
            .kubernetes_object("dev", "Namespace", "team-a-web", None)
            .is_ok());
        let refused = rules
            .kubernetes_object("dev", "Namespace", "team-b", None)
            .unwrap_err();
        assert!(
            refused.contains("kubernetes.clusters.dev.namespaces"),
            "{refused}"
        );
        assert!(rules
            .kubernetes_object("dev", "ClusterRole", "team-b", None)
            .is_ok());
        assert!(rules
            .kubernetes_object("dev", "ConfigMap", "x", Some("kube-system"))
            .is_err());
    }
}
