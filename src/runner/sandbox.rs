//! The sandbox every tool process runs in (docs/SECURITY.md, "The tool
//! sandbox"). A tenant's package, chart, module or inventory is the
//! tenant's code, and the runner host holds every tenant's credentials, so
//! a tool sees nothing but its own attempt:
//!
//! - its own unprivileged uid and gid, one per working directory (so per
//!   attempt), from a pool the runner allocates by lock files
//!   ([`Identity`]): never the runner's uid, never root, never one that
//!   another attempt on this host holds;
//! - its own user, mount, pid, ipc and uts namespaces, built by Debian's
//!   `bubblewrap` run as that uid: the working directory read-write, the
//!   system's `/usr` and a short list of `/etc` files read-only, the
//!   program's own directories read-only, a `/tmp` inside the working
//!   directory; no work root, no other attempt, no runner configuration,
//!   no `/proc` but its own;
//! - `no_new_privs`, a session of its own (no controlling terminal) and a
//!   scrubbed environment;
//! - limits: memory and processes by a cgroup of its own ([`Cgroups`],
//!   cgroup v1), CPU seconds per process and open files by rlimits, disk by
//!   a size-limited tmpfs mounted on the working directory, and output by
//!   the attempt's budget (`tool::OutputBudget`).
//!
//! The network is the host's, less the platform's own endpoints and the
//! operator's deny list ([`egress`]); a tool that needs no network runs
//! with none.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub mod egress;
pub mod seccomp;

pub use egress::Network;

/// How tools are sandboxed; defaults are in the README.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxSettings {
    /// `EXECPLANE_SANDBOX`: `on` (default) or `off`. Off runs tools as
    /// the runner's own user with nothing but a private directory: for a
    /// host that serves one tenant, and said loudly at start.
    pub enabled: bool,
    /// `EXECPLANE_SANDBOX_BWRAP`: bubblewrap, which builds the namespaces.
    pub bwrap: PathBuf,
    /// util-linux's `prlimit`, which sets the rlimits before bubblewrap.
    pub prlimit: PathBuf,
    /// `EXECPLANE_SANDBOX_UID_BASE`: the first uid (and gid) of the pool.
    pub uid_base: u32,
    /// `EXECPLANE_SANDBOX_UIDS`: how many uids the pool holds.
    pub uid_count: u32,
    /// Where the pool's lock files are (one per uid, held while in use).
    pub lock_dir: PathBuf,
    /// `EXECPLANE_SANDBOX_READ_ONLY`: more host paths every tool sees,
    /// read-only (an interpreter outside `/usr`, say).
    pub read_only: Vec<PathBuf>,
    /// The limits of each tool.
    pub limits: Limits,
    /// What tools may reach over the network.
    pub network: Network,
}

impl SandboxSettings {
    /// What the instance's presence says of how it runs tools.
    pub fn isolation(&self) -> crate::codec::Isolation {
        use crate::codec::Isolation;
        match (self.enabled, &self.network) {
            (false, _) => Isolation::Unsandboxed,
            (true, Network::Host) => Isolation::HostNetwork,
            (true, _) => Isolation::Sandboxed,
        }
    }
}

impl Default for SandboxSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            bwrap: PathBuf::from("/usr/bin/bwrap"),
            prlimit: PathBuf::from("/usr/bin/prlimit"),
            uid_base: 1_900_000_000,
            uid_count: 1024,
            lock_dir: PathBuf::from("/run/execplane/sandbox-uids"),
            read_only: Vec::new(),
            limits: Limits::default(),
            network: Network::default(),
        }
    }
}

/// What one tool may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// `EXECPLANE_SANDBOX_MEMORY_MIB`: memory (and swap) of the tool and
    /// everything it starts.
    pub memory_bytes: u64,
    /// `EXECPLANE_SANDBOX_PIDS`: processes and threads at once.
    pub pids: u64,
    /// `EXECPLANE_SANDBOX_CPU_PERCENT`: the CPU time of the tool and
    /// everything it starts together, in percent of one CPU.
    pub cpu_percent: u64,
    /// `EXECPLANE_SANDBOX_CPU_SECONDS`: CPU seconds of each process.
    pub cpu_seconds: u64,
    /// `EXECPLANE_SANDBOX_OPEN_FILES`: open files of each process.
    pub open_files: u64,
    /// `EXECPLANE_SANDBOX_DISK_MIB`: the working directory's size (the
    /// attempt's inputs, its files and its `/tmp`).
    pub disk_bytes: u64,
}

const MIB: u64 = 1024 * 1024;

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 2048 * MIB,
            pids: 512,
            cpu_percent: 100,
            cpu_seconds: 3600,
            open_files: 4096,
            disk_bytes: 1024 * MIB,
        }
    }
}

/// A limit a tool reached, read after it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "limit", content = "bound")]
pub enum LimitHit {
    /// The memory cgroup killed a process (bytes).
    Memory(u64),
    /// A fork was refused by the pids cgroup (processes).
    Pids(u64),
    /// The working directory filled up (bytes).
    Disk(u64),
}

impl std::fmt::Display for LimitHit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LimitHit::Memory(bytes) => write!(
                f,
                "the tool went over its memory limit of {} MiB and was killed (EXECPLANE_SANDBOX_MEMORY_MIB)",
                bytes / MIB
            ),
            LimitHit::Pids(count) => write!(
                f,
                "the tool went over its limit of {count} processes (EXECPLANE_SANDBOX_PIDS)"
            ),
            LimitHit::Disk(bytes) => write!(
                f,
                "the tool filled its working directory's {} MiB, or its {} files (EXECPLANE_SANDBOX_DISK_MIB)",
                bytes / MIB,
                workdir_inodes(*bytes)
            ),
        }
    }
}

