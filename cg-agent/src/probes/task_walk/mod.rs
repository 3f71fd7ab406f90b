//! The open-coded task walk of iterator accounting (kernel 6.7 and later): a sleepable
//! `BPF_PROG_TYPE_SYSCALL` program that walks every thread with the kfuncs
//! `bpf_iter_task_new/next/destroy` under `bpf_rcu_read_lock` and writes one [`TaskRecord`]
//! per thread into an mmapable array, run once per interval by `BPF_PROG_TEST_RUN`. It
//! follows the task lists instead of looking each pid up as the `iter/task` iterator does,
//! which made a read 3.4-4x cheaper in the spike (docs/overhead.md).
//!
//! aya 0.14 cannot relocate kfunc calls, so the program is assembled here (about 50
//! instructions, [`program`]) with the kfuncs' BTF ids and `task_struct`'s offsets taken from
//! the kernel's BTF, and loaded with the raw `bpf(2)` system call. Where the kernel lacks the
//! kfuncs or refuses the program, [`TaskWalk::new`] says why ([`WalkError::Unsupported`]) and
//! the caller keeps the `iter/task` program. The array is sized for the threads alive; a walk
//! that fills it is made again on an array twice as large, so no thread is ever left out.
//!
//! Following the list costs one cache miss after another (each task's address is in the one
//! before it): ~200 ns a thread on the development VM, 2 ms with 10,000 threads. So the walk
//! also keeps each thread's `task_struct` address, in a second array only the kernel reads,
//! and while the kernel's set of threads is unchanged since a walk ([`super::task_set`]: none
//! created, none reaped), a second program ([`reread_program`]) reads those threads again
//! through the addresses instead, their loads independent of each other: what changes of a
//! living thread (runtime, CPU, flags, exit state) into the same records, the same as a walk
//! would write then. A set that changed before the re-read ended makes it void, and the list
//! is walked.

use std::{
    io,
    os::fd::{AsRawFd, OwnedFd},
};

use cg_common::TaskRecord;

mod asm;
mod programs;

use asm::Insn;
use programs::{CTX_BYTES, RECORD_BYTES, WalkMaps, program, reread_program};
pub use programs::{TaskOffsets, WalkLayout};

use super::{
    sys_bpf::{self, owned_fd},
    task_set::{TaskSet, TaskSetReader},
};

/// Errors of the task walk.
#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    /// This kernel cannot run the walk (no kfuncs, or it refused the program): the
    /// `iter/task` program serves instead.
    #[error("{0}")]
    Unsupported(String),
    /// A system call failed while the walk was set up or run (at set-up, the `iter/task`
    /// program serves instead, unless signals kept interrupting the call).
    #[error("{call}: {source}")]
    Sys {
        call: &'static str,
        #[source]
        source: io::Error,
    },
    /// The program could not be assembled (a bug).
    #[error("assembling the task walk: {0}")]
    Assembly(&'static str),
}

// ---- the bpf(2) system call ----

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TEST_RUN: libc::c_long = 10;
const MAP_TYPE_ARRAY: u32 = 2;
const BPF_F_MMAPABLE: u32 = 1 << 10;
const PROG_TYPE_SYSCALL: u32 = 31;
const BPF_F_SLEEPABLE: u32 = 1 << 4;
/// Bytes of `union bpf_attr` passed (the kernel checks that what it does not know is zero).
const ATTR_BYTES: usize = 144;

/// `union bpf_attr` as bytes, written field by field at their offsets.
#[repr(transparent)]
struct Attr([u8; ATTR_BYTES]);

impl Attr {
    fn new() -> Self {
        Attr([0; ATTR_BYTES])
    }
    fn u32(&mut self, at: usize, value: u32) -> &mut Self {
        self.0[at..at + 4].copy_from_slice(&value.to_le_bytes());
        self
    }
    fn u64(&mut self, at: usize, value: u64) -> &mut Self {
        self.0[at..at + 8].copy_from_slice(&value.to_le_bytes());
        self
    }
    fn name(&mut self, at: usize, name: &str) -> &mut Self {
        let bytes = &name.as_bytes()[..name.len().min(15)];
        self.0[at..at + bytes.len()].copy_from_slice(bytes);
        self
    }
}

