//! The inputs of the verification runner's operations, and their union: what the runner
//! SDK hands that runner's executor.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::kubernetes::ObjectRef;
use super::OperationInputs;
use super::{ClusterRef, Vars};
use super::{Governed, KeyKind};
use crate::contract::DurationMs;
use crate::contract::{FailureCategory, Operation, Problem};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpExpect {
    #[serde(default)]
    pub status: Option<u16>,
    #[serde(default)]
    pub body_contains: Option<String>,
    #[serde(default)]
    pub max_latency_ms: Option<u64>,
    /// A regular expression (the `regex` crate's syntax, linear in the
    /// body) that matches somewhere in the body.
    #[serde(default)]
    pub body_matches: Option<String>,
    /// A JSON Schema the body, read as JSON, satisfies (its `$schema`
    /// says the draft, 2020-12 when absent). It may not refer outside
    /// itself.
    #[serde(default)]
    pub body_schema: Option<Value>,
    /// Values the body, read as JSON, holds: each JSON pointer (`/status`,
    /// `/items/0/name`) to the value found there.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub body_json: BTreeMap<String, Value>,
}

/// Most JSON pointers one content contract names.
pub const MAX_JSON_POINTERS: usize = 16;

/// A `body_json` / `json` contract's problems: at most
/// [`MAX_JSON_POINTERS`], each a JSON pointer.
fn json_pointer_problems(field: &str, pointers: &BTreeMap<String, Value>) -> Vec<Problem> {
    let mut problems = Vec::new();
    if pointers.len() > MAX_JSON_POINTERS {
        problems.push(Problem::new(
            field,
            format!("at most {MAX_JSON_POINTERS} pointers"),
        ));
    }
    for pointer in pointers.keys() {
        if !(pointer.is_empty() || pointer.starts_with('/')) {
            problems.push(Problem::new(
                format!("{field}.{}", crate::contract::limits::loggable(pointer)),
                "not a JSON pointer (`` or `/…`)",
            ));
        }
    }
    problems
}

/// What a TCP service must say first (SSH, SMTP and FTP servers, say): the
/// runner reads its first line (at most [`MAX_BANNER_BYTES`]) after the
/// connect, when one of these is given.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpExpect {
    #[serde(default)]
    pub banner_contains: Option<String>,
    /// As `verify.http.endpoint`'s `body_matches`.
    #[serde(default)]
    pub banner_matches: Option<String>,
}

/// The most of a banner read.
pub const MAX_BANNER_BYTES: usize = 1024;

/// What a Postgres probe's `query` must return.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresExpect {
    /// The first column of the first row, as text (cast it in the query:
    /// `SELECT count(*)::text …`); `null` matches SQL NULL.
    #[serde(default)]
    pub value: Option<Value>,
    /// How many rows it returns.
    #[serde(default)]
    pub rows: Option<u64>,
}

/// The longest Postgres probe query, in bytes.
pub const MAX_QUERY_BYTES: usize = 4096;
/// The most rows of a probe query counted.
pub const MAX_QUERY_ROWS: u64 = 10_000;

/// The longest `expect.body_matches`, in bytes.
pub const MAX_BODY_PATTERN_BYTES: usize = 1024;
/// The longest `expect.body_schema`, as JSON text.
pub const MAX_BODY_SCHEMA_BYTES: usize = 16 * 1024;
/// The most memory a compiled pattern (of `body_matches` or of the schema)
/// may take.
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// A content pattern (`body_matches`, `matches`), compiled: the `regex`
/// crate's syntax, at most [`MAX_BODY_PATTERN_BYTES`].
pub fn compile_pattern(pattern: &str) -> Result<regex::Regex, String> {
    if pattern.len() > MAX_BODY_PATTERN_BYTES {
        return Err(format!("at most {MAX_BODY_PATTERN_BYTES} bytes"));
    }
    regex::RegexBuilder::new(pattern)
        .size_limit(PATTERN_SIZE_LIMIT)
        .build()
        .map_err(|error| error.to_string())
}