/// A uid (and the gid of the same number) of the pool, held while the
/// lock file stays open: by this process, and by no other process on the
/// host that uses the same lock directory.
///
/// With the network guarded, a uid may also hold its tools to what they
/// may reach ([`Identity::hold_network`]): the script that lets it go is
/// kept in the lock file while it holds, so the next process to take the
/// uid lets it go if this one died first, and is run before the lock is
/// given up.
#[derive(Debug)]
pub struct Identity {
    uid: u32,
    /// Held while this value lives; forgotten (held until the process
    /// ends) when a tool's process outlived its run.
    lock: Option<std::fs::File>,
    /// Set by a run's cgroups when a process of it outlived the run.
    lingering: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The nftables CLI and this process's table, with the network guarded.
    guard: Option<(PathBuf, String)>,
    /// The uid's network's hold, while there is one (or may be).
    held: tokio::sync::Mutex<Option<Hold>>,
}

/// What a uid's network is held to.
#[derive(Debug)]
struct Hold {
    reach: Vec<egress::Destination>,
    /// The script that lets it go.
    release: String,
    /// Whether the hold is known to be in place: one that failed, or was
    /// cut short, is released, never taken as held.
    applied: bool,
}

impl Identity {
    /// The first free uid of the pool, starting at a random one.
    pub fn allocate(settings: &SandboxSettings) -> std::io::Result<Self> {
        let count = settings.uid_count.max(1);
        let start = rand::random::<u32>() % count;
        for step in 0..count {
            let uid = settings.uid_base + (start + step) % count;
            if let Some(identity) = Self::take(settings, uid)? {
                return Ok(identity);
            }
        }
        Err(std::io::Error::other(format!(
            "all {count} sandbox uids from {} are in use (EXECPLANE_SANDBOX_UIDS)",
            settings.uid_base
        )))
    }

    /// `uid` of the pool, unless a process of this host holds it.
    fn take(settings: &SandboxSettings, uid: u32) -> std::io::Result<Option<Self>> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&settings.lock_dir)?;
        let lock = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(settings.lock_dir.join(format!("uid-{uid}")))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
            Err(std::fs::TryLockError::Error(error)) => return Err(error),
        }
        let guard = match &settings.network {
            Network::Guarded { nft, .. } => {
                Some((nft.clone(), egress::table_name(settings.uid_base)))
            }
            Network::Host => None,
        };
        // A holder that died holding the uid's network left its release.
        let left = std::io::read_to_string(&lock)?;
        if !left.is_empty() {
            let nft = guard
                .as_ref()
                .map_or(Path::new(egress::NFT), |(nft, _)| nft);
            if let Err(error) = egress::apply_blocking(nft, &left) {
                // Its table gone (removed by the next runner to start),
                // nothing holds the uid; else it is still held there, and
                // taking it would hold this attempt's tools to another's
                // destinations: left for a later try.
                let table = left.split_whitespace().nth(3).unwrap_or_default();
                if egress::table_exists(nft, table) != Ok(false) {
                    tracing::warn!(uid, %error, "a sandbox uid may still be held by a dead runner's table; skipped");
                    return Ok(None);
                }
            }
            lock.set_len(0)?;
        }
        Ok(Some(Self {
            uid,
            lock: Some(lock),
            lingering: Default::default(),
            guard,
            held: tokio::sync::Mutex::new(None),
        }))
    }

    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// The flag a run's cgroups set when a process of the run outlives it.
    pub fn lingering(&self) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
        self.lingering.clone()
    }

    /// Holds the uid's sockets to `reach` (and the host's name servers)
    /// for the tools it runs next, or, with `None`, lets them go to the
    /// guarded network every tool has. A hold already in place for the
    /// same `reach` stays (its names are resolved once an attempt).
    /// Returns, for a new hold, the names of `reach` that did not resolve
    /// (left out). Nothing to do on the host's network.
    pub async fn hold_network(
        &self,
        reach: Option<&[egress::Destination]>,
    ) -> Result<Option<Vec<String>>, String> {
        let Some((nft, table)) = &self.guard else {
            return Ok(None);
        };
        let mut held = self.held.lock().await;
        if let Some(hold) = held.as_ref() {
            if hold.applied && Some(hold.reach.as_slice()) == reach {
                return Ok(None);
            }
        }
        if let Some(hold) = held.take() {
            egress::apply(nft, &hold.release).await?;
            self.record("").map_err(|error| error.to_string())?;
        }
        let Some(reach) = reach else {
            return Ok(None);
        };
        let (resolved, unresolved) = egress::Reach::resolve(reach).await;
        let (hold, release) = resolved.scripts(table, self.uid);
        // Recorded first: a runner that dies from here on leaves it to
        // the uid's next holder.
        self.record(&release).map_err(|error| error.to_string())?;
        let hold_now = held.insert(Hold {
            reach: reach.to_vec(),
            release,
            applied: false,
        });
        egress::apply(nft, &hold).await?;
        hold_now.applied = true;
        Ok(Some(unresolved))
    }

    /// Replaces the lock file's content with `text`.
    fn record(&self, text: &str) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let Some(lock) = &self.lock else {
            return Ok(());
        };
        lock.set_len(0)?;
        lock.write_all_at(text.as_bytes(), 0)
    }
}

impl Drop for Identity {
    fn drop(&mut self) {
        if self.lingering.load(std::sync::atomic::Ordering::SeqCst) {
            // A process of its tools still runs as the uid: the uid stays
            // this process's, held to its destinations, until it ends.
            std::mem::forget(self.lock.take());
            return;
        }
        let (Some(hold), Some((nft, _))) = (self.held.get_mut().take(), &self.guard) else {
            return;
        };
        // Before the lock goes: the next holder must not find it held.
        match egress::apply_blocking(nft, &hold.release) {
            Ok(()) => {
                let _ = self.record("");
            }
            Err(error) => tracing::warn!(
                uid = self.uid,
                %error,
                "the uid's network was not let go; its next holder lets it go"
            ),
        }
    }
}

