use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use super::events::Summary;
use super::AnsibleConfig;
use crate::artifacts::inputs::InputRef;
use crate::contract::ops::{AnsibleInputs, InventoryRef, PackageRef, Vars};
use crate::contract::ops::{AnsibleResult, InventoryReport};
use crate::contract::{FailureCategory, Operation, RetentionClass, RunnerType, Target};
use crate::policy::ssh::HostKey;
use crate::runner::kit::node::{self, Binding};
use crate::runner::kit::package;
use crate::runner::sandbox::egress::Destination;
use crate::runner::tool::{self, StopCause, ToolCommand, ToolExit, Workdir};
use crate::runner::{Assignment, ExecutionContext, ExecutionOutcome, Executor, Failure};

/// The event callback, written into each attempt's working directory.
const CALLBACK: &str = include_str!("execplane_events.py");
/// The attempt's output holding the event stream.
const EVENTS_ARTIFACT: &str = "ansible-events.jsonl";
/// The most of `ansible-inventory --list` read.
const MAX_INVENTORY_JSON: usize = 8 * 1024 * 1024;
/// The most an inventory's YAML may expand to, aliases expanded.
const MAX_INVENTORY_EXPANDED: usize = 8 * 1024 * 1024;
/// The most of ansible-playbook's stderr a failure message quotes.
const MAX_STDERR_QUOTED: usize = 2048;
/// How often the event stream is read while the playbook runs.
const EVENTS_POLL: Duration = Duration::from_millis(250);
/// The only `ansible_*` variables an inventory artifact may set: where a
/// host is (checked against the targets) and the one connection there is.
/// Every other one (connection, become, interpreter, shell, executables,
/// key files, temporary directories) is the runner's or the package's,
/// never the requester's.
const INVENTORY_ANSIBLE_VARS: [&str; 3] = ["ansible_host", "ansible_port", "ansible_connection"];
/// What Jinja reads as the start of a template: a requester's value
/// holding one could run code where ansible renders it.
const TEMPLATE_MARKS: [&str; 3] = ["{{", "{%", "{#"];

/// The ansible runner's executor.
pub struct AnsibleRunner {
    config: AnsibleConfig,
}

impl AnsibleRunner {
    pub fn new(config: AnsibleConfig) -> Self {
        Self { config }
    }
}

impl Executor for AnsibleRunner {
    type Inputs = AnsibleInputs;

    fn runner_type(&self) -> RunnerType {
        RunnerType::Ansible
    }

    async fn preflight(&self) -> Result<(), String> {
        use crate::runner::preflight::{answer, tool_version};
        let bin = &self.config.bin_dir;
        tool_version(
            "ansible-core",
            &bin.join("ansible-playbook"),
            &["--version"],
            &["[core "],
            (2, 14),
            3,
        )
        .await?;
        answer(&bin.join("ansible-inventory"), &["--version"]).await?;
        // Its connection: OpenSSH's client (KnownHostsCommand needs 8.5).
        tool_version(
            "OpenSSH",
            Path::new("ssh"),
            &["-V"],
            &["OpenSSH_"],
            (8, 5),
            100,
        )
        .await?;
        Ok(())
    }

    fn capabilities(&self) -> Vec<String> {
        vec!["ansible".into(), "ssh".into()]
    }

    async fn execute(
        &self,
        assignment: Assignment,
        inputs: AnsibleInputs,
        context: ExecutionContext,
    ) -> ExecutionOutcome {
        let spec = &assignment.spec;
        let mut plan = match plan(spec.operation, &inputs, &spec.targets) {
            Ok(plan) => plan,
            Err(refusal) => return refusal.into(),
        };
        if let Some(package) = &plan.package {
            let digest = package.to_string();
            let policy = context.policy();
            let tenant = policy.tenant(&spec.tenant);
            let approved = tenant
                .operations
                .ansible
                .packages
                .iter()
                .find(|approved| approved.digest == digest);
            if let Some(approved) = approved {
                plan.controller = approved.controller;
                plan.egress = approved.egress.clone();
            }
        }
        let workdir = match Workdir::for_tools(context.tools()) {
            Ok(workdir) => workdir,
            Err(error) => {
                return Failure::infrastructure(format!(
                    "no working directory for ansible: {error}"
                ))
                .into()
            }
        };
        match self.run(&plan, &workdir, &context).await {
            Ok(outcome) => outcome,
            Err(failure) => failure.into(),
        }
    }
}

/// Everything decided before anything is fetched or run.
struct Plan {
    operation: Operation,
    /// `sha256:<hex>` of the package (none: a validation without one).
    package: Option<InputRef>,
    entry: Entry,
    inventory: InventoryRef,
    /// Extra variables (secrets resolved), written to a 0600 file.
    vars: Vars,
    check_mode: bool,
    limit: Option<String>,
    tags: Vec<String>,
    user: String,
    private_key: String,
    hosts: Vec<Host>,
    /// The operator lets the package run code on the controller.
    controller: bool,
    /// What the operator lets its plays reach besides the nodes.
    egress: Vec<Destination>,
}

/// What runs.
enum Entry {
    /// A playbook of the package, by its path there.
    Playbook(String),
    /// A role of the package, through a playbook the runner writes.
    Role(String),
    /// A reachability check of every inventory host.
    Validate,
}

/// One target: its inventory name, its binding and its groups.
struct Host {
    name: String,
    binding: Binding,
    groups: Vec<String>,
}

/// What the inputs ask for, before it is checked.
struct Asked<'a> {
    package: Option<&'a PackageRef>,
    entry: Entry,
    inventory: Option<InventoryRef>,
    vars: Vars,
    limit: Option<String>,
    tags: Vec<String>,
    user: &'a Option<String>,
    key: &'a Option<Value>,
}

/// The entry the inputs name (a playbook by its path in the package, a
/// role by its name) and what goes with it.
fn asked(inputs: &AnsibleInputs) -> Result<Asked<'_>, Failure> {
    use AnsibleInputs as I;
    Ok(match inputs {
        I::AnsiblePlaybookRun(p) | I::AnsibleCheckModeRun(p) => {
            if !package::is_package_path(&p.playbook) {
                return Err(Failure::contract(format!(
                    "inputs.playbook: `{}` is not a relative path inside the package (no `..`, no absolute path)",
                    p.playbook
                )));
            }
            Asked {
                package: Some(&p.package),
                entry: Entry::Playbook(p.playbook.clone()),
                inventory: p.inventory.clone(),
                vars: p.extra_vars.clone(),
                limit: p.limit.clone(),
                tags: p.tags.clone(),
                user: &p.user,
                key: &p.private_key,
            }
        }
        I::AnsibleRoleRun(r) => {
            if !is_role_name(&r.role) {
                return Err(Failure::contract(format!(
                    "inputs.role: `{}` is not a role name",
                    r.role
                )));
            }
            Asked {
                package: Some(&r.package),
                entry: Entry::Role(r.role.clone()),
                inventory: r.inventory.clone(),
                vars: r.vars.clone(),
                limit: None,
                tags: Vec::new(),
                user: &r.user,
                key: &r.private_key,
            }
        }
        I::AnsibleInventoryValidate(v) => Asked {
            package: v.package.as_ref(),
            entry: Entry::Validate,
            inventory: Some(v.inventory.clone()),
            vars: Vars::new(),
            limit: None,
            tags: Vec::new(),
            user: &v.user,
            key: &v.private_key,
        },
    })
}