/// A content schema (`body_schema`, `schema`), compiled: every reference
/// resolved inside it (none is fetched, from the network or a file), every
/// `pattern` by the `regex` crate (no backtracking), formats not asserted;
/// at most [`MAX_BODY_SCHEMA_BYTES`] and [`MAX_SCHEMA_PATTERNS`].
pub fn compile_schema(schema: &Value) -> Result<jsonschema::Validator, String> {
    /// Refuses every reference outside the schema.
    struct NoRetrieval;
    impl jsonschema::Retrieve for NoRetrieval {
        fn retrieve(
            &self,
            uri: &jsonschema::Uri<String>,
        ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
            Err(format!("`{uri}` is outside the schema: a schema refers only inside itself").into())
        }
    }
    let size = serde_json::to_vec(schema).map_or(usize::MAX, |text| text.len());
    if size > MAX_BODY_SCHEMA_BYTES {
        return Err(format!(
            "{size} bytes of JSON: at most {MAX_BODY_SCHEMA_BYTES}"
        ));
    }
    // Validation is not memoised: a small schema whose references fan out
    // (`allOf` of two refs to the next, forty deep) stands for 2^40 checks.
    // What it stands for, every reference expanded, is bounded instead.
    let expanded = expanded_size(schema)?;
    if expanded > MAX_SCHEMA_EXPANDED {
        return Err(format!(
            "it stands for more than {MAX_SCHEMA_EXPANDED} values with its references expanded"
        ));
    }
    // Each compiled pattern may take PATTERN_SIZE_LIMIT: so many, no more.
    let patterns = patterns_in(schema);
    if patterns > MAX_SCHEMA_PATTERNS {
        return Err(format!(
            "{patterns} patterns (`pattern`, `patternProperties`): at most {MAX_SCHEMA_PATTERNS}"
        ));
    }
    jsonschema::options()
        .with_retriever(NoRetrieval)
        .with_pattern_options(jsonschema::PatternOptions::regex().size_limit(PATTERN_SIZE_LIMIT))
        .should_validate_formats(false)
        .build(schema)
        .map_err(|error| {
            crate::contract::limits::shortened(
                &crate::contract::limits::loggable(&error.to_string()),
                512,
            )
        })
}

/// The most patterns a body schema holds.
pub const MAX_SCHEMA_PATTERNS: usize = 16;

/// The most JSON values a schema stands for with every `$ref` replaced by
/// what it points at.
pub const MAX_SCHEMA_EXPANDED: usize = 5_000;

/// How many JSON values `schema` stands for with every `$ref` replaced by
/// its target (each computed once; the sum saturates past the bound).
/// Refused: a `$ref` that is not a JSON pointer into the schema itself, a
/// reference cycle, `$dynamicRef`, `$recursiveRef`, an `$id` below the root
/// (it would move where a pointer points), and drafts 3 and 4 (their `id`).
fn expanded_size(schema: &Value) -> Result<usize, String> {
    struct Walk<'a> {
        root: &'a Value,
        sizes: std::collections::HashMap<&'a str, usize>,
        open: Vec<&'a str>,
    }
    impl<'a> Walk<'a> {
        fn size(&mut self, value: &'a Value, at_root: bool) -> Result<usize, String> {
            let mut size = 1usize;
            match value {
                Value::Object(object) => {
                    for (key, child) in object {
                        let child_size = match key.as_str() {
                            "$ref" => self.target(child)?,
                            "$dynamicRef" | "$recursiveRef" => {
                                return Err(format!("`{key}` is not supported here"))
                            }
                            "$id" if !at_root => {
                                return Err("`$id` is allowed at the root only".into())
                            }
                            "$schema"
                                if child.as_str().is_some_and(|uri| {
                                    uri.contains("draft-03") || uri.contains("draft-04")
                                }) =>
                            {
                                return Err("drafts 3 and 4 are not supported".into())
                            }
                            _ => self.size(child, false)?,
                        };
                        size = size.saturating_add(child_size);
                        if size > MAX_SCHEMA_EXPANDED {
                            return Ok(size);
                        }
                    }
                }
                Value::Array(items) => {
                    for item in items {
                        size = size.saturating_add(self.size(item, false)?);
                        if size > MAX_SCHEMA_EXPANDED {
                            return Ok(size);
                        }
                    }
                }
                _ => {}
            }
            Ok(size)
        }

        fn target(&mut self, reference: &'a Value) -> Result<usize, String> {
            let pointer = reference
                .as_str()
                .and_then(|reference| reference.strip_prefix('#'))
                .filter(|pointer| {
                    (pointer.is_empty() || pointer.starts_with('/')) && !pointer.contains('%')
                })
                .ok_or("a `$ref` is a JSON pointer into the schema itself (`#/…`)")?;
            if let Some(size) = self.sizes.get(pointer) {
                return Ok(*size);
            }
            if self.open.contains(&pointer) {
                return Err(format!("`$ref` `#{pointer}` refers to itself"));
            }
            let target = self
                .root
                .pointer(pointer)
                .ok_or_else(|| format!("`$ref` `#{pointer}` points at nothing"))?;
            self.open.push(pointer);
            let size = self.size(target, pointer.is_empty())?;
            self.open.pop();
            self.sizes.insert(pointer, size);
            Ok(size)
        }
    }
    Walk {
        root: schema,
        sizes: std::collections::HashMap::new(),
        open: Vec::new(),
    }
    .size(schema, true)
}

/// How many patterns `schema` may compile: every `pattern` key and every
/// key of a `patternProperties` (a property named so counts too).
fn patterns_in(schema: &Value) -> usize {
    match schema {
        Value::Object(object) => object
            .iter()
            .map(|(key, value)| {
                let own = match (key.as_str(), value) {
                    ("pattern", _) => 1,
                    ("patternProperties", Value::Object(patterns)) => patterns.len(),
                    _ => 0,
                };
                own + patterns_in(value)
            })
            .sum(),
        Value::Array(items) => items.iter().map(patterns_in).sum(),
        _ => 0,
    }
}

