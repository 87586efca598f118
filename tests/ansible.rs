//! The ansible runner with the stack's ansible-core (scripts/ansible.sh)
//! against the real sshd of scripts/sshd.sh, over SSH: two inventory hosts
//! (`one` at 127.0.0.1:2222, `two` at localhost:2222, both the test user
//! on this machine). A package built here, approved by digest, holds the
//! playbooks and a role.

mod common;

use std::time::Duration;

use common::bao::Bao;
use common::pipeline::{job, Pipeline};
use common::sshd::{self, host_key};
use execplane::contract::{EventBody, JobSpec, RunnerType};
use serde_json::{json, Value};
use sqlx::PgPool;

const WAIT: Duration = Duration::from_secs(120);
/// The ansible runner's index in the pipeline `ansible_pipeline` starts.
const ANSIBLE_RUNNER: usize = 2;

/// The package: playbooks, a role, a playbook outside the allowlist.
const PACKAGE: [(&str, &str); 12] = [
    (
        "site.yml",
        r#"- name: one changes, two fails
  hosts: all
  gather_facts: false
  tasks:
    - name: two fails on purpose
      ansible.builtin.fail:
        msg: two fails on purpose
      when: inventory_hostname == 'two'
    - name: write the marker
      ansible.builtin.copy:
        dest: "{{ marker_dir }}/{{ inventory_hostname }}.marker"
        content: "written by {{ inventory_hostname }}\n"
        mode: "0644"
    - name: the marker is there
      ansible.builtin.stat:
        path: "{{ marker_dir }}/{{ inventory_hostname }}.marker"
      register: marker
    - name: verify the marker
      ansible.builtin.assert:
        that: marker.stat.exists
    - name: remember it
      ansible.builtin.set_fact:
        marker_written: true
"#,
    ),
    (
        "playbooks/marker.yml",
        r#"- name: only writes a marker
  hosts: all
  gather_facts: false
  tasks:
    - name: write the check marker
      ansible.builtin.copy:
        dest: "{{ marker_dir }}/{{ inventory_hostname }}.check"
        content: "should not exist in check mode\n"
"#,
    ),
    (
        "playbooks/slow.yml",
        r#"- name: waits
  hosts: one
  gather_facts: false
  tasks:
    - name: wait a long time on the node
      ansible.builtin.command: "sleep {{ seconds | default(30071) }}"
"#,
    ),
    (
        "playbooks/echo.yml",
        r#"- name: uses and echoes a secret
  hosts: one
  gather_facts: false
  tasks:
    - name: echo it
      ansible.builtin.command:
        argv: [/bin/echo, "the token is {{ api_token }}"]
    - name: show it
      ansible.builtin.debug:
        msg: "token {{ api_token }}"
"#,
    ),
    (
        "other.yml",
        "- hosts: all\n  tasks: [{ansible.builtin.ping: {}}]\n",
    ),
    // A client of the play's own, fetched over the controller's ssh client
    // (the next task would run it on the controller).
    (
        "playbooks/client.yml",
        r##"- name: replaces the controller's ssh client
  hosts: one
  gather_facts: false
  tasks:
    - name: stage a client on the node
      ansible.builtin.copy:
        dest: .execplane-test-client
        content: "#!/bin/sh\necho CONTROLLER-OWNED >&2\nexit 1\n"
        mode: "0755"
    - name: fetch it over the client, where the runner kept its own
      ansible.builtin.fetch:
        src: .execplane-test-client
        dest: "{{ playbook_dir }}/../../ssh"
        flat: true
      ignore_errors: true
    - name: fetch it over the client, where the runner keeps its own
      ansible.builtin.fetch:
        src: .execplane-test-client
        dest: "{{ playbook_dir }}/../../controller/ssh"
        flat: true
      ignore_errors: true
    - name: the next task runs the runner's client
      ansible.builtin.ping:
"##,
    ),
    // A plugin of the play's own, fetched where ansible looks for plugins.
    (
        "playbooks/plugin.yml",
        r#"- name: adds an action plugin
  hosts: one
  gather_facts: false
  tasks:
    - name: stage an action plugin on the node
      ansible.builtin.copy:
        dest: .execplane-test-plugin.py
        content: "from ansible.plugins.action import ActionBase\n\nclass ActionModule(ActionBase):\n    def run(self, tmp=None, task_vars=None):\n        return {'failed': True, 'msg': 'CONTROLLER-OWNED'}\n"
    - name: fetch it where ansible looks for plugins
      ansible.builtin.fetch:
        src: .execplane-test-plugin.py
        dest: "{{ playbook_dir }}/../../{{ item }}/plugins/action/execplane_probe.py"
        flat: true
      loop: [.ansible, controller/home]
      ignore_errors: true
    - name: a task that names it, read only now
      ansible.builtin.include_tasks: probe.yml
"#,
    ),
    // A host outside the inventory, at the port of the runner host's
    // database.
    (
        "playbooks/scan.yml",
        r#"- name: connects where its targets are not
  hosts: one
  gather_facts: false
  tasks:
    - name: a host and port of the play's own
      ansible.builtin.ping:
      delegate_to: 0.0.0.0
      port: 5432
"#,
    ),
    // A role fetched into the working directory, where ansible's last
    // search for a role by name (its current directory) would find it.
    (
        "roles/stager/tasks/main.yml",
        r#"- name: stage a role's tasks on the node
  ansible.builtin.copy:
    dest: .execplane-test-stage.yml
    content: "- name: staged\n  ansible.builtin.shell: echo CONTROLLER-$(echo OWNED)\n  delegate_to: localhost\n"
- name: fetch them where a role is looked for
  ansible.builtin.fetch:
    src: .execplane-test-stage.yml
    dest: "{{ playbook_dir }}/../{{ item }}/tasks/main.yml"
    flat: true
  loop: [stage, controller/stage]
  ignore_errors: true
- name: include a role the package does not have
  ansible.builtin.include_role:
    name: stage
"#,
    ),
    (
        "playbooks/probe.yml",
        "- name: the fetched plugin's action\n  execplane_probe: {}\n",
    ),
    // A remote command that ssh would read as its own option.
    (
        "playbooks/options.yml",
        r#"- name: passes ssh an option
  hosts: one
  gather_facts: false
  tasks:
    - name: a raw command that looks like an option
      ansible.builtin.raw: "-oProxyCommand=sh -c 'echo CONTROLLER-OWNED >&2; exit 1'"
"#,
    ),
    (
        "roles/marker/tasks/main.yml",
        r#"- name: the role writes its marker
  ansible.builtin.copy:
    dest: "{{ marker_dir }}/role-{{ inventory_hostname }}"
    content: "role marker\n"
"#,
    ),
];

