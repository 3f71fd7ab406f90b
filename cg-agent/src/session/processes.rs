//! The processes a run has seen: who they are (pid, parent, command line), when they came and
//! went, how they ended. Fed by the probes' lifecycle events and by `/proc`.
//!
//! Each process gets a [`ProcId`]: a pid that is reused after its process exited becomes a
//! new ProcId, so two processes never share figures. The kernel names each process by its pid
//! and start time, and each thread by its ids and its own start time; a thread belongs to
//! the latest process with its tgid that started before it. So even within one interval,
//! and even when an exit event was lost, a reused pid is another process.
//!
//! `/proc` is read by hand here, not through the procfs crate. Measured against procfs 0.17
//! (`cargo xtask bench --proc`: release build, this 2-CPU VM's ~100 processes, median of 31
//! rounds, three runs): a new process's owner, `stat` and `cmdline` take 13.8-14.6 µs by hand
//! and 3.6-7.1 % more through procfs; the end-of-run liveness check (`stat`'s state and start
//! time) 7.7-8.3 µs by hand and 11.1-14.1 % more through procfs. procfs is within 10 % on the
//! first but does another job: its `cmdline()` refuses a command line with a non-UTF-8
//! argument (the whole line is lost; ours keeps every argument, the bad bytes replaced), and
//! its `stat` parser panics on the line `) (` that the proc_files fuzz target found in ours
//! (fuzz/regressions/proc_files/stat-close-paren-first; ours returns `None`).

use std::{collections::BTreeMap, fs, path::PathBuf};

use cg_common::ThreadKey;

use crate::{
    attribution::ProcId,
    cgroup::{self, CgroupError, CgroupInfo},
    fast_hash,
    probes::Lifecycle,
    small_map::SmallMap,
};

/// How a process ended, as far as we know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    Exited(i32),
    Signaled(i32),
}

impl Ending {
    /// Decodes the kernel's `task_struct.exit_code` (or a wait status).
    pub fn from_kernel_code(code: u32) -> Self {
        let signal = (code & 0x7f) as i32;
        if signal == 0 {
            Ending::Exited(((code >> 8) & 0xff) as i32)
        } else {
            Ending::Signaled(signal)
        }
    }

    /// The shell's convention: the exit status, or 128 + the signal number.
    pub fn shell_code(self) -> i32 {
        match self {
            Ending::Exited(code) => code,
            Ending::Signaled(signal) => 128 + signal,
        }
    }

    /// The report's `(exit_code, exit_signal)` pair of an ending that may be unknown.
    pub fn code_and_signal(ending: Option<Ending>) -> (Option<i32>, Option<i32>) {
        match ending {
            Some(Ending::Exited(code)) => (Some(code), None),
            Some(Ending::Signaled(signal)) => (None, Some(signal)),
            None => (None, None),
        }
    }
}

/// One process.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessRecord {
    pub pid: u32,
    pub ppid: Option<u32>,
    pub comm: String,
    pub cmdline: Vec<String>,
    /// Owner: the real uid its exec event carried, else the owner of `/proc/PID` when it
    /// could be read.
    pub uid: Option<u32>,
    /// Monotonic ns when the run first saw it (its fork, or the start of the run).
    pub first_seen_ns: u64,
    /// The kernel's start time of the process (CLOCK_MONOTONIC ns), when an event gave it.
    pub start_ns: Option<u64>,
    pub ended_ns: Option<u64>,
    pub ending: Option<Ending>,
    /// The wrapped command or an attached pid (rather than a descendant).
    pub root: bool,
    /// Its cgroup, read from `/proc/PID/cgroup` when the process is first seen, at each exec
    /// and when the run ends (a process moved to another cgroup between those keeps the
    /// earlier one); `None` when it could not be read.
    pub cgroup: Option<CgroupInfo>,
    /// Names (`comm`) of its threads that ran, by tid: read from `/proc` when a thread is
    /// first seen running, and the kernel's last word when it exits. At most
    /// [`MAX_THREAD_NAMES`]; past that, threads show without a name.
    pub thread_names: SmallMap<u32, String>,
}

/// How many thread names one process keeps (a process that starts a thread per request
/// would otherwise grow this without bound).
pub const MAX_THREAD_NAMES: usize = 4096;

