//! Creating files as a root tool should. Every file cg-trace writes (the report, folded
//! stacks, the flamegraph, the wrapped command's output under the live view, benchmark
//! figures) is made here, the same way:
//!
//! - with the identity of the user the run is for ([`Invoker`]): under sudo, the thread that
//!   creates, checks and renames has that user's file-system identity (fsuid, fsgid,
//!   groups), so cg-trace can create or replace only what the user could themselves, and the
//!   file is theirs from the start (nothing is chowned, by path or by descriptor);
//! - under a fresh name next to the final one, opened with `O_CREAT|O_EXCL|O_NOFOLLOW`, so
//!   that no link or file planted in advance is ever opened; mode 0600 while it is written;
//! - written and fsynced through the descriptor, then renamed onto the final name relative to
//!   the directory's descriptor (a reader never sees half a file);
//! - an existing final name is replaced only when it is a regular file owned by that user: a
//!   symbolic link, FIFO, device, directory, or another user's file is refused with a message.
//!
//! [`check`] does the same up to the rename (creating and removing a fresh name), so that
//! a run refuses an output it could not write before anything is traced.
//!
//! The directory itself is opened by path, following links: under sudo that lookup is the
//! user's own, so a link can only lead where the user may write anyway.

use std::{
    ffi::{CStr, CString, OsStr},
    fs::File,
    io::{self, Write},
    os::{
        fd::{AsRawFd, FromRawFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
    path::{Path, PathBuf},
};

use crate::privileges::{Invoker, describe_uid};

/// Errors creating an output file; each says which file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("{path}: not a file name")]
    NoFileName { path: String },
    #[error("{path}: cannot open its directory {dir} as {who}: {source}")]
    Directory {
        path: String,
        dir: String,
        who: String,
        #[source]
        source: io::Error,
    },
    #[error(
        "{path} exists and is {kind}: cg-trace only replaces regular files; remove it or choose \
         another name"
    )]
    NotRegular { path: String, kind: &'static str },
    #[error(
        "{path} exists and belongs to {owner}, not to {who}, for whom cg-trace writes: remove \
         it or choose another name"
    )]
    NotOwned {
        path: String,
        owner: String,
        who: String,
    },
    #[error("{path}: cannot create a file in {dir} as {who}: {source}")]
    Create {
        path: String,
        dir: String,
        who: String,
        #[source]
        source: io::Error,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("{path}: cannot rename the finished file onto it: {source}")]
    Rename {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("{path}: cannot take the file identity of {who}: {source}")]
    Identity {
        path: String,
        who: String,
        #[source]
        source: io::Error,
    },
}

/// Who may read the finished file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// 0644 less the umask (reports, stacks, flamegraphs).
    Readable,
    /// 0600 (the wrapped command's output).
    Private,
}

/// A file being written under a fresh name; [`NewFile::commit`] renames it onto its final
/// name. Dropped without a commit, the fresh name is removed.
#[derive(Debug)]
pub struct NewFile {
    dir: OwnedFd,
    /// The fresh name; `None` once committed.
    temp: Option<CString>,
    name: CString,
    path: PathBuf,
    who: Invoker,
    access: Access,
    file: Option<File>,
}

impl NewFile {
    /// Creates a fresh file next to `path` for `who` (see the module's description).
    pub fn create(path: &Path, who: &Invoker, access: Access) -> Result<Self, OutputError> {
        Self::create_with_names(path, who, access, random_temp_name)
    }

