//! The open-coded task walk of iterator accounting (kernel 6.7 and later): a sleepable
//! `BPF_PROG_TYPE_SYSCALL` program that walks every thread with the kfuncs
//! `bpf_iter_task_new/next/destroy` under `bpf_rcu_read_lock` and writes one [`TaskRecord`]
//! per thread into an mmapable array, run once per interval by `BPF_PROG_TEST_RUN`. It
//! follows the task lists instead of looking each pid up as the `iter/task` iterator does,
//! which made a read 3.4-4x cheaper in the spike (docs/overhead.md).
//!
//! aya 0.14 cannot relocate kfunc calls, so the programs are assembled here ([`asm`],
//! [`programs`]) with the kfuncs' BTF ids and `task_struct`'s offsets taken from the kernel's
//! BTF, and loaded with the raw `bpf(2)` system call. Where the kernel lacks the kfuncs or
//! refuses the walk, [`TaskWalk::new`] says why ([`WalkError::Unsupported`]) and the caller
//! keeps the `iter/task` program. The array is sized for the threads alive; a walk that fills
//! it is made again on an array twice as large, so no thread is ever left out.
//!
//! Following the list costs one cache miss after another (each task's address is in the one
//! before it): ~200 ns a thread on the development VM, 2 ms with 10,000 threads. So the walk
//! also keeps each thread's `task_struct` address, in a second array only the kernel reads,
//! and a read walks the list only when it must:
//! - while the kernel's set of threads is unchanged since the last read ([`super::task_set`]:
//!   none created, none reaped), a second program ([`reread_program`]) reads those threads
//!   again through the addresses instead, their loads independent of each other: what
//!   changes of a living thread (runtime, CPU, flags, exit state) into the same records;
//! - where it changed, a third ([`amend_program`]) first looks up again only the threads
//!   the kernel's hooks say were created or began to exit since ([`amend`], [`changes`]),
//!   writing each whole or leaving its record vacant, and then the records are re-read.
//!
//! A read the set changed under, or one whose records do not hold as many threads as the
//! kernel counts, is void, and made again by an amend; after [`ATTEMPTS`] the list is
//! walked.

use std::{
    io,
    os::fd::{AsRawFd, OwnedFd},
};

use aya::maps::{Array, MapData, RingBuf};
use cg_common::TaskRecord;

mod amend;
mod asm;
mod changes;
mod programs;

use asm::Insn;
use programs::{CTX_BYTES, RECORD_BYTES, WalkMaps, amend_program, program, reread_program};
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

/// An array's values mapped into this process: the records read-only, the amend's items
/// writable.
struct Mapped {
    at: *mut u8,
    bytes: usize,
}

impl Mapped {
    fn new(map: &OwnedFd, bytes: usize, writable: bool) -> io::Result<Self> {
        let page = super::page_size() as usize;
        let bytes = bytes.div_ceil(page) * page;
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: maps `bytes` of the array's values (the kernel checks the length against
        // the map), shared; unmapped on drop.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                prot,
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
    /// the programs write them, and they run again only through `&mut` of the owner, so the
    /// records do not change while borrowed.
    fn records(&self, count: usize) -> &[TaskRecord] {
        let count = count.min(self.bytes / RECORD_BYTES as usize);
        // SAFETY: `count` records lie within the mapping (bounded above), which lives as long
        // as `self`; TaskRecord is plain integers (any bit pattern is valid, no padding) and
        // the mapping is page-aligned with 48-byte values, so every record is aligned; the
        // programs that write them have returned (BPF_PROG_TEST_RUN is synchronous) and run
        // again only through `TaskWalk::walk(&mut self)`.
        unsafe { std::slice::from_raw_parts(self.at.cast_const().cast::<TaskRecord>(), count) }
    }

    /// Writes `values` at the start of a writable mapping (at most what it holds).
    fn write_u64s(&mut self, values: &[u64]) {
        let count = values.len().min(self.bytes / 8);
        // SAFETY: a writable mapping (the items' array, mapped with PROT_WRITE) of at least
        // `count` u64s, page-aligned; only the amend program reads it, and not while this
        // runs (it runs only through `&mut` of the owner).
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), self.at.cast::<u64>(), count) };
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.at.cast(), self.bytes) };
    }
}

