//! The names a Kubernetes or Helm JobSpec puts into API paths: namespaces,
//! object names, API versions, kinds and release names. Each becomes a
//! segment of a URL the runner (or helm) requests, so anything but the
//! characters Kubernetes itself allows is refused — at intake and again by
//! the runner — before it can cut a path short (`?`, `#`), climb out of it
//! (`/`, `..`) or reach a subresource (docs/ARCHITECTURE.md, "Kubernetes").

use serde_json::Value;

use super::ops::{HelmReleaseRef, HelmTestInputs, ObjectRef, OperationInputs};
use super::Problem;

/// An RFC 1123 label (a namespace): 1-63 lowercase letters, digits and
/// `-`, starting and ending with a letter or digit.
pub fn label_problem(text: &str) -> Option<String> {
    let fine = (1..=63).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !text.starts_with('-')
        && !text.ends_with('-');
    (!fine).then(|| {
        format!(
            "`{}` is not a namespace (1-63 of a-z, 0-9, `-`, not starting or ending with `-`)",
            shown(text)
        )
    })
}

/// A Helm release name: a label of at most 53 characters (helm's own rule).
pub fn release_problem(text: &str) -> Option<String> {
    if text.len() > 53 {
        return Some(format!("`{}` is longer than 53 characters", shown(text)));
    }
    label_problem(text).map(|_| {
        format!(
            "`{}` is not a release name (1-53 of a-z, 0-9, `-`)",
            shown(text)
        )
    })
}

/// A chart's name and version, as helm takes them on its command line:
/// a name of 1-63 of `a-z`, `0-9`, `.`, `_`, `-` and a version of 1-64 of
/// letters, digits, `.`, `+`, `-`, each starting with a letter or digit
/// (so neither can be read as an option).
pub fn chart_problems(chart: &super::ops::ChartRef, problems: &mut Vec<Problem>) {
    let starts_fine = |text: &str| {
        text.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
    };
    let name_fine = (1..=63).contains(&chart.name.len())
        && starts_fine(&chart.name)
        && chart.name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        });
    if !name_fine {
        problems.push(Problem::new(
            "inputs.chart.name",
            format!(
                "`{}` is not a chart name (1-63 of a-z, 0-9, `.`, `_`, `-`)",
                shown(&chart.name)
            ),
        ));
    }
    let version_fine = (1..=64).contains(&chart.version.len())
        && starts_fine(&chart.version)
        && chart
            .version
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-'));
    if !version_fine {
        problems.push(Problem::new(
            "inputs.chart.version",
            format!("`{}` is not a chart version", shown(&chart.version)),
        ));
    }
    if chart.repository.starts_with('-') || chart.repository.chars().any(char::is_whitespace) {
        problems.push(Problem::new(
            "inputs.chart.repository",
            "a repository URL or `oci://` reference, no spaces, not starting with `-`",
        ));
    }
}

/// An object name: 1-253 of letters, digits, `.`, `-`, `_` and `:` (DNS
/// subdomains, and the `system:` names of RBAC objects), not `.` or `..`.
pub fn name_problem(text: &str) -> Option<String> {
    let fine = (1..=253).contains(&text.len())
        && text != "."
        && text != ".."
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'));
    (!fine).then(|| {
        format!(
            "`{}` is not an object name (1-253 of A-Z, a-z, 0-9, `.`, `-`, `_`, `:`)",
            shown(text)
        )
    })
}

/// `v1` or `<group>/<version>`: a DNS subdomain group and an alphanumeric
/// version.
pub fn api_version_problem(text: &str) -> Option<String> {
    let (group, version) = text.split_once('/').unwrap_or(("", text));
    let group_fine = !text.contains('/') && group.is_empty()
        || (group.len() <= 253
            && group
                .split('.')
                .all(|label| !label.is_empty() && label_problem(label).is_none()));
    let version_fine = (1..=63).contains(&version.len())
        && version
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    (!(group_fine && version_fine))
        .then(|| format!("`{}` is not an apiVersion (`v1`, `apps/v1`)", shown(text)))
}

/// A kind: 1-63 letters and digits.
pub fn kind_problem(text: &str) -> Option<String> {
    let fine = (1..=63).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_alphanumeric());
    (!fine).then(|| format!("`{}` is not a kind (letters and digits)", shown(text)))
}

/// A name as a message may quote it: at most 80 characters, control
/// characters escaped.
fn shown(text: &str) -> String {
    text.chars().take(80).flat_map(char::escape_debug).collect()
}

fn push(problems: &mut Vec<Problem>, path: String, problem: Option<String>) {
    if let Some(message) = problem {
        problems.push(Problem::new(path, message));
    }
}