    fn create_with_names(
        path: &Path,
        who: &Invoker,
        access: Access,
        mut temp_name: impl FnMut(&OsStr) -> CString + Send,
    ) -> Result<Self, OutputError> {
        let shown = path.display().to_string();
        let name = path
            .file_name()
            .and_then(|n| CString::new(n.as_bytes()).ok())
            .ok_or_else(|| OutputError::NoFileName {
                path: shown.clone(),
            })?;
        let dir_path = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let (dir, temp, file) = as_owner(who, &shown, || {
            let dir = open_dir(dir_path).map_err(|source| OutputError::Directory {
                path: shown.clone(),
                dir: dir_path.display().to_string(),
                who: who.describe(),
                source,
            })?;
            check_existing(&dir, &name, &shown, who)?;
            let base = OsStr::from_bytes(name.as_bytes());
            let (temp, file) =
                create_fresh(&dir, || temp_name(base)).map_err(|source| OutputError::Create {
                    path: shown.clone(),
                    dir: dir_path.display().to_string(),
                    who: who.describe(),
                    source,
                })?;
            Ok((dir, temp, file))
        })?;
        Ok(NewFile {
            dir,
            temp: Some(temp),
            name,
            path: path.to_path_buf(),
            who: who.clone(),
            access,
            file: Some(file),
        })
    }

    /// The file, to write to.
    pub fn file(&self) -> &File {
        self.file
            .as_ref()
            .expect("the file is taken only by commit")
    }

    /// Syncs the file, gives it its final mode and renames it onto the final name (checked
    /// again: a regular file of the user's, or nothing). Returns the file, still open.
    pub fn commit(mut self) -> Result<File, OutputError> {
        let shown = self.path.display().to_string();
        let file = self.file.take().expect("committed once");
        file.sync_all().map_err(|source| OutputError::Write {
            path: shown.clone(),
            source,
        })?;
        let mode = match self.access {
            Access::Readable => 0o644 & !umask(),
            Access::Private => 0o600,
        };
        // SAFETY: fchmod on a descriptor we own.
        if unsafe { libc::fchmod(file.as_raw_fd(), mode) } != 0 {
            return Err(OutputError::Write {
                path: shown,
                source: io::Error::last_os_error(),
            });
        }
        let temp = self.temp.clone().expect("committed once");
        let (dir, name, who) = (&self.dir, &self.name, &self.who);
        as_owner(who, &shown, || {
            check_existing(dir, name, &shown, who)?;
            // SAFETY: both names are NUL-terminated and relative to the same directory fd.
            let renamed = unsafe {
                libc::renameat(
                    dir.as_raw_fd(),
                    temp.as_ptr(),
                    dir.as_raw_fd(),
                    name.as_ptr(),
                )
            };
            if renamed != 0 {
                return Err(OutputError::Rename {
                    path: shown.clone(),
                    source: io::Error::last_os_error(),
                });
            }
            Ok(())
        })?;
        self.temp = None;
        // Make the rename durable; not every file system syncs directories.
        // SAFETY: fsync on a descriptor we own.
        unsafe { libc::fsync(self.dir.as_raw_fd()) };
        Ok(file)
    }
}

impl Drop for NewFile {
    fn drop(&mut self) {
        if let Some(temp) = &self.temp {
            // SAFETY: unlinkat of the fresh name we created, relative to its directory.
            unsafe { libc::unlinkat(self.dir.as_raw_fd(), temp.as_ptr(), 0) };
        }
    }
}

