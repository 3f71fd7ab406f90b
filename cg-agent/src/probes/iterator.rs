//! Iterator accounting: turns the kernel's per-thread runtimes, read once per interval from
//! the task iterator, into the same cumulative [`Snapshot`] the switch program's maps give,
//! so that [`super::activity::ActivityTracker`] and everything after it work unchanged.
//!
//! Each read hands back, per accounted thread, its `se.sum_exec_runtime` and the CPU it last
//! ran on; a thread's CPU time in an interval is the growth of its runtime since the previous
//! read. A snapshot carries only the threads that grew (most threads alive sleep through most
//! intervals), so that what follows it costs per thread that ran, not per thread alive.
//! A thread that exits between two reads is closed by the kernel's FREE event, which
//! carries its final runtime ([`IteratorBooks::freed`]); until then it is unfinished and its
//! entry stays. Two hooks report it (`sched_process_free`, and an fentry program on
//! `__put_task_struct` where the kernel allows one), and a FREE reported twice adds nothing.
//! The kernel of this project's VM now and then calls no handler at `sched_process_free` for
//! a task (ftrace sees none either) and refuses fentry programs, so a FREE may never come:
//! the EXIT event carries the runtime as the scheduler last updated it (all but the slice the
//! thread was running), and [`FINAL_WAIT_NS`] after the exit the thread counts as finished
//! with that; [`IteratorBooks::finals_missing`] counts those threads.
//!
//! Both walks (the open-coded one, [`super::task_walk`], and the `iter/task` program) write a
//! record for every thread (the open-coded one, while no thread was created or reaped since
//! its last walk of the list, by reading that walk's threads again: the same records);
//! [`split_records`] keeps the targets' and sums the others'.
//! Other tasks' cumulative time is that sum over the living ones (not yet exiting) plus what
//! the kernel added up for the exited ones (their runtime at exit, and what they ran after it
//! once freed): a thread leaves the first sum as it joins the second, so none counts twice.
//! Both sums include what each thread ran before tracing began; the first read only sets the
//! starting point, so that never counts.
//!
//! The iterator knows where a thread last ran, not where it ran during the interval, so its
//! growth is placed on CPUs by [`place`]: on its last CPU while there is room, then on the
//! CPUs with room left; other tasks' time fills what room remains. No CPU then shows more
//! busy time than the interval lasted unless the machine as a whole did (a runtime the
//! scheduler updated late), and that rest the tracker carries forward as usual.
//!
//! Pure: [`super::Probes`] does the reading; tests write the records by hand.

use std::borrow::Cow;

use cg_common::{TaskRecord, ThreadKey};

use super::activity::{CpuSnapshot, Snapshot};
use crate::fast_hash::{HashMap, HashSet, HashSetExt};

/// How long after a thread's exit its final runtime (FREE, once the task is freed) is waited
/// for before it counts as finished with the runtime its exit reported. On the development VM
/// with two CPU hogs beside a fork storm (load 5-7) every FREE that came, came within 75 ms
/// of the exit, and none that missed this wait came within 25 s.
pub const FINAL_WAIT_NS: u64 = 1_000_000_000;

/// Splits what the iterator wrote into records; a trailing partial record (there should be
/// none) is ignored.
pub fn parse_records(bytes: &[u8]) -> Vec<TaskRecord> {
    const SIZE: usize = std::mem::size_of::<TaskRecord>();
    bytes
        .chunks_exact(SIZE)
        .map(|chunk| {
            // SAFETY: `chunk` holds exactly SIZE bytes and every bit pattern is a valid
            // TaskRecord (plain integers, no padding); read_unaligned copes with any alignment.
            unsafe { std::ptr::read_unaligned(chunk.as_ptr().cast::<TaskRecord>()) }
        })
        .collect()
}

/// Which processes are targets, as `TARGETS` says: pid -> process start time (0: whichever
/// process holds the pid), or every process (`--all`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Targets {
    All,
    Some(HashMap<u32, u64>),
}

impl Targets {
    fn holds(&self, record: &TaskRecord) -> bool {
        match self {
            Targets::All => true,
            Targets::Some(targets) => targets
                .get(&record.tgid)
                .is_some_and(|&start| start == 0 || start == record.process_start_ns),
        }
    }
}

