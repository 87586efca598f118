//! The ssh client ansible runs (`execplane ansible-ssh -- ARGS...`, its
//! `ssh_executable`): OpenSSH's `ssh` with the same arguments, except that
//! the command runs under the node's framed watchdog (docs/SECURITY.md,
//! "Ansible packages"), so that it ends with its client.
//!
//! ansible pipelines a module into its interpreter's stdin and closes it,
//! so the end of the session's stdin cannot say that the client is gone,
//! as it does for the ssh runner. This client frames what ansible writes
//! (`runner::kit::remote::frame`), as it comes, then holds the session's
//! stdin open until it exits: when a cancel, the deadline or the runner's
//! death kills ansible's process group (this client and its `ssh` in it),
//! the node reads end of file and stops what the command started.
//!
//! Every command runs so, and only as a command: the runner's
//! configuration asks for no terminal (`usetty = False`), a `-t`/`-tt`
//! is dropped all the same, and the host is put after `--`, so a remote
//! command that reads like an option (`raw: -oProxyCommand=...`) is sent
//! to the node rather than read by ssh (which takes options after the host
//! too). A control command (`-O`) is refused: the runner's ssh shares no
//! connection.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::process::{Command, ExitCode, Stdio};

use crate::runner::kit::remote;

/// What ssh exits with when it cannot connect; ansible reads it as
/// "unreachable".
const SSH_ERROR: u8 = 255;

/// One read of ansible's data, framed as it is.
const FRAME_BYTES: usize = 64 * 1024;

/// Runs ssh with `args`: ansible's options, then the host, then the
/// remote command.
pub fn run(args: &[OsString]) -> ExitCode {
    let refuse = |why: &str| {
        eprintln!("execplane ansible-ssh: {why}");
        ExitCode::from(SSH_ERROR)
    };
    let [options @ .., host, command] = args else {
        return refuse("no host and remote command");
    };
    if options.iter().any(|arg| arg == "-O") {
        return refuse("a control command (-O) is not run: no connection is shared");
    }
    let Some(command) = command.to_str() else {
        return refuse("the remote command is not UTF-8");
    };
    let mut ssh = match Command::new("ssh")
        .args(options.iter().filter(|arg| *arg != "-t" && *arg != "-tt"))
        .arg("--")
        .arg(host)
        .arg(remote::framed_command_line(command))
        .stdin(Stdio::piped())
        .spawn()
    {
        Ok(ssh) => ssh,
        Err(error) => return refuse(&format!("cannot run ssh: {error}")),
    };
    let mut session = ssh.stdin.take().expect("stdin is piped");
    std::thread::spawn(move || {
        let mut input = std::io::stdin().lock();
        let mut buffer = vec![0; FRAME_BYTES];
        loop {
            let read = match input.read(&mut buffer) {
                Ok(read) => read,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                // Read as the end: the command gets what came so far.
                Err(_) => 0,
            };
            // A write error is ssh gone; its status says why.
            if session.write_all(&remote::frame(&buffer[..read])).is_err() || read == 0 {
                break;
            }
        }
        // Held open until this process exits: its end is how the node
        // learns that the client is gone.
        std::mem::forget(session);
    });
    match ssh.wait() {
        Ok(status) => ExitCode::from(
            status
                .code()
                .and_then(|code| u8::try_from(code).ok())
                .unwrap_or(SSH_ERROR),
        ),
        Err(error) => {
            eprintln!("execplane ansible-ssh: cannot wait for ssh: {error}");
            ExitCode::from(SSH_ERROR)
        }
    }
}
