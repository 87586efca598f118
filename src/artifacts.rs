//! The artifact worker (DESIGN §6): takes log chunks from
//! `exec.log-chunks.v1`, stages them in Postgres (ordered and deduplicated
//! by attempt, stream and seq; offsets are committed only after), and once
//! an attempt has ended builds its artifacts — one log per stream and the
//! result as evidence — masks them again with the configured detectors,
//! stores them, and records each ref together with an `artifact.created`
//! outbox row. It never interprets results; a storage outage only delays
//! artifacts (chunks stay staged, the attempt's terminal state is long
//! recorded), and nothing is lost.

pub mod detect;
pub mod storage;
mod worker;

pub use detect::Detectors;
pub use storage::{ArtifactStorage, LocalDir, StorageError};
pub use worker::{run, ArtifactConfig};

/// A bundle's bytes and digest, as recorded in its manifest.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(bytes))
}
