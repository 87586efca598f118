//! The verification runner: probes that never change state. Each sample is
//! evidence; assertions are judged per sample; the JobSpec's retry/backoff
//! policy spaces the samples; the outcome carries a recommended failure
//! category (`target_unreachable` when nothing answered,
//! `verification_failed` when something answered wrongly).

mod cluster;
mod config;
mod probes;
mod service;

pub use config::{VerificationConfig, BUILTIN_PROBES};
pub use service::VerificationRunner;
