//! The operator's rules for ansible: approved packages by digest, and
//! which of their playbooks and roles may run.

use serde::Deserialize;

use super::rules::{path_matches, Check};
use crate::contract::ops::PackageRef;

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
    /// What its plays may reach over the network besides the attempt's
    /// nodes (`host:port`, `[v6]:port`, a CIDR or an address: every port),
    /// for its tasks on the controller: ansible runs held to its nodes,
    /// these and the host's name servers (docs/SECURITY.md, "Network").
    #[serde(default)]
    pub egress: Vec<super::egress::Destination>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AnsibleRules {
    #[serde(default)]
    pub packages: Vec<AnsiblePackage>,
}

impl Check<'_> {
    pub(super) fn playbook(&mut self, playbook: &crate::contract::ops::AnsiblePlaybook) {
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

    pub(super) fn role(&mut self, role: &crate::contract::ops::AnsibleRole) {
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

    pub(super) fn ansible_package(&mut self, package: &PackageRef) -> Option<AnsiblePackage> {
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
}
