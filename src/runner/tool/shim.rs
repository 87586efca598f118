//! The tool supervisor (`execplane tool-shim -- PROGRAM ARGS...`): the one
//! process between a runner and its tool. It exists because nothing a
//! runner does after `kill -9` can clean up, and `PR_SET_PDEATHSIG` reaches
//! only a direct child, never the processes a tool forks (ansible's
//! workers, terraform's providers, a script's `sleep &`).
//!
//! It starts the tool in a process group of its own, as a child subreaper
//! (an orphaned descendant is re-parented to it, not to init), and reads
//! its stdin, a pipe from the runner:
//!
//! - `i`: SIGINT to the tool's group (the polite stop);
//! - `k`, or end of file (the runner dropped the tool, or died however it
//!   died): SIGKILL to the group and to every descendant, then exit.
//!
//! The tool's stdin is /dev/null, or (`--hold-stdin`) a pipe nobody writes
//! to whose end the supervisor holds: the tool reads end of file only once
//! the supervisor is gone. An ssh client passes it to the remote side, where
//! it is how the remote command learns that its runner stopped it.
//!
//! When the tool exits by itself, whatever it left behind is killed the
//! same way. The supervisor then ends as the tool ended: the same exit code,
//! or the same signal raised on itself (it installs no handlers), so the
//! runner reads the tool's status from the supervisor's.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitOptions};

/// Exit code when the tool could not be started at all (as shells do).
pub const CANNOT_START: u8 = 127;

/// How the supervisor ends when a cleanup could not reap everything.
const REAP_DEADLINE: Duration = Duration::from_secs(5);

/// How the supervisor starts its tool.
pub struct Options<'a> {
    /// The tool's private directory, removed if the runner goes away.
    pub workdir: Option<&'a std::path::Path>,
    /// A stdin pipe held open while the supervisor lives.
    pub hold_stdin: bool,
    /// Sandboxed: the uid (and gid) the tool's first process starts as.
    /// That process is the sandbox builder (bubblewrap), whose own
    /// process a polite stop spares: it would die of SIGINT and take the
    /// tool down at once.
    pub uid: Option<u32>,
    /// The cgroups the supervisor joins first, so that everything it
    /// starts is held to their limits.
    pub cgroups: &'a [std::path::PathBuf],
}

