//! `execplane bench`: figures, never assertions.

pub mod store;