/// Writes a whole file through `write` (buffered) and renames it into place.
pub fn write_file(
    path: &Path,
    who: &Invoker,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<(), OutputError> {
    let new = NewFile::create(path, who, Access::Readable)?;
    let written = {
        let mut out = io::BufWriter::new(new.file());
        write(&mut out).and_then(|()| out.flush())
    };
    written.map_err(|source| OutputError::Write {
        path: path.display().to_string(),
        source,
    })?;
    new.commit().map(drop)
}

/// [`write_file`], or standard output when `path` is `-` (as `-o -` asks for a report).
pub fn write_file_or_stdout(
    path: &Path,
    who: &Invoker,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<(), OutputError> {
    if path == Path::new("-") {
        return write(&mut io::stdout().lock()).map_err(|source| OutputError::Write {
            path: "standard output".into(),
            source,
        });
    }
    write_file(path, who, write)
}

/// Checks, before a run, that `path` can be written for `who`: its directory opens, an
/// existing file there is one cg-trace may replace, and a fresh file can be created there
/// (it is removed at once).
pub fn check(path: &Path, who: &Invoker) -> Result<(), OutputError> {
    NewFile::create(path, who, Access::Private).map(drop)
}

/// Runs `op` with `who`'s file-system identity when we act for them (under sudo), on a
/// thread of its own whose credentials die with it; as ourselves otherwise.
fn as_owner<T: Send>(
    who: &Invoker,
    shown: &str,
    op: impl FnOnce() -> Result<T, OutputError> + Send,
) -> Result<T, OutputError> {
    if !who.via_sudo {
        return op();
    }
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                take_file_identity(who).map_err(|source| OutputError::Identity {
                    path: shown.to_string(),
                    who: who.describe(),
                    source,
                })?;
                op()
            })
            .join()
            .unwrap_or_else(|_| {
                Err(OutputError::Identity {
                    path: shown.to_string(),
                    who: who.describe(),
                    source: io::Error::other("the thread acting for the user panicked"),
                })
            })
    })
}

/// Gives the calling thread (only it: raw syscalls, not libc's process-wide wrappers) the
/// user's groups, fsgid and fsuid. With a non-zero fsuid the kernel also drops the
/// file-system capabilities (CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_CHOWN, ...) of the thread.
fn take_file_identity(who: &Invoker) -> io::Result<()> {
    // SAFETY: plain syscalls on this thread's credentials; `groups` outlives the call.
    unsafe {
        if libc::syscall(
            libc::SYS_setgroups,
            who.groups.len() as libc::c_long,
            who.groups.as_ptr(),
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
        libc::syscall(libc::SYS_setfsgid, who.gid as libc::c_long);
        libc::syscall(libc::SYS_setfsuid, who.uid as libc::c_long);
        // Both return the previous value whatever happens: an invalid id (-1) reads it back.
        let fsgid = libc::syscall(libc::SYS_setfsgid, libc::gid_t::MAX as libc::c_long);
        let fsuid = libc::syscall(libc::SYS_setfsuid, libc::uid_t::MAX as libc::c_long);
        if fsgid as u32 != who.gid || fsuid as u32 != who.uid {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
    }
    Ok(())
}

fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    let c = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let open = |flags| {
        // SAFETY: open of a NUL-terminated path.
        let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_DIRECTORY | libc::O_CLOEXEC) };
        if fd < 0 {
            Err(io::Error::last_os_error())
        } else {
            // SAFETY: a descriptor we just opened and own.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        }
    };
    // O_PATH where the directory is searchable but not readable (no fsync of it then).
    open(libc::O_RDONLY).or_else(|err| match err.raw_os_error() {
        Some(libc::EACCES) => open(libc::O_PATH),
        _ => Err(err),
    })
}

/// An existing `name` in `dir` must be a regular file owned by `who`.
fn check_existing(
    dir: &OwnedFd,
    name: &CStr,
    shown: &str,
    who: &Invoker,
) -> Result<(), OutputError> {
    // SAFETY: fstatat writes into the struct we own; the name is NUL-terminated.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let ret = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if ret != 0 {
        let err = io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::ENOENT) => Ok(()),
            _ => Err(OutputError::Create {
                path: shown.to_string(),
                dir: "its directory".into(),
                who: who.describe(),
                source: err,
            }),
        };
    }
    let kind = match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => None,
        libc::S_IFLNK => Some("a symbolic link"),
        libc::S_IFDIR => Some("a directory"),
        libc::S_IFIFO => Some("a FIFO"),
        libc::S_IFCHR => Some("a character device"),
        libc::S_IFBLK => Some("a block device"),
        libc::S_IFSOCK => Some("a socket"),
        _ => Some("not a regular file"),
    };
    if let Some(kind) = kind {
        return Err(OutputError::NotRegular {
            path: shown.to_string(),
            kind,
        });
    }
    if st.st_uid != who.uid {
        return Err(OutputError::NotOwned {
            path: shown.to_string(),
            owner: describe_uid(st.st_uid),
            who: who.describe(),
        });
    }
    Ok(())
}