/// Runs `command` (program, then its arguments) under supervision. Its
/// stdout and stderr are the supervisor's; its environment is the
/// supervisor's, which the runner scrubbed. When its runner goes away
/// while the tool runs, the working directory (which the runner can no
/// longer remove) is removed too.
pub fn run(options: &Options<'_>, command: &[OsString]) -> ExitCode {
    let (workdir, hold_stdin) = (options.workdir, options.hold_stdin);
    let Some((program, args)) = command.split_first() else {
        eprintln!("execplane tool supervisor: no program given");
        return ExitCode::from(CANNOT_START);
    };
    // Nothing the runner held open reaches the tool: its Kafka client's
    // wake-up pipes, say, which librdkafka makes without close-on-exec
    // (a tool writing to them would keep the runner's threads spinning,
    // reading them would delay every other attempt's reports).
    if let Err(error) = close_on_exec_inherited() {
        eprintln!("execplane tool supervisor: cannot close what the runner left open: {error}");
        return ExitCode::from(CANNOT_START);
    }
    if let Err(error) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        eprintln!("execplane tool supervisor: cannot become a subreaper: {error}");
        return ExitCode::from(CANNOT_START);
    }
    // A session of its own: no controlling terminal for anything it
    // starts (a tool cannot type into the operator's shell).
    let _ = rustix::process::setsid();
    // Nothing below gains privileges through exec (setuid binaries,
    // file capabilities).
    if let Err(error) = rustix::thread::set_no_new_privs(true) {
        eprintln!("execplane tool supervisor: cannot set no_new_privs: {error}");
        return ExitCode::from(CANNOT_START);
    }
    for cgroup in options.cgroups {
        let procs = cgroup.join("cgroup.procs");
        if let Err(error) = std::fs::write(
            &procs,
            rustix::process::getpid().as_raw_nonzero().to_string(),
        ) {
            eprintln!(
                "execplane tool supervisor: cannot join the cgroup {}: {error}",
                cgroup.display()
            );
            return ExitCode::from(CANNOT_START);
        }
    }
    // Both ends are close-on-exec: the tool gets the reader as its stdin
    // only, and the writer stays here until the supervisor exits.
    let (stdin, _held) = match hold_stdin.then(std::io::pipe).transpose() {
        Ok(Some((reader, writer))) => (Stdio::from(reader), Some(writer)),
        Ok(None) => (Stdio::null(), None),
        Err(error) => {
            eprintln!("execplane tool supervisor: cannot make the tool's stdin pipe: {error}");
            return ExitCode::from(CANNOT_START);
        }
    };
    // The sandbox's system call filter, for bubblewrap to read from a
    // descriptor the tool's first process inherits.
    let (args, _filter) = match with_filter(args) {
        Ok(found) => found,
        Err(error) => {
            eprintln!("execplane tool supervisor: cannot load the system call filter: {error}");
            return ExitCode::from(CANNOT_START);
        }
    };
    let mut tool_command = Command::new(program);
    tool_command.args(args).stdin(stdin).process_group(0);
    if let Some(uid) = options.uid {
        // As root, std drops the supplementary groups before setuid.
        tool_command.uid(uid).gid(uid);
    }
    let child = match tool_command.spawn() {
        Ok(child) => child,
        Err(error) => {
            eprintln!(
                "execplane tool supervisor: cannot start {}: {error}",
                program.to_string_lossy()
            );
            return ExitCode::from(CANNOT_START);
        }
    };
    let tool = Pid::from_child(&child);
    // The tool is reaped below with every other descendant: the handle is
    // only its pid.
    drop(child);
    let orders = read_orders();
    let mut orphaned = false;
    let status = loop {
        match orders.recv_timeout(Duration::from_millis(20)) {
            Ok(Order::Interrupt) if options.uid.is_some() => {
                for pid in descendants_of(tool) {
                    let _ = rustix::process::kill_process(pid, Signal::INT);
                }
            }
            Ok(Order::Interrupt) => {
                let _ = rustix::process::kill_process_group(tool, Signal::INT);
            }
            Ok(Order::Kill) => kill_everything(tool),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                orphaned = true;
                kill_everything(tool);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if let Some(status) = reap(tool) {
            break status;
        }
    };
    kill_everything(tool);
    reap_all(Instant::now() + REAP_DEADLINE);
    if let (true, Some(workdir)) = (orphaned, workdir) {
        // A sandboxed directory is a tmpfs of its own.
        if options.uid.is_some() {
            let _ = crate::runner::sandbox::unmount_workdir(workdir);
        }
        if let Err(error) = std::fs::remove_dir_all(workdir) {
            eprintln!(
                "execplane tool supervisor: cannot remove {}: {error}",
                workdir.display()
            );
        }
    }
    end_as(status)
}

/// Marks every descriptor but stdin, stdout and stderr close-on-exec. Run
/// first, while the supervisor is one thread. (The crate's one `unsafe`:
/// no safe API takes a descriptor by its number.)
#[allow(unsafe_code)]
fn close_on_exec_inherited() -> std::io::Result<()> {
    use rustix::fd::BorrowedFd;
    use rustix::io::{fcntl_getfd, fcntl_setfd, FdFlags};
    // Listed first, then changed: the listing's own descriptor is closed
    // by then (and is close-on-exec anyway).
    let open: Vec<i32> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    for fd in open {
        // SAFETY: only the descriptor's flags are read and set, for as
        // long as this borrow lasts; one closed meanwhile is `EBADF`.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        match fcntl_getfd(borrowed) {
            Ok(flags) => fcntl_setfd(borrowed, flags | FdFlags::CLOEXEC)?,
            Err(rustix::io::Errno::BADF) => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

enum Order {
    Interrupt,
    Kill,
}

/// `args` with bubblewrap's `--seccomp` [`FD_ARG`](crate::runner::sandbox::seccomp::FD_ARG)
/// (the first, which the runner wrote, never one of the tool's own
/// arguments further on) naming a descriptor that holds the filter (not
/// close-on-exec, kept open here until the tool has started).
fn with_filter(args: &[OsString]) -> std::io::Result<(Vec<OsString>, Option<rustix::fd::OwnedFd>)> {
    use crate::runner::sandbox::seccomp;
    use rustix::fd::AsRawFd;
    let Some(at) = args
        .windows(2)
        .position(|pair| pair[0] == "--seccomp" && pair[1] == seccomp::FD_ARG)
    else {
        return Ok((args.to_vec(), None));
    };
    let program = seccomp::program()
        .ok_or_else(|| std::io::Error::other("no filter for this architecture"))?;
    let filter = rustix::fs::memfd_create("execplane-seccomp", rustix::fs::MemfdFlags::empty())?;
    let mut written = 0;
    while written < program.len() {
        written += rustix::io::write(&filter, &program[written..])?;
    }
    rustix::fs::seek(&filter, rustix::fs::SeekFrom::Start(0))?;
    let mut args = args.to_vec();
    args[at + 1] = filter.as_raw_fd().to_string().into();
    Ok((args, Some(filter)))
}

/// The runner's orders, read on a thread of their own; the channel
/// disconnects at end of file.
fn read_orders() -> mpsc::Receiver<Order> {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut byte = [0_u8; 1];
        while let Ok(1) = stdin.read(&mut byte) {
            let order = match byte[0] {
                b'i' => Order::Interrupt,
                b'k' => Order::Kill,
                _ => continue,
            };
            if sender.send(order).is_err() {
                return;
            }
        }
    });
    receiver
}

