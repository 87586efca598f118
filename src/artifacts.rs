//! The artifact worker (docs/ARCHITECTURE.md, "Artifacts"): takes log chunks from
//! `exec.log-chunks.v1`, stages them in Postgres (ordered and deduplicated
//! by attempt, stream and seq; offsets are committed only after), and once
//! an attempt has ended builds its artifacts — one log per stream and the
//! result as evidence — masks them again with the configured detectors,
//! stores them, and records each ref together with an `artifact.created`
//! outbox row. It never interprets results; a storage outage only delays
//! artifacts (chunks stay staged, the attempt's terminal state is long
//! recorded), and nothing is lost.

pub mod detect;
pub mod inputs;
pub mod outputs;
pub mod storage;
mod worker;

pub use detect::Detectors;
pub use storage::{
    ArtifactStorage, LocalDir, S3Settings, Storage, StorageError, StorageSettings, S3,
};
pub use worker::{run, ArtifactConfig};

/// One collection: every artifact past its class's retention is deleted
/// from storage, then forgotten. With `dry_run`, nothing is deleted and the
/// same list is returned. Evidence is kept for its own (longer) retention,
/// after the logs of the same attempt are gone.
pub async fn collect_garbage<S: ArtifactStorage>(
    store: &crate::store::Store,
    storage: &S,
    retention: crate::store::Retention,
    dry_run: bool,
) -> Result<Vec<crate::store::ArtifactRow>, String> {
    let expired = store
        .expired_artifacts(retention)
        .await
        .map_err(|error| error.to_string())?;
    if dry_run {
        return Ok(expired);
    }
    let mut deleted = Vec::with_capacity(expired.len());
    for artifact in expired {
        storage
            .delete(&artifact.storage_key)
            .await
            .map_err(|error| error.to_string())?;
        store
            .forget_artifact(artifact.artifact_id)
            .await
            .map_err(|error| error.to_string())?;
        deleted.push(artifact);
    }
    Ok(deleted)
}

/// A bundle's bytes and digest, as recorded in its manifest.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(bytes))
}