/// What the evidence of a verification must show to pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceRequirements {
    /// How many samples in a row must pass (1 to 100): the verification
    /// takes up to this many or `retry.max_attempts` samples, whichever is
    /// more, and passes once the last this many all passed.
    #[serde(default = "EvidenceRequirements::one")]
    pub consecutive_passes: u32,
    /// What is kept beyond the result, as outputs of the attempt:
    /// `samples`, the whole evidence as `evidence.json` (the result names
    /// it in `evidence_artifact`); `bodies` (`verify.http.endpoint` only),
    /// each sample's body as read, as `body-<n>` (the first
    /// [`EvidenceRequirements::MAX_KEPT_BODIES`] samples; the sample's
    /// `observed.body_artifact` names it). Default: none.
    #[serde(default, skip_serializing_if = "Kept::is_nothing")]
    pub keep: Kept,
}

/// What of a verification's evidence is kept as outputs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<KeptEvidence>", into = "Vec<KeptEvidence>")]
pub struct Kept {
    pub samples: bool,
    pub bodies: bool,
}

/// One kind of evidence to keep, as a JobSpec names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeptEvidence {
    Samples,
    Bodies,
}

impl Kept {
    fn is_nothing(&self) -> bool {
        !self.samples && !self.bodies
    }
}

impl TryFrom<Vec<KeptEvidence>> for Kept {
    type Error = String;

    fn try_from(kinds: Vec<KeptEvidence>) -> Result<Self, String> {
        let mut kept = Kept::default();
        for kind in kinds {
            let flag = match kind {
                KeptEvidence::Samples => &mut kept.samples,
                KeptEvidence::Bodies => &mut kept.bodies,
            };
            if std::mem::replace(flag, true) {
                return Err(format!("`{}` is named twice", serde_json::json!(kind)));
            }
        }
        Ok(kept)
    }
}

impl From<Kept> for Vec<KeptEvidence> {
    fn from(kept: Kept) -> Self {
        [
            (kept.samples, KeptEvidence::Samples),
            (kept.bodies, KeptEvidence::Bodies),
        ]
        .into_iter()
        .filter_map(|(wanted, kind)| wanted.then_some(kind))
        .collect()
    }
}

impl EvidenceRequirements {
    /// The most response bodies one verification keeps.
    pub const MAX_KEPT_BODIES: u32 = 24;

    pub const MAX_CONSECUTIVE_PASSES: u32 = 100;

    fn one() -> u32 {
        1
    }
}

