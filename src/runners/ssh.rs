//! The ssh runner: the operator's command templates (`ssh_templates` in the
//! policy: a program, typed arguments, a sudo policy) run on the JobSpec's
//! nodes. There is no generic shell: a JobSpec names a template and gives
//! typed values, and the command line the node receives is built from the
//! template's argument vector by construction (`runner::kit::remote`).
//!
//! It drives the system OpenSSH client (`ssh`) as a supervised tool
//! process rather than linking an SSH library such as `russh`: OpenSSH is
//! the client operators already audit and configure (its host key checking,
//! key formats and algorithms are the reference), it brings no second crypto
//! stack into the binary, and it runs under the runner toolkit as every tool
//! does — a private working directory, the key in a 0600 file, output
//! masked as it streams, SIGINT then SIGKILL on cancel, killed with its
//! runner. The remote side is bound to the client: the command runs under a
//! small POSIX `sh` watchdog that reads the session's stdin, which the
//! client holds open for as long as its supervisor lives
//! (`ToolCommand::hold_stdin`); when the client goes (cancel, deadline, a
//! runner killed -9), the session's stdin ends and the watchdog sends the
//! command SIGTERM, then SIGKILL. The account's login shell on the node must
//! be POSIX (sh, dash, bash, ksh, zsh).
//!
//! Host keys are never learned: a node's `host_key` attribute (a known_hosts
//! key, `ssh-ed25519 AAAA...`) is the only key accepted for it, and a node
//! without one is refused before anything connects.

mod config;
mod service;

pub use config::SshConfig;
pub use service::SshRunner;
