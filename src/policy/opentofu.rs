//! The operator's rules for opentofu: approved modules by digest, the
//! backends, the provider environment a tenant may set, and who approves
//! its plans.

use serde::Deserialize;

use super::rules::Check;

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TofuRules {
    /// `sha256:<hex>` of approved module packages.
    #[serde(default)]
    pub modules: Vec<String>,
    /// Backend types (`backend.type`, `local` when a module names none).
    /// Default: `[local]`.
    #[serde(default = "local_backend")]
    pub backends: Vec<String>,
    /// Environment variables the tenant may set for its providers
    /// (`inputs.env`), by exact name. Default: none.
    #[serde(default)]
    pub env: Vec<String>,
    /// Who may approve the tenant's plans for applying (an ApprovePlan's
    /// `approved_by`, exact; `*` anyone). Default: nobody, so no plan is
    /// applied by its digest.
    #[serde(default)]
    pub approvers: Vec<String>,
    /// Whether a plan's own requester may approve it. Default: no (four
    /// eyes).
    #[serde(default)]
    pub self_approve: bool,
    /// What its modules' code (providers, provisioners, `data "external"`)
    /// and the CLI may reach over the network (`host:port`, `[v6]:port`, a
    /// CIDR or an address: every port): the state backend's server, the
    /// providers' APIs. The CLI runs held to these and the host's name
    /// servers (docs/SECURITY.md, "Network"). Default: nothing.
    #[serde(default)]
    pub egress: Vec<super::egress::Destination>,
}

impl TofuRules {
    /// Whether the tenant's state may live in a backend of type `kind`.
    pub fn allows_backend(&self, kind: &str) -> bool {
        self.backends.iter().any(|allowed| allowed == kind)
    }

    /// Whether `who` may approve the tenant's plans.
    pub fn may_approve(&self, who: &str) -> bool {
        self.approvers
            .iter()
            .any(|approver| approver == "*" || approver == who)
    }
}

fn local_backend() -> Vec<String> {
    vec!["local".into()]
}

impl Default for TofuRules {
    fn default() -> Self {
        Self {
            modules: Vec::new(),
            backends: local_backend(),
            env: Vec::new(),
            approvers: Vec::new(),
            self_approve: false,
            egress: Vec::new(),
        }
    }
}

impl Check<'_> {
    pub(super) fn tofu(&mut self, module: &crate::contract::ops::TofuModule) {
        let approved = module
            .package
            .digest
            .as_ref()
            .is_some_and(|digest| self.rules.opentofu.modules.contains(digest));
        if !approved {
            let message = format!(
                "module `{}` is not approved (by digest)",
                module.package.name
            );
            self.refuse("inputs.package", "opentofu.modules", message);
        }
        // Settings by reference may name the type: the runner checks it
        // once it has read them (`TofuRules::allows_backend`).
        let named = module.backend.get("type").and_then(|kind| kind.as_str());
        let backend = named.unwrap_or("local");
        let known = named.is_some() || module.backend_config.is_none();
        if known && !self.rules.opentofu.allows_backend(backend) {
            let message = format!("backend `{backend}` is not allowed");
            self.refuse("inputs.backend.type", "opentofu.backends", message);
        }
        for name in module.env.keys() {
            if !self
                .rules
                .opentofu
                .env
                .iter()
                .any(|allowed| allowed == name)
            {
                let name = crate::contract::limits::shortened(name, 64);
                let message =
                    format!("environment variable `{name}` is not one the tenant may set");
                self.refuse(format!("inputs.env.{name}"), "opentofu.env", message);
            }
        }
    }
}