fn plan(operation: Operation, inputs: &AnsibleInputs, targets: &[Target]) -> Result<Plan, Failure> {
    let Asked {
        package,
        entry,
        inventory,
        vars,
        limit,
        tags,
        user,
        key,
    } = asked(inputs)?;
    let package = package.map(package_ref).transpose()?;
    if matches!(entry, Entry::Playbook(_) | Entry::Role(_)) && package.is_none() {
        return Err(Failure::contract(
            "inputs.package: the package to run from is required",
        ));
    }
    let inventory = inventory.unwrap_or(InventoryRef {
        artifact: None,
        from_targets: true,
    });
    if inventory.artifact.is_some() == inventory.from_targets {
        return Err(Failure::contract(
            "inputs.inventory: exactly one of `artifact` (an inventory artifact) and `from_targets: true`",
        ));
    }
    check_selection(&vars, limit.as_deref(), &tags)?;
    let (user, private_key) = node::login(user.as_deref(), key.as_ref())?;
    if targets.is_empty() {
        return Err(Failure::contract(
            "targets: the nodes to run on are required",
        ));
    }
    let hosts = targets
        .iter()
        .enumerate()
        .map(|(index, target)| host(index, target))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Plan {
        operation,
        package,
        entry,
        inventory,
        vars,
        check_mode: operation == Operation::AnsibleCheckModeRun,
        limit,
        tags,
        user,
        private_key,
        hosts,
        controller: false,
        egress: Vec::new(),
    })
}

/// The JobSpec's variables, `limit` and `tags`: names ansible reads as
/// such, and none of ansible's own variables.
fn check_selection(vars: &Vars, limit: Option<&str>, tags: &[String]) -> Result<(), Failure> {
    for name in vars.keys() {
        if !is_variable_name(name) {
            return Err(Failure::contract(format!(
                "inputs: `{name}` is not an ansible variable name"
            )));
        }
        if name.starts_with("ansible_") {
            return Err(Failure::new(FailureCategory::Policy, format!("inputs: `{name}`: ansible's own variables (connection, become, interpreter) come from the operator's bindings, not the JobSpec")));
        }
    }
    if let Some(limit) = limit {
        let fine = !limit.is_empty()
            && limit.len() <= 256
            && !limit.starts_with('-')
            && limit
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.:,*!&-".contains(c));
        if !fine {
            return Err(Failure::contract(format!(
                "inputs.limit: `{limit}` is not a host pattern (letters, digits, `_.:,*!&-`)"
            )));
        }
    }
    for tag in tags {
        if !is_role_name(tag) {
            return Err(Failure::contract(format!(
                "inputs.tags: `{tag}` is not a tag"
            )));
        }
    }
    Ok(())
}

/// The package's digest, as the artifact to fetch.
fn package_ref(package: &PackageRef) -> Result<InputRef, Failure> {
    let Some(digest) = &package.digest else {
        return Err(Failure::new(FailureCategory::Policy, format!(
                "inputs.package: package `{}` has no digest: only approved packages, by digest, run",
                package.name
            )));
    };
    InputRef::parse(digest)
        .map_err(|message| Failure::contract(format!("inputs.package.digest: {message}")))
}

/// A target as an inventory host: its id as the name, its address (else
/// its id) and `port` attribute (22), its `host_key`, and the groups in its
/// `groups` attribute (comma-separated).
fn host(index: usize, target: &Target) -> Result<Host, Failure> {
    let field = format!("targets[{index}]");
    if !is_inventory_name(&target.id) {
        return Err(Failure::contract(format!(
            "{field}.id: `{}` is not an inventory host name (letters, digits, `._-`)",
            target.id
        )));
    }
    let binding = node::binding(index, target)?;
    let mut groups = Vec::new();
    if let Some(list) = target.attributes.get("groups") {
        for group in list
            .split(',')
            .map(str::trim)
            .filter(|group| !group.is_empty())
        {
            if !is_group_name(group) {
                return Err(Failure::contract(format!(
                    "{field}.attributes.groups: `{group}` is not an ansible group name"
                )));
            }
            groups.push(group.to_owned());
        }
    }
    Ok(Host {
        name: target.id.clone(),
        binding,
        groups,
    })
}

/// The files of one run in its working directory.
struct Layout {
    package: PathBuf,
    /// What ansible reads of the runner's while it runs (its configuration,
    /// inventory, ssh client, known hosts, callback, plugin home):
    /// read-only to it, so a play's `fetch` to the controller cannot change
    /// the client it runs next or add a plugin it loads later.
    controller: PathBuf,
    inventory: PathBuf,
    events: PathBuf,
    config: PathBuf,
    key: PathBuf,
    vars: PathBuf,
}

impl AnsibleRunner {
    /// Fetches, lays out and runs the plan. `Err` is a failure before
    /// anything was learnt of the nodes (no result to report with it).
    async fn run(
        &self,
        plan: &Plan,
        workdir: &Workdir,
        context: &ExecutionContext,
    ) -> Result<ExecutionOutcome, Failure> {
        let layout = self.lay_out(plan, workdir, context).await?;
        let mut report = started(plan);
        // An inventory the runner did not write is read by ansible first:
        // its hosts must be the targets, its connection the runner's.
        if plan.inventory.artifact.is_some() || matches!(plan.entry, Entry::Validate) {
            let read = self.read_inventory(plan, &layout, workdir, context).await?;
            report.problems = read.problems;
            report.inventory = Some(read.report);
            // What the inventory asks for is the operator's to allow.
            if let Some(refusal) = read.refusal {
                return Ok(Failure::policy(refusal).outcome(serde_json::to_value(&report).ok()));
            }
        }
        let command = self.playbook_command(plan, &layout, workdir)?;
        context.progress(described(plan), Some(0));
        let (exit, summary) = self.watch(command, &layout.events, workdir, context).await;
        report.fold(&summary);
        if summary.dropped > 0 {
            context.log(
                crate::runner::LogStream::Stderr,
                format!(
                    "{} facts and assertions past the result's bound ({} bytes of them) are not in the result; the event stream's artifact has them all\n",
                    summary.dropped,
                    super::events::MAX_KEPT_BYTES
                ),
            );
        }
        // Its play ran: events were read while it ran, or its exit says so
        // (0, 2: a host failed, 3: one was unreachable).
        let ran =
            summary.lines > 0 || matches!(exit.as_ref().map(|exit| exit.code), Ok(Some(0 | 2 | 3)));
        let stored = store_events(&layout, ran, context).await;
        if stored.is_ok() && layout.events.exists() {
            report.events_artifact = Some(EVENTS_ARTIFACT.to_owned());
        }
        let exit = match exit {
            Ok(exit) => exit,
            Err(error) => return Ok(Failure::infrastructure(error.to_string()).into()),
        };
        report.exit_code = exit.code;
        if let Entry::Validate = plan.entry {
            for host in &report.unreachable_hosts {
                let message = summary
                    .unreachable_messages
                    .get(host)
                    .map(|message| one_line(message))
                    .unwrap_or_default();
                report
                    .problems
                    .push(format!("host `{host}` is unreachable: {message}"));
            }
        }
        report.fit(context);
        let value = serde_json::to_value(&report).unwrap_or(Value::Null);
        if let Some(cause) = exit.stopped {
            return Ok(match cause {
                StopCause::Stopped => {
                    ExecutionOutcome::failed(FailureCategory::Cancelled, "stopped", Some(value))
                }
                StopCause::Deadline => ExecutionOutcome::failed(
                    FailureCategory::Timeout,
                    "stopped at the start-to-close deadline",
                    Some(value),
                ),
            });
        }
        if let Err((category, message)) = stored {
            return Ok(ExecutionOutcome::failed(category, message, Some(value)));
        }
        Ok(outcome(plan, &report, &exit, value))
    }