// SAFETY: the mapping is owned by this value alone.
unsafe impl Send for Mapped {}

/// The fewest records the array holds; and the most it may grow to (a million threads,
/// 48 MB: far past any machine's `pid_max` default).
const MIN_CAPACITY: u32 = 4_096;
const MAX_CAPACITY: u32 = 1 << 20;

/// The amend's items' array, mapped for writing, and its program.
struct Amend {
    items: Mapped,
    program: OwnedFd,
    _map: OwnedFd,
}

/// The loaded maps and programs of a walk of `capacity` records.
struct Loaded {
    // (Field order: the mapping goes before the map's descriptor.)
    mapped: Mapped,
    walk: OwnedFd,
    reread: Option<OwnedFd>,
    amend: Option<Amend>,
    _records: OwnedFd,
    _tasks: OwnedFd,
}

fn array(capacity: u32, value_bytes: u32, flags: u32, name: &str) -> Result<OwnedFd, WalkError> {
    create_array(capacity, value_bytes, flags, name).map_err(|source| WalkError::Sys {
        call: "BPF_MAP_CREATE (an array)",
        source,
    })
}

impl Loaded {
    fn new(layout: &WalkLayout, all_tasks: bool, capacity: u32) -> Result<Self, WalkError> {
        let records = array(capacity, RECORD_BYTES, BPF_F_MMAPABLE, "cg_task_walk")?;
        let tasks = array(capacity, 8, 0, "cg_task_ptrs")?;
        let bytes = capacity as usize * RECORD_BYTES as usize;
        let mapped = Mapped::new(&records, bytes, false).map_err(|source| WalkError::Sys {
            call: "mmap of the task walk's array",
            source,
        })?;
        let maps = WalkMaps {
            records: records.as_raw_fd(),
            tasks: tasks.as_raw_fd(),
        };
        let walk = load_program(&program(layout, maps, capacity, all_tasks)?, "cg_task_walk")?;
        // Without the re-read, every read walks the list; without the amend, every read
        // after threads were created or reaped.
        let reread = reread_program(layout, maps)
            .and_then(|insns| load_program(&insns, "cg_task_reread"))
            .inspect_err(|e| tracing::debug!("task walk: no re-reads: {e}"))
            .ok();
        let amend = reread
            .is_some()
            .then(|| Amend::new(layout, maps, all_tasks))
            .transpose()
            .inspect_err(|e| tracing::debug!("task walk: no amends: {e}"))
            .ok()
            .flatten();
        Ok(Loaded {
            mapped,
            walk,
            reread,
            amend,
            _records: records,
            _tasks: tasks,
        })
    }
}

impl Amend {
    fn new(layout: &WalkLayout, maps: WalkMaps, all_tasks: bool) -> Result<Self, WalkError> {
        let map = array(amend::MAX_ITEMS, 8, BPF_F_MMAPABLE, "cg_task_amend")?;
        let items = Mapped::new(&map, amend::MAX_ITEMS as usize * 8, true).map_err(|source| {
            WalkError::Sys {
                call: "mmap of the task amend's array",
                source,
            }
        })?;
        let insns = amend_program(layout, maps, map.as_raw_fd(), all_tasks)?;
        Ok(Amend {
            items,
            program: load_program(&insns, "cg_task_amend")?,
            _map: map,
        })
    }
}

/// How many times a read re-reads or amends the records before it walks the list, where the
/// set keeps changing while it reads.
const ATTEMPTS: usize = 3;

/// How long before a read began a thread change may be dated and still count as after it
/// (the hooks' clock and this process's are the same, CLOCK_MONOTONIC; this only keeps an
/// amend safe from any skew between CPUs: a change counted twice is only looked up twice).
const CHANGE_SLACK_NS: u64 = 10_000_000;