/// One `bpf(2)` call, made again while the kernel answers EAGAIN or EINTR.
fn sys_bpf(cmd: libc::c_long, attr: &mut Attr) -> io::Result<i64> {
    sys_bpf::retried(cmd, attr)
}

/// An array of `capacity` values of `value_bytes`, indexed by a u32.
fn create_array(capacity: u32, value_bytes: u32, flags: u32, name: &str) -> io::Result<OwnedFd> {
    let mut attr = Attr::new();
    attr.u32(0, MAP_TYPE_ARRAY)
        .u32(4, 4)
        .u32(8, value_bytes)
        .u32(12, capacity)
        .u32(16, flags)
        .name(28, name);
    owned_fd(sys_bpf(BPF_MAP_CREATE, &mut attr)?)
}

/// Loads the program; on a refusal, loads it again with the verifier's log, for the message.
fn load_program(insns: &[Insn], name: &str) -> Result<OwnedFd, WalkError> {
    let license = c"GPL";
    let attempt = |log: &mut [u8]| {
        let mut attr = Attr::new();
        attr.u32(0, PROG_TYPE_SYSCALL)
            .u32(4, insns.len() as u32)
            .u64(8, insns.as_ptr() as u64)
            .u64(16, license.as_ptr() as u64)
            .u32(44, BPF_F_SLEEPABLE)
            .name(48, name);
        if !log.is_empty() {
            attr.u32(24, 1)
                .u32(28, log.len() as u32)
                .u64(32, log.as_mut_ptr() as u64);
        }
        sys_bpf(BPF_PROG_LOAD, &mut attr)
    };
    match attempt(&mut []) {
        Ok(fd) => owned_fd(fd).map_err(|source| WalkError::Sys {
            call: "BPF_PROG_LOAD",
            source,
        }),
        // Signals kept interrupting it: that says nothing of the kernel.
        Err(source) if super::retry::interrupted_by_signal(source.raw_os_error()) => {
            Err(WalkError::Sys {
                call: "BPF_PROG_LOAD",
                source,
            })
        }
        Err(err) => {
            let mut log = vec![0u8; 256 * 1024];
            let _ = attempt(&mut log);
            let end = log.iter().position(|&b| b == 0).unwrap_or(0);
            let text = String::from_utf8_lossy(&log[..end]);
            let last: Vec<&str> = text.lines().rev().take(3).collect();
            Err(WalkError::Unsupported(format!(
                "the kernel refused the task walk program: {err}{}",
                if last.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (verifier: {})",
                        last.into_iter().rev().collect::<Vec<_>>().join(" / ")
                    )
                }
            )))
        }
    }
}

/// Runs the program once with `count` at the head of its context; returns the context it
/// handed back.
fn test_run(prog: &OwnedFd, count: u32) -> io::Result<[u8; CTX_BYTES]> {
    let mut ctx = [0u8; CTX_BYTES];
    ctx[..4].copy_from_slice(&count.to_le_bytes());
    let mut attr = Attr::new();
    attr.u32(0, prog.as_raw_fd() as u32)
        .u32(40, CTX_BYTES as u32)
        .u64(48, ctx.as_mut_ptr() as u64);
    sys_bpf(BPF_PROG_TEST_RUN, &mut attr)?;
    Ok(ctx)
}

/// The array's values mapped into this process, read-only.
struct Mapped {
    at: *const u8,
    bytes: usize,
}

