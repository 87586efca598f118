//! Who calls the execute API and the console, and what they may see
//! (docs/SECURITY.md, "Principals"): a key is looked up among the policy's
//! principals (or, when it names none, is the shared `EXECPLANE_API_KEY`);
//! an attempt or job of a tenant the caller may not read is answered as if
//! it did not exist, so ids do not leak across tenants.

use uuid::Uuid;

use super::{key_matches, Ingress, IngressError};
use crate::policy::principals::{Principal, Role};

impl Ingress {
    /// The principal whose API key `presented` is. `Ok(None)` when the
    /// execute API is off (no principals and no shared key).
    pub fn principal_of(&self, presented: &[u8]) -> Result<Option<Principal>, IngressError> {
        let policy = self.config.policy.current();
        let principals = policy.principals();
        if principals.is_empty() {
            if self.config.api_key.is_empty() {
                return Ok(None);
            }
            return if key_matches(presented, &self.config.api_key) {
                use sha2::{Digest, Sha256};
                Ok(Some(Principal::shared_key(
                    Sha256::digest(presented).into(),
                )))
            } else {
                Err(IngressError::Unauthorized)
            };
        }
        // The executors' key never opens the API, whatever the policy holds.
        if key_matches(presented, &self.config.ingress_key) {
            return Err(IngressError::Unauthorized);
        }
        principals
            .find(presented)
            .cloned()
            .map(Some)
            .ok_or(IngressError::Unauthorized)
    }

    /// The principal a console session was signed in as, if it still
    /// exists with the same key (a policy reload can end it).
    pub fn principal_of_session(&self, name: &str, key_digest: &[u8; 32]) -> Option<Principal> {
        use sha2::{Digest, Sha256};
        use subtle::ConstantTimeEq;
        let policy = self.config.policy.current();
        let principals = policy.principals();
        if principals.is_empty() {
            let shared: [u8; 32] = Sha256::digest(self.config.api_key.expose().as_bytes()).into();
            let same = !self.config.api_key.is_empty()
                && name == crate::policy::principals::SHARED_KEY_PRINCIPAL
                && bool::from(shared.ct_eq(key_digest));
            return same.then(|| Principal::shared_key(*key_digest));
        }
        principals.named(name, key_digest).cloned()
    }

    /// Whether `principal` may still read `tenant` under the policy in
    /// force: a reload that removes it, changes its key or takes its
    /// roles on the tenant ends what it opened before (a live stream).
    pub fn still_reads(&self, principal: &Principal, tenant: &str) -> bool {
        self.principal_of_session(&principal.name, principal.key_digest())
            .is_some_and(|now| now.may(Role::Viewer, tenant))
    }

    /// Whether the execute API and the console can serve anyone.
    pub fn api_on(&self) -> bool {
        !self.config.api_key.is_empty() || !self.config.policy.current().principals().is_empty()
    }

    /// The attempt's row, if `principal` may read its tenant; otherwise
    /// the same 404 as an attempt that does not exist.
    pub async fn readable_attempt(
        &self,
        principal: &Principal,
        attempt_id: Uuid,
    ) -> Result<serde_json::Value, IngressError> {
        let not_found = || IngressError::NotFound(format!("attempt {attempt_id}"));
        let row = self
            .store
            .attempt_json(attempt_id)
            .await?
            .ok_or_else(not_found)?;
        let tenant = row["tenant"].as_str().unwrap_or_default();
        if principal.may(Role::Viewer, tenant) {
            Ok(unseen_holders_removed(principal, row))
        } else {
            Err(not_found())
        }
    }

    /// As [`Ingress::readable_attempt`], and the principal must hold
    /// `role` for the attempt's tenant (a 403 then: it may see it).
    pub async fn attempt_for(
        &self,
        principal: &Principal,
        attempt_id: Uuid,
        role: Role,
    ) -> Result<serde_json::Value, IngressError> {
        let row = self.readable_attempt(principal, attempt_id).await?;
        let tenant = row["tenant"].as_str().unwrap_or_default();
        if !principal.may(role, tenant) {
            return Err(IngressError::Forbidden(format!(
                "`{}` lacks the {} role for tenant `{tenant}`",
                principal.name,
                role.as_str()
            )));
        }
        Ok(row)
    }
}

/// An attempt row without the holders of its target keys (`waiting_for[]
/// .held_by`) unless the principal reads every tenant: a key such as
/// `node:<address>` is shared by tenants, and its holders are attempt ids
/// of others. The counts stay.
pub fn unseen_holders_removed(
    principal: &Principal,
    mut row: serde_json::Value,
) -> serde_json::Value {
    if principal.readable_tenants().is_some() {
        for wait in row["waiting_for"].as_array_mut().into_iter().flatten() {
            if let Some(wait) = wait.as_object_mut() {
                wait.remove("held_by");
            }
        }
    }
    row
}

/// Who a state-changing call speaks for: the principal itself. A body may
/// name it again (`requested_by`, `approved_by`) but never another; only the
/// shared key, which stands for no one in particular, takes the body's word.
pub fn speaking_for(
    principal: &Principal,
    field: &str,
    written: Option<&str>,
) -> Result<Option<String>, IngressError> {
    if principal.is_shared_key() {
        return Ok(written.map(str::to_owned));
    }
    match written {
        Some(name) if name != principal.name => Err(IngressError::Forbidden(format!(
            "{field} must be the caller's own principal name `{}` (or left out)",
            principal.name
        ))),
        _ => Ok(Some(principal.name.clone())),
    }
}
