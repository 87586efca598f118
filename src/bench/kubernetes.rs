//! `execplane bench kubernetes`: the kubernetes runner's cost per apply.
//! One ConfigMap server-side applied N times by `kubectl apply
//! --server-side` (a process per apply, as a script would) and N times
//! through the kubernetes runner's executor in this process (the policy
//! checked, the kind resolved through discovery, the object read before and
//! applied, the diff and the events snapshot built), in turn, each apply a
//! real change (the data holds the run's number). The dispatch and lease
//! path around an attempt is `bench pipeline`'s (`command_to_start`); the
//! two add up to the cost of an apply through execplane.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;
use serde_json::json;

use super::{per_second, quantile};
use crate::runners::kubernetes::{KubernetesConfig, KubernetesRunner};

#[derive(Debug, clap::Args)]
pub struct KubernetesBenchArgs {
    /// Applies of each kind.
    #[arg(long, default_value_t = 50)]
    pub runs: usize,
    /// The API server (the stack's: scripts/kubernetes.sh).
    #[arg(long, default_value = "https://127.0.0.1:6443")]
    pub server: String,
    /// The CAs its serving certificate chains to.
    #[arg(long, default_value = ".stack/kubernetes/certs/apiserver.crt")]
    pub ca_file: PathBuf,
    /// A file holding a token allowed to create the namespace and apply in it.
    #[arg(long, default_value = ".stack/kubernetes/admin-token")]
    pub token_file: PathBuf,
    /// kubectl (the stack's: scripts/helm.sh).
    #[arg(long, default_value = ".stack/helm/bin/kubectl")]
    pub kubectl: PathBuf,
    /// The namespace applied in (made when missing).
    #[arg(long, default_value = "execplane-bench")]
    pub namespace: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
pub struct KubernetesReport {
    pub runs: usize,
    pub kubectl_p50_ms: f64,
    pub kubectl_p99_ms: f64,
    /// Applies per second, one after the other.
    pub kubectl_per_second: f64,
    pub runner_p50_ms: f64,
    pub runner_p99_ms: f64,
    pub runner_per_second: f64,
    /// runner p50 - kubectl p50.
    pub overhead_p50_ms: f64,
    /// Each run in order, of each kind: a cost that grows with N shows here.
    pub kubectl_ms: Vec<f64>,
    pub runner_ms: Vec<f64>,
}

pub async fn run(args: &KubernetesBenchArgs) -> anyhow::Result<ExitCode> {
    let runs = args.runs.max(1);
    let absolute = |path: &PathBuf| std::path::absolute(path).unwrap_or(path.clone());
    let (ca_file, kubectl) = (absolute(&args.ca_file), absolute(&args.kubectl));
    let token = std::fs::read_to_string(&args.token_file)
        .with_context(|| format!("reading the token {}", args.token_file.display()))?
        .trim()
        .to_owned();
    let scratch = std::env::temp_dir().join(format!(
        "execplane-bench-kubernetes-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&scratch)?;
    let namespace = &args.namespace;
    let policy_file = scratch.join("policy.yaml");
    std::fs::write(
        &policy_file,
        format!(
            "clusters:\n  bench:\n    server: {}\n    ca_file: {}\n\
             tenants:\n  bench:\n    operations: [\"kubernetes.*\"]\n    kubernetes:\n      clusters:\n        bench:\n          namespaces: [\"{namespace}\"]\n",
            args.server,
            ca_file.display()
        ),
    )?;
    let policy = crate::policy::SharedPolicy::from_file(&policy_file)
        .map_err(|problems| anyhow::anyhow!("the bench policy: {}", problems.join("; ")))?;
    ensure_namespace(&policy, &token, namespace).await?;
    let runner = KubernetesRunner::new(KubernetesConfig {
        ..KubernetesConfig::default()
    });

    // kubectl: a kubeconfig of its own (0600), its discovery cache in the
    // scratch directory.
    let kubeconfig = scratch.join("kubeconfig");
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&kubeconfig)?;
        write!(
            file,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: bench\n  cluster: {{server: \"{}\", certificate-authority: \"{}\"}}\n\
             users:\n- name: bench\n  user: {{token: \"{token}\"}}\n\
             contexts:\n- name: bench\n  context: {{cluster: bench, user: bench, namespace: \"{namespace}\"}}\n\
             current-context: bench\n",
            args.server,
            ca_file.display()
        )?;
    }
    let manifest = |kind: &str, run: usize| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": format!("bench-{kind}"), "namespace": namespace},
               "data": {"run": run.to_string()}})
    };
    let mut by_kubectl = Vec::with_capacity(runs);
    let mut through = Vec::with_capacity(runs);
    for run in 0..runs {
        // kubectl and the runner in turn, so drift on the machine weighs on
        // both alike.
        let file = scratch.join("configmap.json");
        std::fs::write(&file, manifest("kubectl", run).to_string())?;
        let started = Instant::now();
        let output = tokio::process::Command::new(&kubectl)
            .env("KUBECONFIG", &kubeconfig)
            .env("KUBECACHEDIR", scratch.join("cache"))
            .env("HOME", &scratch)
            .args(["apply", "--server-side", "--field-manager=bench", "-f"])
            .arg(&file)
            .output()
            .await
            .with_context(|| format!("running {}", kubectl.display()))?;
        by_kubectl.push(started.elapsed());
        anyhow::ensure!(
            output.status.success(),
            "kubectl apply: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let value = json!({
            "command_id": uuid::Uuid::new_v4(),
            "job_id": format!("bench/kubernetes-{run}"),
            "tenant": "bench",
            "requested_by": "bench",
            "operation": "kubernetes.manifest.apply",
            "inputs": {"cluster": {"name": "bench", "credentials": {"$secret": "token"}},
                       "namespace": namespace, "field_manager": "bench",
                       "manifests": [manifest("runner", run)]},
            "secret_refs": [{"name": "token", "mount": "secret", "path": "bench/kube", "key": "token"}],
        });
        let mut spec = crate::contract::validate_jobspec(&value)
            .map_err(|problems| anyhow::anyhow!("the bench JobSpec: {problems}"))?;
        // What the runner SDK does with a resolved secret.
        spec.inputs["cluster"]["credentials"] = json!(token);
        let took = super::time_attempt(&runner, &policy, spec, |_, context| {
            context.with_deadline(tokio::time::Instant::now() + Duration::from_secs(60))
        })
        .await?;
        through.push(took);
    }
    let _ = std::fs::remove_dir_all(&scratch);

    let (kubectl_ms, runner_ms) = (
        super::milliseconds(&by_kubectl),
        super::milliseconds(&through),
    );
    let report = KubernetesReport {
        runs,
        kubectl_p50_ms: quantile(&kubectl_ms, 0.50),
        kubectl_p99_ms: quantile(&kubectl_ms, 0.99),
        kubectl_per_second: per_second(&kubectl_ms),
        runner_p50_ms: quantile(&runner_ms, 0.50),
        runner_p99_ms: quantile(&runner_ms, 0.99),
        runner_per_second: per_second(&runner_ms),
        overhead_p50_ms: quantile(&runner_ms, 0.50) - quantile(&kubectl_ms, 0.50),
        kubectl_ms,
        runner_ms,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "kubernetes, server-side apply of one ConfigMap on {}, {runs} runs each:\n  kubectl apply --server-side  p50 {:.1} ms, p99 {:.1} ms, {:.1}/s\n  through the runner           p50 {:.1} ms, p99 {:.1} ms, {:.1}/s\n  difference                   p50 {:+.1} ms",
            args.server,
            report.kubectl_p50_ms,
            report.kubectl_p99_ms,
            report.kubectl_per_second,
            report.runner_p50_ms,
            report.runner_p99_ms,
            report.runner_per_second,
            report.overhead_p50_ms,
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Makes the bench's namespace with the bench's token (409: it is there).
async fn ensure_namespace(
    policy: &crate::policy::SharedPolicy,
    token: &str,
    namespace: &str,
) -> anyhow::Result<()> {
    let current = policy.current();
    let endpoint = current
        .cluster("bench")
        .context("the bench policy names its cluster")?;
    let credentials = crate::runner::kit::kube::Credentials::Token(token.to_owned());
    let settings = crate::runner::kit::kube::ClientSettings::default();
    let client = crate::runner::kit::kube::client("bench", endpoint, &credentials, settings)?;
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
    let object: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": namespace}}))?;
    match namespaces.create(&Default::default(), &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(anyhow::anyhow!("creating namespace {namespace}: {error}")),
    }
}
