//! Starting the wrapped command: as the user who ran `sudo` (SUDO_UID/SUDO_GID, with their
//! supplementary groups), not as root, with its own stdin/stdout/stderr (or, under the live
//! view, its output in a file).

use std::{ffi::CString, io, path::Path, process::Stdio};

use tokio::process::{Child, Command};

/// The identity to run the command as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invoker {
    pub uid: u32,
    pub gid: u32,
    pub user: Option<String>,
    pub groups: Vec<u32>,
}

impl Invoker {
    /// The user behind `sudo`, when we are root because of it; `None` otherwise (the command
    /// then runs as ourselves).
    pub fn from_sudo_env() -> Option<Self> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return None;
        }
        let uid: u32 = std::env::var("SUDO_UID").ok()?.parse().ok()?;
        let gid: u32 = std::env::var("SUDO_GID").ok()?.parse().ok()?;
        if uid == 0 {
            return None;
        }
        let user = std::env::var("SUDO_USER").ok().filter(|u| !u.is_empty());
        let groups = user
            .as_deref()
            .and_then(|u| supplementary_groups(u, gid))
            .unwrap_or_else(|| vec![gid]);
        Some(Invoker {
            uid,
            gid,
            user,
            groups,
        })
    }
}

/// The user's groups from the group database (getgrouplist), read before forking because
/// it is not async-signal-safe.
fn supplementary_groups(user: &str, gid: u32) -> Option<Vec<u32>> {
    let name = CString::new(user).ok()?;
    let mut count: libc::c_int = 64;
    loop {
        let mut groups = vec![0 as libc::gid_t; count as usize];
        let before = count;
        // SAFETY: groups has room for `count` entries; getgrouplist updates count.
        let ret =
            unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut count) };
        if ret >= 0 {
            groups.truncate(count as usize);
            return Some(groups);
        }
        if count <= before {
            count = before * 2;
        }
        if count > 65_536 {
            return None;
        }
    }
}

/// Starts `argv` (as `invoker` when given). Errors are the exec's: not found, not executable.
/// With `output`, the command's stdout and stderr go to that file (created, or truncated, and
/// handed to the invoker) and its stdin is `/dev/null`; otherwise it shares ours.
pub fn spawn(
    argv: &[String],
    invoker: Option<&Invoker>,
    output: Option<&Path>,
) -> io::Result<Child> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty command"))?;
    let mut command = Command::new(program);
    command.args(args).kill_on_drop(false);
    if let Some(path) = output {
        let file = std::fs::File::create(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        if let Some(invoker) = invoker {
            let _ = std::os::unix::fs::chown(path, Some(invoker.uid), Some(invoker.gid));
        }
        command
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file);
    }
    if let Some(invoker) = invoker.cloned() {
        // SAFETY: the closure only makes async-signal-safe syscalls (setgroups, setgid,
        // setuid) on data prepared before the fork.
        unsafe {
            command.pre_exec(move || {
                if libc::setgroups(invoker.groups.len(), invoker.groups.as_ptr()) != 0
                    || libc::setgid(invoker.gid) != 0
                    || libc::setuid(invoker.uid) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    command.spawn()
}

/// Sends `signal` to `pid` (ignoring a process that is already gone).
pub fn send_signal(pid: u32, signal: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}