/// Splits a walk's records: the targets' threads (but zombies: a zombie stays in the task
/// list until it is reaped, long after its EXIT and FREE closed its books, and read again it
/// would count as a new thread), and the runtime summed over every other thread that has not
/// begun to exit (`PF_EXITING`: from its exit on, the kernel counts it among the exited).
/// A vacant record ([`TaskRecord::vacant`]) reads as an exited thread's: left out by the
/// same rules. With `--all` and no zombie or vacant record, the records themselves (no copy: 10,000 threads are 480 kB).
pub fn split_records<'a>(
    records: &'a [TaskRecord],
    targets: &Targets,
) -> (Cow<'a, [TaskRecord]>, u64) {
    if *targets == Targets::All && records.iter().all(|r| r.exit_state == 0) {
        return (Cow::Borrowed(records), 0);
    }
    let mut theirs = Vec::new();
    let mut others_ns = 0u64;
    for record in records {
        if targets.holds(record) {
            if record.exit_state == 0 {
                theirs.push(*record);
            }
        } else if record.task_flags & TaskRecord::PF_EXITING == 0 {
            others_ns = others_ns.saturating_add(record.runtime_ns);
        }
    }
    (Cow::Owned(theirs), others_ns)
}

/// What is known of one accounted thread.
#[derive(Clone, Debug, Default)]
struct Book {
    /// The highest runtime read so far; `None` until a first read of a thread that existed
    /// before tracing began (what it ran before then is no part of the run).
    runtime_ns: Option<u64>,
    /// Growth read since the last placement (from a FREE event between two reads).
    unplaced_ns: u64,
    /// Cumulative nanoseconds placed on each CPU.
    per_cpu_ns: Vec<u64>,
    last_cpu: u32,
    /// CLOCK_MONOTONIC ns of its exit, once seen; `freed` once its final runtime is in.
    exited_ns: Option<u64>,
    freed: bool,
}

impl Book {
    /// Takes `runtime_ns` as the thread's runtime now; its growth is added to what is owed.
    /// Returns whether it now owes time it did not before.
    fn see(&mut self, runtime_ns: u64) -> bool {
        let owed_before = self.unplaced_ns > 0;
        match self.runtime_ns {
            Some(before) => {
                self.unplaced_ns += runtime_ns.saturating_sub(before);
                self.runtime_ns = Some(before.max(runtime_ns));
            }
            None => self.runtime_ns = Some(runtime_ns),
        }
        !owed_before && self.unplaced_ns > 0
    }
}

/// The books of iterator accounting (see the module docs).
#[derive(Debug)]
pub struct IteratorBooks {
    /// CLOCK_MONOTONIC ns just before tracing began: a thread created later ran all its
    /// life under watch.
    trace_start_ns: u64,
    cpu_count: usize,
    threads: HashMap<ThreadKey, Book>,
    /// The kernel's cumulative other time, as last read.
    other_read_ns: u64,
    /// Other time placed on each CPU so far.
    other_per_cpu_ns: Vec<u64>,
    last_read_ns: Option<u64>,
    /// The previous read's records, in the kernel's walk order (the same from read to read
    /// but for threads born or gone): a record equal to the one in the same place last time
    /// is a thread that has not run, whose book needs no lookup.
    last_records: Vec<TaskRecord>,
    /// Threads forgotten without their final runtime (see [`IteratorBooks::finals_missing`]).
    forgotten_without_final: u64,
    /// The threads that owe growth not yet placed (so that a read costs per thread that ran,
    /// not per book).
    owed: Vec<ThreadKey>,
    /// The threads seen exiting whose final runtime has not come: the few books a read
    /// checks for it.
    exiting: HashSet<ThreadKey>,
}

impl IteratorBooks {
    pub fn new(trace_start_ns: u64, cpu_count: usize) -> Self {
        IteratorBooks {
            trace_start_ns,
            cpu_count: cpu_count.max(1),
            threads: HashMap::default(),
            other_read_ns: 0,
            other_per_cpu_ns: vec![0; cpu_count.max(1)],
            last_read_ns: None,
            last_records: Vec::new(),
            forgotten_without_final: 0,
            owed: Vec::new(),
            exiting: HashSet::new(),
        }
    }

    /// Takes `runtime_ns` as `key`'s runtime now (a book made for a thread first seen); a
    /// thread that now owes time joins `owed`.
    fn see(&mut self, key: ThreadKey, runtime_ns: u64) -> &mut Book {
        let fresh = key.start_ns > self.trace_start_ns;
        let cpus = self.cpu_count;
        let book = self.threads.entry(key).or_insert_with(|| Book {
            runtime_ns: fresh.then_some(0),
            per_cpu_ns: vec![0; cpus],
            ..Book::default()
        });
        if book.see(runtime_ns) {
            self.owed.push(key);
        }
        book
    }

