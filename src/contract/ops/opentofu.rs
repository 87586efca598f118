//! The inputs of the opentofu runner's operations, their union (what the
//! runner SDK hands that runner's executor), and what a JobSpec may hand
//! the CLI, checked at intake and again by the runner SDK
//! (docs/ARCHITECTURE.md, "OpenTofu"):
//!
//! - **Variables are plain values.** The CLI writes every variable's value
//!   into the plan file (stored as an artifact) and the state, so a secret
//!   reference there is refused: credentials reach providers as
//!   environment variables (`env`) and the `pg` backend as `conn_str`,
//!   neither of which the CLI stores.
//! - **Names are the CLI's own:** a workspace, a variable, a backend
//!   setting and an environment variable each keep to a small alphabet, so
//!   none can become a flag, a path or a second setting.
//! - **The backend** is `type` plus plain settings; a secret only as the
//!   `pg` backend's `conn_str`. The `local` backend takes no settings: the
//!   runner places its state.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

use super::{Governed, KeyKind};
use super::{OperationInputs, PackageRef, Vars};
use crate::contract::{Operation, PolicyFlags, Problem};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TofuModule {
    pub package: PackageRef,
    /// Relative to the package root.
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub workspace: Option<String>,
    /// Input variables: plain values only (a variable's value is written
    /// into the plan file and the state, so a secret never goes here).
    #[serde(default)]
    pub variables: Vars,
    /// Variable files stored as the tenant's input artifacts
    /// (`.tfvars.json` when they start with `{`, else `.tfvars`), given to
    /// the CLI in order with `variables` on top. Plain values only, as
    /// `variables`: the CLI writes them into the plan file and the state.
    #[serde(default)]
    pub var_files: Vec<crate::contract::artifact_ref::InputRef>,
    /// `type` (`local` when absent; the operator's `opentofu.backends`)
    /// and its settings; for `pg`, `conn_str` may be a secret reference.
    #[serde(default)]
    pub backend: Vars,
    /// Backend settings stored as the tenant's input artifact (a JSON
    /// object, `type` included), with `backend` on top: checked as
    /// `backend` is, by the runner once it has read them.
    #[serde(default)]
    pub backend_config: Option<crate::contract::artifact_ref::InputRef>,
    /// Environment variables for the providers (their credentials, as
    /// secret references): only names the operator's `opentofu.env` lists.
    #[serde(default)]
    pub env: Vars,
    /// Where `opentofu.apply` and `opentofu.output` write the values of the
    /// sensitive outputs (one key per output, a value that is not a string
    /// as its JSON text), each output's result naming it; unset, their
    /// values are withheld. Under the tenant's secret prefixes.
    #[serde(default)]
    pub sensitive_outputs_to: Option<super::SecretLocation>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TofuApply {
    #[serde(flatten)]
    pub module: TofuModule,
    /// The plan artifact to apply; its digest must equal the policy's
    /// `approved_plan_digest`.
    #[serde(default)]
    pub plan_artifact: Option<crate::contract::artifact_ref::InputRef>,
}

super::runner_inputs! {
    /// The inputs of the opentofu runner's operations.
    TofuInputs {
    OpentofuPlan(TofuModule),
    OpentofuApply(TofuApply),
    OpentofuDestroy(TofuModule),
    OpentofuOutput(TofuModule),
    OpentofuStateInspect(TofuModule),
    }
}

impl super::Vocabulary for TofuInputs {
    /// The state it acts on. A state is the tenant's own (its local state
    /// directory is per tenant, its backend the tenant's): the key names
    /// the tenant, so no other tenant can queue work on it and stall it.
    fn target_keys(&self, tenant: &str) -> Vec<(KeyKind, String)> {
        let module = self.module();
        vec![(
            KeyKind::Workspace,
            format!(
                "{tenant}/{}/{}/{}",
                module.package.name,
                module.path.as_deref().unwrap_or("."),
                module.workspace.as_deref().unwrap_or("default")
            ),
        )]
    }

    fn governed(&self) -> Vec<Governed<'_>> {
        let module = self.module();
        let writes = module
            .sensitive_outputs_to
            .iter()
            .map(|location| Governed::SecretWrite {
                field: "inputs.sensitive_outputs_to",
                location,
            });
        std::iter::once(Governed::TofuModule(module))
            .chain(writes)
            .collect()
    }

    fn flag_problems(
        operation: Operation,
        flags: &PolicyFlags,
        inputs: Option<&Value>,
    ) -> Vec<Problem> {
        flag_problems(operation, flags, inputs)
    }

    fn result_problem(_: Operation, result: &Value) -> Result<(), String> {
        super::shaped::<TofuResult>(result)
    }
}