/// Packages that each name `ansible_connection: local` (the controller)
/// in a way a check reading names as written would miss, and a word the
/// refusal names: each package's `play.yml` runs these tasks on `one`.
const HOSTILE: [(&str, &str); 3] = [
    // A loop variable.
    (
        r#"    - ansible.builtin.command: id -u
      loop: [local]
      loop_control:
        loop_var: ansible_connection
"#,
        "ansible_connection",
    ),
    // A fact whose name is a template, known only as it runs.
    (
        r#"    - ansible.builtin.set_fact: "{{ 'ansible_' ~ 'connection' }}=local"
    - ansible.builtin.command: id -u
"#,
        "set_fact",
    ),
    // A fact whose name hides behind a Jinja comment, which ansible
    // renders to nothing.
    (
        r#"    - ansible.builtin.set_fact:
        "{##}ansible_connection": local
    - ansible.builtin.command: id -u
"#,
        "templated key",
    ),
];

/// `files` as a gzipped tar.
fn archive(files: &[(&str, &str)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, body) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(body.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        builder
            .append_data(&mut header, path, body.as_bytes())
            .unwrap();
    }
    let tar = builder.into_inner().unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, &tar).unwrap();
    gz.finish().unwrap()
}

/// The stack's ansible-core (scripts/ansible.sh), or the one configured.
fn ansible_bin() -> String {
    std::env::var("EXECPLANE_ANSIBLE_BIN_DIR").unwrap_or_else(|_| {
        common::stack_dir()
            .join("ansible/bin")
            .display()
            .to_string()
    })
}

fn node(id: &str, address: &str, port: u16) -> Value {
    json!({"kind": "node", "id": id, "address": address,
           "attributes": {"port": port.to_string(), "host_key": host_key()}})
}

/// A running pipeline and what its jobs need.
struct Stack {
    pipeline: Pipeline,
    package: String,
    /// The approved `HOSTILE` packages' digests, in its order.
    hostile: Vec<String>,
    markers: std::path::PathBuf,
}

/// The dispatcher, relay, ansible runner (index `ANSIBLE_RUNNER`) and the
/// artifact worker, on a policy approving the package; the user's key and
/// a token in OpenBao.
async fn ansible_pipeline(pool: &PgPool, token: &str) -> Stack {
    use std::os::unix::fs::PermissionsExt;
    let mut pipeline = Pipeline::new(pool).await;
    let dir = pipeline.dir.clone();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let markers = dir.join("markers");
    std::fs::create_dir_all(&markers).unwrap();
    std::fs::set_permissions(&markers, std::fs::Permissions::from_mode(0o777)).unwrap();
    let package = pipeline.put_artifact("package.tar.gz", &archive(&PACKAGE));
    let hostile: Vec<String> = HOSTILE
        .iter()
        .enumerate()
        .map(|(index, (tasks, _))| {
            let play = format!("- hosts: one\n  gather_facts: false\n  tasks:\n{tasks}");
            pipeline.put_artifact(
                &format!("hostile-{index}.tar.gz"),
                &archive(&[("play.yml", &play)]),
            )
        })
        .collect();
    let hostile_entries: String = hostile
        .iter()
        .map(|digest| format!("        - digest: {digest}\n          playbooks: [play.yml]\n"))
        .collect();
    let policy = format!(
        r#"
tenants:
  team-a:
    operations: ["ansible.*"]
    secret_prefixes: ["secret/team-a/"]
    ansible:
      packages:
        - digest: {package}
          playbooks: ["site.yml", "playbooks/*.yml"]
          roles: [marker, stager]
{hostile_entries}    ssh:
      nodes: ["127.0.0.1", "localhost"]
      # 2229: where no sshd listens (an unreachable host).
      ports: [2222, 2229]
"#
    );
    let policy_file = dir.join("policy.yaml");
    std::fs::write(&policy_file, policy).unwrap();
    pipeline.set_env("EXECPLANE_POLICY_FILE", policy_file.to_str().unwrap());
    let bao = Bao::new();
    bao.put("team-a/ssh", json!({"private_key": sshd::user_key()}))
        .await;
    bao.put("team-a/app", json!({"token": token})).await;
    let bin = ansible_bin();
    pipeline.spawn(&["dispatcher"], &[]);
    pipeline.spawn(&["relay"], &[]);
    pipeline.spawn(
        &["runner", "ansible"],
        &[
            ("EXECPLANE_VAULT_ADDR", bao.address.as_str()),
            ("EXECPLANE_VAULT_TOKEN", bao.root.as_str()),
            ("EXECPLANE_RUNNER_STOP_GRACE", "2s"),
            ("EXECPLANE_ANSIBLE_BIN_DIR", bin.as_str()),
        ],
    );
    pipeline.spawn(
        &["artifact-worker"],
        &[("EXECPLANE_ARTIFACT_GRACE", "300ms")],
    );
    pipeline.wait_runners(1).await;
    Stack {
        pipeline,
        package,
        hostile,
        markers,
    }
}