impl Default for EvidenceRequirements {
    fn default() -> Self {
        Self {
            consecutive_passes: 1,
            keep: Kept::default(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyHttp {
    /// With `target`, the URL's host is the target's id, and the probe
    /// connects to its address.
    pub url: String,
    /// A JobSpec target, by id (see [`target_address`]).
    #[serde(default)]
    pub target: Option<String>,
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
    /// What its evidence must show to pass.
    #[serde(default)]
    pub evidence: EvidenceRequirements,
}

fn default_method() -> String {
    "GET".to_owned()
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyTcp {
    /// Exactly one of `host` and `target`.
    #[serde(default)]
    pub host: String,
    /// A JobSpec target, by id: the host is its address.
    #[serde(default)]
    pub target: Option<String>,
    pub port: u16,
    #[serde(default)]
    pub timeout: Option<DurationMs>,
    /// What the service says first.
    #[serde(default)]
    pub expect: TcpExpect,
    /// What its evidence must show to pass.
    #[serde(default)]
    pub evidence: EvidenceRequirements,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyKubernetesCondition {
    pub cluster: ClusterRef,
    pub namespace: String,
    pub object: ObjectRef,
    /// One condition, or `conditions` (exactly one of the two).
    #[serde(default)]
    pub condition: Option<super::kubernetes::WantedCondition>,
    /// Several: all of them at once, or (`any`) one of them.
    #[serde(default)]
    pub conditions: Vec<super::kubernetes::WantedCondition>,
    #[serde(default)]
    pub any: bool,
    /// What its evidence must show to pass.
    #[serde(default)]
    pub evidence: EvidenceRequirements,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyPostgres {
    /// Exactly one of `host` and `target`.
    #[serde(default)]
    pub host: String,
    /// A JobSpec target, by id: the host is its address.
    #[serde(default)]
    pub target: Option<String>,
    #[serde(default = "default_pg_port")]
    pub port: u16,
    pub database: String,
    pub user: String,
    #[serde(default)]
    pub password: Option<Value>,
    /// One statement, run in a read-only transaction instead of `SELECT 1`
    /// (at most [`MAX_QUERY_BYTES`]).
    #[serde(default)]
    pub query: Option<String>,
    /// What `query` must return.
    #[serde(default)]
    pub expect: PostgresExpect,
    /// What its evidence must show to pass.
    #[serde(default)]
    pub evidence: EvidenceRequirements,
}

fn default_pg_port() -> u16 {
    5432
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyCapability {
    pub cluster: ClusterRef,
    pub resource: ResourceKind,
    pub verbs: Vec<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    /// What its evidence must show to pass.
    #[serde(default)]
    pub evidence: EvidenceRequirements,
}

/// A kind as `<apiVersion>/<Kind>` (`apps/v1/Deployment`, `v1/ConfigMap`),
/// read in two.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceKind {
    pub api_version: String,
    pub kind: String,
}

impl ResourceKind {
    pub fn parse(resource: &str) -> Result<Self, String> {
        match resource.rsplit_once('/') {
            Some((api_version, kind))
                if !kind.is_empty()
                    && api_version.split('/').count() <= 2
                    && api_version.split('/').all(|part| !part.is_empty())
                    && kind.bytes().all(|b| b.is_ascii_alphanumeric()) =>
            {
                Ok(Self {
                    api_version: api_version.to_owned(),
                    kind: kind.to_owned(),
                })
            }
            _ => Err(format!(
                "`{}` is not <apiVersion>/<Kind> (e.g. `apps/v1/Deployment`, `v1/ConfigMap`)",
                crate::contract::limits::loggable(resource)
            )),
        }
    }
}

/// Written as in a JobSpec, `<apiVersion>/<Kind>`.
impl Serialize for ResourceKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&format_args!("{}/{}", self.api_version, self.kind))
    }
}

/// Read from a JobSpec's text: one that does not parse is refused with
/// [`ResourceKind::parse`]'s reason.
impl<'de> Deserialize<'de> for ResourceKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyCustom {
    /// An allowlisted probe id.
    pub probe_id: String,
    #[serde(default)]
    pub args: Vars,
    /// What its evidence must show to pass.
    #[serde(default)]
    pub evidence: EvidenceRequirements,
}

/// What another attempt's output must hold: each given check must pass.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContentExpect {
    /// Text found somewhere in it.
    #[serde(default)]
    pub contains: Option<String>,
    /// As `verify.http.endpoint`'s `body_matches`.
    #[serde(default)]
    pub matches: Option<String>,
    /// As `verify.http.endpoint`'s `body_schema`: the output read as JSON.
    #[serde(default)]
    pub schema: Option<Value>,
    /// As `verify.http.endpoint`'s `body_json`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub json: BTreeMap<String, Value>,
}

/// `verify.attempt.output`: an output artifact of another attempt of the
/// tenant's, judged against a contract.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyAttemptOutput {
    pub attempt_id: uuid::Uuid,
    /// The output's name, as its attempt's `finished` event lists it.
    pub name: String,
    /// The output's digest (hex), as the `finished` event lists it.
    pub sha256: String,
    #[serde(default)]
    pub expect: ContentExpect,
    /// What its evidence must show to pass.
    #[serde(default)]
    pub evidence: EvidenceRequirements,
}

super::runner_inputs! {
    /// The inputs of the verification runner's operations.
    VerifyInputs {
    VerifyHttpEndpoint(VerifyHttp),
    VerifyTcpConnect(VerifyTcp),
    VerifyKubernetesCondition(VerifyKubernetesCondition),
    VerifyPostgresReady(VerifyPostgres),
    VerifyResourceCapability(VerifyCapability),
    VerifyCustomProbe(VerifyCustom),
    VerifyAttemptOutput(VerifyAttemptOutput),
    }
}

impl VerifyInputs {
    /// What the evidence of the verification must show to pass.
    pub fn evidence(&self) -> EvidenceRequirements {
        match self {
            Self::VerifyHttpEndpoint(VerifyHttp { evidence, .. })
            | Self::VerifyTcpConnect(VerifyTcp { evidence, .. })
            | Self::VerifyKubernetesCondition(VerifyKubernetesCondition { evidence, .. })
            | Self::VerifyPostgresReady(VerifyPostgres { evidence, .. })
            | Self::VerifyResourceCapability(VerifyCapability { evidence, .. })
            | Self::VerifyCustomProbe(VerifyCustom { evidence, .. })
            | Self::VerifyAttemptOutput(VerifyAttemptOutput { evidence, .. }) => *evidence,
        }
    }
}

impl super::Vocabulary for VerifyInputs {
    /// The namespace a cluster check reads; probes of targets add nothing.
    fn target_keys(&self, _tenant: &str) -> Vec<(KeyKind, String)> {
        match self {
            Self::VerifyKubernetesCondition(verify) => {
                super::namespace_key(&verify.cluster, &verify.namespace)
            }
            Self::VerifyHttpEndpoint(_)
            | Self::VerifyTcpConnect(_)
            | Self::VerifyPostgresReady(_)
            | Self::VerifyResourceCapability(_)
            | Self::VerifyCustomProbe(_)
            | Self::VerifyAttemptOutput(_) => Vec::new(),
        }
    }

    /// The cluster objects and namespaces it reads.
    fn governed(&self) -> Vec<Governed<'_>> {
        match self {
            Self::VerifyKubernetesCondition(condition) => vec![Governed::Object {
                cluster: &condition.cluster,
                namespace: &condition.namespace,
                object: &condition.object,
            }],
            Self::VerifyResourceCapability(capability) => vec![Governed::Namespace {
                cluster: &capability.cluster,
                namespace: capability.namespace.as_deref().unwrap_or("default"),
            }],
            Self::VerifyHttpEndpoint(_)
            | Self::VerifyTcpConnect(_)
            | Self::VerifyPostgresReady(_)
            | Self::VerifyCustomProbe(_)
            | Self::VerifyAttemptOutput(_) => Vec::new(),
        }
    }

    fn result_problem(operation: Operation, result: &Value) -> Result<(), String> {
        result_problem(operation, result)
    }
}

/// What intake checks of a verification's inputs beyond their shape: an
/// HTTP probe's URL is http(s) and its body pattern and schema compile, a
/// custom probe names one, and the passes required are bounded.
pub(super) fn problems_of(inputs: &OperationInputs) -> Vec<Problem> {
    let (evidence, mut problems) = match inputs {
        OperationInputs::VerifyHttpEndpoint(http) => (http.evidence, http_problems(http)),
        OperationInputs::VerifyCustomProbe(probe) => (
            probe.evidence,
            if probe.probe_id.trim().is_empty() {
                vec![Problem::new("inputs.probe_id", "must not be empty")]
            } else {
                Vec::new()
            },
        ),
        OperationInputs::VerifyAttemptOutput(output) => (output.evidence, output_problems(output)),
        OperationInputs::VerifyTcpConnect(tcp) => {
            let mut problems = host_problems(&tcp.host, tcp.target.as_deref());
            if let Some(Err(error)) = tcp.expect.banner_matches.as_deref().map(compile_pattern) {
                problems.push(Problem::new("inputs.expect.banner_matches", error));
            }
            (tcp.evidence, problems)
        }
        OperationInputs::VerifyPostgresReady(postgres) => {
            let mut problems = host_problems(&postgres.host, postgres.target.as_deref());
            match &postgres.query {
                Some(query) if query.trim().is_empty() || query.len() > MAX_QUERY_BYTES => problems
                    .push(Problem::new(
                        "inputs.query",
                        format!("1 to {MAX_QUERY_BYTES} bytes"),
                    )),
                None if postgres.expect != PostgresExpect::default() => problems.push(
                    Problem::new("inputs.expect", "what a `query` returns: give the query"),
                ),
                _ => {}
            }
            if matches!(&postgres.expect.value, Some(value) if !(value.is_string() || value.is_null()))
            {
                problems.push(Problem::new(
                    "inputs.expect.value",
                    "text, or null (the first column is compared as text)",
                ));
            }
            (postgres.evidence, problems)
        }
        OperationInputs::VerifyKubernetesCondition(condition) => (
            condition.evidence,
            super::kubernetes::condition_set_problems(&condition.condition, &condition.conditions),
        ),
        OperationInputs::VerifyResourceCapability(VerifyCapability { evidence, .. }) => {
            (*evidence, Vec::new())
        }
        _ => return Vec::new(),
    };
    let most = EvidenceRequirements::MAX_CONSECUTIVE_PASSES;
    if !(1..=most).contains(&evidence.consecutive_passes) {
        problems.push(Problem::new(
            "inputs.evidence.consecutive_passes",
            format!("1 to {most}"),
        ));
    }
    if evidence.keep.bodies && !matches!(inputs, OperationInputs::VerifyHttpEndpoint(_)) {
        problems.push(Problem::new(
            "inputs.evidence.keep",
            "`bodies` is kept of verify.http.endpoint only",
        ));
    }
    problems
}

fn output_problems(output: &VerifyAttemptOutput) -> Vec<Problem> {
    let mut problems = Vec::new();
    if let Some(problem) = crate::contract::outputs::output_name_problem(&output.name) {
        problems.push(Problem::new("inputs.name", problem));
    }
    let reference = format!("sha256:{}", output.sha256);
    if crate::contract::artifact_ref::InputRef::parse(&reference).is_err() {
        problems.push(Problem::new("inputs.sha256", "64 lowercase hex digits"));
    }
    let expect = &output.expect;
    if let Some(Err(error)) = expect.matches.as_deref().map(compile_pattern) {
        problems.push(Problem::new("inputs.expect.matches", error));
    }
    if let Some(Err(error)) = expect.schema.as_ref().map(compile_schema) {
        problems.push(Problem::new("inputs.expect.schema", error));
    }
    problems.extend(json_pointer_problems("inputs.expect.json", &expect.json));
    problems
}

/// A probe aims at a `host` or at a JobSpec `target`, not both.
fn host_problems(host: &str, target: Option<&str>) -> Vec<Problem> {
    match (host.is_empty(), target) {
        (true, None) => vec![Problem::new(
            "inputs.host",
            "required (or `target`: a JobSpec target's id)",
        )],
        (false, Some(_)) => vec![Problem::new(
            "inputs.target",
            "a probe names a `host` or a `target`, not both",
        )],
        _ => Vec::new(),
    }
}

fn http_problems(http: &VerifyHttp) -> Vec<Problem> {
    let mut problems = Vec::new();
    if !(http.url.starts_with("http://") || http.url.starts_with("https://")) {
        problems.push(Problem::new(
            "inputs.url",
            "must be an http:// or https:// URL",
        ));
    }
    if let Some(target) = &http.target {
        let host = url::Url::parse(&http.url)
            .ok()
            .and_then(|url| url.host_str().map(str::to_owned));
        if host.as_deref() != Some(target.to_ascii_lowercase().as_str()) {
            problems.push(Problem::new(
                "inputs.url",
                "with `target`, the URL's host is the target's id (the probe connects to its address)",
            ));
        }
    }
    if let Some(Err(error)) = http.expect.body_matches.as_deref().map(compile_pattern) {
        problems.push(Problem::new("inputs.expect.body_matches", error));
    }
    if let Some(Err(error)) = http.expect.body_schema.as_ref().map(compile_schema) {
        problems.push(Problem::new("inputs.expect.body_schema", error));
    }
    problems.extend(json_pointer_problems(
        "inputs.expect.body_json",
        &http.expect.body_json,
    ));
    problems
}

/// Where a probe aimed at JobSpec target `id` connects: the target's
/// `address`, or its id when it has none; `None` when the JobSpec has no
/// such target.
pub fn target_address<'a>(targets: &'a [crate::contract::Target], id: &str) -> Option<&'a str> {
    targets
        .iter()
        .find(|target| target.id == id)
        .map(|target| target.address.as_deref().unwrap_or(&target.id))
}

