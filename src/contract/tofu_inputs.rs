//! What an OpenTofu JobSpec may hand the CLI, by its older path:
//! everything here is [`super::ops::opentofu`]'s.

pub use super::ops::opentofu::{
    backend_type, is_env_name, is_reserved_env, module_problems, problems_of, same_digest,
    MAX_ENTRIES,
};