impl Mapped {
    fn new(map: &OwnedFd, capacity: u32) -> io::Result<Self> {
        let page = super::page_size() as usize;
        let bytes = (capacity as usize * RECORD_BYTES as usize).div_ceil(page) * page;
        // SAFETY: maps `bytes` of the array's values (the kernel checks the length against
        // the map), shared and read-only; unmapped on drop.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ,
                libc::MAP_SHARED,
                map.as_raw_fd(),
                0,
            )
        };
        if at == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapped {
            at: at.cast(),
            bytes,
        })
    }

    /// The first `count` records, read in place (no copy: 10,000 threads are 480 kB). Only
    /// the walk writes them, and it runs again only through `&mut` of the owner, so they do
    /// not change while borrowed.
    fn records(&self, count: usize) -> &[TaskRecord] {
        let count = count.min(self.bytes / RECORD_BYTES as usize);
        // SAFETY: `count` records lie within the mapping (bounded above), which lives as long
        // as `self`; TaskRecord is plain integers (any bit pattern is valid, no padding) and
        // the mapping is page-aligned with 48-byte values, so every record is aligned; the
        // program that writes them has returned (BPF_PROG_TEST_RUN is synchronous) and runs
        // again only through `TaskWalk::walk(&mut self)`.
        unsafe { std::slice::from_raw_parts(self.at.cast::<TaskRecord>(), count) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.at.cast_mut().cast(), self.bytes) };
    }
}

// SAFETY: the mapping is owned by this value alone and only read.
unsafe impl Send for Mapped {}

/// The fewest records the array holds; and the most it may grow to (a million threads,
/// 48 MB: far past any machine's `pid_max` default).
const MIN_CAPACITY: u32 = 4_096;
const MAX_CAPACITY: u32 = 1 << 20;

/// The loaded maps and programs of a walk of `capacity` records.
struct Loaded {
    // (Field order: the mapping goes before the map's descriptor.)
    mapped: Mapped,
    walk: OwnedFd,
    reread: Option<OwnedFd>,
    _records: OwnedFd,
    _tasks: OwnedFd,
}

impl Loaded {
    fn new(layout: &WalkLayout, all_tasks: bool, capacity: u32) -> Result<Self, WalkError> {
        let array = |value_bytes, flags, name| {
            create_array(capacity, value_bytes, flags, name).map_err(|source| WalkError::Sys {
                call: "BPF_MAP_CREATE (an array)",
                source,
            })
        };
        let records = array(RECORD_BYTES, BPF_F_MMAPABLE, "cg_task_walk")?;
        let tasks = array(8, 0, "cg_task_ptrs")?;
        let mapped = Mapped::new(&records, capacity).map_err(|source| WalkError::Sys {
            call: "mmap of the task walk's array",
            source,
        })?;
        let maps = WalkMaps {
            records: records.as_raw_fd(),
            tasks: tasks.as_raw_fd(),
        };
        let walk = load_program(&program(layout, maps, capacity, all_tasks)?, "cg_task_walk")?;
        // Without the re-read, every read walks the list.
        let reread = reread_program(layout, maps, all_tasks)
            .and_then(|insns| load_program(&insns, "cg_task_reread"))
            .inspect_err(|e| tracing::debug!("task walk: no re-reads: {e}"))
            .ok();
        Ok(Loaded {
            mapped,
            walk,
            reread,
            _records: records,
            _tasks: tasks,
        })
    }
}

/// A loaded task walk: its arrays (the records mapped) and its two programs. Dropping it
/// unloads them.
pub struct TaskWalk {
    layout: WalkLayout,
    all_tasks: bool,
    capacity: u32,
    loaded: Loaded,
    /// Reads whether threads were created or reaped; `None` where `/proc` cannot tell, and
    /// then every read walks the list.
    task_set: Option<TaskSetReader>,
    /// The set as it stood before the last walk of the list, where re-reads may serve.
    last_walk: Option<TaskSet>,
    /// How many records the last walk of the list wrote.
    walked: u32,
    /// How many times the array was found full and made larger.
    pub grown: u32,
    /// Reads that walked the list, and reads served by a re-read.
    pub walks: u64,
    pub rereads: u64,
}

