//! Typed inputs, one struct per operation. Unknown fields are refused, so a
//! misspelt input is an error rather than a silently ignored setting.
//!
//! Wherever a credential may appear the type is a JSON value so that it can be
//! a `{"$secret": "<name>"}` reference; [`super::validate_jobspec`] refuses a
//! literal there.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{DurationMs, Operation};

pub type Vars = BTreeMap<String, Value>;

/// A versioned package (Ansible content, Terraform module) by reference.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackageRef {
    pub name: String,
    pub version: String,
    #[serde(default)]
    pub digest: Option<String>,
}

/// An inventory: an artifact reference, or generated from the job's targets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InventoryRef {
    #[serde(default)]
    pub artifact: Option<String>,
    #[serde(default)]
    pub from_targets: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnsiblePlaybook {
    pub package: PackageRef,
    /// Relative to the package root; never absolute, never `..`.
    pub playbook: String,
    #[serde(default)]
    pub inventory: Option<InventoryRef>,
    #[serde(default)]
    pub extra_vars: Vars,
    #[serde(default)]
    pub limit: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    /// The account on the nodes (required to connect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// A `{"$secret": ...}` reference to its OpenSSH private key (required
    /// to connect; a literal is refused by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnsibleRole {
    pub package: PackageRef,
    pub role: String,
    #[serde(default)]
    pub inventory: Option<InventoryRef>,
    #[serde(default)]
    pub vars: Vars,
    /// The account on the nodes (required to connect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// A `{"$secret": ...}` reference to its OpenSSH private key (required
    /// to connect; a literal is refused by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnsibleInventoryValidate {
    pub inventory: InventoryRef,
    #[serde(default)]
    pub package: Option<PackageRef>,
    /// The account on the nodes (required to connect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// A `{"$secret": ...}` reference to its OpenSSH private key (required
    /// to connect; a literal is refused by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<Value>,
}

/// A cluster by name; its credentials come only from Vault.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterRef {
    pub name: String,
    /// Must be a `{"$secret": ...}` reference (kubeconfig or token).
    pub credentials: Value,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesApply {
    pub cluster: ClusterRef,
    pub namespace: String,
    /// Inline manifests, or `manifests_artifact` (exactly one of the two).
    #[serde(default)]
    pub manifests: Vec<Value>,
    #[serde(default)]
    pub manifests_artifact: Option<String>,
    #[serde(default = "default_field_manager")]
    pub field_manager: String,
    #[serde(default)]
    pub dry_run: bool,
    #[serde(default)]
    pub force_conflicts: bool,
}

