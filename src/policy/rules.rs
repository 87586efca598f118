//! What each tenant may run and on what: operations, the grants behind the
//! JobSpec's own flags, kubernetes clusters and namespaces, trusted chart
//! sources, approved ansible packages and playbooks, ssh templates and
//! nodes, opentofu modules and backends. Checked by
//! [`super::OperatorPolicy::check_jobspec`]; every refusal names the rule
//! that refused it (`policy rule tenants.<t>.ssh.nodes`, ...), so an
//! operator can find the line to change.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::ssh::{SshTemplate, Sudo};
use crate::contract::ops::{ClusterRef, PackageRef};
use crate::contract::{JobSpec, Operation, OperationInputs, Problem};

/// A permission behind one of the JobSpec's `policy` flags: a requester
/// may set the flag only when the operator granted it to its tenant.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Grant {
    Destructive,
    Elevated,
    ExplicitCommand,
}

impl Grant {
    pub const ALL: [Grant; 3] = [Grant::Destructive, Grant::Elevated, Grant::ExplicitCommand];

    pub const fn as_str(self) -> &'static str {
        match self {
            Grant::Destructive => "destructive",
            Grant::Elevated => "elevated",
            Grant::ExplicitCommand => "explicit_command",
        }
    }

    fn is_set(self, spec: &JobSpec) -> bool {
        match self {
            Grant::Destructive => spec.policy.destructive,
            Grant::Elevated => spec.policy.elevated,
            Grant::ExplicitCommand => spec.policy.explicit_command,
        }
    }
}

/// Operator-wide: operations that run only with a flag set (on top of the
/// contract's own: delete needs `destructive`, destroy `elevated`, rollback
/// `explicit_command`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Requires {
    #[serde(default)]
    pub destructive: Vec<String>,
    #[serde(default)]
    pub elevated: Vec<String>,
    #[serde(default)]
    pub explicit_command: Vec<String>,
}

