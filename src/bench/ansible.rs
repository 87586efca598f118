//! `execplane bench ansible`: the ansible runner's overhead per attempt.
//! A one-task playbook (`ansible.builtin.ping`, no facts) on one node, run
//! N times by hand with `ansible-playbook` (the same ssh settings, strict
//! host keys) and N times through the ansible runner's executor in this
//! process, in turn: the package fetched by digest and unpacked, the inventory and
//! configuration written, the event stream read and stored, the typed
//! result built. The dispatch and lease path around an attempt is `bench
//! pipeline`'s (`command_to_start`); the two add up to the cost of a
//! playbook through execplane.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;
use serde_json::json;

use crate::config::Config;
use crate::runners::ansible::{AnsibleConfig, AnsibleRunner};

#[derive(Debug, clap::Args)]
pub struct AnsibleBenchArgs {
    /// Runs of each kind.
    #[arg(long, default_value_t = 10)]
    pub runs: usize,
    /// The node (an sshd), e.g. the stack's: 127.0.0.1:2222.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 2222)]
    pub port: u16,
    #[arg(long, default_value = "exectest")]
    pub user: String,
    /// The account's private key (the stack's: .stack/ssh/user_ed25519).
    #[arg(long, default_value = ".stack/ssh/user_ed25519")]
    pub key: PathBuf,
    /// The node's public host key (the stack's: .stack/ssh/host_ed25519.pub).
    #[arg(long, default_value = ".stack/ssh/host_ed25519.pub")]
    pub host_key: PathBuf,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
pub struct AnsibleReport {
    pub runs: usize,
    /// `ansible-playbook` by hand: p50 and mean wall time.
    pub by_hand_p50_ms: f64,
    pub by_hand_mean_ms: f64,
    /// Through the ansible runner's executor.
    pub runner_p50_ms: f64,
    pub runner_mean_ms: f64,
    /// runner p50 - by hand p50.
    pub overhead_p50_ms: f64,
    /// Each run in order, of each kind: a cost that grows with N shows here.
    pub by_hand_ms: Vec<f64>,
    pub runner_ms: Vec<f64>,
}

const PLAYBOOK: &str =
    "- hosts: all\n  gather_facts: false\n  tasks:\n    - name: ping\n      ansible.builtin.ping:\n";

pub async fn run(config: &Config, args: &AnsibleBenchArgs) -> anyhow::Result<ExitCode> {
    let runs = args.runs.max(1);
    let key = std::fs::read_to_string(&args.key)
        .with_context(|| format!("reading the private key {}", args.key.display()))?;
    let host_key_line = std::fs::read_to_string(&args.host_key)
        .with_context(|| format!("reading the host key {}", args.host_key.display()))?;
    let host_key: String = host_key_line
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    let scratch = std::env::temp_dir().join(format!(
        "execplane-bench-ansible-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&scratch)?;
    // Absolute: ansible-playbook runs in a directory of its own here.
    let absolute = |path: PathBuf| std::path::absolute(&path).unwrap_or(path);
    let bin_dir = absolute(PathBuf::from(config.ansible.bin_dir.trim()));
    let key_file = absolute(args.key.clone());

    // By hand: the same playbook, inventory and ssh settings.
    let hand = scratch.join("hand");
    std::fs::create_dir_all(&hand)?;
    std::fs::write(hand.join("ping.yml"), PLAYBOOK)?;
    std::fs::write(
        hand.join("inventory.ini"),
        format!(
            "node ansible_host={} ansible_port={}\n",
            args.host, args.port
        ),
    )?;
    let entry = if args.port == 22 {
        args.host.clone()
    } else {
        format!("[{}]:{}", args.host, args.port)
    };
    std::fs::write(hand.join("known_hosts"), format!("{entry} {host_key}\n"))?;
    std::fs::write(
        hand.join("ansible.cfg"),
        format!(
            "[defaults]\nhost_key_checking = True\nretry_files_enabled = False\ninterpreter_python = auto_silent\n\
             [ssh_connection]\nssh_args = -F /dev/null -o UserKnownHostsFile={} -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes -o ControlMaster=no -o ControlPath=none -o BatchMode=yes\npipelining = True\n",
            hand.join("known_hosts").display()
        ),
    )?;

    // Through the runner: the package by digest, an approving policy.
    let (storage, package) = super::one_file_package(&scratch, "ping.yml", PLAYBOOK).await?;
    let policy_file = scratch.join("policy.yaml");
    std::fs::write(
        &policy_file,
        format!(
            "tenants:\n  bench:\n    operations: [\"ansible.*\"]\n    ansible:\n      packages:\n        - digest: \"{package}\"\n          playbooks: [ping.yml]\n    ssh:\n      nodes: [\"{}\"]\n      ports: [{}]\n",
            args.host, args.port
        ),
    )?;
    let policy = crate::policy::SharedPolicy::from_file(&policy_file)
        .map_err(|problems| anyhow::anyhow!("the bench policy: {}", problems.join("; ")))?;
    let runner = AnsibleRunner::new(AnsibleConfig {
        bin_dir: bin_dir.clone(),
        connect_timeout: Duration::from_secs(10),
    });
    let tools = Arc::new(crate::runner::tool::ToolSettings {
        work_root: scratch.join("work"),
        ..Default::default()
    });
    let mut by_hand = Vec::with_capacity(runs);
    let mut through = Vec::with_capacity(runs);
    for run in 0..runs {
        // By hand and through the runner in turn, so drift on the machine
        // weighs on both alike.
        let started = Instant::now();
        let status = tokio::process::Command::new(bin_dir.join("ansible-playbook"))
            .current_dir(&hand)
            .env("ANSIBLE_CONFIG", hand.join("ansible.cfg"))
            .arg(format!(
                "--inventory={}",
                hand.join("inventory.ini").display()
            ))
            .arg(format!("--user={}", args.user))
            .arg(format!("--private-key={}", key_file.display()))
            .arg("ping.yml")
            .stdout(std::process::Stdio::null())
            .status()
            .await
            .context("running ansible-playbook")?;
        anyhow::ensure!(status.success(), "ansible-playbook by hand: {status}");
        by_hand.push(started.elapsed());
        let value = json!({
            "command_id": uuid::Uuid::new_v4(),
            "job_id": format!("bench/ansible-{run}"),
            "tenant": "bench",
            "requested_by": "bench",
            "operation": "ansible.playbook.run",
            "inputs": {"package": {"name": "bench", "version": "1", "digest": package.to_string()},
                       "playbook": "ping.yml", "user": args.user,
                       "private_key": {"$secret": "key"}},
            "targets": [{"kind": "node", "id": "node", "address": args.host,
                         "attributes": {"port": args.port.to_string(), "host_key": host_key}}],
            "secret_refs": [{"name": "key", "mount": "secret", "path": "bench/ssh", "key": "private_key"}],
        });
        let mut spec = crate::contract::validate_jobspec(&value)
            .map_err(|problems| anyhow::anyhow!("the bench JobSpec: {problems}"))?;
        // What the runner SDK does with a resolved secret.
        spec.inputs["private_key"] = json!(key);
        let took = super::time_attempt(&runner, &policy, spec, |attempt_id, context| {
            super::tool_context(context, attempt_id, &storage, &tools)
        })
        .await?;
        through.push(took);
    }
    let _ = std::fs::remove_dir_all(&scratch);

    let (hand_ms, runner_ms) = (super::milliseconds(&by_hand), super::milliseconds(&through));
    let report = AnsibleReport {
        runs,
        by_hand_p50_ms: median(&hand_ms),
        by_hand_mean_ms: mean(&hand_ms),
        runner_p50_ms: median(&runner_ms),
        runner_mean_ms: mean(&runner_ms),
        overhead_p50_ms: median(&runner_ms) - median(&hand_ms),
        by_hand_ms: hand_ms,
        runner_ms,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "ansible, one-task playbook on {}:{}, {runs} runs each:\n  by hand         p50 {:.0} ms, mean {:.0} ms\n  through runner  p50 {:.0} ms, mean {:.0} ms\n  overhead        p50 {:+.0} ms ({:+.1}%)",
            args.host,
            args.port,
            report.by_hand_p50_ms,
            report.by_hand_mean_ms,
            report.runner_p50_ms,
            report.runner_mean_ms,
            report.overhead_p50_ms,
            100.0 * report.overhead_p50_ms / report.by_hand_p50_ms.max(1.0),
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn median(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(0.0)
}

fn mean(samples: &[f64]) -> f64 {
    samples.iter().sum::<f64>() / samples.len().max(1) as f64
}