/// The JobSpec target a probe names, if it names one.
pub fn probe_target(inputs: &OperationInputs) -> Option<&str> {
    match inputs {
        OperationInputs::VerifyHttpEndpoint(VerifyHttp { target, .. })
        | OperationInputs::VerifyTcpConnect(VerifyTcp { target, .. })
        | OperationInputs::VerifyPostgresReady(VerifyPostgres { target, .. }) => target.as_deref(),
        _ => None,
    }
}

impl VerifyInputs {
    /// Aims a probe that names a JobSpec target at its address; the
    /// problem when the JobSpec has no such target (intake refuses it; a
    /// work item past intake is refused by the runner).
    pub fn aim(&mut self, targets: &[crate::contract::Target]) -> Result<(), Problem> {
        let (target, host) = match self {
            Self::VerifyTcpConnect(VerifyTcp { target, host, .. })
            | Self::VerifyPostgresReady(VerifyPostgres { target, host, .. }) => (target, host),
            Self::VerifyHttpEndpoint(http) => {
                let Some(id) = &http.target else {
                    return Ok(());
                };
                let address = target_address(targets, id).ok_or_else(|| no_target(id))?;
                let mut url = url::Url::parse(&http.url)
                    .map_err(|error| Problem::new("inputs.url", error.to_string()))?;
                // An IPv6 address is a URL host in brackets.
                let host = match address.parse::<std::net::Ipv6Addr>() {
                    Ok(_) => format!("[{address}]"),
                    Err(_) => address.to_owned(),
                };
                url.set_host(Some(&host)).map_err(|error| {
                    Problem::new(
                        "inputs.target",
                        format!("the target's address is no URL host: {error}"),
                    )
                })?;
                http.url = url.into();
                return Ok(());
            }
            _ => return Ok(()),
        };
        if let Some(id) = target {
            *host = target_address(targets, id)
                .ok_or_else(|| no_target(id))?
                .to_owned();
        }
        Ok(())
    }
}

