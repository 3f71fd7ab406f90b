//! A small BPF assembler: the instructions the task walk's programs use, and labels for
//! jumps. aya 0.14 cannot relocate kfunc calls, so these programs are written here as
//! instructions (see [`super::programs`]).

use super::WalkError;

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
pub(super) mod op {
    pub const LD: u8 = 0x00;
    pub const LDX: u8 = 0x01;
    pub const ST: u8 = 0x02;
    pub const STX: u8 = 0x03;
    pub const JMP: u8 = 0x05;
    pub const ALU: u8 = 0x04;
    pub const ALU64: u8 = 0x07;
    pub const W: u8 = 0x00;
    pub const DW: u8 = 0x18;
    pub const IMM: u8 = 0x00;
    pub const MEM: u8 = 0x60;
    pub const K: u8 = 0x00;
    pub const X: u8 = 0x08;
    pub const ADD: u8 = 0x00;
    pub const AND: u8 = 0x50;
    pub const RSH: u8 = 0x70;
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
    pub(super) fn bits(self) -> u8 {
        match self {
            Size::W => op::W,
            Size::DW => op::DW,
        }
    }
}

pub(super) fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (dst & 0xf) | (src << 4),
        off,
        imm,
    }
}

pub(super) fn mov_reg(dst: u8, src: u8) -> Insn {
    insn(op::ALU64 | op::MOV | op::X, dst, src, 0, 0)
}
pub(super) fn mov_imm(dst: u8, imm: i32) -> Insn {
    insn(op::ALU64 | op::MOV | op::K, dst, 0, 0, imm)
}
/// `dst = (u32)src` (the upper half zeroed).
pub(super) fn mov32_reg(dst: u8, src: u8) -> Insn {
    insn(op::ALU | op::MOV | op::X, dst, src, 0, 0)
}
pub(super) fn rsh_imm(dst: u8, imm: i32) -> Insn {
    insn(op::ALU64 | op::RSH | op::K, dst, 0, 0, imm)
}
pub(super) fn add_imm(dst: u8, imm: i32) -> Insn {
    insn(op::ALU64 | op::ADD | op::K, dst, 0, 0, imm)
}
pub(super) fn and_imm(dst: u8, imm: i32) -> Insn {
    insn(op::ALU64 | op::AND | op::K, dst, 0, 0, imm)
}
pub(super) fn load(size: Size, dst: u8, src: u8, off: i16) -> Insn {
    insn(op::LDX | op::MEM | size.bits(), dst, src, off, 0)
}
pub(super) fn store(size: Size, dst: u8, src: u8, off: i16) -> Insn {
    insn(op::STX | op::MEM | size.bits(), dst, src, off, 0)
}
pub(super) fn store_imm(size: Size, dst: u8, off: i16, imm: i32) -> Insn {
    insn(op::ST | op::MEM | size.bits(), dst, 0, off, imm)
}
pub(super) fn call_helper(id: i32) -> Insn {
    insn(op::JMP | op::CALL, 0, 0, 0, id)
}
pub(super) fn call_kfunc(btf_id: u32) -> Insn {
    insn(
        op::JMP | op::CALL,
        0,
        op::PSEUDO_KFUNC_CALL,
        0,
        btf_id as i32,
    )
}
pub(super) fn exit() -> Insn {
    insn(op::JMP | op::EXIT, 0, 0, 0, 0)
}
pub(super) fn load_map_fd(dst: u8, fd: i32) -> [Insn; 2] {
    [
        insn(op::LD | op::DW | op::IMM, dst, op::PSEUDO_MAP_FD, 0, fd),
        insn(0, 0, 0, 0, 0),
    ]
}

/// A jump target, bound to a place with [`Asm::bind`].
#[derive(Clone, Copy, Debug)]
pub(super) struct Label(usize);

/// Jump conditions.
#[derive(Clone, Copy, Debug)]
pub(super) enum Jump {
    Always,
    /// `reg == imm`
    Eq(u8, i32),
    /// `reg >= imm` (unsigned)
    Ge(u8, i32),
}

/// An assembler with labels for jumps.
#[derive(Default)]
pub(super) struct Asm {
    insns: Vec<Insn>,
    labels: Vec<Option<usize>>,
    jumps: Vec<(usize, Label)>,
}

impl Asm {
    pub(super) fn push(&mut self, insn: Insn) {
        self.insns.push(insn);
    }

    pub(super) fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    pub(super) fn bind(&mut self, label: Label) {
        self.labels[label.0] = Some(self.insns.len());
    }

    pub(super) fn jump(&mut self, jump: Jump, to: Label) {
        self.jumps.push((self.insns.len(), to));
        self.push(match jump {
            Jump::Always => insn(op::JMP | op::JA, 0, 0, 0, 0),
            Jump::Eq(reg, imm) => insn(op::JMP | op::JEQ | op::K, reg, 0, 0, imm),
            Jump::Ge(reg, imm) => insn(op::JMP | op::JGE | op::K, reg, 0, 0, imm),
        });
    }

    /// The instructions, every jump pointed at its label.
    pub(super) fn finish(mut self) -> Result<Vec<Insn>, WalkError> {
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