impl Requires {
    fn of(&self, grant: Grant) -> &[String] {
        match grant {
            Grant::Destructive => &self.destructive,
            Grant::Elevated => &self.elevated,
            Grant::ExplicitCommand => &self.explicit_command,
        }
    }
}

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

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct KubernetesRules {
    /// By the cluster's access reference (`inputs.cluster.name`).
    #[serde(default)]
    pub clusters: BTreeMap<String, ClusterRules>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HelmRules {
    /// Repository URLs or OCI references (a chart's repository must be one
    /// or lie under one), or `sha256:` chart digests.
    #[serde(default)]
    pub chart_sources: Vec<String>,
    /// Whether a chart's `lookup` reads the cluster (with the tenant's own
    /// credential) when it is rendered; off, `lookup` finds nothing.
    #[serde(default)]
    pub lookup: bool,
}

impl HelmRules {
    /// Whether `chart` comes from a trusted source: its digest is listed, or
    /// its repository is a listed one or lies under one.
    pub fn trusts(&self, chart: &crate::contract::ops::ChartRef) -> bool {
        self.trusts_digest(chart) || self.trusts_repository(chart)
    }

    /// Whether the chart's digest itself is listed: the archive stored
    /// under it is trusted, wherever the JobSpec says it came from.
    pub fn trusts_digest(&self, chart: &crate::contract::ops::ChartRef) -> bool {
        chart.digest.as_deref().is_some_and(|digest| {
            self.chart_sources
                .iter()
                .any(|source| source.starts_with("sha256:") && source == digest)
        })
    }

    /// Whether the chart's repository is a listed one or lies under one
    /// (by whole path segments; a repository that climbs with `..` or
    /// hides characters with `%` never does).
    pub fn trusts_repository(&self, chart: &crate::contract::ops::ChartRef) -> bool {
        let repository = chart.repository.as_str();
        let plain = !repository
            .split('/')
            .any(|segment| segment == "." || segment == "..")
            && !repository.contains(['%', '?', '#', '@', '\\']);
        plain
            && self.chart_sources.iter().any(|source| {
                !source.starts_with("sha256:") && {
                    let source = source.trim_end_matches('/');
                    repository == source || repository.starts_with(&format!("{source}/"))
                }
            })
    }
}

/// An approved ansible package and what of it may run.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AnsiblePackage {
    /// `sha256:<hex>` of the package artifact.
    pub digest: String,
    /// Playbook paths inside it, exact or with `*` within one segment.
    #[serde(default)]
    pub playbooks: Vec<String>,
    #[serde(default)]
    pub roles: Vec<String>,
    /// Whether its plays may run code on the controller (the runner's host,
    /// in the attempt's sandbox): `delegate_to: localhost`, `local_action`,
    /// `connection: local`, plays on localhost, lookups of files and
    /// programs, plugin directories. Default: refused before ansible runs.
    #[serde(default)]
    pub controller: bool,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AnsibleRules {
    #[serde(default)]
    pub packages: Vec<AnsiblePackage>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SshRules {
    /// Template ids from the operator's `ssh_templates`.
    #[serde(default)]
    pub templates: Vec<String>,
    /// The nodes it may name in `targets` (any operation: each takes a
    /// `node:` key) and so reach: target ids, host names or CIDRs.
    #[serde(default)]
    pub nodes: Vec<String>,
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TofuRules {
    /// `sha256:<hex>` of approved module packages.
    #[serde(default)]
    pub modules: Vec<String>,
    /// Backend types (`backend.type`, `local` when a module names none).
    /// Default: `[local]`.
    #[serde(default = "local_backend")]
    pub backends: Vec<String>,
    /// Environment variables the tenant may set for its providers
    /// (`inputs.env`), by exact name. Default: none.
    #[serde(default)]
    pub env: Vec<String>,
    /// Who may approve the tenant's plans for applying (an ApprovePlan's
    /// `approved_by`, exact; `*` anyone). Default: nobody, so no plan is
    /// applied by its digest.
    #[serde(default)]
    pub approvers: Vec<String>,
    /// Whether a plan's own requester may approve it. Default: no (four
    /// eyes).
    #[serde(default)]
    pub self_approve: bool,
}

impl TofuRules {
    /// Whether `who` may approve the tenant's plans.
    pub fn may_approve(&self, who: &str) -> bool {
        self.approvers
            .iter()
            .any(|approver| approver == "*" || approver == who)
    }
}

fn local_backend() -> Vec<String> {
    vec!["local".into()]
}

impl Default for TofuRules {
    fn default() -> Self {
        Self {
            modules: Vec::new(),
            backends: local_backend(),
            env: Vec::new(),
            approvers: Vec::new(),
            self_approve: false,
        }
    }
}

/// One tenant's effective operation rules (its section, else the defaults).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperationRules {
    /// `*`, `<runner prefix>.*` or exact operation names.
    pub operations: Vec<String>,
    pub grants: BTreeSet<Grant>,
    pub kubernetes: KubernetesRules,
    pub helm: HelmRules,
    pub ansible: AnsibleRules,
    pub ssh: SshRules,
    pub opentofu: TofuRules,
}

impl OperationRules {
    /// Whether the tenant may act on one object of `cluster` as the API
    /// server describes it (`namespace` none: a cluster-scoped object, as
    /// discovery says, so a custom kind counts as well as a built-in one).
    /// The runner's check before each call; the message names the rule.
    pub fn kubernetes_object(
        &self,
        cluster: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Result<(), String> {
        let Some(rules) = self.kubernetes.clusters.get(cluster) else {
            return Err(format!(
                "cluster `{cluster}` is not allowed (operator policy rule kubernetes.clusters)"
            ));
        };
        match namespace {
            None if !rules.cluster_scoped => Err(format!(
                "`{kind}` is cluster-scoped; cluster `{cluster}` allows only namespaced kinds \
                 (operator policy rule kubernetes.clusters.{cluster}.cluster_scoped)"
            )),
            None => Ok(()),
            Some(namespace)
                if !rules
                    .namespaces
                    .iter()
                    .any(|pattern| name_matches(pattern, namespace)) =>
            {
                Err(format!(
                    "namespace `{namespace}` of cluster `{cluster}` is not allowed \
                     (operator policy rule kubernetes.clusters.{cluster}.namespaces)"
                ))
            }
            Some(_) => Ok(()),
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

/// Whether an `operations` entry is well formed: `*`, a known runner's
/// `prefix.*`, or a known operation.
pub fn operation_pattern_problem(entry: &str) -> Option<String> {
    if entry == "*" {
        return None;
    }
    if let Some(prefix) = entry.strip_suffix(".*") {
        let known = Operation::ALL
            .iter()
            .any(|operation| operation.as_str().starts_with(&format!("{prefix}.")));
        return (!known).then(|| format!("`{entry}` matches no operation"));
    }
    entry
        .parse::<Operation>()
        .err()
        .map(|error| format!("`{entry}`: {error}"))
}

pub(crate) fn operation_matches(entry: &str, operation: Operation) -> bool {
    entry == "*"
        || entry == operation.as_str()
        || entry.strip_suffix(".*").is_some_and(|prefix| {
            operation
                .as_str()
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with('.'))
        })
}

/// `name` against `pattern`: exact, or `prefix*`.
fn name_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// A relative path against a pattern of the same number of segments, each
/// exact or holding `*` (any run of characters within the segment).
fn path_matches(pattern: &str, path: &str) -> bool {
    let patterns: Vec<&str> = pattern.split('/').collect();
    let segments: Vec<&str> = path.split('/').collect();
    patterns.len() == segments.len()
        && patterns
            .iter()
            .zip(&segments)
            .all(|(pattern, segment)| segment_matches(pattern, segment))
}

fn segment_matches(pattern: &str, segment: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = segment.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// What one JobSpec is checked against: its tenant's rules and the
/// operator-wide tables.
pub(super) struct Check<'a> {
    pub spec: &'a JobSpec,
    pub rules: &'a OperationRules,
    pub requires: &'a Requires,
    pub templates: &'a BTreeMap<String, SshTemplate>,
    pub problems: Vec<Problem>,
}

impl Check<'_> {
    /// `policy rule tenants.<tenant>.<rule>`: where the operator looks.
    fn refuse(&mut self, path: impl Into<String>, rule: &str, message: String) {
        let rule = format!("tenants.{}.{rule}", self.spec.tenant);
        self.problems.push(Problem::new(
            path,
            format!("{message} (operator policy rule `{rule}`)"),
        ));
    }

    pub fn run(mut self) -> Vec<Problem> {
        self.operation();
        self.grants();
        // Inputs that do not parse are the contract's to refuse.
        if let Ok(inputs) = OperationInputs::parse(self.spec.operation, &self.spec.inputs) {
            self.inputs(&inputs);
        }
        self.problems
    }

    fn operation(&mut self) {
        let operation = self.spec.operation;
        if !self
            .rules
            .operations
            .iter()
            .any(|entry| operation_matches(entry, operation))
        {
            let message = format!("tenant `{}` may not run `{operation}`", self.spec.tenant);
            self.refuse("operation", "operations", message);
        }
    }

    fn grants(&mut self) {
        for grant in Grant::ALL {
            let set = grant.is_set(self.spec);
            if set && !self.rules.grants.contains(&grant) {
                let message = format!(
                    "tenant `{}` may not set `policy.{}`",
                    self.spec.tenant,
                    grant.as_str()
                );
                self.refuse(format!("policy.{}", grant.as_str()), "grants", message);
            }
            let operation = self.spec.operation;
            let required = self
                .requires
                .of(grant)
                .iter()
                .any(|entry| operation_matches(entry, operation));
            if required && !set {
                self.problems.push(Problem::new(
                    format!("policy.{}", grant.as_str()),
                    format!(
                        "`{operation}` needs `policy.{}: true` (operator policy rule `requires.{}`)",
                        grant.as_str(),
                        grant.as_str()
                    ),
                ));
            }
        }
    }

    /// One arm per operation's inputs, each to the rules of its kind.
    fn inputs(&mut self, inputs: &OperationInputs) {
        use OperationInputs as I;
        match inputs {
            I::AnsiblePlaybookRun(playbook) | I::AnsibleCheckModeRun(playbook) => {
                self.playbook(playbook)
            }
            I::AnsibleRoleRun(role) => self.role(role),
            I::AnsibleInventoryValidate(validate) => {
                if let Some(package) = &validate.package {
                    self.ansible_package(package);
                }
            }
            I::KubernetesManifestApply(apply) => self.manifests(apply),
            I::KubernetesManifestDelete(delete) => self.deletions(delete),
            I::KubernetesWait(wait) => {
                self.one_object(&wait.cluster, &wait.namespace, &wait.object)
            }
            I::KubernetesRolloutStatus(object) | I::KubernetesResourceRead(object) => {
                self.one_object(&object.cluster, &object.namespace, &object.object)
            }
            I::KubernetesResourcePatch(patch) => {
                self.one_object(&patch.cluster, &patch.namespace, &patch.object)
            }
            I::VerifyKubernetesCondition(condition) => {
                self.one_object(&condition.cluster, &condition.namespace, &condition.object)
            }
            I::VerifyResourceCapability(capability) => {
                let namespace = capability.namespace.as_deref().unwrap_or("default");
                self.cluster(&capability.cluster, namespace);
            }
            I::HelmInstall(release) | I::HelmUpgrade(release) => {
                self.cluster(&release.cluster, &release.namespace);
                self.chart(&release.chart);
            }
            I::HelmRollback(rollback) => {
                self.cluster(&rollback.cluster, &rollback.namespace);
            }
            I::HelmUninstall(release) | I::HelmTest(release) => {
                self.cluster(&release.cluster, &release.namespace);
            }
            I::HelmTemplate(template) => self.chart(&template.chart),
            I::OpentofuPlan(module)
            | I::OpentofuDestroy(module)
            | I::OpentofuOutput(module)
            | I::OpentofuStateInspect(module) => self.tofu(module),
            I::OpentofuApply(apply) => self.tofu(&apply.module),
            I::SshCommandRun(command) => self.ssh_command(command),
            I::SshFileUpload(upload) => {
                let destination = upload.destination.clone().into();
                self.ssh_field(&upload.template_id, "destination", &destination);
            }
            I::SshFileDownload(download) => {
                self.ssh_field(&download.template_id, "path", &download.path.clone().into());
            }
            I::SshServiceRestart(restart) => {
                self.ssh_field(
                    &restart.template_id,
                    "service",
                    &restart.service.clone().into(),
                );
            }
            I::SshSystemFactCollect(facts) => self.ssh_facts(facts),
            I::VerifyHttpEndpoint(_)
            | I::VerifyTcpConnect(_)
            | I::VerifyPostgresReady(_)
            | I::VerifyCustomProbe(_) => {}
        }
        // Every operation's targets: ssh and ansible connect to them (an
        // inventory may reach no other host), and every target takes a
        // `node:` key, so a tenant naming another tenant's node could hold
        // that node's key and stall its work (docs/SECURITY.md).
        self.nodes();
    }

    fn playbook(&mut self, playbook: &crate::contract::ops::AnsiblePlaybook) {
        let Some(package) = self.ansible_package(&playbook.package) else {
            return;
        };
        if !package
            .playbooks
            .iter()
            .any(|pattern| path_matches(pattern, &playbook.playbook))
        {
            let message = format!(
                "playbook `{}` is not in the package's playbook allowlist",
                playbook.playbook
            );
            self.refuse("inputs.playbook", "ansible.packages.playbooks", message);
        }
    }

    fn role(&mut self, role: &crate::contract::ops::AnsibleRole) {
        let Some(package) = self.ansible_package(&role.package) else {
            return;
        };
        if !package.roles.contains(&role.role) {
            let message = format!(
                "role `{}` is not in the package's role allowlist",
                role.role
            );
            self.refuse("inputs.role", "ansible.packages.roles", message);
        }
    }

    /// Inline manifests: each kind's scope and own namespace. A manifest
    /// artifact is checked by the runner that reads it.
    fn manifests(&mut self, apply: &crate::contract::ops::KubernetesApply) {
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

    fn deletions(&mut self, delete: &crate::contract::ops::KubernetesDelete) {
        let Some(cluster) = self.cluster(&delete.cluster, &delete.namespace) else {
            return;
        };
        for (index, object) in delete.objects.iter().enumerate() {
            let path = format!("inputs.objects[{index}]");
            let (kind, namespace) = (Some(object.kind.as_str()), object.namespace.as_deref());
            self.object(&cluster, &delete.cluster.name, &path, kind, namespace);
        }
    }

    fn ssh_command(&mut self, command: &crate::contract::ops::SshCommand) {
        let Some(template) = self.ssh_template(&command.template_id) else {
            return;
        };
        for problem in template.check_args(&command.args) {
            self.refuse("inputs.args", "ssh.templates", problem);
        }
        if command.sudo && template.sudo == Sudo::None {
            let message = format!(
                "template `{}` does not run through sudo",
                command.template_id
            );
            self.refuse("inputs.sudo", "ssh.templates", message);
        }
    }

    fn ssh_facts(&mut self, facts: &crate::contract::ops::SshFacts) {
        let Some(template) = self.ssh_template(&facts.template_id) else {
            return;
        };
        let Some(spec) = template.arg("facts") else {
            return;
        };
        for (index, fact) in facts.facts.iter().enumerate() {
            if let Err(problem) = spec.check(&fact.clone().into()) {
                self.refuse(format!("inputs.facts[{index}]"), "ssh.templates", problem);
            }
        }
    }

    fn ansible_package(&mut self, package: &PackageRef) -> Option<AnsiblePackage> {
        let approved = package.digest.as_ref().and_then(|digest| {
            self.rules
                .ansible
                .packages
                .iter()
                .find(|approved| approved.digest == *digest)
                .cloned()
        });
        if approved.is_none() {
            let message = match &package.digest {
                Some(digest) => format!("package `{}` ({digest}) is not approved", package.name),
                None => format!(
                    "package `{}` has no digest: only approved packages, by digest, run",
                    package.name
                ),
            };
            self.refuse("inputs.package", "ansible.packages", message);
        }
        approved
    }

    /// The tenant's rules for the cluster, if it may use it and the namespace.
    fn cluster(&mut self, cluster: &ClusterRef, namespace: &str) -> Option<ClusterRules> {
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
    fn object(
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

    fn one_object(
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

    fn chart(&mut self, chart: &crate::contract::ops::ChartRef) {
        if !self.rules.helm.trusts(chart) {
            let message = format!(
                "chart `{}` from `{}` is not from a trusted source",
                chart.name, chart.repository
            );
            self.refuse("inputs.chart", "helm.chart_sources", message);
        }
    }

    fn tofu(&mut self, module: &crate::contract::ops::TofuModule) {
        let approved = module
            .package
            .digest
            .as_ref()
            .is_some_and(|digest| self.rules.opentofu.modules.contains(digest));
        if !approved {
            let message = format!(
                "module `{}` is not approved (by digest)",
                module.package.name
            );
            self.refuse("inputs.package", "opentofu.modules", message);
        }
        let backend = module
            .backend
            .get("type")
            .and_then(|kind| kind.as_str())
            .unwrap_or("local");
        if !self
            .rules
            .opentofu
            .backends
            .iter()
            .any(|allowed| allowed == backend)
        {
            let message = format!("backend `{backend}` is not allowed");
            self.refuse("inputs.backend.type", "opentofu.backends", message);
        }
        for name in module.env.keys() {
            if !self
                .rules
                .opentofu
                .env
                .iter()
                .any(|allowed| allowed == name)
            {
                let name = crate::contract::limits::shortened(name, 64);
                let message =
                    format!("environment variable `{name}` is not one the tenant may set");
                self.refuse(format!("inputs.env.{name}"), "opentofu.env", message);
            }
        }
    }

    fn ssh_template(&mut self, id: &str) -> Option<SshTemplate> {
        if !self.rules.ssh.templates.iter().any(|allowed| allowed == id) {
            let message = format!(
                "tenant `{}` may not use ssh template `{id}`",
                self.spec.tenant
            );
            self.refuse("inputs.template_id", "ssh.templates", message);
            return None;
        }
        let template = self.templates.get(id).cloned();
        match &template {
            None => self.problems.push(Problem::new(
                "inputs.template_id",
                format!("ssh template `{id}` is not defined (operator policy `ssh_templates`)"),
            )),
            Some(template) if template.operation != self.spec.operation.as_str() => {
                let message = format!(
                    "ssh template `{id}` serves {}, not {}",
                    template.operation, self.spec.operation
                );
                self.refuse("inputs.template_id", "ssh.templates", message);
                return None;
            }
            Some(_) => {}
        }
        template
    }

    /// A field of a file or service operation, checked as the template's
    /// argument of that name (which the template must declare).
    fn ssh_field(&mut self, id: &str, name: &str, value: &serde_json::Value) {
        let Some(template) = self.ssh_template(id) else {
            return;
        };
        let path = format!("inputs.{name}");
        match template.arg(name) {
            Some(spec) => {
                if let Err(problem) = spec.check(value) {
                    self.refuse(
                        path,
                        "ssh.templates",
                        format!("argument `{name}`: {problem}"),
                    );
                }
            }
            None => {
                let message = format!("template `{id}` declares no `{name}` argument");
                self.refuse(path, "ssh.templates", message);
            }
        }
    }

    fn nodes(&mut self) {
        let spec = self.spec;
        for (index, target) in spec.targets.iter().enumerate() {
            if !self.node_allowed(target) {
                let message = format!(
                    "tenant `{}` may not name node `{}` as a target",
                    spec.tenant, target.id
                );
                self.refuse(format!("targets[{index}]"), "ssh.nodes", message);
            }
        }
    }

    /// What is connected to must be allowed: the address when the target
    /// has one (a listed name or inside a listed network), else its id.
    fn node_allowed(&self, target: &crate::contract::Target) -> bool {
        let listed = |text: &str| {
            self.rules.ssh.nodes.iter().any(|entry| {
                entry == text
                    || match (
                        entry.parse::<ipnet::IpNet>(),
                        text.parse::<std::net::IpAddr>(),
                    ) {
                        (Ok(network), Ok(address)) => network.contains(&address),
                        _ => false,
                    }
            })
        };
        listed(target.address.as_deref().unwrap_or(&target.id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_what_they_say() {
        assert!(operation_matches("*", Operation::HelmInstall));
        assert!(operation_matches("helm.*", Operation::HelmInstall));
        assert!(!operation_matches("helm.*", Operation::KubernetesWait));
        assert!(!operation_matches("ssh.command", Operation::SshCommandRun));
        assert!(operation_matches(
            "verify.http.endpoint",
            Operation::VerifyHttpEndpoint
        ));
        assert!(operation_pattern_problem("verify.*").is_none());
        assert!(operation_pattern_problem("helm.explode").is_some());
        assert!(operation_pattern_problem("nothing.*").is_some());
        assert!(name_matches("team-a-*", "team-a-web") && !name_matches("team-a-*", "team-b"));
        assert!(path_matches("site.yml", "site.yml"));
        assert!(path_matches("playbooks/*.yml", "playbooks/web.yml"));
        assert!(!path_matches("playbooks/*.yml", "playbooks/web.yaml"));
        assert!(!path_matches("playbooks/*.yml", "playbooks/x/web.yml"));
        assert!(!path_matches("playbooks/*.yml", "site.yml"));
        assert!(path_matches("*-check.yml", "disk-check.yml"));
        assert!(!path_matches("a*b*c", "ab"));
        assert!(path_matches("a*b*c", "aXbYc"));
    }
}
