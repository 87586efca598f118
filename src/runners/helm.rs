//! The helm runner: charts installed, upgraded, rolled back, tested and
//! uninstalled on the clusters of the operator's catalogue, and rendered
//! without one, by the `helm` CLI as a supervised tool process.
//!
//! A chart comes from a trusted source only (the operator's
//! `helm.chart_sources`, checked at intake and again here): a chart archive
//! pinned by digest is fetched from the artifact storage and checked
//! against it; a repository chart is pulled by helm from the trusted
//! repository (and checked against its digest when one is given). Values
//! are written to a 0600 file in the tool's private directory, secret
//! references resolved; the cluster's endpoint and CAs are the operator's
//! and the credentials the attempt's (Vault), written to a 0600 kubeconfig
//! helm alone reads. Helm's plugin, cache and configuration directories are
//! the working directory's, so no plugin or repository of the host is used.
//! `helm.rollback` runs only as an explicit control-plane command.

mod config;
mod service;

pub use config::HelmConfig;
pub use service::HelmRunner;
