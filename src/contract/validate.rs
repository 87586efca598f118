//! Contract-level validation of a JobSpec. It returns every problem at once,
//! each with a field path, so a control plane can fix a spec in one round.

use std::collections::BTreeSet;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::json_path::JsonPath;
use super::ops::OperationInputs;
use super::{JobSpec, Operation, RetryPolicy, Timeouts};

/// The largest JobSpec accepted, in bytes of JSON.
pub const MAX_JOBSPEC_BYTES: usize = 256 * 1024;

pub use super::problem::{Problem, Problems};

/// Parses and validates a JobSpec from its JSON bytes.
pub fn validate_jobspec_bytes(bytes: &[u8]) -> Result<JobSpec, Problems> {
    if bytes.len() > MAX_JOBSPEC_BYTES {
        return Err(Problems(vec![Problem::new(
            "",
            format!(
                "the jobspec is {} bytes; the limit is {MAX_JOBSPEC_BYTES}",
                bytes.len()
            ),
        )]));
    }
    let value: Value = serde_json::from_slice(bytes).map_err(|error| {
        Problems(vec![Problem::new(
            "",
            format!(
                "not valid JSON at line {} column {}: {error}",
                error.line(),
                error.column()
            ),
        )])
    })?;
    validate_jobspec(&value)
}

/// Validates a JobSpec given as JSON and returns it typed, or every problem.
pub fn validate_jobspec(value: &Value) -> Result<JobSpec, Problems> {
    let Some(object) = value.as_object() else {
        return Err(Problems(vec![Problem::new(
            "",
            "a jobspec must be a JSON object",
        )]));
    };
    let mut problems = Vec::new();
    scan_storable(value, JsonPath::Root(""), &mut problems);
    if !problems.is_empty() {
        // Nothing else is read from a spec that cannot even be stored.
        return Err(Problems(problems));
    }
    let fields = Fields::parse(object, &mut problems);
    fields.check(object, &mut problems);
    if !problems.is_empty() {
        return Err(Problems(problems));
    }
    fields
        .into_spec()
        .ok_or_else(|| Problems(vec![Problem::new("", "incomplete jobspec")]))
}

/// The fields of a JobSpec as far as each parsed (`None`: it did not, and
/// a problem says why).
struct Fields {
    command_id: Option<uuid::Uuid>,
    job_id: Option<String>,
    tenant: Option<String>,
    requested_by: Option<String>,
    operation: Option<Operation>,
    inputs: Option<Value>,
    runner_requirements: Option<super::RunnerRequirements>,
    targets: Option<Vec<super::Target>>,
    secret_refs: Option<Vec<super::SecretRef>>,
    timeouts: Option<Timeouts>,
    retry: Option<RetryPolicy>,
    policy: Option<super::PolicyFlags>,
    callback: Option<Option<super::Callback>>,
    trace: Option<Option<super::TraceContext>>,
}

const KNOWN_FIELDS: [&str; 14] = [
    "command_id",
    "job_id",
    "tenant",
    "requested_by",
    "operation",
    "inputs",
    "runner_requirements",
    "targets",
    "secret_refs",
    "timeouts",
    "retry",
    "policy",
    "callback",
    "trace",
];

impl Fields {
    /// Parses every field, each problem with its path.
    fn parse(object: &Map<String, Value>, problems: &mut Vec<Problem>) -> Self {
        for key in object.keys() {
            if !KNOWN_FIELDS.contains(&key.as_str()) {
                problems.push(Problem::new(key.clone(), "unknown field"));
            }
        }
        let inputs = match object.get("inputs") {
            Some(inputs @ Value::Object(_)) => Some(inputs.clone()),
            Some(_) => {
                problems.push(Problem::new("inputs", "must be an object"));
                None
            }
            None => {
                problems.push(Problem::new("inputs", "required field is missing"));
                None
            }
        };
        Self {
            command_id: required(object, "command_id", problems),
            job_id: required(object, "job_id", problems),
            tenant: required(object, "tenant", problems),
            requested_by: required(object, "requested_by", problems),
            operation: required(object, "operation", problems),
            inputs,
            runner_requirements: optional(object, "runner_requirements", problems),
            targets: optional(object, "targets", problems),
            secret_refs: optional(object, "secret_refs", problems),
            timeouts: optional(object, "timeouts", problems),
            retry: optional(object, "retry", problems),
            policy: optional(object, "policy", problems),
            callback: optional(object, "callback", problems),
            trace: optional(object, "trace", problems),
        }
    }

