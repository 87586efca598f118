//! execplane: the execution plane. See `docs/ARCHITECTURE.md`.
#![forbid(unsafe_code)]

pub mod attempt;
pub mod codec;
pub mod contract;