impl TofuInputs {
    /// The module every operation runs.
    pub fn module(&self) -> &TofuModule {
        match self {
            Self::OpentofuPlan(module)
            | Self::OpentofuDestroy(module)
            | Self::OpentofuOutput(module)
            | Self::OpentofuStateInspect(module) => module,
            Self::OpentofuApply(apply) => &apply.module,
        }
    }
}

/// Most variables, environment variables or backend settings of a module.
pub const MAX_ENTRIES: usize = 256;

/// Most variable files of a module.
pub const MAX_VAR_FILES: usize = 16;

/// The backend type of `module` (`local` when it names none).
pub fn backend_type(module: &TofuModule) -> &str {
    module
        .backend
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("local")
}

/// The secret name `value` refers to, when it is a `{"$secret": …}`.
fn secret_reference(value: &Value) -> Option<&str> {
    value.as_object()?.get("$secret")?.as_str()
}

fn holds_secret_reference(value: &Value) -> bool {
    match value {
        Value::Object(object) => {
            object.contains_key("$secret") || object.values().any(holds_secret_reference)
        }
        Value::Array(items) => items.iter().any(holds_secret_reference),
        _ => false,
    }
}

/// A CLI name: 1-64 of letters, digits, `_` and `-`, starting with a letter
/// or `_`.
fn is_name(text: &str) -> bool {
    (1..=64).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && text
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
}

/// An environment variable's name: 1-64 of `A-Z`, `0-9` and `_`, not
/// starting with a digit.
pub fn is_env_name(text: &str) -> bool {
    (1..=64).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        && !text.as_bytes()[0].is_ascii_digit()
}

/// Whether the runner sets `name` itself, so no tenant may: the CLI's own
/// settings (`TF_*`, which can add arguments to every command), the pg
/// backend's connection (`PG*`), the dynamic loader's (`LD_*`) and the
/// process's basics.
pub fn is_reserved_env(name: &str) -> bool {
    ["TF_", "TOFU_", "PG", "LD_"]
        .iter()
        .any(|prefix| name.starts_with(prefix))
        || ["PATH", "HOME", "TMPDIR", "CHECKPOINT_DISABLE"].contains(&name)
}

fn shown(text: &str) -> String {
    crate::contract::limits::shortened(text, 64)
}

fn entries(field: &str, vars: &Vars, problems: &mut Vec<Problem>) {
    if vars.len() > MAX_ENTRIES {
        problems.push(Problem::new(
            format!("inputs.{field}"),
            format!("at most {MAX_ENTRIES} entries"),
        ));
    }
}

/// A string the CLI would read as a template in a `.tf.json` file.
fn is_template(text: &str) -> bool {
    text.contains("${") || text.contains("%{")
}