    /// The rules the types alone cannot hold.
    fn check(&self, object: &Map<String, Value>, problems: &mut Vec<Problem>) {
        for (field, value) in [
            ("job_id", &self.job_id),
            ("requested_by", &self.requested_by),
        ] {
            if let Some(text) = value {
                check_identifier(field, text, problems);
            }
        }
        if let Some(tenant) = &self.tenant {
            super::limits::check_tenant("tenant", tenant, problems);
        }
        self.check_secrets(object, problems);
        if let Some(inputs) = &self.inputs {
            let mut references = Vec::new();
            super::artifact_ref::references_in(inputs, "inputs", &mut references);
            for (path, reference) in references {
                if let Err(message) = reference {
                    problems.push(Problem::new(path, message));
                }
            }
        }
        if let (Some(operation), Some(inputs)) = (self.operation, &self.inputs) {
            let typed = check_inputs(operation, inputs, problems);
            let target = typed.as_ref().and_then(super::ops::probe_target);
            let targets = self.targets.as_deref().unwrap_or_default();
            if let Some(id) = target.filter(|id| super::ops::target_address(targets, id).is_none())
            {
                problems.push(Problem::new(
                    "inputs.target",
                    format!(
                        "`{}` is not the id of one of the JobSpec's `targets`",
                        super::limits::loggable(id)
                    ),
                ));
            }
        }
        if let Some(timeouts) = &self.timeouts {
            check_timeouts(timeouts, problems);
        }
        if let Some(retry) = &self.retry {
            check_retry(retry, problems);
        }
        if let (Some(operation), Some(policy)) = (self.operation, &self.policy) {
            check_policy(operation, policy, self.inputs.as_ref(), problems);
        }
        if let Some(Some(callback)) = &self.callback {
            check_callback(callback, problems);
        }
        if let Some(Some(trace)) = &self.trace {
            if !is_traceparent(&trace.traceparent) {
                problems.push(Problem::new(
                    "trace.traceparent",
                    "not a W3C traceparent (`00-<32 hex>-<16 hex>-<2 hex>`)",
                ));
            }
        }
    }

    /// Secrets only as declared references in `inputs`; no literal secret
    /// anywhere the requester writes.
    fn check_secrets(&self, object: &Map<String, Value>, problems: &mut Vec<Problem>) {
        let declared: BTreeSet<String> = self
            .secret_refs
            .iter()
            .flatten()
            .map(|secret| secret.name.clone())
            .collect();
        if let Some(secret_refs) = &self.secret_refs {
            check_secret_refs(secret_refs, problems);
        }
        if let Some(inputs) = &self.inputs {
            scan_secrets(
                inputs,
                JsonPath::Root("inputs"),
                false,
                Some(&declared),
                problems,
            );
        }
        // Every other map a requester writes: literals are refused there
        // too, and references are not resolved outside `inputs`.
        for field in ["targets", "runner_requirements"] {
            if let Some(value) = object.get(field) {
                scan_secrets(value, JsonPath::Root(field), false, None, problems);
            }
        }
        let url = self
            .callback
            .as_ref()
            .and_then(|callback| callback.as_ref())
            .and_then(|callback| callback.url.as_deref());
        if let Some(why) = url.and_then(literal_secret) {
            problems.push(Problem::new("callback.url", why));
        }
    }

    /// The JobSpec, when every required field parsed.
    fn into_spec(self) -> Option<JobSpec> {
        Some(JobSpec {
            command_id: self.command_id?,
            job_id: self.job_id?,
            tenant: self.tenant?,
            requested_by: self.requested_by?,
            operation: self.operation?,
            inputs: self.inputs?,
            runner_requirements: self.runner_requirements.unwrap_or_default(),
            targets: self.targets.unwrap_or_default(),
            secret_refs: self.secret_refs.unwrap_or_default(),
            timeouts: self.timeouts.unwrap_or_default(),
            retry: self.retry.unwrap_or_default(),
            policy: self.policy.unwrap_or_default(),
            callback: self.callback.flatten(),
            trace: self.trace.flatten(),
        })
    }
}

fn field<T: DeserializeOwned>(value: &Value, path: &str, problems: &mut Vec<Problem>) -> Option<T> {
    match serde_path_to_error::deserialize::<_, T>(value) {
        Ok(parsed) => Some(parsed),
        Err(error) => {
            let inner = error.path().to_string();
            let message = error.into_inner().to_string();
            problems.push(located(path, &inner, &message));
            None
        }
    }
}

fn required<T: DeserializeOwned>(
    object: &Map<String, Value>,
    key: &str,
    problems: &mut Vec<Problem>,
) -> Option<T> {
    match object.get(key) {
        None | Some(Value::Null) => {
            problems.push(Problem::new(key, "required field is missing"));
            None
        }
        Some(value) => field(value, key, problems),
    }
}

fn optional<T: DeserializeOwned + Default>(
    object: &Map<String, Value>,
    key: &str,
    problems: &mut Vec<Problem>,
) -> Option<T> {
    match object.get(key) {
        None => Some(T::default()),
        Some(value) => field(value, key, problems),
    }
}