impl Stack {
    /// A JobSpec of `operation` on `targets` with the test user's login.
    fn job(&self, operation: &str, mut inputs: Value, targets: Vec<Value>) -> JobSpec {
        inputs["user"] = json!("exectest");
        inputs["private_key"] = json!({"$secret": "ssh_key"});
        if inputs.get("package").is_none() && operation != "ansible.inventory.validate" {
            inputs["package"] = json!({"name": "test", "version": "1", "digest": self.package});
        }
        job(
            operation,
            inputs,
            json!({
                "targets": targets,
                "secret_refs": [
                    {"name": "ssh_key", "mount": "secret", "path": "team-a/ssh", "key": "private_key"},
                    {"name": "token", "mount": "secret", "path": "team-a/app", "key": "token"}
                ],
                "retry": {"max_attempts": 1},
                // ansible-playbook's start takes both cores for a moment;
                // two such tests at once once stretched the lease
                // extension's round trip past the 1.2 s a 4 s lease leaves.
                "timeouts": {"schedule_to_start": "20s", "start_to_close": "30s",
                             "heartbeat": "8s", "schedule_to_close": "60s"}
            }),
        )
    }

    fn playbook(&self, operation: &str, playbook: &str, vars: Value) -> JobSpec {
        let mut extra = json!({"marker_dir": self.markers});
        for (key, value) in vars.as_object().unwrap() {
            extra[key] = value.clone();
        }
        self.job(
            operation,
            json!({"playbook": playbook, "extra_vars": extra}),
            vec![
                node("one", "127.0.0.1", 2222),
                node("two", "localhost", 2222),
            ],
        )
    }

