//! The execution contract: what the control plane may ask for, what runners
//! report, and what execplane records. Depends on nothing else in the crate.
//!
//! The JSON form (serde) is what people write and read; the Avro form
//! (`crate::codec`) is what travels on Kafka and what the event log hashes.

pub mod artifact_ref;
pub mod callbacks;
mod duration;
mod events;
mod failure;
mod jobspec;
mod json_path;
mod key_kind;
pub mod kube_names;
pub mod limits;
mod operation;
pub mod ops;
pub mod outputs;
mod problem;
pub mod secret_shapes;
pub mod target_keys;
pub mod topics;
mod validate;

pub use duration::DurationMs;
pub use events::{
    check_report, event_kind, AttemptEvent, AttemptStatus, CancelInfo, EventBody, Input, LeaseInfo,
    ReportBody, ReportedOutcome, RunnerReport, TerminalOutcome, TimerKind, UnixMillis,
};
pub use failure::FailureCategory;
pub use jobspec::{
    Callback, GenerateSecret, JobSpec, Label, PolicyFlags, RetryPolicy, RunnerRequirements,
    SecretRef, Target, Timeouts, TraceContext,
};
pub use json_path::JsonPath;
pub use operation::{Operation, RunnerType};
pub use ops::{OperationInputs, RunnerInputs};
pub use outputs::{OutputArtifact, RetentionClass};
pub use problem::{Problem, Problems};
pub use target_keys::TargetKey;
pub use validate::{
    flag_problems, input_problems, validate_jobspec, validate_jobspec_bytes, MAX_JOBSPEC_BYTES,
};
pub use validate::{is_traceparent, literal_secret, looks_secret};
