//! Which records an amend writes anew: after threads were created or reaped, the walk's
//! records are brought up to date by looking up only the threads that may have changed,
//! instead of walking the whole list again (~2 ms with 10,000 threads).
//!
//! A record can go stale only through its thread's exit, and every thread that exits runs
//! `sched_process_exit` after setting `PF_EXITING` in its flags; a thread can be missing only
//! if it was created, and every one created runs `task_newtask`. Both hooks write the thread
//! to the `THREAD_CHANGES` ring with the time. So the threads to look up again after a read
//! that began at time T are those the ring names from T on, and those whose record had
//! `PF_EXITING` at that read (their hook may have run before T). Every other record's thread
//! had not begun to exit when it was read and has not since: it is still there. A thread
//! named but no longer there leaves a vacant record ([`TaskRecord::vacant`]); a new one takes
//! a vacant record's place, or the next one at the end.
//!
//! The caller checks the result against the kernel's counts and walks the list where they
//! disagree (a change not yet in the ring, one lost): see [`super::TaskWalk`].

use std::collections::HashMap;

use cg_common::{TaskRecord, ThreadChange, thread_change};

/// The most items one amend writes (the size of its array); more and the list is walked.
pub const MAX_ITEMS: u32 = 4_096;

/// What to write: one item per thread to look up (its id in the low half, the index of its
/// record in the high half), and the count of records after.
#[derive(Debug, PartialEq, Eq)]
pub struct Plan {
    pub items: Vec<u64>,
    pub count: u32,
}

/// An item: look thread `tid` up and write it at record `index`.
pub fn item(tid: u32, index: u32) -> u64 {
    u64::from(tid) | u64::from(index) << 32
}

/// The plan for `records` (the last read's) and the `changes` since that read began, in an
/// array of `capacity` records; `None` when it would take more than [`MAX_ITEMS`] items or
/// more records than the array holds.
pub fn plan(records: &[TaskRecord], changes: &[ThreadChange], capacity: u32) -> Option<Plan> {
    // Each thread named, and whether it was created (else it only began to exit).
    let mut named: HashMap<u32, bool> = HashMap::with_capacity(changes.len());
    for change in changes {
        *named.entry(change.tid).or_default() |= change.kind == thread_change::CREATED;
    }
    let mut items = Vec::new();
    let mut vacant = Vec::new();
    for (index, record) in records.iter().enumerate() {
        let index = u32::try_from(index).ok()?;
        if record.is_vacant() {
            vacant.push(index);
        } else if named.remove(&record.tid).is_some()
            || record.task_flags & TaskRecord::PF_EXITING != 0
        {
            items.push(item(record.tid, index));
        }
    }
    // Named threads without a record: the created ones get one (a thread that only began to
    // exit was not there when the list was walked: not the walk's to list now).
    let mut created: Vec<u32> = named
        .into_iter()
        .filter_map(|(tid, created)| created.then_some(tid))
        .collect();
    created.sort_unstable();
    vacant.reverse();
    let mut count = u32::try_from(records.len()).ok()?;
    for tid in created {
        let index = vacant.pop().unwrap_or_else(|| {
            count += 1;
            count - 1
        });
        items.push(item(tid, index));
    }
    (count <= capacity && items.len() <= MAX_ITEMS as usize).then_some(Plan { items, count })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(tid: u32) -> TaskRecord {
        TaskRecord {
            tgid: 100,
            tid,
            start_ns: u64::from(tid) * 1000,
            runtime_ns: 5,
            ..TaskRecord::default()
        }
    }

    fn exiting(tid: u32) -> TaskRecord {
        TaskRecord {
            task_flags: TaskRecord::PF_EXITING,
            ..thread(tid)
        }
    }

    fn change(tid: u32, kind: u32) -> ThreadChange {
        ThreadChange {
            tid,
            kind,
            at_ns: 0,
        }
    }

    const NEW: u32 = thread_change::CREATED;
    const EXIT: u32 = thread_change::EXITING;

    #[test]
    fn nothing_changed_and_none_exiting_is_no_item() {
        let records = [thread(1), thread(2), thread(3)];
        assert_eq!(
            plan(&records, &[], 10),
            Some(Plan {
                items: vec![],
                count: 3
            })
        );
    }

    #[test]
    fn a_thread_that_exits_and_one_exiting_at_the_last_read_are_looked_up_in_place() {
        //  read at T        ring since T          amend
        //  [1] [2] [3x]     2 exits               look up 2 (at 1) and 3 (at 2, exiting)
        let records = [thread(1), thread(2), exiting(3)];
        let p = plan(&records, &[change(2, EXIT)], 10).unwrap();
        assert_eq!(p.items, vec![item(2, 1), item(3, 2)]);
        assert_eq!(p.count, 3);
    }

    #[test]
    fn a_new_thread_takes_a_vacant_place_first_then_the_end() {
        //  read at T          ring since T              amend
        //  [1] [ ] [3] [ ]    7, 8, 9 created           7 at 1, 8 at 3, 9 at 4 (new end)
        let vacant = TaskRecord::vacant();
        let records = [thread(1), vacant, thread(3), vacant];
        let changes = [change(9, NEW), change(7, NEW), change(8, NEW)];
        let p = plan(&records, &changes, 10).unwrap();
        assert_eq!(p.items, vec![item(7, 1), item(8, 3), item(9, 4)]);
        assert_eq!(p.count, 5);
    }

    #[test]
    fn a_thread_created_and_gone_between_reads_is_still_looked_up_once() {
        // 5 created and exited before the amend: one item (the lookup finds none and leaves
        // its place vacant). 6 only exiting, never listed: not the walk's.
        let records = [thread(1)];
        let changes = [change(5, NEW), change(5, EXIT), change(6, EXIT)];
        let p = plan(&records, &changes, 10).unwrap();
        assert_eq!(p.items, vec![item(5, 1)]);
        assert_eq!(p.count, 2);
    }

    #[test]
    fn a_reused_id_is_written_over_its_old_record() {
        // 2 exited and was reaped, and a new thread got id 2: one item, at 2's old record.
        let records = [thread(1), thread(2)];
        let p = plan(&records, &[change(2, EXIT), change(2, NEW)], 10).unwrap();
        assert_eq!(p.items, vec![item(2, 1)]);
        assert_eq!(p.count, 2);
    }

    #[test]
    fn more_than_the_array_holds_or_too_many_items_is_no_plan() {
        let records = [thread(1), thread(2)];
        assert_eq!(plan(&records, &[change(3, NEW)], 2), None);
        assert!(plan(&records, &[change(3, NEW)], 3).is_some());
        let many: Vec<ThreadChange> = (10..10 + MAX_ITEMS + 1).map(|t| change(t, NEW)).collect();
        assert_eq!(plan(&records, &many, u32::MAX), None);
    }

    #[test]
    fn an_item_holds_the_id_low_and_the_index_high() {
        assert_eq!(item(0x1234, 7), 0x0000_0007_0000_1234);
        assert_eq!(item(u32::MAX, u32::MAX), u64::MAX);
    }
}