/// Creates a file under the first of `names` that does not exist yet in `dir`: O_EXCL and
/// O_NOFOLLOW, so a name taken meanwhile (by a file, a link, anything) is never opened.
fn create_fresh(dir: &OwnedFd, mut names: impl FnMut() -> CString) -> io::Result<(CString, File)> {
    for _ in 0..32 {
        let temp = names();
        // SAFETY: openat of a NUL-terminated name relative to a directory fd we own.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                temp.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o600 as libc::c_uint,
            )
        };
        if fd >= 0 {
            // SAFETY: a descriptor we just opened and own.
            return Ok((temp, unsafe { File::from_raw_fd(fd) }));
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EEXIST) {
            return Err(err);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "every fresh name tried was taken",
    ))
}

/// 64 bits no other user can guess (for names in shared directories such as /tmp).
pub fn random_u64() -> u64 {
    let mut random = [0u8; 8];
    // SAFETY: getrandom fills the buffer we own.
    let got = unsafe { libc::getrandom(random.as_mut_ptr().cast(), random.len(), 0) };
    if got == random.len() as isize {
        u64::from_ne_bytes(random)
    } else {
        // No entropy source: time and pid still differ between attempts and processes.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        nanos ^ (u64::from(std::process::id()) << 32)
    }
}

/// The default file for the wrapped command's output under the live view: in the temporary
/// directory, under a name no other user can predict (and so plant a link at beforehand).
pub fn default_command_output() -> PathBuf {
    std::env::temp_dir().join(format!(
        "cg-trace-{}-{:016x}.out",
        std::process::id(),
        random_u64()
    ))
}

/// `.NAME.0123456789abcdef.partial` (the name shortened to stay within NAME_MAX).
fn random_temp_name(name: &OsStr) -> CString {
    let value = random_u64();
    let base = &name.as_bytes()[..name.len().min(200)];
    let mut bytes = Vec::with_capacity(base.len() + 30);
    bytes.push(b'.');
    bytes.extend_from_slice(base);
    bytes.extend_from_slice(format!(".{value:016x}.partial").as_bytes());
    // The name came from a CString: it holds no NUL.
    CString::new(bytes).unwrap_or_else(|_| c".cg-trace.partial".to_owned())
}

/// The process's umask (from /proc/self/status; reading it with umask(2) would change it).
fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

#[cfg(test)]
mod tests {
    use std::{
        fs,
        os::unix::fs::{MetadataExt, PermissionsExt, symlink},
    };

    use super::*;

