//! execplane: the execution plane. See `docs/ARCHITECTURE.md`.
// One function may borrow a raw descriptor (`runner::tool::shim`); nothing
// else is unsafe.
#![deny(unsafe_code)]

pub mod artifacts;
pub mod attempt;
pub mod audit;
pub mod bench;
pub mod cli;
pub mod codec;
pub mod config;
pub mod contract;
pub mod dispatcher;
pub mod ingress;
pub mod kafka;
pub mod policy;
pub mod runner;
pub mod runners;
pub mod secrets;
pub mod store;
pub mod telemetry;
