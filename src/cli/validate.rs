use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;

use crate::contract::validate_jobspec_bytes;

/// Exit 0 and the normalised spec when valid and runnable here (its
/// operation implemented); exit 2 and every problem when not.
pub fn run(file: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    match validate_jobspec_bytes(&bytes).and_then(super::submit::runnable) {
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