    /// One read of the iterator, taken at `taken_ns`: `records` and the kernel's cumulative
    /// other time. Returns the snapshot: cumulative totals of the threads that grew in this
    /// read only (the tracker keeps the others' totals as they were).
    pub fn read(&mut self, records: &[TaskRecord], other_total_ns: u64, taken_ns: u64) -> Snapshot {
        self.take_records(records);
        let interval_ns = self
            .last_read_ns
            .replace(taken_ns)
            .map_or(0, |last| taken_ns.saturating_sub(last));
        let mut room = vec![interval_ns; self.cpu_count];
        let grown = self.place_growth(&mut room);
        let other_ns = other_total_ns.saturating_sub(self.other_read_ns);
        self.other_read_ns = self.other_read_ns.max(other_total_ns);
        place(other_ns, 0, &mut room, &mut self.other_per_cpu_ns);
        self.snapshot(taken_ns, &grown)
    }

    /// Takes each record's runtime and last CPU into its thread's book (a record unchanged
    /// since the last read: nothing to take).
    fn take_records(&mut self, records: &[TaskRecord]) {
        let last_cpu = self.cpu_count as u32 - 1;
        let last_records = std::mem::take(&mut self.last_records);
        for (i, r) in records.iter().enumerate() {
            if last_records.get(i) == Some(r) {
                continue;
            }
            self.see(key_of(r), r.runtime_ns).last_cpu = r.cpu.min(last_cpu);
        }
        self.last_records = last_records;
        self.last_records.clear();
        self.last_records.extend_from_slice(records);
    }

    /// Places every book's unplaced growth on CPUs (in thread order, so that the same reads
    /// place the same way); returns the threads that grew, in that order.
    fn place_growth(&mut self, room: &mut [u64]) -> Vec<ThreadKey> {
        // `owed` keeps its room from read to read.
        let IteratorBooks { owed, threads, .. } = self;
        owed.sort_unstable();
        owed.dedup();
        let mut grown = Vec::with_capacity(owed.len());
        for key in owed.drain(..) {
            let Some(book) = threads.get_mut(&key).filter(|b| b.unplaced_ns > 0) else {
                continue;
            };
            place(
                std::mem::take(&mut book.unplaced_ns),
                book.last_cpu as usize,
                room,
                &mut book.per_cpu_ns,
            );
            grown.push(key);
        }
        grown
    }

    /// The snapshot of a read: every CPU's other time, the totals of the threads in `grown`.
    fn snapshot(&self, taken_ns: u64, grown: &[ThreadKey]) -> Snapshot {
        Snapshot {
            taken_ns,
            cpus: self
                .other_per_cpu_ns
                .iter()
                .map(|&other_ns| CpuSnapshot {
                    other_ns,
                    ..CpuSnapshot::default()
                })
                .collect(),
            threads: grown
                .iter()
                .filter_map(|key| Some((*key, self.threads.get(key)?.per_cpu_ns.clone())))
                .collect(),
            unfinished: self
                .exiting
                .iter()
                .filter(|key| self.threads.get(key).is_some_and(|b| self.awaits(b)))
                .copied()
                .collect(),
        }
    }

    /// Whether `book`'s final runtime is still to come (see [`FINAL_WAIT_NS`]).
    fn awaits(&self, book: &Book) -> bool {
        let now_ns = self.last_read_ns.unwrap_or(0);
        !book.freed
            && book
                .exited_ns
                .is_some_and(|at| now_ns < at.saturating_add(FINAL_WAIT_NS))
    }

    /// A thread exited at `at_ns` with `runtime_ns` (as the scheduler last updated it): its
    /// entry stays until its final runtime is in, or [`FINAL_WAIT_NS`] has passed.
    pub fn exited(&mut self, key: ThreadKey, runtime_ns: u64, at_ns: u64) {
        let book = self.see(key, runtime_ns);
        book.exited_ns.get_or_insert(at_ns);
        if !book.freed {
            self.exiting.insert(key);
        }
    }

    /// A thread is gone for good with `runtime_ns` (its final runtime). Ignored for a thread
    /// neither read nor seen exiting (its entry was already deleted, or it ran before the
    /// run began).
    pub fn freed(&mut self, key: ThreadKey, runtime_ns: u64) {
        if self.threads.contains_key(&key) {
            self.see(key, runtime_ns).freed = true;
            self.exiting.remove(&key);
        }
    }

    /// Whether some thread seen exiting still waits for its final runtime, or an exit or
    /// FREE event since the last read brought growth that only the next read places (at the
    /// end of a run, a FREE drained just after the last snapshot would otherwise be lost).
    pub fn awaits_final(&self) -> bool {
        !self.owed.is_empty()
            || self
                .exiting
                .iter()
                .any(|key| self.threads.get(key).is_some_and(|b| self.awaits(b)))
    }