/// What the records stand for, where a later read may re-read or amend them instead of
/// walking the list: the kernel's set of threads they hold, and since when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Base {
    /// The kernel's counts the records agree with.
    set: TaskSet,
    /// `nr_threads` less the records' threads (the walk lists CPU 0's idle task beside the
    /// kernel's count, -1, and on this project's VM never PID 1's threads).
    offset: i64,
    /// CLOCK_MONOTONIC ns when the read that made them began.
    since_ns: u64,
}

/// How a walk's reads were served (the report's `meta.accounting.reads`): by walking the
/// list, by re-reading the last read's threads, by amending and re-reading them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WalkReads {
    pub walked_count: u64,
    pub reread_count: u64,
    pub amended_count: u64,
}

impl WalkReads {
    /// The reads since `before` (counts of the same walk, taken earlier).
    pub fn since(self, before: WalkReads) -> WalkReads {
        WalkReads {
            walked_count: self.walked_count.saturating_sub(before.walked_count),
            reread_count: self.reread_count.saturating_sub(before.reread_count),
            amended_count: self.amended_count.saturating_sub(before.amended_count),
        }
    }
}

/// A loaded task walk: its arrays (the records mapped) and its programs. Dropping it
/// unloads them.
pub struct TaskWalk {
    layout: WalkLayout,
    all_tasks: bool,
    capacity: u32,
    loaded: Loaded,
    /// Reads whether threads were created or reaped; `None` where `/proc` cannot tell, and
    /// then every read walks the list.
    task_set: Option<TaskSetReader>,
    /// The threads created or exiting, where the kernel's hooks write them; `None` until
    /// [`TaskWalk::follow_changes`], and then no read amends.
    changes: Option<changes::ThreadChanges>,
    /// What the records stand for, where a later read may re-read or amend them.
    base: Option<Base>,
    /// How many records the last read left.
    walked: u32,
    /// How many times the array was found full and made larger.
    pub grown: u32,
    /// Reads that walked the list, reads served by a re-read, and by an amend and re-read.
    pub walks: u64,
    pub rereads: u64,
    pub amends: u64,
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
            changes: None,
            base: None,
            walked: 0,
            grown: 0,
            walks: 0,
            rereads: 0,
            amends: 0,
        })
    }

    /// Records of the array's size.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// How its reads were served so far.
    pub fn reads(&self) -> WalkReads {
        WalkReads {
            walked_count: self.walks,
            reread_count: self.rereads,
            amended_count: self.amends,
        }
    }

    /// Amends reads by the threads created or exiting that the kernel's hooks write (the
    /// `THREAD_CHANGES` ring, its lost count) where the set of threads changed.
    pub fn follow_changes(&mut self, ring: RingBuf<MapData>, lost: Array<MapData, u64>) {
        self.changes = Some(changes::ThreadChanges::new(ring, lost));
    }

    /// Every thread alive, read now: by a re-read of the last read's threads while the set
    /// is the same as then, by an amend and re-read where it changed, else by walking the
    /// list. A record may be vacant ([`TaskRecord::vacant`]; the rules for exited threads
    /// leave it out).
    pub fn walk(&mut self) -> Result<&[TaskRecord], WalkError> {
        let began_ns = super::monotonic_ns();
        let mut now = self.read_set();
        for _ in 0..ATTEMPTS {
            let (Some(set), Some(base)) = (now, self.base) else {
                break;
            };
            // (After the counts: a thread they count was created before its hook wrote it.)
            if let Some(changes) = &mut self.changes {
                changes.drain(super::monotonic_ns());
            }
            let served = if set == base.set {
                self.reread(set)?
            } else {
                match self.amend(set, base)? {
                    Some(served) => served,
                    None => break,
                }
            };
            if served {
                self.served(set, began_ns);
                return Ok(self.loaded.mapped.records(self.walked as usize));
            }
            // The set changed during the read: again, by an amend (the records, amended or
            // not, still stand for the base, from when it began).
            now = self.read_set();
        }
        self.walk_list(now, began_ns)
    }

    /// The kernel's set of threads now; without the re-read program the counts serve
    /// nothing and are not read.
    fn read_set(&mut self) -> Option<TaskSet> {
        match (&mut self.task_set, &self.loaded.reread) {
            (Some(reader), Some(_)) => reader.read(),
            _ => None,
        }
    }

    /// Re-reads the last read's threads; whether the set stayed `set` meanwhile (else the
    /// read is void).
    fn reread(&mut self, set: TaskSet) -> Result<bool, WalkError> {
        let Some(reread) = &self.loaded.reread else {
            return Ok(false);
        };
        test_run(reread, self.walked).map_err(|source| WalkError::Sys {
            call: "BPF_PROG_TEST_RUN (the re-read)",
            source,
        })?;
        let same = self.task_set.as_mut().and_then(TaskSetReader::read) == Some(set);
        self.rereads += u64::from(same);
        Ok(same)
    }

    /// Amends the last read's records by the threads that may have changed since it began
    /// ([`amend`]), then re-reads them all; whether the set stayed `set` meanwhile and the
    /// records hold as many threads as it counts (else the read is void), or `None` where no
    /// amend can serve (no amend program or hooks, changes lost, too many, or the array too
    /// small).
    fn amend(&mut self, set: TaskSet, base: Base) -> Result<Option<bool>, WalkError> {
        let (Some(amend), Some(changes)) = (&mut self.loaded.amend, &self.changes) else {
            return Ok(None);
        };
        let records = self.loaded.mapped.records(self.walked as usize);
        let plan = changes
            .since(base.since_ns.saturating_sub(CHANGE_SLACK_NS))
            .and_then(|changed| amend::plan(records, &changed, self.capacity));
        let Some(plan) = plan else {
            return Ok(None);
        };
        amend.items.write_u64s(&plan.items);
        test_run(&amend.program, plan.items.len() as u32).map_err(|source| WalkError::Sys {
            call: "BPF_PROG_TEST_RUN (the amend)",
            source,
        })?;
        self.walked = plan.count;
        if !self.reread(set)? {
            return Ok(Some(false));
        }
        self.rereads -= 1;
        let records = self.loaded.mapped.records(self.walked as usize);
        let held = records.iter().filter(|r| !r.is_vacant()).count() as i64;
        let agrees = held + base.offset == set.threads as i64;
        self.amends += u64::from(agrees);
        Ok(Some(agrees))
    }

    /// A re-read or amend served: the records stand for `set` as read from `began_ns`.
    fn served(&mut self, set: TaskSet, began_ns: u64) {
        if let Some(base) = &mut self.base {
            base.set = set;
            base.since_ns = began_ns;
        }
        self.forget_changes(began_ns);
    }

    /// Forgets the thread changes no amend of a read that began at `began_ns` needs.
    fn forget_changes(&mut self, began_ns: u64) {
        if let Some(changes) = &mut self.changes {
            changes.forget_before(began_ns.saturating_sub(CHANGE_SLACK_NS));
        }
    }

    /// Re-reads the last read's threads whatever the set (tests: a thread of this process
    /// alive since the walk is read as it stands).
    #[cfg(test)]
    fn reread_now(&mut self) -> &[TaskRecord] {
        test_run(self.loaded.reread.as_ref().unwrap(), self.walked).unwrap();
        self.loaded.mapped.records(self.walked as usize)
    }

    /// Runs the amend of `plan` whatever the set (tests).
    #[cfg(test)]
    fn amend_now(&mut self, plan: &amend::Plan) {
        let amend = self.loaded.amend.as_mut().unwrap();
        amend.items.write_u64s(&plan.items);
        test_run(&amend.program, plan.items.len() as u32).unwrap();
        self.walked = plan.count;
    }

    /// Walks the list (`before`: the set read just before, if it could be; `began_ns`: when
    /// the read began); an array found full is replaced by one twice as large and the walk
    /// made again, so every thread alive is in the records.
    fn walk_list(
        &mut self,
        before: Option<TaskSet>,
        began_ns: u64,
    ) -> Result<&[TaskRecord], WalkError> {
        self.base = None;
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
                    self.base = before.and_then(|set| self.base_of_walk(set, count, began_ns));
                    self.forget_changes(began_ns);
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

    /// What a walk of `count` threads stands for, where the set read before it (`before`) is
    /// still the set after it (none came or went during the walk) and the count agrees with
    /// the kernel's: the walk lists CPU 0's idle task besides the `nr_threads` threads, or
    /// fewer where the kernel keeps some out of it (on this project's VM the walk never lists
    /// PID 1, its guest agent, or that process's threads). More than that with the set the
    /// same means `/proc/loadavg` counts fewer threads than the kernel has (a container's own
    /// `/proc`): then no read is a re-read from then on.
    fn base_of_walk(&mut self, before: TaskSet, count: u32, since_ns: u64) -> Option<Base> {
        let after = self.task_set.as_mut().and_then(TaskSetReader::read);
        if after != Some(before) {
            return None;
        }
        if !walk_within_count(count, before.threads) {
            tracing::debug!(
                "task walk: {count} threads walked, {} counted by /proc/loadavg: no re-reads",
                before.threads
            );
            self.task_set = None;
            return None;
        }
        Some(Base {
            set: before,
            offset: before.threads as i64 - i64::from(count),
            since_ns,
        })
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
            "task walk: {} reads walked the list, {} re-read its threads, {} amended them",
            self.walks,
            self.rereads,
            self.amends
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

    /// A thread of this process that waits until the sender is dropped, and its id.
    fn parked_thread() -> (
        std::sync::mpsc::Sender<()>,
        std::thread::JoinHandle<()>,
        u32,
    ) {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (born_tx, born_rx) = std::sync::mpsc::channel();
        let child = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            born_tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let _ = rx.recv();
        });
        (tx, child, born_rx.recv().unwrap())
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
            let (tx, child, child_tid) = parked_thread();
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
    fn an_amend_writes_a_thread_created_and_vacates_one_reaped() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return; // the kernel refuses the programs
        }
        let btf = Btf::from_sys_fs().unwrap();
        let kernel = super::super::KernelLayout::read().unwrap().0;
        let layout = WalkLayout::read(&btf, kernel.task).unwrap();
        drop(btf);
        let created = |tid| cg_common::ThreadChange {
            tid,
            kind: cg_common::thread_change::CREATED,
            at_ns: 0,
        };
        for all in [false, true] {
            let mut walk = TaskWalk::new(layout.clone(), all, threads_alive().unwrap()).unwrap();
            assert!(
                walk.loaded.amend.is_some(),
                "the development VM's kernel takes it"
            );
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() } as u32;
            let walked = walk.walk().unwrap().to_vec();
            let me = *walked.iter().find(|r| r.tid == tid).unwrap();
            let (tx, child, child_tid) = parked_thread();
            // The thread created goes at the end (no record is vacant), whole.
            let at = walked.len();
            // (Beside it, any thread that had begun to exit when walked: other tests' threads.)
            let plan = amend::plan(&walked, &[created(child_tid)], walk.capacity).unwrap();
            assert!(plan.items.contains(&amend::item(child_tid, at as u32)));
            assert_eq!(plan.count as usize, at + 1);
            walk.amend_now(&plan);
            let records = walk.reread_now().to_vec();
            assert_eq!(records.len(), at + 1);
            let new = records[at];
            assert_eq!((new.tgid, new.tid, new.exit_state), (me.tgid, child_tid, 0));
            assert!(new.start_ns > me.start_ns, "{new:?}");
            assert_eq!(new.process_start_ns, me.process_start_ns, "--all: {all}");
            assert_eq!(new.task_flags & TaskRecord::PF_EXITING, 0);
            assert!(
                records[..at]
                    .iter()
                    .zip(&walked)
                    .all(|(r, w)| (r.tgid, r.tid, r.start_ns) == (w.tgid, w.tid, w.start_ns))
            );
            // Reaped (gone from /proc, not only joined: a join returns before the kernel
            // reaps the thread), it leaves its record vacant.
            drop(tx);
            child.join().unwrap();
            let task_dir = format!("/proc/self/task/{child_tid}");
            for _ in 0..1000 {
                if !std::path::Path::new(&task_dir).exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let exiting = cg_common::ThreadChange {
                kind: cg_common::thread_change::EXITING,
                ..created(child_tid)
            };
            let plan = amend::plan(&records, &[exiting], walk.capacity).unwrap();
            assert!(plan.items.contains(&amend::item(child_tid, at as u32)));
            walk.amend_now(&plan);
            let records = walk.reread_now();
            assert!(records[at].is_vacant(), "{:?}", records[at]);
            assert_eq!(records[at], TaskRecord::vacant());
        }
    }

    /// The tid and start time of every thread the records hold.
    fn threads_of(records: &[TaskRecord]) -> std::collections::BTreeSet<(u32, u32, u64)> {
        records
            .iter()
            .filter(|r| !r.is_vacant())
            .map(|r| (r.tgid, r.tid, r.start_ns))
            .collect()
    }

    #[test]
    fn amends_by_the_kernels_hooks_agree_with_a_walk_made_right_after() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let config = super::super::ProbeConfig {
            accounting: super::super::Accounting::Iterator,
            all_tasks: true,
            ..Default::default()
        };
        let mut probes = super::super::Probes::load(&config, &mut || None).unwrap();
        let Some(super::super::Walker::Open(walk)) =
            probes.iterator.as_mut().map(|state| &mut state.walker)
        else {
            panic!("the development VM's kernel runs the open-coded walk");
        };
        assert!(walk.changes.is_some(), "task_newtask is attached");
        let mut reader = TaskSetReader::open().unwrap();
        walk.walk().unwrap();
        // Threads come and go between reads (some live across several); after each read
        // served by an amend, a walk of the list with the kernel's set unchanged since must
        // find the same threads.
        let mut parked = std::collections::VecDeque::new();
        let (mut compared, mut amended) = (0, 0);
        for round in 0..60 {
            for _ in 0..round % 4 {
                let (tx, rx) = std::sync::mpsc::channel::<()>();
                parked.push_back((tx, std::thread::spawn(move || rx.recv().is_ok())));
            }
            while parked.len() > 3 {
                let (tx, thread) = parked.pop_front().unwrap();
                drop(tx);
                thread.join().unwrap();
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
            let amends = walk.amends;
            let after_amend = threads_of(walk.walk().unwrap());
            if walk.amends == amends {
                continue;
            }
            amended += 1;
            let set = walk.base.unwrap().set;
            let before = reader.read();
            let walked = threads_of(
                walk.walk_list(before, super::super::monotonic_ns())
                    .unwrap(),
            );
            if before != Some(set) || reader.read() != Some(set) {
                continue; // the kernel's set changed in between: nothing to compare
            }
            // (PID 1's threads, never walked on the development VM, an amend may hold.)
            let extra: Vec<_> = after_amend
                .difference(&walked)
                .filter(|t| t.0 != 1)
                .collect();
            let missing: Vec<_> = walked.difference(&after_amend).collect();
            assert!(
                extra.is_empty() && missing.is_empty(),
                "{extra:?} {missing:?}"
            );
            compared += 1;
        }
        assert!(
            amended >= 20 && compared >= 10,
            "{amended} amends, {compared} compared"
        );
        for (tx, thread) in parked {
            drop(tx);
            thread.join().unwrap();
        }
    }

    #[test]
    fn reads_the_threads_alive() {
        assert!(threads_alive().is_some_and(|n| n >= 1));
    }
}
