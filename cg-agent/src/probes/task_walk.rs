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

use super::{
    btf::Btf,
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

// ---- BPF instructions ----

/// One BPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    /// Destination register in the low nibble, source in the high one.
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}
const _: () = assert!(size_of::<Insn>() == 8);

/// Opcode parts (include/uapi/linux/bpf.h, bpf_common.h).
mod op {
    pub const LD: u8 = 0x00;
    pub const LDX: u8 = 0x01;
    pub const ST: u8 = 0x02;
    pub const STX: u8 = 0x03;
    pub const JMP: u8 = 0x05;
    pub const ALU64: u8 = 0x07;
    pub const W: u8 = 0x00;
    pub const DW: u8 = 0x18;
    pub const IMM: u8 = 0x00;
    pub const MEM: u8 = 0x60;
    pub const K: u8 = 0x00;
    pub const X: u8 = 0x08;
    pub const ADD: u8 = 0x00;
    pub const AND: u8 = 0x50;
    pub const MOV: u8 = 0xb0;
    pub const JA: u8 = 0x00;
    pub const JEQ: u8 = 0x10;
    pub const JGE: u8 = 0x30;
    pub const CALL: u8 = 0x80;
    pub const EXIT: u8 = 0x90;
    pub const PSEUDO_MAP_FD: u8 = 1;
    pub const PSEUDO_KFUNC_CALL: u8 = 2;
    /// `BPF_FUNC_map_lookup_elem`.
    pub const MAP_LOOKUP_ELEM: i32 = 1;
}

/// Size of a load or store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    W,
    DW,
}

impl Size {
    fn bits(self) -> u8 {
        match self {
            Size::W => op::W,
            Size::DW => op::DW,
        }
    }
}

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (dst & 0xf) | (src << 4),
        off,
        imm,
    }
}

fn mov_reg(dst: u8, src: u8) -> Insn {
    insn(op::ALU64 | op::MOV | op::X, dst, src, 0, 0)
}
fn mov_imm(dst: u8, imm: i32) -> Insn {
    insn(op::ALU64 | op::MOV | op::K, dst, 0, 0, imm)
}
fn add_imm(dst: u8, imm: i32) -> Insn {
    insn(op::ALU64 | op::ADD | op::K, dst, 0, 0, imm)
}
fn and_imm(dst: u8, imm: i32) -> Insn {
    insn(op::ALU64 | op::AND | op::K, dst, 0, 0, imm)
}
fn load(size: Size, dst: u8, src: u8, off: i16) -> Insn {
    insn(op::LDX | op::MEM | size.bits(), dst, src, off, 0)
}
fn store(size: Size, dst: u8, src: u8, off: i16) -> Insn {
    insn(op::STX | op::MEM | size.bits(), dst, src, off, 0)
}
fn store_imm(size: Size, dst: u8, off: i16, imm: i32) -> Insn {
    insn(op::ST | op::MEM | size.bits(), dst, 0, off, imm)
}
fn call_helper(id: i32) -> Insn {
    insn(op::JMP | op::CALL, 0, 0, 0, id)
}
fn call_kfunc(btf_id: u32) -> Insn {
    insn(
        op::JMP | op::CALL,
        0,
        op::PSEUDO_KFUNC_CALL,
        0,
        btf_id as i32,
    )
}
fn exit() -> Insn {
    insn(op::JMP | op::EXIT, 0, 0, 0, 0)
}
fn load_map_fd(dst: u8, fd: i32) -> [Insn; 2] {
    [
        insn(op::LD | op::DW | op::IMM, dst, op::PSEUDO_MAP_FD, 0, fd),
        insn(0, 0, 0, 0, 0),
    ]
}

/// A jump target, bound to a place with [`Asm::bind`].
#[derive(Clone, Copy, Debug)]
struct Label(usize);

/// Jump conditions.
#[derive(Clone, Copy, Debug)]
enum Jump {
    Always,
    /// `reg == imm`
    Eq(u8, i32),
    /// `reg >= imm` (unsigned)
    Ge(u8, i32),
}

/// An assembler with labels for jumps.
#[derive(Default)]
struct Asm {
    insns: Vec<Insn>,
    labels: Vec<Option<usize>>,
    jumps: Vec<(usize, Label)>,
}

impl Asm {
    fn push(&mut self, insn: Insn) {
        self.insns.push(insn);
    }

    fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    fn bind(&mut self, label: Label) {
        self.labels[label.0] = Some(self.insns.len());
    }

    fn jump(&mut self, jump: Jump, to: Label) {
        self.jumps.push((self.insns.len(), to));
        self.push(match jump {
            Jump::Always => insn(op::JMP | op::JA, 0, 0, 0, 0),
            Jump::Eq(reg, imm) => insn(op::JMP | op::JEQ | op::K, reg, 0, 0, imm),
            Jump::Ge(reg, imm) => insn(op::JMP | op::JGE | op::K, reg, 0, 0, imm),
        });
    }

    /// The instructions, every jump pointed at its label.
    fn finish(mut self) -> Result<Vec<Insn>, WalkError> {
        for (at, label) in self.jumps {
            let target = self
                .labels
                .get(label.0)
                .copied()
                .flatten()
                .ok_or(WalkError::Assembly("a jump to a label never bound"))?;
            let off = i16::try_from(target as isize - at as isize - 1)
                .map_err(|_| WalkError::Assembly("a jump too far"))?;
            self.insns[at].off = off;
        }
        Ok(self.insns)
    }
}