/// Reaps every exited child without waiting; the tool's status once it
/// has exited.
fn reap(tool: Pid) -> Option<rustix::process::WaitStatus> {
    let mut tool_status = None;
    while let Ok(Some((pid, status))) = rustix::process::wait(WaitOptions::NOHANG) {
        if pid == tool {
            tool_status = Some(status);
        }
    }
    tool_status
}

/// SIGKILL to the tool's group and to every process re-parented to the
/// supervisor (a descendant that left the group and lost its parent).
fn kill_everything(tool: Pid) {
    let _ = rustix::process::kill_process_group(tool, Signal::KILL);
    for pid in children_of(rustix::process::getpid()) {
        let _ = rustix::process::kill_process(pid, Signal::KILL);
    }
}

/// Kills and reaps until no child is left (a descendant whose parent was
/// just killed is re-parented here a moment later), within `deadline`.
fn reap_all(deadline: Instant) {
    loop {
        match rustix::process::wait(WaitOptions::NOHANG) {
            Ok(Some(_)) => continue,
            Ok(None) => {}
            // No child left at all.
            Err(_) => return,
        }
        if Instant::now() >= deadline {
            eprintln!("execplane tool supervisor: descendants still alive after SIGKILL");
            return;
        }
        for pid in children_of(rustix::process::getpid()) {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Every process below `ancestor` (not itself), from /proc.
fn descendants_of(ancestor: Pid) -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parents: Vec<(i32, i32)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((pid, parent_of(pid)?)))
        .collect();
    let mut found = vec![ancestor.as_raw_nonzero().get()];
    let mut next = 0;
    while next < found.len() {
        let parent = found[next];
        found.extend(
            parents
                .iter()
                .filter(|(_, of)| *of == parent)
                .map(|(pid, _)| *pid),
        );
        next += 1;
    }
    found
        .into_iter()
        .skip(1)
        .filter_map(Pid::from_raw)
        .collect()
}

/// The processes whose parent is `parent`, from /proc.
fn children_of(parent: Pid) -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| parent_of(*pid) == Some(parent.as_raw_nonzero().get()))
        .filter_map(Pid::from_raw)
        .collect()
}

/// The parent pid of `pid`, from `/proc/<pid>/stat` (the field after the
/// parenthesised command name, which may itself hold spaces and parens).
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace();
    let _state = fields.next()?;
    fields.next()?.parse().ok()
}

/// Ends the supervisor as the tool ended.
fn end_as(status: rustix::process::WaitStatus) -> ExitCode {
    if let Some(code) = status.exit_status() {
        return ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1));
    }
    if let Some(signal) = status.terminating_signal() {
        if let Some(signal) = Signal::from_named_raw(signal) {
            let _ = rustix::process::kill_process(rustix::process::getpid(), signal);
            // A signal whose default is not to terminate: say it the
            // shells' way.
            std::thread::sleep(Duration::from_millis(100));
        }
        return ExitCode::from(u8::try_from(128 + (signal & 0x7f)).unwrap_or(1));
    }
    ExitCode::from(1)
}
