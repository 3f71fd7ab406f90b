//! The task walk's programs, assembled: the walk of the task list ([`program`]), the
//! re-read of its threads through their kept addresses ([`reread_program`]), and what they
//! need of the running kernel ([`WalkLayout`]: kfunc ids and `task_struct` offsets from its
//! BTF).

use cg_common::TaskRecord;

use super::{WalkError, asm::*};
use crate::probes::btf::Btf;

/// What the walk needs of the running kernel, read from its BTF.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalkLayout {
    /// BTF ids of the kfuncs.
    pub rcu_read_lock: u32,
    pub rcu_read_unlock: u32,
    pub iter_new: u32,
    pub iter_next: u32,
    pub iter_destroy: u32,
    /// `BPF_TASK_ITER_ALL_THREADS`.
    pub all_threads: i32,
    /// Bytes of `struct bpf_iter_task` (on the program's stack).
    pub iter_bytes: u32,
    /// The re-read's kfuncs: the numbers iterator (6.4+) and `bpf_rdonly_cast` (6.2+), and
    /// `task_struct`'s BTF id (what the cast makes of an address).
    pub num_new: u32,
    pub num_next: u32,
    pub num_destroy: u32,
    pub rdonly_cast: u32,
    pub task_struct: u32,
    /// The amend's kfuncs (6.2+); where the kernel lacks them, a set that changed is walked.
    pub task_from_pid: Option<u32>,
    pub task_release: Option<u32>,
    /// Byte offsets in `task_struct`.
    pub task: TaskOffsets,
}

impl WalkLayout {
    /// Reads the kfuncs' ids from `btf` and takes the offsets the other programs use; a
    /// kernel without the kfuncs (before 6.7) is [`WalkError::Unsupported`].
    pub fn read(btf: &Btf, offsets: TaskOffsets) -> Result<Self, WalkError> {
        let kfunc = |name: &str| {
            btf.func_id(name).ok_or_else(|| {
                WalkError::Unsupported(format!("the kernel's BTF has no kfunc {name}"))
            })
        };
        let iter_bytes = btf.struct_size("bpf_iter_task").ok_or_else(|| {
            WalkError::Unsupported("the kernel's BTF has no struct bpf_iter_task".into())
        })?;
        if iter_bytes == 0 || iter_bytes > 64 {
            return Err(WalkError::Unsupported(format!(
                "struct bpf_iter_task is {iter_bytes} bytes (expected 24)"
            )));
        }
        // The re-read keeps the numbers iterator's state in NUM_ITER_BYTES of its stack.
        let num_bytes = btf.struct_size("bpf_iter_num");
        if num_bytes != Some(NUM_ITER_BYTES as u32) {
            return Err(WalkError::Unsupported(format!(
                "struct bpf_iter_num is {num_bytes:?} bytes (expected {NUM_ITER_BYTES})"
            )));
        }
        Ok(WalkLayout {
            rcu_read_lock: kfunc("bpf_rcu_read_lock")?,
            rcu_read_unlock: kfunc("bpf_rcu_read_unlock")?,
            iter_new: kfunc("bpf_iter_task_new")?,
            iter_next: kfunc("bpf_iter_task_next")?,
            iter_destroy: kfunc("bpf_iter_task_destroy")?,
            all_threads: btf
                .enum_value("BPF_TASK_ITER_ALL_THREADS")
                .and_then(|v| i32::try_from(v).ok())
                .unwrap_or(1),
            iter_bytes,
            num_new: kfunc("bpf_iter_num_new")?,
            num_next: kfunc("bpf_iter_num_next")?,
            num_destroy: kfunc("bpf_iter_num_destroy")?,
            rdonly_cast: kfunc("bpf_rdonly_cast")?,
            task_struct: btf.struct_id("task_struct").ok_or_else(|| {
                WalkError::Unsupported("the kernel's BTF has no struct task_struct".into())
            })?,
            task_from_pid: btf.func_id("bpf_task_from_pid"),
            task_release: btf.func_id("bpf_task_release"),
            task: offsets,
        })
    }
}

/// Byte offsets of the `task_struct` fields the walk reads (the same the other programs get
/// as globals).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskOffsets {
    pub pid: u32,
    pub tgid: u32,
    pub start_time: u32,
    pub runtime: u32,
    pub cpu: u32,
    pub exit_state: u32,
    pub group_leader: u32,
    pub flags: u32,
}

