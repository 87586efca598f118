//! What more than one runner needs, so that no runner imports another
//! (docs/ARCHITECTURE.md): reading an approved package (`package`), a
//! node's login and host key (`node`) and the command lines a node runs
//! under its watchdog (`remote`), a cluster of the operator's catalogue and
//! the pure rules of the objects in it (`kube`, `kube::judge`).

pub mod kube;
pub mod node;
pub mod package;
pub mod remote;
