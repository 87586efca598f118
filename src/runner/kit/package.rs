//! An ansible package: a tar archive (gzipped or not) of playbooks and
//! roles, fetched by digest and unpacked entry by entry into the attempt's
//! working directory. Only regular files and directories are unpacked, at
//! relative paths without `..`; a link, a device or an absolute path
//! refuses the whole package, so nothing in it can point outside it.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// The most entries a package may hold.
pub const MAX_ENTRIES: usize = 10_000;
/// The most bytes its files may hold together, unpacked.
pub const MAX_UNPACKED_BYTES: u64 = 256 * 1024 * 1024;
/// The longest path of an entry, and the most directories deep: every
/// directory a package makes is an inode of the attempt's tmpfs, which
/// its size limit does not count, so those are bounded too (at most
/// [`MAX_ENTRIES`] directories in all).
pub const MAX_PATH_BYTES: usize = 1024;
pub const MAX_DEPTH: usize = 32;

/// Fetches the package `reference` from the attempt's artifact storage
/// (checked against its digest, held in memory, never written whole) and
/// unpacks it into `root`. The failure names `inputs.package`: the
/// storage's category, or `contract` for a package that cannot be
/// unpacked.
pub async fn fetch_and_unpack(
    context: &crate::runner::ExecutionContext,
    reference: &crate::artifacts::inputs::InputRef,
    root: &Path,
) -> Result<(), crate::runner::Failure> {
    use crate::contract::FailureCategory;
    use crate::runner::Failure;
    // Approved by digest in the tenant's policy (the SDK checked it).
    let archive = context
        .fetch_approved(reference)
        .await
        .map_err(|error| Failure::new(error.category(), format!("inputs.package: {error}")))?;
    // Seconds of inflating and writing: off the runtime's threads.
    let target = root.to_owned();
    tokio::task::spawn_blocking(move || unpack(&archive, &target))
        .await
        .map_err(|error| Failure::infrastructure(format!("unpacking the package: {error}")))?
        .map_err(|problem| {
            Failure::new(
                FailureCategory::Contract,
                format!("inputs.package: {problem}"),
            )
        })
}

/// The largest GNU long name or link, or pax extended header, of an entry:
/// the tar reader holds one whole in memory before it hands out the entry.
pub const MAX_EXTENDED_HEADER: u64 = 64 * 1024;

/// The most a package's archive may be once inflated: its entries'
/// bodies and room for their headers, padding and extended headers. A
/// header's declared size is not all the reader skips (a pax `size`
/// record overrides it), so the stream itself is bounded too.
pub const MAX_INFLATED_BYTES: u64 = MAX_UNPACKED_BYTES + 64 * 1024 * 1024;

fn reader(archive: &[u8], limit: u64) -> impl Read + '_ {
    let inner: Box<dyn Read + '_> = if archive.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::read::GzDecoder::new(archive))
    } else {
        Box::new(archive)
    };
    Bounded {
        inner,
        left: limit,
        limit,
    }
}

/// A stream that fails, naming its bound, past `limit` bytes.
struct Bounded<R> {
    inner: R,
    left: u64,
    limit: u64,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            // One byte more is the proof it goes on.
            return match self.inner.read(&mut [0])? {
                0 => Ok(0),
                _ => Err(std::io::Error::other(format!(
                    "more than {} bytes once inflated",
                    self.limit
                ))),
            };
        }
        let most = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let read = self.inner.read(&mut buf[..most])?;
        self.left -= read as u64;
        Ok(read)
    }
}

