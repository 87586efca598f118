//! `execplane bench`: figures, never assertions.

pub mod pipeline;
pub mod store;
