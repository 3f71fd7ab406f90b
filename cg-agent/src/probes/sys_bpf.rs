//! The raw `bpf(2)` system call, for what aya 0.14 cannot do: the open-coded task walk's
//! program and array ([`super::task_walk`]), uprobe_multi links ([`super::uprobe_multi`]) and
//! batch reads of a map ([`super::batch`]). One home for the unsafe call and for making it
//! again on a signal ([`super::retry`]'s rule).

use std::{
    io,
    os::fd::{FromRawFd, OwnedFd},
};

use super::retry::{TRIES, interrupted_by_signal};

/// One call with `attr`, a `repr(C)` head of `union bpf_attr` (the kernel takes its size and
/// checks that what it does not know is zero), answered as the kernel answered it.
pub fn once<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<i64> {
    // SAFETY: `attr` is a repr(C) head of `union bpf_attr` that lives across the call; the
    // pointers inside it point at buffers the caller keeps alive.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ret)
}

/// [`once`], made again while the kernel answers EAGAIN or EINTR (a signal came while it
/// ran), at most [`TRIES`] times: never read as a missing feature. For calls that no stop
/// request needs to cut short (a stop is checked between them).
pub fn retried<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<i64> {
    let mut tries = 0;
    loop {
        tries += 1;
        match once(cmd, attr) {
            Err(err) if interrupted_by_signal(err.raw_os_error()) && tries < TRIES => {}
            answer => return answer,
        }
    }
}

/// The descriptor a call handed back.
pub fn owned_fd(fd: i64) -> io::Result<OwnedFd> {
    let fd = i32::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