    /// The threads with a book that the last read did not see and whose exit never came
    /// (its event was lost): gone, since the walk lists every thread alive. In book order.
    pub fn unseen(&self) -> Vec<ThreadKey> {
        let mut seen = HashSet::with_capacity(self.last_records.len());
        seen.extend(self.last_records.iter().map(key_of));
        let mut unseen: Vec<ThreadKey> = self
            .threads
            .iter()
            .filter(|(key, book)| book.exited_ns.is_none() && !seen.contains(key))
            .map(|(key, _)| *key)
            .collect();
        unseen.sort_unstable();
        unseen
    }

    /// Forgets a thread whose last time has been read and charged.
    pub fn forget(&mut self, key: ThreadKey) {
        self.exiting.remove(&key);
        if self.threads.remove(&key).is_some_and(|b| lacks_final(&b)) {
            self.forgotten_without_final += 1;
        }
    }

    /// How many threads so far exited, waited [`FINAL_WAIT_NS`] for their final runtime in
    /// vain, and counted as finished with the runtime their exit reported (short by the slice
    /// they were running then).
    pub fn finals_missing(&self) -> u64 {
        let closed = self
            .exiting
            .iter()
            .filter_map(|key| self.threads.get(key))
            .filter(|b| lacks_final(b) && !self.awaits(b))
            .count();
        self.forgotten_without_final + closed as u64
    }
}

/// The thread a record is of.
fn key_of(record: &TaskRecord) -> ThreadKey {
    ThreadKey {
        tgid: record.tgid,
        tid: record.tid,
        start_ns: record.start_ns,
    }
}

/// Whether `book`'s thread exited and its final runtime has not come (yet).
fn lacks_final(book: &Book) -> bool {
    book.exited_ns.is_some() && !book.freed
}