impl TaskWalk {
    /// Assembles and loads the walk with room for `threads_alive` twice over.
    pub fn new(layout: WalkLayout, all_tasks: bool, threads_alive: u32) -> Result<Self, WalkError> {
        let capacity = threads_alive
            .saturating_mul(2)
            .clamp(MIN_CAPACITY, MAX_CAPACITY);
        Self::with_capacity(layout, all_tasks, capacity)
    }

    /// Assembles and loads the walk with an array of `capacity` records.
    fn with_capacity(
        layout: WalkLayout,
        all_tasks: bool,
        capacity: u32,
    ) -> Result<Self, WalkError> {
        let capacity = capacity.clamp(1, MAX_CAPACITY);
        let loaded = Loaded::new(&layout, all_tasks, capacity)?;
        Ok(TaskWalk {
            layout,
            all_tasks,
            capacity,
            loaded,
            task_set: TaskSetReader::open().ok(),
            last_walk: None,
            walked: 0,
            grown: 0,
            walks: 0,
            rereads: 0,
        })
    }

    /// Records of the array's size.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Every thread alive, read now: by a re-read of the last walk's threads while the set is
    /// the same as before that walk, else by walking the list.
    pub fn walk(&mut self) -> Result<&[TaskRecord], WalkError> {
        // Without the re-read program the counts serve nothing: not read.
        let mut now = match (&mut self.task_set, &self.loaded.reread) {
            (Some(reader), Some(_)) => reader.read(),
            _ => None,
        };
        let count = self.walked;
        if let (Some(set), Some(before), Some(reread)) = (now, self.last_walk, &self.loaded.reread)
            && set == before
        {
            test_run(reread, count).map_err(|source| WalkError::Sys {
                call: "BPF_PROG_TEST_RUN (the re-read)",
                source,
            })?;
            now = self.task_set.as_mut().and_then(TaskSetReader::read);
            if now == Some(before) {
                self.rereads += 1;
                return Ok(self.loaded.mapped.records(count as usize));
            }
        }
        self.walk_list(now)
    }

    /// Re-reads the last walk's threads whatever the set (tests: a thread of this process
    /// alive since the walk is read as it stands).
    #[cfg(test)]
    fn reread_now(&mut self) -> &[TaskRecord] {
        test_run(self.loaded.reread.as_ref().unwrap(), self.walked).unwrap();
        self.loaded.mapped.records(self.walked as usize)
    }

    /// Walks the list (`before`: the set read just before, if it could be); an array found
    /// full is replaced by one twice as large and the walk made again, so every thread alive
    /// is in the records.
    fn walk_list(&mut self, before: Option<TaskSet>) -> Result<&[TaskRecord], WalkError> {
        self.last_walk = None;
        self.walks += 1;
        loop {
            let ctx = test_run(&self.loaded.walk, 0).map_err(|source| WalkError::Sys {
                call: "BPF_PROG_TEST_RUN",
                source,
            })?;
            let count = u32::from_le_bytes([ctx[0], ctx[1], ctx[2], ctx[3]]);
            let state = u32::from_le_bytes([ctx[4], ctx[5], ctx[6], ctx[7]]);
            match state {
                0 => {
                    self.walked = count;
                    self.last_walk = before.filter(|&set| self.counts_alike(set, count));
                    return Ok(self.loaded.mapped.records(count as usize));
                }
                1 if self.capacity < MAX_CAPACITY => self.grow()?,
                1 => {
                    return Err(WalkError::Sys {
                        call: "the task walk",
                        source: io::Error::other(format!("more than {MAX_CAPACITY} threads alive")),
                    });
                }
                _ => {
                    return Err(WalkError::Sys {
                        call: "the task walk",
                        source: io::Error::other("an element of its array could not be had"),
                    });
                }
            }
        }
    }

