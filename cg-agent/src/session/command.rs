//! Starting the wrapped command: as the user the run is for ([`Invoker`]: under sudo, the
//! user who ran it, with their groups and the environment `sudo -u` gives them), with its own
//! stdin/stdout/stderr, its stdout on our stderr when the report takes our stdout (`-o -`),
//! or, under the live view, its output in a file.

use std::{io, os::fd::AsFd, path::PathBuf, process::Stdio};

use tokio::process::{Child, Command};

use crate::{
    output::{Access, NewFile},
    privileges::Invoker,
};

/// Where the command's output goes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CommandOutput {
    /// Our stdin, stdout and stderr.
    #[default]
    Inherit,
    /// Our stdin and stderr; its stdout on our stderr too (the report is on our stdout).
    StdoutToStderr,
    /// Stdout and stderr into this file (created for the invoker, replacing only a regular
    /// file of theirs; see [`crate::output`]), stdin from `/dev/null`.
    File(PathBuf),
}

/// Starts `argv` for `invoker`. Errors are the exec's (not found, not executable), or the
/// output file's.
pub fn spawn(argv: &[String], invoker: &Invoker, output: &CommandOutput) -> io::Result<Child> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty command"))?;
    let mut command = Command::new(program);
    command.args(args).kill_on_drop(false);
    match output {
        CommandOutput::Inherit => {}
        CommandOutput::StdoutToStderr => {
            let stderr = io::stderr().as_fd().try_clone_to_owned()?;
            command.stdout(Stdio::from(stderr));
        }
        CommandOutput::File(path) => {
            let file = NewFile::create(path, invoker, Access::Private)
                .and_then(NewFile::commit)
                .map_err(|e| io::Error::other(e.to_string()))?;
            command
                .stdin(Stdio::null())
                .stdout(file.try_clone()?)
                .stderr(file);
        }
    }
    if invoker.via_sudo {
        for (name, value) in invoker.environment() {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        let invoker = invoker.clone();
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