/// Bytes of the context `BPF_PROG_TEST_RUN` hands the program and copies back: the count of
/// records written (u32), then a u32 that is 1 when the array was full before the walk ended
/// (2: an element of the array could not be had, which cannot happen), then 8 bytes unused.
pub(super) const CTX_BYTES: usize = 16;
pub(super) const RECORD_BYTES: u32 = size_of::<TaskRecord>() as u32;
/// `struct bpf_iter_task` sits at the bottom of the stack; the array key just below it.
pub(super) const STACK_KEY: i16 = -8;

/// The maps a walk writes: its records (`records`, mmapable) and the address of each record's
/// `task_struct` at the same index (`tasks`, which only the kernel reads).
#[derive(Clone, Copy, Debug)]
pub struct WalkMaps {
    pub records: i32,
    pub tasks: i32,
}

/// Starts the open-coded iterator at `r10 + at` with its `new` kfunc (its other arguments
/// already in r2 and r3), binds `next` to a call of its `next` kfunc, and jumps to `done`
/// where that hands back null (else r0 is the element).
pub(super) fn iterate(
    a: &mut Asm,
    at: i32,
    (new, next_kfunc): (u32, u32),
    next: Label,
    done: Label,
) {
    a.push(mov_reg(1, 10));
    a.push(add_imm(1, at));
    a.push(call_kfunc(new));
    a.bind(next);
    a.push(mov_reg(1, 10));
    a.push(add_imm(1, at));
    a.push(call_kfunc(next_kfunc));
    a.jump(Jump::Eq(0, 0), done);
}

/// Pushes `key = *(u32 *)(r10 + STACK_KEY)`'s element of `map_fd` into r0, jumping to
/// `missing` where the map has none.
pub(super) fn lookup(a: &mut Asm, map_fd: i32, missing: Label) {
    for insn in load_map_fd(1, map_fd) {
        a.push(insn);
    }
    a.push(mov_reg(2, 10));
    a.push(add_imm(2, i32::from(STACK_KEY)));
    a.push(call_helper(op::MAP_LOOKUP_ELEM));
    a.jump(Jump::Eq(0, 0), missing);
}

/// The program: walks every thread, writing each one's record at the next index of the array
/// `maps.records` (`capacity` records) and its task's address at that index of `maps.tasks`,
/// and stops with the "full" flag when none is left. With `all_tasks`, the process's start
/// time that tells targets' threads from others is not read (all are targets'), which saves
/// two loads from other cache lines per thread.
///
/// Registers: r9 the context, r8 the task, r6 the count (kept in the context, so that the
/// verifier sees an unknown number each time round and the loop converges), r0 the record.
pub fn program(
    layout: &WalkLayout,
    maps: WalkMaps,
    capacity: u32,
    all_tasks: bool,
) -> Result<Vec<Insn>, WalkError> {
    let iter_at = -(i32::try_from(layout.iter_bytes.div_ceil(8) * 8)
        .map_err(|_| WalkError::Assembly("bpf_iter_task too large"))?)
        + i32::from(STACK_KEY);
    let capacity = i32::try_from(capacity).map_err(|_| WalkError::Assembly("capacity"))?;
    let mut a = Asm::default();
    let (next, full, lost, done) = (a.label(), a.label(), a.label(), a.label());
    a.push(mov_reg(9, 1));
    a.push(call_kfunc(layout.rcu_read_lock));
    a.push(mov_imm(2, 0)); // no task: the whole machine
    a.push(mov_imm(3, layout.all_threads));
    iterate(
        &mut a,
        iter_at,
        (layout.iter_new, layout.iter_next),
        next,
        done,
    );
    a.push(mov_reg(8, 0));
    a.push(load(Size::W, 6, 9, 0));
    a.jump(Jump::Ge(6, capacity), full);
    a.push(store(Size::W, 10, 6, STACK_KEY));
    lookup(&mut a, maps.tasks, lost);
    a.push(store(Size::DW, 0, 8, 0));
    lookup(&mut a, maps.records, lost);
    copy_thread(&mut a, &layout.task, (8, 0), all_tasks)?;
    a.push(add_imm(6, 1));
    a.push(store(Size::W, 9, 6, 0));
    a.jump(Jump::Always, next);
    a.bind(lost);
    a.push(store_imm(Size::W, 9, 4, 2));
    a.jump(Jump::Always, done);
    a.bind(full);
    a.push(store_imm(Size::W, 9, 4, 1));
    a.bind(done);
    a.push(mov_reg(1, 10));
    a.push(add_imm(1, iter_at));
    a.push(call_kfunc(layout.iter_destroy));
    a.push(call_kfunc(layout.rcu_read_unlock));
    a.push(load(Size::W, 0, 9, 0));
    a.push(exit());
    a.finish()
}

