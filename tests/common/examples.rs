//! The README's examples of one runner, rendered by scripts/examples.sh
//! for this machine and run in order through a pipeline of their own, each
//! to the end the README's table gives it.

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::PgPool;

use super::bao::Bao;
use super::pipeline::Pipeline;

/// Runs `examples/<runner>/*.json` with `runners` (each `["runner",
/// "<type>"]`, given the OpenBao address and token and `env`), the local
/// API server's admin token stored where the examples reference it.
pub async fn run_readme_examples(
    pool: &PgPool,
    runner: &str,
    runners: &[&str],
    env: &[(&str, &str)],
) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let prefix = format!("| `examples/{runner}/");
    let expected: Vec<(String, String)> = readme
        .lines()
        .filter_map(|line| {
            let path = line.strip_prefix(&prefix)?.split('`').next()?;
            let end = line.rsplit('|').nth(1)?.trim().trim_matches('`');
            Some((format!("{runner}-{path}"), end.to_owned()))
        })
        .collect();
    let mut on_disk: Vec<String> = std::fs::read_dir(root.join("examples").join(runner))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".json"))
        .map(|name| format!("{runner}-{name}"))
        .collect();
    on_disk.sort();
    let listed: Vec<String> = expected.iter().map(|(name, _)| name.clone()).collect();
    assert_eq!(
        listed, on_disk,
        "the README's table lists every example, in order"
    );

    let mut pipeline = Pipeline::new(pool).await;
    let out = pipeline.dir.join("examples");
    let artifacts = pipeline.dir.join("artifacts");
    let rendered = std::process::Command::new(root.join("scripts/examples.sh"))
        .arg(env!("CARGO_BIN_EXE_execplane"))
        .arg(&out)
        .env("EXECPLANE_ARTIFACT_DIR", &artifacts)
        .output()
        .unwrap();
    assert!(rendered.status.success(), "{rendered:?}");
    pipeline.set_env(
        "EXECPLANE_POLICY_FILE",
        out.join("policy.yaml").to_str().unwrap(),
    );
    let bao = Bao::new();
    bao.put("team-a/kube", json!({"token": super::kube::admin_token()}))
        .await;
    let mut vault = vec![
        ("EXECPLANE_VAULT_ADDR", bao.address.as_str()),
        ("EXECPLANE_VAULT_TOKEN", bao.root.as_str()),
        ("EXECPLANE_ARTIFACT_DIR", artifacts.to_str().unwrap()),
    ];
    vault.extend_from_slice(env);
    pipeline.spawn(&["dispatcher"], &[]);
    pipeline.spawn(&["relay"], &[]);
    for runner_type in runners {
        pipeline.spawn(&["runner", runner_type], &vault);
    }
    pipeline.wait_runners(runners.len() as i64).await;
    for (name, end) in &expected {
        let text = std::fs::read_to_string(out.join("jobs").join(name)).unwrap();
        let mut value: Value = serde_json::from_str(&text).unwrap();
        // A fresh identity each run: the examples are meant to be run again.
        value["command_id"] = json!(uuid::Uuid::new_v4().to_string());
        value["job_id"] = json!(format!(
            "{}-{}",
            value["job_id"].as_str().unwrap(),
            uuid::Uuid::new_v4().simple()
        ));
        let spec = execplane::contract::validate_jobspec(&value)
            .unwrap_or_else(|problems| panic!("{name}: {problems}"));
        pipeline.submit(&spec).await;
        let (status, _, message, result) = pipeline.ended(&spec, Duration::from_secs(90)).await;
        assert_eq!(&status, end, "{name}: {message} {result}");
    }
}