// ---- what the program needs of the kernel ----

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
const CTX_BYTES: usize = 16;
const RECORD_BYTES: u32 = size_of::<TaskRecord>() as u32;
/// `struct bpf_iter_task` sits at the bottom of the stack; the array key just below it.
const STACK_KEY: i16 = -8;

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
fn iterate(a: &mut Asm, at: i32, (new, next_kfunc): (u32, u32), next: Label, done: Label) {
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
fn lookup(a: &mut Asm, map_fd: i32, missing: Label) {
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
/// and stops with the "full" flag when none is left. With `all_tasks`, the fields that tell
/// targets' threads from others are not read (all are targets'), which saves two loads from
/// other cache lines per thread.
///
/// Registers: r9 the context, r8 the task, r6 the count (kept in the context, so that the
/// verifier sees an unknown number each time round and the loop converges), r0 the record.
pub fn program(
    layout: &WalkLayout,
    maps: WalkMaps,
    capacity: u32,
    all_tasks: bool,
) -> Result<Vec<Insn>, WalkError> {
    let off16 = |off: u32| i16::try_from(off).map_err(|_| WalkError::Assembly("offset > 32767"));
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
    // (task_struct field, its size, where it goes in the record)
    let mut fields = vec![
        (layout.task.tgid, Size::W, 0),
        (layout.task.pid, Size::W, 4),
        (layout.task.start_time, Size::DW, 8),
        (layout.task.runtime, Size::DW, 16),
        (layout.task.cpu, Size::W, 24),
        (layout.task.exit_state, Size::W, 28),
    ];
    if !all_tasks {
        fields.push((layout.task.flags, Size::W, 40));
    }
    for (from, size, to) in fields {
        a.push(load(size, 1, 8, off16(from)?));
        a.push(store(size, 0, 1, to));
    }
    if !all_tasks {
        // The process's start time: its group leader's.
        a.push(load(Size::DW, 1, 8, off16(layout.task.group_leader)?));
        a.push(load(Size::DW, 1, 1, off16(layout.task.start_time)?));
        a.push(store(Size::DW, 0, 1, 32));
    }
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

/// Bytes of `struct bpf_iter_num` (the numbers iterator's state, on the stack below the key).
const NUM_ITER_BYTES: i32 = 8;

/// The re-read: for each index below the count in the context (the last walk's), reads again
/// through the address at that index of `maps.tasks` what changes of a living thread (its
/// runtime, CPU, exit state, and without `all_tasks` its flags) into the record at that
/// index of `maps.records`, the rest of it (who the thread is) as the walk wrote it. The exit
/// state is read only of a thread whose flags say it began to exit (`PF_EXITING`, set before
/// it); of the others it is 0. What the address points at is read with `bpf_rdonly_cast`'s
/// untrusted loads, which the kernel guards against faults: should a thread have been freed
/// after all, the loads cannot fault, and the caller throws the read away (the set changed).
///
/// Registers: r9 the context, r8 the record, r7 the task, r0 the index (then the elements).
pub fn reread_program(
    layout: &WalkLayout,
    maps: WalkMaps,
    all_tasks: bool,
) -> Result<Vec<Insn>, WalkError> {
    let off16 = |off: u32| i16::try_from(off).map_err(|_| WalkError::Assembly("offset > 32767"));
    let num_at = i32::from(STACK_KEY) - NUM_ITER_BYTES;
    let task_struct =
        i32::try_from(layout.task_struct).map_err(|_| WalkError::Assembly("BTF id"))?;
    let mut a = Asm::default();
    let (next, running, done) = (a.label(), a.label(), a.label());
    a.push(mov_reg(9, 1));
    a.push(call_kfunc(layout.rcu_read_lock));
    a.push(mov_imm(2, 0));
    a.push(load(Size::W, 3, 9, 0)); // the count
    iterate(
        &mut a,
        num_at,
        (layout.num_new, layout.num_next),
        next,
        done,
    );
    a.push(load(Size::W, 1, 0, 0));
    a.push(store(Size::W, 10, 1, STACK_KEY));
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
    if !all_tasks {
        a.push(store(Size::W, 8, 2, 40));
    }
    a.push(mov_imm(1, 0));
    a.push(and_imm(2, TaskRecord::PF_EXITING as i32));
    a.jump(Jump::Eq(2, 0), running);
    a.push(load(Size::W, 1, 7, off16(layout.task.exit_state)?));
    a.bind(running);
    a.push(store(Size::W, 8, 1, 28));
    a.jump(Jump::Always, next);
    a.bind(done);
    a.push(mov_reg(1, 10));
    a.push(add_imm(1, num_at));
    a.push(call_kfunc(layout.num_destroy));
    a.push(call_kfunc(layout.rcu_read_unlock));
    a.push(mov_imm(0, 0));
    a.push(exit());
    a.finish()
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
        for all in [false, true] {
            let insns = reread_program(&layout(), maps(), all).unwrap();
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
            let flags_to = if all { None } else { Some(40) };
            let expected = vec![
                (300, Some(16)),
                (40, Some(24)),
                (44, flags_to),
                (900, Some(28)),
            ];
            assert_eq!(copies, expected, "--all: {all}");
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
        ];
        assert_eq!(copies(true), expected_all);
        let mut expected = expected_all.clone();
        expected.push((at(l.task.flags), 40));
        assert_eq!(copies(false), expected);
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