/// A small `/proc` file (a thread's `comm`), read up to 256 bytes: what is beyond is not a
/// name.
fn read_small(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    fs::File::open(path)?.take(256).read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// A thread name as read from the kernel: at most the kernel's 16 bytes, without the line
/// feed `/proc` ends it with. Control characters a thread named itself with are kept, as
/// in a command line: every output shows them escaped ([`crate::printable`]).
fn clean_thread_name(raw: &str) -> String {
    raw.trim_end_matches('\n')
        .chars()
        .filter(|&c| c != '\0')
        .take(cg_common::COMM_LEN)
        .collect()
}

/// What the session must do after the next snapshot because of the events just applied.
#[derive(Debug, Default, PartialEq)]
pub struct Cleanup {
    /// Threads that exited: delete their kernel totals once their last time was read.
    pub threads: Vec<ThreadKey>,
    /// Processes that exited: stop following their pid.
    pub processes: Vec<ProcId>,
}

/// The table itself.
#[derive(Debug)]
pub struct ProcessTable {
    /// Every thread of the machine is accounted (`--all`).
    all: bool,
    proc_root: PathBuf,
    records: Vec<ProcessRecord>,
    /// Live pid -> its current ProcId.
    live: fast_hash::HashMap<u32, ProcId>,
    /// Pid -> earlier processes that had it (oldest first), for threads of theirs whose
    /// last time is read after the pid went to another process.
    earlier: fast_hash::HashMap<u32, Vec<ProcId>>,
    /// Records added or changed since [`ProcessTable::take_changed`], when tracked (the live
    /// view copies only these).
    changed: Option<Vec<ProcId>>,
    /// Bounded memory ([`Self::forget_retired`]): processes retired since the last
    /// [`Self::apply`], whose ids are free from then on.
    retired: Option<Vec<ProcId>>,
    /// Ids of forgotten processes, given to the next processes seen.
    free: Vec<ProcId>,
    /// Processes found ended because their pid went to another (their exit event was lost):
    /// retired, in bounded-memory mode, like those that exited.
    orphans: Vec<ProcId>,
}

impl ProcessTable {
    pub fn new(all: bool, proc_root: impl Into<PathBuf>) -> Self {
        ProcessTable {
            all,
            proc_root: proc_root.into(),
            records: Vec::new(),
            live: fast_hash::HashMap::default(),
            earlier: fast_hash::HashMap::default(),
            changed: None,
            retired: None,
            free: Vec::new(),
            orphans: Vec::new(),
        }
    }

    /// Bounded memory (`cg-trace serve`): a process retired (exited, its last time read) is
    /// forgotten at the next [`Self::apply`], once the interval that retired it was handed
    /// on, and its [`ProcId`] goes to a later process. Whoever keeps figures per ProcId must
    /// then tell processes apart by pid and `first_seen_ns` (a reused id is always reported
    /// as changed). The table then holds the live processes, not every one ever seen.
    pub fn forget_retired(&mut self) {
        self.retired.get_or_insert_with(Vec::new);
    }

    /// Records held (live, recently ended and free slots together).
    pub fn capacity_held(&self) -> (usize, usize) {
        (self.records.len(), self.free.len())
    }

    /// Starts remembering which records are added or changed (see [`Self::take_changed`]).
    pub fn track_changes(&mut self) {
        self.changed.get_or_insert_with(Vec::new);
    }

    /// The records added or changed since the last call (in no particular order, possibly
    /// repeated); empty unless [`Self::track_changes`] was called.
    pub fn take_changed(&mut self) -> Vec<ProcId> {
        self.changed
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    fn mark_changed(&mut self, id: ProcId) {
        if let Some(changed) = &mut self.changed {
            changed.push(id);
        }
    }

    /// Whether `pid`'s threads are accounted one by one.
    pub fn is_target(&self, pid: u32) -> bool {
        self.all || self.live.contains_key(&pid)
    }

    /// Adds a root target (the wrapped command, an attached pid) found running now.
    pub fn add_root(&mut self, pid: u32, now_ns: u64) -> ProcId {
        let id = self.insert(pid, None, now_ns);
        self.records[id as usize].root = true;
        id
    }

    /// The ProcId of `pid`, whose threads the kernel accounted, registering it from `/proc`
    /// when first seen (with `--all`, processes that existed before the run show up this way;
    /// otherwise a child whose fork event was lost).
    pub fn id_of(&mut self, pid: u32, now_ns: u64) -> ProcId {
        match self.live.get(&pid) {
            Some(id) => *id,
            None => self.insert(pid, None, now_ns),
        }
    }

    /// Whether process `id` can own `thread`: the thread started while the process lived.
    fn owns(&self, id: ProcId, thread: &ThreadKey) -> bool {
        let record = &self.records[id as usize];
        record.start_ns.is_none_or(|s| s <= thread.start_ns)
            && record.ended_ns.is_none_or(|e| thread.start_ns <= e)
    }

    /// The known process that `thread` belongs to: the latest with its tgid that was alive
    /// when the thread started.
    fn process_of_thread(&self, thread: &ThreadKey) -> Option<ProcId> {
        if let Some(&id) = self.live.get(&thread.tgid)
            && self.owns(id, thread)
        {
            return Some(id);
        }
        self.earlier
            .get(&thread.tgid)
            .and_then(|ids| ids.iter().rev().copied().find(|&id| self.owns(id, thread)))
    }

    /// Whether `thread`'s time is accounted one by one: it belongs to a target process (a
    /// task that took an exited target's pid does not).
    pub fn is_target_thread(&self, thread: &ThreadKey) -> bool {
        self.all || self.process_of_thread(thread).is_some()
    }

    /// The ProcId of the process that thread `thread` belongs to (see
    /// [`Self::process_of_thread`]); a process the kernel accounts but whose fork event was
    /// not seen is registered from `/proc` (with `--all`, those that existed before the run).
    pub fn id_of_thread(&mut self, thread: ThreadKey, now_ns: u64) -> ProcId {
        if let Some(id) = self.process_of_thread(&thread) {
            return id;
        }
        if self.live.contains_key(&thread.tgid) {
            // The pid's known process ended before this thread started: a new one.
            self.replace_live(thread.tgid, now_ns);
        }
        self.id_of(thread.tgid, now_ns)
    }

    /// Makes `id` the process of its pid, moving the one it replaces to the earlier ones (as
    /// ended now if nothing said it ended: its exit event was lost).
    fn replace_live(&mut self, pid: u32, now_ns: u64) {
        if let Some(old) = self.live.remove(&pid) {
            let record = &mut self.records[old as usize];
            if record.ended_ns.is_none() {
                record.ended_ns = Some(now_ns);
                self.mark_changed(old);
            }
            self.earlier.entry(pid).or_default().push(old);
            if self.retired.is_some() {
                self.orphans.push(old);
            }
        }
    }

    fn insert(&mut self, pid: u32, ppid: Option<u32>, now_ns: u64) -> ProcId {
        let mut record = ProcessRecord {
            pid,
            ppid,
            comm: String::new(),
            cmdline: Vec::new(),
            uid: None,
            first_seen_ns: now_ns,
            start_ns: None,
            ended_ns: None,
            ending: None,
            root: false,
            thread_names: SmallMap::new(),
            cgroup: None,
        };
        self.refresh_from_proc(&mut record);
        let id = match self.free.pop() {
            Some(id) => {
                self.records[id as usize] = record;
                id
            }
            None => {
                self.records.push(record);
                self.records.len() as ProcId - 1
            }
        };
        self.live.insert(pid, id);
        self.mark_changed(id);
        id
    }

    /// Records the name of `thread` of process `id` the first time it is seen running (from
    /// `/proc/TGID/task/TID/comm`, where the thread still is).
    pub fn name_thread(&mut self, id: ProcId, thread: ThreadKey) {
        let Some(record) = self.records.get(id as usize) else {
            return;
        };
        if record.thread_names.contains_key(&thread.tid)
            || record.thread_names.len() >= MAX_THREAD_NAMES
        {
            return;
        }
        let path = self
            .proc_root
            .join(thread.tgid.to_string())
            .join("task")
            .join(thread.tid.to_string())
            .join("comm");
        let Ok(raw) = read_small(&path) else {
            return;
        };
        let name = clean_thread_name(&raw);
        self.records[id as usize]
            .thread_names
            .insert(thread.tid, name);
        self.mark_changed(id);
    }

    /// Reads comm, parent, command line and cgroup from `/proc/PID` where still there.
    fn refresh_from_proc(&self, record: &mut ProcessRecord) {
        let dir = self.proc_root.join(record.pid.to_string());
        if let Ok(meta) = fs::metadata(&dir) {
            use std::os::unix::fs::MetadataExt;
            record.uid = Some(meta.uid());
        }
        if let Ok(stat) = fs::read_to_string(dir.join("stat"))
            && let Some((comm, ppid)) = parse_stat(&stat)
        {
            record.comm = comm;
            if record.ppid.is_none() {
                record.ppid = ppid;
            }
        }
        if let Ok(cmdline) = fs::read(dir.join("cmdline")) {
            let args = parse_cmdline(&cmdline);
            if !args.is_empty() {
                record.cmdline = args;
            }
        }
        match cgroup::of_pid(&self.proc_root, record.pid) {
            Ok(info) => record.cgroup = Some(info),
            // Gone already: what was read before stays.
            Err(CgroupError::Read { .. }) => {}
            Err(error) => tracing::warn!("process {}: {error}", record.pid),
        }
    }

    /// Applies lifecycle events; returns what to clean up after the next snapshot.
    pub fn apply(&mut self, events: &[Lifecycle]) -> Cleanup {
        let mut cleanup = Cleanup::default();
        if let Some(retired) = self.retired.as_mut() {
            for id in retired.drain(..) {
                let record = &mut self.records[id as usize];
                // Keep the slot, not what it held.
                record.comm = String::new();
                record.cmdline = Vec::new();
                record.thread_names = SmallMap::new();
                record.cgroup = None;
                self.free.push(id);
            }
            cleanup.processes.append(&mut self.orphans);
        }
        for event in events {
            match *event {
                Lifecycle::Fork {
                    pid,
                    ppid,
                    start_ns,
                    timestamp_ns,
                } => {
                    match self.live.get(&pid).map(|&id| &self.records[id as usize]) {
                        // Registered already (the wrapped command, from /proc): this is it.
                        Some(r)
                            if r.ended_ns.is_none() && r.start_ns.is_none_or(|s| s == start_ns) =>
                        {
                            let id = self.live[&pid];
                            self.records[id as usize].start_ns = Some(start_ns);
                        }
                        // A reused pid: the earlier process is finished (even if its exit
                        // event was lost).
                        _ => {
                            self.replace_live(pid, timestamp_ns);
                            let id = self.insert(pid, Some(ppid), timestamp_ns);
                            self.records[id as usize].start_ns = Some(start_ns);
                        }
                    }
                }
                Lifecycle::Exec {
                    pid,
                    ref comm,
                    ref filename,
                    uid,
                    ..
                } => {
                    if let Some(&id) = self.live.get(&pid) {
                        let mut record = self.records[id as usize].clone();
                        record.comm = comm.clone();
                        record.cmdline = Vec::new();
                        self.refresh_from_proc(&mut record);
                        // The kernel's word, even when the process is gone from /proc.
                        record.uid = Some(uid);
                        record.comm = comm.clone();
                        if record.cmdline.is_empty() && !filename.is_empty() {
                            record.cmdline = vec![filename.clone()];
                        }
                        self.records[id as usize] = record;
                        self.mark_changed(id);
                    }
                }
                Lifecycle::Exit {
                    pid,
                    tid,
                    process_start_ns,
                    thread_start_ns,
                    ref comm,
                    exit_code,
                    process_exited,
                    timestamp_ns,
                } => {
                    let thread = ThreadKey {
                        tgid: pid,
                        tid,
                        start_ns: thread_start_ns,
                    };
                    cleanup.threads.push(thread);
                    // The kernel's name of the thread as it ended (it may have renamed itself
                    // after it was first seen).
                    if let Some(owner) = self.process_of_thread(&thread) {
                        let names = &mut self.records[owner as usize].thread_names;
                        let name = clean_thread_name(comm);
                        if !name.is_empty()
                            && (names.contains_key(&tid) || names.len() < MAX_THREAD_NAMES)
                        {
                            names.insert(tid, name);
                        }
                    }
                    if !process_exited {
                        continue;
                    }
                    let is_it = |id: &ProcId| {
                        self.records[*id as usize]
                            .start_ns
                            .is_none_or(|s| s == process_start_ns)
                    };
                    let id = self.live.get(&pid).copied().filter(is_it).or_else(|| {
                        self.earlier
                            .get(&pid)
                            .and_then(|ids| ids.iter().rev().copied().find(is_it))
                    });
                    if let Some(id) = id {
                        let record = &mut self.records[id as usize];
                        record.start_ns = Some(process_start_ns);
                        record.ended_ns = Some(timestamp_ns);
                        record.ending = Some(Ending::from_kernel_code(exit_code));
                        if record.comm.is_empty() {
                            record.comm = comm.clone();
                        }
                        self.mark_changed(id);
                        cleanup.processes.push(id);
                    }
                }
            }
        }
        cleanup
    }

    /// Forgets the pid of a process that exited (after its last time was read), so that the
    /// pid, if reused, is a new process.
    pub fn retire(&mut self, id: ProcId) {
        let Some(record) = self.records.get(id as usize) else {
            return;
        };
        let pid = record.pid;
        let ended = record.ended_ns.is_some();
        if self.live.get(&pid) == Some(&id) && ended {
            self.live.remove(&pid);
            if self.retired.is_none() {
                self.earlier.entry(pid).or_default().push(id);
            }
        }
        if let Some(retired) = self.retired.as_mut()
            && ended
            && self.live.get(&pid) != Some(&id)
            && !retired.contains(&id)
        {
            if let Some(ids) = self.earlier.get_mut(&pid) {
                ids.retain(|&e| e != id);
                if ids.is_empty() {
                    self.earlier.remove(&pid);
                }
            }
            retired.push(id);
        }
    }

    /// Marks `pid` as ended now if it is still live (e.g. the wrapped command, whose status
    /// we got from waitpid).
    pub fn set_ending(&mut self, pid: u32, ending: Ending, now_ns: u64) {
        if let Some(&id) = self.live.get(&pid) {
            let record = &mut self.records[id as usize];
            record.ending = Some(ending);
            record.ended_ns.get_or_insert(now_ns);
            self.mark_changed(id);
        }
    }

    /// Targets that are still running now (no exit seen, and `/proc` still has them as the
    /// same process): the wrapped command or a daemon it started, when the run ends.
    pub fn still_running(&mut self) -> Vec<&ProcessRecord> {
        let mut running: Vec<ProcId> = self
            .live
            .values()
            .copied()
            .filter(|&id| {
                let r = &self.records[id as usize];
                r.ended_ns.is_none() && self.is_alive(r)
            })
            .collect();
        running.sort_unstable();
        // What it runs now (it may have exec'd since its last event was read).
        for &id in &running {
            let mut record = self.records[id as usize].clone();
            self.refresh_from_proc(&mut record);
            self.records[id as usize] = record;
        }
        running
            .iter()
            .map(|&id| &self.records[id as usize])
            .collect()
    }

    /// Whether `/proc` has a live (not zombie) process with the record's pid that started
    /// when it did (to within a few clock ticks; any, when the start time is unknown).
    fn is_alive(&self, record: &ProcessRecord) -> bool {
        let Ok(stat) = fs::read_to_string(self.proc_root.join(record.pid.to_string()).join("stat"))
        else {
            return false;
        };
        let Some(fields) = stat.rfind(')').map(|close| &stat[close + 1..]) else {
            return false;
        };
        let fields: Vec<&str> = fields.split_whitespace().collect();
        // state is field 3 of stat, starttime field 22 (clock ticks since boot).
        if matches!(fields.first(), Some(&"Z") | Some(&"X") | None) {
            return false;
        }
        let Some(start_ns) = record.start_ns else {
            return true;
        };
        let Some(ticks) = fields.get(19).and_then(|t| t.parse::<u64>().ok()) else {
            return true;
        };
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        // /proc counts from boot including suspend (CLOCK_BOOTTIME), the kernel's start time
        // does not (CLOCK_MONOTONIC).
        let clock_ns = |clock| {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_gettime writes into the timespec we own.
            unsafe { libc::clock_gettime(clock, &mut ts) };
            ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
        };
        let suspended_ns =
            clock_ns(libc::CLOCK_BOOTTIME).saturating_sub(clock_ns(libc::CLOCK_MONOTONIC));
        let proc_start_ns = ticks.saturating_mul(1_000_000_000 / hz);
        proc_start_ns.abs_diff(start_ns + suspended_ns) <= 3 * (1_000_000_000 / hz)
    }

    /// Targets that have not exited.
    pub fn live_targets(&self) -> usize {
        self.live
            .values()
            .filter(|id| self.records[**id as usize].ended_ns.is_none())
            .count()
    }

    pub fn records(&self) -> &[ProcessRecord] {
        &self.records
    }

    /// ProcIds keyed by pid for every process seen, latest instance last.
    pub fn ids_by_pid(&self) -> BTreeMap<u32, Vec<ProcId>> {
        let mut map: BTreeMap<u32, Vec<ProcId>> = BTreeMap::new();
        for (id, r) in self.records.iter().enumerate() {
            map.entry(r.pid).or_default().push(id as ProcId);
        }
        map
    }
}

/// `/proc/PID/stat`'s command name and parent pid (`pid (comm) state ppid ...`: comm may
/// hold spaces and parentheses); `None` when the line has no `(comm)`.
pub fn parse_stat(stat: &str) -> Option<(String, Option<u32>)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')').filter(|&close| close > open)?;
    let comm = stat[open + 1..close].to_string();
    let ppid = stat[close + 1..]
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok());
    Some((comm, ppid))
}

