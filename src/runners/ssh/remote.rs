//! The command line a node receives: an argument vector, each word quoted
//! for a POSIX shell by construction, under a watchdog that ends the
//! command when the session's stdin ends (the client is gone).

/// `word` as one POSIX shell word: single-quoted, each `'` written as
/// `'\''`. Nothing inside single quotes is special to the shell, so the
/// word reaches the program as it is, whatever it holds.
pub fn quote(word: &str) -> String {
    let mut quoted = String::with_capacity(word.len() + 2);
    quoted.push('\'');
    for character in word.chars() {
        if character == '\'' {
            quoted.push_str("'\\''");
        } else {
            quoted.push(character);
        }
    }
    quoted.push('\'');
    quoted
}

/// How long the command gets between SIGTERM and SIGKILL once its client
/// is gone.
pub const REMOTE_GRACE_SECONDS: u32 = 5;

/// The watchdog: runs `"$@"` in the background with stdin from /dev/null,
/// and, on a second copy of the session's stdin, waits for end of file to
/// stop it; exits with the command's status. Fixed text: the only
/// requester-given words are the quoted arguments after it.
const WATCHDOG: &str = "exec 3<&0; \"$@\" </dev/null 3<&- & c=$!; \
{ while IFS= read -r _; do :; done; kill -TERM \"$c\" 2>/dev/null; \
sleep GRACE; kill -KILL \"$c\" 2>/dev/null; } <&3 >/dev/null 2>&1 & w=$!; \
exec 3<&-; wait \"$c\"; s=$?; kill \"$w\" 2>/dev/null; exit \"$s\"";

/// The remote command for `argv` (program first): `sh -c WATCHDOG execplane
/// ARGV...`, every word quoted.
pub fn command_line(argv: &[String]) -> String {
    let watchdog = WATCHDOG.replace("GRACE", &REMOTE_GRACE_SECONDS.to_string());
    let mut words = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        quote(&watchdog),
        quote("execplane"),
    ];
    words.extend(argv.iter().map(|word| quote(word)));
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAYLOADS: [&str; 10] = [
        "; rm -rf /",
        "$(touch /tmp/execplane-pwned)",
        "`touch /tmp/execplane-pwned`",
        "line one\nline two",
        "it's",
        "'; echo '",
        "\"$HOME\"",
        "a\\b",
        "",
        "* ? [a]",
    ];

    /// What a real `sh` makes of a quoted word: one argument, unchanged.
    #[test]
    fn a_quoted_word_is_one_literal_argument_to_a_real_shell() {
        for payload in PAYLOADS {
            let script = format!("printf '%s\\0' {}", quote(payload));
            let out = std::process::Command::new("/bin/sh")
                .arg("-c")
                .arg(&script)
                .output()
                .expect("sh runs");
            assert_eq!(
                out.stdout,
                format!("{payload}\0").into_bytes(),
                "{payload:?}"
            );
        }
    }

    /// Runs `command_line(argv)` through a real `sh`, as sshd hands it to
    /// the account's shell, with a stdin held open (as the client holds
    /// the session's) until it exits: its stdout and exit code.
    fn through_sh(argv: &[String]) -> (Vec<u8>, Option<i32>) {
        use std::io::Read;
        let mut child = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(command_line(argv))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("sh runs");
        let held = child.stdin.take();
        let mut out = Vec::new();
        child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
        let status = child.wait().unwrap();
        drop(held);
        (out, status.code())
    }

    /// The program gets exactly its argument vector, and its status comes
    /// back.
    #[test]
    fn the_command_line_runs_the_argument_vector_and_keeps_its_status() {
        let mut argv = vec!["/usr/bin/printf".to_owned(), "%s\\0".to_owned()];
        argv.extend(PAYLOADS.iter().map(|payload| (*payload).to_owned()));
        let (out, code) = through_sh(&argv);
        assert_eq!(code, Some(0));
        let seen: Vec<&[u8]> = out.split(|byte| *byte == 0).collect();
        let expected: Vec<&[u8]> = PAYLOADS
            .iter()
            .map(|payload| payload.as_bytes())
            .chain([&b""[..]])
            .collect();
        assert_eq!(seen, expected);
        let (_, code) = through_sh(&["/bin/sh".into(), "-c".into(), "exit 7".into()]);
        assert_eq!(code, Some(7));
    }

    /// When the session's stdin ends (the client is gone), the command is
    /// stopped at once rather than left running.
    #[test]
    fn the_end_of_the_sessions_stdin_stops_the_command() {
        let started = std::time::Instant::now();
        let status = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(command_line(&["/bin/sleep".into(), "30".into()]))
            .stdin(std::process::Stdio::null())
            .status()
            .expect("sh runs");
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        assert!(!status.success(), "stopped, not finished: {status:?}");
    }
}
