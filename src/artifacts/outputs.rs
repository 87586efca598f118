//! An attempt's output files on the artifact storage: each stored under its
//! attempt by content (`contract::outputs::output_key`), with the record of
//! whose attempt it is beside it. The runner SDK stores its tools' files
//! through it, the ingress its executors' uploads.

use uuid::Uuid;

use super::{sha256_hex, ArtifactStorage, StorageError};
use crate::contract::outputs::{output_key, output_tenant_key};
use crate::contract::{OutputArtifact, RetentionClass};

/// What is known of an output before it is stored.
pub struct Output<'a> {
    pub name: &'a str,
    pub class: RetentionClass,
    pub media_type: &'a str,
}

/// Stores `bytes` as output `output` of `tenant`'s attempt `attempt_id`:
/// its reference, for the attempt's finished report. The caller has
/// checked the name, counted the attempt's outputs and masked the bytes.
pub async fn put<S: ArtifactStorage>(
    storage: &S,
    attempt_id: Uuid,
    tenant: &str,
    output: Output<'_>,
    bytes: &[u8],
) -> Result<OutputArtifact, StorageError> {
    let sha256 = sha256_hex(bytes);
    let key = output_key(attempt_id, &sha256, output.name);
    storage.put(&key, bytes).await?;
    // The attempt is the tenant's: its later attempts may read its outputs
    // (`verify.attempt.output`), no other tenant's may.
    storage
        .put(&output_tenant_key(attempt_id, tenant), b"")
        .await?;
    Ok(OutputArtifact {
        name: output.name.to_owned(),
        class: output.class,
        media_type: output.media_type.to_owned(),
        size: i64::try_from(bytes.len()).unwrap_or(i64::MAX),
        sha256,
        key,
    })
}

/// The media type of a file name, by its extension.
pub fn media_type_of(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, extension)| extension) {
        Some("json") => "application/json",
        Some("jsonl") => "application/jsonl",
        Some("yaml" | "yml") => "application/yaml",
        Some("txt" | "log" | "ini" | "cfg") => "text/plain; charset=utf-8",
        Some("tar") => "application/x-tar",
        Some("gz" | "tgz") => "application/gzip",
        _ => "application/octet-stream",
    }
}