/// Every problem of one module's inputs.
pub fn module_problems(module: &TofuModule, problems: &mut Vec<Problem>) {
    if let Some(path) = &module.path {
        if let Err(message) = crate::contract::limits::is_safe_relative(path) {
            problems.push(Problem::new("inputs.path", message));
        }
    }
    if let Some(workspace) = &module.workspace {
        if !is_name(workspace) {
            problems.push(Problem::new(
                "inputs.workspace",
                format!(
                    "`{}` is not a workspace name (1-64 of letters, digits, `_`, `-`)",
                    shown(workspace)
                ),
            ));
        }
    }
    entries("variables", &module.variables, problems);
    if let Some(location) = &module.sensitive_outputs_to {
        problems.extend(location.problems("inputs.sensitive_outputs_to"));
    }
    if module.var_files.len() > MAX_VAR_FILES {
        problems.push(Problem::new(
            "inputs.var_files",
            format!("at most {MAX_VAR_FILES}"),
        ));
    }
    for (name, value) in &module.variables {
        let path = format!("inputs.variables.{}", shown(name));
        if !is_name(name) {
            problems.push(Problem::new(
                path,
                "not a variable name (letters, digits, `_`, `-`)",
            ));
        } else if holds_secret_reference(value) {
            problems.push(Problem::new(
                path,
                "a variable's value is written into the plan file and the state: pass a credential \
                 as a provider's environment variable (`inputs.env`) or the pg backend's `conn_str`",
            ));
        }
    }
    entries("env", &module.env, problems);
    for (name, value) in &module.env {
        let path = format!("inputs.env.{}", shown(name));
        if !is_env_name(name) {
            problems.push(Problem::new(
                path,
                "not an environment variable name (A-Z, 0-9, `_`)",
            ));
        } else if is_reserved_env(name) {
            problems.push(Problem::new(
                path,
                "the runner sets this variable itself (TF_*, TOFU_*, PG*, LD_*, PATH, HOME, TMPDIR, CHECKPOINT_DISABLE)",
            ));
        } else if !(value.is_string() || secret_reference(value).is_some()) {
            problems.push(Problem::new(
                path,
                "must be a string or a `{\"$secret\": …}` reference",
            ));
        } else if value.as_str().is_some_and(|text| text.contains('\0')) {
            problems.push(Problem::new(path, "must not hold a NUL character"));
        }
    }
    // With settings by reference, their type may be in the artifact: the
    // runner checks the settings together once it has read them.
    backend_problems(
        "inputs.backend",
        &module.backend,
        module.backend_config.is_none(),
        problems,
    );
}

/// The problems of backend settings `backend` at `field`: its `type` (or
/// `local` when it names none and `whole` says these are all the settings;
/// when they are not, what depends on the type waits for the rest).
pub fn backend_problems(field: &str, backend: &Vars, whole: bool, problems: &mut Vec<Problem>) {
    if backend.len() > MAX_ENTRIES {
        problems.push(Problem::new(
            field,
            format!("at most {MAX_ENTRIES} entries"),
        ));
    }
    let kind = backend.get("type");
    if kind.is_some_and(|kind| !kind.as_str().is_some_and(is_name)) {
        problems.push(Problem::new(
            format!("{field}.type"),
            "must be a backend type's name",
        ));
    }
    let kind = kind.and_then(Value::as_str).or(whole.then_some("local"));
    for (name, value) in backend.iter().filter(|(name, _)| *name != "type") {
        let path = format!("{field}.{}", shown(name));
        if kind == Some("local") {
            problems.push(Problem::new(
                path,
                "the local backend takes no settings: the runner places its state",
            ));
        } else if !is_name(name) {
            problems.push(Problem::new(path, "not a setting's name"));
        } else if secret_reference(value).is_some() {
            if !(kind.unwrap_or("pg") == "pg" && name == "conn_str") {
                problems.push(Problem::new(
                    path,
                    "a backend setting is written into the plan file: only the pg backend's \
                     `conn_str` may be a secret (other backends read credentials from `inputs.env`)",
                ));
            }
        } else if !(value.is_string() || value.is_number() || value.is_boolean()) {
            problems.push(Problem::new(
                path,
                "must be a string, a number or a boolean",
            ));
        } else if value.as_str().is_some_and(is_template) {
            problems.push(Problem::new(
                path,
                "must not hold `${` or `%{`: the CLI would evaluate it as a template",
            ));
        }
    }
}

/// The problems of an OpenTofu operation's inputs (whether an apply's plan
/// is the approved one is the contract's flag gate: `flag_problems`).
pub fn problems_of(inputs: &OperationInputs) -> Vec<Problem> {
    use OperationInputs as I;
    let mut problems = Vec::new();
    match inputs {
        I::OpentofuPlan(module)
        | I::OpentofuDestroy(module)
        | I::OpentofuOutput(module)
        | I::OpentofuStateInspect(module) => module_problems(module, &mut problems),
        I::OpentofuApply(apply) => module_problems(&apply.module, &mut problems),
        _ => {}
    }
    problems
}