fn no_target(id: &str) -> Problem {
    Problem::new(
        "inputs.target",
        format!(
            "the JobSpec has no target `{}`",
            crate::contract::limits::loggable(id)
        ),
    )
}

// Results (docs/OPERATIONS.md): what its executor reports.

/// The result of every verification operation: the samples taken, whether
/// the last one passed, and the failure category the runner recommends.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerificationEvidence {
    pub operation: String,
    pub samples: Vec<EvidenceSample>,
    pub passed: bool,
    /// How many samples in a row had to pass (`inputs.evidence`).
    #[serde(default = "EvidenceRequirements::one")]
    pub consecutive_passes: u32,
    pub recommended_failure_category: Option<FailureCategory>,
    /// The output holding this evidence, when `inputs.evidence.keep` asked
    /// for `samples`.
    #[serde(default)]
    pub evidence_artifact: Option<String>,
}

/// One sample of a verification.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceSample {
    /// 1, 2, ... in the order taken.
    pub n: u32,
    /// When it was taken (RFC 3339).
    pub at: String,
    pub latency_ms: u64,
    /// Something answered (false: refused, timed out, unresolvable).
    pub reached: bool,
    /// What the probe saw (per operation; see docs/OPERATIONS.md).
    pub observed: Value,
    pub assertions: Vec<EvidenceAssertion>,
    pub error: Option<String>,
    /// The operator's destination policy refused the connection.
    #[serde(default)]
    pub refused_by_policy: bool,
}