    /// Whether a walk of `count` threads agrees with the kernel's count read before it: the
    /// walk lists CPU 0's idle task besides the `nr_threads` threads, or fewer where the kernel
    /// keeps some out of it (on this project's VM the walk never lists PID 1, its guest agent,
    /// or that process's threads). More than that means threads came during the walk (and the
    /// next read walks the list), or, where the set stayed the same, that `/proc/loadavg`
    /// counts fewer threads than the kernel has (a container's own `/proc`): then no read is a
    /// re-read from then on.
    fn counts_alike(&mut self, before: TaskSet, count: u32) -> bool {
        if walk_within_count(count, before.threads) {
            return true;
        }
        let after = self.task_set.as_mut().and_then(TaskSetReader::read);
        if after == Some(before) {
            tracing::debug!(
                "task walk: {count} threads walked, {} counted by /proc/loadavg: no re-reads",
                before.threads
            );
            self.task_set = None;
        }
        false
    }

    fn grow(&mut self) -> Result<(), WalkError> {
        let capacity = self.capacity.saturating_mul(2).min(MAX_CAPACITY);
        self.loaded = Loaded::new(&self.layout, self.all_tasks, capacity)?;
        tracing::debug!(
            "task walk: {} records were too few; the array now holds {capacity}",
            self.capacity
        );
        self.capacity = capacity;
        self.grown += 1;
        Ok(())
    }
}

/// Whether a walk that listed `walked` threads lists no more than `nr_threads` allows: those
/// and CPU 0's idle task (see [`TaskWalk::counts_alike`]).
fn walk_within_count(walked: u32, nr_threads: u64) -> bool {
    u64::from(walked) <= nr_threads.saturating_add(1)
}

impl Drop for TaskWalk {
    fn drop(&mut self) {
        tracing::debug!(
            "task walk: {} reads walked the list, {} re-read its threads",
            self.walks,
            self.rereads
        );
    }
}