/// Copies who the thread at register `task` is and what it has run into the record at
/// register `record` (r1 the scratch): the fields of [`TaskRecord`], and without `all_tasks`
/// its process's start time (its group leader's), which tells targets' threads from others.
fn copy_thread(
    a: &mut Asm,
    task: &TaskOffsets,
    (from, to): (u8, u8),
    all_tasks: bool,
) -> Result<(), WalkError> {
    // (task_struct field, its size, where it goes in the record)
    let fields = [
        (task.tgid, Size::W, 0),
        (task.pid, Size::W, 4),
        (task.start_time, Size::DW, 8),
        (task.runtime, Size::DW, 16),
        (task.cpu, Size::W, 24),
        (task.exit_state, Size::W, 28),
        (task.flags, Size::W, 40),
    ];
    for (field, size, at) in fields {
        a.push(load(size, 1, from, off16(field)?));
        a.push(store(size, to, 1, at));
    }
    if !all_tasks {
        a.push(load(Size::DW, 1, from, off16(task.group_leader)?));
        a.push(load(Size::DW, 1, 1, off16(task.start_time)?));
        a.push(store(Size::DW, to, 1, 32));
    }
    Ok(())
}

/// A `task_struct` offset as a load's 16-bit offset.
fn off16(off: u32) -> Result<i16, WalkError> {
    i16::try_from(off).map_err(|_| WalkError::Assembly("offset > 32767"))
}

/// Bytes of `struct bpf_iter_num` (the numbers iterator's state, on the stack below the key).
pub(super) const NUM_ITER_BYTES: i32 = 8;

/// Where the numbers iterator's state sits on the stack (below the key).
const NUM_AT: i32 = STACK_KEY as i32 - NUM_ITER_BYTES;

/// The head of a loop over the indexes below the count at the head of the context (r9 the
/// context from here on), under `bpf_rcu_read_lock`: binds `next` to the next round, which
/// finds the index as the key at `r10 + STACK_KEY` (and r0 pointing at it), and jumps to
/// `done` past the last. [`end_each_index`] closes it.
fn for_each_index(a: &mut Asm, layout: &WalkLayout, next: Label, done: Label) {
    a.push(mov_reg(9, 1));
    a.push(call_kfunc(layout.rcu_read_lock));
    a.push(mov_imm(2, 0));
    a.push(load(Size::W, 3, 9, 0)); // the count
    iterate(a, NUM_AT, (layout.num_new, layout.num_next), next, done);
    a.push(load(Size::W, 1, 0, 0));
    a.push(store(Size::W, 10, 1, STACK_KEY));
}

/// The end of [`for_each_index`]'s loop, at `done`: destroys the iterator, unlocks, returns 0.
fn end_each_index(mut a: Asm, layout: &WalkLayout, done: Label) -> Result<Vec<Insn>, WalkError> {
    a.bind(done);
    a.push(mov_reg(1, 10));
    a.push(add_imm(1, NUM_AT));
    a.push(call_kfunc(layout.num_destroy));
    a.push(call_kfunc(layout.rcu_read_unlock));
    a.push(mov_imm(0, 0));
    a.push(exit());
    a.finish()
}