    /// `ansible-playbook` on the plan's playbook (or the one written for
    /// its role or reachability check) with the runner's inventory, key
    /// and variables.
    fn playbook_command(
        &self,
        plan: &Plan,
        layout: &Layout,
        workdir: &Workdir,
    ) -> Result<ToolCommand, Failure> {
        let playbook = match &plan.entry {
            Entry::Playbook(path) => layout.package.join(path),
            Entry::Role(role) => {
                let written = json!([{
                    "name": format!("role {role}"),
                    "hosts": "all",
                    "roles": [{"role": role}],
                }]);
                write_file(&layout.controller.join("role.yml"), &written.to_string())?
            }
            Entry::Validate => {
                let written = json!([{
                    "name": "reachability",
                    "hosts": "all",
                    "gather_facts": false,
                    "tasks": [{"name": "ping", "ansible.builtin.ping": {}}],
                }]);
                write_file(
                    &layout.controller.join("validate.yml"),
                    &written.to_string(),
                )?
            }
        };
        let mut args: Vec<String> = vec![
            format!("--inventory={}", layout.inventory.display()),
            format!("--user={}", plan.user),
            format!("--private-key={}", layout.key.display()),
            format!("--extra-vars=@{}", layout.vars.display()),
        ];
        if plan.check_mode {
            args.extend(["--check".to_owned(), "--diff".to_owned()]);
        }
        if let Some(limit) = &plan.limit {
            args.push(format!("--limit={limit}"));
        }
        if !plan.tags.is_empty() {
            args.push(format!("--tags={}", plan.tags.join(",")));
        }
        args.push("--".to_owned());
        args.push(playbook.display().to_string());
        // The play is the tenant's code: its nodes, and what the operator
        // grants the package, are all it reaches.
        let reach = plan
            .hosts
            .iter()
            .map(|host| Destination::Endpoint {
                host: host.binding.address.clone(),
                port: host.binding.port,
            })
            .chain(plan.egress.iter().cloned())
            .collect();
        Ok(self
            .ansible_command("ansible-playbook", layout, workdir)
            .capture(MAX_STDERR_QUOTED)
            .reach(reach)
            .args(args))
    }

    /// The package unpacked, the inventory, the configuration, the
    /// callback, the key and the variables, each in its place.
    async fn lay_out(
        &self,
        plan: &Plan,
        workdir: &Workdir,
        context: &ExecutionContext,
    ) -> Result<Layout, Failure> {
        let root = workdir.path();
        let controller = root.join("controller");
        std::fs::create_dir_all(controller.join("home")).map_err(|error| {
            Failure::infrastructure(format!("cannot create the controller directory: {error}"))
        })?;
        let mut layout = Layout {
            package: root.join("package"),
            controller: controller.clone(),
            // Named after its parser: the yaml plugin reads only `.yml`.
            inventory: controller.join("inventory.ini"),
            events: root.join("events.jsonl"),
            config: controller.join("ansible.cfg"),
            key: workdir
                .secret_file("identity", &plan.private_key)
                .map_err(|error| {
                    Failure::infrastructure(format!("cannot write the key file: {error}"))
                })?,
            vars: workdir
                .secret_file(
                    "extra_vars.yml",
                    &unsafe_yaml(&Value::Object(plan.vars.clone().into_iter().collect())),
                )
                .map_err(|error| {
                    Failure::infrastructure(format!("cannot write the variables: {error}"))
                })?,
        };
        unpack(plan, &layout, context).await?;
        check_entry(plan, &layout)?;
        write_inventory(plan, &mut layout, workdir, context).await?;
        self.write_configuration(plan, &layout, workdir, context)?;
        Ok(layout)
    }

