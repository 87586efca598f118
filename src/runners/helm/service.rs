use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use super::HelmConfig;
use crate::artifacts::inputs::InputRef;
use crate::contract::ops::{ChartRef, ClusterRef, HelmInputs, HelmInputs as I, Vars};
use crate::contract::ops::{HelmObject, HelmResult, HelmTestRun};
use crate::contract::{FailureCategory, RetentionClass, RunnerType};
use crate::runner::kit::kube::{self as cluster, judge, Credentials};
use crate::runner::tool::{self, ToolCommand, ToolExit, Workdir};
use crate::runner::{Assignment, ExecutionContext, ExecutionOutcome, Executor, Failure};

/// The most of helm's output kept to read (a status with its manifest, a
/// rendered chart).
const MAX_CAPTURE: usize = 16 * 1024 * 1024;
/// What is kept of a logged helm's stderr for a failure message.
const MAX_DIAGNOSTICS_CAPTURE: usize = 64 * 1024;
/// The most of a release's notes the result carries.
const MAX_NOTES: usize = 4096;
/// The name of the rendered manifests output.
const MANIFESTS: &str = "rendered-manifests.yaml";
/// What helm's own timeout leaves of the attempt's, to report in.
const REPORT_MARGIN: Duration = Duration::from_secs(5);

/// The helm runner's executor.
pub struct HelmRunner {
    config: HelmConfig,
}

impl HelmRunner {
    pub fn new(config: HelmConfig) -> Self {
        Self { config }
    }
}

impl Executor for HelmRunner {
    type Inputs = HelmInputs;

    fn runner_type(&self) -> RunnerType {
        RunnerType::Helm
    }

    fn capabilities(&self) -> Vec<String> {
        vec!["helm".into()]
    }

    async fn preflight(&self) -> Result<(), String> {
        let helm = &self.config.helm;
        crate::runner::preflight::tool_version(
            "helm",
            helm,
            &["version", "--short"],
            &[""],
            (3, 8),
            4,
        )
        .await
        .map(|_| ())
    }

    async fn execute(
        &self,
        assignment: Assignment,
        inputs: HelmInputs,
        context: ExecutionContext,
    ) -> ExecutionOutcome {
        let workdir = match Workdir::for_tools(context.tools()) {
            Ok(workdir) => workdir,
            Err(error) => {
                return Failure::infrastructure(format!("no working directory for helm: {error}"))
                    .into()
            }
        };
        let policy = context.policy();
        let rules = policy.tenant(&assignment.spec.tenant).operations.clone();
        let mut run = Run {
            helm: &self.config.helm,
            workdir: &workdir,
            context: &context,
            kubeconfig: None,
            cluster: None,
            wait_at_most: None,
            report: HelmResult::default(),
        };
        if let Some(cluster_ref) = cluster_of(&inputs) {
            if let Err(failure) = run.connect(policy, cluster_ref, self.config.kubernetes) {
                return failure.into();
            }
        }
        let done = run.perform(&inputs, &rules).await;
        let report = serde_json::to_value(&run.report).unwrap_or(Value::Null);
        match done {
            Ok(message) => ExecutionOutcome::succeeded(message, report),
            Err(failure) => failure.outcome(Some(report)),
        }
    }
}

fn cluster_of(inputs: &HelmInputs) -> Option<&ClusterRef> {
    match inputs {
        I::HelmInstall(release) | I::HelmUpgrade(release) => Some(&release.cluster),
        I::HelmRollback(rollback) => Some(&rollback.cluster),
        I::HelmUninstall(release) => Some(&release.cluster),
        I::HelmTest(test) => Some(&test.cluster),
        I::HelmTemplate(_) => None,
    }
}

/// A kubeconfig only helm reads (0600, in the tool's private directory):
/// the operator's endpoint and CAs, the attempt's credentials. The CA is
/// inline, as the operator's CA file is outside the tool's sandbox. Written
/// as JSON, which YAML reads, so no value needs quoting rules of its own.
fn kubeconfig(
    workdir: &Workdir,
    cluster_ref: &ClusterRef,
    endpoint: &crate::policy::clusters::ClusterEndpoint,
    credentials: &Credentials,
) -> Result<PathBuf, String> {
    use base64::Engine as _;
    let mut cluster = json!({"server": endpoint.server});
    let ca = match (&endpoint.ca_file, &endpoint.ca_pem) {
        (Some(file), _) => Some(std::fs::read(file).map_err(|error| {
            format!("cannot read the cluster's CA {}: {error}", file.display())
        })?),
        (None, Some(pem)) => Some(pem.as_bytes().to_vec()),
        (None, None) => None,
    };
    if let Some(ca) = ca {
        cluster["certificate-authority-data"] =
            json!(base64::engine::general_purpose::STANDARD.encode(ca));
    }
    if let Some(name) = &endpoint.tls_server_name {
        cluster["tls-server-name"] = json!(name);
    }
    let user = match credentials {
        Credentials::Token(token) => json!({"token": token}),
        Credentials::ClientCertificate {
            certificate_data,
            key_data,
        } => json!({"client-certificate-data": certificate_data, "client-key-data": key_data}),
    };
    let config = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": cluster_ref.name, "cluster": cluster}],
        "users": [{"name": "execplane", "user": user}],
        "contexts": [{"name": "execplane", "context": {"cluster": cluster_ref.name, "user": "execplane"}}],
        "current-context": "execplane",
    });
    workdir
        .secret_file("kubeconfig", &config.to_string())
        .map_err(|error| format!("cannot write the kubeconfig: {error}"))
}

/// One attempt's helm invocations.
struct Run<'a> {
    helm: &'a Path,
    workdir: &'a Workdir,
    context: &'a ExecutionContext,
    kubeconfig: Option<PathBuf>,
    /// The cluster's name and a client of the runner's own (discovery).
    cluster: Option<(String, kube::Client)>,
    /// How long helm may wait, when the JobSpec says (`inputs.timeout`).
    wait_at_most: Option<Duration>,
    report: HelmResult,
}