/// The fewest files (and directories) a working directory may hold.
const MIN_WORKDIR_INODES: u64 = 16_384;

/// The files (and directories) a working directory of `bytes` may hold:
/// one a 4 KiB page, and at least [`MIN_WORKDIR_INODES`].
fn workdir_inodes(bytes: u64) -> u64 {
    (bytes / 4096).max(MIN_WORKDIR_INODES)
}

/// Mounts a tmpfs of `bytes` on `path`, owned by `uid` and closed to
/// everyone else: the working directory's disk limit, and no hard link
/// from it reaches a file of the host's. The runner works in it at `path`,
/// where it follows no link (`nosymfollow`: a tool's links never lead the
/// runner, as root, anywhere); tools see it at the same path through a
/// second mount of it, [`tools_view`], where links work as usual.
pub fn mount_workdir(path: &Path, uid: u32, bytes: u64) -> std::io::Result<()> {
    use rustix::mount::{mount, mount_bind, mount_remount, MountFlags};
    // Files as well as bytes: an empty file takes no size, and a tmpfs
    // by default holds as many as half the host's memory has pages.
    let inodes = workdir_inodes(bytes);
    let data = std::ffi::CString::new(format!(
        "size={bytes},nr_inodes={inodes},mode=0700,uid={uid},gid={uid}"
    ))
    .map_err(std::io::Error::other)?;
    let tools = tools_view(path);
    std::fs::create_dir(&tools)?;
    let mounted = mount(
        "execplane-work",
        &tools,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        data.as_c_str(),
    )
    .and_then(|()| mount_bind(&tools, path))
    .and_then(|()| {
        mount_remount(
            path,
            MountFlags::BIND | MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOSYMFOLLOW,
            c"",
        )
    });
    if let Err(error) = mounted {
        let _ = unmount_workdir(path);
        let _ = std::fs::remove_dir(&tools);
        return Err(error.into());
    }
    Ok(())
}

/// Where the tools' own mount of the working directory at `path` is
/// ([`mount_workdir`]): beside it in the work root, bound by bubblewrap at
/// `path` inside the sandbox.
pub fn tools_view(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(".tools");
    path.with_file_name(name)
}

/// Unmounts what [`mount_workdir`] mounted (lazily: nothing holds it once
/// its tools are gone) and removes the tools' mount point; the caller
/// removes `path`.
pub fn unmount_workdir(path: &Path) -> std::io::Result<()> {
    use rustix::mount::{unmount, UnmountFlags};
    let tools = tools_view(path);
    let runners = unmount(path, UnmountFlags::DETACH);
    let unmounted = unmount(&tools, UnmountFlags::DETACH);
    let _ = std::fs::remove_dir(&tools);
    runners.and(unmounted)?;
    Ok(())
}

/// Removes the working directories in `root` that a dead runner left:
/// one killed between two of an attempt's tools (`kill -9`, a lost host)
/// had no supervisor left to remove it, and its tmpfs stays mounted with
/// the tenant's files in memory. A directory is its tools' uid's (the
/// tmpfs's owner) while a process holds that uid ([`Identity`]); one
/// whose uid nobody holds is stale, and is unmounted and removed. What
/// it removed, by name.
pub fn sweep_stale(root: &Path, settings: &SandboxSettings) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let pool = settings.uid_base..settings.uid_base.saturating_add(settings.uid_count);
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        // Either mount point names the directory; the runner's own
        // (root's, before its tmpfs is mounted) is never another's.
        let workdir = match name.strip_suffix(".tools") {
            Some(base) => path.with_file_name(base),
            None => path.clone(),
        };
        let owner = std::fs::symlink_metadata(&path)
            .ok()
            .filter(|metadata| metadata.is_dir())
            .map(|metadata| metadata.uid());
        let Some(uid) = owner.filter(|uid| pool.contains(uid)) else {
            continue;
        };
        // Held while the directory is cleaned: no attempt takes the uid
        // meanwhile.
        let Ok(Some(_held)) = Identity::take(settings, uid) else {
            continue;
        };
        let _ = unmount_workdir(&workdir);
        match std::fs::remove_dir_all(&workdir) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!(path = %workdir.display(), %error, "a dead runner's working directory not removed");
            }
            _ => removed.push(workdir),
        }
    }
    removed
}

/// Whether the filesystem at `path` has no block left for an unprivileged
/// writer.
pub fn is_full(path: &Path) -> bool {
    rustix::fs::statvfs(path).is_ok_and(|stat| stat.f_bavail == 0 || stat.f_favail == 0)
}

/// Gives everything under `root` (itself included) to `uid`, never
/// following a link: each directory is opened by its handle, relative to
/// its parent's, with `O_NOFOLLOW`, so a tool that swaps a directory for a
/// link meanwhile (another attempt's, in a shared writable path) makes
/// this fail, not chown what the link names. Refuses trees deeper than
/// [`MAX_GIVE_DEPTH`].
pub fn give(root: &Path, uid: u32) -> std::io::Result<()> {
    match rustix::fs::open(root, dir_flags(), rustix::fs::Mode::empty()) {
        Ok(dir) => {
            let ids = owner(uid);
            rustix::fs::fchown(&dir, ids.0, ids.1)?;
            give_entries(&dir, uid, 0)
        }
        // A file or a link: changed itself, never what it names.
        Err(rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP) => {
            std::os::unix::fs::lchown(root, Some(uid), Some(uid))
        }
        Err(error) => Err(error.into()),
    }
}

/// How deep [`give`] goes: a tool can make a chain of directories far
/// deeper than any real tree, and the walk must not exhaust the stack.
pub const MAX_GIVE_DEPTH: usize = 128;