    /// The configuration, ssh client, known hosts and callback ansible
    /// runs with, in the read-only `controller` directory.
    fn write_configuration(
        &self,
        plan: &Plan,
        layout: &Layout,
        workdir: &Workdir,
        context: &ExecutionContext,
    ) -> Result<(), Failure> {
        let (mut known_hosts, mut pins) = (String::new(), String::new());
        for host in &plan.hosts {
            let entry = host.binding.known_hosts_entry();
            match &host.binding.host_key {
                HostKey::Key(key) => known_hosts.push_str(&format!("{entry} {key}\n")),
                HostKey::Fingerprint(pin) => pins.push_str(&format!("{entry} {pin}\n")),
            }
        }
        let targets: String = plan
            .hosts
            .iter()
            .map(|host| format!("{} {}\n", host.binding.address, host.binding.port))
            .collect();
        let targets = write_file(&layout.controller.join("targets"), &targets)?;
        let known_hosts_file = write_file(&layout.controller.join("known_hosts"), &known_hosts)?;
        let pins_file = write_file(&layout.controller.join("pins"), &pins)?;
        let callbacks = layout.controller.join("callbacks");
        std::fs::create_dir_all(&callbacks).map_err(|error| {
            Failure::infrastructure(format!("cannot create the callback directory: {error}"))
        })?;
        write_file(&callbacks.join("execplane_events.py"), CALLBACK)?;
        // ansible's ssh client: OpenSSH's, with each command under the
        // node's framed watchdog (`ssh_client`).
        let ssh_client = write_file(
            &layout.controller.join("ssh"),
            &format!(
                "#!/bin/sh\nexec {} ansible-ssh --targets {} -- \"$@\"\n",
                crate::runner::kit::remote::quote(&context.tools().shim.to_string_lossy()),
                crate::runner::kit::remote::quote(&targets.to_string_lossy()),
            ),
        )?;
        std::fs::set_permissions(
            &ssh_client,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .map_err(|error| {
            Failure::infrastructure(format!("cannot make the ssh client runnable: {error}"))
        })?;
        let ssh_args = self.ssh_args(
            &known_hosts_file,
            (!pins.is_empty()).then_some(pins_file.as_path()),
            context,
        );
        let config = ansible_cfg(&ssh_client, &ssh_args, &callbacks, layout, workdir);
        write_file(&layout.config, &config)?;
        Ok(())
    }
}

/// The approved package, unpacked and (unless the operator lets it
/// run on the controller) checked before ansible reads it.
async fn unpack(plan: &Plan, layout: &Layout, context: &ExecutionContext) -> Result<(), Failure> {
    if let Some(reference) = &plan.package {
        package::fetch_and_unpack(context, reference, &layout.package).await?;
        if !plan.controller {
            // Up to the package's whole unpacked size read and parsed: off
            // the runtime's threads, which every other attempt shares.
            let root = layout.package.clone();
            let refused = tokio::task::spawn_blocking(move || super::controller::refusal(&root))
                .await
                .map_err(|error| {
                    Failure::infrastructure(format!("the package's check did not finish: {error}"))
                })?;
            if let Some(why) = refused {
                return Err(Failure::new(FailureCategory::Policy, format!("inputs.package: {why} (allowed only where the operator's policy gives the package `controller: true`)")));
            }
        }
    } else {
        std::fs::create_dir_all(&layout.package).map_err(|error| {
            Failure::infrastructure(format!("cannot create the package directory: {error}"))
        })?;
    }
    Ok(())
}

/// The result before ansible ran: what the plan names.
fn started(plan: &Plan) -> AnsibleResult {
    AnsibleResult {
        operation: plan.operation.as_str().to_owned(),
        package: plan.package.as_ref().map(ToString::to_string),
        playbook: match &plan.entry {
            Entry::Playbook(path) => Some(path.clone()),
            _ => None,
        },
        role: match &plan.entry {
            Entry::Role(role) => Some(role.clone()),
            _ => None,
        },
        check_mode: plan.check_mode,
        exit_code: None,
        recap: BTreeMap::new(),
        changed_hosts: Vec::new(),
        failed_hosts: Vec::new(),
        unreachable_hosts: Vec::new(),
        facts: BTreeMap::new(),
        evidence: Vec::new(),
        events_artifact: None,
        tasks: 0,
        inventory: None,
        problems: Vec::new(),
    }
}

/// The progress line of the plan's start.
fn described(plan: &Plan) -> String {
    format!(
        "{} on {} host(s){}",
        match &plan.entry {
            Entry::Playbook(path) => format!("playbook {path}"),
            Entry::Role(role) => format!("role {role}"),
            Entry::Validate => "reachability check".to_owned(),
        },
        plan.hosts.len(),
        if plan.check_mode {
            " in check mode"
        } else {
            ""
        }
    )
}

impl AnsibleResult {
    /// What the event stream says of the run.
    fn fold(&mut self, summary: &Summary) {
        self.tasks = summary.tasks;
        self.recap = summary.recap();
        let (changed, failed, unreachable) = summary.hosts();
        self.changed_hosts = changed;
        self.failed_hosts = failed;
        self.unreachable_hosts = unreachable;
        self.facts = summary.facts.clone();
        self.evidence = summary.evidence.clone();
    }

    /// Within the report's bound (`contract::limits::MAX_RESULT_BYTES`),
    /// past which the whole result would be dropped: what the event
    /// stream's artifact holds too goes first (the facts, then the
    /// evidence), then the inventory's listing. The attempt's log says
    /// what went.
    fn fit(&mut self, context: &ExecutionContext) {
        // Room for what masking may add.
        let dropped = self.fit_within(crate::contract::limits::MAX_RESULT_BYTES - 16 * 1024);
        if !dropped.is_empty() {
            context.log(
                crate::runner::LogStream::Stderr,
                format!(
                    "the result's {} left out to keep it within {} bytes; the event stream's artifact has them\n",
                    dropped.join(", "),
                    crate::contract::limits::MAX_RESULT_BYTES
                ),
            );
        }
    }

    /// [`fit`](Self::fit) to `bound` bytes of JSON: what it left out.
    fn fit_within(&mut self, bound: usize) -> Vec<&'static str> {
        let over =
            |result: &Self| serde_json::to_string(result).map_or(0, |text| text.len()) > bound;
        let mut dropped = Vec::new();
        if over(self) && !self.facts.is_empty() {
            self.facts.clear();
            dropped.push("facts");
        }
        if over(self) && !self.evidence.is_empty() {
            self.evidence.clear();
            dropped.push("evidence");
        }
        if over(self) && self.inventory.is_some() {
            self.inventory = None;
            dropped.push("inventory");
        }
        dropped
    }
}

/// The event stream stored as evidence; its absence is a failure
/// whenever the play `ran`, however it ended.
async fn store_events(
    layout: &Layout,
    ran: bool,
    context: &ExecutionContext,
) -> Result<(), (FailureCategory, String)> {
    // The event stream is mandatory: an attempt without it proves
    // nothing. Ansible loads the callback after it parsed the playbook,
    // so one that failed before (a syntax error, a bad option) wrote
    // none: its own error is the message then. One whose play ran and
    // left none (a task removed it) proves nothing of what it did.
    if layout.events.exists() {
        context
            .store_output(&layout.events, EVENTS_ARTIFACT, RetentionClass::Evidence)
            .await
            .map(|_| ())
            .map_err(|error| (error.category(), error.to_string()))
    } else if ran {
        Err((
            FailureCategory::RunnerError,
            "the play ran but left no event stream: the attempt proves nothing of what it did"
                .to_owned(),
        ))
    } else {
        Ok(())
    }
}

/// The playbook or role the plan names is in the package.
fn check_entry(plan: &Plan, layout: &Layout) -> Result<(), Failure> {
    match &plan.entry {
        Entry::Playbook(path) => {
            let file = layout.package.join(path);
            let is_file = std::fs::symlink_metadata(&file).is_ok_and(|meta| meta.is_file());
            if !is_file {
                return Err(Failure::contract(format!(
                    "inputs.playbook: the package has no playbook `{path}`"
                )));
            }
        }
        Entry::Role(role) => {
            let dir = layout.package.join("roles").join(role);
            if !std::fs::symlink_metadata(&dir).is_ok_and(|meta| meta.is_dir()) {
                return Err(Failure::contract(format!(
                    "inputs.role: the package has no role `roles/{role}`"
                )));
            }
        }
        Entry::Validate => {}
    }
    Ok(())
}