/// Threads alive now (the kernel's count in `/proc/loadavg`: "running/total").
pub fn threads_alive() -> Option<u32> {
    let text = std::fs::read("/proc/loadavg").ok()?;
    u32::try_from(super::task_set::threads_of_loadavg(&text)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::btf::Btf;

    #[test]
    fn walks_this_process_and_grows_an_array_too_small() {
        // The running kernel (6.18 on the development VM) has the kfuncs.
        let btf = Btf::from_sys_fs().unwrap();
        let kernel = super::super::KernelLayout::read().unwrap().0;
        let layout = WalkLayout::read(&btf, kernel.task).unwrap();
        drop(btf);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            // Without privileges the kernel refuses the array or the program: an error,
            // never a walk.
            assert!(TaskWalk::with_capacity(layout, false, 8).is_err());
            return;
        }
        // Room for 8 records: the first walk fills it, and is made again on larger arrays.
        let mut walk = TaskWalk::with_capacity(layout, false, 8).unwrap();
        let records = walk.walk().unwrap().to_vec();
        assert!(walk.grown >= 1 && walk.capacity() as usize >= records.len());
        // SAFETY: getpid and gettid have no preconditions.
        let (pid, tid) = unsafe { (libc::getpid() as u32, libc::gettid() as u32) };
        let me = records
            .iter()
            .find(|r| r.tid == tid)
            .unwrap_or_else(|| panic!("tid {tid} not among {} records", records.len()));
        assert_eq!(me.tgid, pid);
        assert!(me.runtime_ns > 0 && me.start_ns > 0, "{me:?}");
        assert!(
            me.process_start_ns > 0 && me.process_start_ns <= me.start_ns,
            "{me:?}"
        );
        assert_eq!(
            (me.exit_state, me.task_flags & TaskRecord::PF_EXITING),
            (0, 0)
        );
        // As many threads as the kernel counts, give or take what came and went.
        let alive = threads_alive().unwrap() as usize;
        assert!(
            records.len().abs_diff(alive) < 64,
            "{} vs {alive}",
            records.len()
        );
        // A second walk fits the grown array.
        let grown = walk.grown;
        assert!(!walk.walk().unwrap().is_empty());
        assert_eq!(walk.grown, grown);
    }

    #[test]
    fn a_walk_may_list_the_idle_task_beside_the_kernels_count_and_fewer_never_more() {
        // The kernel counts 81 threads: 82 walked (CPU 0's idle task too) or fewer (threads
        // the kernel keeps out of the walk) agree; 83 is a thread that came during the walk, or a
        // `/proc/loadavg` that counts fewer threads than the kernel has.
        assert!(walk_within_count(82, 81));
        assert!(walk_within_count(70, 81));
        assert!(!walk_within_count(83, 81));
        assert!(walk_within_count(u32::MAX, u64::MAX));
    }

    /// This thread's runtime as the kernel counts it, ns.
    fn my_runtime_ns() -> u64 {
        let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
        text.split_whitespace().next().unwrap().parse().unwrap()
    }

    #[test]
    fn a_reread_reads_a_thread_as_it_stands_and_a_new_thread_is_walked_to() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return; // the kernel refuses the programs (the test above checks that)
        }
        let btf = Btf::from_sys_fs().unwrap();
        let kernel = super::super::KernelLayout::read().unwrap().0;
        let layout = WalkLayout::read(&btf, kernel.task).unwrap();
        drop(btf);
        for all in [false, true] {
            let mut walk = TaskWalk::new(layout.clone(), all, threads_alive().unwrap()).unwrap();
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() } as u32;
            let walked = walk.walk().unwrap().to_vec();
            let mine = |records: &[TaskRecord]| *records.iter().find(|r| r.tid == tid).unwrap();
            let first = mine(&walked);
            // Run 20 ms of CPU (however long that takes on a busy machine), then re-read
            // through the kept addresses: this thread's record is the walk's but for the
            // runtime, which is the kernel's now (reading `schedstat` brings the kernel's
            // count up to date, so it lies between the two reads around the re-read).
            let ran = first.runtime_ns + 20_000_000;
            while my_runtime_ns() < ran {
                std::hint::black_box(0u64);
            }
            let low = my_runtime_ns();
            let reread = walk.reread_now().to_vec();
            let high = my_runtime_ns();
            assert_eq!(reread.len(), walked.len());
            let again = mine(&reread);
            assert!(
                (low..=high).contains(&again.runtime_ns)
                    && again.runtime_ns >= first.runtime_ns + 15_000_000,
                "{low} <= {} <= {high}, after {}",
                again.runtime_ns,
                first.runtime_ns
            );
            assert_eq!(
                (
                    again.tgid,
                    again.tid,
                    again.start_ns,
                    again.process_start_ns,
                    again.exit_state
                ),
                (
                    first.tgid,
                    first.tid,
                    first.start_ns,
                    first.process_start_ns,
                    0
                )
            );
            // Every record keeps who it is, in the walk's order.
            assert!(
                reread
                    .iter()
                    .zip(&walked)
                    .all(|(r, w)| (r.tgid, r.tid, r.start_ns) == (w.tgid, w.tid, w.start_ns))
            );
            // A thread created since is in the next read, whichever way it is made.
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let (born_tx, born_rx) = std::sync::mpsc::channel();
            let child = std::thread::spawn(move || {
                // SAFETY: as above.
                born_tx.send(unsafe { libc::gettid() } as u32).unwrap();
                let _ = rx.recv();
            });
            let child_tid = born_rx.recv().unwrap();
            let walks = walk.walks;
            let records = walk.walk().unwrap();
            assert!(records.iter().any(|r| r.tid == child_tid), "--all: {all}");
            assert_eq!(
                walk.walks,
                walks + 1,
                "a thread created: the list is walked"
            );
            drop(tx);
            child.join().unwrap();
        }
    }

    #[test]
    fn reads_the_threads_alive() {
        assert!(threads_alive().is_some_and(|n| n >= 1));
    }
}