/// The objects of an apply's or a patch's `wait_for`, as every object.
fn waits_problems(waits: &[super::ops::WaitFor], problems: &mut Vec<Problem>) {
    for (index, wait) in waits.iter().enumerate() {
        object_problems(
            &format!("inputs.wait_for[{index}].object"),
            &wait.object,
            problems,
        );
    }
}

/// Every name of an object reference, under `path`.
pub fn object_problems(path: &str, object: &ObjectRef, problems: &mut Vec<Problem>) {
    push(
        problems,
        format!("{path}.api_version"),
        api_version_problem(&object.api_version),
    );
    push(problems, format!("{path}.kind"), kind_problem(&object.kind));
    push(problems, format!("{path}.name"), name_problem(&object.name));
    if let Some(namespace) = &object.namespace {
        push(
            problems,
            format!("{path}.namespace"),
            label_problem(namespace),
        );
    }
}

/// The names of one manifest (inline or read from an artifact), under
/// `path`: apiVersion, kind, metadata.name, metadata.namespace.
pub fn manifest_problems(path: &str, manifest: &Value, problems: &mut Vec<Problem>) {
    let text = |pointer: &str| manifest.pointer(pointer).and_then(Value::as_str);
    let required = [
        ("/apiVersion", "apiVersion"),
        ("/kind", "kind"),
        ("/metadata/name", "metadata.name"),
    ];
    for (pointer, field) in required {
        if text(pointer).is_none() {
            problems.push(Problem::new(
                format!("{path}.{field}"),
                "required (a string)",
            ));
        }
    }
    if let Some(api_version) = text("/apiVersion") {
        push(
            problems,
            format!("{path}.apiVersion"),
            api_version_problem(api_version),
        );
    }
    if let Some(kind) = text("/kind") {
        push(problems, format!("{path}.kind"), kind_problem(kind));
    }
    if let Some(name) = text("/metadata/name") {
        push(
            problems,
            format!("{path}.metadata.name"),
            name_problem(name),
        );
    }
    match manifest.pointer("/metadata/namespace") {
        None => {}
        Some(Value::String(namespace)) => push(
            problems,
            format!("{path}.metadata.namespace"),
            label_problem(namespace),
        ),
        Some(_) => problems.push(Problem::new(
            format!("{path}.metadata.namespace"),
            "a string",
        )),
    }
}

