//! The deployments that ship with execplane: `docker-compose.yml` sets
//! only real settings, checks every role's health and lets the host reach
//! its broker (read as Docker Compose reads it, merge keys applied; no
//! Docker engine is needed); and the chart in `deploy/helm/execplane`
//! renders, sets only real settings, probes every container, and is
//! accepted by the local API server in a server-side dry run.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether `name` is a setting execplane reads (README, "Configuration").
fn is_setting(name: &str) -> bool {
    name == execplane::config::CONFIG_FILE_VARIABLE
        || name.starts_with(execplane::config::KAFKA_PROPERTY_PREFIX)
        || execplane::config::SETTINGS
            .iter()
            .any(|setting| setting.name == name || setting.aliases.contains(&name))
}

/// A service's or container's environment variable names, map or list form.
fn variable_names(environment: &Value) -> Vec<String> {
    match environment {
        Value::Object(map) => map.keys().cloned().collect(),
        Value::Array(list) => list
            .iter()
            .filter_map(|entry| {
                entry
                    .get("name")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .or_else(|| {
                        entry
                            .as_str()
                            .map(|text| text.split('=').next().unwrap().to_owned())
                    })
            })
            .collect(),
        _ => Vec::new(),
    }
}

#[test]
fn compose_sets_only_real_settings_checks_health_and_lets_the_host_reach_kafka() {
    let text = std::fs::read(repository().join("docker-compose.yml")).unwrap();
    let compose = execplane::runner::yaml::document(&text, 1 << 20).expect("compose reads");
    let services = compose["services"].as_object().expect("services");
    let mut execplane_services = 0;
    for (name, service) in services {
        let runs_execplane = service["image"].as_str() == Some("execplane:local");
        let names = variable_names(&service["environment"]);
        for variable in names.iter().filter(|name| name.starts_with("EXECPLANE_")) {
            assert!(
                is_setting(variable),
                "{name} sets {variable}, which is no setting"
            );
        }
        if !runs_execplane {
            continue;
        }
        execplane_services += 1;
        let command = service["command"].as_array();
        let is_setup = service["entrypoint"].is_array();
        if !is_setup {
            assert!(
                service["healthcheck"]["test"]
                    .as_array()
                    .is_some_and(|test| test
                        .iter()
                        .any(|word| word.as_str().is_some_and(|word| word.contains("/readyz")))),
                "{name} has no /readyz health check"
            );
            assert!(
                names
                    .iter()
                    .any(|variable| variable == "EXECPLANE_POLICY_FILE"),
                "{name} runs without the operator's policy"
            );
        }
        // Only a runner runs privileged (its sandbox); every other role
        // runs as nobody.
        let runner =
            command.is_some_and(|words| words.first().and_then(Value::as_str) == Some("runner"));
        assert_eq!(
            service["privileged"].as_bool().unwrap_or(false),
            runner,
            "{name}: privileged only for runners"
        );
        if !runner && !is_setup {
            assert_eq!(service["user"].as_str(), Some("65534:65534"), "{name}");
        }
    }
    // Every role, and a runner of every type.
    assert_eq!(execplane_services, 1 + 4 + 6);
    let kafka = &services["kafka"]["environment"];
    assert!(
        kafka["KAFKA_ADVERTISED_LISTENERS"]
            .as_str()
            .is_some_and(|listeners| listeners.contains("//127.0.0.1:29092")),
        "the host reaches no listener of the broker: {kafka}"
    );
    assert!(services["kafka"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .any(|port| port.as_str() == Some("127.0.0.1:29092:29092")));
}

fn tool(name: &str) -> PathBuf {
    let helm = std::env::var("EXECPLANE_HELM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|_| common::stack_dir().join("helm/bin/helm"));
    helm.with_file_name(name)
}

fn run(program: &str, args: &[&str], input: Option<&str>) -> String {
    let mut child = Command::new(tool(program))
        .args(args)
        .env(
            "KUBECONFIG",
            common::stack_dir().join("kubernetes/kubeconfig"),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("{program}: {error}"));
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        if let Some(input) = input {
            stdin.write_all(input.as_bytes()).unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_chart_renders_and_the_api_server_accepts_it() {
    let namespace = format!(
        "deploy-check-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let chart = repository().join("deploy/helm/execplane");
    let policy = repository().join("examples/policy.yaml");
    let rendered = run(
        "helm",
        &[
            "template",
            "ep",
            chart.to_str().unwrap(),
            "--namespace",
            &namespace,
            "--kube-version",
            "1.20.2",
            "--set-file",
            &format!("policy={}", policy.display()),
        ],
        None,
    );
    let objects = execplane::runner::yaml::documents(rendered.as_bytes(), 16 << 20).unwrap();
    let objects: Vec<&Value> = objects.iter().filter(|object| !object.is_null()).collect();
    let kind = |object: &Value| object["kind"].as_str().unwrap_or_default().to_owned();
    let deployments: Vec<&Value> = objects
        .iter()
        .copied()
        .filter(|object| kind(object) == "Deployment")
        .collect();
    // The four core roles and the six runner types, each its own process.
    assert_eq!(deployments.len(), 10, "{rendered}");
    let mut commands = Vec::new();
    for object in objects
        .iter()
        .filter(|object| ["Deployment", "Job"].contains(&kind(object).as_str()))
    {
        let name = object["metadata"]["name"].as_str().unwrap();
        for container in object["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
        {
            for variable in variable_names(&container["env"]) {
                assert!(
                    !variable.starts_with("EXECPLANE_") || is_setting(&variable),
                    "{name} sets {variable}, which is no setting"
                );
            }
            // Secrets only by reference: no literal value for a key, token or password.
            for entry in container["env"].as_array().unwrap() {
                let variable = entry["name"].as_str().unwrap();
                if ["KEY", "TOKEN", "PASSWORD", "SECRET", "DATABASE_URL"]
                    .iter()
                    .any(|word| {
                        variable.ends_with(word) || variable.contains(&format!("{word}_ID"))
                    })
                {
                    assert!(
                        entry.get("value").is_none(),
                        "{name}: {variable} is a literal"
                    );
                }
            }
            if kind(object) == "Deployment" {
                for probe in ["livenessProbe", "readinessProbe"] {
                    assert!(container[probe].is_object(), "{name} has no {probe}");
                }
                assert_eq!(
                    container["readinessProbe"]["httpGet"]["path"], "/readyz",
                    "{name}"
                );
                let privileged = container["securityContext"]["privileged"]
                    .as_bool()
                    .unwrap_or(false);
                let args: Vec<&str> = container["args"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(Value::as_str)
                    .collect();
                assert_eq!(
                    privileged,
                    args[0] == "runner",
                    "{name}: privileged only for runners"
                );
                commands.push(args.join(" "));
            }
        }
    }
    commands.sort();
    assert_eq!(
        commands,
        [
            "artifact-worker",
            "dispatcher",
            "ingress",
            "relay",
            "runner ansible",
            "runner helm",
            "runner kubernetes",
            "runner opentofu",
            "runner ssh",
            "runner verification"
        ]
    );
    let budgets = objects
        .iter()
        .filter(|object| kind(object) == "PodDisruptionBudget")
        .count();
    assert_eq!(budgets, 10);
    assert!(objects.iter().any(|object| kind(object) == "ConfigMap"
        && object["data"]["policy.yaml"]
            .as_str()
            .is_some_and(|text| text.contains("team-a"))));

    run("kubectl", &["create", "namespace", &namespace], None);
    let applied = std::panic::catch_unwind(|| {
        run(
            "kubectl",
            &[
                "apply",
                "--server-side",
                "--dry-run=server",
                "-n",
                &namespace,
                "-f",
                "-",
            ],
            Some(&rendered),
        )
    });
    run(
        "kubectl",
        &["delete", "namespace", &namespace, "--wait=false"],
        None,
    );
    let applied = applied.expect("the API server accepts every object");
    assert_eq!(
        applied
            .lines()
            .filter(|line| line.contains("(server dry run)"))
            .count(),
        objects.len(),
        "{applied}"
    );
}