/// Places `ns` of CPU time on CPUs: on `preferred` as far as its `room` goes, then on the
/// next CPUs in turn; what no room holds goes to `preferred` all the same (the tracker
/// carries it on). Takes what it uses from `room` and adds what it places on each CPU to
/// `totals` (one per CPU, as `room`).
pub fn place(ns: u64, preferred: usize, room: &mut [u64], totals: &mut [u64]) {
    let cpus = room.len().min(totals.len());
    if cpus == 0 {
        return;
    }
    let preferred = preferred.min(cpus - 1);
    let mut left = ns;
    for step in 0..cpus {
        let cpu = (preferred + step) % cpus;
        let here = left.min(room[cpu]);
        room[cpu] -= here;
        totals[cpu] += here;
        left -= here;
    }
    totals[preferred] += left;
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn record(tgid: u32, tid: u32, start_ns: u64, runtime_ns: u64, cpu: u32) -> TaskRecord {
        TaskRecord {
            tgid,
            tid,
            start_ns,
            runtime_ns,
            cpu,
            ..TaskRecord::default()
        }
    }

    fn key(tgid: u32, tid: u32, start_ns: u64) -> ThreadKey {
        ThreadKey {
            tgid,
            tid,
            start_ns,
        }
    }

    fn total_of(snapshot: &Snapshot, thread: ThreadKey) -> u64 {
        snapshot
            .threads
            .iter()
            .filter(|(k, _)| *k == thread)
            .flat_map(|(_, per_cpu)| per_cpu.iter())
            .sum()
    }

    fn other(tgid: u32, tid: u32, runtime_ns: u64, exiting: bool) -> TaskRecord {
        TaskRecord {
            process_start_ns: 50,
            task_flags: if exiting { TaskRecord::PF_EXITING } else { 0 },
            ..record(tgid, tid, 50, runtime_ns, 0)
        }
    }

    #[test]
    fn splits_targets_threads_from_the_others_sum() {
        // TARGETS: pid 10 started at 100; pid 20 named by the user (0: whoever holds it).
        // Walk: 10/10 and 10/11 (process started at 100): targets'; 10/12 of an earlier
        // process 10 (started at 60): another's; 20/20: a target's; 30/30: another's;
        // 30/31 exiting: left to the kernel's sum; 10/13 a target's zombie: left out; a
        // vacant record (an amended walk's reaped thread): nobody's, no time.
        let targets = Targets::Some([(10, 100), (20, 0)].into_iter().collect());
        let of = |tgid, tid, process_start_ns, runtime_ns| TaskRecord {
            process_start_ns,
            ..record(tgid, tid, 200, runtime_ns, 0)
        };
        let zombie = TaskRecord {
            exit_state: 16,
            ..of(10, 13, 100, 9)
        };
        let records = [
            of(10, 10, 100, 1),
            of(10, 11, 100, 2),
            of(10, 12, 60, 40),
            of(20, 20, 77, 3),
            other(30, 30, 500, false),
            other(30, 31, 7_000, true),
            zombie,
            TaskRecord::vacant(),
        ];
        let (theirs, others_ns) = split_records(&records, &targets);
        let tids: Vec<u32> = theirs.iter().map(|r| r.tid).collect();
        assert_eq!(tids, vec![10, 11, 20]);
        assert_eq!(others_ns, 540);
        // With --all every thread is a target's (zombies still left out), and there is no
        // other time.
        let (theirs, others_ns) = split_records(&records, &Targets::All);
        assert_eq!(theirs.len(), 6);
        assert_eq!(others_ns, 0);
    }

    #[test]
    fn other_time_counts_an_exiting_thread_once() {
        // One CPU, 100 ms reads; no targets. Threads 30/30 (started before tracing) and
        // 30/31, whose exit the kernel counts: its runtime at exit (25 ms), then at its free
        // what it ran after (1 ms).
        //   read        t=1000      t=1100           t=1200           t=1300
        //   30/30       100 ms      110 ms           130 ms           130 ms
        //   30/31       20 ms       exiting (25)     gone             gone
        //   kernel sum  0           25 ms            26 ms            26 ms
        //   other                   +10 +5           +20 +1           0
        let targets = Targets::Some(HashMap::default());
        let mut books = IteratorBooks::new(500, 1);
        let reads: [(Vec<TaskRecord>, u64); 4] = [
            (
                vec![
                    other(30, 30, 100 * MS, false),
                    other(30, 31, 20 * MS, false),
                ],
                0,
            ),
            (
                vec![other(30, 30, 110 * MS, false), other(30, 31, 25 * MS, true)],
                25 * MS,
            ),
            (vec![other(30, 30, 130 * MS, false)], 26 * MS),
            (vec![other(30, 30, 130 * MS, false)], 26 * MS),
        ];
        let mut seen = Vec::new();
        let mut before = None;
        for (i, (records, exited_ns)) in reads.into_iter().enumerate() {
            let (theirs, living_ns) = split_records(&records, &targets);
            assert!(theirs.is_empty());
            let s = books.read(
                &theirs,
                living_ns + exited_ns,
                (1_000 + 100 * i as u64) * MS,
            );
            let now = s.cpus[0].other_ns;
            if let Some(before) = before.replace(now) {
                seen.push((now - before) / MS);
            }
        }
        assert_eq!(seen, vec![15, 21, 0]);
    }

    #[test]
    fn parses_whole_records_and_ignores_a_partial_one() {
        let r = record(7, 8, 9, 10, 1);
        // SAFETY: a plain repr(C) value viewed as its bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                std::ptr::from_ref(&r).cast::<u8>(),
                std::mem::size_of::<TaskRecord>(),
            )
        };
        let mut two = bytes.repeat(2);
        two.extend_from_slice(&bytes[..5]);
        assert_eq!(parse_records(&two), vec![r, r]);
        assert!(parse_records(&[]).is_empty());
    }

    #[test]
    fn a_threads_time_is_the_growth_of_its_runtime() {
        // Thread 5/5 (started before tracing at t=100): runtime 40 ms at the first read,
        // 70 ms at the second, 130 ms at the third.
        //   read 1 (t=1000 ms): baseline, nothing charged
        //   read 2 (t=1100 ms): 30 ms      read 3 (t=1200 ms): 60 ms more
        let mut books = IteratorBooks::new(500, 1);
        let thread = key(5, 5, 100);
        let s = books.read(&[record(5, 5, 100, 40 * MS, 0)], 0, 1_000 * MS);
        assert_eq!(total_of(&s, thread), 0);
        let s = books.read(&[record(5, 5, 100, 70 * MS, 0)], 0, 1_100 * MS);
        assert_eq!(total_of(&s, thread), 30 * MS);
        let s = books.read(&[record(5, 5, 100, 130 * MS, 0)], 0, 1_200 * MS);
        assert_eq!(total_of(&s, thread), 90 * MS);
    }

    #[test]
    fn a_thread_born_under_watch_is_charged_its_whole_runtime() {
        // Thread 6/7 started at t=600 (tracing began at 500); first read shows 12 ms.
        let mut books = IteratorBooks::new(500, 1);
        books.read(&[], 0, 1_000 * MS);
        let s = books.read(&[record(6, 7, 600, 12 * MS, 0)], 0, 1_100 * MS);
        assert_eq!(total_of(&s, key(6, 7, 600)), 12 * MS);
    }

    #[test]
    fn a_thread_that_exits_between_reads_is_charged_its_final_runtime() {
        //   read 1: 9/9 at 10 ms    exit event: 20 ms (as last updated)    read 2: unfinished
        //   FREE: 25 ms (final)     read 3: 25 ms in all, and it is finished
        let mut books = IteratorBooks::new(500, 2);
        let thread = key(9, 9, 1_000);
        books.read(&[record(9, 9, 1_000, 10 * MS, 1)], 0, 1_000 * MS);
        books.exited(thread, 20 * MS, 1_010 * MS);
        let s = books.read(&[], 0, 1_050 * MS);
        assert_eq!(s.unfinished, vec![thread], "exited, not yet freed");
        assert!(s.holds(9, Some(9)));
        assert!(books.awaits_final());
        books.freed(thread, 25 * MS);
        // No longer waiting for the final, but holding 5 ms that no snapshot has shown yet:
        // at the end of a run this takes one more read.
        assert!(books.awaits_final());
        let s = books.read(&[], 0, 1_100 * MS);
        assert_eq!(total_of(&s, thread), 25 * MS);
        assert!(s.unfinished.is_empty());
        assert!(!books.awaits_final());
        assert_eq!(books.finals_missing(), 0);
        // Its entry goes, and a late FREE for it changes nothing.
        books.forget(thread);
        books.freed(thread, 99 * MS);
        let s = books.read(&[], 0, 1_200 * MS);
        assert_eq!(total_of(&s, thread), 0);
    }

    #[test]
    fn a_thread_born_and_gone_between_reads_counts_from_its_events() {
        // Exit and FREE of thread 3/4 (born under watch) arrive before any read shows it.
        let mut books = IteratorBooks::new(500, 1);
        books.read(&[], 0, 1_000 * MS);
        books.exited(key(3, 4, 900), 5 * MS, 1_020 * MS);
        books.freed(key(3, 4, 900), 7 * MS);
        let s = books.read(&[], 0, 1_100 * MS);
        assert_eq!(total_of(&s, key(3, 4, 900)), 7 * MS);
    }

    #[test]
    fn a_final_runtime_that_never_comes_leaves_the_one_the_exit_reported() {
        // Thread 4/4 exits at t=1010 ms reporting 18 ms; its FREE never comes. It waits
        // FINAL_WAIT_NS (1 s) and is then finished at 18 ms.
        //   read t=1000: 10 ms | exit t=1010: 18 ms | reads t=1100..2000 wait | t=2010 done
        let mut books = IteratorBooks::new(500, 1);
        let thread = key(4, 4, 900);
        books.read(&[record(4, 4, 900, 10 * MS, 0)], 0, 1_000 * MS);
        books.exited(thread, 18 * MS, 1_010 * MS);
        let s = books.read(&[], 0, 1_100 * MS);
        assert_eq!(total_of(&s, thread), 18 * MS);
        assert!(s.holds(4, Some(4)));
        let s = books.read(&[], 0, 2_000 * MS);
        assert!(s.holds(4, None) && books.awaits_final());
        assert_eq!(books.finals_missing(), 0, "still waited for");
        let s = books.read(&[], 0, 2_010 * MS);
        assert!(!s.holds(4, None) && !books.awaits_final());
        // Finished at 18 ms: it grew no more, so the snapshot leaves it out.
        assert!(s.threads.iter().all(|(k, _)| *k != thread));
        // It is counted once, before and after its entry goes.
        assert_eq!(books.finals_missing(), 1);
        books.forget(thread);
        assert_eq!(books.finals_missing(), 1);
        books.read(&[], 0, 2_100 * MS);
        assert_eq!(books.finals_missing(), 1);
    }

    #[test]
    fn a_final_runtime_reported_twice_is_charged_once() {
        // Both hooks on a task's free may report it (the kernel's mark keeps that rare): the
        // second FREE adds nothing, before or after a read.
        //   read t=1000: 6/6 at 10 ms | exit: 12 ms | FREE 15 ms | read | FREE 15 ms | read
        let mut books = IteratorBooks::new(500, 1);
        let thread = key(6, 6, 900);
        books.read(&[record(6, 6, 900, 10 * MS, 0)], 0, 1_000 * MS);
        books.exited(thread, 12 * MS, 1_010 * MS);
        books.freed(thread, 15 * MS);
        books.freed(thread, 15 * MS);
        let s = books.read(&[], 0, 1_100 * MS);
        assert_eq!(total_of(&s, thread), 15 * MS);
        books.freed(thread, 15 * MS);
        let s = books.read(&[], 0, 1_200 * MS);
        // It grew no more, so the snapshot leaves it out.
        assert!(s.threads.iter().all(|(k, _)| *k != thread));
        assert_eq!(books.finals_missing(), 0);
    }

    #[test]
    fn a_thread_that_did_not_run_is_left_out_of_the_snapshot() {
        // Threads A (1/1) and B (1/2), started before tracing:
        //   read 1 (t=1000 ms): A 10 ms, B 50 ms   baselines
        //   read 2 (t=1100 ms): A 30 ms, B 50 ms   B did not run
        //   read 3 (t=1200 ms): A 30 ms, B 70 ms   A did not run
        // Each snapshot shows the threads that grew in it, with their cumulative totals.
        let mut books = IteratorBooks::new(500, 1);
        let (a, b) = (key(1, 1, 100), key(1, 2, 100));
        let s = books.read(
            &[record(1, 1, 100, 10 * MS, 0), record(1, 2, 100, 50 * MS, 0)],
            0,
            1_000 * MS,
        );
        assert!(s.threads.is_empty(), "baselines only: {s:?}");
        let s = books.read(
            &[record(1, 1, 100, 30 * MS, 0), record(1, 2, 100, 50 * MS, 0)],
            0,
            1_100 * MS,
        );
        assert_eq!(s.threads, vec![(a, vec![20 * MS])]);
        let s = books.read(
            &[record(1, 1, 100, 30 * MS, 0), record(1, 2, 100, 70 * MS, 0)],
            0,
            1_200 * MS,
        );
        assert_eq!(s.threads, vec![(b, vec![20 * MS])]);
        // Both still have books, and the walk saw both: neither is lost.
        assert!(books.unseen().is_empty());
    }

    #[test]
    fn a_thread_the_walk_no_longer_sees_without_an_exit_is_lost() {
        //   read 1: A 10, B 20, C 30
        //   EXIT of C (its book stays until its final runtime or the wait ends)
        //   read 2: A 10            B vanished without an EXIT (the event was lost)
        let mut books = IteratorBooks::new(500, 1);
        let (a, b, c) = (key(1, 1, 600), key(1, 2, 600), key(1, 3, 600));
        let at = |k: ThreadKey, ms| record(k.tgid, k.tid, k.start_ns, ms * MS, 0);
        books.read(&[at(a, 10), at(b, 20), at(c, 30)], 0, 1_000 * MS);
        assert!(books.unseen().is_empty());
        books.exited(c, 30 * MS, 1_050 * MS);
        books.read(&[at(a, 10)], 0, 1_100 * MS);
        assert_eq!(books.unseen(), vec![b]);
        // Forgotten, it is no longer lost.
        books.forget(b);
        assert!(books.unseen().is_empty());
    }

    #[test]
    fn a_thread_born_between_reads_shifts_the_order_and_loses_no_growth() {
        // Reads in the kernel's walk order. Thread C (1/3) is born between reads 1 and 2 and
        // walks between A and B, so every record after it sits one place later than before:
        //   read 1: A 10, B 20           (baselines; both started before tracing)
        //   read 2: A 10, C 5, B 20      C born under watch: 5 ms; A and B did not run
        //   read 3: A 10, C 5, B 26      B ran 6 ms, in the place C held before
        let mut books = IteratorBooks::new(500, 1);
        let (a, b, c) = (
            record(1, 1, 100, 10 * MS, 0),
            key(1, 2, 100),
            key(1, 3, 600),
        );
        let b_at = |ms| record(1, 2, 100, ms * MS, 0);
        let c_rec = record(1, 3, 600, 5 * MS, 0);
        books.read(&[a, b_at(20)], 0, 1_000 * MS);
        let s = books.read(&[a, c_rec, b_at(20)], 0, 1_100 * MS);
        assert_eq!(s.threads, vec![(c, vec![5 * MS])]);
        let s = books.read(&[a, c_rec, b_at(26)], 0, 1_200 * MS);
        assert_eq!(s.threads, vec![(b, vec![6 * MS])]);
    }

    #[test]
    fn sparse_reads_give_the_tracker_each_intervals_time() {
        // One CPU, 100 ms intervals; thread A (7/7) started before tracing, idle in the
        // second interval; other time is the kernel's running sum.
        //   read      t=1000   t=1100      t=1200      t=1300
        //   A         10 ms    40 ms       40 ms       50 ms
        //   other     0        20 ms       60 ms       60 ms
        //   interval           A 30        A 0         A 10
        //                      other 20    other 40    other 0
        //                      idle 50     idle 60     idle 90
        // In each, A + other + idle is the interval's 100 ms.
        use crate::probes::activity::ActivityTracker;
        let a = key(7, 7, 100);
        let mut books = IteratorBooks::new(500, 1);
        let mut tracker = ActivityTracker::new();
        let reads: [(&[TaskRecord], u64); 4] = [
            (&[record(7, 7, 100, 10 * MS, 0)], 0),
            (&[record(7, 7, 100, 40 * MS, 0)], 20 * MS),
            (&[record(7, 7, 100, 40 * MS, 0)], 60 * MS),
            (&[record(7, 7, 100, 50 * MS, 0)], 60 * MS),
        ];
        let mut seen = Vec::new();
        for (i, (records, other_ns)) in reads.into_iter().enumerate() {
            let s = books.read(records, other_ns, (1_000 + 100 * i as u64) * MS);
            if let Some(activity) = tracker.advance(&s, |_| true) {
                let a_ns: u64 = activity
                    .threads
                    .iter()
                    .filter(|t| t.thread == a)
                    .map(|t| t.on_cpu_ns)
                    .sum();
                let cpu = activity.cpus[0];
                assert_eq!(a_ns + cpu.other_ns + cpu.idle_ns, activity.duration_ns);
                seen.push((a_ns / MS, cpu.other_ns / MS, cpu.idle_ns / MS));
            }
        }
        assert_eq!(seen, vec![(30, 20, 50), (0, 40, 60), (10, 0, 90)]);
    }

    #[test]
    fn growth_is_placed_where_there_is_room() {
        // Two CPUs, a 100 ms interval. Thread A (last on cpu1) grew 150 ms: 100 on cpu1,
        // 50 on cpu0. Thread B (last on cpu1) grew 30 ms: cpu1 is full, so cpu0. Other tasks'
        // 10 ms fill cpu0's remaining room.
        //   cpu0: A 50 | B 30 | other 10 | idle 10
        //   cpu1: A 100
        let mut books = IteratorBooks::new(0, 2);
        let (a, b) = (key(1, 1, 10), key(1, 2, 20));
        books.read(&[], 0, 1_000 * MS);
        let s = books.read(
            &[record(1, 1, 10, 150 * MS, 1), record(1, 2, 20, 30 * MS, 1)],
            10 * MS,
            1_100 * MS,
        );
        let per_cpu = |k| s.threads.iter().find(|(t, _)| *t == k).unwrap().1.clone();
        assert_eq!(per_cpu(a), vec![50 * MS, 100 * MS]);
        assert_eq!(per_cpu(b), vec![30 * MS, 0]);
        assert_eq!(s.cpus[0].other_ns, 10 * MS);
        assert_eq!(s.cpus[1].other_ns, 0);
    }

    #[test]
    fn time_beyond_every_cpus_room_stays_on_the_last_cpu() {
        let mut room = vec![10, 0];
        let mut totals = vec![1, 2];
        place(25, 1, &mut room, &mut totals);
        assert_eq!(totals, vec![11, 17], "added to what was there");
        assert_eq!(room, vec![0, 0]);
        place(5, 7, &mut [], &mut []);
    }

    #[test]
    fn other_time_is_the_growth_of_the_kernels_sum() {
        // Snapshots are cumulative: the first read's 500 ms only set the starting point.
        let mut books = IteratorBooks::new(0, 1);
        let first = books.read(&[], 500 * MS, 1_000 * MS).cpus[0].other_ns;
        let s = books.read(&[], 520 * MS, 1_100 * MS);
        assert_eq!(s.cpus[0].other_ns - first, 20 * MS);
        // A racy lower sum never takes time back.
        let s = books.read(&[], 510 * MS, 1_200 * MS);
        assert_eq!(s.cpus[0].other_ns - first, 20 * MS);
    }

    #[test]
    fn a_runtime_read_lower_never_takes_time_back() {
        let mut books = IteratorBooks::new(0, 1);
        let thread = key(2, 2, 5);
        books.read(&[record(2, 2, 5, 10 * MS, 0)], 0, 0);
        books.read(&[record(2, 2, 5, 30 * MS, 0)], 0, 100 * MS);
        let s = books.read(&[record(2, 2, 5, 25 * MS, 0)], 0, 200 * MS);
        assert!(s.threads.is_empty(), "no growth: {s:?}");
        // Growth counts from the highest runtime read: 30 ms, not 25.
        let s = books.read(&[record(2, 2, 5, 35 * MS, 0)], 0, 300 * MS);
        assert_eq!(total_of(&s, thread), 35 * MS);
    }
}