    fn me() -> Invoker {
        Invoker::ourselves()
    }

    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn writes_a_file_and_replaces_an_own_regular_file_leaving_no_fresh_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        fs::write(&path, "old").unwrap();
        write_file(&path, &me(), |out| out.write_all(b"new")).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "new");
        assert_eq!(names_in(dir.path()), ["r.json"]);
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644 & !umask());
    }

    #[test]
    fn a_symbolic_link_as_the_final_name_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, "precious").unwrap();
        let path = dir.path().join("e.folded");
        symlink(&victim, &path).unwrap();
        for result in [
            check(&path, &me()),
            write_file(&path, &me(), |out| out.write_all(b"x")),
        ] {
            let err = result.unwrap_err();
            assert!(matches!(err, OutputError::NotRegular { .. }), "{err}");
            assert!(err.to_string().contains("symbolic link"), "{err}");
        }
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
        assert!(
            fs::symlink_metadata(&path)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(names_in(dir.path()), ["e.folded", "victim"]);
    }

    #[test]
    fn a_planted_partial_name_is_never_opened() {
        // The old fixed name `.NAME.partial`, and the fresh names of a race: each taken name
        // is skipped (O_EXCL), links are not followed (O_NOFOLLOW).
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, "precious").unwrap();
        for planted in [".r.json.partial", ".r.json.1.partial", ".r.json.2.partial"] {
            symlink(&victim, dir.path().join(planted)).unwrap();
        }
        let path = dir.path().join("r.json");
        let mut n = 0;
        let new = NewFile::create_with_names(&path, &me(), Access::Readable, |base| {
            n += 1;
            let mut name = b".".to_vec();
            name.extend_from_slice(base.as_bytes());
            name.extend_from_slice(format!(".{n}.partial").as_bytes());
            CString::new(name).unwrap()
        })
        .unwrap();
        new.file().write_all(b"report").unwrap();
        new.commit().unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "report");
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
        for planted in [".r.json.partial", ".r.json.1.partial", ".r.json.2.partial"] {
            let meta = fs::symlink_metadata(dir.path().join(planted)).unwrap();
            assert!(meta.file_type().is_symlink(), "{planted}");
        }
    }

    #[test]
    fn a_fifo_or_a_directory_as_the_final_name_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("out.json");
        let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo of a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let sub = dir.path().join("sub.json");
        fs::create_dir(&sub).unwrap();
        for (path, kind) in [(&fifo, "a FIFO"), (&sub, "a directory")] {
            let err = write_file(path, &me(), |out| out.write_all(b"x")).unwrap_err();
            assert!(err.to_string().contains(kind), "{err}");
            assert!(check(path, &me()).is_err());
        }
        assert_eq!(names_in(dir.path()), ["out.json", "sub.json"]);
    }

    #[test]
    fn another_users_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        fs::write(&path, "theirs").unwrap();
        // The run is for a user who is not this file's owner.
        let owner = fs::metadata(&path).unwrap().uid();
        let other = Invoker {
            uid: owner.wrapping_add(1),
            ..me()
        };
        let err = write_file(&path, &other, |out| out.write_all(b"x")).unwrap_err();
        assert!(matches!(err, OutputError::NotOwned { .. }), "{err}");
        assert!(check(&path, &other).is_err());
        assert_eq!(fs::read_to_string(&path).unwrap(), "theirs");
    }

    #[test]
    fn a_file_planted_between_check_and_commit_is_refused_at_the_rename() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, "precious").unwrap();
        let path = dir.path().join("r.json");
        let new = NewFile::create(&path, &me(), Access::Readable).unwrap();
        symlink(&victim, &path).unwrap();
        assert!(matches!(
            new.commit().unwrap_err(),
            OutputError::NotRegular { .. }
        ));
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
        // The fresh file was removed.
        assert_eq!(names_in(dir.path()), ["r.json", "victim"]);
    }

    #[test]
    fn check_creates_nothing_and_names_a_missing_directory() {
        let dir = tempfile::tempdir().unwrap();
        check(&dir.path().join("r.json"), &me()).unwrap();
        assert!(names_in(dir.path()).is_empty());
        let err = check(&dir.path().join("nope/r.json"), &me()).unwrap_err();
        assert!(matches!(err, OutputError::Directory { .. }), "{err}");
        assert!(err.to_string().contains("os error"), "{err}");
    }

    #[test]
    fn the_default_command_output_cannot_be_foreseen() {
        let (a, b) = (default_command_output(), default_command_output());
        assert_ne!(a, b);
        assert_eq!(a.parent(), Some(std::env::temp_dir().as_path()));
        let name = a.file_name().unwrap().to_str().unwrap();
        let prefix = format!("cg-trace-{}-", std::process::id());
        let random = name
            .strip_prefix(&prefix)
            .and_then(|n| n.strip_suffix(".out"))
            .unwrap_or_else(|| panic!("{name}"));
        assert_eq!(random.len(), 16, "{name}");
        assert!(random.bytes().all(|c| c.is_ascii_hexdigit()), "{name}");
    }

    #[test]
    fn the_command_output_stays_open_after_the_rename() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cmd.out");
        let file = NewFile::create(&path, &me(), Access::Private)
            .unwrap()
            .commit()
            .unwrap();
        (&file).write_all(b"hello").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "hello");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
