//! `execplane bench opentofu`: the opentofu runner's cost per apply. One
//! null resource (the provider from the offline mirror) applied N times by
//! the CLI as a script would run it (`init`, then `apply -auto-approve`, in
//! a fresh copy of the module each time) and N times through the opentofu
//! runner's executor in this process (the policy checked, the package
//! fetched by digest and unpacked, the CLI configuration and backend
//! override written, `init`, the workspace, `apply`, `state pull` read into
//! the result), in turn, each apply a real change (the resource is replaced
//! with the run's number). Both keep their state in a `local` backend that
//! grows with every run, so a cost that rises with N shows in both.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;
use serde_json::json;

use super::{per_second, quantile};
use crate::runners::opentofu::{TofuConfig, TofuRunner};

const MODULE: &str = r#"terraform {
  required_providers {
    null = { source = "hashicorp/null", version = "2.1.2" }
  }
}
variable "greeting" { type = string }
resource "null_resource" "greeting" {
  triggers = { greeting = var.greeting }
}
output "resource_id" { value = null_resource.greeting.id }
"#;

#[derive(Debug, clap::Args)]
pub struct TofuBenchArgs {
    /// Applies of each kind.
    #[arg(long, default_value_t = 20)]
    pub runs: usize,
    /// The Terraform-compatible CLI (the stack's: scripts/opentofu.sh).
    #[arg(long, default_value = ".stack/opentofu/bin/tofu")]
    pub cli: PathBuf,
    /// The provider mirror holding hashicorp/null 2.1.2.
    #[arg(long, default_value = ".stack/opentofu/mirror")]
    pub mirror: PathBuf,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
pub struct TofuReport {
    pub runs: usize,
    pub cli_p50_ms: f64,
    pub cli_p99_ms: f64,
    /// Applies per second, one after the other.
    pub cli_per_second: f64,
    pub runner_p50_ms: f64,
    pub runner_p99_ms: f64,
    pub runner_per_second: f64,
    /// runner p50 - CLI p50.
    pub overhead_p50_ms: f64,
    /// Each run in order, of each kind: a cost that grows with N shows here.
    pub cli_ms: Vec<f64>,
    pub runner_ms: Vec<f64>,
}

pub async fn run(args: &TofuBenchArgs) -> anyhow::Result<ExitCode> {
    let runs = args.runs.max(1);
    let absolute = |path: &PathBuf| std::path::absolute(path).unwrap_or(path.clone());
    let (cli, mirror) = (absolute(&args.cli), absolute(&args.mirror));
    let scratch = std::env::temp_dir().join(format!(
        "execplane-bench-opentofu-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&scratch)?;
    let cli_config = scratch.join("cli.tfrc");
    std::fs::write(
        &cli_config,
        format!(
            "provider_installation {{\n  filesystem_mirror {{\n    path = {}\n  }}\n  direct {{\n    exclude = [\"*/*/*\"]\n  }}\n}}\n",
            json!(mirror.display().to_string())
        ),
    )?;

    // Through the runner: the module package by digest, an approving policy.
    let (storage, package) = super::one_file_package(&scratch, "main.tf", MODULE).await?;
    let policy_file = scratch.join("policy.yaml");
    std::fs::write(
        &policy_file,
        format!(
            "tenants:\n  bench:\n    operations: [\"opentofu.*\"]\n    grants: [explicit_command, elevated]\n    opentofu:\n      modules: [\"{package}\"]\n"
        ),
    )?;
    let policy = crate::policy::SharedPolicy::from_file(&policy_file)
        .map_err(|problems| anyhow::anyhow!("the bench policy: {}", problems.join("; ")))?;
    let runner = TofuRunner::new(TofuConfig {
        cli: cli.clone(),
        provider_mirror: Some(mirror.clone()),
        state_dir: scratch.join("states"),
    });
    let tools = Arc::new(crate::runner::tool::ToolSettings {
        work_root: scratch.join("work"),
        ..Default::default()
    });
    // As a runner starts: the sandbox built, the tools' network guarded.
    crate::runner::sandbox::check(&tools)
        .await
        .map_err(|error| anyhow::anyhow!(error))?;

    let mut by_cli = Vec::with_capacity(runs);
    let mut through = Vec::with_capacity(runs);
    for run in 0..runs {
        // The CLI and the runner in turn, so drift on the machine weighs on
        // both alike.
        let dir = scratch.join(format!("cli-{run}"));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("main.tf"), MODULE)?;
        std::fs::write(
            dir.join("backend_override.tf.json"),
            json!({"terraform": {"backend": {"local": {"path": scratch.join("cli.tfstate")}}}})
                .to_string(),
        )?;
        let started = Instant::now();
        for step in [
            vec!["init".to_owned(), "-input=false".into(), "-no-color".into()],
            vec![
                "apply".to_owned(),
                "-auto-approve".into(),
                "-input=false".into(),
                "-no-color".into(),
                format!("-var=greeting=run-{run}"),
            ],
        ] {
            let output = tokio::process::Command::new(&cli)
                .current_dir(&dir)
                .env_clear()
                .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                .env("HOME", &scratch)
                .env("TF_CLI_CONFIG_FILE", &cli_config)
                .env("CHECKPOINT_DISABLE", "1")
                .env("TF_IN_AUTOMATION", "1")
                .args(&step)
                .output()
                .await
                .with_context(|| format!("running {}", cli.display()))?;
            anyhow::ensure!(
                output.status.success(),
                "{} {}: {}",
                cli.display(),
                step[0],
                String::from_utf8_lossy(&output.stderr)
            );
        }
        by_cli.push(started.elapsed());
        let _ = std::fs::remove_dir_all(&dir);
        let value = json!({
            "command_id": uuid::Uuid::new_v4(),
            "job_id": format!("bench/opentofu-{run}"),
            "tenant": "bench",
            "requested_by": "bench",
            "operation": "opentofu.apply",
            "inputs": {"package": {"name": "bench", "version": "1", "digest": package.to_string()},
                       "variables": {"greeting": format!("run-{run}")}},
            // Each run replaces the resource (a destroy): elevated.
            "policy": {"explicit_command": true, "elevated": true},
        });
        let spec = crate::contract::validate_jobspec(&value)
            .map_err(|problems| anyhow::anyhow!("the bench JobSpec: {problems}"))?;
        let took = super::time_attempt(&runner, &policy, spec, |attempt_id, context| {
            super::tool_context(context, attempt_id, &storage, &tools)
                .with_deadline(tokio::time::Instant::now() + Duration::from_secs(120))
        })
        .await?;
        through.push(took);
    }
    let _ = std::fs::remove_dir_all(&scratch);

    let (cli_ms, runner_ms) = (super::milliseconds(&by_cli), super::milliseconds(&through));
    let report = TofuReport {
        runs,
        cli_p50_ms: quantile(&cli_ms, 0.50),
        cli_p99_ms: quantile(&cli_ms, 0.99),
        cli_per_second: per_second(&cli_ms),
        runner_p50_ms: quantile(&runner_ms, 0.50),
        runner_p99_ms: quantile(&runner_ms, 0.99),
        runner_per_second: per_second(&runner_ms),
        overhead_p50_ms: quantile(&runner_ms, 0.50) - quantile(&cli_ms, 0.50),
        cli_ms,
        runner_ms,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let half = |samples: &[f64], second: bool| {
            let (first, rest) = samples.split_at(samples.len() / 2);
            quantile(if second { rest } else { first }, 0.50)
        };
        println!(
            "opentofu, apply of one null resource ({}), {runs} runs each:\n  init + apply -auto-approve  p50 {:.0} ms, p99 {:.0} ms, {:.2}/s (first half p50 {:.0}, second {:.0})\n  through the runner          p50 {:.0} ms, p99 {:.0} ms, {:.2}/s (first half p50 {:.0}, second {:.0})\n  difference                  p50 {:+.0} ms",
            cli.display(),
            report.cli_p50_ms,
            report.cli_p99_ms,
            report.cli_per_second,
            half(&report.cli_ms, false),
            half(&report.cli_ms, true),
            report.runner_p50_ms,
            report.runner_p99_ms,
            report.runner_per_second,
            half(&report.runner_ms, false),
            half(&report.runner_ms, true),
            report.overhead_p50_ms,
        );
    }
    Ok(ExitCode::SUCCESS)
}