/// Whether two `sha256:<hex>` digests (the prefix optional, any case) are
/// the same.
pub fn same_digest(a: &str, b: &str) -> bool {
    let bare = |digest: &str| {
        digest
            .strip_prefix("sha256:")
            .unwrap_or(digest)
            .to_ascii_lowercase()
    };
    bare(a) == bare(b)
}

/// The contract's gates on an OpenTofu operation's flags: an apply only of
/// the approved plan (given as its artifact) or, without one, explicit; a
/// destroy only elevated.
pub(super) fn flag_problems(
    operation: Operation,
    flags: &PolicyFlags,
    inputs: Option<&Value>,
) -> Vec<Problem> {
    // A null artifact is no artifact: an approved digest without the plan
    // it approves must never become a fresh plan applied in its name.
    let artifact = inputs
        .and_then(|inputs| inputs.get("plan_artifact"))
        .filter(|artifact| !artifact.is_null());
    let problem = match operation {
        Operation::OpentofuApply => match (&flags.approved_plan_digest, artifact) {
            (None, _) if !flags.explicit_command => Problem::new(
                "policy.approved_plan_digest",
                "opentofu.apply needs an approved plan digest (with `inputs.plan_artifact`) or an explicit operation policy (`policy.explicit_command: true`)",
            ),
            (Some(_), None) => Problem::new(
                "inputs.plan_artifact",
                "an approved plan digest needs the plan artifact it approves",
            ),
            (None, Some(_)) => Problem::new(
                "inputs.plan_artifact",
                "a plan artifact is applied only with its digest approved (`policy.approved_plan_digest`); an explicit operation policy plans and applies afresh",
            ),
            (Some(approved), Some(artifact)) => {
                let artifact = artifact.as_str().unwrap_or_default();
                if same_digest(approved, artifact) {
                    return Vec::new();
                }
                Problem::new(
                    "inputs.plan_artifact",
                    format!(
                        "the plan artifact `{}` is not the approved plan `{}`: an apply runs only the plan that was approved",
                        crate::contract::limits::shortened(artifact, 80),
                        crate::contract::limits::shortened(approved, 80)
                    ),
                )
            }
            (None, None) => return Vec::new(),
        },
        Operation::OpentofuDestroy if !flags.elevated => Problem::new(
            "policy.elevated",
            "opentofu.destroy needs an elevated policy (`policy.elevated: true`)",
        ),
        _ => return Vec::new(),
    };
    vec![problem]
}

// Results (docs/OPERATIONS.md): what its executor reports.

/// The result of every `opentofu.*` operation: what the CLI reports of the
/// module's plan, outputs and state after the operation.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TofuResult {
    /// `<name>@<version>` of the module package.
    pub module: String,
    pub workspace: String,
    /// The backend type the state lives in.
    pub backend: String,
    /// The CLI's own version (`terraform_version` of its JSON).
    pub cli_version: Option<String>,
    /// `opentofu.plan`: the saved plan (and an apply without one: the plan
    /// it made and applied).
    pub plan: Option<TofuPlan>,
    /// The root module's outputs; a sensitive output's value is `null`.
    pub outputs: BTreeMap<String, TofuOutput>,
    /// The state version after the operation.
    pub state: Option<TofuStateVersion>,
    /// The managed resources in the state, with the ids their providers
    /// gave them (at most 1000).
    pub resources: Vec<TofuResource>,
}

/// A saved plan: its artifact (the reference an apply names and a control
/// plane approves) and what it changes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TofuPlan {
    /// `sha256:<hex>` of the plan file, stored as an input artifact (and as
    /// the output `plan.tfplan`).
    pub artifact: Option<String>,
    /// Counted as the CLI counts: a replacement adds one and destroys one.
    pub add: u32,
    pub change: u32,
    pub destroy: u32,
    /// Each resource the plan acts on and its actions (at most 1000).
    pub changes: Vec<TofuChange>,
    /// Whether the plan changes anything (resources or outputs).
    pub has_changes: bool,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TofuChange {
    pub address: String,
    /// `create`, `update`, `delete`, `read`, `no-op`, in the CLI's order.
    pub actions: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TofuOutput {
    pub sensitive: bool,
    /// `null` when sensitive.
    pub value: Value,
    /// Where a sensitive output's value was written
    /// (`inputs.sensitive_outputs_to`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<TofuOutputSecret>,
}

/// A secret an output's value was written to: mount, path and key.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TofuOutputSecret {
    pub mount: String,
    pub path: String,
    pub key: String,
}

