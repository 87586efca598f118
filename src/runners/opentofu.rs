//! The opentofu runner: plan, apply, destroy, output and state inspection
//! of an approved module package, by a Terraform-compatible CLI (`tofu`,
//! or `terraform`: the same CLI) as a supervised tool process.
//!
//! - **Approval is binding.** `opentofu.apply` applies only the plan
//!   artifact whose digest the JobSpec approved (compared before anything
//!   is fetched or run), or, without one, only under an explicit operation
//!   policy; `opentofu.destroy` only under an elevated one. The operator's
//!   policy decides who may set either flag, and is checked again here.
//! - **The backend is the JobSpec's and the operator's, never the
//!   module's:** the runner writes an override of the module's backend
//!   block (`local`, whose state the runner places per tenant and module,
//!   or a type the operator's `opentofu.backends` allows).
//! - **Credentials never reach a file the CLI keeps.** A plan file holds
//!   the backend's settings and every variable's value, so a secret is
//!   refused there at intake: the `pg` backend's `conn_str` (from Vault)
//!   becomes libpq's `PG*` environment variables, and providers read their
//!   credentials from environment variables the operator lets the tenant
//!   set (`opentofu.env`).
//! - **Offline providers:** a CLI configuration of the runner's own with a
//!   filesystem mirror (direct installation excluded), `CHECKPOINT_DISABLE`.

mod config;
mod service;

pub use config::TofuConfig;
pub use service::TofuRunner;