fn give_entries(dir: &rustix::fd::OwnedFd, uid: u32, depth: usize) -> std::io::Result<()> {
    use rustix::fs::{AtFlags, Mode};
    if depth >= MAX_GIVE_DEPTH {
        return Err(std::io::Error::other(format!(
            "a directory tree deeper than {MAX_GIVE_DEPTH} levels"
        )));
    }
    let ids = owner(uid);
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        match rustix::fs::openat(dir, name, dir_flags(), Mode::empty()) {
            Ok(child) => {
                rustix::fs::fchown(&child, ids.0, ids.1)?;
                give_entries(&child, uid, depth + 1)?;
            }
            // A file or a link: changed itself, never what it names.
            Err(rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP) => {
                rustix::fs::chownat(dir, name, ids.0, ids.1, AtFlags::SYMLINK_NOFOLLOW)?
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

/// A directory opened to walk it: never through a link, never blocking
/// (a FIFO), never inherited.
fn dir_flags() -> rustix::fs::OFlags {
    use rustix::fs::OFlags;
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC
}

fn owner(uid: u32) -> (Option<rustix::fs::Uid>, Option<rustix::fs::Gid>) {
    (
        Some(rustix::fs::Uid::from_raw(uid)),
        Some(rustix::fs::Gid::from_raw(uid)),
    )
}

/// The `/etc` files a tool may read: name resolution, certificates, the
/// dynamic linker's cache, Debian's alternatives and Python's site
/// configuration, the ssh client's defaults. Nothing else of `/etc`.
const ETC: &[&str] = &[
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/localtime",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/pki",
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/mime.types",
    "/etc/os-release",
    "/etc/debian_version",
    "/etc/python3",
    "/etc/python3.11",
    "/etc/python3.12",
    "/etc/python3.13",
    "/etc/ssh/ssh_config",
    "/etc/ssh/ssh_config.d",
];

/// The top-level directories that are links into `/usr` on a merged-`/usr`
/// system, or directories of their own elsewhere.
const SYSTEM: &[&str] = &["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"];

/// What one sandboxed run sees of the host besides the system.
#[derive(Clone, Debug, Default)]
pub struct View {
    /// Host paths seen read-only, at the same path.
    pub read_only: Vec<PathBuf>,
    /// Host paths seen read-write, at the same path (given to the uid
    /// before the run).
    pub writable: Vec<PathBuf>,
    /// No network at all: a namespace of its own with nothing but
    /// loopback.
    pub offline: bool,
    /// Where the tool starts, if not its working directory.
    pub directory: Option<PathBuf>,
    /// All the tool may reach besides the host's name servers, with the
    /// network guarded: it runs the tenant's code (docs/SECURITY.md,
    /// "Network"). `None`: what every tool reaches.
    pub reach: Option<Vec<egress::Destination>>,
}

/// The files of the sandbox's own `/etc/passwd` and `/etc/group`, kept in
/// the working directory: the tool's uid has a name and a home (the ssh
/// client refuses to run for a uid it cannot look up). Written before
/// every tool of the attempt, after the attempt's earlier tools ran there:
/// see [`write_fresh`].
pub fn write_accounts(workdir: &Path, uid: u32) -> std::io::Result<(PathBuf, PathBuf)> {
    let dir = workdir.join(".execplane");
    std::fs::create_dir_all(&dir)?;
    let passwd = dir.join("passwd");
    let group = dir.join("group");
    write_fresh(
        &passwd,
        format!(
            "root:x:0:0:root:/root:/usr/sbin/nologin\nexecplane:x:{uid}:{uid}:execplane tool:{}:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
            workdir.display()
        )
        .as_bytes(),
    )?;
    write_fresh(
        &group,
        format!("root:x:0:\nexecplane:x:{uid}:\nnogroup:x:65534:\n").as_bytes(),
    )?;
    std::fs::create_dir_all(workdir.join(".execplane/tmp"))?;
    Ok((passwd, group))
}

/// Writes `bytes` to `path` as a new file, after removing whatever is at
/// that name, for the runner writing where a tool wrote before it: never
/// into a FIFO (which would hold the runner until a reader came) and never
/// through a link, even one planted between the removal and the creation
/// (`O_EXCL` refuses any entry). The working directory's tmpfs follows no
/// link for the runner either ([`mount_workdir`]).
pub fn write_fresh(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)?
        .write_all(bytes)
}

/// Reads `path` if it is a regular file of at most `limit` bytes, for the
/// runner reading what a tool wrote: a link is not followed, and a FIFO or
/// a device is refused rather than waited on.
pub fn read_regular(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32)
        .open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    if metadata.len() > limit {
        return Err(std::io::Error::other(format!(
            "{} bytes; at most {limit}",
            metadata.len()
        )));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or(0));
    file.take(limit).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The size of a tool's /dev/shm, in bytes (64 MiB).
const DEV_SHM_BYTES: &str = "67108864";

/// bubblewrap's arguments for a tool in `workdir` seeing `view`, up to
/// and including the `--` before the program.
pub fn bwrap_args(workdir: &Path, accounts: &(PathBuf, PathBuf), view: &View) -> Vec<OsString> {
    let mut args: Vec<OsString> = Vec::new();
    let mut push = |items: &[&std::ffi::OsStr]| args.extend(items.iter().map(|item| item.into()));
    push(&[
        "--unshare-user".as_ref(),
        "--unshare-pid".as_ref(),
        "--unshare-ipc".as_ref(),
        "--unshare-uts".as_ref(),
        "--unshare-cgroup-try".as_ref(),
        "--disable-userns".as_ref(),
        "--die-with-parent".as_ref(),
        "--hostname".as_ref(),
        "execplane-tool".as_ref(),
        "--ro-bind".as_ref(),
        "/usr".as_ref(),
        "/usr".as_ref(),
    ]);
    if view.offline {
        push(&["--unshare-net".as_ref()]);
    }
    for dir in SYSTEM {
        match std::fs::read_link(dir) {
            Ok(target) => push(&["--symlink".as_ref(), target.as_os_str(), dir.as_ref()]),
            Err(_) if Path::new(dir).is_dir() => {
                push(&["--ro-bind".as_ref(), dir.as_ref(), dir.as_ref()])
            }
            Err(_) => {}
        }
    }
    for file in ETC {
        push(&["--ro-bind-try".as_ref(), file.as_ref(), file.as_ref()]);
    }
    push(&[
        "--ro-bind".as_ref(),
        accounts.0.as_os_str(),
        "/etc/passwd".as_ref(),
        "--ro-bind".as_ref(),
        accounts.1.as_os_str(),
        "/etc/group".as_ref(),
        "--proc".as_ref(),
        "/proc".as_ref(),
        "--dev".as_ref(),
        "/dev".as_ref(),
        // /dev is a tmpfs of bubblewrap's with no size: read-only but for
        // a bounded /dev/shm (POSIX semaphores, which ansible's workers
        // take), or a tool could write past its disk limit there. Its
        // /dev/pts too (a remount is not recursive): no tool here asks
        // for a terminal, and each it opened would take one of the
        // host's, shared by every pty namespace.
        "--perms".as_ref(),
        "01777".as_ref(),
        "--size".as_ref(),
        DEV_SHM_BYTES.as_ref(),
        "--tmpfs".as_ref(),
        "/dev/shm".as_ref(),
        "--remount-ro".as_ref(),
        "/dev/pts".as_ref(),
        "--remount-ro".as_ref(),
        "/dev".as_ref(),
    ]);
    // /tmp first: the working directory may itself be under /tmp. Its
    // source is found through the runner's mount, which follows no link a
    // tool left (a /tmp of the host's own would escape the disk limit); the
    // working directory, through the tools' own (see `mount_workdir`).
    let tmp = workdir.join(".execplane/tmp");
    let tools = tools_view(workdir);
    push(&[
        "--bind".as_ref(),
        tmp.as_os_str(),
        "/tmp".as_ref(),
        "--bind".as_ref(),
        tmp.as_os_str(),
        "/var/tmp".as_ref(),
        "--bind".as_ref(),
        tools.as_os_str(),
        workdir.as_os_str(),
    ]);
    for path in &view.read_only {
        push(&["--ro-bind".as_ref(), path.as_os_str(), path.as_os_str()]);
    }
    for path in &view.writable {
        push(&["--bind".as_ref(), path.as_os_str(), path.as_os_str()]);
    }
    // The calls it may not make: the supervisor loads the filter into a
    // descriptor of its own and names it here.
    if seccomp::program().is_some() {
        push(&["--seccomp".as_ref(), seccomp::FD_ARG.as_ref()]);
    }
    // The sandbox's own root (where /etc's entries were made) read-only
    // too: a tool writes its working directory and nothing else.
    push(&[
        "--remount-ro".as_ref(),
        "/".as_ref(),
        "--chdir".as_ref(),
        view.directory.as_deref().unwrap_or(workdir).as_os_str(),
        "--".as_ref(),
    ]);
    args
}

/// The rlimits, set by `prlimit` on itself before it becomes bubblewrap:
/// every process of the tool inherits them.
pub fn prlimit_args(limits: &Limits) -> Vec<OsString> {
    vec![
        // SIGXCPU at the soft limit, SIGKILL five seconds later.
        format!("--cpu={}:{}", limits.cpu_seconds, limits.cpu_seconds + 5).into(),
        format!("--nofile={}", limits.open_files).into(),
        "--core=0".into(),
        "--".into(),
    ]
}

/// The memory, pids and cpu cgroups (v1) of one tool run, under this
/// process's own (`<own>/execplane/<name>`); removed when dropped.
#[derive(Debug)]
pub struct Cgroups {
    memory: PathBuf,
    pids: PathBuf,
    cpu: PathBuf,
    limits: Limits,
    /// Set when a process of the run outlived its end: the attempt's uid
    /// ([`Identity::lingering`]) is then kept out of the pool.
    lingering: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// The period of the tools' CPU quota (the kernel's default).
const CPU_PERIOD_MICROS: u64 = 100_000;

/// What a cpu cgroup may use, as a quota of [`CPU_PERIOD_MICROS`]; `None`
/// when it has no quota.
fn cpu_ceiling(cgroup: &Path) -> Option<u64> {
    let read = |name: &str| -> Option<i64> {
        std::fs::read_to_string(cgroup.join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let (quota, period) = (read("cpu.cfs_quota_us")?, read("cpu.cfs_period_us")?);
    let (quota, period) = (u64::try_from(quota).ok()?, u64::try_from(period).ok()?);
    (period > 0).then(|| (quota * CPU_PERIOD_MICROS / period).max(1_000))
}

const CGROUP_ROOT: &str = "/sys/fs/cgroup";

impl Cgroups {
    pub fn create(name: &str, limits: &Limits) -> std::io::Result<Self> {
        if Path::new(CGROUP_ROOT).join("cgroup.controllers").exists() {
            return Err(std::io::Error::other(
                "this host has cgroup v2 only; the sandbox's limits need the cgroup v1 memory, pids and cpu controllers",
            ));
        }
        let [memory, pids, cpu] = ["memory", "pids", "cpu"].map(|controller| {
            Ok::<_, std::io::Error>(Self::own(controller)?.join("execplane").join(name))
        });
        let cgroups = Self {
            memory: memory?,
            pids: pids?,
            cpu: cpu?,
            limits: *limits,
            lingering: None,
        };
        for dir in cgroups.dirs() {
            std::fs::create_dir_all(dir).map_err(|error| {
                std::io::Error::new(error.kind(), format!("{}: {error}", dir.display()))
            })?;
        }
        let memory_limit = limits.memory_bytes.to_string();
        std::fs::write(cgroups.memory.join("memory.limit_in_bytes"), &memory_limit)?;
        // With swap accounting, swap counts too (or the limit only moves
        // the tool to swap).
        let memsw = cgroups.memory.join("memory.memsw.limit_in_bytes");
        if memsw.exists() {
            std::fs::write(memsw, &memory_limit)?;
        }
        std::fs::write(cgroups.pids.join("pids.max"), limits.pids.to_string())?;
        // A quota for the tool's processes together: however many it
        // starts, each in a session of its own, they share it, and the
        // runner's threads and the other attempts keep the rest.
        std::fs::write(
            cgroups.cpu.join("cpu.cfs_period_us"),
            CPU_PERIOD_MICROS.to_string(),
        )?;
        // Never more than the runner's own cgroup may use (a child's quota
        // over its parent's is refused: a runner in a pod limited to half a
        // CPU would refuse to start).
        let quota = limits.cpu_percent * CPU_PERIOD_MICROS / 100;
        let quota = Self::own("cpu")
            .ok()
            .and_then(|own| cpu_ceiling(&own))
            .map_or(quota, |ceiling| quota.min(ceiling));
        std::fs::write(cgroups.cpu.join("cpu.cfs_quota_us"), quota.to_string())?;
        Ok(cgroups)
    }

    /// The directories the supervisor joins before it starts the tool.
    /// Marks `lingering` when a process of the run outlives it.
    pub fn watched_by(mut self, lingering: std::sync::Arc<std::sync::atomic::AtomicBool>) -> Self {
        self.lingering = Some(lingering);
        self
    }

    pub fn dirs(&self) -> [&Path; 3] {
        [&self.memory, &self.pids, &self.cpu]
    }

    /// This process's own cgroup of `controller`, from /proc/self/cgroup.
    fn own(controller: &str) -> std::io::Result<PathBuf> {
        let table = std::fs::read_to_string("/proc/self/cgroup")?;
        let path = table
            .lines()
            .filter_map(|line| {
                // `id:controllers:path`; a path may hold `:` itself.
                let (_, rest) = line.split_once(':')?;
                rest.split_once(':')
            })
            .find(|(controllers, _)| controllers.split(',').any(|name| name == controller))
            .map(|(_, path)| path.trim_start_matches('/').to_owned())
            .ok_or_else(|| {
                std::io::Error::other(format!(
                    "no cgroup v1 `{controller}` controller in /proc/self/cgroup"
                ))
            })?;
        Ok(Path::new(CGROUP_ROOT).join(controller).join(path))
    }

    /// The limit the tool reached, if any.
    pub fn hit(&self) -> Option<LimitHit> {
        let count = |file: PathBuf, key: &str| -> u64 {
            std::fs::read_to_string(file)
                .ok()
                .and_then(|text| {
                    text.lines()
                        .find_map(|line| line.strip_prefix(key)?.trim().parse().ok())
                })
                .unwrap_or(0)
        };
        if count(self.memory.join("memory.oom_control"), "oom_kill ") > 0 {
            return Some(LimitHit::Memory(self.limits.memory_bytes));
        }
        if count(self.pids.join("pids.events"), "max ") > 0 {
            return Some(LimitHit::Pids(self.limits.pids));
        }
        None
    }
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        // Empty once the supervisor has killed the tool: at once after a
        // run, within moments when the run was dropped (the supervisor
        // kills when its orders pipe closes). Whatever is left after a
        // second is killed here, before the attempt's uid and its network
        // hold are given up: no process of the tool outlives them.
        let mut tries = 0;
        while self.dirs().iter().any(|dir| has_tasks(dir)) {
            if tries == 200 {
                // Stuck (in the kernel, say): its uid must not be anyone
                // else's while it lives.
                tracing::error!(
                    cgroup = %self.pids.display(),
                    "a tool's process outlived its run and its kill; its sandbox uid is kept out of the pool"
                );
                if let Some(lingering) = &self.lingering {
                    lingering.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                return;
            }
            if tries >= 100 {
                for dir in self.dirs() {
                    kill_tasks(dir);
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            tries += 1;
        }
        for dir in self.dirs() {
            // A few tries for the kernel to finish its bookkeeping.
            for _ in 0..20 {
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => break,
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
                }
            }
        }
    }
}

/// Whether the cgroup at `dir` has a process in it (or cannot say).
fn has_tasks(dir: &Path) -> bool {
    match std::fs::read_to_string(dir.join("cgroup.procs")) {
        Ok(procs) => !procs.trim().is_empty(),
        Err(error) => error.kind() != std::io::ErrorKind::NotFound,
    }
}

/// SIGKILLs every process in the cgroup at `dir`: each through a pidfd,
/// once the process it holds is seen in the cgroup, so a pid the kernel
/// gave to another process meanwhile is never signalled.
fn kill_tasks(dir: &Path) {
    use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};
    let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) else {
        return;
    };
    let Some(name) = dir.file_name().and_then(|name| name.to_str()) else {
        return;
    };
    let suffix = format!("/{name}");
    for pid in procs
        .lines()
        .filter_map(|pid| pid.trim().parse::<i32>().ok())
    {
        let Some(pid) = Pid::from_raw(pid) else {
            continue;
        };
        let Ok(pidfd) = pidfd_open(pid, PidfdFlags::empty()) else {
            continue;
        };
        let inside = std::fs::read_to_string(format!("/proc/{}/cgroup", pid.as_raw_nonzero()))
            .is_ok_and(|cgroups| cgroups.lines().any(|line| line.ends_with(&suffix)));
        if inside {
            let _ = pidfd_send_signal(&pidfd, Signal::KILL);
        }
    }
}

/// Whether the host has swap that the tools' memory cgroups do not count.
fn swap_uncounted() -> bool {
    let swaps = std::fs::read_to_string("/proc/meminfo").is_ok_and(|info| {
        info.lines()
            .find_map(|line| line.strip_prefix("SwapTotal:"))
            .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .is_some_and(|kib| kib > 0)
    });
    let counted =
        Cgroups::own("memory").is_ok_and(|own| own.join("memory.memsw.limit_in_bytes").exists());
    swaps && !counted
}

/// Checks that the sandbox can be built here, by running `/bin/true` in
/// it, then guards the tools' network and checks that a sandboxed process
/// reaches none of the platform's endpoints: a runner that cannot do all
/// that refuses to start, unless the operator turned the sandbox off
/// (`EXECPLANE_SANDBOX=off`) or left the network open
/// (`EXECPLANE_SANDBOX_NETWORK=host`), which is logged.
pub async fn check(tools: &super::tool::ToolSettings) -> Result<(), String> {
    let sandbox = &tools.sandbox;
    if !sandbox.enabled {
        tracing::warn!(
            "tools run unsandboxed (EXECPLANE_SANDBOX=off): as this runner's own user, able to read every attempt's files and the runner's credentials; run this only on a host that serves one tenant"
        );
        return Ok(());
    }
    for stale in sweep_stale(&tools.work_root, sandbox) {
        tracing::warn!(path = %stale.display(), "removed a working directory a dead runner left mounted");
    }
    if seccomp::program().is_none() {
        tracing::warn!(
            "no system call filter for this architecture: tools may open sockets of any family (vsock among them) and use io_uring, eBPF and the kernel's keyrings"
        );
    }
    if swap_uncounted() {
        tracing::warn!(
            "this host swaps and its memory cgroups do not count swap (no memory.memsw): a tool's memory limit bounds what it holds in memory, not what it pushes to swap; boot with swapaccount=1, or turn swap off"
        );
    }
    let fix = "install bubblewrap, run the runner as root on a host with user namespaces and the cgroup v1 memory, pids and cpu controllers, or set EXECPLANE_SANDBOX=off for a host that serves one tenant";
    let (exit, said) = run_checked(tools, super::tool::ToolCommand::new("/bin/true"))
        .await
        .map_err(|error| format!("cannot build the tool sandbox: {error}; {fix}"))?;
    if !exit.success() {
        return Err(format!(
            "cannot build the tool sandbox: /bin/true in it ended {:?}/{:?}: {said}; {fix}",
            exit.code, exit.signal
        ));
    }
    let Network::Guarded { deny, nft } = &sandbox.network else {
        tracing::warn!(
            "tools share the host's whole network (EXECPLANE_SANDBOX_NETWORK=host): they reach the broker, the database and the secret store as the runner does"
        );
        tracing::info!(
            uid_base = sandbox.uid_base,
            "tools run sandboxed: own uid, namespaces and limits"
        );
        return Ok(());
    };
    let fix = "install nftables (the runner, as root, installs a table of its own), or set EXECPLANE_SANDBOX_NETWORK=host for a host whose firewall already keeps the sandbox's uids off these endpoints";
    let rules = egress::Rules::resolve(deny)
        .await
        .map_err(|error| format!("cannot guard the tools' network: {error}"))?;
    let last = sandbox
        .uid_base
        .saturating_add(sandbox.uid_count.saturating_sub(1));
    let table = egress::table_name(sandbox.uid_base);
    egress::install(
        nft,
        sandbox.uid_base,
        &sandbox.lock_dir,
        &rules.script(&table, sandbox.uid_base, last),
    )
    .await
    .map_err(|error| format!("cannot guard the tools' network: {error}; {fix}"))?;
    let probes = rules.probes();
    let reach = super::tool::ToolCommand::new(&tools.shim)
        .arg("sandbox-reach")
        .args(probes.iter().map(ToString::to_string));
    let (exit, said) = run_checked(tools, reach)
        .await
        .map_err(|error| format!("cannot check the tools' network: {error}"))?;
    if exit.code == Some(1) && !exit.stdout.is_empty() {
        let reached = String::from_utf8_lossy(&exit.stdout)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(", ");
        return Err(format!(
            "the tools' network is not guarded: a sandboxed process reached {reached}; {fix}"
        ));
    }
    if !exit.success() {
        return Err(format!(
            "cannot check the tools' network: the probe ended {:?}/{:?}: {said}",
            exit.code, exit.signal
        ));
    }
    tracing::info!(
        uid_base = sandbox.uid_base,
        table = %table,
        refused = probes.len(),
        "tools run sandboxed: own uid, namespaces and limits; the platform's endpoints and the deny list out of reach"
    );
    Ok(())
}

/// Runs `command` in a sandbox of `tools`: its exit and what it said
/// (stderr and the log), or why it could not be run.
async fn run_checked(
    tools: &super::tool::ToolSettings,
    command: super::tool::ToolCommand,
) -> Result<(super::tool::ToolExit, String), String> {
    let (progress, _) = tokio::sync::mpsc::unbounded_channel();
    let (log, mut logged) = tokio::sync::mpsc::unbounded_channel();
    let context = super::ExecutionContext::new(Default::default(), progress, log)
        .with_tools(
            std::sync::Arc::new(tools.clone()),
            std::time::Duration::from_secs(1),
        )
        .with_deadline(tokio::time::Instant::now() + std::time::Duration::from_secs(60));
    let workdir = super::tool::Workdir::for_tools(tools).map_err(|error| error.to_string())?;
    let command = command.base_env(&workdir).capture(4096);
    let exit = super::tool::run(&context, &workdir, command)
        .await
        .map_err(|error| error.to_string())?;
    let mut said = String::from_utf8_lossy(&exit.stderr).trim().to_owned();
    while let Ok((_, text)) = logged.try_recv() {
        said.push_str(&text);
    }
    let said = crate::contract::limits::tail(said.trim(), 1024).to_owned();
    Ok((exit, said))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn give_changes_the_tree_and_never_what_a_link_names() {
        use std::os::unix::fs::MetadataExt;
        let root =
            std::env::temp_dir().join(format!("execplane-give-{}", uuid::Uuid::new_v4().simple()));
        let outside = root.with_extension("outside");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/file"), "x").unwrap();
        std::fs::write(&outside, "host file").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("a/link")).unwrap();
        std::os::unix::fs::symlink(std::env::temp_dir(), root.join("dirlink")).unwrap();
        let uid = 1_900_000_777;
        let before = std::fs::metadata(&outside).unwrap().uid();
        let tmp_owner = std::fs::metadata(std::env::temp_dir()).unwrap().uid();
        give(&root, uid).unwrap();
        for path in ["", "a", "a/b", "a/b/file", "a/link", "dirlink"] {
            let owner = std::fs::symlink_metadata(root.join(path)).unwrap().uid();
            assert_eq!(owner, uid, "{path}");
        }
        assert_eq!(std::fs::metadata(&outside).unwrap().uid(), before);
        assert_eq!(
            std::fs::metadata(std::env::temp_dir()).unwrap().uid(),
            tmp_owner
        );
        // A chain deeper than the walk goes is refused, not followed to
        // the end of the stack.
        let mut deep = root.join("deep");
        for _ in 0..MAX_GIVE_DEPTH + 1 {
            deep = deep.join("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        assert!(give(&root, uid).is_err());
        std::fs::remove_dir_all(&root).unwrap();
        std::fs::remove_file(&outside).unwrap();
    }

    #[test]
    fn the_view_is_the_system_read_only_and_the_workdir_read_write() {
        let workdir = Path::new("/w/abc");
        let accounts = (
            PathBuf::from("/w/abc/.execplane/passwd"),
            PathBuf::from("/w/abc/.execplane/group"),
        );
        let mut view = View {
            read_only: vec![PathBuf::from("/opt/tool")],
            writable: vec![PathBuf::from("/var/state/x")],
            offline: false,
            directory: None,
            reach: None,
        };
        let args: Vec<String> = bwrap_args(workdir, &accounts, &view)
            .into_iter()
            .map(|arg| arg.into_string().unwrap())
            .collect();
        let joined = args.join(" ");
        for expected in [
            "--unshare-user --unshare-pid",
            "--disable-userns --die-with-parent",
            "--ro-bind /usr /usr",
            "--ro-bind /w/abc/.execplane/passwd /etc/passwd",
            "--bind /w/abc/.execplane/tmp /tmp",
            "--bind /w/abc.tools /w/abc",
            "--ro-bind /opt/tool /opt/tool",
            "--bind /var/state/x /var/state/x",
            "--chdir /w/abc --",
        ] {
            assert!(joined.contains(expected), "{expected} not in {joined}");
        }
        // /etc is never bound whole, nor the host's /tmp or /root.
        assert!(!args.iter().any(|arg| arg == "/etc" || arg == "/root"));
        assert!(joined.find("/tmp").unwrap() < joined.find("--bind /w/abc.tools /w/abc").unwrap());
        assert_eq!(args.last().unwrap(), "--");
        // The host's network unless the tool needs none.
        assert!(!args.iter().any(|arg| arg == "--unshare-net"));
        view.offline = true;
        let offline = bwrap_args(workdir, &accounts, &view);
        assert!(offline.iter().any(|arg| arg == "--unshare-net"));
        // Started where the runner says.
        view.directory = Some(PathBuf::from("/w/abc/controller"));
        let elsewhere = bwrap_args(workdir, &accounts, &view)
            .into_iter()
            .map(|arg| arg.into_string().unwrap())
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            elsewhere.contains("--chdir /w/abc/controller --"),
            "{elsewhere}"
        );
    }

    #[test]
    fn rlimits_kill_at_the_cpu_bound_and_write_no_core() {
        let args: Vec<String> = prlimit_args(&Limits::default())
            .into_iter()
            .map(|arg| arg.into_string().unwrap())
            .collect();
        assert_eq!(args, ["--cpu=3600:3605", "--nofile=4096", "--core=0", "--"]);
    }

    #[test]
    fn a_uid_is_held_by_one_holder_at_a_time() {
        let settings = SandboxSettings {
            lock_dir: std::env::temp_dir().join(format!("execplane-uids-{}", uuid::Uuid::new_v4())),
            uid_count: 2,
            ..SandboxSettings::default()
        };
        let first = Identity::allocate(&settings).unwrap();
        let second = Identity::allocate(&settings).unwrap();
        assert_ne!(first.uid(), second.uid());
        let refused = Identity::allocate(&settings).unwrap_err();
        assert!(
            refused.to_string().contains("all 2 sandbox uids"),
            "{refused}"
        );
        let freed = first.uid();
        drop(first);
        assert_eq!(Identity::allocate(&settings).unwrap().uid(), freed);
        std::fs::remove_dir_all(&settings.lock_dir).unwrap();
    }

    #[test]
    fn limit_messages_name_the_bound_and_the_setting() {
        assert_eq!(
            LimitHit::Memory(64 * MIB).to_string(),
            "the tool went over its memory limit of 64 MiB and was killed (EXECPLANE_SANDBOX_MEMORY_MIB)"
        );
        assert!(LimitHit::Disk(8 * MIB).to_string().contains("8 MiB"));
        assert!(LimitHit::Pids(10).to_string().contains("10 processes"));
    }
}