/// The re-read: for each index below the count in the context (the last walk's), reads again
/// through the address at that index of `maps.tasks` what changes of a living thread (its
/// runtime, CPU, flags, exit state) into the record at that index of `maps.records` (none
/// into a vacant one: its address is 0), the rest of it (who the thread is) as the walk wrote it. The exit
/// state is read only of a thread whose flags say it began to exit (`PF_EXITING`, set before
/// it); of the others it is 0. What the address points at is read with `bpf_rdonly_cast`'s
/// untrusted loads, which the kernel guards against faults: should a thread have been freed
/// after all, the loads cannot fault, and the caller throws the read away (the set changed).
///
/// Registers: r9 the context, r8 the record, r7 the task, r0 the index (then the elements).
pub fn reread_program(layout: &WalkLayout, maps: WalkMaps) -> Result<Vec<Insn>, WalkError> {
    let task_struct =
        i32::try_from(layout.task_struct).map_err(|_| WalkError::Assembly("BTF id"))?;
    let mut a = Asm::default();
    let (next, running, done) = (a.label(), a.label(), a.label());
    for_each_index(&mut a, layout, next, done);
    lookup(&mut a, maps.tasks, next);
    a.push(load(Size::DW, 7, 0, 0));
    a.jump(Jump::Eq(7, 0), next);
    lookup(&mut a, maps.records, next);
    a.push(mov_reg(8, 0));
    a.push(mov_reg(1, 7));
    a.push(mov_imm(2, task_struct));
    a.push(call_kfunc(layout.rdonly_cast));
    a.push(mov_reg(7, 0));
    a.push(load(Size::DW, 1, 7, off16(layout.task.runtime)?));
    a.push(store(Size::DW, 8, 1, 16));
    a.push(load(Size::W, 1, 7, off16(layout.task.cpu)?));
    a.push(store(Size::W, 8, 1, 24));
    a.push(load(Size::W, 2, 7, off16(layout.task.flags)?));
    a.push(store(Size::W, 8, 2, 40));
    a.push(mov_imm(1, 0));
    a.push(and_imm(2, TaskRecord::PF_EXITING as i32));
    a.jump(Jump::Eq(2, 0), running);
    a.push(load(Size::W, 1, 7, off16(layout.task.exit_state)?));
    a.bind(running);
    a.push(store(Size::W, 8, 1, 28));
    a.jump(Jump::Always, next);
    end_each_index(a, layout, done)
}

/// The amend: for each item below the count in the context (an element of `items`: a thread
/// id in its low half, an index in its high half), looks the thread up by its id
/// (`bpf_task_from_pid`, which holds a reference until `bpf_task_release`) and writes it
/// whole at that index, its record and its address, as a walk would; where no thread has
/// the id (it was reaped), writes a vacant record ([`TaskRecord::vacant`]) and address 0
/// there instead. User space chooses the items: the threads created or exiting since the
/// last read, and those that had begun to exit then ([`super::amend`]).
///
/// Registers: r9 the context, r7 the task (or null), r8 the address's element, r6 the item,
/// r0 the index (then the elements).
pub fn amend_program(
    layout: &WalkLayout,
    maps: WalkMaps,
    items: i32,
    all_tasks: bool,
) -> Result<Vec<Insn>, WalkError> {
    let (Some(from_pid), Some(release_task)) = (layout.task_from_pid, layout.task_release) else {
        return Err(WalkError::Unsupported(
            "the kernel's BTF has no bpf_task_from_pid or bpf_task_release".into(),
        ));
    };
    let mut a = Asm::default();
    let (next, vacate, release, done) = (a.label(), a.label(), a.label(), a.label());
    for_each_index(&mut a, layout, next, done);
    lookup(&mut a, items, next);
    a.push(load(Size::DW, 6, 0, 0));
    a.push(mov_reg(1, 6));
    a.push(rsh_imm(1, 32));
    a.push(store(Size::W, 10, 1, STACK_KEY)); // from here on the key is the index
    a.push(mov32_reg(1, 6));
    a.push(call_kfunc(from_pid));
    a.push(mov_reg(7, 0));
    lookup(&mut a, maps.tasks, release);
    a.push(mov_reg(8, 0));
    a.jump(Jump::Eq(7, 0), vacate);
    a.push(store(Size::DW, 8, 7, 0));
    lookup(&mut a, maps.records, release);
    copy_thread(&mut a, &layout.task, (7, 0), all_tasks)?;
    a.bind(release);
    a.jump(Jump::Eq(7, 0), next);
    a.push(mov_reg(1, 7));
    a.push(call_kfunc(release_task));
    a.jump(Jump::Always, next);
    a.bind(vacate);
    a.push(store_imm(Size::DW, 8, 0, 0));
    lookup(&mut a, maps.records, next);
    write_vacant(&mut a, 0);
    a.jump(Jump::Always, next);
    end_each_index(a, layout, done)
}

