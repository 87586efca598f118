//! `execplane operations`: the operation catalog, from the code. The
//! README's table is this command's output (a test keeps them equal).

use std::process::ExitCode;

use crate::contract::Operation;

/// The catalog as a Markdown table (what the README shows), or as JSON.
pub fn run(json: bool) -> anyhow::Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string_pretty(&json_rows(None))?);
    } else {
        print!("{}", table());
    }
    Ok(ExitCode::SUCCESS)
}

/// The catalog with the live runner instances that serve each operation
/// (`--live`): an operation no live runner serves waits for one.
pub fn live(json: bool, live: &std::collections::HashMap<String, i64>) -> anyhow::Result<ExitCode> {
    let served = |operation: Operation| live.get(operation.as_str()).copied().unwrap_or(0);
    if json {
        println!("{}", serde_json::to_string_pretty(&json_rows(Some(live)))?);
    } else {
        println!("| operation | runner type | implemented | live runners |\n|---|---|---|---|");
        for operation in Operation::catalog() {
            println!(
                "| `{}` | {} | {} | {} |",
                operation.as_str(),
                operation.runner_type(),
                if operation.is_implemented() {
                    "yes"
                } else {
                    "no"
                },
                served(operation)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The catalog as JSON rows, with `live_runners` when `live` is given.
fn json_rows(live: Option<&std::collections::HashMap<String, i64>>) -> Vec<serde_json::Value> {
    Operation::catalog()
        .map(|operation| {
            let mut row = serde_json::json!({
                "operation": operation.as_str(),
                "runner_type": operation.runner_type().as_str(),
                "idempotent": operation.is_idempotent(),
                "implemented": operation.is_implemented(),
            });
            if let Some(live) = live {
                row["live_runners"] = live.get(operation.as_str()).copied().unwrap_or(0).into();
            }
            row
        })
        .collect()
}

/// One row per operation, in the contract's order.
pub fn table() -> String {
    let yes_no = |flag: bool| if flag { "yes" } else { "no" };
    let mut text =
        String::from("| operation | runner type | idempotent | implemented |\n|---|---|---|---|\n");
    for operation in Operation::catalog() {
        text.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            operation.as_str(),
            operation.runner_type(),
            yes_no(operation.is_idempotent()),
            yes_no(operation.is_implemented()),
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_readme_table_is_the_catalog() {
        let readme = include_str!("../../README.md");
        let begin = "<!-- operations:begin -->\n";
        let start = readme.find(begin).expect("the README marks its catalog") + begin.len();
        let end = readme[start..]
            .find("<!-- operations:end -->")
            .expect("the catalog's end is marked")
            + start;
        assert_eq!(
            &readme[start..end],
            super::table(),
            "README.md's operation table differs from `execplane operations`"
        );
    }
}