/// A state version: which state (lineage) and which write of it (serial),
/// and the digest of its content (never the content).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TofuStateVersion {
    pub lineage: String,
    pub serial: u64,
    /// The digest of the state as the backend holds it.
    pub sha256: String,
    /// After an apply or a destroy: the output holding this state, what
    /// it marks sensitive (sensitive outputs, resources' sensitive
    /// attributes) replaced by `[redacted]`.
    #[serde(default)]
    pub artifact: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TofuResource {
    pub address: String,
    #[serde(rename = "type")]
    pub kind: String,
    /// The provider's id of the object (`None`: the resource has none).
    pub id: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn module(extra: Value) -> TofuModule {
        let mut value = json!({"package": {"name": "m", "version": "1", "digest": "sha256:00"}});
        value
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::from_value(value).unwrap()
    }

    fn paths(module: &TofuModule) -> Vec<String> {
        let mut problems = Vec::new();
        module_problems(module, &mut problems);
        problems.into_iter().map(|problem| problem.path).collect()
    }

    #[test]
    fn a_plan_artifact_is_a_reference_or_its_inputs_do_not_parse() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let inputs =
            |plan: Value| json!({"package": {"name": "m", "version": "1"}, "plan_artifact": plan});
        let parsed = OperationInputs::parse(Operation::OpentofuApply, &inputs(json!(digest)));
        let Ok(OperationInputs::OpentofuApply(apply)) = parsed else {
            panic!("{parsed:?}");
        };
        assert_eq!(
            apply.plan_artifact.map(|plan| plan.to_string()),
            Some(digest)
        );
        for bad in [json!("sha256:xyz"), json!(7), json!({"artifact": "x"})] {
            let (path, reason) =
                OperationInputs::parse(Operation::OpentofuApply, &inputs(bad.clone())).unwrap_err();
            assert_eq!(path, "plan_artifact", "{bad}: {reason}");
        }
    }

    #[test]
    fn secrets_go_only_where_the_cli_stores_nothing() {
        let fine = module(json!({
            "variables": {"greeting": "hi", "sizes": [1, 2]},
            "env": {"AWS_SECRET_ACCESS_KEY": {"$secret": "aws"}, "AWS_REGION": "eu-west-1"},
            "backend": {"type": "pg", "conn_str": {"$secret": "state"}, "schema_name": "team_a"},
            "workspace": "blue",
        }));
        assert!(paths(&fine).is_empty(), "{:?}", paths(&fine));
        let bad = module(json!({
            "variables": {"password": {"$secret": "db"}, "nested": {"a": [{"$secret": "db"}]}},
            "env": {"lower": "x", "N": 3, "Z": "a\u{0}b"},
            "backend": {"type": "s3", "secret_key": {"$secret": "aws"}, "tags": {"a": 1},
                        "bucket": "${file(\"/etc/passwd\")}"},
            "workspace": "../x",
            "path": "../other",
        }));
        assert_eq!(
            paths(&bad),
            [
                "inputs.path",
                "inputs.workspace",
                "inputs.variables.nested",
                "inputs.variables.password",
                "inputs.env.N",
                "inputs.env.Z",
                "inputs.env.lower",
                "inputs.backend.bucket",
                "inputs.backend.secret_key",
                "inputs.backend.tags",
            ]
        );
    }

    #[test]
    fn the_local_backend_takes_no_settings() {
        let local = module(json!({"backend": {"path": "/etc/passwd"}}));
        assert_eq!(paths(&local), ["inputs.backend.path"]);
        assert_eq!(backend_type(&local), "local");
    }

    #[test]
    fn digests_compare_without_prefix_or_case() {
        let hex = "ab".repeat(32);
        assert!(same_digest(&format!("sha256:{hex}"), &hex.to_uppercase()));
        assert!(!same_digest(&format!("sha256:{hex}"), &"cd".repeat(32)));
    }
}
