//! Who may call the execute API and the console, and what each may do per
//! tenant (docs/SECURITY.md, "Principals"). The operator's policy names
//! each principal with the SHA-256 of its API key, never the key:
//!
//! ```toml
//! [principals.alice]
//! key_sha256 = "<64 hex digits: sha256 of the key>"
//! roles = { team-a = ["operator"], team-b = ["viewer"] }
//! [principals.root]
//! key_sha256 = "..."
//! roles = { "*" = ["viewer", "operator", "approver"] }   # every tenant
//! ```
//!
//! `viewer` reads attempts, jobs and artifacts; `operator` submits and
//! cancels; `approver` approves plans. `operator` and `approver` read too:
//! one cannot act on what one may not see. A key names one principal; what
//! a request writes (`requested_by`, `approved_by`) never names another.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use sha2::{Digest, Sha256};

/// What a principal may do for a tenant.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Viewer,
    Operator,
    Approver,
}

impl Role {
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Approver => "approver",
        }
    }
}

/// One principal as written in the policy file.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PrincipalEntry {
    /// Lowercase hex SHA-256 of the principal's API key.
    pub key_sha256: String,
    /// Tenant (or `*`, every tenant) → roles.
    #[serde(default)]
    pub roles: BTreeMap<String, BTreeSet<Role>>,
}

/// An authenticated caller: its name and roles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    roles: BTreeMap<String, BTreeSet<Role>>,
    /// The shared `EXECPLANE_API_KEY`: it stands for no one in particular.
    shared: bool,
    /// SHA-256 of its key: what it opened (a session, a stream) stays
    /// open only while the policy in force has it with this key.
    key_digest: [u8; 32],
}

/// The name of the shared-key principal (no principals configured).
pub const SHARED_KEY_PRINCIPAL: &str = "api-key";

impl Principal {
    /// The shared `EXECPLANE_API_KEY`, when the policy names no principals:
    /// every role on every tenant, as before principals existed.
    pub fn shared_key(key_digest: [u8; 32]) -> Self {
        Self {
            key_digest,
            name: SHARED_KEY_PRINCIPAL.into(),
            roles: BTreeMap::from([(
                "*".into(),
                BTreeSet::from([Role::Viewer, Role::Operator, Role::Approver]),
            )]),
            shared: true,
        }
    }

    pub fn is_shared_key(&self) -> bool {
        self.shared
    }

    pub fn key_digest(&self) -> &[u8; 32] {
        &self.key_digest
    }

    /// Whether it may act as `role` for `tenant`. `viewer` is held by every
    /// role; the others only by themselves.
    pub fn may(&self, role: Role, tenant: &str) -> bool {
        [tenant, "*"].iter().any(|key| {
            self.roles.get(*key).is_some_and(|roles| {
                roles.contains(&role) || (role == Role::Viewer && !roles.is_empty())
            })
        })
    }

    /// The tenants it may read, or `None` for every tenant.
    pub fn readable_tenants(&self) -> Option<Vec<String>> {
        if self.roles.get("*").is_some_and(|roles| !roles.is_empty()) {
            return None;
        }
        Some(
            self.roles
                .iter()
                .filter(|(_, roles)| !roles.is_empty())
                .map(|(tenant, _)| tenant.clone())
                .collect(),
        )
    }
}

/// The principals of a policy, checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Principals {
    /// (key digest, principal), in name order.
    entries: Vec<([u8; 32], Principal)>,
}