    /// The attempt's stored event stream.
    fn events(&self, attempt: uuid::Uuid) -> String {
        let root = self
            .pipeline
            .dir
            .join(format!("artifacts/outputs/{attempt}"));
        for entry in std::fs::read_dir(&root).unwrap() {
            let file = entry.unwrap().path().join("ansible-events.jsonl");
            if file.exists() {
                return std::fs::read_to_string(file).unwrap();
            }
        }
        panic!("no event stream under {}", root.display());
    }
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_playbook_reports_its_recap_and_check_mode_changes_nothing(pool: PgPool) {
    let stack = ansible_pipeline(&pool, "unused-token-value").await;
    let spec = stack.playbook("ansible.playbook.run", "site.yml", json!({}));
    stack.pipeline.submit(&spec).await;
    let (status, category, message, result) = stack.pipeline.ended(&spec, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("runner_error")),
        "{message} {result}"
    );
    assert!(message.contains("failed on two"), "{message}");
    assert_eq!(result["changed_hosts"], json!(["one"]), "{result}");
    assert_eq!(result["failed_hosts"], json!(["two"]));
    assert_eq!(result["recap"]["one"]["changed"], 1);
    assert_eq!(result["recap"]["two"]["failed"], 1);
    assert_eq!(result["exit_code"], 2);
    assert_eq!(result["facts"]["one"]["marker_written"], true);
    assert_eq!(result["evidence"][0]["host"], "one");
    assert_eq!(result["evidence"][0]["passed"], true);
    assert_eq!(result["events_artifact"], "ansible-events.jsonl");
    assert!(stack.markers.join("one.marker").exists());
    assert!(!stack.markers.join("two.marker").exists());
    // The event stream: every task's results, the recap last.
    let attempt = stack.pipeline.attempts(&spec.job_id).await[0].0;
    let events = stack.events(attempt);
    let lines: Vec<Value> = events
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.last().unwrap()["event"], "stats");
    let line = result["evidence"][0]["event_line"].as_u64().unwrap() as usize;
    assert_eq!(lines[line - 1]["action"], "ansible.builtin.assert");
    // Progress while it ran: its tasks by name (the runner SDK sends the
    // latest progress at its own pace, so not necessarily every one).
    let stored = stack.pipeline.stored_events().await;
    let progress: Vec<&str> = stored[&attempt]
        .iter()
        .filter_map(|event| match &event.body {
            EventBody::Progress { message, .. } => Some(message.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        progress.iter().any(|message| message.starts_with("task ")),
        "{progress:?}"
    );

    // Check mode: `one` and `two` would change; nothing is written.
    let spec = stack.playbook("ansible.check_mode.run", "playbooks/marker.yml", json!({}));
    stack.pipeline.submit(&spec).await;
    let (status, category, message, result) = stack.pipeline.ended(&spec, WAIT).await;
    assert_eq!(status, "succeeded", "{category:?} {message} {result}");
    assert_eq!(result["check_mode"], true);
    assert_eq!(result["changed_hosts"], json!(["one", "two"]), "{result}");
    assert!(!stack.markers.join("one.check").exists());
    assert!(!stack.markers.join("two.check").exists());

    // A role of the package, applied.
    let spec = stack.job(
        "ansible.role.run",
        json!({"role": "marker", "vars": {"marker_dir": stack.markers}}),
        vec![node("one", "127.0.0.1", 2222)],
    );
    stack.pipeline.submit(&spec).await;
    let (status, category, message, result) = stack.pipeline.ended(&spec, WAIT).await;
    assert_eq!(status, "succeeded", "{category:?} {message} {result}");
    assert_eq!(result["role"], "marker");
    assert_eq!(
        std::fs::read_to_string(stack.markers.join("role-one")).unwrap(),
        "role marker\n"
    );
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn unapproved_playbooks_and_ansible_variables_are_refused_before_anything_runs(pool: PgPool) {
    let stack = ansible_pipeline(&pool, "unused-token-value").await;
    for playbook in [
        "other.yml",
        "../site.yml",
        "playbooks/../site.yml",
        "/etc/site.yml",
    ] {
        // Past the client's own validation, straight to intake.
        let mut spec = stack.playbook("ansible.playbook.run", "site.yml", json!({}));
        spec.inputs["playbook"] = json!(playbook);
        stack.pipeline.submit(&spec).await;
        let (status, category, message, _) = stack.pipeline.ended(&spec, WAIT).await;
        assert_eq!(status, "rejected", "{playbook}: {category:?} {message}");
        assert!(message.contains("playbook"), "{playbook}: {message}");
    }
    // The JobSpec may not choose how ansible connects.
    let spec = stack.playbook(
        "ansible.playbook.run",
        "site.yml",
        json!({"ansible_connection": "local"}),
    );
    stack.pipeline.submit(&spec).await;
    let (status, category, message, _) = stack.pipeline.ended(&spec, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("policy")),
        "{message}"
    );
    // Nor may an inventory artifact.
    let inventory = stack.pipeline.put_artifact(
        "local.ini",
        b"[web]\none ansible_host=127.0.0.1 ansible_port=2222 ansible_connection=local\n",
    );
    let spec = stack.job(
        "ansible.playbook.run",
        json!({"playbook": "site.yml", "inventory": {"artifact": inventory},
               "extra_vars": {"marker_dir": stack.markers}}),
        vec![node("one", "127.0.0.1", 2222)],
    );
    stack.pipeline.submit(&spec).await;
    let (status, category, message, _) = stack.pipeline.ended(&spec, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("policy")),
        "{message}"
    );
    assert!(message.contains("ansible_connection"), "{message}");
    assert!(!stack.markers.join("one.marker").exists());
    // Nor escalate, nor hide a template in a value.
    for (name, line) in [
        (
            "become.ini",
            "one ansible_host=127.0.0.1 ansible_port=2222 ansible_become=true\n",
        ),
        (
            "ssh-host.ini",
            "one ansible_ssh_host=127.0.0.1 ansible_host=127.0.0.1 ansible_port=2222\n",
        ),
        (
            "template.ini",
            "one ansible_host=127.0.0.1 ansible_port=2222 motd=\"{{ lookup('pipe', 'id') }}\"\n",
        ),
    ] {
        let inventory = stack
            .pipeline
            .put_artifact(name, format!("[web]\n{line}").as_bytes());
        let spec = stack.job(
            "ansible.playbook.run",
            json!({"playbook": "site.yml", "inventory": {"artifact": inventory},
                   "extra_vars": {"marker_dir": stack.markers}}),
            vec![node("one", "127.0.0.1", 2222)],
        );
        stack.pipeline.submit(&spec).await;
        let (status, category, message, _) = stack.pipeline.ended(&spec, WAIT).await;
        assert_eq!(
            (status.as_str(), category.as_deref()),
            ("failed", Some("policy")),
            "{name}: {message}"
        );
    }
    assert!(!stack.markers.join("one.marker").exists());
    // A JobSpec's value is text, never a template ansible renders: the
    // lookup would run a command on the runner's host.
    let witness =
        std::env::temp_dir().join(format!("execplane-jinja-{}", uuid::Uuid::new_v4().simple()));
    let spec = stack.job(
        "ansible.playbook.run",
        json!({"playbook": "playbooks/marker.yml",
               "extra_vars": {"marker_dir": format!("{{{{ lookup('pipe', 'touch {}') }}}}", witness.display())}}),
        vec![node("one", "127.0.0.1", 2222)],
    );
    stack.pipeline.submit(&spec).await;
    let (status, _, message, _) = stack.pipeline.ended(&spec, WAIT).await;
    assert_eq!(status, "failed", "the literal is no directory: {message}");
    assert!(!witness.exists(), "the template ran: {}", witness.display());
}

