//! Output artifacts: files a runner produced for an attempt (a plan file,
//! rendered manifests, an event stream, a downloaded file), stored by the
//! runner and listed in its finished report, recorded in the attempt's
//! `finished` event and as artifact refs by the artifact worker
//! (docs/ARCHITECTURE.md, "Artifacts").

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::Problem;

/// How long an artifact is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetentionClass {
    Logs,
    Rendered,
    Evidence,
}

impl RetentionClass {
    pub const fn as_str(self) -> &'static str {
        match self {
            RetentionClass::Logs => "logs",
            RetentionClass::Rendered => "rendered",
            RetentionClass::Evidence => "evidence",
        }
    }
}

/// One stored output, as the runner reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputArtifact {
    /// A file name: letters, digits, `.`, `_`, `-`; not starting with `.`.
    pub name: String,
    pub class: RetentionClass,
    pub media_type: String,
    pub size: i64,
    /// Lowercase hex sha256 of the stored bytes.
    pub sha256: String,
    /// Its storage key: always [`output_key`] of the other fields, so a
    /// report can name only its own attempt's objects.
    pub key: String,
}

/// Most outputs one attempt may list.
pub const MAX_OUTPUTS: usize = 32;
/// Largest output file, in bytes.
pub const MAX_OUTPUT_BYTES: u64 = 64 * 1024 * 1024;
/// Longest output name, in bytes.
pub const MAX_OUTPUT_NAME: usize = 128;

/// The storage key of an attempt's output: content-addressed under the
/// attempt, so two uploads of one file agree and no attempt's output can
/// overwrite another's.
pub fn output_key(attempt_id: Uuid, sha256: &str, name: &str) -> String {
    format!("outputs/{attempt_id}/{sha256}/{name}")
}

/// The storage key whose presence says `attempt_id` is an attempt of
/// `tenant` (written with its outputs): its outputs are the tenant's to
/// read. Never an output's key (`tenants` is no digest).
pub fn output_tenant_key(attempt_id: Uuid, tenant: &str) -> String {
    let tenant = super::artifact_ref::tenant_segment(tenant);
    format!("outputs/{attempt_id}/tenants/{tenant}")
}

/// The names of the artifact worker's own artifacts of an attempt: an
/// output may not take one (`<stream>.log`, `<stream>.late-<n>.log`).
fn reserved(name: &str) -> bool {
    let streams = ["stdout", "stderr", "runner"];
    name == "result.json"
        || name == "manifest.json"
        || streams.iter().any(|stream| {
            name.strip_prefix(stream)
                .is_some_and(|rest| rest == ".log" || rest.starts_with(".late-"))
        })
}

/// Whether `name` may name an output file.
pub fn output_name_problem(name: &str) -> Option<String> {
    if reserved(name) {
        return Some(format!(
            "`{name}` is the name of one of the artifact worker's own artifacts"
        ));
    }
    let fine = !name.is_empty()
        && name.len() <= MAX_OUTPUT_NAME
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    (!fine).then(|| {
        format!(
            "`{}` is not an output name (1 to {MAX_OUTPUT_NAME} letters, digits, `.`, `_`, `-`; not starting with `.`)",
            super::limits::loggable(name)
        )
    })
}

/// Whether `text` may name an output's media type: 1 to 128 printable
/// ASCII characters.
pub fn is_media_type(text: &str) -> bool {
    !text.is_empty() && text.len() <= 128 && text.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
}

/// Every problem of the outputs a finished report of `attempt_id` lists.
pub fn check_outputs(attempt_id: Uuid, outputs: &[OutputArtifact], problems: &mut Vec<Problem>) {
    if outputs.len() > MAX_OUTPUTS {
        problems.push(Problem::new(
            "outputs",
            format!("{} outputs; at most {MAX_OUTPUTS}", outputs.len()),
        ));
        return;
    }
    let mut names = std::collections::BTreeSet::new();
    for (index, output) in outputs.iter().enumerate() {
        let at = |field: &str| format!("outputs[{index}].{field}");
        if let Some(problem) = output_name_problem(&output.name) {
            problems.push(Problem::new(at("name"), problem));
        } else if !names.insert(output.name.as_str()) {
            problems.push(Problem::new(at("name"), "listed twice"));
        }
        let hex = output.sha256.len() == 64
            && output
                .sha256
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !hex {
            problems.push(Problem::new(at("sha256"), "not 64 lowercase hex digits"));
        }
        if output.size < 0 {
            problems.push(Problem::new(at("size"), "negative"));
        }
        if !is_media_type(&output.media_type) {
            problems.push(Problem::new(at("media_type"), "not a media type"));
        }
        if output.key != output_key(attempt_id, &output.sha256, &output.name) {
            problems.push(Problem::new(
                at("key"),
                "not this attempt's output key (outputs/<attempt>/<sha256>/<name>)",
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_names_only_its_own_attempt_s_object() {
        let attempt = Uuid::from_u128(1);
        let sha = "a".repeat(64);
        let good = OutputArtifact {
            name: "plan.bin".into(),
            class: RetentionClass::Evidence,
            media_type: "application/octet-stream".into(),
            size: 10,
            sha256: sha.clone(),
            key: output_key(attempt, &sha, "plan.bin"),
        };
        let mut problems = Vec::new();
        check_outputs(attempt, std::slice::from_ref(&good), &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        let other_attempt = OutputArtifact {
            name: "other.bin".into(),
            key: output_key(Uuid::from_u128(2), &sha, "other.bin"),
            ..good.clone()
        };
        let traversal = OutputArtifact {
            name: "../x".into(),
            ..good.clone()
        };
        for name in [
            "manifest.json",
            "result.json",
            "stdout.log",
            "stderr.late-3.log",
        ] {
            assert!(output_name_problem(name).is_some(), "{name}");
        }
        assert!(output_name_problem("stdout.log.gz").is_none());
        check_outputs(
            attempt,
            &[good.clone(), good, other_attempt, traversal],
            &mut problems,
        );
        let paths: Vec<&str> = problems
            .iter()
            .map(|problem| problem.path.as_str())
            .collect();
        assert_eq!(
            paths,
            [
                "outputs[1].name",
                "outputs[2].key",
                "outputs[3].name",
                "outputs[3].key"
            ]
        );
    }
}
