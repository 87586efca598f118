//! The typed runners. Each has the same shape: `config` (what the operator
//! sets), `service` (the executor: one operation in, a typed outcome out) and
//! the operation-specific modules it needs.

pub mod ansible;
pub mod helm;
pub mod kubernetes;
pub mod opentofu;
pub mod ssh;
pub mod verification;