/// Every Kubernetes and Helm name of `inputs` (other operations: none).
pub fn problems_of(inputs: &OperationInputs) -> Vec<Problem> {
    use OperationInputs as I;
    let mut problems = Vec::new();
    let namespace = |problems: &mut Vec<Problem>, namespace: &str| {
        push(
            problems,
            "inputs.namespace".into(),
            label_problem(namespace),
        );
    };
    let release = |problems: &mut Vec<Problem>, name: &str| {
        push(problems, "inputs.release".into(), release_problem(name));
    };
    match inputs {
        I::KubernetesManifestApply(apply) => {
            namespace(&mut problems, &apply.namespace);
            for (index, manifest) in apply.manifests.iter().enumerate() {
                manifest_problems(
                    &format!("inputs.manifests[{index}]"),
                    manifest,
                    &mut problems,
                );
            }
            waits_problems(&apply.wait_for, &mut problems);
        }
        I::KubernetesManifestDelete(delete) => {
            namespace(&mut problems, &delete.namespace);
            for (index, object) in delete.objects.iter().enumerate() {
                object_problems(&format!("inputs.objects[{index}]"), object, &mut problems);
            }
        }
        I::KubernetesWait(wait) => {
            namespace(&mut problems, &wait.namespace);
            object_problems("inputs.object", &wait.object, &mut problems);
        }
        I::KubernetesRolloutStatus(object) | I::KubernetesResourceRead(object) => {
            namespace(&mut problems, &object.namespace);
            object_problems("inputs.object", &object.object, &mut problems);
        }
        I::KubernetesResourcePatch(patch) => {
            namespace(&mut problems, &patch.namespace);
            object_problems("inputs.object", &patch.object, &mut problems);
            waits_problems(&patch.wait_for, &mut problems);
        }
        I::VerifyKubernetesCondition(condition) => {
            namespace(&mut problems, &condition.namespace);
            object_problems("inputs.object", &condition.object, &mut problems);
        }
        I::VerifyResourceCapability(capability) => {
            if let Some(name) = &capability.namespace {
                namespace(&mut problems, name);
            }
            // Discovery asks `/apis/<group>/<version>` for it.
            let resource = &capability.resource;
            push(
                &mut problems,
                "inputs.resource".into(),
                api_version_problem(&resource.api_version).or_else(|| kind_problem(&resource.kind)),
            );
        }
        I::HelmInstall(helm) | I::HelmUpgrade(helm) => {
            namespace(&mut problems, &helm.namespace);
            release(&mut problems, &helm.release);
            chart_problems(&helm.chart, &mut problems);
        }
        I::HelmRollback(helm) => {
            namespace(&mut problems, &helm.namespace);
            release(&mut problems, &helm.release);
        }
        I::HelmUninstall(HelmReleaseRef {
            namespace: space,
            release: name,
            ..
        })
        | I::HelmTest(HelmTestInputs {
            namespace: space,
            release: name,
            ..
        }) => {
            namespace(&mut problems, space);
            release(&mut problems, name);
        }
        I::HelmTemplate(helm) => {
            namespace(&mut problems, &helm.namespace);
            release(&mut problems, &helm.release);
            chart_problems(&helm.chart, &mut problems);
        }
        _ => {}
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_that_would_reshape_a_path_passes() {
        for bad in [
            "team-a-x#",
            "team-a-x?",
            "a/b",
            "A",
            "-a",
            "a-",
            "",
            "ns/pods/p/status?",
            "é",
        ] {
            assert!(label_problem(bad).is_some(), "{bad}");
        }
        for good in ["team-a", "team-a-1", "a", "kube-system"] {
            assert!(label_problem(good).is_none(), "{good}");
        }
        for bad in [
            "x?fieldManager=other&",
            "a/b",
            "a#",
            ".",
            "..",
            "a b",
            "a%2f",
            "",
        ] {
            assert!(name_problem(bad).is_some(), "{bad}");
        }
        for good in ["web", "web.v1", "system:controller:x", "Under_score"] {
            assert!(name_problem(good).is_none(), "{good}");
        }
        for bad in ["apps/v1?x", "/v1", "apps/", "Apps/v1", "a..b/v1"] {
            assert!(api_version_problem(bad).is_some(), "{bad}");
        }
        for good in ["v1", "apps/v1", "test.execplane.io/v1beta1"] {
            assert!(api_version_problem(good).is_none(), "{good}");
        }
        assert!(kind_problem("Config Map").is_some());
        let chart = |name: &str, version: &str| crate::contract::ops::ChartRef {
            repository: "https://charts.example.com".into(),
            name: name.into(),
            version: version.into(),
            digest: None,
            login: None,
        };
        for (name, version) in [
            ("--post-renderer=/bin/sh", "1"),
            ("web", "--keyring=/etc/x"),
            ("Web", "1"),
            ("web", ""),
        ] {
            let mut problems = Vec::new();
            chart_problems(&chart(name, version), &mut problems);
            assert!(!problems.is_empty(), "{name} {version}");
        }
        let mut problems = Vec::new();
        chart_problems(&chart("web-app", "1.2.3-rc.1+build.5"), &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        assert!(release_problem(&"a".repeat(54)).is_some());
        assert!(release_problem("web").is_none());
    }

    #[test]
    fn a_capability_s_api_version_is_held_to_what_a_request_path_may_hold() {
        let problems = |resource: &str| {
            let inputs = OperationInputs::parse(
                crate::contract::Operation::VerifyResourceCapability,
                &serde_json::json!({"cluster": {"name": "c", "credentials": {"$secret": "k"}},
                                    "resource": resource, "verbs": ["get"]}),
            )
            .unwrap();
            problems_of(&inputs)
        };
        for fine in [
            "apps/v1/Deployment",
            "v1/ConfigMap",
            "example.com/v1beta1/Widget",
        ] {
            assert!(problems(fine).is_empty(), "{fine}");
        }
        for hostile in [
            "../../Pod",
            "apps/v1?watch=1/Pod",
            "Apps/V1/Pod",
            "a b/v1/Pod",
        ] {
            let found = problems(hostile);
            assert_eq!(found.len(), 1, "{hostile}: {found:?}");
            assert_eq!(found[0].path, "inputs.resource");
        }
    }

    #[test]
    fn a_manifest_names_every_field_it_gets_wrong() {
        let mut problems = Vec::new();
        let manifest = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a?b", "namespace": "x#"}});
        manifest_problems("m", &manifest, &mut problems);
        let paths: Vec<&str> = problems
            .iter()
            .map(|problem| problem.path.as_str())
            .collect();
        assert_eq!(paths, vec!["m.metadata.name", "m.metadata.namespace"]);
        let mut problems = Vec::new();
        manifest_problems("m", &serde_json::json!({"kind": "X"}), &mut problems);
        assert_eq!(problems.len(), 2);
    }
}
