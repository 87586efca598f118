use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;

use crate::contract::validate_jobspec_bytes;

/// Exit 0 and the normalised spec when valid and runnable here (admitted
/// by the operator's policy configured here, its operation implemented);
/// exit 2 and every problem when not.
pub fn run(
    file: &Path,
    json: bool,
    policy: &crate::policy::OperatorPolicy,
) -> anyhow::Result<ExitCode> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    match validate_jobspec_bytes(&bytes).and_then(|spec| super::submit::runnable(spec, policy)) {
        Ok(spec) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&spec)?);
            } else {
                println!(
                    "{}: valid {} job `{}` (command {})",
                    file.display(),
                    spec.operation,
                    spec.job_id,
                    spec.command_id
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(problems) => {
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({ "valid": false, "problems": problems.0 })
                    )?
                );
            } else {
                eprintln!("{}: {problems}", file.display());
            }
            Ok(ExitCode::from(2))
        }
    }
}

/// `policy check`: exit 0 with the digest and tenants of a good file; exit
/// 2 with every problem of a bad one.
pub fn policy(file: &Path, json: bool) -> anyhow::Result<ExitCode> {
    match crate::policy::OperatorPolicy::load_all(file) {
        Ok(policy) => {
            if json {
                let summary = serde_json::json!({
                    "valid": true,
                    "digest": policy.digest(),
                    "tenants": policy.tenant_names(),
                });
                println!("{}", serde_json::to_string_pretty(&summary)?);
            } else {
                println!(
                    "{}: valid operator policy {} (tenants: {})",
                    file.display(),
                    policy.digest(),
                    policy.tenant_names().join(", ")
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(problems) => {
            if json {
                let summary = serde_json::json!({ "valid": false, "problems": problems });
                println!("{}", serde_json::to_string_pretty(&summary)?);
            } else {
                for problem in &problems {
                    eprintln!("error: {problem}");
                }
                eprintln!("{}: {} problem(s)", file.display(), problems.len());
            }
            Ok(ExitCode::from(2))
        }
    }
}