/// Joins a base path with serde's inner path, turning "missing field `x`"
/// into a problem at `base.x`.
fn located(base: &str, inner: &str, message: &str) -> Problem {
    let mut path = base.to_owned();
    if !inner.is_empty() && inner != "." {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(inner);
    }
    if let Some(missing) = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next())
    {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(missing);
        return Problem::new(path, "required field is missing");
    }
    if let Some(unknown) = message
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split('`').next())
    {
        if !path.ends_with(unknown) {
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(unknown);
        }
        return Problem::new(path, format!("unknown field ({message})"));
    }
    Problem::new(path, message.to_owned())
}

/// Parses the inputs as the operation's type, reporting every problem: serde
/// stops at the first, so the offending field is removed from a scratch copy
/// and parsing resumes, until it parses or a required field is missing.
/// The inputs, when they parsed as they are.
fn check_inputs(
    operation: Operation,
    inputs: &Value,
    problems: &mut Vec<Problem>,
) -> Option<OperationInputs> {
    let mut scratch = inputs.clone();
    let mut reported: Vec<String> = Vec::new();
    for _ in 0..32 {
        match OperationInputs::parse(operation, &scratch) {
            Ok(typed) => {
                if !reported.is_empty() {
                    return None;
                }
                check_operation_inputs(&typed, problems);
                return Some(typed);
            }
            Err((path, message)) => {
                let problem = input_problem(operation, &path, &message);
                let missing = problem.message.contains("required field is missing")
                    || problem.message.contains("`template_id` is required");
                if reported.contains(&problem.path) {
                    return None;
                }
                reported.push(problem.path.clone());
                problems.push(problem);
                if missing || !remove_at(&mut scratch, &path, &message) {
                    return None;
                }
            }
        }
    }
    None
}

/// Removes the field serde complained about; false when there is nothing to
/// remove (the error is about the whole value).
fn remove_at(value: &mut Value, path: &str, message: &str) -> bool {
    let mut segments: Vec<String> = if path.is_empty() {
        Vec::new()
    } else {
        path.split('.').map(str::to_owned).collect()
    };
    if let Some(unknown) = message
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split('`').next())
    {
        if segments.last().map(String::as_str) != Some(unknown) {
            segments.push(unknown.to_owned());
        }
    }
    let Some(last) = segments.pop() else {
        return false;
    };
    let mut target = value;
    for segment in &segments {
        let next = match target {
            Value::Object(map) => map.get_mut(segment),
            Value::Array(items) => segment
                .trim_matches(|c| c == '[' || c == ']')
                .parse::<usize>()
                .ok()
                .and_then(|index| items.get_mut(index)),
            _ => None,
        };
        match next {
            Some(next) => target = next,
            None => return false,
        }
    }
    match target {
        Value::Object(map) => map.remove(&last).is_some(),
        _ => false,
    }
}

fn input_problem(operation: Operation, inner: &str, message: &str) -> Problem {
    let mut problem = located("inputs", inner, message);
    if operation.runner_type() == super::RunnerType::Ssh && problem.path == "inputs.template_id" {
        problem.message =
            "ssh operations run allowlisted command templates only: `template_id` is required"
                .into();
    } else {
        problem.message = format!("{} (inputs of `{operation}`)", problem.message);
    }
    problem
}

fn check_identifier(field: &str, text: &str, problems: &mut Vec<Problem>) {
    super::limits::check_identifier(field, text, problems);
}

/// Every string and key of the JobSpec, wherever it is: none may hold
/// U+0000 (Postgres refuses it, and one such record would fail every batch
/// it is in), and no key may hold another control character.
fn scan_storable(value: &Value, path: JsonPath<'_>, problems: &mut Vec<Problem>) {
    match value {
        Value::String(text) if text.contains('\0') => {
            problems.push(Problem::new(path, super::limits::NUL));
        }
        Value::Object(object) => {
            for (key, child) in object {
                let child_path = path.key(key);
                if key.chars().any(char::is_control) {
                    problems.push(Problem::new(child_path, "a key with control characters"));
                }
                scan_storable(child, child_path, problems);
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                scan_storable(child, path.index(index), problems);
            }
        }
        _ => {}
    }
}

fn check_secret_refs(secret_refs: &[super::SecretRef], problems: &mut Vec<Problem>) {
    let mut seen = BTreeSet::new();
    for (index, secret) in secret_refs.iter().enumerate() {
        for (name, value) in [
            ("name", &secret.name),
            ("mount", &secret.mount),
            ("path", &secret.path),
            ("key", &secret.key),
        ] {
            if value.trim().is_empty() {
                problems.push(Problem::new(
                    format!("secret_refs[{index}].{name}"),
                    "must not be empty",
                ));
            }
        }
        if !seen.insert(secret.name.as_str()) {
            problems.push(Problem::new(
                format!("secret_refs[{index}].name"),
                format!("secret `{}` is declared twice", secret.name),
            ));
        }
        for (name, value) in [("mount", &secret.mount), ("path", &secret.path)] {
            if !value.trim().is_empty() && !super::limits::is_store_path(value) {
                problems.push(Problem::new(
                    format!("secret_refs[{index}].{name}"),
                    super::limits::STORE_PATH,
                ));
            }
        }
        let lengths = super::GenerateSecret::LENGTHS;
        if let Some(generate) = secret.generate.filter(|g| !lengths.contains(&g.length)) {
            problems.push(Problem::new(
                format!("secret_refs[{index}].generate.length"),
                format!(
                    "{} characters: from {} to {}",
                    generate.length,
                    lengths.start(),
                    lengths.end()
                ),
            ));
        }
    }
}

