//! The kubernetes runner: manifests applied server-side, deleted, patched
//! and read, conditions and rollouts waited for, on the clusters of the
//! operator's catalogue, through the `kube` crate's typed client.
//!
//! Before any call the runner checks the operator's policy again, object by
//! object, with each kind's scope as the cluster's discovery reports it (so a
//! custom resource is judged like a built-in one): the cluster, the
//! namespace, cluster-scoped kinds only where allowed, and a delete only
//! with the destructive flag. Credentials come only from Vault
//! (`inputs.cluster.credentials`); the endpoint and its CAs only from the
//! operator's `clusters` table (`runner::kit::kube`).
//!
//! Every object touched is reported with its uid and resourceVersion and a
//! diff summary (the live object before against the API server's answer),
//! with the cluster's events about it; `wait` and `rollout.status` report
//! the history of what they waited for (`runner::kit::kube::judge`).

mod config;
mod service;

pub use config::KubernetesConfig;
pub use service::KubernetesRunner;