impl Run<'_> {
    /// A client of the cluster for the runner's own checks, and the
    /// kubeconfig helm reads.
    fn connect(
        &mut self,
        policy: &crate::policy::OperatorPolicy,
        cluster_ref: &ClusterRef,
        settings: cluster::ClientSettings,
    ) -> Result<(), Failure> {
        let client = cluster::connect(policy, cluster_ref, settings)?;
        self.cluster = Some((cluster_ref.name.clone(), client));
        let (endpoint, credentials) = cluster::identify(policy, cluster_ref)?;
        let path = kubeconfig(self.workdir, cluster_ref, endpoint, &credentials)
            .map_err(Failure::infrastructure)?;
        self.kubeconfig = Some(path);
        Ok(())
    }

    /// The operation, its release and namespace in the report first.
    async fn perform(
        &mut self,
        inputs: &HelmInputs,
        rules: &crate::policy::OperationRules,
    ) -> Result<String, Failure> {
        let (release, namespace) = match inputs {
            I::HelmTemplate(template) => (&template.release, &template.namespace),
            I::HelmInstall(release) | I::HelmUpgrade(release) => {
                (&release.release, &release.namespace)
            }
            I::HelmRollback(rollback) => (&rollback.release, &rollback.namespace),
            I::HelmUninstall(release) => (&release.release, &release.namespace),
            I::HelmTest(test) => (&test.release, &test.namespace),
        };
        self.report.release = release.clone();
        self.report.namespace = namespace.clone();
        match inputs {
            I::HelmTemplate(template) => self.template(&rules.helm, template).await,
            I::HelmInstall(release) => self.deploy("install", rules, release).await,
            I::HelmUpgrade(release) => self.deploy("upgrade", rules, release).await,
            I::HelmRollback(rollback) => {
                // Revision 0 is the latest to `helm get`, and the one
                // before it to `helm rollback`: what is checked must be
                // what is rolled back to.
                if rollback.revision == 0 {
                    return Err(Failure::contract(
                        "inputs.revision: a release revision, 1 or more",
                    ));
                }
                let revision = rollback.revision.to_string();
                // What it goes back to, and what it replaces.
                self.check_release(namespace, Some(rollback.revision), rules)
                    .await?;
                self.check_release(namespace, None, rules).await?;
                let args = ["rollback", release, &revision, "--wait"];
                self.act(&args, namespace, true).await
            }
            I::HelmUninstall(_) => {
                self.check_release(namespace, None, rules).await?;
                self.act(&["uninstall", release], namespace, false).await?;
                self.report.status = Some("uninstalled".into());
                Ok(format!("release `{release}` uninstalled"))
            }
            I::HelmTest(test) => {
                self.check_release(namespace, None, rules).await?;
                self.test(release, namespace, test.allow_no_tests).await
            }
        }
    }

    /// helm with the runner's environment: its home, cache, configuration,
    /// data and plugin directories inside the working directory (no plugin
    /// or repository of the host's), the attempt's kubeconfig.
    fn command(&self, args: &[&str]) -> ToolCommand {
        let home = self.workdir.path().join("helm");
        let mut command = ToolCommand::new(self.helm)
            .base_env(self.workdir)
            .env("HELM_CACHE_HOME", home.join("cache").display().to_string())
            .env(
                "HELM_CONFIG_HOME",
                home.join("config").display().to_string(),
            )
            .env("HELM_DATA_HOME", home.join("data").display().to_string())
            .env("HELM_PLUGINS", home.join("plugins").display().to_string())
            // helm falls back to a Docker configuration for registry logins:
            // the attempt's own, which holds none.
            .env("DOCKER_CONFIG", home.join("docker").display().to_string())
            .args(args.iter().copied());
        if let Some(kubeconfig) = &self.kubeconfig {
            command = command
                .arg("--kubeconfig")
                .arg(kubeconfig.as_os_str().to_owned());
        }
        command
    }

    /// Runs helm, its output logged; its exit, or the failure when it did
    /// not succeed.
    async fn helm(&self, what: &str, command: ToolCommand) -> Result<ToolExit, Failure> {
        self.run_helm(what, command.capture(MAX_DIAGNOSTICS_CAPTURE))
            .await
    }

    /// Runs helm for data (a status, a rendered chart): its stdout is
    /// captured and never logged — what the runner keeps of it is redacted
    /// or masked where it lands.
    async fn helm_data(&self, what: &str, command: ToolCommand) -> Result<ToolExit, Failure> {
        self.run_helm(what, command.stdout_as_data(MAX_CAPTURE))
            .await
    }

    async fn run_helm(&self, what: &str, command: ToolCommand) -> Result<ToolExit, Failure> {
        tool::run_judged(self.context, self.workdir, what, command, |said| {
            if said.contains("Kubernetes cluster unreachable") {
                FailureCategory::TargetUnreachable
            } else if helm_timed_out(said) {
                // helm's own `--timeout` is at most what the attempt's
                // deadline leaves (`timeout()`): its expiry, when that is
                // what is left, is the deadline's; before it, the tenant's
                // own `inputs.timeout` ran out on a release not ready.
                if self.context.seconds_left(Duration::ZERO) <= REPORT_MARGIN.as_secs() + 1 {
                    FailureCategory::Timeout
                } else {
                    FailureCategory::VerificationFailed
                }
            } else if said.contains("has no deployed releases")
                || said.contains("release: not found")
                || said.contains("cannot re-use a name that is still in use")
                || said.contains("forbidden")
            {
                FailureCategory::Contract
            } else {
                FailureCategory::RunnerError
            }
        })
        .await
    }

    /// helm's own timeout: what is left of the attempt, less a margin to
    /// report in.
    fn timeout(&self) -> String {
        let left = self.context.seconds_left(REPORT_MARGIN);
        let wanted = self
            .wait_at_most
            .map_or(left, |wanted| wanted.as_secs().max(1));
        format!("{}s", wanted.min(left))
    }

    /// The chart archive: pinned by digest, from the artifact storage and
    /// checked; else pulled by helm from its trusted repository, or as a
    /// chart of the marketplace (and checked against its digest when it
    /// has one: a marketplace entry by digest admits only that one).
    async fn chart(
        &mut self,
        trusted: &crate::policy::helm::HelmRules,
        chart: &ChartRef,
    ) -> Result<PathBuf, Failure> {
        let by_digest = trusted.trusts_digest(chart);
        if !trusted.trusts(chart) {
            return Err(Failure::new(
                FailureCategory::Policy,
                format!(
                    "inputs.chart: chart `{}` {} from `{}` is not from a trusted source, nor on the marketplace (operator policy rules helm.chart_sources, helm_marketplace)",
                    chart.name, chart.version, chart.repository
                ),
            ));
        }
        self.report.chart = Some(format!("{}-{}", chart.name, chart.version));
        self.report.chart_digest = chart.digest.clone();
        let contract = |message: String| Failure::new(FailureCategory::Contract, message);
        let pinned = match &chart.digest {
            Some(digest) => Some(
                InputRef::parse(digest)
                    .map_err(|message| contract(format!("inputs.chart.digest: {message}")))?,
            ),
            None => None,
        };
        // Trusted by its digest: the archive stored under it, nothing else
        // (its repository is the requester's word, never fetched). Trusted
        // by its repository: pulled from there, never from the storage
        // (where anyone may have stored anything under a digest).
        if by_digest {
            let Some(reference) = &pinned else {
                return Err(contract("inputs.chart.digest: required".into()));
            };
            return self
                .workdir
                .fetch_approved(self.context, reference)
                .await
                .map_err(|error| Failure::new(error.category(), format!("inputs.chart: {error}")));
        }
        self.pull(chart, pinned.as_ref()).await
    }

    /// A chart trusted by its repository, pulled from there (and checked
    /// against its digest when one is given).
    async fn pull(&self, chart: &ChartRef, pinned: Option<&InputRef>) -> Result<PathBuf, Failure> {
        let contract = |message: String| Failure::new(FailureCategory::Contract, message);
        let destination = self.workdir.path().join("charts");
        std::fs::create_dir_all(&destination).map_err(|error| {
            Failure::new(
                FailureCategory::Infrastructure,
                format!("no directory for the chart: {error}"),
            )
        })?;
        let destination_arg = destination.display().to_string();
        let oci = chart.repository.starts_with("oci://");
        let (repositories, registry_args) = match (&chart.login, oci) {
            (Some(login), false) => (
                Some(self.log_in(&chart.repository, login).await?),
                Vec::new(),
            ),
            (Some(login), true) => (None, self.registry_login(&chart.repository, login)?),
            (None, _) => (None, Vec::new()),
        };
        let reference = match (oci, &repositories) {
            (true, _) => format!("{}/{}", chart.repository.trim_end_matches('/'), chart.name),
            (false, Some(_)) => format!("{LOGGED_IN}/{}", chart.name),
            (false, None) => chart.name.clone(),
        };
        let mut args = vec![
            "pull",
            reference.as_str(),
            "--version",
            chart.version.as_str(),
            "--destination",
            destination_arg.as_str(),
        ];
        if !oci && repositories.is_none() {
            args.extend(["--repo", chart.repository.as_str()]);
        }
        args.extend(registry_args.iter().map(String::as_str));
        let mut command = self.command(&args);
        if let Some(repositories) = &repositories {
            command = command.env("HELM_REPOSITORY_CONFIG", repositories);
        }
        self.helm_data("helm pull", command)
            .await
            .map_err(|failure| refused_login(&chart.repository, chart.login.as_ref(), failure))?;
        let pulled = std::fs::read_dir(&destination)
            .ok()
            .and_then(|entries| {
                entries
                    .flatten()
                    .map(|entry| entry.path())
                    .find(|path| path.is_file())
            })
            .ok_or_else(|| {
                contract(format!(
                    "helm pull left no chart archive for `{}`",
                    chart.name
                ))
            })?;
        if let Some(reference) = pinned {
            let bytes = std::fs::read(&pulled).map_err(|error| {
                Failure::new(
                    FailureCategory::Infrastructure,
                    format!("reading the pulled chart: {error}"),
                )
            })?;
            let actual = InputRef::of(&bytes);
            if actual != *reference {
                return Err(contract(format!(
                    "inputs.chart.digest: the chart pulled from `{}` is {actual}, not {reference}",
                    chart.repository
                )));
            }
        }
        Ok(pulled)
    }

    /// Logs in to a classic chart repository: its login written to a
    /// repository configuration of the attempt's own (0600, never an
    /// argument), its index fetched with it. The configuration's path,
    /// which names the repository [`LOGGED_IN`].
    async fn log_in(
        &self,
        repository: &str,
        login: &crate::contract::ops::RepositoryLogin,
    ) -> Result<String, Failure> {
        let files = self.login_files(login)?;
        let mut entry = serde_json::json!({
            "name": LOGGED_IN,
            "url": repository,
            "pass_credentials_all": false,
        });
        for (field, value) in [
            ("username", &files.username),
            ("password", &files.password),
            ("certFile", &files.cert_file),
            ("keyFile", &files.key_file),
            ("caFile", &files.ca_file),
        ] {
            if let Some(value) = value {
                entry[field] = value.as_str().into();
            }
        }
        let configuration = serde_json::json!({
            "apiVersion": "",
            "generated": "0001-01-01T00:00:00Z",
            "repositories": [entry],
        });
        // JSON is YAML: helm reads it as its repositories.yaml.
        let path = self
            .workdir
            .secret_file("repositories.yaml", &configuration.to_string())
            .map_err(|error| {
                Failure::infrastructure(format!("cannot write the repository login: {error}"))
            })?
            .display()
            .to_string();
        // helm says why an update failed on stdout.
        let command = self
            .command(&["repo", "update", LOGGED_IN, "--fail-on-repo-update-fail"])
            .env("HELM_REPOSITORY_CONFIG", &path)
            .says_why_on_stdout(MAX_DIAGNOSTICS_CAPTURE);
        self.run_helm("helm repo update", command)
            .await
            .map_err(|failure| refused_login(repository, Some(login), failure))?;
        Ok(path)
    }

    /// Logs in to an OCI registry: a basic login written as the attempt's
    /// own registry configuration (0600, never an argument; helm reads no
    /// other, and no Docker configuration of the runner's host), and the
    /// TLS files as 0600 files. The arguments that point `helm pull` at
    /// them.
    fn registry_login(
        &self,
        repository: &str,
        login: &crate::contract::ops::RepositoryLogin,
    ) -> Result<Vec<String>, Failure> {
        use base64::Engine;
        let login = self.login_files(login)?;
        let mut args = Vec::new();
        if let (Some(username), Some(password)) = (&login.username, &login.password) {
            if username.contains(':') {
                // HTTP basic auth ends the name at the first `:`.
                return Err(Failure::contract(
                    "inputs.chart.login.username: holds a `:`, which HTTP basic auth cannot carry",
                ));
            }
            let host = repository
                .trim_start_matches("oci://")
                .split('/')
                .next()
                .unwrap_or_default();
            let pair = format!("{username}:{password}");
            let configuration = serde_json::json!({
                "auths": {host: {"auth": base64::engine::general_purpose::STANDARD.encode(pair)}}
            });
            let path = self
                .workdir
                .secret_file("registries.json", &configuration.to_string())
                .map_err(|error| {
                    Failure::infrastructure(format!("cannot write the registry login: {error}"))
                })?;
            args.extend(["--registry-config".to_owned(), path.display().to_string()]);
        }
        for (flag, file) in [
            ("--cert-file", &login.cert_file),
            ("--key-file", &login.key_file),
            ("--ca-file", &login.ca_file),
        ] {
            if let Some(file) = file {
                args.extend([flag.to_owned(), file.clone()]);
            }
        }
        Ok(args)
    }

    /// A login's parts, resolved: the basic login's text, and each PEM
    /// written to a 0600 file of the attempt's (its path).
    fn login_files(
        &self,
        login: &crate::contract::ops::RepositoryLogin,
    ) -> Result<LoginFiles, Failure> {
        let text = |value: &Option<serde_json::Value>, field: &str| {
            value
                .as_ref()
                .map(|value| {
                    value.as_str().map(str::to_owned).ok_or_else(|| {
                        Failure::contract(format!("inputs.chart.login.{field}: not text"))
                    })
                })
                .transpose()
        };
        let file = |value: &Option<serde_json::Value>, field: &str| {
            text(value, field)?
                .map(|pem| {
                    self.workdir
                        .secret_file(&format!("login-{field}.pem"), &pem)
                        .map(|path| path.display().to_string())
                        .map_err(|error| {
                            Failure::infrastructure(format!(
                                "cannot write inputs.chart.login.{field}: {error}"
                            ))
                        })
                })
                .transpose()
        };
        Ok(LoginFiles {
            username: text(&login.username, "username")?,
            password: text(&login.password, "password")?,
            cert_file: file(&login.client_cert, "client_cert")?,
            key_file: file(&login.client_key, "client_key")?,
            ca_file: file(&login.ca, "ca")?,
        })
    }

    /// The values files helm merges, in order: each values artifact
    /// (fetched, checked against its digest and tenant), then the inline
    /// values as a 0600 file (secret references already resolved).
    async fn values(&self, artifacts: &[InputRef], values: &Vars) -> Result<Vec<String>, Failure> {
        let mut files = Vec::with_capacity(artifacts.len() + 1);
        let mut fetched: Vec<(&InputRef, String)> = Vec::new();
        for reference in artifacts {
            // One fetch per artifact, however often it is listed.
            if let Some((_, file)) = fetched.iter().find(|(seen, _)| *seen == reference) {
                files.push(file.clone());
                continue;
            }
            let file = self
                .workdir
                .fetch_input(self.context, reference)
                .await
                .map_err(|error| {
                    Failure::new(
                        error.category(),
                        format!("inputs.values_artifacts: {error}"),
                    )
                })?
                .display()
                .to_string();
            fetched.push((reference, file.clone()));
            files.push(file);
        }
        let text = serde_json::to_string(values).unwrap_or_else(|_| "{}".into());
        let inline = self
            .workdir
            .secret_file("values.json", &text)
            .map_err(|error| {
                Failure::new(
                    FailureCategory::Infrastructure,
                    format!("cannot write the values file: {error}"),
                )
            })?;
        files.push(inline.display().to_string());
        Ok(files)
    }

    /// `helm.template`: the chart rendered, without a cluster.
    async fn template(
        &mut self,
        trusted: &crate::policy::helm::HelmRules,
        template: &crate::contract::ops::HelmTemplate,
    ) -> Result<String, Failure> {
        let chart = &template.chart;
        let archive = self.chart(trusted, chart).await?.display().to_string();
        let values = self
            .values(&template.values_artifacts, &template.values)
            .await?;
        let release = self.report.release.clone();
        let mut args = vec![
            "template",
            &release,
            &archive,
            "--namespace",
            &template.namespace,
        ];
        args.extend(values.iter().flat_map(|file| ["--values", file.as_str()]));
        self.context
            .progress(format!("helm template {release}"), None);
        // Rendering needs no cluster and no network (the chart is here).
        let exit = self
            .helm_data("helm template", self.command(&args).offline())
            .await?;
        let rendered = String::from_utf8_lossy(&exit.stdout).into_owned();
        self.manifests(&rendered).await?;
        Ok(format!(
            "chart `{}` rendered for release `{release}`: {} object(s)",
            chart.name,
            self.report.objects.len()
        ))
    }

    /// `helm.install` and `helm.upgrade`.
    async fn deploy(
        &mut self,
        verb: &str,
        rules: &crate::policy::OperationRules,
        release: &crate::contract::ops::HelmRelease,
    ) -> Result<String, Failure> {
        let archive = self.chart(&rules.helm, &release.chart).await?;
        let archive = archive.display().to_string();
        let values = self
            .values(&release.values_artifacts, &release.values)
            .await?;
        // An upgrade replaces (and deletes) what the release holds now: it
        // must hold nothing outside the tenant's reach. Helm diffs against
        // the last deployed revision, which is not the latest after a
        // failed upgrade: both are checked.
        if verb == "upgrade" {
            self.check_release(&release.namespace, None, rules).await?;
            if let Some(deployed) = self.deployed_revision(&release.namespace).await? {
                self.check_release(&release.namespace, Some(deployed), rules)
                    .await?;
            }
        }
        let mut args = vec![verb, release.release.as_str(), archive.as_str()];
        args.extend(values.iter().flat_map(|file| ["--values", file.as_str()]));
        // A chart's CRDs (crds/) are cluster-scoped: installed only where
        // the tenant may act cluster-wide.
        let cluster_wide = self.cluster.as_ref().is_some_and(|(cluster, _)| {
            rules
                .kubernetes
                .clusters
                .get(cluster)
                .is_some_and(|cluster| cluster.cluster_scoped)
        });
        if !cluster_wide {
            args.push("--skip-crds");
        }
        // Rendered once (a dry run, as the real call renders: upgrade or
        // install, the cluster's capabilities; `lookup` only where the
        // operator allows it), judged against the tenant's policy, and then
        // exactly that render installed: the chart handed to helm is the
        // checked render frozen, so `randInt`, `now` or `lookup` cannot make
        // the install differ from what was checked.
        let rendered = self
            .dry_run(&args, &release.namespace, rules.helm.lookup)
            .await?;
        let judged = self
            .check_objects(
                release_objects(&rendered).as_bytes(),
                &release.namespace,
                rules,
            )
            .await?;
        let frozen = self
            .freeze(&archive, &rendered, &judged, cluster_wide)
            .await?
            .display()
            .to_string();
        args[2] = frozen.as_str();
        if release.wait || release.wait_for_jobs {
            args.push("--wait");
        }
        if release.wait_for_jobs {
            args.push("--wait-for-jobs");
        }
        self.wait_at_most = release.timeout.map(|timeout| timeout.as_std());
        if release.atomic {
            args.push("--atomic");
        }
        self.context
            .progress(format!("helm {verb} {}", release.release), None);
        self.act(&args, &release.namespace, true).await
    }

    /// The release as helm renders it for `args` (a dry run: `lookup`
    /// reads the cluster only with `lookup`).
    async fn dry_run(
        &self,
        args: &[&str],
        namespace: &str,
        lookup: bool,
    ) -> Result<Value, Failure> {
        let timeout = self.timeout();
        let dry_run = if lookup {
            "--dry-run=server"
        } else {
            "--dry-run=client"
        };
        let mut dry = args.to_vec();
        dry.extend([
            "--namespace",
            namespace,
            dry_run,
            "--output",
            "json",
            "--timeout",
            &timeout,
        ]);
        let rendered = self.helm_data("helm dry run", self.command(&dry)).await?;
        helm_json(&rendered.stdout).map_err(|error| {
            Failure::new(
                FailureCategory::RunnerError,
                format!("helm printed no release: {error}"),
            )
        })
    }

    /// The newest revision of the release whose status is `deployed`, by
    /// `helm history` (none for a release with no such revision).
    async fn deployed_revision(&self, namespace: &str) -> Result<Option<u32>, Failure> {
        let release = self.report.release.clone();
        let args = [
            "history",
            &release,
            "--namespace",
            namespace,
            "--max",
            "256",
            "--output",
            "json",
        ];
        let exit = self.helm_data("helm history", self.command(&args)).await?;
        let history = helm_json(&exit.stdout).map_err(|error| {
            Failure::new(
                FailureCategory::RunnerError,
                format!("helm history printed no history: {error}"),
            )
        })?;
        Ok(history
            .as_array()
            .into_iter()
            .flatten()
            .filter(|revision| revision["status"] == "deployed")
            .filter_map(|revision| revision["revision"].as_u64())
            .filter_map(|revision| u32::try_from(revision).ok())
            .max())
    }

    /// The checked render as a chart of its own: the original's metadata
    /// (its dependencies rendered in), one template that emits the render
    /// verbatim (`.Files.Get` output is not rendered again), the rendered
    /// notes, and the chart's CRDs where they will be installed. Hooks are
    /// documents of the render, recognised again by their annotations.
    async fn freeze(
        &self,
        archive: &str,
        rendered: &Value,
        judged: &[Value],
        cluster_wide: bool,
    ) -> Result<PathBuf, Failure> {
        let dir = self.workdir.path().join("frozen");
        let local = |error: std::io::Error| {
            Failure::new(
                FailureCategory::Infrastructure,
                format!("writing the checked render as a chart: {error}"),
            )
        };
        let mut metadata = rendered["chart"]["metadata"].clone();
        let Some(fields) = metadata.as_object_mut() else {
            return Err(Failure::new(
                FailureCategory::RunnerError,
                "helm's dry run printed no chart metadata",
            ));
        };
        fields.remove("dependencies");
        for sub in ["templates", "rendered", "crds"] {
            std::fs::create_dir_all(dir.join(sub)).map_err(local)?;
        }
        // JSON is YAML.
        std::fs::write(dir.join("Chart.yaml"), metadata.to_string()).map_err(local)?;
        // What was judged, as the judge read it: one JSON document each
        // (JSON is YAML), never helm's text, which another parser may read
        // otherwise (apimachinery splits at a line `---#`, libyaml does not).
        std::fs::write(dir.join("rendered/manifest.yaml"), stream(judged)).map_err(local)?;
        std::fs::write(
            dir.join("templates/rendered.yaml"),
            "{{ .Files.Get \"rendered/manifest.yaml\" }}\n",
        )
        .map_err(local)?;
        if let Some(notes) = rendered["info"]["notes"]
            .as_str()
            .filter(|notes| !notes.is_empty())
        {
            std::fs::write(dir.join("rendered/NOTES.txt"), notes).map_err(local)?;
            std::fs::write(
                dir.join("templates/NOTES.txt"),
                "{{ .Files.Get \"rendered/NOTES.txt\" }}",
            )
            .map_err(local)?;
        }
        if cluster_wide {
            let crds = self
                .helm_data(
                    "helm show crds",
                    self.command(&["show", "crds", archive]).offline(),
                )
                .await?;
            let definitions = definitions_only(&crds.stdout)?;
            std::fs::write(dir.join("crds/crds.yaml"), stream(&definitions)).map_err(local)?;
        }
        Ok(dir)
    }

    /// A helm command on the cluster, then the release's status (when it
    /// still has one).
    async fn act(
        &mut self,
        args: &[&str],
        namespace: &str,
        status_after: bool,
    ) -> Result<String, Failure> {
        let timeout = self.timeout();
        let mut full: Vec<&str> = args.to_vec();
        full.extend(["--namespace", namespace, "--timeout", &timeout]);
        let what = format!("helm {}", args[0]);
        self.helm(&what, self.command(&full)).await?;
        if !status_after {
            return Ok(String::new());
        }
        self.status(namespace).await?;
        Ok(format!(
            "release `{}`: revision {}, {}",
            self.report.release,
            self.report
                .revision
                .map_or("?".into(), |revision| revision.to_string()),
            self.report.status.as_deref().unwrap_or("unknown")
        ))
    }

    /// `helm status -o json`: revision, status, notes, the manifest (stored
    /// as the rendered manifests output) and the test hooks' last runs.
    async fn status(&mut self, namespace: &str) -> Result<(), Failure> {
        let release = self.report.release.clone();
        let args = [
            "status",
            &release,
            "--namespace",
            namespace,
            "--output",
            "json",
        ];
        let exit = self.helm_data("helm status", self.command(&args)).await?;
        let status: Value = helm_json(&exit.stdout).map_err(|error| {
            Failure::new(
                FailureCategory::RunnerError,
                format!("helm status printed no release: {error}"),
            )
        })?;
        self.report.revision = status["version"]
            .as_u64()
            .and_then(|revision| u32::try_from(revision).ok());
        self.report.status = status
            .pointer("/info/status")
            .and_then(Value::as_str)
            .map(str::to_owned);
        self.report.description = status
            .pointer("/info/description")
            .and_then(Value::as_str)
            .map(str::to_owned);
        self.report.notes = status
            .pointer("/info/notes")
            .and_then(Value::as_str)
            .filter(|notes| !notes.is_empty())
            .map(|notes| crate::contract::limits::shortened(notes, MAX_NOTES));
        self.report.tests = status["hooks"]
            .as_array()
            .map(|hooks| {
                hooks
                    .iter()
                    .filter(|hook| {
                        hook["events"]
                            .as_array()
                            .is_some_and(|events| events.iter().any(|event| event == "test"))
                    })
                    .map(|hook| {
                        let text = |pointer: &str| {
                            hook.pointer(pointer)
                                .and_then(Value::as_str)
                                .filter(|text| !text.is_empty())
                                .map(str::to_owned)
                        };
                        HelmTestRun {
                            name: text("/name").unwrap_or_default(),
                            phase: text("/last_run/phase"),
                            started_at: text("/last_run/started_at"),
                            completed_at: text("/last_run/completed_at"),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        let manifest = status["manifest"].as_str().unwrap_or_default().to_owned();
        self.manifests(&manifest).await
    }

    /// The object refs of a rendered manifest, and the manifest stored as
    /// the attempt's `rendered-manifests.yaml` output, every `v1` Secret's
    /// values `[redacted]` (a chart may encode a value in a form no masker
    /// knows).
    async fn manifests(&mut self, rendered: &str) -> Result<(), Failure> {
        let documents = judge::documents(rendered.as_bytes()).map_err(|problem| {
            Failure::new(
                FailureCategory::RunnerError,
                format!("the rendered manifests: {problem}"),
            )
        })?;
        self.report.objects = documents
            .iter()
            .map(|object| {
                let text = |pointer: &str| {
                    object
                        .pointer(pointer)
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                };
                HelmObject {
                    api_version: text("/apiVersion").unwrap_or_default(),
                    kind: text("/kind").unwrap_or_default(),
                    name: text("/metadata/name").unwrap_or_default(),
                    namespace: text("/metadata/namespace"),
                }
            })
            .collect();
        let redacted: String = documents
            .into_iter()
            .map(|object| serde_yaml::to_string(&judge::redacted(object)).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("---\n");
        let path = self.workdir.path().join(MANIFESTS);
        std::fs::write(&path, redacted).map_err(|error| {
            Failure::new(
                FailureCategory::Infrastructure,
                format!("writing the rendered manifests: {error}"),
            )
        })?;
        let stored = self
            .context
            .store_output(&path, MANIFESTS, RetentionClass::Rendered)
            .await
            .map_err(|error| {
                Failure::new(
                    FailureCategory::Infrastructure,
                    format!("storing the rendered manifests: {error}"),
                )
            })?;
        self.report.manifests = Some(stored.name);
        Ok(())
    }

    /// What a stored release holds (its manifest and hooks, of `revision`
    /// or the current one), checked against the tenant's policy: a release
    /// is only a record in the namespace, and one written by anyone (or
    /// holding objects elsewhere) must not make helm delete, roll back or
    /// test outside the tenant's reach.
    async fn check_release(
        &mut self,
        namespace: &str,
        revision: Option<u32>,
        rules: &crate::policy::OperationRules,
    ) -> Result<(), Failure> {
        let release = self.report.release.clone();
        let revision = revision.map(|revision| revision.to_string());
        let mut held = Vec::new();
        for part in ["manifest", "hooks"] {
            let mut args = vec!["get", part, release.as_str(), "--namespace", namespace];
            if let Some(revision) = &revision {
                args.extend(["--revision", revision.as_str()]);
            }
            let exit = self
                .helm_data(&format!("helm get {part}"), self.command(&args))
                .await?;
            held.extend_from_slice(&exit.stdout);
            held.extend_from_slice(b"\n---\n");
        }
        self.check_objects(&held, namespace, rules).await.map(drop)
    }

    /// Every object of a rendered chart, resolved through the cluster's
    /// discovery and checked against the tenant's rules with its scope;
    /// the objects as read (what a frozen chart holds).
    async fn check_objects(
        &self,
        rendered: &[u8],
        namespace: &str,
        rules: &crate::policy::OperationRules,
    ) -> Result<Vec<Value>, Failure> {
        if rendered.len() >= MAX_CAPTURE {
            return Err(Failure::new(
                FailureCategory::RunnerError,
                format!(
                    "the rendered chart is over {} MiB",
                    MAX_CAPTURE / (1024 * 1024)
                ),
            ));
        }
        let documents = judge::documents(rendered).map_err(|problem| {
            Failure::new(
                FailureCategory::RunnerError,
                format!("the rendered chart: {problem}"),
            )
        })?;
        let Some((cluster, client)) = &self.cluster else {
            return Ok(documents);
        };
        let mut kinds = crate::runner::kit::kube::Kinds::default();
        for (index, object) in documents.iter().enumerate() {
            let field = format!("chart object {index}");
            let mut problems = Vec::new();
            crate::contract::kube_names::manifest_problems(&field, object, &mut problems);
            if let Some(problem) = problems.first() {
                return Err(Failure::new(
                    FailureCategory::Contract,
                    format!("{}: {}", problem.path, problem.message),
                ));
            }
            let text = |pointer: &str| {
                object
                    .pointer(pointer)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            };
            let (api_version, kind) = (text("/apiVersion"), text("/kind"));
            let namespaced = self
                .namespaced(&mut kinds, client, api_version, kind)
                .await?;
            let object_namespace = namespaced.then(|| {
                object
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or(namespace)
            });
            rules
                .kubernetes_object(cluster, kind, text("/metadata/name"), object_namespace)
                .map_err(|message| {
                    Failure::new(
                        FailureCategory::Policy,
                        format!("{field} ({kind}/{}): {message}", text("/metadata/name")),
                    )
                })?;
        }
        Ok(documents)
    }

    /// Whether the cluster serves `kind` namespaced (one it does not serve
    /// yet, a CRD the chart brings, by the well-known list, as intake
    /// judges it); bounded by the attempt's cancel and deadline.
    async fn namespaced(
        &self,
        kinds: &mut crate::runner::kit::kube::Kinds,
        client: &kube::Client,
        api_version: &str,
        kind: &str,
    ) -> Result<bool, Failure> {
        let deadline = self.context.deadline();
        let resolved = tokio::select! {
            _ = self.context.cancel.cancelled() => {
                return Err(Failure::new(FailureCategory::Cancelled, "checking the chart's objects: stopped"));
            }
            _ = async { match deadline { Some(at) => tokio::time::sleep_until(at).await, None => std::future::pending().await } } => {
                return Err(Failure::new(FailureCategory::Timeout, "checking the chart's objects: the attempt's start_to_close passed"));
            }
            resolved = kinds.resolve(client, api_version, kind) => resolved,
        };
        match resolved {
            Ok(Some(resolved)) => Ok(resolved.namespaced),
            // A kind the cluster does not serve yet (a CRD the chart
            // brings): judged by the well-known list, as intake does.
            Ok(None) => Ok(!crate::policy::kubernetes::CLUSTER_SCOPED_KINDS.contains(&kind)),
            Err(error) => Err(Failure::new(
                FailureCategory::TargetUnreachable,
                format!("discovery of {api_version} {kind}: {error}"),
            )),
        }
    }

    /// `helm.test`: the chart's test hooks, their phases as evidence; a
    /// test that did not succeed fails the attempt as `verification_failed`,
    /// and so does a release with none, unless `allow_no_tests`.
    async fn test(
        &mut self,
        release: &str,
        namespace: &str,
        allow_no_tests: bool,
    ) -> Result<String, Failure> {
        self.context.progress(format!("helm test {release}"), None);
        let ran = self.act(&["test", release], namespace, false).await;
        match ran {
            // The deadline: not a verdict, but the hooks' phases so far are
            // its evidence.
            Err(failure) if failure.category == FailureCategory::Timeout => {
                let _ = self.status(namespace).await;
                return Err(failure);
            }
            // A stop, an unreachable cluster: not a verdict.
            Err(failure) if failure.category != FailureCategory::RunnerError => {
                return Err(failure)
            }
            Err(failure) => {
                // The hooks' phases whatever helm said: they are the evidence.
                let _ = self.status(namespace).await;
                return Err(Failure::new(
                    FailureCategory::VerificationFailed,
                    failure.message,
                ));
            }
            Ok(_) => self.status(namespace).await?,
        }
        match (self.report.tests.is_empty(), allow_no_tests) {
            (true, true) => {
                return Ok(format!(
                    "release `{release}` has no test hooks: nothing to run (allowed)"
                ))
            }
            (true, false) => {
                return Err(Failure::new(
                    FailureCategory::VerificationFailed,
                    format!("release `{release}` has no test hooks: nothing was verified (`inputs.allow_no_tests: true` lets that succeed)"),
                ))
            }
            _ => {}
        }
        let failed: Vec<&HelmTestRun> = self
            .report
            .tests
            .iter()
            .filter(|test| test.phase.as_deref() != Some("Succeeded"))
            .collect();
        if let Some(test) = failed.first() {
            return Err(Failure::new(
                FailureCategory::VerificationFailed,
                format!(
                    "test `{}` of release `{release}`: {}",
                    test.name,
                    test.phase.as_deref().unwrap_or("not run")
                ),
            ));
        }
        Ok(format!(
            "release `{release}`: {} test(s) succeeded",
            self.report.tests.len()
        ))
    }
}

/// The name of the repository a login is written for, in the attempt's
/// own repository configuration.
const LOGGED_IN: &str = "source";

/// A login's parts as helm is handed them: text, and paths of 0600 files.
struct LoginFiles {
    username: Option<String>,
    password: Option<String>,
    cert_file: Option<String>,
    key_file: Option<String>,
    ca_file: Option<String>,
}

/// A chart's `crds/` as `helm show crds` prints it, which helm installs
/// past the judge of the render (whatever kind it holds): each of its
/// objects must be a CustomResourceDefinition, read as the judge reads;
/// they are what the frozen chart holds, written again.
fn definitions_only(crds: &[u8]) -> Result<Vec<Value>, Failure> {
    let documents = judge::documents(crds).map_err(|problem| {
        Failure::new(
            FailureCategory::RunnerError,
            format!("the chart's crds/: {problem}"),
        )
    })?;
    for (index, object) in documents.iter().enumerate() {
        let definition = object["kind"] == "CustomResourceDefinition"
            && object["apiVersion"]
                .as_str()
                .is_some_and(|version| version.starts_with("apiextensions.k8s.io/"));
        if !definition {
            return Err(Failure::new(
                FailureCategory::Policy,
                format!(
                    "the chart's crds/ object {index} is not a CustomResourceDefinition (kind {}): helm would create it unchecked",
                    crate::contract::limits::loggable(object["kind"].as_str().unwrap_or("none"))
                ),
            ));
        }
    }
    Ok(documents)
}

/// Documents as helm reads a stream of them: one JSON document a line,
/// `---` between (a JSON string holds no line break).
fn stream(documents: &[Value]) -> String {
    documents
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// The most memory one of helm's JSON answers may take once read (its dry
/// run echoes the tenant's values).
const MAX_HELM_JSON: usize = 64 * 1024 * 1024;

/// One of helm's JSON answers, read within [`MAX_HELM_JSON`].
fn helm_json(bytes: &[u8]) -> Result<Value, String> {
    crate::runner::yaml::json(bytes, MAX_HELM_JSON).map_err(|error| error.to_string())
}

/// A pull or an index fetch the repository refused (a wrong login, or none
/// where one is needed, a client certificate it does not take, a server
/// certificate the login's CA does not vouch for): the JobSpec's doing,
/// `contract`, said so.
fn refused_login(
    repository: &str,
    login: Option<&crate::contract::ops::RepositoryLogin>,
    failure: Failure,
) -> Failure {
    let refused = [
        "401 Unauthorized",
        "403 Forbidden",
        "no basic auth credentials",
    ];
    // A certificate the login did not bring is the repository's or the
    // network's doing, not the JobSpec's.
    let tls = [
        "certificate required",
        "bad certificate",
        "handshake failure",
        "unknown certificate authority",
        "certificate signed by unknown authority",
    ];
    let brought_tls = login.is_some_and(|login| login.ca.is_some() || login.client_cert.is_some());
    if refused.iter().any(|said| failure.message.contains(said))
        || (brought_tls && tls.iter().any(|said| failure.message.contains(said)))
    {
        Failure::contract(format!(
            "inputs.chart.login: the repository `{repository}` refused the login ({})",
            failure.message
        ))
    } else {
        failure
    }
}

/// Whether helm itself says its `--timeout` ran out: its own error line
/// (`Error: [INSTALLATION FAILED: ]timed out waiting for the condition`,
/// or `context deadline exceeded`), or a bullet of its list of errors
/// (`helm test`: `Error: 1 error occurred:` then `* timed out …`). Never
/// when a template failed (`execution error at (…)`): a chart writes its
/// `fail` message as it likes.
fn helm_timed_out(said: &str) -> bool {
    !said.contains("execution error")
        && said.lines().map(str::trim).any(|line| {
            (line.starts_with("Error: ") || line.starts_with("* "))
                && (line.ends_with("timed out waiting for the condition")
                    || line.ends_with("context deadline exceeded"))
        })
}

/// A release's objects as helm's `--output json` gives them: its manifest
/// and every hook's, one YAML stream.
fn release_objects(release: &Value) -> String {
    let mut stream = release["manifest"].as_str().unwrap_or_default().to_owned();
    for hook in release["hooks"].as_array().into_iter().flatten() {
        if let Some(manifest) = hook["manifest"].as_str() {
            stream.push_str("\n---\n");
            stream.push_str(manifest);
        }
    }
    stream
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::Operation;

    #[test]
    fn the_frozen_render_is_what_the_judge_read_not_helm_s_text() {
        // libyaml reads one definition with a key `---#`; apimachinery's
        // reader would split a second document off at that line.
        let crds = b"apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: foos.example.com}\n---#:\n  apiVersion: rbac.authorization.k8s.io/v1\n  kind: RoleBinding\n  metadata: {name: pwn, namespace: team-b}\n";
        let definitions = definitions_only(crds).unwrap();
        assert_eq!(definitions.len(), 1);
        let written = stream(&definitions);
        assert_eq!(written.lines().count(), 1, "{written}");
        assert!(
            !written.lines().any(|line| line.starts_with("---")),
            "{written}"
        );
        let two = stream(&judge::documents(b"a: 1\n---\nb: \"x\\n---\\ny\"\n").unwrap());
        assert_eq!(two, "{\"a\":1}\n---\n{\"b\":\"x\\n---\\ny\"}");
    }

    #[test]
    fn only_helm_s_own_timeout_line_reads_as_its_timeout() {
        for said in [
            "Error: timed out waiting for the condition",
            "Error: INSTALLATION FAILED: context deadline exceeded\n",
            "some progress\nError: UPGRADE FAILED: timed out waiting for the condition",
            "Error: 1 error occurred:\n\t* timed out waiting for the condition\n",
        ] {
            assert!(helm_timed_out(said), "{said}");
        }
        for said in [
            "Error: INSTALLATION FAILED: execution error at (demo/templates/x.yaml:1:4): context deadline exceeded",
            "Error: execution error at (demo/templates/x.yaml:1:4): no\n* timed out waiting for the condition",
            "Error: template: demo/templates/x.yaml:1:4: executing: context deadline exceeded in a value",
            "timed out waiting for the condition",
            "Error: pod web-check failed",
        ] {
            assert!(!helm_timed_out(said), "{said}");
        }
    }

    #[test]
    fn it_runs_exactly_the_catalog_s_helm_operations() {
        let runner = HelmRunner::new(HelmConfig::default());
        let mut announced = runner.operations();
        announced.sort();
        let catalog: Vec<Operation> = Operation::implemented_by(RunnerType::Helm).collect();
        assert_eq!(announced, catalog);
        assert_eq!(catalog.len(), 6);
    }
}
