//! The command line a node receives: an argument vector, each word quoted
//! for a POSIX shell by construction, under a watchdog that ends the
//! command when the session's stdin ends (the client is gone).
//!
//! ansible's commands need the session's stdin themselves (a pipelined
//! module is its interpreter's stdin), so theirs is [`framed_command_line`]:
//! the client frames what it sends (`<length>\n<bytes>`, ..., `0\n`) and
//! then holds the session open, and the node's watchdog hands the frames
//! to the command and waits on what follows for the end of file.

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

/// The watchdog of a framed session: the frames go through a FIFO in a
/// private temporary directory to the command (`sh -c "$1"`, which reads
/// end of file after the last frame); the rest of the session's stdin is
/// waited on to its end, which stops the session's whole process group
/// (everything the command started that did not leave it: ansible's module
/// and what it runs). Fixed text: the only requester-given word is the
/// quoted command after it. Past POSIX it needs `mktemp -d` and GNU
/// coreutils' `head -c`, which reads exactly the frame (busybox's and the
/// BSDs' read ahead through stdio and would swallow the next frame).
const FRAMED_WATCHDOG: &str = "exec 3<&0 </dev/null; \
d=$(mktemp -d) || exit 255; mkfifo \"$d/i\" || { rm -rf \"$d\"; exit 255; }; \
sh -c \"$1\" <\"$d/i\" 3<&- & c=$!; \
{ while IFS= read -r n && [ \"$n\" -gt 0 ]; do head -c \"$n\"; done >\"$d/i\"; \
rm -rf \"$d\"; while IFS= read -r _; do :; done; \
trap '' TERM; kill -TERM 0; sleep GRACE; kill -KILL 0; } <&3 >/dev/null 2>&1 & w=$!; \
exec 3<&-; wait \"$c\"; s=$?; kill -KILL \"$w\" 2>/dev/null; rm -rf \"$d\"; exit \"$s\"";

/// `command` (a line for the node's shell, as ansible writes it) under the
/// framed watchdog: `sh -c FRAMED_WATCHDOG execplane COMMAND`.
pub fn framed_command_line(command: &str) -> String {
    let watchdog = FRAMED_WATCHDOG.replace("GRACE", &REMOTE_GRACE_SECONDS.to_string());
    [
        "sh",
        "-c",
        &quote(&watchdog),
        &quote("execplane"),
        &quote(command),
    ]
    .join(" ")
}

/// One frame of a framed session's stdin: its length line, then its bytes
/// (an empty `bytes` is the last frame).
pub fn frame(bytes: &[u8]) -> Vec<u8> {
    let mut frame = format!("{}\n", bytes.len()).into_bytes();
    frame.extend_from_slice(bytes);
    frame
}

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

    /// A framed session: the command reads exactly the frames' bytes, then
    /// end of file, and its status comes back while the session is held
    /// open; when the session's stdin ends before the command does, the
    /// command and what it started are stopped.
    #[test]
    fn a_framed_command_reads_its_frames_and_stops_with_its_session() {
        use std::io::{Read, Write};
        use std::os::unix::process::CommandExt;
        let framed = |command: &str| {
            let mut shell = std::process::Command::new("/bin/sh");
            shell
                .arg("-c")
                .arg(framed_command_line(command))
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .process_group(0);
            shell.spawn().expect("sh runs")
        };
        let mut child = framed("cat; printf '|%s' \"$0\"; exit 3");
        let mut stdin = child.stdin.take().unwrap();
        for bytes in [&b"one\n"[..], b"two\0 'three'\n", b""] {
            stdin.write_all(&frame(bytes)).unwrap();
        }
        let mut out = Vec::new();
        child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
        assert_eq!(child.wait().unwrap().code(), Some(3));
        drop(stdin);
        assert_eq!(out, b"one\ntwo\0 'three'\n|sh");

        let marker = format!("{}", 40_000 + std::process::id() % 20_000);
        let mut child = framed(&format!("sleep {marker} & sleep {marker}; echo late"));
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&frame(b"")).unwrap();
        let sleeping = || {
            std::process::Command::new("pgrep")
                .args(["-x", "-f", &format!("sleep {marker}")])
                .output()
                .is_ok_and(|out| !out.stdout.is_empty())
        };
        let started = std::time::Instant::now();
        while !sleeping() && started.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(sleeping(), "the command runs");
        drop(stdin);
        let mut out = Vec::new();
        child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
        assert!(!child.wait().unwrap().success());
        assert!(out.is_empty(), "{out:?}");
        assert!(!sleeping(), "both sleeps stopped with the session");
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
