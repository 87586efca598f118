//! Input artifacts: files a job needs (a playbook package, an inventory,
//! manifests, a plan, a file to upload), stored once by content on the
//! artifact storage and named in a JobSpec as `{"artifact": "sha256:<hex>"}`.
//! `execplane artifacts put FILE` stores one and prints its reference.
//! Runners fetch them from storage (never from the store) and check the
//! digest: a missing object or different content fails the attempt as
//! `contract`, naming the reference.
//!
//! Content is bound to the tenants it was stored for (`artifacts put
//! --tenant`, or the attempt of the tenant that made it, such as a plan):
//! a requester's input is read only through [`fetch_for`], which refuses
//! (`policy`) another tenant's content, whose digest may have travelled
//! in events. Content the operator's policy approves by digest for the
//! tenant (an ansible package, an OpenTofu module, a chart) is read with
//! [`fetch`]: the approval is the binding (docs/SECURITY.md).

use super::{ArtifactStorage, StorageError};
pub use crate::contract::artifact_ref::{reference_in, references_in, InputRef};

/// The largest input artifact: runners hold one in memory while they check it.
pub const MAX_INPUT_BYTES: usize = 64 * 1024 * 1024;

/// Why an input could not be had. `Missing` and `Mismatch` are the
/// requester's (`contract`); `Storage` is an outage (`infrastructure`).
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("input artifact {0} is not in storage (store it with `execplane artifacts put`)")]
    Missing(InputRef),
    #[error("input artifact {reference}: the stored content's digest is {actual}")]
    Mismatch {
        reference: InputRef,
        actual: InputRef,
    },
    #[error(
        "input artifact {reference} is not stored for tenant `{tenant}` (store it with `execplane artifacts put --tenant {tenant}`)"
    )]
    NotTheTenants { reference: InputRef, tenant: String },
    #[error("{0}")]
    Malformed(String),
    #[error("input artifact {reference} is larger than {MAX_INPUT_BYTES} bytes")]
    TooLarge { reference: InputRef },
    #[error("attempt {attempt_id} is not an attempt of tenant `{tenant}`")]
    NotTheTenantsAttempt {
        attempt_id: uuid::Uuid,
        tenant: String,
    },
    #[error("attempt {attempt_id} has no output `{name}` of digest {reference}")]
    NoOutput {
        attempt_id: uuid::Uuid,
        name: String,
        reference: InputRef,
    },
    #[error("input artifact {reference}: {source}")]
    Storage {
        reference: InputRef,
        source: StorageError,
    },
}

impl InputError {
    pub fn category(&self) -> crate::contract::FailureCategory {
        match self {
            InputError::Storage { .. } => crate::contract::FailureCategory::Infrastructure,
            InputError::NotTheTenants { .. } | InputError::NotTheTenantsAttempt { .. } => {
                crate::contract::FailureCategory::Policy
            }
            _ => crate::contract::FailureCategory::Contract,
        }
    }
}

/// Stores `bytes` under their content address; storing the same content
/// twice stores it once.
pub async fn put<S: ArtifactStorage>(storage: &S, bytes: &[u8]) -> Result<InputRef, String> {
    if bytes.len() > MAX_INPUT_BYTES {
        return Err(format!(
            "{} bytes; an input artifact is at most {MAX_INPUT_BYTES}",
            bytes.len()
        ));
    }
    let reference = InputRef::of(bytes);
    storage
        .put(&reference.key(), bytes)
        .await
        .map_err(|error| error.to_string())?;
    Ok(reference)
}

/// Binds stored content to `tenant`: [`fetch_for`] that tenant reads it.
pub async fn bind<S: ArtifactStorage>(
    storage: &S,
    reference: &InputRef,
    tenant: &str,
) -> Result<(), StorageError> {
    storage.put(&reference.tenant_key(tenant), b"").await
}

/// Where the origin of content an attempt made is recorded (`plans/…`, a
/// key no `execplane artifacts put` writes): the facts of its making a
/// later attempt checks it against.
pub fn origin_key(reference: &InputRef) -> String {
    format!("plans/{}", reference.key())
}

/// [`fetch`] of a requester's input for `tenant`: refused (`policy`) when
/// the content was not stored for that tenant, whether or not anyone else
/// stored it (the answer says nothing of other tenants' content), before
/// the content is read.
pub async fn fetch_for<S: ArtifactStorage>(
    storage: &S,
    reference: &InputRef,
    tenant: &str,
) -> Result<Vec<u8>, InputError> {
    bound(storage, reference, tenant).await?;
    fetch(storage, reference).await
}

/// Output `name` of `attempt_id` whose digest is `reference`, for
/// `tenant`: refused (`policy`) unless the attempt is the tenant's (the
/// runner SDK records whose it is with its outputs,
/// [`crate::contract::outputs::output_tenant_key`]), whether or not it
/// exists, before anything of it is read; then read and checked against
/// its digest. The attempt, not the content: a tenant holding the same
/// bytes must not learn whether another's attempt made them.
pub async fn fetch_output_for<S: ArtifactStorage>(
    storage: &S,
    attempt_id: uuid::Uuid,
    name: &str,
    reference: &InputRef,
    tenant: &str,
) -> Result<Vec<u8>, InputError> {
    let owner = crate::contract::outputs::output_tenant_key(attempt_id, tenant);
    match storage.get(&owner).await {
        Ok(_) => {}
        Err(StorageError::NotFound(_)) => {
            return Err(InputError::NotTheTenantsAttempt {
                attempt_id,
                tenant: tenant.to_owned(),
            })
        }
        Err(source) => {
            return Err(InputError::Storage {
                reference: reference.clone(),
                source,
            })
        }
    }
    let key = crate::contract::outputs::output_key(attempt_id, reference.hex(), name);
    read_checked(storage, &key, reference)
        .await
        .map_err(|error| match error {
            InputError::Missing(reference) => InputError::NoOutput {
                attempt_id,
                name: name.to_owned(),
                reference,
            },
            error => error,
        })
}