/// Letters from other scripts that look like Latin ones (Cyrillic, Greek,
/// and a few others that NFKC keeps): `pаssword` with a Cyrillic `а` is
/// still a password.
fn fold_confusable(character: char) -> char {
    match character {
        'а' | 'α' | 'ɑ' => 'a',
        'в' | 'β' => 'b',
        'с' | 'ϲ' => 'c',
        'ԁ' => 'd',
        'е' | 'ε' | 'ё' => 'e',
        'һ' | 'н' => 'h',
        'і' | 'ι' | 'ї' | 'ı' => 'i',
        'ј' | 'ϳ' => 'j',
        'к' | 'κ' => 'k',
        'м' => 'm',
        'п' => 'n',
        'о' | 'ο' | 'σ' => 'o',
        'р' | 'ρ' => 'p',
        'ԛ' => 'q',
        'г' => 'r',
        'ѕ' => 's',
        'т' | 'τ' => 't',
        'υ' | 'ս' => 'u',
        'ν' | 'ѵ' => 'v',
        'ԝ' | 'ω' => 'w',
        'х' | 'χ' => 'x',
        'у' | 'γ' => 'y',
        'ᴢ' => 'z',
        other => other,
    }
}

/// A name as compared: NFKC (full-width and compatibility forms become
/// their plain letters), lowercase, confusables folded to Latin.
fn normalized_name(name: &str) -> String {
    // ASCII is its own NFKC form, lowercases to ASCII and folds nothing:
    // the usual name skips the Unicode tables (the same answer, tested).
    if name.is_ascii() {
        return name.to_ascii_lowercase();
    }
    unicode_normalized_name(name)
}

fn unicode_normalized_name(name: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    name.nfkc()
        .flat_map(char::to_lowercase)
        .map(fold_confusable)
        .collect()
}

/// True when a variable name says it holds a credential: after
/// normalisation, it contains a credential word, or one of its words is a
/// short credential word (`pwd`, `auth`, `X-Auth`, `Cookie`).
pub fn looks_secret(name: &str) -> bool {
    let normalized = normalized_name(name);
    let squeezed: String = normalized
        .chars()
        .filter(|character| character.is_alphanumeric())
        .collect();
    const CONTAINED: [&str; 19] = [
        "password",
        "passwd",
        "passphrase",
        "token",
        "secret",
        "privatekey",
        "credential",
        "apikey",
        "authorization",
        "authorisation",
        "authenticat",
        "subscriptionkey",
        "accesskey",
        "cookie",
        "bearer",
        "signature",
        "sessionkey",
        "clientkey",
        "encryptionkey",
    ];
    const WORDS: [&str; 7] = ["pwd", "pw", "pass", "auth", "sig", "psk", "jwt"];
    CONTAINED.iter().any(|needle| squeezed.contains(needle))
        || normalized
            .split(|character: char| !character.is_alphanumeric())
            .any(|word| WORDS.contains(&word))
}

/// Query parameters that carry a credential in a URL.
fn secret_query_parameter(name: &str) -> bool {
    let normalized = normalized_name(name);
    looks_secret(name)
        || matches!(
            normalized.as_str(),
            "key" | "code" | "x-amz-credential" | "x-amz-security-token" | "x-goog-credential"
        )
}

/// Why a literal string is a secret whatever its field is called: a URL
/// with a password or a credential query parameter, or a secret shape.
pub fn literal_secret(text: &str) -> Option<String> {
    if let Some(shape) = super::secret_shapes::find(text) {
        return Some(format!("a secret-shaped literal ({shape})"));
    }
    if text.contains("://") {
        if let Ok(url) = url::Url::parse(text.trim()) {
            if url.password().is_some() {
                return Some("a password in a URL's userinfo".into());
            }
            if let Some((name, _)) = url
                .query_pairs()
                .find(|(name, value)| !value.is_empty() && secret_query_parameter(name))
            {
                return Some(format!("a credential in the URL's query (`{name}`)"));
            }
        }
    }
    None
}