/// Writes [`TaskRecord::vacant`] into the record at register `record`, field by field.
fn write_vacant(a: &mut Asm, record: u8) {
    let vacant = TaskRecord::vacant();
    let words = [
        (0, vacant.tgid),
        (4, vacant.tid),
        (24, vacant.cpu),
        (28, vacant.exit_state),
        (40, vacant.task_flags),
        (44, vacant.reserved),
    ];
    for (at, value) in words {
        a.push(store_imm(Size::W, record, at, value as i32));
    }
    for (at, value) in [
        (8, vacant.start_ns),
        (16, vacant.runtime_ns),
        (32, vacant.process_start_ns),
    ] {
        // (All three are 0: a 32-bit immediate, sign-extended, holds them.)
        a.push(store_imm(Size::DW, record, at, value as i32));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> WalkLayout {
        WalkLayout {
            rcu_read_lock: 101,
            rcu_read_unlock: 102,
            iter_new: 103,
            iter_next: 104,
            iter_destroy: 105,
            all_threads: 1,
            iter_bytes: 24,
            num_new: 106,
            num_next: 107,
            num_destroy: 108,
            rdonly_cast: 109,
            task_struct: 110,
            task_from_pid: Some(111),
            task_release: Some(112),
            task: TaskOffsets {
                pid: 1000,
                tgid: 1004,
                start_time: 2000,
                runtime: 300,
                cpu: 40,
                exit_state: 900,
                group_leader: 1100,
                flags: 44,
            },
        }
    }

    fn maps() -> WalkMaps {
        WalkMaps {
            records: 7,
            tasks: 9,
        }
    }

    /// The kfuncs `insns` calls, in order.
    fn kfuncs(insns: &[Insn]) -> Vec<i32> {
        insns
            .iter()
            .filter(|x| x.code == op::JMP | op::CALL && x.regs >> 4 == op::PSEUDO_KFUNC_CALL)
            .map(|x| x.imm)
            .collect()
    }

    /// The map fds `insns` loads, in order.
    fn map_fds(insns: &[Insn]) -> Vec<i32> {
        insns
            .windows(2)
            .filter(|w| w[0].code == op::LD | op::DW | op::IMM)
            .map(|w| {
                assert_eq!(w[0].regs >> 4, op::PSEUDO_MAP_FD);
                assert_eq!(w[1], insn(0, 0, 0, 0, 0), "the load's second slot");
                w[0].imm
            })
            .collect()
    }

    /// Where each jump of `insns` lands (index), or None for a non-jump.
    fn jump_targets(insns: &[Insn]) -> Vec<Option<usize>> {
        insns
            .iter()
            .enumerate()
            .map(|(i, x)| {
                let is_jump =
                    x.code & 0x07 == op::JMP && !matches!(x.code & 0xf0, op::CALL | op::EXIT);
                is_jump.then(|| (i as isize + 1 + x.off as isize) as usize)
            })
            .collect()
    }

    #[test]
    fn assembles_a_walk_that_calls_the_kfuncs_in_order_and_stays_in_bounds() {
        let insns = program(&layout(), maps(), 5000, false).unwrap();
        assert_eq!(
            kfuncs(&insns),
            vec![101, 103, 104, 105, 102],
            "lock, new, next, destroy, unlock"
        );
        // Every jump lands inside the program, and the program ends with exit.
        for target in jump_targets(&insns).into_iter().flatten() {
            assert!(target < insns.len(), "jump to {target} of {}", insns.len());
        }
        assert_eq!(*insns.last().unwrap(), exit());
        // The task's address goes to the tasks' array (r8 stored into its element), then the
        // record to the records' array; the capacity is the bound.
        assert_eq!(map_fds(&insns), vec![9, 7]);
        let lookups: Vec<usize> = (0..insns.len())
            .filter(|&i| insns[i] == call_helper(op::MAP_LOOKUP_ELEM))
            .collect();
        assert_eq!(insns[lookups[0] + 2], store(Size::DW, 0, 8, 0));
        assert!(
            insns
                .iter()
                .any(|x| x.code == op::JMP | op::JGE | op::K && x.imm == 5000)
        );
        // bpf_iter_task sits below the key: 24 bytes at r10-32.
        let new = insns.iter().position(|x| x.imm == 103).unwrap();
        assert_eq!(insns[new - 1], add_imm(1, -32));
    }

    #[test]
    fn assembles_a_reread_of_what_changes_through_the_kept_addresses() {
        {
            let insns = reread_program(&layout(), maps()).unwrap();
            assert_eq!(
                kfuncs(&insns),
                vec![101, 106, 107, 109, 108, 102],
                "lock, numbers new, next, the cast, destroy, unlock"
            );
            for target in jump_targets(&insns).into_iter().flatten() {
                assert!(target < insns.len(), "jump to {target} of {}", insns.len());
            }
            assert_eq!(*insns.last().unwrap(), exit());
            // The count comes from the context; the addresses' array is read before the
            // records'; the cast is to task_struct.
            let new = insns.iter().position(|x| x.imm == 106).unwrap();
            assert_eq!(insns[new - 3], load(Size::W, 3, 9, 0));
            assert_eq!(
                insns[new - 1],
                add_imm(1, -16),
                "the numbers iterator below the key"
            );
            assert_eq!(map_fds(&insns), vec![9, 7]);
            let cast = insns.iter().position(|x| x.imm == 109).unwrap();
            assert_eq!(insns[cast - 1], mov_imm(2, 110));
            // (task_struct offset, record offset) of each copy through the cast task (r7).
            let mut copies = Vec::new();
            for (i, x) in insns.iter().enumerate() {
                if x.code & 0x07 == op::LDX && x.regs >> 4 == 7 {
                    let dst = x.regs & 0xf;
                    let st = insns[i + 1..]
                        .iter()
                        .find(|y| {
                            y.code & 0x07 == op::STX && y.regs & 0xf == 8 && y.regs >> 4 == dst
                        })
                        .map(|y| y.off);
                    copies.push((x.off, st));
                }
            }
            let expected = vec![
                (300, Some(16)),
                (40, Some(24)),
                (44, Some(40)),
                (900, Some(28)),
            ];
            assert_eq!(copies, expected);
            // The exit state is read only past a test of PF_EXITING; else 0 is stored.
            let exit_load = insns.iter().position(|x| x.off == 900).unwrap();
            assert_eq!(insns[exit_load - 1].code, op::JMP | op::JEQ | op::K);
            assert_eq!(
                insns[exit_load - 2],
                and_imm(2, TaskRecord::PF_EXITING as i32)
            );
            assert_eq!(insns[exit_load - 3], mov_imm(1, 0));
            assert_eq!(
                jump_targets(&insns)[exit_load - 1],
                Some(exit_load + 1),
                "past the load, to the store"
            );
        }
    }

    #[test]
    fn assembles_an_amend_that_releases_every_thread_it_looks_up() {
        for all in [false, true] {
            let insns = amend_program(&layout(), maps(), 5, all).unwrap();
            assert_eq!(
                kfuncs(&insns),
                vec![101, 106, 107, 111, 112, 108, 102],
                "lock, numbers new, next, from_pid, release, destroy, unlock"
            );
            for target in jump_targets(&insns).into_iter().flatten() {
                assert!(target < insns.len(), "jump to {target} of {}", insns.len());
            }
            assert_eq!(*insns.last().unwrap(), exit());
            // The items' array, then the addresses' and records' (written), then the
            // records' again (a vacant one).
            assert_eq!(map_fds(&insns), vec![5, 9, 7, 7]);
            // The thread id is the item's low half, the index (the key from then on) its
            // high half.
            let from_pid = insns.iter().position(|x| x.imm == 111).unwrap();
            assert_eq!(insns[from_pid - 1], mov32_reg(1, 6));
            assert_eq!(insns[from_pid - 2], store(Size::W, 10, 1, STACK_KEY));
            assert_eq!(insns[from_pid - 3], rsh_imm(1, 32));
            // The release is reached only past a test that the task is not null, and every
            // path to the loop's next round that holds a task passes it: the lookups that
            // can fail while it is held jump there.
            let release = insns.iter().position(|x| x.imm == 112).unwrap();
            assert_eq!(insns[release - 1], mov_reg(1, 7));
            assert_eq!(insns[release - 2].code, op::JMP | op::JEQ | op::K);
            let to_release: Vec<usize> = jump_targets(&insns)
                .iter()
                .enumerate()
                .filter(|(_, t)| **t == Some(release - 2))
                .map(|(i, _)| i)
                .collect();
            assert_eq!(to_release.len(), 2, "the two lookups after from_pid");
            // A vacant record is written whole.
            let vacant: Vec<(i16, i32)> = insns
                .iter()
                .skip_while(|x| **x != store_imm(Size::DW, 8, 0, 0))
                .filter(|x| x.code & 0x07 == op::ST && x.regs & 0xf == 0)
                .map(|x| (x.off, x.imm))
                .collect();
            let exiting = TaskRecord::PF_EXITING as i32;
            assert_eq!(
                vacant,
                vec![
                    (0, 0),
                    (4, 0),
                    (24, 0),
                    (28, -1),
                    (40, exiting),
                    (44, 0),
                    (8, 0),
                    (16, 0),
                    (32, 0)
                ]
            );
        }
        let mut old = layout();
        old.task_from_pid = None;
        assert!(matches!(
            amend_program(&old, maps(), 5, true),
            Err(WalkError::Unsupported(_))
        ));
    }

    #[test]
    fn writes_every_field_at_its_place_in_the_record() {
        // (source offset in task_struct, destination offset in the record) of each copy.
        let copies = |all| {
            let insns = program(&layout(), maps(), 5000, all).unwrap();
            let mut out = Vec::new();
            for pair in insns.windows(2) {
                let (ld, st) = (pair[0], pair[1]);
                if ld.code & 0x07 == op::LDX
                    && ld.regs >> 4 == 8
                    && st.code & 0x07 == op::STX
                    && st.regs & 0xf == 0
                {
                    out.push((ld.off, st.off));
                }
            }
            out
        };
        let l = layout();
        let at = |off: u32| off as i16;
        let expected_all = vec![
            (at(l.task.tgid), 0),
            (at(l.task.pid), 4),
            (at(l.task.start_time), 8),
            (at(l.task.runtime), 16),
            (at(l.task.cpu), 24),
            (at(l.task.exit_state), 28),
            (at(l.task.flags), 40),
        ];
        assert_eq!(copies(true), expected_all);
        assert_eq!(copies(false), expected_all);
        // The offsets match TaskRecord's layout.
        assert_eq!(std::mem::offset_of!(TaskRecord, cpu), 24);
        assert_eq!(std::mem::offset_of!(TaskRecord, exit_state), 28);
        assert_eq!(std::mem::offset_of!(TaskRecord, process_start_ns), 32);
        assert_eq!(std::mem::offset_of!(TaskRecord, task_flags), 40);
        // Without --all, the group leader's start time goes to process_start_ns (32).
        let insns = program(&layout(), maps(), 5000, false).unwrap();
        let leader = insns
            .iter()
            .position(|x| x.code == op::LDX | op::MEM | op::DW && x.off == 1100)
            .unwrap();
        assert_eq!(insns[leader + 1], load(Size::DW, 1, 1, 2000));
        assert_eq!(insns[leader + 2], store(Size::DW, 0, 1, 32));
    }

    #[test]
    fn refuses_what_it_cannot_encode() {
        let mut far = layout();
        far.task.runtime = 40_000;
        assert!(matches!(
            program(&far, maps(), 10, true),
            Err(WalkError::Assembly(_))
        ));
        let mut a = Asm::default();
        let never = a.label();
        a.jump(Jump::Always, never);
        assert!(a.finish().is_err());
    }

    #[test]
    fn a_kernel_without_the_kfuncs_is_unsupported_not_an_error() {
        // A BTF blob with no types at all: the walk cannot serve, and says why.
        let mut blob = 0xeb9fu16.to_le_bytes().to_vec();
        blob.extend_from_slice(&[1, 0]);
        for word in [24u32, 0, 0, 0, 1] {
            blob.extend_from_slice(&word.to_le_bytes());
        }
        blob.push(0);
        let btf = Btf::parse(blob).unwrap();
        let offsets = TaskOffsets {
            pid: 0,
            tgid: 4,
            start_time: 8,
            runtime: 16,
            cpu: 24,
            exit_state: 28,
            group_leader: 32,
            flags: 40,
        };
        match WalkLayout::read(&btf, offsets) {
            Err(WalkError::Unsupported(why)) => assert!(why.contains("bpf_iter_task"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
