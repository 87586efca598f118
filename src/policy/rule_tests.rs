//! Every class of rule in the shipped example policy, one JobSpec each:
//! allowed as written, refused with the rule named once a field crosses it.

use serde_json::{json, Value};

use super::OperatorPolicy;
use crate::contract::{validate_jobspec, JobSpec};

fn example() -> OperatorPolicy {
    OperatorPolicy::from_yaml(include_str!("../../examples/policy.yaml")).unwrap()
}

const PACKAGE: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const MODULE: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

fn spec(tenant: &str, operation: &str, inputs: Value, extra: Value) -> JobSpec {
    let mut value = json!({
        "command_id": "0b6c55d5-7c59-4a8e-9b7e-2f1f7d2b1a01",
        "job_id": "policy/example", "tenant": tenant, "requested_by": "test",
        "operation": operation, "inputs": inputs,
    });
    if let (Some(object), Some(extra)) = (value.as_object_mut(), extra.as_object()) {
        object.extend(extra.clone());
    }
    validate_jobspec(&value).unwrap_or_else(|problems| panic!("{operation}: {problems}"))
}

/// The rules that refused `spec`, as the messages name them.
fn refused_by(policy: &OperatorPolicy, spec: &JobSpec) -> Vec<String> {
    policy
        .check_jobspec(spec)
        .iter()
        .map(|problem| {
            let message = &problem.message;
            match message.find("rule `") {
                Some(at) => message[at + 6..].trim_end_matches(['`', ')']).to_owned(),
                None => message.clone(),
            }
        })
        .collect()
}

fn cluster() -> Value {
    json!({"name": "dev", "credentials": {"$secret": "kubeconfig"}})
}

fn kube_secret() -> Value {
    json!({"secret_refs": [{"name": "kubeconfig", "mount": "secret", "path": "team-a/dev", "key": "config"}]})
}