fn secret_ref_name(value: &Value) -> Option<Result<&str, &'static str>> {
    let object = value.as_object()?;
    let reference = object.get("$secret")?;
    if object.len() != 1 {
        return Some(Err(
            "a secret reference is exactly {\"$secret\": \"<name>\"}",
        ));
    }
    Some(
        reference
            .as_str()
            .ok_or("`$secret` must name a declared secret_refs entry"),
    )
}

/// Walks `value`: a secret-looking name must hold a reference, never a
/// literal, and every reference must name a declared secret. `declared` is
/// `None` outside `inputs`, where references are not resolved.
fn scan_secrets(
    value: &Value,
    path: JsonPath<'_>,
    under_secret_name: bool,
    declared: Option<&BTreeSet<String>>,
    problems: &mut Vec<Problem>,
) {
    if let Some(reference) = secret_ref_name(value) {
        match (reference, declared) {
            (Ok(_), None) => problems.push(Problem::new(
                path,
                "secret references are resolved in `inputs` only",
            )),
            (Ok(name), Some(declared)) if declared.contains(name) => {}
            (Ok(name), Some(_)) => problems.push(Problem::new(
                path,
                format!("secret `{name}` is not declared in secret_refs"),
            )),
            (Err(message), _) => problems.push(Problem::new(path, message)),
        }
        return;
    }
    match value {
        Value::Object(object) => {
            for (key, child) in object {
                scan_secrets(child, path.key(key), under_secret_name || looks_secret(key), declared, problems);
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                scan_secrets(child, path.index(index), under_secret_name, declared, problems);
            }
        }
        Value::String(text) if under_secret_name && !text.is_empty() => problems.push(Problem::new(
            path,
            "a literal where a secret belongs; declare it in secret_refs and write {\"$secret\": \"<name>\"}",
        )),
        Value::String(text) => {
            if let Some(why) = literal_secret(text) {
                problems.push(Problem::new(
                    path,
                    format!("{why}; declare it in secret_refs and write {{\"$secret\": \"<name>\"}} (in `inputs`)"),
                ));
            }
        }
        Value::Number(_) if under_secret_name => problems.push(Problem::new(
            path,
            "a literal where a secret belongs; declare it in secret_refs and write {\"$secret\": \"<name>\"}",
        )),
        _ => {}
    }
}

fn check_operation_inputs(inputs: &OperationInputs, problems: &mut Vec<Problem>) {
    problems.extend(super::kube_names::problems_of(inputs));
    problems.extend(super::ops::problems_of(inputs));
}

fn check_timeouts(timeouts: &Timeouts, problems: &mut Vec<Problem>) {
    let named = [
        ("schedule_to_start", timeouts.schedule_to_start),
        ("start_to_close", timeouts.start_to_close),
        ("heartbeat", timeouts.heartbeat),
        ("schedule_to_close", timeouts.schedule_to_close),
    ];
    for (name, value) in named {
        let max = if name == "heartbeat" {
            Timeouts::MAX_HEARTBEAT
        } else {
            Timeouts::MAX
        };
        if value < Timeouts::MIN || value > max {
            problems.push(Problem::new(
                format!("timeouts.{name}"),
                format!("{value} is out of bounds ({} to {max})", Timeouts::MIN),
            ));
        }
    }
    if timeouts.heartbeat > timeouts.start_to_close {
        problems.push(Problem::new(
            "timeouts.heartbeat",
            format!(
                "{} exceeds start_to_close {}",
                timeouts.heartbeat, timeouts.start_to_close
            ),
        ));
    }
    if timeouts.start_to_close > timeouts.schedule_to_close {
        problems.push(Problem::new(
            "timeouts.start_to_close",
            format!(
                "{} exceeds schedule_to_close {}",
                timeouts.start_to_close, timeouts.schedule_to_close
            ),
        ));
    }
    if timeouts.schedule_to_start >= timeouts.schedule_to_close {
        problems.push(Problem::new(
            "timeouts.schedule_to_start",
            format!(
                "{} leaves no time to run within schedule_to_close {}",
                timeouts.schedule_to_start, timeouts.schedule_to_close
            ),
        ));
    }
}

fn check_retry(retry: &RetryPolicy, problems: &mut Vec<Problem>) {
    if retry.max_attempts == 0 || retry.max_attempts > RetryPolicy::MAX_ATTEMPTS {
        problems.push(Problem::new(
            "retry.max_attempts",
            format!(
                "{} is out of bounds (1 to {})",
                retry.max_attempts,
                RetryPolicy::MAX_ATTEMPTS
            ),
        ));
    }
    if retry.initial_backoff > retry.max_backoff {
        problems.push(Problem::new(
            "retry.initial_backoff",
            format!(
                "{} exceeds max_backoff {}",
                retry.initial_backoff, retry.max_backoff
            ),
        ));
    }
    if retry.max_backoff > Timeouts::MAX {
        problems.push(Problem::new(
            "retry.max_backoff",
            format!("exceeds {}", Timeouts::MAX),
        ));
    }
}