/// The inventory artifact, or the one made of the targets, written where
/// ansible reads it (`.yml` when it is YAML), read bounded first.
async fn write_inventory(
    plan: &Plan,
    layout: &mut Layout,
    workdir: &Workdir,
    context: &ExecutionContext,
) -> Result<(), Failure> {
    let inventory = match &plan.inventory.artifact {
        Some(reference) => {
            let reference = InputRef::parse(reference).map_err(|message| {
                Failure::contract(format!("inputs.inventory.artifact: {message}"))
            })?;
            let fetched = workdir
                .fetch_input(context, &reference)
                .await
                .map_err(|error| {
                    Failure::new(
                        error.category(),
                        format!("inputs.inventory.artifact: {error}"),
                    )
                })?;
            std::fs::read_to_string(&fetched).map_err(|_| {
                Failure::contract(
                    "inputs.inventory.artifact: not a text file (an INI or YAML inventory)",
                )
            })?
        }
        None => generated_inventory(&plan.hosts),
    };
    // Read bounded by what its aliases expand to: the runner holds
    // every attempt, and an inventory is the tenant's text.
    match crate::runner::yaml::document(inventory.as_bytes(), MAX_INVENTORY_EXPANDED) {
        Ok(read) if read.is_object() => layout.inventory = layout.controller.join("inventory.yml"),
        Err(error) if error.too_large => {
            return Err(Failure::new(
                FailureCategory::Contract,
                format!("inputs.inventory: {error}"),
            ))
        }
        _ => {}
    }
    write_file(&layout.inventory, &inventory)?;
    Ok(())
}

impl AnsibleRunner {
    /// ssh's arguments: no configuration, agent, forwarding or shared
    /// connection; only the targets' host keys (or their pins).
    fn ssh_args(
        &self,
        known_hosts: &Path,
        pins: Option<&Path>,
        context: &ExecutionContext,
    ) -> String {
        let ssh_args = [
            "-F /dev/null".to_owned(),
            format!("-o UserKnownHostsFile=\"{}\"", known_hosts.display()),
            "-o GlobalKnownHostsFile=/dev/null".to_owned(),
            "-o StrictHostKeyChecking=yes".to_owned(),
            "-o UpdateHostKeys=no".to_owned(),
            "-o IdentitiesOnly=yes".to_owned(),
            "-o IdentityAgent=none".to_owned(),
            "-o BatchMode=yes".to_owned(),
            "-o ControlMaster=no".to_owned(),
            "-o ControlPath=none".to_owned(),
            "-o ForwardAgent=no".to_owned(),
            "-o ClearAllForwardings=yes".to_owned(),
            format!(
                "-o ConnectTimeout={}",
                self.config.connect_timeout.as_secs().max(1)
            ),
            "-o ServerAliveInterval=5".to_owned(),
            "-o ServerAliveCountMax=3".to_owned(),
        ]
        .join(" ");
        // Nodes pinned by fingerprint: the key a node offers is accepted
        // only when it hashes to its pin (`execplane known-host`).
        match pins {
            None => ssh_args,
            Some(pins) => format!(
                "{ssh_args} -o \"KnownHostsCommand={} known-host {} %H %t %K\"",
                context.tools().shim.display(),
                pins.display()
            ),
        }
    }

    /// ansible's `program` from the configured directory, in the runner's
    /// environment and configuration.
    fn ansible_command(&self, program: &str, layout: &Layout, workdir: &Workdir) -> ToolCommand {
        let bin = self.config.bin_dir.display().to_string();
        // A virtualenv's `bin`: the sandboxed tool sees the whole env.
        let env_root = self.config.bin_dir.parent().unwrap_or(&self.config.bin_dir);
        ToolCommand::new(self.config.bin_dir.join(program))
            .read_only(env_root)
            // Checked before ansible started (`controller`): nothing the
            // play does (a `fetch`, a `copy` to the controller) may change
            // what ansible reads of it afterwards.
            .read_only(&layout.package)
            .read_only(&layout.controller)
            // Started there, at home there: a path ansible resolves from
            // its current or home directory (a role's include of a file
            // the role lacks, a role name) finds nothing a play fetched.
            .current_dir(&layout.controller)
            .base_env(workdir)
            .env("HOME", layout.controller.join("home").display().to_string())
            .env("PATH", format!("{bin}:/usr/local/bin:/usr/bin:/bin"))
            .env("ANSIBLE_CONFIG", layout.config.display().to_string())
            // Where ansible looks for plugins and collections of the
            // user's: empty, and read-only with the rest of `controller`.
            .env(
                "ANSIBLE_HOME",
                layout.controller.join("home").display().to_string(),
            )
            .env("PYTHONNOUSERSITE", "1")
            .env(
                "EXECPLANE_ANSIBLE_EVENTS",
                layout.events.display().to_string(),
            )
            .env("PYTHONDONTWRITEBYTECODE", "1")
    }

    /// Runs ansible-playbook, reading its event stream as it grows: a
    /// progress event at each task.
    async fn watch(
        &self,
        command: ToolCommand,
        events: &Path,
        workdir: &Workdir,
        context: &ExecutionContext,
    ) -> (Result<ToolExit, tool::ToolError>, Summary) {
        let mut summary = Summary::default();
        let mut stream = Stream::default();
        let run = tool::run(context, workdir, command);
        tokio::pin!(run);
        let mut tick = tokio::time::interval(EVENTS_POLL);
        let exit = loop {
            tokio::select! {
                exit = &mut run => break exit,
                _ = tick.tick() => { stream.read(events, &mut summary, context); }
            }
        };
        // The rest of the stream, however much ansible wrote at the end.
        while stream.read(events, &mut summary, context) > 0 {}
        (exit, summary)
    }

    /// `ansible-inventory --list` on the laid-out inventory: its hosts and
    /// groups, its problems (for a validation) and, when it may not run,
    /// why.
    async fn read_inventory(
        &self,
        plan: &Plan,
        layout: &Layout,
        workdir: &Workdir,
        context: &ExecutionContext,
    ) -> Result<ReadInventory, Failure> {
        let command = self
            .ansible_command("ansible-inventory", layout, workdir)
            // Reading an inventory (yaml and ini only) needs no network.
            .offline()
            .capture(MAX_INVENTORY_JSON)
            .args([
                format!("--inventory={}", layout.inventory.display()),
                "--list".to_owned(),
            ]);
        let exit = tool::run(context, workdir, command)
            .await
            .map_err(|error| Failure::infrastructure(error.to_string()))?;
        if let Some(cause) = exit.stopped {
            return Err(match cause {
                StopCause::Stopped => Failure::new(FailureCategory::Cancelled, "stopped"),
                StopCause::Deadline => Failure::new(
                    FailureCategory::Timeout,
                    "stopped at the start-to-close deadline",
                ),
            });
        }
        if !exit.success() {
            let said = one_line(&String::from_utf8_lossy(&exit.stderr));
            let message = format!("inputs.inventory: ansible cannot read the inventory: {said}");
            return Err(match plan.entry {
                Entry::Validate => Failure::new(FailureCategory::VerificationFailed, message),
                _ => Failure::contract(message),
            });
        }
        if exit.stdout.len() >= MAX_INVENTORY_JSON {
            return Err(Failure::contract(format!(
                "inputs.inventory: larger than {MAX_INVENTORY_JSON} bytes as ansible lists it"
            )));
        }
        let listed: Value = serde_json::from_slice(&exit.stdout).map_err(|error| {
            Failure::infrastructure(format!("ansible-inventory printed no inventory: {error}"))
        })?;
        Ok(check_inventory(&listed, &plan.hosts))
    }
}