#[test]
fn the_example_policy_loads_and_what_it_allows_passes() {
    let policy = example();
    assert!(policy.digest().starts_with("sha256:"));
    let allowed = [
        spec(
            "team-a",
            "ssh.command.run",
            json!({"template_id": "greet", "args": {"name": "ops", "times": 2}}),
            json!({"targets": [{"kind": "node", "id": "node-1", "address": "192.0.2.7"}]}),
        ),
        spec(
            "team-a",
            "ansible.playbook.run",
            json!({"package": {"name": "web", "version": "1", "digest": PACKAGE}, "playbook": "playbooks/web.yml"}),
            json!({}),
        ),
        spec(
            "team-a",
            "kubernetes.manifest.apply",
            json!({"cluster": cluster(), "namespace": "team-a-web",
                   "manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}]}),
            kube_secret(),
        ),
        spec(
            "team-a",
            "helm.install",
            json!({"cluster": cluster(), "release": "web", "namespace": "team-a",
                   "chart": {"repository": "https://charts.example.com/stable", "name": "web", "version": "1.0.0"}}),
            kube_secret(),
        ),
        spec(
            "team-a",
            "opentofu.plan",
            json!({"package": {"name": "net", "version": "1", "digest": MODULE}, "backend": {"type": "s3"}}),
            json!({}),
        ),
        spec(
            "team-a",
            "ssh.file.download",
            json!({"template_id": "download-log", "path": "/var/log/syslog"}),
            json!({"targets": [{"kind": "node", "id": "node-1"}]}),
        ),
        spec(
            "team-a",
            "ssh.service.restart",
            json!({"template_id": "restart-service", "service": "nginx"}),
            json!({"targets": [{"kind": "node", "id": "node-1"}]}),
        ),
        spec(
            "team-b",
            "verify.tcp.connect",
            json!({"host": "127.0.0.1", "port": 5432}),
            json!({}),
        ),
    ];
    for spec in &allowed {
        assert_eq!(
            refused_by(&policy, spec),
            Vec::<String>::new(),
            "{}",
            spec.operation
        );
    }
}

/// The operation, grant, requirement, cluster and chart rules.
fn tenant_and_cluster_cases() -> Vec<(JobSpec, &'static str)> {
    vec![
        (
            spec(
                "team-b",
                "verify.http.endpoint",
                json!({"url": "http://127.0.0.1/"}),
                json!({}),
            ),
            "tenants.team-b.operations",
        ),
        (
            spec(
                "team-b",
                "verify.tcp.connect",
                json!({"host": "127.0.0.1", "port": 1}),
                json!({"policy": {"explicit_command": true}}),
            ),
            "tenants.team-b.grants",
        ),
        (
            spec(
                "team-a",
                "helm.uninstall",
                json!({"cluster": cluster(), "release": "web", "namespace": "team-a"}),
                kube_secret(),
            ),
            "requires.destructive",
        ),
        (
            spec(
                "team-a",
                "kubernetes.resource.read",
                json!({"cluster": {"name": "prod", "credentials": {"$secret": "kubeconfig"}}, "namespace": "team-a",
                   "object": {"api_version": "v1", "kind": "Pod", "name": "x"}}),
                kube_secret(),
            ),
            "tenants.team-a.kubernetes.clusters",
        ),
        (
            spec(
                "team-a",
                "kubernetes.resource.read",
                json!({"cluster": cluster(), "namespace": "kube-system", "object": {"api_version": "v1", "kind": "Pod", "name": "x"}}),
                kube_secret(),
            ),
            "tenants.team-a.kubernetes.clusters.dev.namespaces",
        ),
        (
            spec(
                "team-a",
                "kubernetes.manifest.apply",
                json!({"cluster": cluster(), "namespace": "team-a",
                   "manifests": [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "x"}}]}),
                kube_secret(),
            ),
            "tenants.team-a.kubernetes.clusters.dev.cluster_scoped",
        ),
        (
            spec(
                "team-a",
                "helm.template",
                json!({"release": "web", "namespace": "team-a",
                   "chart": {"repository": "https://charts.example.com.evil/stable", "name": "web", "version": "1"}}),
                json!({}),
            ),
            "tenants.team-a.helm.chart_sources",
        ),
    ]
}