fn is_plan_digest(digest: &str) -> bool {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    hex.len() == 64 && hex.chars().all(|character| character.is_ascii_hexdigit())
}

/// The gates the contract puts on a JobSpec's own flags (delete only
/// destructive, destroy only elevated, rollback only explicit, an apply
/// only of the approved plan or explicit): checked at intake, and again by
/// the runners before they act, on a JobSpec that may have come past the
/// dispatcher.
/// What intake checks of typed inputs beyond their shape (names that
/// become request paths, relative paths, exactly-one-of fields, ...); the
/// runner SDK checks them again where they run.
pub fn input_problems(inputs: &OperationInputs) -> Vec<Problem> {
    let mut problems = Vec::new();
    check_operation_inputs(inputs, &mut problems);
    problems
}

pub fn flag_problems(spec: &super::JobSpec) -> Vec<Problem> {
    let mut problems = Vec::new();
    check_policy(
        spec.operation,
        &spec.policy,
        Some(&spec.inputs),
        &mut problems,
    );
    problems
}

fn check_policy(
    operation: Operation,
    policy: &super::PolicyFlags,
    inputs: Option<&Value>,
    problems: &mut Vec<Problem>,
) {
    if let Some(digest) = &policy.approved_plan_digest {
        if !is_plan_digest(digest) {
            problems.push(Problem::new(
                "policy.approved_plan_digest",
                "must be `sha256:` followed by 64 hex digits",
            ));
        }
    }
    problems.extend(super::ops::flag_problems(operation, policy, inputs));
}

fn check_callback(callback: &super::Callback, problems: &mut Vec<Problem>) {
    if callback.url.is_none() && callback.topic.is_none() {
        problems.push(Problem::new(
            "callback",
            "name a `url`, a `topic`, or omit `callback`",
        ));
    }
    if let Some(url) = &callback.url {
        if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() > 2048 {
            problems.push(Problem::new(
                "callback.url",
                "must be an http:// or https:// URL of at most 2048 characters",
            ));
        }
    }
    if let Some(topic) = &callback.topic {
        let valid = !topic.is_empty()
            && topic.len() <= 249
            && topic.chars().all(|character| {
                character.is_ascii_alphanumeric() || matches!(character, '.' | '_' | '-')
            });
        if !valid {
            problems.push(Problem::new(
                "callback.topic",
                "not a valid Kafka topic name",
            ));
        }
    }
}

