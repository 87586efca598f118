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
//! connection. And it connects only to the attempt's targets, each at its
//! port: a task's `delegate_to` a host outside the inventory (with a
//! `port`) is refused here rather than reaching, and so probing, any
//! address the runner's host can route to; so is any option but those the
//! runner and ansible pass, since others could send ssh elsewhere
//! (`ProxyCommand`, `Hostname`, `-J`) or run or load code on the
//! controller (`LocalCommand`, `PKCS11Provider`, a second `-F`).

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

use crate::runner::kit::remote;

/// What ssh exits with when it cannot connect; ansible reads it as
/// "unreachable".
const SSH_ERROR: u8 = 255;

/// One read of ansible's data, framed as it is.
const FRAME_BYTES: usize = 64 * 1024;

/// The `-o` options the runner's configuration and ansible's ssh plugin
/// pass; any other (`ProxyCommand`, `LocalCommand`, `PKCS11Provider`,
/// `Hostname`, a forwarding, ...) could send ssh elsewhere or run or load
/// code on the controller, and is refused.
const OPTIONS: [&str; 21] = [
    "batchmode",
    "clearallforwardings",
    "connecttimeout",
    "controlmaster",
    "controlpath",
    "forwardagent",
    "globalknownhostsfile",
    "identitiesonly",
    "identityagent",
    "identityfile",
    "kbdinteractiveauthentication",
    "knownhostscommand",
    "passwordauthentication",
    "port",
    "preferredauthentications",
    "serveralivecountmax",
    "serveraliveinterval",
    "stricthostkeychecking",
    "updatehostkeys",
    "user",
    "userknownhostsfile",
];

/// Runs ssh with `args` (ansible's options, then the host, then the
/// remote command) when the host and port are one of `targets`' lines.
pub fn run(targets: &Path, args: &[OsString]) -> ExitCode {
    let refuse = |why: &str| {
        eprintln!("execplane ansible-ssh: {why}");
        ExitCode::from(SSH_ERROR)
    };
    let [options @ .., host, command] = args else {
        return refuse("no host and remote command");
    };
    let port = match port(options) {
        Ok(port) => port,
        Err(why) => return refuse(&why),
    };
    let (Some(host), Some(command)) = (host.to_str(), command.to_str()) else {
        return refuse("the host or the remote command is not UTF-8");
    };
    let allowed = match std::fs::read_to_string(targets) {
        Ok(allowed) => allowed,
        Err(error) => return refuse(&format!("cannot read the attempt's targets: {error}")),
    };
    let target = format!("{host} {port}");
    if !allowed.lines().any(|line| line == target) {
        return refuse(&format!(
            "{} port {port} is not one of the attempt's targets",
            crate::contract::limits::loggable(host)
        ));
    }
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

/// The port `options` connect to, read as ssh reads them (the first of
/// `-p` and `-o Port` wins; 22 without either), or why they may not run:
/// an option that is not one of [`OPTIONS`], a flag other than `-F` (once),
/// `-C`, `-q`, `-t` and `-v`, a second `KnownHostsCommand`.
fn port(options: &[OsString]) -> Result<u16, String> {
    let mut port: Option<u16> = None;
    let (mut configs, mut commands) = (0, 0);
    let mut args = options.iter();
    while let Some(arg) = args.next() {
        let arg = arg.to_str().ok_or("an option that is not UTF-8")?;
        let flags = arg
            .strip_prefix('-')
            .filter(|flags| !flags.is_empty() && *flags != "-")
            .ok_or_else(|| {
                format!(
                    "`{}` before the host",
                    crate::contract::limits::loggable(arg)
                )
            })?;
        for (at, flag) in flags.char_indices() {
            match flag {
                // `-t` is dropped from what ssh is given.
                'C' | 'q' | 't' | 'v' => continue,
                'F' | 'o' | 'p' => {}
                _ => return Err(format!("-{flag} is not run")),
            }
            let rest = &flags[at + flag.len_utf8()..];
            let value = if rest.is_empty() {
                args.next()
                    .and_then(|value| value.to_str())
                    .ok_or_else(|| format!("-{flag} without a value"))?
            } else {
                rest
            };
            let (key, setting) = match flag {
                'p' => ("port".to_owned(), value),
                'F' => {
                    configs += 1;
                    if configs > 1 {
                        return Err("a second configuration file (-F) is not read".into());
                    }
                    break;
                }
                _ => {
                    let (key, setting) = value.split_once(['=', ' ', '\t']).unwrap_or((value, ""));
                    (key.trim().to_ascii_lowercase(), setting)
                }
            };
            if !OPTIONS.contains(&key.as_str()) {
                return Err(format!(
                    "the ssh option {} is not the play's to set",
                    crate::contract::limits::loggable(&key)
                ));
            }
            if key == "knownhostscommand" {
                commands += 1;
                if commands > 1 {
                    return Err("a second KnownHostsCommand is not run".into());
                }
            }
            if key == "port" && port.is_none() {
                let setting = setting.trim().trim_matches('"');
                port = Some(setting.parse().map_err(|_| {
                    format!(
                        "`{}` is not a port",
                        crate::contract::limits::loggable(setting)
                    )
                })?);
            }
            break;
        }
    }
    Ok(port.unwrap_or(22))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(args: &[&str]) -> Result<u16, String> {
        port(&args.iter().map(OsString::from).collect::<Vec<_>>())
    }

    #[test]
    fn the_port_is_the_one_ssh_would_use_and_a_way_elsewhere_is_refused() {
        assert_eq!(
            read(&["-F", "/dev/null", "-C", "-o", "ControlMaster=no"]),
            Ok(22)
        );
        assert_eq!(read(&["-o", "Port=2222", "-o", "User=\"x\""]), Ok(2222));
        assert_eq!(read(&["-tt", "-o", "Port=2222"]), Ok(2222));
        // The first wins, as in ssh; a value is never read as an option.
        assert_eq!(read(&["-p2200", "-o", "Port=2222"]), Ok(2200));
        assert_eq!(read(&["-F", "-p", "-oPort 2201"]), Ok(2201));
        for refused in [
            &["-o", "ProxyCommand=sh -c id"][..],
            &["-o", "PKCS11Provider=/tmp/x.so"],
            &["-o", "KnownHostsCommand=a", "-o", "KnownHostsCommand=b"],
            &["-F", "/dev/null", "-F", "/tmp/config"],
            &["-E", "/tmp/log"],
            &["-f"],
            &["-L", "1:x:2"],
            &["-S", "/tmp/socket"],
            &["-oProxyJump=x"],
            &["-o", "HostName 10.0.0.5"],
            &["-o", "LocalCommand=id"],
            &["-J", "x"],
            &["-W", "x:1"],
            &["-O", "exit"],
            &["-vO", "exit"],
            &["stray"],
            &["-o", "Port=x"],
            &["-o"],
        ] {
            assert!(read(refused).is_err(), "{refused:?}");
        }
    }
}
