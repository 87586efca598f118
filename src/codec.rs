//! Avro on the wire: the embedded schemas, the record types that mirror them,
//! and the two framings.
//!
//! - Single-object encoding (default, no registry): `C3 01`, the 8-byte
//!   little-endian CRC-64-AVRO (Rabin) fingerprint of the writer schema's
//!   canonical form, then the datum.
//! - Confluent wire format (when a registry id is configured): `00`, a 4-byte
//!   big-endian schema id, then the datum.
//!
//! Readers accept both and refuse anything else with a clear error.

mod canonical;
mod cloudevents;
mod datums;
mod framing;
mod records;

pub use canonical::{crc64_avro, parsing_canonical_form};
pub use cloudevents::{CloudEvent, Headers};
pub(crate) use datums::datum;
pub use framing::{
    can_read, fingerprint, legacy_fingerprint, Codec, CodecError, Family, Framing, RegistryIds,
};
pub use records::{
    ApprovePlanRecord, ArtifactRecord, AttemptEventRecord, CancelAttemptRecord, CommandKind,
    CommandRecord, EventType, Isolation, JobSpecRecord, LogChunkRecord, LogStream, Presence,
    PresenceRecord, PresenceStatus, ReportType, ResultRecord, RetentionClass, RunnerEventRecord,
    TerminalStatus, WorkRecord, WorkType,
};