/// `/proc/PID/cmdline`: the arguments, NUL-separated (empty ones dropped).
pub fn parse_cmdline(cmdline: &[u8]) -> Vec<String> {
    cmdline
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `proc_files` fuzz target: a `)` before the first `(` panicked.
    #[test]
    fn a_stat_line_with_the_parentheses_the_wrong_way_round_is_refused() {
        let stat = include_str!("../../../fuzz/regressions/proc_files/stat-close-paren-first");
        assert_eq!(parse_stat(stat), None);
        assert_eq!(
            parse_stat("7 (a) b) S 1 7"),
            Some(("a) b".to_string(), Some(1)))
        );
    }

    fn fake_proc(pid: u32, stat: &str, cmdline: &[u8]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(pid.to_string());
        fs::create_dir_all(&p).unwrap();
        fs::write(p.join("stat"), stat).unwrap();
        fs::write(p.join("cmdline"), cmdline).unwrap();
        dir
    }

    #[test]
    fn decodes_exit_codes() {
        assert_eq!(Ending::from_kernel_code(3 << 8), Ending::Exited(3));
        assert_eq!(Ending::from_kernel_code(9), Ending::Signaled(9));
        assert_eq!(Ending::Signaled(15).shell_code(), 143);
        assert_eq!(Ending::Exited(0).shell_code(), 0);
    }

    #[test]
    fn reads_comm_with_spaces_and_parent_from_proc() {
        let root = fake_proc(40, "40 (my (odd) prog) S 7 40 40 0", b"./prog\0--fast\0");
        let mut table = ProcessTable::new(false, root.path());
        let id = table.add_root(40, 5);
        let r = &table.records()[id as usize];
        assert_eq!(r.comm, "my (odd) prog");
        assert_eq!(r.ppid, Some(7));
        assert_eq!(r.cmdline, vec!["./prog", "--fast"]);
        assert!(r.root);
        assert!(table.is_target(40));
        assert!(!table.is_target(41));
    }

    #[test]
    fn follows_forks_and_records_exits() {
        let root = tempfile::tempdir().unwrap();
        let mut table = ProcessTable::new(false, root.path());
        table.add_root(10, 0);
        let cleanup = table.apply(&[
            Lifecycle::Fork {
                pid: 11,
                ppid: 10,
                start_ns: 1,
                timestamp_ns: 1,
            },
            Lifecycle::Exec {
                pid: 11,
                comm: "worker".into(),
                filename: "/usr/bin/worker".into(),
                uid: 65534,
                timestamp_ns: 2,
            },
            Lifecycle::Exit {
                pid: 11,
                tid: 12,
                process_start_ns: 1,
                thread_start_ns: 2,
                comm: "worker".into(),
                exit_code: 0,
                process_exited: false,
                timestamp_ns: 3,
            },
            Lifecycle::Exit {
                pid: 11,
                tid: 11,
                process_start_ns: 1,
                thread_start_ns: 1,
                comm: "worker".into(),
                exit_code: 2 << 8,
                process_exited: true,
                timestamp_ns: 4,
            },
        ]);
        assert_eq!(cleanup.threads.len(), 2);
        assert_eq!(cleanup.processes, vec![1]);
        let child = table.records().iter().find(|r| r.pid == 11).unwrap();
        assert_eq!(child.ppid, Some(10));
        assert_eq!(child.comm, "worker");
        assert_eq!(child.cmdline, vec!["/usr/bin/worker"]);
        // Gone before /proc was read: the uid is the exec event's.
        assert_eq!(child.uid, Some(65534));
        assert_eq!(child.ending, Some(Ending::Exited(2)));
        assert_eq!(table.live_targets(), 1);
        // Still a target until retired, so its last slices are still charged to it.
        assert!(table.is_target(11));
        table.retire(1);
        assert!(!table.is_target(11));
    }

    fn fork(pid: u32, start_ns: u64) -> Lifecycle {
        Lifecycle::Fork {
            pid,
            ppid: 10,
            start_ns,
            timestamp_ns: start_ns,
        }
    }

    fn exit(pid: u32, start_ns: u64, at_ns: u64) -> Lifecycle {
        Lifecycle::Exit {
            pid,
            tid: pid,
            process_start_ns: start_ns,
            thread_start_ns: start_ns,
            comm: "a".into(),
            exit_code: 0,
            process_exited: true,
            timestamp_ns: at_ns,
        }
    }

    fn thread(tgid: u32, tid: u32, start_ns: u64) -> ThreadKey {
        ThreadKey {
            tgid,
            tid,
            start_ns,
        }
    }

    /// Churn through a table: every round, 100 processes fork and exit (a tenth of them with
    /// their exit event lost, found ended when their pid is reused), and what the session
    /// would retire is retired. Returns the records the table holds at the end.
    fn churn(forget: bool, rounds: u64) -> usize {
        let root = tempfile::tempdir().unwrap();
        let mut table = ProcessTable::new(true, root.path());
        if forget {
            table.forget_retired();
        }
        table.track_changes();
        let mut t = 1;
        let mut waiting: Vec<ProcId> = Vec::new();
        for round in 0..rounds {
            let mut events = Vec::new();
            for k in 0..100u32 {
                let pid = 1000 + k;
                events.push(fork(pid, t));
                if !(round % 10 == 0 && k < 10) {
                    events.push(exit(pid, t, t + 1));
                }
                t += 2;
            }
            let cleanup = table.apply(&events);
            // The session retires once the last time was read: here at once.
            for id in waiting.drain(..) {
                table.retire(id);
            }
            waiting = cleanup.processes;
            let changed = table.take_changed();
            assert!(!changed.is_empty());
        }
        table.records().len()
    }

    #[test]
    fn a_table_that_forgets_holds_the_live_processes_not_every_one_ever_seen() {
        let few = churn(true, 100);
        let many = churn(true, 1_000);
        // 100 live at once plus those retired in the last rounds: not 100,000.
        assert!(many <= 400, "{many} records after 100,000 processes");
        assert_eq!(few, many, "the table grew with churn: {few} -> {many}");
        // Without forgetting, every process seen is kept (the report lists them all).
        assert_eq!(churn(false, 100), 100 * 100);
    }

    #[test]
    fn a_reused_id_is_reported_as_changed_with_its_new_process() {
        let root = tempfile::tempdir().unwrap();
        let mut table = ProcessTable::new(true, root.path());
        table.forget_retired();
        table.track_changes();
        let cleanup = table.apply(&[fork(20, 1), exit(20, 1, 2)]);
        table.retire(cleanup.processes[0]);
        table.take_changed();
        // Freed at the next apply, then given to the next process.
        table.apply(&[fork(30, 5)]);
        let changed = table.take_changed();
        assert_eq!(changed, vec![0]);
        assert_eq!(table.records()[0].pid, 30);
        assert_eq!(table.records()[0].ended_ns, None);
        assert_eq!(table.records().len(), 1);
        assert!(!table.ids_by_pid().contains_key(&20));
    }

    #[test]
    fn a_reused_pid_is_a_new_process() {
        let root = tempfile::tempdir().unwrap();
        let mut table = ProcessTable::new(false, root.path());
        table.add_root(10, 0);
        table.apply(&[fork(20, 1), exit(20, 1, 2), fork(20, 3)]);
        assert_eq!(table.ids_by_pid()[&20].len(), 2);
        assert_eq!(table.live_targets(), 2);
    }

    #[test]
    fn threads_of_two_processes_with_one_pid_in_one_interval_stay_apart() {
        // t=1 process A forks as pid 20 with a second thread (21, from t=5); it exits at t=8;
        // t=9 process B gets pid 20. The interval's slices, read after all of it, go by each
        // thread's start time: A's to A, B's to B.
        let root = tempfile::tempdir().unwrap();
        let mut table = ProcessTable::new(false, root.path());
        table.add_root(10, 0);
        table.apply(&[fork(20, 1), exit(20, 1, 8), fork(20, 9)]);
        let ids = table.ids_by_pid()[&20].clone();
        assert_eq!(ids.len(), 2);
        assert_eq!(table.id_of_thread(thread(20, 20, 1), 10), ids[0]);
        assert_eq!(table.id_of_thread(thread(20, 21, 5), 10), ids[0]);
        assert_eq!(table.id_of_thread(thread(20, 20, 9), 10), ids[1]);
        // A retired process keeps its threads.
        table.retire(ids[0]);
        assert_eq!(table.id_of_thread(thread(20, 21, 5), 11), ids[0]);
        assert_eq!(table.records().len(), 3, "no record invented");
    }

    #[test]
    fn a_task_that_took_an_exited_targets_pid_is_not_a_target() {
        // Target 20 (started t=1) exited at t=8 and is not retired yet; at t=9 a process
        // that is not a target takes pid 20. Running now, its time is not a target's.
        let root = tempfile::tempdir().unwrap();
        let mut table = ProcessTable::new(false, root.path());
        table.add_root(10, 0);
        table.apply(&[fork(20, 1), exit(20, 1, 8)]);
        assert!(table.is_target_thread(&thread(20, 20, 1)));
        assert!(table.is_target_thread(&thread(20, 21, 5)));
        assert!(!table.is_target_thread(&thread(20, 20, 9)));
        // With --all every task is accounted.
        assert!(ProcessTable::new(true, root.path()).is_target_thread(&thread(20, 20, 9)));
    }

    #[test]
    fn a_lost_exit_event_does_not_merge_the_next_process_with_the_old_one() {
        // Pid 30's exit event was dropped; then a new process with pid 30 forks. The old one
        // ends there (its ending unknown); the new one gets its own record, and the new
        // process's exit does not overwrite the old one's.
        let root = tempfile::tempdir().unwrap();
        let mut table = ProcessTable::new(false, root.path());
        table.add_root(10, 0);
        table.apply(&[fork(30, 1)]);
        table.apply(&[fork(30, 50), exit(30, 50, 60)]);
        let ids = table.ids_by_pid()[&30].clone();
        assert_eq!(ids.len(), 2);
        let (old, new) = (
            &table.records()[ids[0] as usize],
            &table.records()[ids[1] as usize],
        );
        assert_eq!(old.ended_ns, Some(50));
        assert_eq!(old.ending, None);
        assert_eq!(new.ending, Some(Ending::Exited(0)));
        assert_eq!(table.id_of_thread(thread(30, 30, 1), 70), ids[0]);
        assert_eq!(table.id_of_thread(thread(30, 30, 50), 70), ids[1]);
    }

    #[test]
    fn the_fork_event_of_a_registered_root_completes_it() {
        // The wrapped command is registered from /proc right after it was spawned; its fork
        // event then gives its start time and is not a second process.
        let root = tempfile::tempdir().unwrap();
        let mut table = ProcessTable::new(false, root.path());
        let id = table.add_root(40, 0);
        table.apply(&[fork(40, 7)]);
        assert_eq!(table.records().len(), 1);
        assert_eq!(table.records()[id as usize].start_ns, Some(7));
        assert!(table.records()[id as usize].root);
    }

    #[test]
    fn tracks_changed_records_only_when_asked() {
        let root = fake_proc(10, "10 (app) S 1 10 10 0", b"app\0");
        let mut table = ProcessTable::new(false, root.path());
        table.add_root(10, 0);
        assert!(table.take_changed().is_empty(), "not tracked yet");
        assert_eq!(table.records()[0].uid, Some(unsafe { libc::geteuid() }));
        table.track_changes();
        table.apply(&[Lifecycle::Fork {
            pid: 11,
            ppid: 10,
            start_ns: 1,
            timestamp_ns: 1,
        }]);
        assert_eq!(table.take_changed(), vec![1]);
        assert!(table.take_changed().is_empty());
        table.set_ending(10, Ending::Exited(0), 5);
        assert_eq!(table.take_changed(), vec![0]);
    }

    #[test]
    fn registers_accounted_pids_on_sight() {
        let root = fake_proc(77, "77 (sshd) S 1 77 77 0", b"sshd\0");
        let mut all = ProcessTable::new(true, root.path());
        assert!(all.is_target(77));
        let id = all.id_of(77, 9);
        assert_eq!(all.records()[id as usize].comm, "sshd");
        assert_eq!(all.records()[id as usize].ppid, Some(1));
        assert_eq!(all.id_of(77, 10), id);
        let mut targets_only = ProcessTable::new(false, root.path());
        assert!(!targets_only.is_target(77));
        targets_only.id_of(77, 9);
        assert!(targets_only.is_target(77));
    }
}