impl Principals {
    /// Every problem of the table at once.
    pub fn parse(table: &BTreeMap<String, PrincipalEntry>) -> Result<Self, Vec<String>> {
        let mut problems = Vec::new();
        let mut entries: Vec<([u8; 32], Principal)> = Vec::new();
        for (name, entry) in table {
            let field = format!("principals.{name}");
            if !valid_name(name) {
                problems.push(format!(
                    "{field}: a principal's name is 1 to 64 characters A-Z a-z 0-9 _ . @ -"
                ));
            }
            let digest = hex::decode(&entry.key_sha256)
                .ok()
                .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
                .filter(|_| entry.key_sha256.bytes().all(|b| !b.is_ascii_uppercase()));
            let Some(digest) = digest else {
                problems.push(format!(
                    "{field}.key_sha256: 64 lowercase hex digits (the SHA-256 of the key, never the key)"
                ));
                continue;
            };
            if let Some((_, other)) = entries.iter().find(|(known, _)| *known == digest) {
                problems.push(format!(
                    "{field}.key_sha256: the same key as principals.{}",
                    other.name
                ));
            }
            for tenant in entry.roles.keys().filter(|tenant| *tenant != "*") {
                if let Err(problem) = crate::contract::limits::tenant_name(tenant) {
                    problems.push(format!("{field}.roles: {problem}"));
                }
            }
            entries.push((
                digest,
                Principal {
                    name: name.clone(),
                    roles: entry.roles.clone(),
                    shared: false,
                    key_digest: digest,
                },
            ));
        }
        if problems.is_empty() {
            Ok(Self { entries })
        } else {
            Err(problems)
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The principal whose key `presented` is. Every entry is compared, in
    /// constant time each, so the time taken says nothing of which matched.
    pub fn find(&self, presented: &[u8]) -> Option<&Principal> {
        use subtle::ConstantTimeEq;
        let digest: [u8; 32] = Sha256::digest(presented).into();
        let mut found = None;
        for (known, principal) in &self.entries {
            if bool::from(known.ct_eq(&digest)) {
                found = Some(principal);
            }
        }
        found
    }

    /// The principal named `name`, if it still exists with key digest
    /// `digest` (a console session outlives neither).
    pub fn named(&self, name: &str, digest: &[u8; 32]) -> Option<&Principal> {
        self.entries
            .iter()
            .find(|(known, principal)| principal.name == name && known == digest)
            .map(|(_, principal)| principal)
    }
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'@' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principals(toml_text: &str) -> Result<Principals, Vec<String>> {
        let table: BTreeMap<String, PrincipalEntry> = toml::from_str(toml_text).unwrap();
        Principals::parse(&table)
    }

    fn digest(key: &str) -> String {
        hex::encode(Sha256::digest(key.as_bytes()))
    }

    #[test]
    fn a_key_finds_its_principal_and_roles_hold_per_tenant() {
        let text = format!(
            "[alice]\nkey_sha256 = \"{}\"\nroles = {{ team-a = [\"viewer\"], team-b = [\"operator\"] }}\n\
             [root]\nkey_sha256 = \"{}\"\nroles = {{ \"*\" = [\"approver\"] }}\n",
            digest("alice-key-0123456789"),
            digest("root-key-0123456789")
        );
        let principals = principals(&text).unwrap();
        let alice = principals.find(b"alice-key-0123456789").unwrap();
        assert_eq!(alice.name, "alice");
        assert!(alice.may(Role::Viewer, "team-a"));
        assert!(!alice.may(Role::Operator, "team-a"));
        assert!(alice.may(Role::Viewer, "team-b"), "an operator reads");
        assert!(alice.may(Role::Operator, "team-b"));
        assert!(!alice.may(Role::Viewer, "team-c"));
        assert_eq!(
            alice.readable_tenants(),
            Some(vec!["team-a".into(), "team-b".into()])
        );
        let root = principals.find(b"root-key-0123456789").unwrap();
        assert!(root.may(Role::Approver, "anyone") && !root.may(Role::Operator, "anyone"));
        assert_eq!(root.readable_tenants(), None);
        assert!(principals.find(b"alice-key-012345678").is_none());
    }

    #[test]
    fn a_key_in_clear_a_shared_key_and_a_bad_name_are_refused() {
        let text = format!(
            "[a]\nkey_sha256 = \"my-secret-key\"\n\
             [b]\nkey_sha256 = \"{0}\"\n[c]\nkey_sha256 = \"{0}\"\n\
             [\"bad name\"]\nkey_sha256 = \"{1}\"\nroles = {{ \"team a\" = [\"viewer\"] }}\n",
            digest("k1"),
            digest("k2").to_uppercase()
        );
        let problems = principals(&text).unwrap_err();
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(problems
            .iter()
            .all(|problem| !problem.contains("my-secret-key")));
    }
}
