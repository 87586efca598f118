//! A runner's check of its tool at start (docs/ARCHITECTURE.md, "Tool
//! processes"): the binary is there, answers a trivial invocation within
//! a bound, and reports a version in the range the runner supports. A
//! runner that fails it announces nothing, so no lease reaches it that it
//! cannot honour.

use std::path::Path;
use std::time::Duration;

/// The longest a tool's version invocation may take.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// Runs `program args` (the operator's tool, no tenant input) and returns
/// what it printed (stdout, then stderr), or why it could not.
pub async fn answer(program: &Path, args: &[&str]) -> Result<String, String> {
    let run = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = match tokio::time::timeout(ANSWER_WITHIN, run).await {
        Ok(Ok(out)) => out,
        Ok(Err(error)) => return Err(format!("cannot run {}: {error}", program.display())),
        Err(_) => {
            return Err(format!(
                "{} {} did not answer within {}s",
                program.display(),
                args.join(" "),
                ANSWER_WITHIN.as_secs()
            ))
        }
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return Err(format!(
            "{} {} failed ({}): {}",
            program.display(),
            args.join(" "),
            out.status,
            text.lines().next().unwrap_or("")
        ));
    }
    Ok(text)
}

/// Where `program` is on `PATH`, or that it is not.
pub fn on_path(program: &str) -> Result<std::path::PathBuf, String> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
        .ok_or_else(|| format!("{program} is not on PATH"))
}

/// The first `major.minor[.patch]` in `text` that follows `marker`.
pub fn version_after(text: &str, marker: &str) -> Option<(u64, u64, u64)> {
    let rest = &text[text.find(marker)? + marker.len()..];
    let digits: String = rest
        .trim_start_matches(['v', ' '])
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let mut parts = digits.split('.').map(|part| part.parse::<u64>().ok());
    let major = parts.next()??;
    let minor = parts.next()??;
    let patch = parts.next().flatten().unwrap_or(0);
    Some((major, minor, patch))
}

/// `tool` at `program` answers `args` with a version (after the first of
/// `markers` it prints) of at least `at_least` and below major version
/// `below`.
pub async fn tool_version(
    tool: &str,
    program: &Path,
    args: &[&str],
    markers: &[&str],
    at_least: (u64, u64),
    below: u64,
) -> Result<(u64, u64, u64), String> {
    let text = answer(program, args).await?;
    let Some(version) = markers
        .iter()
        .find_map(|marker| version_after(&text, marker))
    else {
        return Err(format!(
            "{tool} at {} reports no version: {}",
            program.display(),
            text.lines().next().unwrap_or("")
        ));
    };
    if version.0 >= below || (version.0, version.1) < at_least {
        return Err(format!(
            "{tool} at {} is {}.{}.{}; this runner supports {}.{} up to (not including) {below}.0",
            program.display(),
            version.0,
            version.1,
            version.2,
            at_least.0,
            at_least.1
        ));
    }
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_after_their_marker() {
        assert_eq!(
            version_after("ansible-playbook [core 2.17.14]\n  config file", "[core "),
            Some((2, 17, 14))
        );
        assert_eq!(version_after("v3.17.3+ge4da497", ""), Some((3, 17, 3)));
        assert_eq!(
            version_after("OpenTofu v1.12.6\non linux_amd64", "OpenTofu "),
            Some((1, 12, 6))
        );
        assert_eq!(
            version_after("OpenSSH_9.2p1 Debian-2", "OpenSSH_"),
            Some((9, 2, 0))
        );
        assert_eq!(version_after("no version here", "OpenSSH_"), None);
    }

    #[tokio::test]
    async fn a_missing_or_old_tool_is_named() {
        let missing = tool_version(
            "helm",
            Path::new("/nonexistent/helm"),
            &["version"],
            &[""],
            (3, 8),
            4,
        )
        .await
        .unwrap_err();
        assert!(
            missing.contains("cannot run /nonexistent/helm"),
            "{missing}"
        );
        // `sh -c 'echo v2.9.0'` plays a helm 2.
        let old = tool_version(
            "helm",
            Path::new("/bin/sh"),
            &["-c", "echo v2.9.0"],
            &[""],
            (3, 8),
            4,
        )
        .await
        .unwrap_err();
        assert!(
            old.contains("is 2.9.0; this runner supports 3.8 up to (not including) 4.0"),
            "{old}"
        );
    }
}