/// Reads the archive's headers as they are written (long names and pax
/// headers as entries of their own, their bodies skipped, never held) and
/// refuses one that would make the reader hold more than
/// [`MAX_EXTENDED_HEADER`], more entries than a package may have, or
/// bodies (of any kind of entry: a directory's is skipped, but still
/// inflated) of more than [`MAX_UNPACKED_BYTES`] in all, before it reads
/// past the header that declares them.
fn headers_bounded(archive: &[u8], limit: u64) -> Result<(), String> {
    let mut tar = tar::Archive::new(reader(archive, limit));
    let entries = tar
        .entries()
        .map_err(|error| format!("not a tar archive: {error}"))?
        .raw(true);
    let mut declared = 0_u64;
    for (index, entry) in entries.enumerate() {
        let mut entry = entry.map_err(|error| format!("a damaged entry: {error}"))?;
        declared = declared.saturating_add(entry.size());
        if declared > MAX_UNPACKED_BYTES {
            return Err(format!(
                "entry {index}: more than {MAX_UNPACKED_BYTES} bytes in the archive's entries"
            ));
        }
        // Each entry may bring a long name, a long link and a pax header.
        if index >= MAX_ENTRIES * 4 {
            return Err(format!("more than {MAX_ENTRIES} entries"));
        }
        let kind = entry.header().entry_type();
        let extended = kind.is_gnu_longname()
            || kind.is_gnu_longlink()
            || kind.is_pax_local_extensions()
            || kind.is_pax_global_extensions();
        if extended && entry.size() > MAX_EXTENDED_HEADER {
            return Err(format!(
                "entry {index}: an extended header (long name or pax) of {} bytes; at most {MAX_EXTENDED_HEADER}",
                entry.size()
            ));
        }
        // A pax `size` overrides the next header's when the archive is
        // unpacked, but not here, where headers are read raw: the two
        // passes would read two archives. An entry's own header says it
        // (pax writes one only past 8 GiB, far past a package's bound).
        if let Some(extensions) = entry
            .pax_extensions()
            .map_err(|error| format!("entry {index}: a damaged pax header: {error}"))?
        {
            for extension in extensions {
                let extension = extension
                    .map_err(|error| format!("entry {index}: a damaged pax header: {error}"))?;
                if extension.key_bytes() == b"size" {
                    return Err(format!(
                        "entry {index}: a pax `size` record; an entry of a package gives its size in its own header"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Unpacks `archive` into `root` (created). The problem, naming the entry,
/// when the package cannot be unpacked as it is.
fn unpack(archive: &[u8], root: &Path) -> Result<(), String> {
    unpack_within(archive, root, MAX_INFLATED_BYTES)
}

/// [`unpack`], with the archive's stream bounded at `limit` bytes.
fn unpack_within(archive: &[u8], root: &Path, limit: u64) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    headers_bounded(archive, limit)?;
    let mut tar = tar::Archive::new(reader(archive, limit));
    let make_dir = |path: &Path| {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(path)
            .map_err(|error| format!("cannot create {}: {error}", path.display()))
    };
    make_dir(root)?;
    let mut entries = 0;
    let mut total = 0_u64;
    let mut directories = std::collections::HashSet::new();
    let mut made = |dir: &Path| -> Result<(), String> {
        for ancestor in dir.ancestors().filter(|path| !path.as_os_str().is_empty()) {
            if !directories.insert(ancestor.to_owned()) {
                break;
            }
        }
        if directories.len() > MAX_ENTRIES {
            return Err(format!("more than {MAX_ENTRIES} directories"));
        }
        Ok(())
    };
    for entry in tar
        .entries()
        .map_err(|error| format!("not a tar archive: {error}"))?
    {
        let mut entry = entry.map_err(|error| format!("a damaged entry: {error}"))?;
        entries += 1;
        if entries > MAX_ENTRIES {
            return Err(format!("more than {MAX_ENTRIES} entries"));
        }
        let raw = entry
            .path()
            .map_err(|error| format!("an entry with an unreadable path: {error}"))?
            .into_owned();
        let shown = raw.display().to_string();
        let Some(relative) = clean_relative(&raw) else {
            return Err(format!(
                "`{shown}`: an absolute path or one with `..`; a package holds only relative paths"
            ));
        };
        if relative.as_os_str().len() > MAX_PATH_BYTES || relative.components().count() > MAX_DEPTH
        {
            return Err(format!(
                "`{}`: longer than {MAX_PATH_BYTES} bytes or deeper than {MAX_DEPTH} directories",
                shown.chars().take(200).collect::<String>()
            ));
        }
        let kind = entry.header().entry_type();
        // Metadata of the archive itself (`git archive` writes a pax
        // global header), not entries.
        if relative.as_os_str().is_empty()
            || kind.is_pax_global_extensions()
            || kind.is_pax_local_extensions()
        {
            continue;
        }
        let path = root.join(&relative);
        if kind.is_dir() {
            made(&relative)?;
            make_dir(&path)?;
            continue;
        }
        if !kind.is_file() {
            return Err(format!(
                "`{shown}`: a link or special file; a package holds only files and directories"
            ));
        }
        total += entry.size();
        if total > MAX_UNPACKED_BYTES {
            return Err(format!("more than {MAX_UNPACKED_BYTES} bytes unpacked"));
        }
        if let Some(parent) = relative.parent() {
            made(parent)?;
            make_dir(&root.join(parent))?;
        }
        let executable = entry.header().mode().unwrap_or(0) & 0o111 != 0;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if executable { 0o755 } else { 0o644 })
            .open(&path)
            .map_err(|error| format!("`{shown}`: cannot write it: {error}"))?;
        std::io::copy(&mut entry, &mut file)
            .map_err(|error| format!("`{shown}`: cannot unpack it: {error}"))?;
    }
    Ok(())
}

/// `path` without `.` segments when it is relative and free of `..`.
pub fn clean_relative(path: &Path) -> Option<PathBuf> {
    let mut clean = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => clean.push(part),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(clean)
}

/// A path a JobSpec names inside a package: relative, `/`-separated,
/// without `.`, `..` or empty segments, of printable characters.
pub fn is_package_path(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 1024
        && !text.starts_with('/')
        && !text.chars().any(char::is_control)
        && text
            .split('/')
            .all(|segment| !segment.is_empty() && segment != "." && segment != "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(entries: &[(&str, tar::EntryType, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, kind, body) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(*kind);
            header.set_size(body.len() as u64);
            header.set_mode(0o644);
            // `set_path` refuses `..`; a hostile archive is written raw.
            let name = header.as_old_mut().name.as_mut();
            name[..path.len()].copy_from_slice(path.as_bytes());
            if *kind == tar::EntryType::Symlink {
                header.set_link_name("/etc/passwd").unwrap();
            }
            header.set_cksum();
            builder.append(&header, *body).unwrap();
        }
        builder.into_inner().unwrap()
    }

    fn scratch() -> PathBuf {
        std::env::temp_dir().join(format!("execplane-package-{}", uuid::Uuid::new_v4()))
    }

    #[test]
    fn files_and_directories_unpack_and_nothing_else_does() {
        use tar::EntryType as E;
        let root = scratch();
        let good = archive(&[
            ("roles/", E::Directory, b""),
            ("./site.yml", E::Regular, b"- hosts: all\n"),
            ("roles/web/tasks/main.yml", E::Regular, b"[]\n"),
        ]);
        unpack(&good, &root).unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("site.yml")).unwrap(),
            "- hosts: all\n"
        );
        assert!(root.join("roles/web/tasks/main.yml").is_file());
        for (bad, says) in [
            (archive(&[("../escape.yml", E::Regular, b"x")]), "`..`"),
            (archive(&[("/etc/cron.d/x", E::Regular, b"x")]), "absolute"),
            (archive(&[("link.yml", E::Symlink, b"")]), "link"),
            (archive(&[("fifo", E::Fifo, b"")]), "special"),
        ] {
            let error = unpack(&bad, &scratch()).unwrap_err();
            assert!(error.contains(says), "{error}");
        }
        // A body the reader would inflate only to skip it (a directory's, a
        // link's) counts as a file's does: refused at its header, before a
        // byte of it is read (the body is not even there).
        for kind in [E::Directory, E::Symlink, E::Regular] {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(kind);
            header.set_size(MAX_UNPACKED_BYTES + 1);
            header.set_path("big").unwrap();
            header.set_cksum();
            let error = unpack(header.as_bytes(), &scratch()).unwrap_err();
            assert!(
                error.contains("bytes in the archive's entries"),
                "{kind:?}: {error}"
            );
        }
        // A pax `size` record would make the unpacking pass skip more
        // than the header pass (which reads headers raw) saw: refused.
        let mut builder = tar::Builder::new(Vec::new());
        let pax = b"19 size=2097152000\n";
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(E::XHeader);
        header.set_path("pax").unwrap();
        header.set_size(pax.len() as u64);
        header.set_cksum();
        builder.append(&header, &pax[..]).unwrap();
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(E::Directory);
        header.set_path("dir/").unwrap();
        header.set_size(0);
        header.set_cksum();
        builder.append(&header, &[][..]).unwrap();
        let mut bomb = builder.into_inner().unwrap();
        bomb.resize(bomb.len() + 4 * 1024 * 1024, 0);
        let error = unpack(&bomb, &scratch()).unwrap_err();
        assert!(error.contains("pax `size`"), "{error}");
        // And the stream is bounded as it inflates, whatever is skipped.
        let body = vec![0_u8; 2 * 1024 * 1024];
        let skipped = archive(&[
            ("dir/", E::Directory, &body),
            ("a.yml", E::Regular, b"[]\n"),
        ]);
        let error = unpack_within(&skipped, &scratch(), 1024 * 1024).unwrap_err();
        assert!(error.contains("once inflated"), "{error}");
        assert!(unpack(b"not an archive at all, just some bytes that are long enough to read a header from; tar headers are 512 bytes", &scratch()).is_err());
        std::fs::remove_dir_all(root).unwrap();
    }

    /// Every directory is an inode the tmpfs's size does not count: a
    /// path's depth and the directories all paths make are bounded.
    #[test]
    fn paths_are_held_to_a_depth_and_directories_to_a_count() {
        use tar::EntryType as E;
        let deep = format!("{}f.yml", "d/".repeat(MAX_DEPTH));
        let error = unpack(&archive(&[(&deep, E::Regular, b"[]\n")]), &scratch()).unwrap_err();
        assert!(error.contains("deeper than"), "{error}");
        // 400 files, each at the end of its own chain of 30 directories.
        let chains: Vec<String> = (0..400)
            .map(|index| format!("c{index}/{}f.yml", "d/".repeat(29)))
            .collect();
        let entries: Vec<(&str, E, &[u8])> = chains
            .iter()
            .map(|path| (path.as_str(), E::Regular, &b"[]\n"[..]))
            .collect();
        let root = scratch();
        let error = unpack(&archive(&entries), &root).unwrap_err();
        assert!(error.contains("directories"), "{error}");
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn a_long_name_or_pax_header_is_bounded_before_it_is_read() {
        use tar::EntryType as E;
        // A 64 MiB "long name": the tar reader would hold it whole.
        let huge = vec![b'a'; 64 * 1024 * 1024];
        for kind in [E::GNULongName, E::GNULongLink, E::XHeader, E::XGlobalHeader] {
            let mut entries = vec![("././@LongLink", kind, huge.as_slice())];
            entries.push(("site.yml", E::Regular, b"- hosts: all\n"));
            let error = unpack(&archive(&entries), &scratch()).unwrap_err();
            assert!(error.contains("extended header"), "{kind:?}: {error}");
        }
        // A long name of a plain size still unpacks.
        let root = scratch();
        let name = format!("{}/site.yml", "d".repeat(200));
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(3);
        header.set_mode(0o644);
        builder
            .append_data(&mut header, &name, &b"[]\n"[..])
            .unwrap();
        unpack(&builder.into_inner().unwrap(), &root).unwrap();
        assert!(root.join(&name).is_file());
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn package_paths_are_relative_and_plain() {
        for good in ["site.yml", "playbooks/web.yml", "a b/c.yml"] {
            assert!(is_package_path(good), "{good}");
        }
        for bad in [
            "",
            "/etc/x.yml",
            "../x.yml",
            "a/../b.yml",
            "./a.yml",
            "a//b.yml",
            "a\nb",
        ] {
            assert!(!is_package_path(bad), "{bad}");
        }
    }
}