/// Whether `reference` is bound to `tenant` ([`bind`]): refused (`policy`)
/// when not.
async fn bound<S: ArtifactStorage>(
    storage: &S,
    reference: &InputRef,
    tenant: &str,
) -> Result<(), InputError> {
    match storage.get(&reference.tenant_key(tenant)).await {
        Ok(_) => Ok(()),
        Err(StorageError::NotFound(_)) => Err(InputError::NotTheTenants {
            reference: reference.clone(),
            tenant: tenant.to_owned(),
        }),
        Err(source) => Err(InputError::Storage {
            reference: reference.clone(),
            source,
        }),
    }
}

/// Reads an input and checks that its content is the one it names. Only
/// for content the operator's policy approved by digest; a requester's
/// input goes through [`fetch_for`].
pub async fn fetch<S: ArtifactStorage>(
    storage: &S,
    reference: &InputRef,
) -> Result<Vec<u8>, InputError> {
    read_checked(storage, &reference.key(), reference).await
}

/// The object at `key`, which must be `reference`'s content.
async fn read_checked<S: ArtifactStorage>(
    storage: &S,
    key: &str,
    reference: &InputRef,
) -> Result<Vec<u8>, InputError> {
    let bytes = storage.get(key).await.map_err(|source| match source {
        StorageError::NotFound(_) => InputError::Missing(reference.clone()),
        source => InputError::Storage {
            reference: reference.clone(),
            source,
        },
    })?;
    if bytes.len() > MAX_INPUT_BYTES {
        return Err(InputError::TooLarge {
            reference: reference.clone(),
        });
    }
    let actual = InputRef::of(&bytes);
    if &actual != reference {
        return Err(InputError::Mismatch {
            reference: reference.clone(),
            actual,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    #[tokio::test]
    async fn an_input_is_stored_by_content_and_checked_when_read() {
        let root = std::env::temp_dir().join(format!("execplane-inputs-{}", uuid::Uuid::new_v4()));
        let storage = super::super::LocalDir::new(&root);
        let reference = put(&storage, b"- hosts: all\n").await.unwrap();
        assert_eq!(
            reference.to_string(),
            format!("sha256:{}", hex::encode(Sha256::digest(b"- hosts: all\n")))
        );
        assert_eq!(InputRef::parse(&reference.to_string()).unwrap(), reference);
        assert_eq!(
            fetch(&storage, &reference).await.unwrap(),
            b"- hosts: all\n"
        );
        // Another file's name: missing, a contract failure.
        let absent = InputRef::of(b"never stored");
        let missing = fetch(&storage, &absent).await.unwrap_err();
        assert!(matches!(missing, InputError::Missing(_)), "{missing}");
        assert_eq!(
            missing.category(),
            crate::contract::FailureCategory::Contract
        );
        // Tampered content: named with both digests.
        std::fs::write(root.join(reference.key()), b"- hosts: prod\n").unwrap();
        let tampered = fetch(&storage, &reference).await.unwrap_err();
        assert!(
            tampered.to_string().contains(&reference.to_string()),
            "{tampered}"
        );
        assert!(matches!(tampered, InputError::Mismatch { .. }));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[tokio::test]
    async fn a_requesters_input_is_read_only_for_the_tenants_it_was_stored_for() {
        let root = std::env::temp_dir().join(format!("execplane-inputs-{}", uuid::Uuid::new_v4()));
        let storage = super::super::LocalDir::new(&root);
        let reference = put(&storage, b"state").await.unwrap();
        bind(&storage, &reference, "team-a").await.unwrap();
        assert_eq!(
            fetch_for(&storage, &reference, "team-a").await.unwrap(),
            b"state"
        );
        for other in ["team-b", "team-a/..", "team%2Da", ""] {
            let refused = fetch_for(&storage, &reference, other).await.unwrap_err();
            assert!(
                matches!(refused, InputError::NotTheTenants { .. }),
                "{other}: {refused}"
            );
            assert_eq!(refused.category(), crate::contract::FailureCategory::Policy);
        }
        // Names that differ only where a path could hide them differ in their keys.
        assert_ne!(reference.tenant_key("a/b"), reference.tenant_key("a%2Fb"));
        assert_ne!(reference.tenant_key("a.b"), reference.tenant_key("a%2Eb"));
        assert!(!reference.tenant_key("../x").contains(".."));
        // Never stored at all: the same answer as another tenant's, so the
        // answer reveals nothing of what others stored.
        let absent = InputRef::of(b"never stored");
        let missing = fetch_for(&storage, &absent, "team-a").await.unwrap_err();
        assert!(
            matches!(missing, InputError::NotTheTenants { .. }),
            "{missing}"
        );
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn only_a_well_formed_reference_parses() {
        for bad in [
            "sha256:abc",
            "md5:00",
            "SHA256:0000",
            "sha256:../../etc/passwd",
        ] {
            assert!(InputRef::parse(bad).is_err(), "{bad}");
        }
        let upper = format!("sha256:{}", "A".repeat(64));
        assert!(InputRef::parse(&upper).is_err());
        assert!(reference_in(&serde_json::json!({"artifact": "sha256:00"}))
            .unwrap()
            .is_err());
        assert!(reference_in(&serde_json::json!({"artifact": "x", "kind": 1})).is_none());
        assert!(reference_in(&serde_json::json!({"path": "x"})).is_none());
    }
}