/// The package, template, node and module rules.
fn package_and_node_cases() -> Vec<(JobSpec, &'static str)> {
    let node = json!({"targets": [{"kind": "node", "id": "node-1"}]});
    vec![
        (
            spec(
                "team-a",
                "ansible.playbook.run",
                json!({"package": {"name": "web", "version": "1", "digest": format!("sha256:{}", "3".repeat(64))}, "playbook": "site.yml"}),
                json!({}),
            ),
            "tenants.team-a.ansible.packages",
        ),
        (
            spec(
                "team-a",
                "ansible.playbook.run",
                json!({"package": {"name": "web", "version": "1", "digest": PACKAGE}, "playbook": "scripts/cleanup.yml"}),
                json!({}),
            ),
            "tenants.team-a.ansible.packages.playbooks",
        ),
        (
            spec(
                "team-a",
                "ansible.role.run",
                json!({"package": {"name": "web", "version": "1", "digest": PACKAGE}, "role": "db"}),
                json!({}),
            ),
            "tenants.team-a.ansible.packages.roles",
        ),
        (
            spec(
                "team-a",
                "ssh.command.run",
                json!({"template_id": "reboot"}),
                node.clone(),
            ),
            "tenants.team-a.ssh.templates",
        ),
        (
            spec(
                "team-a",
                "ssh.command.run",
                json!({"template_id": "greet", "args": {"name": "$(id)"}}),
                node.clone(),
            ),
            "tenants.team-a.ssh.templates",
        ),
        (
            spec(
                "team-a",
                "ssh.command.run",
                json!({"template_id": "uptime", "sudo": true}),
                node.clone(),
            ),
            "tenants.team-a.ssh.templates",
        ),
        (
            spec(
                "team-a",
                "ssh.file.upload",
                json!({"template_id": "upload", "source_artifact": PACKAGE, "destination": "/srv/drop/../../etc/cron.d/x"}),
                node.clone(),
            ),
            "tenants.team-a.ssh.templates",
        ),
        (
            spec(
                "team-a",
                "ssh.file.download",
                json!({"template_id": "download-log", "path": "/etc/shadow"}),
                node.clone(),
            ),
            "tenants.team-a.ssh.templates",
        ),
        (
            spec(
                "team-a",
                "ssh.service.restart",
                json!({"template_id": "restart-service", "service": "sshd"}),
                node.clone(),
            ),
            "tenants.team-a.ssh.templates",
        ),
        (
            spec(
                "team-a",
                "ssh.command.run",
                json!({"template_id": "uptime"}),
                json!({"targets": [{"kind": "node", "id": "node-1", "address": "203.0.113.9"}]}),
            ),
            "tenants.team-a.ssh.nodes",
        ),
        (
            // A node's port is a service of it that ansible's plays reach:
            // the operator's to list, 22 by default.
            spec(
                "team-a",
                "ssh.command.run",
                json!({"template_id": "uptime"}),
                json!({"targets": [{"kind": "node", "id": "node-1", "attributes": {"port": "6443"}}]}),
            ),
            "tenants.team-a.ssh.ports",
        ),
        (
            // Every operation's targets take node keys, so a tenant names
            // only its own nodes, whatever it runs (a probe naming
            // team-a's node would hold team-a's node key).
            spec(
                "team-b",
                "verify.tcp.connect",
                json!({"host": "127.0.0.1", "port": 5432}),
                json!({"targets": [{"kind": "node", "id": "node-1"}]}),
            ),
            "tenants.team-b.ssh.nodes",
        ),
        (
            spec(
                "team-a",
                "opentofu.plan",
                json!({"package": {"name": "net", "version": "1", "digest": PACKAGE}}),
                json!({}),
            ),
            "tenants.team-a.opentofu.modules",
        ),
        (
            spec(
                "team-a",
                "opentofu.plan",
                json!({"package": {"name": "net", "version": "1", "digest": MODULE}, "backend": {"type": "http"}}),
                json!({}),
            ),
            "tenants.team-a.opentofu.backends",
        ),
        (
            spec(
                "team-a",
                "opentofu.plan",
                json!({"package": {"name": "net", "version": "1", "digest": MODULE}, "env": {"GITHUB_ORG": "x"}}),
                json!({}),
            ),
            "tenants.team-a.opentofu.env",
        ),
    ]
}

#[test]
fn every_class_of_rule_refuses_and_names_itself() {
    let policy = example();
    let cases = tenant_and_cluster_cases()
        .into_iter()
        .chain(package_and_node_cases());
    for (spec, rule) in cases {
        let refused = refused_by(&policy, &spec);
        assert_eq!(refused, [rule], "{} ({})", spec.operation, spec.tenant);
    }
}

#[test]
fn a_bad_policy_file_names_every_problem_at_once() {
    // An unknown grant is a parse error, reported alone.
    let problems =
        OperatorPolicy::from_yaml("tenants:\n  a:\n    grants: [everything]\n").unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("everything"), "{problems:?}");
    // Everything else is reported at once.
    let problems = OperatorPolicy::from_yaml(
        r#"
        defaults:
          operations: ["helm.explode"]
        requires:
          destructive: ["nothing.*"]
        ssh_templates:
          t:
            program: uptime
            args: [{name: n, type: int}]
        tenants:
          a:
            ssh: {templates: [missing]}
            ansible: {packages: [{digest: "md5:1"}]}
            opentofu: {env: [AWS_REGION, TF_CLI_ARGS, LD_PRELOAD, lower]}
        "#,
    )
    .unwrap_err();
    let text = problems.join("\n");
    for expected in [
        "requires.destructive",
        "ssh_templates.t: program",
        "ssh_templates.t: argument `n`",
        "tenant {defaults}: operations",
        "tenant a: ssh.templates: `missing`",
        "tenant a: ansible.packages: `md5:1`",
        "tenant a: opentofu.env: `TF_CLI_ARGS`",
        "tenant a: opentofu.env: `LD_PRELOAD`",
        "tenant a: opentofu.env: `lower`",
    ] {
        assert!(text.contains(expected), "{expected} missing from:\n{text}");
    }
}

