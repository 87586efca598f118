//! The kinds of thing an attempt's target keys name (`target_keys`): a
//! leaf, so that each runner's vocabulary (`ops::<runner>`) names the keys
//! of its inputs without the contract's modules forming a cycle.

/// What a key names. The policy's limits are per kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyKind {
    /// A host the runner connects to: a target's address, else its id.
    Node,
    /// An inventory artifact whose hosts are not named in `targets`.
    Inventory,
    /// A Kubernetes namespace of one cluster (every object in it).
    Namespace,
    /// A Helm release: cluster, namespace, release name.
    Release,
    /// An OpenTofu state: module package, path, workspace.
    Workspace,
}

impl KeyKind {
    pub const ALL: [KeyKind; 5] = [
        KeyKind::Node,
        KeyKind::Inventory,
        KeyKind::Namespace,
        KeyKind::Release,
        KeyKind::Workspace,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            KeyKind::Node => "node",
            KeyKind::Inventory => "inventory",
            KeyKind::Namespace => "namespace",
            KeyKind::Release => "release",
            KeyKind::Workspace => "workspace",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == text)
    }
}