fn default_field_manager() -> String {
    "execplane".to_owned()
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesDelete {
    pub cluster: ClusterRef,
    pub namespace: String,
    pub objects: Vec<ObjectRef>,
    #[serde(default)]
    pub dry_run: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesWait {
    pub cluster: ClusterRef,
    pub namespace: String,
    pub object: ObjectRef,
    pub condition: String,
    #[serde(default)]
    pub timeout: Option<DurationMs>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesObject {
    pub cluster: ClusterRef,
    pub namespace: String,
    pub object: ObjectRef,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PatchType {
    Merge,
    Strategic,
    Json,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesPatch {
    pub cluster: ClusterRef,
    pub namespace: String,
    pub object: ObjectRef,
    pub patch: Value,
    pub patch_type: PatchType,
}

/// A chart from an approved source, pinned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChartRef {
    pub repository: String,
    pub name: String,
    pub version: String,
    #[serde(default)]
    pub digest: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelmRelease {
    pub cluster: ClusterRef,
    pub release: String,
    pub namespace: String,
    pub chart: ChartRef,
    #[serde(default)]
    pub values: Vars,
    /// helm's `--wait`: until the release's resources are ready.
    #[serde(default)]
    pub wait: bool,
    /// helm's `--atomic`: a failed install is uninstalled, a failed upgrade
    /// rolled back (implies `wait`).
    #[serde(default)]
    pub atomic: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelmRollback {
    pub cluster: ClusterRef,
    pub release: String,
    pub namespace: String,
    pub revision: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelmReleaseRef {
    pub cluster: ClusterRef,
    pub release: String,
    pub namespace: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelmTemplate {
    pub release: String,
    pub namespace: String,
    pub chart: ChartRef,
    #[serde(default)]
    pub values: Vars,
}

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
    /// `type` (`local` when absent; the operator's `opentofu.backends`)
    /// and its settings; for `pg`, `conn_str` may be a secret reference.
    #[serde(default)]
    pub backend: Vars,
    /// Environment variables for the providers (their credentials, as
    /// secret references): only names the operator's `opentofu.env` lists.
    #[serde(default)]
    pub env: Vars,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TofuApply {
    #[serde(flatten)]
    pub module: TofuModule,
    /// The plan artifact to apply; its digest must equal the policy's
    /// `approved_plan_digest`.
    #[serde(default)]
    pub plan_artifact: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshCommand {
    /// An allowlisted command template; there is no generic shell.
    pub template_id: String,
    #[serde(default)]
    pub args: Vars,
    #[serde(default)]
    pub sudo: bool,
    /// The account on the nodes (required to connect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// A `{"$secret": ...}` reference to its OpenSSH private key (required
    /// to connect; a literal is refused by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshUpload {
    pub template_id: String,
    pub source_artifact: String,
    pub destination: String,
    #[serde(default)]
    pub mode: Option<String>,
    /// The account on the nodes (required to connect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// A `{"$secret": ...}` reference to its OpenSSH private key (required
    /// to connect; a literal is refused by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshDownload {
    pub template_id: String,
    pub path: String,
    /// The account on the nodes (required to connect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// A `{"$secret": ...}` reference to its OpenSSH private key (required
    /// to connect; a literal is refused by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshServiceRestart {
    pub template_id: String,
    pub service: String,
    /// The account on the nodes (required to connect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// A `{"$secret": ...}` reference to its OpenSSH private key (required
    /// to connect; a literal is refused by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshFacts {
    pub template_id: String,
    #[serde(default)]
    pub facts: Vec<String>,
    /// The account on the nodes (required to connect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// A `{"$secret": ...}` reference to its OpenSSH private key (required
    /// to connect; a literal is refused by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpExpect {
    #[serde(default)]
    pub status: Option<u16>,
    #[serde(default)]
    pub body_contains: Option<String>,
    #[serde(default)]
    pub max_latency_ms: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyHttp {
    pub url: String,
    #[serde(default = "default_method")]
    pub method: String,
    #[serde(default)]
    pub headers: Vars,
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub expect: HttpExpect,
    #[serde(default)]
    pub timeout: Option<DurationMs>,
}

fn default_method() -> String {
    "GET".to_owned()
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyTcp {
    pub host: String,
    pub port: u16,
    #[serde(default)]
    pub timeout: Option<DurationMs>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyKubernetesCondition {
    pub cluster: ClusterRef,
    pub namespace: String,
    pub object: ObjectRef,
    pub condition: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyPostgres {
    pub host: String,
    #[serde(default = "default_pg_port")]
    pub port: u16,
    pub database: String,
    pub user: String,
    #[serde(default)]
    pub password: Option<Value>,
}

fn default_pg_port() -> u16 {
    5432
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyCapability {
    pub cluster: ClusterRef,
    pub resource: String,
    pub verbs: Vec<String>,
    #[serde(default)]
    pub namespace: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyCustom {
    /// An allowlisted probe id.
    pub probe_id: String,
    #[serde(default)]
    pub args: Vars,
}

/// The inputs of a JobSpec, typed by its operation.
#[derive(Clone, Debug, PartialEq)]
pub enum OperationInputs {
    AnsiblePlaybookRun(AnsiblePlaybook),
    AnsibleRoleRun(AnsibleRole),
    AnsibleInventoryValidate(AnsibleInventoryValidate),
    AnsibleCheckModeRun(AnsiblePlaybook),
    KubernetesManifestApply(KubernetesApply),
    KubernetesManifestDelete(KubernetesDelete),
    KubernetesWait(KubernetesWait),
    KubernetesRolloutStatus(KubernetesObject),
    KubernetesResourcePatch(KubernetesPatch),
    KubernetesResourceRead(KubernetesObject),
    HelmInstall(HelmRelease),
    HelmUpgrade(HelmRelease),
    HelmRollback(HelmRollback),
    HelmUninstall(HelmReleaseRef),
    HelmTest(HelmReleaseRef),
    HelmTemplate(HelmTemplate),
    OpentofuPlan(TofuModule),
    OpentofuApply(TofuApply),
    OpentofuDestroy(TofuModule),
    OpentofuOutput(TofuModule),
    OpentofuStateInspect(TofuModule),
    SshCommandRun(SshCommand),
    SshFileUpload(SshUpload),
    SshFileDownload(SshDownload),
    SshServiceRestart(SshServiceRestart),
    SshSystemFactCollect(SshFacts),
    VerifyHttpEndpoint(VerifyHttp),
    VerifyTcpConnect(VerifyTcp),
    VerifyKubernetesCondition(VerifyKubernetesCondition),
    VerifyPostgresReady(VerifyPostgres),
    VerifyResourceCapability(VerifyCapability),
    VerifyCustomProbe(VerifyCustom),
}

impl OperationInputs {
    /// Reads `inputs` as the typed inputs of `operation`. The error carries
    /// the path inside `inputs` (e.g. `expect.status`) and serde's reason.
    pub fn parse(operation: Operation, inputs: &Value) -> Result<Self, (String, String)> {
        fn typed<T: serde::de::DeserializeOwned>(inputs: &Value) -> Result<T, (String, String)> {
            serde_path_to_error::deserialize(inputs).map_err(|error| {
                let path = error.path().to_string();
                let path = if path == "." { String::new() } else { path };
                (path, error.into_inner().to_string())
            })
        }
        use Operation as O;
        use OperationInputs as I;
        Ok(match operation {
            O::AnsiblePlaybookRun => I::AnsiblePlaybookRun(typed(inputs)?),
            O::AnsibleRoleRun => I::AnsibleRoleRun(typed(inputs)?),
            O::AnsibleInventoryValidate => I::AnsibleInventoryValidate(typed(inputs)?),
            O::AnsibleCheckModeRun => I::AnsibleCheckModeRun(typed(inputs)?),
            O::KubernetesManifestApply => I::KubernetesManifestApply(typed(inputs)?),
            O::KubernetesManifestDelete => I::KubernetesManifestDelete(typed(inputs)?),
            O::KubernetesWait => I::KubernetesWait(typed(inputs)?),
            O::KubernetesRolloutStatus => I::KubernetesRolloutStatus(typed(inputs)?),
            O::KubernetesResourcePatch => I::KubernetesResourcePatch(typed(inputs)?),
            O::KubernetesResourceRead => I::KubernetesResourceRead(typed(inputs)?),
            O::HelmInstall => I::HelmInstall(typed(inputs)?),
            O::HelmUpgrade => I::HelmUpgrade(typed(inputs)?),
            O::HelmRollback => I::HelmRollback(typed(inputs)?),
            O::HelmUninstall => I::HelmUninstall(typed(inputs)?),
            O::HelmTest => I::HelmTest(typed(inputs)?),
            O::HelmTemplate => I::HelmTemplate(typed(inputs)?),
            O::OpentofuPlan => I::OpentofuPlan(typed(inputs)?),
            O::OpentofuApply => I::OpentofuApply(typed(inputs)?),
            O::OpentofuDestroy => I::OpentofuDestroy(typed(inputs)?),
            O::OpentofuOutput => I::OpentofuOutput(typed(inputs)?),
            O::OpentofuStateInspect => I::OpentofuStateInspect(typed(inputs)?),
            O::SshCommandRun => I::SshCommandRun(typed(inputs)?),
            O::SshFileUpload => I::SshFileUpload(typed(inputs)?),
            O::SshFileDownload => I::SshFileDownload(typed(inputs)?),
            O::SshServiceRestart => I::SshServiceRestart(typed(inputs)?),
            O::SshSystemFactCollect => I::SshSystemFactCollect(typed(inputs)?),
            O::VerifyHttpEndpoint => I::VerifyHttpEndpoint(typed(inputs)?),
            O::VerifyTcpConnect => I::VerifyTcpConnect(typed(inputs)?),
            O::VerifyKubernetesCondition => I::VerifyKubernetesCondition(typed(inputs)?),
            O::VerifyPostgresReady => I::VerifyPostgresReady(typed(inputs)?),
            O::VerifyResourceCapability => I::VerifyResourceCapability(typed(inputs)?),
            O::VerifyCustomProbe => I::VerifyCustomProbe(typed(inputs)?),
        })
    }
}