/// What `check_inventory` found.
struct ReadInventory {
    report: InventoryReport,
    problems: Vec<String>,
    /// Why it may not run at all (a host that is no target, a connection
    /// variable).
    refusal: Option<String>,
}

/// Reads `ansible-inventory --list` output: every group's hosts (through
/// its children), each host's connection checked against the targets.
fn check_inventory(listed: &Value, targets: &[Host]) -> ReadInventory {
    let empty = serde_json::Map::new();
    let hostvars = listed
        .pointer("/_meta/hostvars")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let (report, group_names, problems) = read_groups(listed);
    let mut refusals = Vec::new();
    // Names as ansible read them (a YAML escape such as `\x7b` already
    // decoded): ansible renders a host's name where it renders its
    // variables, on the runner host.
    for (kind, name) in group_names
        .iter()
        .map(|name| ("group", name))
        .chain(report.hosts.iter().map(|name| ("host", name)))
    {
        if marked(name) {
            refusals.push(format!(
                "{kind} `{}`: its name holds a Jinja template (`{{{{`, `{{%` or `{{#`); an inventory's names are data",
                loggable(name)
            ));
        }
    }
    for host in &report.hosts {
        let vars = hostvars
            .get(host)
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        refusals.extend(host_refusals(host, vars, targets));
    }
    ReadInventory {
        report,
        problems,
        refusal: (!refusals.is_empty())
            .then(|| format!("inputs.inventory: {}", refusals.join("; "))),
    }
}