pub fn is_traceparent(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    let hex = |part: &str, len: usize| {
        part.len() == len && part.chars().all(|character| character.is_ascii_hexdigit())
    };
    parts.len() == 4
        && hex(parts[0], 2)
        && hex(parts[1], 32)
        && hex(parts[2], 16)
        && hex(parts[3], 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn http_spec() -> Value {
        json!({
            "command_id": "0b6c7f6e-6a59-4c47-9c8e-2f3f9c1d2e4a",
            "job_id": "plan-42/node-7",
            "tenant": "team-a",
            "requested_by": "control-plane",
            "operation": "verify.http.endpoint",
            "inputs": {"url": "http://127.0.0.1:8080/health", "headers": {"authorization": {"$secret": "api"}}, "expect": {"status": 200}},
            "secret_refs": [{"name": "api", "mount": "secret", "path": "apps/api", "key": "token"}]
        })
    }

    fn paths(value: &Value) -> Vec<String> {
        validate_jobspec(value)
            .unwrap_err()
            .0
            .into_iter()
            .map(|problem| problem.path)
            .collect()
    }

    #[test]
    fn literal_secrets_are_refused_under_every_disguise() {
        let with = |patch: Value| {
            let mut spec = http_spec();
            for (key, value) in patch.as_object().unwrap() {
                spec[key] = value.clone();
            }
            spec
        };
        let url = "http://127.0.0.1/";
        let cases = [
            (
                json!({"inputs": {"url": url, "headers": {"Cookie": "session=abc"}}}),
                "inputs.headers.Cookie",
            ),
            (
                json!({"inputs": {"url": url, "headers": {"X-Auth": "abc"}}}),
                "inputs.headers.X-Auth",
            ),
            (
                json!({"inputs": {"url": url, "headers": {"pwd": "hunter2"}}}),
                "inputs.headers.pwd",
            ),
            (
                json!({"inputs": {"url": url, "headers": {"Proxy-Authorisation": "Basic dTpw"}}}),
                "inputs.headers.Proxy-Authorisation",
            ),
            (
                json!({"inputs": {"url": url, "headers": {"Proxy-Authorization": "Basic dTpw"}}}),
                "inputs.headers.Proxy-Authorization",
            ),
            (
                json!({"inputs": {"url": url, "headers": {"X-Authentication": "abc"}}}),
                "inputs.headers.X-Authentication",
            ),
            (
                json!({"inputs": {"url": url, "headers": {"Ocp-Apim-Subscription-Key": "abc"}}}),
                "inputs.headers.Ocp-Apim-Subscription-Key",
            ),
            (
                json!({"inputs": {"url": url, "headers": {"X-JWT": "abc"}}}),
                "inputs.headers.X-JWT",
            ),
            (
                json!({"inputs": {"url": url, "headers": {"Author\u{200b}isation": "abc"}}}),
                "inputs.headers.Author\u{200b}isation",
            ),
            (
                json!({"inputs": {"url": url, "headers": {"aws_access_key_id": "x"}}}),
                "inputs.headers.aws_access_key_id",
            ),
            (
                json!({"inputs": {"url": "http://u:pw@127.0.0.1/"}}),
                "inputs.url",
            ),
            (
                json!({"inputs": {"url": "http://127.0.0.1/?token=abc"}}),
                "inputs.url",
            ),
            (
                json!({"inputs": {"url": url, "headers": {"p\u{0430}ssword": "x"}}}),
                "inputs.headers.p\u{0430}ssword",
            ),
            (
                json!({"inputs": {"url": url, "headers": {"\u{ff30}\u{ff21}\u{ff33}\u{ff33}\u{ff37}\u{ff2f}\u{ff32}\u{ff24}": "x"}}}),
                "inputs.headers.\u{ff30}\u{ff21}\u{ff33}\u{ff33}\u{ff37}\u{ff2f}\u{ff32}\u{ff24}",
            ),
            (
                json!({"inputs": {"url": url, "body": "AKIAABCDEFGHIJKLMNOP"}}),
                "inputs.body",
            ),
            (
                json!({"inputs": {"url": url, "body": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl"}}),
                "inputs.body",
            ),
            (
                json!({"inputs": {"url": url, "headers": {"x-forward": "Bearer abcdefghijklmnopqrstuvwxyz"}}}),
                "inputs.headers.x-forward",
            ),
            (
                json!({"targets": [{"kind": "node", "id": "n1", "attributes": {"password": "hunter2"}}]}),
                "targets[0].attributes.password",
            ),
            (
                json!({"targets": [{"kind": "node", "id": "n1", "attributes": {"ref": {"$secret": "api"}}}]}),
                "targets[0].attributes.ref",
            ),
            (
                json!({"callback": {"url": "https://cp.example/cb?access_token=abc"}}),
                "callback.url",
            ),
        ];
        for (patch, path) in cases {
            let spec = with(patch.clone());
            let found = validate_jobspec(&spec)
                .err()
                .map(|problems| problems.0)
                .unwrap_or_default();
            assert!(
                found.iter().any(|problem| problem.path == path),
                "{patch}: expected a problem at {path}, got {found:?}"
            );
        }
        // Not secrets: ordinary names, a plain URL, "bearer" in prose.
        let fine = with(
            json!({"inputs": {"url": "http://example.com/a?page=2", "headers": {"accept": "text/plain", "x-author": "ops"}, "body": "bearer of news"}}),
        );
        assert!(
            validate_jobspec(&fine).is_ok(),
            "{:?}",
            validate_jobspec(&fine).err()
        );
    }

    #[test]
    fn a_nul_anywhere_is_refused_with_its_path() {
        let mut spec = http_spec();
        spec["inputs"]["url"] = json!("http://x/a\u{0}b");
        spec["inputs"]["expect"]["body_co\u{0}"] = json!("x");
        spec["targets"] = json!([{"kind": "node", "id": "n\u{0}"}]);
        let found = paths(&spec);
        assert!(found.contains(&"inputs.url".to_owned()), "{found:?}");
        assert!(found.contains(&"targets[0].id".to_owned()), "{found:?}");
        assert!(
            found
                .iter()
                .any(|path| path == "inputs.expect.body_co\\u{0}"),
            "{found:?}"
        );
        for problem in validate_jobspec(&spec).unwrap_err().0 {
            assert!(!problem.path.contains('\0') && !problem.message.contains('\0'));
        }
    }

    #[test]
    fn a_good_spec_gets_defaults() {
        let spec = validate_jobspec(&http_spec()).unwrap();
        assert_eq!(spec.timeouts, Timeouts::default());
        assert_eq!(spec.retry.max_attempts, 3);
    }

    #[test]
    fn a_tenant_is_a_dns_label() {
        for good in ["team-a", "t", "0", &"a".repeat(63)] {
            let mut spec = http_spec();
            spec["tenant"] = json!(good);
            assert!(validate_jobspec(&spec).is_ok(), "{good}");
        }
        for bad in [
            "execplane/team-b",
            "../team-b",
            "Team-A",
            "team_a",
            "team.a",
            "-a",
            "a-",
            " a",
            "é",
            &"a".repeat(64),
        ] {
            let mut spec = http_spec();
            spec["tenant"] = json!(bad);
            assert_eq!(paths(&spec), vec!["tenant"], "{bad}");
        }
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let mut spec = http_spec();
        spec["operation"] = json!("verify.nothing");
        spec.as_object_mut().unwrap().remove("tenant");
        spec["timeouts"] =
            json!({"heartbeat": "2h", "start_to_close": "1m", "schedule_to_close": "30s"});
        spec["inputs"]["headers"]["x-api-token"] = json!("hunter2");
        let found = paths(&spec);
        for expected in [
            "operation",
            "tenant",
            "timeouts.heartbeat",
            "timeouts.start_to_close",
            "inputs.headers.x-api-token",
        ] {
            assert!(
                found.iter().any(|path| path == expected),
                "{expected} missing from {found:?}"
            );
        }
    }

    #[test]
    fn literal_secrets_and_undeclared_refs_are_refused() {
        let mut spec = http_spec();
        spec["inputs"]["headers"]["authorization"] = json!("Bearer abc");
        assert_eq!(paths(&spec), vec!["inputs.headers.authorization"]);
        spec["inputs"]["headers"]["authorization"] = json!({"$secret": "nope"});
        assert_eq!(paths(&spec), vec!["inputs.headers.authorization"]);
    }

    #[test]
    fn secret_refs_read_kv_secrets_and_nothing_else() {
        let mut spec = http_spec();
        let declared = spec["secret_refs"][0].clone();
        for (field, value) in [
            ("path", "../../database/creds/admin"),
            ("path", "app/%2e%2e/x"),
            ("path", "app?list=true"),
            ("mount", "secret/./x"),
        ] {
            spec["secret_refs"][0] = declared.clone();
            spec["secret_refs"][0][field] = json!(value);
            assert_eq!(
                paths(&spec),
                vec![format!("secret_refs[0].{field}")],
                "{value}"
            );
        }
        spec["secret_refs"][0] = declared.clone();
        spec["secret_refs"][0]["path"] = json!("team-a/app.v2/db");
        assert!(validate_jobspec(&spec).is_ok());
        // A generated value is 16 to 256 characters.
        for length in [15, 257] {
            spec["secret_refs"][0] = declared.clone();
            spec["secret_refs"][0]["generate"] = json!({"length": length});
            assert_eq!(paths(&spec), vec!["secret_refs[0].generate.length"]);
        }
        for length in [16, 256] {
            spec["secret_refs"][0]["generate"] = json!({"length": length});
            assert!(validate_jobspec(&spec).is_ok(), "{length}");
        }
        spec["secret_refs"][0]["generate"] = json!({});
        assert_eq!(
            validate_jobspec(&spec).unwrap().secret_refs[0].generate,
            Some(crate::contract::GenerateSecret { length: 32 })
        );
    }

    #[test]
    fn inputs_must_match_the_operation() {
        let mut spec = http_spec();
        spec["inputs"]["port"] = json!(5432);
        assert_eq!(paths(&spec), vec!["inputs.port"]);
    }

    #[test]
    fn policy_rules() {
        let base = |operation: &str, inputs: Value| {
            let mut spec = http_spec();
            spec["operation"] = json!(operation);
            spec["inputs"] = inputs;
            spec
        };
        let cluster = json!({"name": "c1", "credentials": {"$secret": "api"}});
        let object = json!({"api_version": "v1", "kind": "ConfigMap", "name": "x"});
        let delete = base(
            "kubernetes.manifest.delete",
            json!({"cluster": cluster, "namespace": "n", "objects": [object]}),
        );
        assert_eq!(paths(&delete), vec!["policy.destructive"]);
        let module = json!({"package": {"name": "net", "version": "1.0.0"}});
        assert_eq!(
            paths(&base("opentofu.apply", module.clone())),
            vec!["policy.approved_plan_digest"]
        );
        assert_eq!(
            paths(&base("opentofu.destroy", module)),
            vec!["policy.elevated"]
        );
        let rollback = base(
            "helm.rollback",
            json!({"cluster": cluster, "release": "r", "namespace": "n", "revision": 3}),
        );
        assert_eq!(paths(&rollback), vec!["policy.explicit_command"]);
        assert_eq!(
            paths(&base("ssh.command.run", json!({"args": {}}))),
            vec!["inputs.template_id"]
        );
        let package = json!({"name": "site", "version": "1"});
        for bad in ["/etc/site.yml", "../site.yml", "plays/../../site.yml"] {
            let playbook = base(
                "ansible.playbook.run",
                json!({"package": package, "playbook": bad}),
            );
            assert_eq!(paths(&playbook), vec!["inputs.playbook"], "{bad}");
        }
    }

    proptest::proptest! {
        #[test]
        fn an_ascii_name_is_normalised_as_the_unicode_path_would(name in "[\\x00-\\x7f]{0,40}") {
            proptest::prop_assert_eq!(normalized_name(&name), unicode_normalized_name(&name));
        }
    }
}
