use std::process::ExitCode;

use crate::store::{Store, SHADOW_SCHEMA};

pub async fn rebuild(store: &Store, verify: bool, keep: bool) -> anyhow::Result<ExitCode> {
    let report = store.rebuild_verify(keep || !verify).await?;
    println!(
        "rebuilt {} jobs and {} attempts from {} events into schema {SHADOW_SCHEMA}",
        report.jobs, report.attempts, report.events
    );
    if !verify {
        return Ok(ExitCode::SUCCESS);
    }
    if report.is_clean() {
        println!("projection matches the rebuild: jobs, attempts (deadlines included), leases, target keys");
        return Ok(ExitCode::SUCCESS);
    }
    for diff in &report.diffs {
        eprintln!(
            "table {}: {} live row(s) differ from the rebuild, {} rebuilt row(s) missing from live",
            diff.table, diff.only_live_count, diff.only_rebuilt_count
        );
        for row in &diff.only_live {
            eprintln!("  live:    {row}");
        }
        for row in &diff.only_rebuilt {
            eprintln!("  rebuilt: {row}");
        }
    }
    Ok(ExitCode::from(1))
}