/// The groups and hosts of an inventory as `ansible-inventory --list`
/// gives them, every group ansible knows with its members (children's
/// included), and what is wrong with a group.
fn read_groups(listed: &Value) -> (InventoryReport, BTreeSet<String>, Vec<String>) {
    let empty = serde_json::Map::new();
    let groups = listed.as_object().unwrap_or(&empty);
    let names = |group: &str, key: &str| -> Vec<String> {
        groups
            .get(group)
            .and_then(|group| group.get(key))
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    fn members(
        group: &str,
        names: &dyn Fn(&str, &str) -> Vec<String>,
        seen: &mut BTreeSet<String>,
        into: &mut BTreeSet<String>,
    ) {
        if !seen.insert(group.to_owned()) {
            return;
        }
        into.extend(names(group, "hosts"));
        for child in names(group, "children") {
            members(&child, names, seen, into);
        }
    }
    let mut report = InventoryReport {
        hosts: Vec::new(),
        groups: BTreeMap::new(),
    };
    let mut all = BTreeSet::new();
    let mut problems = Vec::new();
    // Every group ansible knows: those listed, and children named only.
    let mut group_names: BTreeSet<String> = groups
        .keys()
        .filter(|name| *name != "_meta")
        .cloned()
        .collect();
    for name in groups.keys() {
        group_names.extend(names(name, "children"));
    }
    for group in &group_names {
        let mut hosts = BTreeSet::new();
        members(group, &names, &mut BTreeSet::new(), &mut hosts);
        all.extend(hosts.iter().cloned());
        if group != "all" && group != "ungrouped" {
            if !is_group_name(group) {
                problems.push(format!(
                    "group `{group}`: not a valid group name (letters, digits and `_`, not starting with a digit)"
                ));
            } else if hosts.is_empty() {
                problems.push(format!("group `{group}` has no hosts"));
            }
            report
                .groups
                .insert(group.clone(), hosts.into_iter().collect());
        }
    }
    report.hosts = all.into_iter().collect();
    (report, group_names, problems)
}

/// Why the inventory's `host` (with its `vars`) may not run: an
/// `ansible_*` variable of the runner's, a template in a value, an address
/// and port that is not one of the targets'.
fn host_refusals(
    host: &str,
    vars: &serde_json::Map<String, Value>,
    targets: &[Host],
) -> Vec<String> {
    let mut refusals = Vec::new();
    for (name, value) in vars {
        let allowed = INVENTORY_ANSIBLE_VARS.contains(&name.as_str())
            && (name != "ansible_connection"
                || matches!(value.as_str(), Some("ssh" | "ansible.builtin.ssh")));
        if name.starts_with("ansible_") && !allowed {
            refusals.push(format!(
                "host `{}` sets `{}`: how ansible connects, escalates and runs is the runner's and the package's, not the inventory's",
                loggable(host),
                loggable(name)
            ));
        }
        if marked(name) || holds_template(value) {
            refusals.push(format!(
                "host `{}`: variable `{}` holds a Jinja template (`{{{{`, `{{%` or `{{#`); an inventory's values are data",
                loggable(host),
                loggable(name)
            ));
        }
    }
    let address = vars
        .get("ansible_host")
        .and_then(Value::as_str)
        .unwrap_or(host);
    let port = match vars.get("ansible_port") {
        None => Some(22),
        Some(Value::Number(number)) => number.as_u64().and_then(|port| u16::try_from(port).ok()),
        Some(Value::String(text)) => text.parse().ok(),
        Some(_) => None,
    };
    let bound = targets
        .iter()
        .any(|target| target.binding.address == address && Some(target.binding.port) == port);
    if !bound {
        refusals.push(format!(
            "host `{host}` ({address}:{}) is not one of the JobSpec's targets: ansible connects only to bound nodes",
            port.map_or("?".to_owned(), |port| port.to_string())
        ));
    }
    refusals
}

/// The event stream read so far: the offset and a line not yet complete.
#[derive(Default)]
struct Stream {
    offset: u64,
    partial: Vec<u8>,
    /// A line over [`super::events::MAX_EVENT_LINE`] is being skipped to its end.
    skipping: bool,
}

/// The most of the event stream read: the file is in the play's working
/// directory, so the play can write it too.
const MAX_EVENTS_READ: u64 = 256 * 1024 * 1024;

impl Stream {
    /// Reads what was appended since the last read; a progress event for
    /// each task that started.
    /// Returns the bytes read.
    fn read(&mut self, path: &Path, summary: &mut Summary, context: &ExecutionContext) -> usize {
        use std::os::unix::fs::OpenOptionsExt;
        // A regular file, never what a link names (the runner reads it
        // outside the sandbox), never a FIFO waited on (the play may leave
        // one: opened without `O_NONBLOCK`, it waits for a writer that
        // never comes), and never past its bound.
        let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(i32::try_from(flags.bits()).unwrap_or(0))
            .open(path);
        let Ok(mut file) = file else {
            return 0;
        };
        let left = MAX_EVENTS_READ.saturating_sub(self.offset);
        if left == 0
            || !file.metadata().is_ok_and(|meta| meta.is_file())
            || file.seek(SeekFrom::Start(self.offset)).is_err()
        {
            return 0;
        }
        let mut fresh = Vec::new();
        let Ok(read) = file.take(left.min(4 * 1024 * 1024)).read_to_end(&mut fresh) else {
            return 0;
        };
        self.offset += read as u64;
        self.partial.extend_from_slice(&fresh);
        // Line by line through the buffer, then what was read dropped at
        // once (a drain per line would move the rest each time: a read of
        // empty lines would cost its length squared).
        let mut start = 0;
        while let Some(end) = self.partial[start..].iter().position(|byte| *byte == b'\n') {
            let line = &self.partial[start..start + end];
            start += end + 1;
            if std::mem::take(&mut self.skipping) {
                continue;
            }
            let text = String::from_utf8_lossy(line);
            if summary.line(&text) {
                let task = summary.current_task.clone().unwrap_or_default();
                context.progress(format!("task {}: {task}", summary.tasks), None);
            }
        }
        self.partial.drain(..start);
        if self.partial.len() > super::events::MAX_EVENT_LINE {
            self.partial.clear();
            self.skipping = true;
        }
        read
    }
}

/// The ansible.cfg the runner writes: its callback, the package's roles,
/// ansible's ssh client, and inventories read only as YAML or INI.
fn ansible_cfg(
    ssh_client: &Path,
    ssh_args: &str,
    callbacks: &Path,
    layout: &Layout,
    workdir: &Workdir,
) -> String {
    format!(
        "[defaults]\n\
         host_key_checking = True\n\
         retry_files_enabled = False\n\
         callback_plugins = {callbacks}\n\
         callbacks_enabled = execplane_events\n\
         roles_path = {roles}\n\
         local_tmp = {root}/.ansible/tmp\n\
         interpreter_python = auto_silent\n\
         nocows = True\n\
         nocolor = True\n\
         deprecation_warnings = False\n\
         \n\
         [inventory]\n\
         enable_plugins = yaml, ini\n\
         unparsed_is_failed = True\n\
         \n\
         [ssh_connection]\n\
         ssh_executable = {ssh_client}\n\
         ssh_args = {ssh_args}\n\
         pipelining = True\n\
         usetty = False\n\
         transfer_method = piped\n",
        ssh_client = ssh_client.display(),
        callbacks = callbacks.display(),
        roles = layout.package.join("roles").display(),
        root = workdir.path().display(),
    )
}

/// The attempt's outcome once ansible-playbook exited.
fn outcome(plan: &Plan, report: &AnsibleResult, exit: &ToolExit, value: Value) -> ExecutionOutcome {
    if let Entry::Validate = plan.entry {
        if !report.problems.is_empty() {
            return ExecutionOutcome::failed(
                FailureCategory::VerificationFailed,
                format!("inventory: {}", report.problems.join("; ")),
                Some(value),
            );
        }
    }
    match exit.code {
        Some(0) => {
            let hosts = report.recap.len();
            let changed = report.changed_hosts.len();
            let verb = if plan.check_mode {
                "would change"
            } else {
                "changed"
            };
            ExecutionOutcome::succeeded(
                format!(
                    "{} task(s) on {hosts} host(s); {changed} {verb}",
                    report.tasks
                ),
                value,
            )
        }
        // 2: a host failed; 4: a host was unreachable.
        Some(2 | 4) if !report.failed_hosts.is_empty() || !report.unreachable_hosts.is_empty() => {
            let category = if report.failed_hosts.is_empty() {
                FailureCategory::TargetUnreachable
            } else {
                FailureCategory::RunnerError
            };
            let mut parts = Vec::new();
            if !report.failed_hosts.is_empty() {
                parts.push(format!("failed on {}", report.failed_hosts.join(", ")));
            }
            if !report.unreachable_hosts.is_empty() {
                parts.push(format!(
                    "unreachable: {}",
                    report.unreachable_hosts.join(", ")
                ));
            }
            ExecutionOutcome::failed(category, parts.join("; "), Some(value))
        }
        Some(code) => {
            let said = one_line(&String::from_utf8_lossy(&exit.stderr));
            ExecutionOutcome::failed(
                FailureCategory::RunnerError,
                format!("ansible-playbook exited with code {code}: {said}"),
                Some(value),
            )
        }
        None => ExecutionOutcome::failed(
            FailureCategory::RunnerError,
            format!(
                "ansible-playbook ended by signal {}",
                exit.signal.unwrap_or_default()
            ),
            Some(value),
        ),
    }
}

/// A YAML inventory of the targets (JSON is YAML): every host under `all`
/// with its address and port, and in the groups its `groups` attribute
/// names.
fn generated_inventory(hosts: &[Host]) -> String {
    let mut all = serde_json::Map::new();
    let mut groups: BTreeMap<String, serde_json::Map<String, Value>> = BTreeMap::new();
    for host in hosts {
        all.insert(
            host.name.clone(),
            json!({"ansible_host": host.binding.address, "ansible_port": host.binding.port}),
        );
        for group in &host.groups {
            groups
                .entry(group.clone())
                .or_default()
                .insert(host.name.clone(), json!({}));
        }
    }
    let children: serde_json::Map<String, Value> = groups
        .into_iter()
        .map(|(name, hosts)| (name, json!({"hosts": hosts})))
        .collect();
    json!({"all": {"hosts": all, "children": children}}).to_string()
}

/// `value` as YAML (JSON's flow syntax, which YAML reads) with every string
/// tagged `!unsafe`: ansible passes such a value on as it is and never
/// renders it as a template, so a requester's `{{ lookup('pipe', ...) }}`
/// stays text. Keys are never rendered.
fn unsafe_yaml(value: &Value) -> String {
    match value {
        Value::String(text) => format!("!unsafe {}", Value::String(text.clone())),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(unsafe_yaml).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(object) => {
            let entries: Vec<String> = object
                .iter()
                .map(|(key, item)| format!("{}: {}", Value::String(key.clone()), unsafe_yaml(item)))
                .collect();
            format!("{{{}}}", entries.join(", "))
        }
        other => other.to_string(),
    }
}

/// Whether `text` holds a Jinja start mark.
fn marked(text: &str) -> bool {
    TEMPLATE_MARKS.iter().any(|mark| text.contains(mark))
}

/// Whether any string in `value` (or key) holds a Jinja start mark.
fn holds_template(value: &Value) -> bool {
    match value {
        Value::String(text) => marked(text),
        Value::Array(items) => items.iter().any(holds_template),
        Value::Object(object) => object
            .iter()
            .any(|(key, item)| marked(key) || holds_template(item)),
        _ => false,
    }
}

/// A requester's name in a message: bounded, control characters escaped.
fn loggable(text: &str) -> String {
    crate::contract::limits::loggable(&text.chars().take(128).collect::<String>())
}

fn write_file(path: &Path, text: &str) -> Result<PathBuf, Failure> {
    std::fs::write(path, text)
        .map(|()| path.to_owned())
        .map_err(|error| {
            Failure::infrastructure(format!("cannot write {}: {error}", path.display()))
        })
}

/// `[A-Za-z_][A-Za-z0-9_]*`: what ansible takes as a variable name.
pub(super) fn is_variable_name(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && text.len() <= 128
}

/// A group name ansible keeps as it is (the same rule as a variable's).
fn is_group_name(text: &str) -> bool {
    is_variable_name(text)
}

/// A role directory's name.
fn is_role_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 128
        && !text.starts_with(['.', '-'])
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

/// An inventory host name: letters, digits, `._-`, not an option.
fn is_inventory_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 253
        && !text.starts_with('-')
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

/// `text` on one line, bounded.
fn one_line(text: &str) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    joined.chars().take(MAX_STDERR_QUOTED).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A result past the report's bound loses what the event stream's
    /// artifact keeps, facts first, and nothing more than it must.
    #[test]
    fn a_result_is_fitted_to_its_bound_facts_first() {
        let mut result = AnsibleResult {
            operation: "ansible.playbook.run".into(),
            package: None,
            playbook: None,
            role: None,
            check_mode: false,
            exit_code: Some(0),
            recap: BTreeMap::new(),
            changed_hosts: Vec::new(),
            failed_hosts: Vec::new(),
            unreachable_hosts: Vec::new(),
            facts: BTreeMap::from([(
                "a".to_owned(),
                BTreeMap::from([("big".to_owned(), json!("x".repeat(10_000)))]),
            )]),
            evidence: vec![crate::contract::ops::AnsibleEvidence {
                host: "a".into(),
                task: "t".into(),
                passed: true,
                event_line: 1,
            }],
            events_artifact: None,
            tasks: 1,
            inventory: None,
            problems: Vec::new(),
        };
        assert!(result.clone().fit_within(100_000).is_empty());
        assert_eq!(result.fit_within(5_000), vec!["facts"]);
        assert!(result.facts.is_empty() && result.evidence.len() == 1);
        assert_eq!(result.fit_within(10), vec!["evidence"]);
    }

    fn target(id: &str, port: &str) -> Host {
        Host {
            name: id.to_owned(),
            binding: Binding {
                address: "127.0.0.1".to_owned(),
                port: port.parse().unwrap(),
                host_key: HostKey::Key("ssh-ed25519 AAAA".to_owned()),
            },
            groups: Vec::new(),
        }
    }

    #[test]
    fn an_inventory_names_its_bad_groups_and_may_not_choose_the_connection() {
        let listed = json!({
            "_meta": {"hostvars": {
                "a": {"ansible_host": "127.0.0.1", "ansible_port": 2222},
                "b": {"ansible_host": "127.0.0.1", "ansible_port": 2222, "ansible_connection": "local"},
                "c": {"ansible_host": "203.0.113.9"}
            }},
            "all": {"children": ["ungrouped", "web", "web-servers", "empty"]},
            "web": {"hosts": ["a"]},
            "web-servers": {"hosts": ["b"]},
            "ungrouped": {"hosts": ["c"]}
        });
        let read = check_inventory(&listed, &[target("a", "2222")]);
        assert_eq!(read.report.hosts, ["a", "b", "c"]);
        assert_eq!(read.report.groups["web"], ["a"]);
        assert_eq!(read.problems.len(), 2, "{:?}", read.problems);
        assert!(read.problems.iter().any(|p| p.contains("`web-servers`")));
        assert!(read
            .problems
            .iter()
            .any(|p| p.contains("`empty` has no hosts")));
        let refusal = read.refusal.unwrap();
        assert!(
            refusal.contains("host `b` sets `ansible_connection`"),
            "{refusal}"
        );
        assert!(refusal.contains("host `c` (203.0.113.9:22)"), "{refusal}");
        assert!(!refusal.contains("host `a`"), "{refusal}");
    }

    #[test]
    fn an_inventory_may_not_escalate_or_template() {
        let listed = json!({
            "_meta": {"hostvars": {
                "a": {"ansible_host": "127.0.0.1", "ansible_port": 2222, "ansible_become": true,
                      "ansible_python_interpreter": "/tmp/evil", "motd": "{{ lookup('pipe', 'id') }}",
                      "fine": "plain text"}
            }},
            "all": {"children": ["web"]},
            "web": {"hosts": ["a"]}
        });
        let refusal = check_inventory(&listed, &[target("a", "2222")])
            .refusal
            .unwrap();
        assert!(refusal.contains("`ansible_become`"), "{refusal}");
        assert!(
            refusal.contains("`ansible_python_interpreter`"),
            "{refusal}"
        );
        assert!(
            refusal.contains("`motd` holds a Jinja template"),
            "{refusal}"
        );
        assert!(!refusal.contains("`fine`"), "{refusal}");
    }

    #[test]
    fn an_inventory_name_may_not_template() {
        let host = "{{ lookup('pipe', 'id') }}";
        let listed = json!({
            "_meta": {"hostvars": {
                host: {"ansible_host": "127.0.0.1", "ansible_port": 2222},
                "a": {"ansible_host": "127.0.0.1", "ansible_port": 2222, "{% x %}": 1}
            }},
            "all": {"children": ["{# g #}", "ungrouped"]},
            "{# g #}": {"hosts": ["a"]},
            "ungrouped": {"hosts": [host]}
        });
        let refusal = check_inventory(&listed, &[target("a", "2222")])
            .refusal
            .unwrap();
        assert!(
            refusal.contains("host `{{ lookup('pipe', 'id') }}`: its name holds a Jinja template"),
            "{refusal}"
        );
        assert!(refusal.contains("group `{# g #}`: its name"), "{refusal}");
        assert!(refusal.contains("variable `{% x %}` holds"), "{refusal}");
    }

    #[test]
    fn extra_variables_are_unsafe_yaml() {
        let vars =
            json!({"marker": "{{ lookup('pipe', 'id') }}", "n": 3, "list": ["a\"b", {"k": null}]});
        let text = unsafe_yaml(&vars);
        assert!(
            text.contains(r#""marker": !unsafe "{{ lookup('pipe', 'id') }}""#),
            "{text}"
        );
        assert!(
            text.contains(r#""list": [!unsafe "a\"b", {"k": null}]"#),
            "{text}"
        );
        let read: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        assert!(matches!(&read["marker"], serde_yaml::Value::Tagged(_)));
    }

    #[test]
    fn the_generated_inventory_is_the_targets() {
        let mut web = target("node-1", "2222");
        web.groups = vec!["web".into()];
        let text = generated_inventory(&[web, target("node-2", "22")]);
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["all"]["hosts"]["node-1"]["ansible_port"], 2222);
        assert_eq!(
            value["all"]["children"]["web"]["hosts"],
            json!({"node-1": {}})
        );
        assert!(serde_yaml::from_str::<serde_yaml::Mapping>(&text).is_ok());
    }

    #[test]
    fn names_are_what_ansible_reads_as_names() {
        assert!(is_variable_name("marker_path") && is_variable_name("_x1"));
        assert!(!is_variable_name("1x") && !is_variable_name("a-b") && !is_variable_name(""));
        assert!(is_role_name("web") && is_role_name("my.role-2"));
        assert!(!is_role_name("../web") && !is_role_name("-x") && !is_role_name("a/b"));
    }
}
