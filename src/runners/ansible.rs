//! The ansible runner: an operator-approved package (a tar archive,
//! fetched by its `sha256:` digest and checked against it) runs with
//! `ansible-playbook` against the JobSpec's nodes over SSH.
//!
//! It drives `ansible-playbook` itself, with an event callback of its own
//! (`execplane_events.py`, written into the attempt's working directory),
//! rather than through `ansible-runner`: the runner toolkit already gives
//! every tool what `ansible-runner` would (a private directory, a scrubbed
//! environment, secrets in 0600 files, SIGINT then SIGKILL of the whole
//! process group, output masked as it streams), and `ansible-runner`
//! starts ansible under a pseudo-terminal in a session of its own, outside
//! the process group the supervisor stops. The callback's JSON lines are
//! the raw event stream (a mandatory output artifact), read while the
//! playbook runs for progress events and folded into the typed result
//! when it ends (docs/OPERATIONS.md, "Ansible").
//!
//! Nothing the requester writes reaches ansible's own controls: the
//! configuration file is the runner's (`ANSIBLE_CONFIG`, so a package's
//! `ansible.cfg` is never read), inventory plugins are limited to `ini`
//! and `yaml` (no script inventories), no `ansible_*` variable may come
//! from the JobSpec, an inventory artifact may not choose the connection
//! (`ansible_connection`, ssh arguments, executables, key files), and
//! every inventory host must be one of the JobSpec's targets, whose host
//! keys are the only ones accepted. A package runs nothing on the
//! controller (local tasks, plays on localhost, controller lookups,
//! plugins: `controller`) unless the operator allows it for that package.

mod config;
mod controller;
pub mod events;
mod service;
pub mod ssh_client;

pub use config::AnsibleConfig;
pub use service::AnsibleRunner;