#[test]
fn a_generated_secret_goes_only_where_the_tenant_may_write() {
    let policy = example();
    let generated = |path: &str| {
        spec(
            "team-a",
            "verify.http.endpoint",
            json!({"url": "https://api.example.com/", "headers": {"authorization": {"$secret": "made"}}}),
            json!({"secret_refs": [{"name": "made", "mount": "secret", "path": path,
                                    "key": "k", "generate": {}}]}),
        )
    };
    assert!(policy.check_jobspec(&generated("team-a/made")).is_empty());
    // Readable, shared, not the tenant's to write.
    let problems = policy.check_jobspec(&generated("shared/made"));
    let paths: Vec<&str> = problems
        .iter()
        .map(|problem| problem.path.as_str())
        .collect();
    assert_eq!(paths, ["secret_refs[0].generate"], "{problems:?}");
}

#[test]
fn a_location_reserved_after_a_tenant_s_rules_were_built_applies_to_them() {
    // The rules are built once and kept (`TenantMemo`): reserving a
    // location afterwards must not leave the kept ones without it.
    let mut policy = OperatorPolicy::default();
    let path = "execplane/team-b/callbacks";
    assert!(policy.tenant("execplane").secret_allowed("secret", path));
    policy.reserve_secrets(("secret".into(), "execplane/{tenant}/callbacks".into()));
    assert!(!policy.tenant("execplane").secret_allowed("secret", path));
    // A copy is the same policy, with nothing built.
    assert_eq!(policy.clone(), policy);
    assert!(!policy
        .clone()
        .tenant("execplane")
        .secret_allowed("secret", path));
}

#[test]
fn the_callback_signing_secrets_are_no_tenant_s_to_read_or_write() {
    // Tenant `execplane`'s default prefix `*/execplane/` covers every
    // tenant's signing secrets at secret/execplane/{tenant}/callbacks.
    let mut policy = OperatorPolicy::default();
    policy.reserve_secrets(("secret".into(), "execplane/{tenant}/callbacks".into()));
    let tenant = policy.tenant("execplane");
    assert!(tenant.secret_allowed("secret", "execplane/other"));
    for path in [
        "execplane/team-b/callbacks",
        "/execplane//team-b/callbacks/",
    ] {
        assert!(!tenant.secret_allowed("secret", path), "{path}");
        assert!(!tenant.secret_writable("secret", path), "{path}");
    }
    let reading = spec(
        "execplane",
        "verify.http.endpoint",
        json!({"url": "https://api.example.com/", "headers": {"authorization": {"$secret": "s"}}}),
        json!({"secret_refs": [{"name": "s", "mount": "secret",
                                "path": "execplane/team-b/callbacks", "key": "signing_secrets"}]}),
    );
    let problems = policy.check_jobspec(&reading);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].path, "secret_refs[0]");
    assert!(problems[0].message.contains("callback signing secrets"));
    // A sensitive output is a write the JobSpec names outside secret_refs.
    let writing = spec(
        "execplane",
        "opentofu.output",
        json!({"package": {"name": "m", "version": "1.0.0", "digest": format!("sha256:{}", "0".repeat(64))},
               "sensitive_outputs_to": {"mount": "secret", "path": "execplane/team-b/callbacks"}}),
        json!({}),
    );
    let problems = policy.check_jobspec(&writing);
    assert!(
        problems
            .iter()
            .any(|problem| problem.path == "inputs.sensitive_outputs_to"
                && problem.message.contains("callback signing secrets")),
        "{problems:?}"
    );
}
