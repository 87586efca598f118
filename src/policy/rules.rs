//! What each tenant may run and on what: operations, the grants behind the
//! JobSpec's own flags, and each operation's inputs against its runner's
//! rules (`policy::<runner>`: kubernetes clusters and namespaces, trusted
//! chart sources, approved ansible packages and playbooks, ssh templates
//! and nodes, opentofu modules and backends). Checked by
//! [`super::OperatorPolicy::check_jobspec`]; every refusal names the rule
//! that refused it (`policy rule tenants.<t>.ssh.nodes`, ...), so an
//! operator can find the line to change.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::ansible::AnsibleRules;
use super::helm::HelmRules;
use super::kubernetes::KubernetesRules;
use super::opentofu::TofuRules;
use super::ssh::{SshRules, SshTemplate};
use crate::contract::ops::{ByRunner, Governed};
use crate::contract::{JobSpec, Operation, Problem};

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
pub(super) fn name_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// A relative path against a pattern of the same number of segments, each
/// exact or holding `*` (any run of characters within the segment).
pub(super) fn path_matches(pattern: &str, path: &str) -> bool {
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
    pub tenant: &'a super::TenantPolicy,
    pub rules: &'a OperationRules,
    pub requires: &'a Requires,
    pub templates: &'a BTreeMap<String, SshTemplate>,
    pub problems: Vec<Problem>,
}

impl Check<'_> {
    /// `policy rule tenants.<tenant>.<rule>`: where the operator looks.
    pub(super) fn refuse(&mut self, path: impl Into<String>, rule: &str, message: String) {
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
        if let Some(inputs) = ByRunner::parse(self.spec.operation, &self.spec.inputs) {
            self.inputs(&inputs);
        }
        self.problems
    }

    /// A secret written for the tenant falls under its secret write
    /// prefixes (not merely its read prefixes: a shared one is read-only).
    fn secret_write(&mut self, field: &str, location: &crate::contract::ops::SecretLocation) {
        if self.tenant.secret_reserved(&location.mount, &location.path) {
            self.problems
                .push(Problem::new(field, super::RESERVED_SECRET));
        } else if !self.tenant.secret_writable(&location.mount, &location.path) {
            self.problems.push(Problem::new(
                field,
                format!(
                    "tenant `{}` may not write `{}/{}`: outside the operator's secret write prefixes for it",
                    self.spec.tenant, location.mount, location.path
                ),
            ));
        }
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

    /// What the inputs name (each runner's vocabulary says what, in
    /// `contract::ops::<runner>`), each to the rules of its kind.
    fn inputs(&mut self, inputs: &ByRunner) {
        for governed in inputs.governed() {
            match governed {
                Governed::AnsiblePlaybook(playbook) => self.playbook(playbook),
                Governed::AnsibleRole(role) => self.role(role),
                Governed::AnsiblePackage(package) => {
                    self.ansible_package(package);
                }
                Governed::Manifests(apply) => self.manifests(apply),
                Governed::Deletions(delete) => self.deletions(delete),
                Governed::Object {
                    cluster,
                    namespace,
                    object,
                } => self.one_object(cluster, namespace, object),
                Governed::Namespace { cluster, namespace } => {
                    self.cluster(cluster, namespace);
                }
                Governed::Chart(chart) => self.chart(chart),
                Governed::TofuModule(module) => self.tofu(module),
                Governed::SshCommand(command) => self.ssh_command(command),
                Governed::SshField {
                    template,
                    field,
                    value,
                } => self.ssh_field(template, field, &value),
                Governed::SshFacts(facts) => self.ssh_facts(facts),
                Governed::SecretWrite { field, location } => self.secret_write(field, location),
            }
        }
        // Every operation's targets: ssh and ansible connect to them (an
        // inventory may reach no other host), and every target takes a
        // `node:` key, so a tenant naming another tenant's node could hold
        // that node's key and stall its work (docs/SECURITY.md).
        self.nodes();
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