/// One assertion of a sample.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceAssertion {
    pub name: String,
    pub expected: Value,
    pub actual: Value,
    pub passed: bool,
}
/// Whether `result` is the evidence of `operation`; the problem when not.
pub(super) fn result_problem(operation: Operation, result: &Value) -> Result<(), String> {
    let evidence: VerificationEvidence = serde_path_to_error::deserialize(result)
        .map_err(|error| format!("{}: {}", error.path(), error.inner()))?;
    if evidence.operation != operation.as_str() {
        return Err(format!(
            "operation: `{}`, not `{operation}`",
            evidence.operation
        ));
    }
    if evidence.passed == evidence.recommended_failure_category.is_some() {
        return Err(
            "recommended_failure_category: set exactly when the verification did not pass".into(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resource_is_an_api_version_and_a_kind() {
        let parts =
            |text: &str| ResourceKind::parse(text).map(|kind| (kind.api_version, kind.kind));
        assert_eq!(
            parts("apps/v1/Deployment"),
            Ok(("apps/v1".into(), "Deployment".into()))
        );
        assert_eq!(parts("v1/ConfigMap"), Ok(("v1".into(), "ConfigMap".into())));
        for bad in ["Deployment", "/v1/X", "a/b/c/Kind", "v1/", "v1/Config Map"] {
            assert!(ResourceKind::parse(bad).is_err(), "{bad}");
        }
    }
    use crate::contract::ops::check_result;
    use serde_json::json;

    fn evidence(passed: bool, recommended: Value) -> Value {
        json!({
            "operation": "verify.tcp.connect", "passed": passed,
            "recommended_failure_category": recommended,
            "samples": [{"n": 1, "at": "2026-12-01T00:00:00Z", "latency_ms": 3, "reached": true,
                         "observed": {"peer": "127.0.0.1:5432"}, "assertions": [], "error": null}]
        })
    }

    #[test]
    fn a_verification_result_has_the_documented_shape() {
        let op = Operation::VerifyTcpConnect;
        assert_eq!(check_result(op, &evidence(true, Value::Null)), Ok(()));
        assert_eq!(
            check_result(op, &evidence(false, json!("target_unreachable"))),
            Ok(())
        );
        assert!(check_result(op, &evidence(false, Value::Null)).is_err());
        assert!(
            check_result(Operation::VerifyHttpEndpoint, &evidence(true, Value::Null))
                .unwrap_err()
                .contains("operation")
        );
        let mut extra = evidence(true, Value::Null);
        extra["samples"][0]["surprise"] = json!(1);
        assert!(check_result(op, &extra).unwrap_err().contains("samples[0]"));
        assert!(check_result(op, &json!({"ok": true})).is_err());
    }

    #[test]
    fn a_body_schema_refers_only_inside_itself_and_is_bounded() {
        let problems = |expect: Value| -> Vec<String> {
            let inputs = OperationInputs::parse(
                Operation::VerifyHttpEndpoint,
                &json!({"url": "http://example.com/", "expect": expect}),
            )
            .unwrap();
            problems_of(&inputs)
                .into_iter()
                .map(|problem| format!("{}: {}", problem.path, problem.message))
                .collect()
        };
        let inside = json!({"$defs": {"n": {"type": "integer"}}, "properties": {"a": {"$ref": "#/$defs/n"}}});
        assert_eq!(
            problems(json!({"body_schema": inside})),
            Vec::<String>::new()
        );
        for outside in [
            "file:///etc/passwd",
            "http://169.254.169.254/latest/meta-data",
        ] {
            let refused = problems(json!({"body_schema": {"$ref": outside}}));
            assert_eq!(refused.len(), 1, "{outside}: {refused:?}");
            assert!(
                refused[0].starts_with("inputs.expect.body_schema: "),
                "{refused:?}"
            );
        }
        // Backtracking constructs are not the `regex` crate's, in a schema's
        // pattern or the body's.
        let lookahead = json!({"body_schema": {"pattern": "(?=a)a"}, "body_matches": "(a)\\1"});
        let refused = problems(lookahead);
        assert_eq!(refused.len(), 2, "{refused:?}");
        // Forty levels of two references each: 2^40 checks, refused.
        let mut defs = serde_json::Map::new();
        for level in 0..40 {
            let next = json!({"$ref": format!("#/$defs/d{}", level + 1)});
            defs.insert(format!("d{level}"), json!({"allOf": [next, next]}));
        }
        defs.insert("d40".into(), json!({"type": "string"}));
        let fan = json!({"$defs": defs, "$ref": "#/$defs/d0"});
        let refused = problems(json!({"body_schema": fan}));
        assert!(refused[0].contains("more than 5000 values"), "{refused:?}");
        for bad in [
            json!({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}),
            json!({"$ref": "#"}),
            json!({"$ref": "other.json#/x"}),
            json!({"$dynamicRef": "#meta"}),
            json!({"properties": {"a": {"$id": "http://x/a", "$ref": "#/y"}}}),
            json!({"$schema": "http://json-schema.org/draft-04/schema#"}),
        ] {
            assert_eq!(problems(json!({"body_schema": bad})).len(), 1, "{bad}");
        }
        let many: Vec<Value> = (0..17).map(|_| json!({"pattern": "a"})).collect();
        assert!(problems(json!({"body_schema": {"anyOf": many}}))[0].contains("17 patterns"));
        let big = json!({"body_schema": {"description": "x".repeat(MAX_BODY_SCHEMA_BYTES)}});
        assert!(problems(big)[0].contains("at most 16384"));
        let requirements = |passes: u32| {
            problems(json!({})).is_empty()
                && OperationInputs::parse(
                    Operation::VerifyTcpConnect,
                    &json!({"host": "h", "port": 1, "evidence": {"consecutive_passes": passes}}),
                )
                .map(|inputs| problems_of(&inputs).is_empty())
                .unwrap()
        };
        assert!(requirements(1) && requirements(100));
        assert!(!requirements(0) && !requirements(101));
    }

    #[test]
    fn a_probe_aims_at_a_host_or_a_target_of_the_jobspec() {
        let parse = |operation, inputs: Value| {
            let inputs = OperationInputs::parse(operation, &inputs).unwrap();
            let paths: Vec<String> = problems_of(&inputs)
                .into_iter()
                .map(|problem| problem.path)
                .collect();
            (inputs, paths)
        };
        let (_, paths) = parse(Operation::VerifyTcpConnect, json!({"port": 1}));
        assert_eq!(paths, ["inputs.host"]);
        let both = json!({"host": "h", "target": "n1", "port": 1});
        assert_eq!(
            parse(Operation::VerifyTcpConnect, both).1,
            ["inputs.target"]
        );
        let elsewhere = json!({"url": "http://other:80/", "target": "n1"});
        assert_eq!(
            parse(Operation::VerifyHttpEndpoint, elsewhere).1,
            ["inputs.url"]
        );
        let targets: Vec<crate::contract::Target> = serde_json::from_value(json!([
            {"kind": "node", "id": "n1", "address": "10.0.0.7"},
            {"kind": "node", "id": "db.internal"},
            {"kind": "node", "id": "v6", "address": "fd00::7"}
        ]))
        .unwrap();
        let aimed = |operation, inputs: Value| {
            let inputs = OperationInputs::parse(operation, &inputs).unwrap();
            let mut inputs = VerifyInputs::try_from(inputs).unwrap();
            inputs.aim(&targets).map(|()| match inputs {
                VerifyInputs::VerifyHttpEndpoint(http) => http.url,
                VerifyInputs::VerifyTcpConnect(VerifyTcp { host, .. })
                | VerifyInputs::VerifyPostgresReady(VerifyPostgres { host, .. }) => host,
                _ => unreachable!(),
            })
        };
        let http = json!({"url": "https://N1:8443/healthz?x=1", "target": "n1"});
        assert_eq!(
            aimed(Operation::VerifyHttpEndpoint, http).unwrap(),
            "https://10.0.0.7:8443/healthz?x=1"
        );
        let v6 = json!({"url": "http://v6:80/", "target": "v6"});
        assert_eq!(
            aimed(Operation::VerifyHttpEndpoint, v6).unwrap(),
            "http://[fd00::7]/"
        );
        let postgres = json!({"target": "db.internal", "database": "d", "user": "u"});
        assert_eq!(
            aimed(Operation::VerifyPostgresReady, postgres).unwrap(),
            "db.internal"
        );
        let stray = json!({"target": "n9", "port": 1});
        assert_eq!(
            aimed(Operation::VerifyTcpConnect, stray).unwrap_err().path,
            "inputs.target"
        );
    }

    #[test]
    fn kept_evidence_is_named_once_and_bodies_only_of_http() {
        let keep = |operation, inputs: Value| {
            OperationInputs::parse(operation, &inputs).map(|inputs| {
                problems_of(&inputs)
                    .into_iter()
                    .map(|problem| problem.path)
                    .collect::<Vec<_>>()
            })
        };
        let http = json!({"url": "http://h/", "evidence": {"keep": ["samples", "bodies"]}});
        assert_eq!(keep(Operation::VerifyHttpEndpoint, http), Ok(vec![]));
        let tcp = json!({"host": "h", "port": 1, "evidence": {"keep": ["bodies"]}});
        assert_eq!(
            keep(Operation::VerifyTcpConnect, tcp),
            Ok(vec!["inputs.evidence.keep".to_owned()])
        );
        let twice = json!({"host": "h", "port": 1, "evidence": {"keep": ["samples", "samples"]}});
        assert!(keep(Operation::VerifyTcpConnect, twice).is_err());
        let kept: EvidenceRequirements =
            serde_json::from_value(json!({"keep": ["bodies", "samples"]})).unwrap();
        assert_eq!(
            serde_json::to_value(kept).unwrap(),
            json!({"consecutive_passes": 1, "keep": ["samples", "bodies"]})
        );
    }
}
