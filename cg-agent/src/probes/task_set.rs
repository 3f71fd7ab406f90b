//! Whether the kernel's set of threads has changed: the open-coded task walk
//! ([`super::task_walk`]) may read its last walk's threads again through the pointers it kept,
//! instead of following the task list, only while no thread was created or reaped since.
//!
//! The kernel counts both under `tasklist_lock`, where a thread joins or leaves the task list:
//! `total_forks` (`processes` in `/proc/stat`) grows by one for every thread created and never
//! goes back, and `nr_threads` (the number after the slash in `/proc/loadavg`) grows with every
//! thread created and shrinks with every thread reaped. A [`TaskSet`] is the two read
//! together; two equal ones, the first read before a walk and the second after a later
//! re-read, mean the walk's threads are all still there (none reaped: that would have moved
//! `nr_threads` unless another was created, which moves `total_forks`) and no other joined.
//! `nr_threads` is read first: a thread reaped before that read and one created after it
//! cannot cancel out unseen, since the creation moves `total_forks`, read second.

use std::{fs::File, io, os::unix::fs::FileExt};

/// The kernel's count of threads alive and of threads ever created, read together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskSet {
    pub threads: u64,
    pub forks: u64,
}

/// The largest `/proc/stat` read (a machine with thousands of CPUs and interrupts); a larger
/// one is not read and the walk follows the task list every time.
const MAX_STAT_BYTES: usize = 4 << 20;

/// Reads [`TaskSet`]s from `/proc/loadavg` and `/proc/stat`, kept open (a read at offset 0
/// makes the kernel write them afresh).
pub struct TaskSetReader {
    loadavg: File,
    stat: File,
    buf: Vec<u8>,
}

impl TaskSetReader {
    pub fn open() -> io::Result<Self> {
        Ok(TaskSetReader {
            loadavg: File::open("/proc/loadavg")?,
            stat: File::open("/proc/stat")?,
            buf: Vec::with_capacity(4096),
        })
    }

    /// The counts now, `nr_threads` read first (see the module's comment); `None` when either
    /// file cannot be read or parsed, which the walk takes as "changed".
    pub fn read(&mut self) -> Option<TaskSet> {
        read_whole(&self.loadavg, &mut self.buf, 4096).ok()?;
        let threads = threads_of_loadavg(&self.buf)?;
        read_whole(&self.stat, &mut self.buf, MAX_STAT_BYTES).ok()?;
        let forks = forks_of_stat(&self.buf)?;
        Some(TaskSet { threads, forks })
    }
}

/// Reads all of `file` from offset 0 into `buf` (at most `max` bytes; more is an error).
fn read_whole(file: &File, buf: &mut Vec<u8>, max: usize) -> io::Result<()> {
    buf.clear();
    loop {
        let filled = buf.len();
        if filled >= max {
            return Err(io::Error::other("larger than expected"));
        }
        buf.resize((filled + 4096).min(max), 0);
        let read = file.read_at(&mut buf[filled..], filled as u64);
        buf.truncate(filled + *read.as_ref().unwrap_or(&0));
        match read {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// `nr_threads` of `/proc/loadavg` ("0.00 0.01 0.05 1/123 4567": the 123).
pub(super) fn threads_of_loadavg(text: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(text).ok()?;
    let field = text.split_ascii_whitespace().nth(3)?;
    field.split_once('/')?.1.parse().ok()
}

/// `total_forks` of `/proc/stat` (its line "processes 123").
fn forks_of_stat(text: &[u8]) -> Option<u64> {
    text.split(|&b| b == b'\n')
        .find_map(|line| line.strip_prefix(b"processes "))
        .and_then(|digits| std::str::from_utf8(digits).ok())
        .and_then(|digits| digits.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_two_counts_and_refuses_what_is_not_them() {
        assert_eq!(
            threads_of_loadavg(b"0.42 0.30 0.20 3/1187 99123\n"),
            Some(1187)
        );
        assert_eq!(threads_of_loadavg(b"0.42 0.30 0.20 3-1187 99123\n"), None);
        assert_eq!(threads_of_loadavg(b"0.42 0.30\n"), None);
        assert_eq!(threads_of_loadavg(b"0.42 0.30 0.20 3/-1 9\n"), None);
        assert_eq!(threads_of_loadavg(&[0xff, 0xfe, b' ']), None);
        let stat = b"cpu  1 2 3\nintr 5 0 0\nctxt 77\nbtime 1\nprocesses 56789\nprocs_running 1\n";
        assert_eq!(forks_of_stat(stat), Some(56789));
        assert_eq!(forks_of_stat(b"cpu 1\nprocs_running 1\n"), None);
        assert_eq!(forks_of_stat(b"processes many\n"), None);
        // A line that only begins like it is not it.
        assert_eq!(forks_of_stat(b"processesX 5\nprocesses 6\n"), Some(6));
    }

    #[test]
    fn reads_a_file_whole_and_refuses_one_too_large() {
        let dir = std::env::temp_dir().join(format!("cg-task-set-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("big");
        let text: Vec<u8> = (0..20_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        std::fs::write(&path, &text).unwrap();
        let file = File::open(&path).unwrap();
        let mut buf = Vec::new();
        read_whole(&file, &mut buf, 1 << 20).unwrap();
        assert_eq!(buf, text);
        // Again from offset 0: the same, not appended.
        read_whole(&file, &mut buf, 1 << 20).unwrap();
        assert_eq!(buf.len(), text.len());
        assert!(read_whole(&file, &mut buf, 8192).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_thread_created_and_reaped_moves_the_counts() {
        let mut reader = TaskSetReader::open().unwrap();
        let before = reader
            .read()
            .expect("this kernel's /proc/loadavg and /proc/stat");
        assert!(before.threads >= 1 && before.forks >= 1);
        std::thread::spawn(|| ()).join().unwrap();
        let after = reader.read().unwrap();
        assert!(after.forks > before.forks, "{before:?} {after:?}");
    }
}