/// A play may not run code on the controller by changing what the
/// controller runs (its ssh client), by handing ssh an option, or by
/// naming its connection through a loop variable.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_play_reaches_the_controller_neither_through_its_ssh_client_nor_by_loop(pool: PgPool) {
    let stack = ansible_pipeline(&pool, "unused-token-value").await;
    let mut ended = Vec::new();
    for playbook in [
        "playbooks/client.yml",
        "playbooks/plugin.yml",
        "playbooks/options.yml",
        "playbooks/scan.yml",
        "roles/stager",
    ] {
        let inputs = match playbook.strip_prefix("roles/") {
            Some(role) => json!({"role": role}),
            None => json!({"playbook": playbook}),
        };
        let operation = match playbook.starts_with("roles/") {
            true => "ansible.role.run",
            false => "ansible.playbook.run",
        };
        let spec = stack.job(operation, inputs, vec![node("one", "127.0.0.1", 2222)]);
        stack.pipeline.submit(&spec).await;
        let (status, category, message, _) = stack.pipeline.ended(&spec, WAIT).await;
        let attempt = stack.pipeline.attempts(&spec.job_id).await[0].0;
        ended.push((playbook, attempt, status, category, message));
    }
    let output = stack.pipeline.tool_output().await;
    for (playbook, attempt, status, category, message) in ended {
        let seen = output
            .get(&attempt.to_string())
            .cloned()
            .unwrap_or_default()
            + &stack.events(attempt);
        assert!(!seen.contains("CONTROLLER-OWNED"), "{playbook}: {seen}");
        let expected = match playbook {
            // The runner's ssh client is out of the play's reach: the
            // ping after the fetches runs.
            "playbooks/client.yml" => ("succeeded", None),
            // The runner's ssh client connects to the targets only.
            "playbooks/scan.yml" => {
                assert!(
                    seen.contains("0.0.0.0 port 5432 is not one of the attempt's targets"),
                    "{seen}"
                );
                ("failed", Some("target_unreachable"))
            }
            // `execplane_probe` is no plugin, so a module, which the node
            // does not have; the raw command is the node's, which has no
            // such command; the staged file is in no place ansible looks.
            _ => ("failed", Some("runner_error")),
        };
        assert_eq!(
            (status.as_str(), category.as_deref()),
            expected,
            "{playbook}: {message}"
        );
    }

    for (digest, (_, named)) in stack.hostile.iter().zip(HOSTILE) {
        let spec = stack.job(
            "ansible.playbook.run",
            json!({"playbook": "play.yml",
                   "package": {"name": "hostile", "version": "1", "digest": digest}}),
            vec![node("one", "127.0.0.1", 2222)],
        );
        stack.pipeline.submit(&spec).await;
        let (status, category, message, result) = stack.pipeline.ended(&spec, WAIT).await;
        assert_eq!(
            (status.as_str(), category.as_deref()),
            ("failed", Some("policy")),
            "{named}: {message} {result}"
        );
        assert!(message.contains(named), "{message}");
    }
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn inventory_validation_names_the_bad_group_and_the_unreachable_host(pool: PgPool) {
    let stack = ansible_pipeline(&pool, "unused-token-value").await;
    let good = stack.pipeline.put_artifact(
        "good.ini",
        b"[web]\none ansible_host=127.0.0.1 ansible_port=2222\n",
    );
    let bad_group = stack.pipeline.put_artifact(
        "bad.ini",
        b"[web-servers]\none ansible_host=127.0.0.1 ansible_port=2222\n",
    );
    let validate = |inventory: Value, targets: Vec<Value>| {
        stack.job(
            "ansible.inventory.validate",
            json!({"inventory": inventory}),
            targets,
        )
    };
    // The node pinned by its host key's fingerprint rather than the key.
    let pin = sshd::host_key_fingerprint();
    let mut pinned = node("one", "127.0.0.1", 2222);
    pinned["attributes"] = json!({"port": "2222", "host_key_fingerprint": pin});
    let spec = validate(json!({"artifact": good}), vec![pinned]);
    stack.pipeline.submit(&spec).await;
    let (status, category, message, result) = stack.pipeline.ended(&spec, WAIT).await;
    assert_eq!(status, "succeeded", "{category:?} {message} {result}");
    assert_eq!(result["inventory"]["groups"]["web"], json!(["one"]));

    let spec = validate(
        json!({"artifact": bad_group}),
        vec![node("one", "127.0.0.1", 2222)],
    );
    stack.pipeline.submit(&spec).await;
    let (status, category, message, _) = stack.pipeline.ended(&spec, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("verification_failed")),
        "{message}"
    );
    assert!(message.contains("group `web-servers`"), "{message}");

    // A host named by a template, plainly or through a YAML escape (`\x7b`
    // is `{`): ansible renders a host's name on the runner host, so the
    // lookup would run there. Checked as ansible read the inventory.
    for (name, host) in [
        ("plain.yml", "{{ lookup('pipe', 'id -u') }}"),
        ("escaped.yml", "\\x7b\\x7b lookup('pipe', 'id -u') }}"),
    ] {
        let text = format!(
            "all:\n  hosts:\n    \"{host}\":\n      ansible_host: 127.0.0.1\n      ansible_port: 2222\n"
        );
        let inventory = stack.pipeline.put_artifact(name, text.as_bytes());
        let spec = validate(
            json!({"artifact": inventory}),
            vec![node("one", "127.0.0.1", 2222)],
        );
        stack.pipeline.submit(&spec).await;
        let (status, category, message, _) = stack.pipeline.ended(&spec, WAIT).await;
        assert_eq!(
            (status.as_str(), category.as_deref()),
            ("failed", Some("policy")),
            "{name}: {message}"
        );
        assert!(
            message.contains("`{{ lookup('pipe', 'id -u') }}`: its name holds a Jinja template"),
            "{name}: {message}"
        );
    }

    // A target nothing answers for.
    let spec = validate(
        json!({"from_targets": true}),
        vec![
            node("one", "127.0.0.1", 2222),
            node("ghost", "127.0.0.1", 2229),
        ],
    );
    stack.pipeline.submit(&spec).await;
    let (status, category, message, result) = stack.pipeline.ended(&spec, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("verification_failed")),
        "{message}"
    );
    assert!(message.contains("host `ghost` is unreachable"), "{message}");
    assert_eq!(result["unreachable_hosts"], json!(["ghost"]));
}

/// Whether a process on this host (the runner's and the node's) runs
/// exactly `argv`.
fn running(argv: &[&str]) -> bool {
    let wanted: Vec<u8> = argv
        .iter()
        .flat_map(|word| [word.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .any(|entry| {
            std::fs::read(entry.path().join("cmdline")).is_ok_and(|cmdline| cmdline == wanted)
        })
}

/// The task of `playbooks/slow.yml`, as the node runs it.
const SLOW_TASK: [&str; 2] = ["sleep", "30071"];

/// Whether an ansible-playbook process runs `playbook` (the runner is on
/// this host).
fn playing(playbook: &str) -> bool {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .any(|entry| {
            std::fs::read(entry.path().join("cmdline")).is_ok_and(|cmdline| {
                let text = String::from_utf8_lossy(&cmdline);
                text.contains("ansible-playbook") && text.contains(playbook)
            })
        })
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn a_killed_runner_takes_ansible_with_it_and_leaves_the_attempt_unknown(pool: PgPool) {
    let mut stack = ansible_pipeline(&pool, "unused-token-value").await;
    let mut spec = stack.playbook("ansible.playbook.run", "playbooks/slow.yml", json!({}));
    spec.retry.max_attempts = 3;
    stack.pipeline.submit(&spec).await;
    stack
        .pipeline
        .wait_status(&spec.job_id, "running", WAIT)
        .await;
    stack
        .pipeline
        .wait("the task to run on the node", WAIT, || async {
            running(&SLOW_TASK)
        })
        .await;
    stack.pipeline.signal(ANSIBLE_RUNNER, "KILL");
    stack
        .pipeline
        .wait(
            "ansible and its task to be gone with its runner",
            Duration::from_secs(15),
            || async { !playing("slow.yml") && !running(&SLOW_TASK) },
        )
        .await;
    let attempts = stack.pipeline.wait_done(&spec.job_id, WAIT).await;
    assert_eq!(attempts.len(), 1, "never retried: {attempts:?}");
    assert_eq!(attempts[0].1, "outcome_unknown", "{attempts:?}");
}

/// The conformance suite (`common::conformance`): the long job sleeps on
/// the node for a time of its own, the echo prints a Vault secret that is
/// not ASCII (JSON writers that escape it, `\u00f6`, would slip past a
/// masker that knows the value only as it is).
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn the_ansible_runner_conforms(pool: PgPool) {
    let secret = format!("tök-{}-ü", uuid::Uuid::new_v4().simple());
    let stack = ansible_pipeline(&pool, &secret).await;
    let seconds = 40_000 + uuid::Uuid::new_v4().as_u128() % 20_000;
    let fixture = common::conformance::Fixture {
        long: common::conformance::Long::twice(
            stack.playbook(
                "ansible.playbook.run",
                "playbooks/slow.yml",
                json!({"seconds": seconds}),
            ),
            vec![format!("sleep {seconds}")],
        ),
        echo: stack.playbook(
            "ansible.playbook.run",
            "playbooks/echo.yml",
            json!({"api_token": {"$secret": "token"}}),
        ),
        secret,
        echo_in_output: true,
        artifacts: stack.pipeline.dir.clone(),
    };
    common::conformance::suite(RunnerType::Ansible, &stack.pipeline, fixture).await;
}

/// The README's ssh and ansible examples, rendered for this machine by
/// scripts/examples.sh (as the demo renders them), each to the end the
/// README's table gives it.
#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn the_ssh_and_ansible_examples_run_to_the_end_the_readme_gives_them(pool: PgPool) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let expected: Vec<(String, String)> = readme
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("| `examples/")?;
            let path = rest.split('`').next()?;
            let (runner, file) = path.split_once('/')?;
            if runner != "ssh" && runner != "ansible" {
                return None;
            }
            let end = line.rsplit('|').nth(1)?.trim().trim_matches('`');
            Some((format!("{runner}-{file}"), end.to_owned()))
        })
        .collect();
    let mut on_disk: Vec<String> = ["ssh", "ansible"]
        .iter()
        .flat_map(|runner| {
            std::fs::read_dir(root.join("examples").join(runner))
                .unwrap()
                .map(move |entry| {
                    format!("{runner}-{}", entry.unwrap().file_name().to_string_lossy())
                })
        })
        .filter(|name| name.ends_with(".json"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = expected.iter().map(|(name, _)| name.clone()).collect();
    listed.sort();
    assert_eq!(listed, on_disk, "the README's table lists every example");

    let mut pipeline = Pipeline::new(&pool).await;
    let out = pipeline.dir.join("examples");
    let rendered = std::process::Command::new(root.join("scripts/examples.sh"))
        .arg(env!("CARGO_BIN_EXE_execplane"))
        .arg(&out)
        .env("EXECPLANE_ARTIFACT_DIR", pipeline.dir.join("artifacts"))
        .output()
        .unwrap();
    assert!(rendered.status.success(), "{rendered:?}");
    pipeline.set_env(
        "EXECPLANE_POLICY_FILE",
        out.join("policy.yaml").to_str().unwrap(),
    );
    let bao = Bao::new();
    bao.put("team-a/ssh", json!({"private_key": sshd::user_key()}))
        .await;
    let bin = ansible_bin();
    let vault = [
        ("EXECPLANE_VAULT_ADDR", bao.address.as_str()),
        ("EXECPLANE_VAULT_TOKEN", bao.root.as_str()),
        ("EXECPLANE_ANSIBLE_BIN_DIR", bin.as_str()),
    ];
    pipeline.spawn(&["dispatcher"], &[]);
    pipeline.spawn(&["relay"], &[]);
    pipeline.spawn(&["runner", "ssh"], &vault);
    pipeline.spawn(&["runner", "ansible"], &vault);
    pipeline.wait_runners(2).await;
    for (name, end) in &expected {
        let text = std::fs::read_to_string(out.join("jobs").join(name)).unwrap();
        let value: Value = serde_json::from_str(&text).unwrap();
        let spec = execplane::contract::validate_jobspec(&value)
            .unwrap_or_else(|problems| panic!("{name}: {problems}"));
        pipeline.submit(&spec).await;
        let attempts = pipeline.wait_done(&spec.job_id, WAIT).await;
        let message: Option<String> =
            sqlx::query_scalar("SELECT message FROM attempts WHERE job_id = $1")
                .bind(&spec.job_id)
                .fetch_one(&pool)
                .await
                .unwrap();
        assert_eq!(
            &attempts.last().unwrap().1,
            end,
            "{name}: {attempts:?} {message:?}"
        );
    }
    let node = out.join("node");
    assert!(node.join("markers/one.motd").exists() && node.join("markers/role-one.motd").exists());
    if let Ok(pid) = std::fs::read_to_string(node.join("svc/demo.pid")) {
        let _ = std::process::Command::new("kill").arg(pid.trim()).status();
    }
}

/// A package whose play runs a task on the controller: it says which uid
/// it runs as, which working directories it can see under the work root,
/// and whether it can read the runner's environment.
const CONTROLLER_PLAY: &str = r#"- name: a task on the controller
  hosts: all
  gather_facts: false
  tasks:
    - name: look around the runner's host
      ansible.builtin.shell: |
        echo "start=$(date +%s%N)"
        echo "uid=$(id -u)"
        echo "home=$HOME"
        echo "visible=$(ls -A '{{ work_root }}' 2>/dev/null | tr '\n' ' ')"
        if cat /proc/{{ runner_pid }}/environ >/dev/null 2>&1; then echo environ=read; else echo environ=denied; fi
        if timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{{ open_port }}' 2>/dev/null; then echo open=reached; else echo open=refused; fi
        if timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{{ granted_port }}' 2>/dev/null; then echo granted=reached; else echo granted=refused; fi
        sleep 4
        echo "end=$(date +%s%N)"
      delegate_to: localhost
      register: seen
    - name: report it
      ansible.builtin.debug:
        msg: "{{ seen.stdout_lines }}"
"#;

/// A play that removes its own event stream on the controller, then
/// fails: a run without the evidence of what it did.
const ERASING_PLAY: &str = r#"- name: a play that erases its own evidence
  hosts: all
  gather_facts: false
  tasks:
    - name: remove the event stream
      ansible.builtin.shell: rm -f "$EXECPLANE_ANSIBLE_EVENTS"
      delegate_to: localhost
    - name: then fail
      ansible.builtin.fail:
        msg: nothing to see
"#;

/// A play that swaps its event stream on the controller for a FIFO,
/// which the runner reads as root: it must refuse it, never wait on it.
const FIFO_PLAY: &str = r#"- name: a play that leaves a FIFO for its evidence
  hosts: all
  gather_facts: false
  tasks:
    - name: swap the event stream for a FIFO
      ansible.builtin.shell: rm -f "$EXECPLANE_ANSIBLE_EVENTS"; mkfifo "$EXECPLANE_ANSIBLE_EVENTS"
      delegate_to: localhost
"#;

/// `key=value` of the controller task's report in `output`.
fn reported(output: &str, key: &str) -> String {
    let needle = format!("{key}=");
    let at = output
        .find(&needle)
        .unwrap_or_else(|| panic!("no {key} in {output}"));
    output[at + needle.len()..]
        .split(['"', '\n', ','])
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

#[sqlx::test(migrator = "execplane::store::MIGRATOR")]
async fn controller_tasks_run_only_where_allowed_and_then_only_inside_the_attempts_sandbox(
    pool: PgPool,
) {
    let mut pipeline = Pipeline::new(&pool).await;
    let archive = {
        let mut builder = tar::Builder::new(Vec::new());
        for (name, play) in [
            ("local.yml", CONTROLLER_PLAY),
            ("erase.yml", ERASING_PLAY),
            ("fifo.yml", FIFO_PLAY),
        ] {
            let mut header = tar::Header::new_gnu();
            header.set_size(play.len() as u64);
            header.set_mode(0o644);
            builder
                .append_data(&mut header, name, play.as_bytes())
                .unwrap();
        }
        builder.into_inner().unwrap()
    };
    let package = pipeline.put_artifact("controller.tar", &archive);
    // team-a and team-b may run it on the controller; team-c may not.
    // Two services of the host's that are not the platform's: the play may
    // reach neither (its nodes only), but team-a's the second, which the
    // operator's policy grants its package.
    let open = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let granted = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (open_port, granted_port) = (
        open.local_addr().unwrap().port(),
        granted.local_addr().unwrap().port(),
    );
    let tenant = |name: &str, controller: bool, node: &str, egress: &str| {
        format!(
            "  {name}:\n    operations: [\"ansible.*\"]\n    secret_prefixes: [\"secret/{name}/\"]\n    ansible:\n      packages:\n        - digest: {package}\n          playbooks: [local.yml, erase.yml, fifo.yml]\n          controller: {controller}\n          egress: [{egress}]\n    ssh:\n      nodes: [\"{node}\"]\n      ports: [2222]\n"
        )
    };
    let policy = format!(
        "tenants:\n{}{}{}",
        tenant(
            "team-a",
            true,
            "127.0.0.1",
            &format!("\"127.0.0.1:{granted_port}\"")
        ),
        tenant("team-b", true, "localhost", ""),
        tenant("team-c", false, "127.0.0.1", ""),
    );
    let policy_file = pipeline.dir.join("policy.yaml");
    std::fs::write(&policy_file, policy).unwrap();
    pipeline.set_env("EXECPLANE_POLICY_FILE", policy_file.to_str().unwrap());
    let bao = Bao::new();
    for name in ["team-a", "team-b", "team-c"] {
        bao.put(
            &format!("{name}/ssh"),
            json!({"private_key": sshd::user_key()}),
        )
        .await;
    }
    let bin = ansible_bin();
    pipeline.spawn(&["dispatcher"], &[]);
    pipeline.spawn(&["relay"], &[]);
    let runner = pipeline.spawn(
        &["runner", "ansible"],
        &[
            ("EXECPLANE_VAULT_ADDR", bao.address.as_str()),
            ("EXECPLANE_VAULT_TOKEN", bao.root.as_str()),
            ("EXECPLANE_ANSIBLE_BIN_DIR", bin.as_str()),
            ("EXECPLANE_RUNNER_CAPACITY", "4"),
        ],
    );
    pipeline.wait_runners(1).await;
    let runner_pid = pipeline.pid(runner);
    let work_root = std::env::temp_dir().join("execplane-work");
    let spec = |tenant: &str, address: &str| {
        let mut spec = job(
            "ansible.playbook.run",
            json!({
                "package": {"name": "controller", "version": "1", "digest": package},
                "playbook": "local.yml",
                "user": "exectest",
                "private_key": {"$secret": "ssh_key"},
                "extra_vars": {
                    "work_root": work_root,
                    "runner_pid": runner_pid.to_string(),
                    "open_port": open_port.to_string(),
                    "granted_port": granted_port.to_string(),
                },
            }),
            json!({
                "targets": [node("one", address, 2222)],
                "secret_refs": [{"name": "ssh_key", "mount": "secret", "path": format!("{tenant}/ssh"), "key": "private_key"}],
                "retry": {"max_attempts": 1}
            }),
        );
        spec.tenant = tenant.into();
        spec
    };

    // Not allowed for team-c: refused before ansible starts.
    let refused = spec("team-c", "127.0.0.1");
    pipeline.submit(&refused).await;
    let (status, category, message, _) = pipeline.ended(&refused, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("policy")),
        "{message}"
    );
    assert!(
        message.contains("delegate_to") && message.contains("controller: true"),
        "{message}"
    );

    // Allowed for team-a and team-b, both at once: each runs as a uid of
    // its own (not the runner's), sees no other attempt's directory, and
    // cannot read the runner's environment.
    let (a, b) = (spec("team-a", "127.0.0.1"), spec("team-b", "localhost"));
    pipeline.submit(&a).await;
    pipeline.submit(&b).await;
    for spec in [&a, &b] {
        let (status, _, message, _) = pipeline.ended(spec, WAIT).await;
        assert_eq!(status, "succeeded", "{}: {message}", spec.tenant);
    }
    let output = pipeline.tool_output().await;
    let mut seen = Vec::new();
    for spec in [&a, &b] {
        let id: uuid::Uuid =
            sqlx::query_scalar("SELECT attempt_id FROM attempts WHERE job_id = $1")
                .bind(&spec.job_id)
                .fetch_one(&pool)
                .await
                .unwrap();
        seen.push(output[&id.to_string()].clone());
    }
    let (seen_a, seen_b) = (seen[0].clone(), seen[1].clone());
    let runner_uid = rustix::process::getuid().as_raw().to_string();
    let (uid_a, uid_b) = (reported(&seen_a, "uid"), reported(&seen_b, "uid"));
    assert_ne!(uid_a, runner_uid, "{seen_a}");
    assert_ne!(uid_b, runner_uid, "{seen_b}");
    assert_ne!(uid_a, uid_b, "two attempts shared a uid");
    for (seen, other) in [(&seen_a, &seen_b), (&seen_b, &seen_a)] {
        assert_eq!(reported(seen, "environ"), "denied", "{seen}");
        // Its nodes only: not another service of the host's.
        assert_eq!(reported(seen, "open"), "refused", "{seen}");
        let own = reported(seen, "home");
        let other_home = reported(other, "home");
        let visible = reported(seen, "visible");
        let other_dir = std::path::Path::new(&other_home)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(
            !visible.contains(&other_dir),
            "{own} saw the other attempt's {other_dir}: {visible}"
        );
    }
    // They overlapped: each was running while the other was.
    let span = |seen: &str| -> (u128, u128) {
        (
            reported(seen, "start").parse().unwrap(),
            reported(seen, "end").parse().unwrap(),
        )
    };
    // What the operator granted team-a's package, and team-a only.
    assert_eq!(reported(&seen_a, "granted"), "reached", "{seen_a}");
    assert_eq!(reported(&seen_b, "granted"), "refused", "{seen_b}");
    let (span_a, span_b) = (span(&seen_a), span(&seen_b));
    assert!(
        span_a.0 < span_b.1 && span_b.0 < span_a.1,
        "the two attempts did not run at once: {span_a:?} {span_b:?}"
    );

    // A play that ran and removed its event stream proves nothing: the
    // attempt fails for it, whatever the play's own failure.
    let mut erasing = spec("team-a", "127.0.0.1");
    erasing.inputs["playbook"] = json!("erase.yml");
    pipeline.submit(&erasing).await;
    let (status, category, message, result) = pipeline.ended(&erasing, WAIT).await;
    assert_eq!(
        (status.as_str(), category.as_deref()),
        ("failed", Some("runner_error")),
        "{message}"
    );
    assert!(message.contains("left no event stream"), "{message}");
    assert!(result["events_artifact"].is_null(), "{result}");

    // A FIFO in its place: refused at once, never waited on (which held
    // one of the runner's threads, and the attempt, for good).
    let mut piped = spec("team-a", "127.0.0.1");
    piped.inputs["playbook"] = json!("fifo.yml");
    pipeline.submit(&piped).await;
    let (status, category, message, _) = pipeline.ended(&piped, WAIT).await;
    assert_eq!(status, "failed", "{category:?} {message}");
    assert_ne!(category.as_deref(), Some("timeout"), "{message}");
    assert!(message.contains("events.jsonl"), "{message}");
}
