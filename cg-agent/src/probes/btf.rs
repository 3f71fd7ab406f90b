//! A minimal reader of the kernel's BTF (`/sys/kernel/btf/vmlinux`): just enough to find the
//! byte offset of a struct member (Rust eBPF has no CO-RE relocations here, so user space
//! hands the offsets of `task_struct.pid` and friends to the programs as globals) and the
//! number of arguments of a BTF tracepoint; and, for the open-coded task walk
//! ([`super::task_walk`]), the BTF ids of kernel functions (kfuncs) and the values of enum
//! constants.
//!
//! Hand-written on purpose: aya-obj 0.3 (aya 0.14's object loader) parses BTF, but its public
//! API stops at `Btf::parse` and `id_by_type_name_kind`; reading a struct's members, their
//! names and bit offsets (`type_by_id`, `string_at`, `members`, `member_bit_offset`) is
//! crate-private, and no other maintained crate reads kernel BTF without pulling in libbpf.

use std::path::Path;

/// Errors reading BTF.
#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("malformed BTF: {0}")]
    Malformed(&'static str),
    #[error("BTF has no struct {0}")]
    NoStruct(String),
    #[error("BTF struct {strukt} has no member {member}")]
    NoMember { strukt: String, member: String },
}

const KIND_PTR: u32 = 2;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_ENUM64: u32 = 19;

/// BTF kept as raw bytes plus the offset of each type record, so that reading the whole
/// kernel's BTF (several MB, ~100k types) costs little more memory than the file itself.
#[derive(Debug)]
pub struct Btf {
    data: Vec<u8>,
    strings: std::ops::Range<usize>,
    /// Byte offset of type record `id` (index 0 is void and unused).
    types: Vec<usize>,
}

/// The fixed part of a type record.
#[derive(Clone, Copy, Debug)]
struct Header {
    name_off: u32,
    kind: u32,
    vlen: usize,
    kflag: bool,
    size_or_type: u32,
    at: usize,
}

impl Btf {
    /// Reads the running kernel's BTF.
    pub fn from_sys_fs() -> Result<Self, BtfError> {
        Self::from_file(Path::new("/sys/kernel/btf/vmlinux"))
    }

    pub fn from_file(path: &Path) -> Result<Self, BtfError> {
        let data = std::fs::read(path).map_err(|source| BtfError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(data)
    }

    /// Indexes a little-endian BTF blob.
    pub fn parse(data: Vec<u8>) -> Result<Self, BtfError> {
        if read_u16(&data, 0)? != 0xeb9f {
            return Err(BtfError::Malformed("bad magic (not little-endian BTF)"));
        }
        let hdr_len = read_u32(&data, 4)? as usize;
        let type_off = read_u32(&data, 8)? as usize;
        let type_len = read_u32(&data, 12)? as usize;
        let str_off = read_u32(&data, 16)? as usize;
        let str_len = read_u32(&data, 20)? as usize;
        let strings = hdr_len + str_off..hdr_len + str_off + str_len;
        if strings.end > data.len() {
            return Err(BtfError::Malformed("string section out of bounds"));
        }
        let mut types = vec![0];
        let mut p = hdr_len + type_off;
        let end = p + type_len;
        if end > data.len() {
            return Err(BtfError::Malformed("type section out of bounds"));
        }
        while p < end {
            types.push(p);
            let info = read_u32(&data, p + 4)?;
            let kind = (info >> 24) & 0x1f;
            let vlen = (info & 0xffff) as usize;
            p += 12
                + match kind {
                    1 | 14 | 17 => 4,                      // INT, VAR, DECL_TAG
                    3 => 12,                               // ARRAY
                    KIND_STRUCT | KIND_UNION => 12 * vlen, // members
                    6 | KIND_FUNC_PROTO => 8 * vlen,       // ENUM values, params
                    15 | 19 => 12 * vlen,                  // DATASEC, ENUM64
                    2 | 7 | 8 | 9 | 10 | 11 | 12 | 16 | 18 => 0,
                    _ => return Err(BtfError::Malformed("unknown type kind")),
                };
        }
        Ok(Btf {
            data,
            strings,
            types,
        })
    }

    fn header(&self, id: u32) -> Option<Header> {
        let at = *self.types.get(id as usize).filter(|_| id != 0)?;
        let info = read_u32(&self.data, at + 4).ok()?;
        Some(Header {
            name_off: read_u32(&self.data, at).ok()?,
            kind: (info >> 24) & 0x1f,
            vlen: (info & 0xffff) as usize,
            kflag: info >> 31 == 1,
            size_or_type: read_u32(&self.data, at + 8).ok()?,
            at,
        })
    }

    fn name(&self, off: u32) -> &[u8] {
        let strings = &self.data[self.strings.clone()];
        let tail = strings.get(off as usize..).unwrap_or(&[]);
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        &tail[..end]
    }

    fn find(&self, kind: u32, name: &str) -> Option<u32> {
        (1..self.types.len() as u32).find(|&id| {
            self.header(id)
                .is_some_and(|h| h.kind == kind && self.name(h.name_off) == name.as_bytes())
        })
    }

    /// Members of a struct or union: (name offset, type id, bit offset).
    fn members(&self, h: Header) -> impl Iterator<Item = (u32, u32, u32)> + '_ {
        (0..h.vlen).filter_map(move |i| {
            let at = h.at + 12 + 12 * i;
            let offset = read_u32(&self.data, at + 8).ok()?;
            Some((
                read_u32(&self.data, at).ok()?,
                read_u32(&self.data, at + 4).ok()?,
                if h.kflag {
                    offset & 0x00ff_ffff
                } else {
                    offset
                },
            ))
        })
    }

    /// Byte offset of `member` in `struct strukt`, looking through anonymous structs and
    /// unions the way C does.
    pub fn member_offset(&self, strukt: &str, member: &str) -> Result<u32, BtfError> {
        let id = self
            .find(KIND_STRUCT, strukt)
            .ok_or_else(|| BtfError::NoStruct(strukt.to_string()))?;
        self.find_member(id, member, 0, 0)
            .map(|bits| bits / 8)
            .ok_or_else(|| BtfError::NoMember {
                strukt: strukt.to_string(),
                member: member.to_string(),
            })
    }

    /// Byte offset of a nested member, e.g. `["se", "sum_exec_runtime"]` in `task_struct`.
    pub fn member_path_offset(&self, strukt: &str, path: &[&str]) -> Result<u32, BtfError> {
        let not_found = || BtfError::NoMember {
            strukt: strukt.to_string(),
            member: path.join("."),
        };
        let mut id = self
            .find(KIND_STRUCT, strukt)
            .ok_or_else(|| BtfError::NoStruct(strukt.to_string()))?;
        let mut bits = 0;
        for (i, member) in path.iter().enumerate() {
            let (offset, type_id) = self
                .find_member_typed(id, member, 0, 0)
                .ok_or_else(not_found)?;
            bits += offset;
            if i + 1 < path.len() {
                id = self.resolve(type_id).ok_or_else(not_found)?;
            }
        }
        Ok(bits / 8)
    }

    fn find_member(&self, id: u32, member: &str, base_bits: u32, depth: u32) -> Option<u32> {
        self.find_member_typed(id, member, base_bits, depth)
            .map(|(bits, _)| bits)
    }

    /// (bit offset, type id) of `member`, looking through anonymous members.
    fn find_member_typed(
        &self,
        id: u32,
        member: &str,
        base_bits: u32,
        depth: u32,
    ) -> Option<(u32, u32)> {
        let h = self.header(id)?;
        if depth > 16 || !matches!(h.kind, KIND_STRUCT | KIND_UNION) {
            return None;
        }
        if let Some((_, type_id, bits)) = self
            .members(h)
            .find(|(name, _, _)| self.name(*name) == member.as_bytes())
        {
            return Some((base_bits + bits, type_id));
        }
        self.members(h)
            .filter(|(name, _, _)| self.name(*name).is_empty())
            .find_map(|(_, type_id, bits)| {
                self.find_member_typed(self.resolve(type_id)?, member, base_bits + bits, depth + 1)
            })
    }

    /// Skips typedefs and qualifiers.
    fn resolve(&self, mut id: u32) -> Option<u32> {
        for _ in 0..32 {
            let h = self.header(id)?;
            match h.kind {
                KIND_TYPEDEF | 9 | 10 | 11 | 18 => id = h.size_or_type,
                _ => return Some(id),
            }
        }
        None
    }

    /// The BTF id of the kernel function `name` (what a kfunc call names), if the kernel
    /// has one.
    pub fn func_id(&self, name: &str) -> Option<u32> {
        self.find(KIND_FUNC, name)
    }

    /// The BTF id of `struct name` (what `bpf_rdonly_cast` casts to).
    pub fn struct_id(&self, name: &str) -> Option<u32> {
        self.find(KIND_STRUCT, name)
    }

    /// The size in bytes of `struct name`.
    pub fn struct_size(&self, name: &str) -> Option<u32> {
        Some(self.header(self.find(KIND_STRUCT, name)?)?.size_or_type)
    }

    /// The value of the enum constant `name` (in any enum), if the kernel has one.
    pub fn enum_value(&self, name: &str) -> Option<i64> {
        (1..self.types.len() as u32).find_map(|id| {
            let h = self.header(id)?;
            let step = match h.kind {
                KIND_ENUM => 8,
                KIND_ENUM64 => 12,
                _ => return None,
            };
            (0..h.vlen).find_map(|i| {
                let at = h.at + 12 + step * i;
                if self.name(read_u32(&self.data, at).ok()?) != name.as_bytes() {
                    return None;
                }
                let low = read_u32(&self.data, at + 4).ok()?;
                Some(if h.kind == KIND_ENUM {
                    i64::from(low as i32)
                } else {
                    let high = read_u32(&self.data, at + 8).ok()?;
                    ((u64::from(high) << 32) | u64::from(low)) as i64
                })
            })
        })
    }

    /// Number of arguments the tracepoint `name` passes to programs (the kernel's
    /// `btf_trace_<name>` prototype, minus its leading context pointer).
    pub fn tracepoint_args(&self, name: &str) -> Option<usize> {
        let typedef = self.find(KIND_TYPEDEF, &format!("btf_trace_{name}"))?;
        let ptr = self.header(self.header(typedef)?.size_or_type)?;
        if ptr.kind != KIND_PTR {
            return None;
        }
        let proto = self.header(ptr.size_or_type)?;
        (proto.kind == KIND_FUNC_PROTO).then(|| proto.vlen.saturating_sub(1))
    }
}

fn read_u16(data: &[u8], off: usize) -> Result<u16, BtfError> {
    data.get(off..off + 2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .ok_or(BtfError::Malformed("truncated"))
}

fn read_u32(data: &[u8], off: usize) -> Result<u32, BtfError> {
    data.get(off..off + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or(BtfError::Malformed("truncated"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a tiny BTF blob: struct outer { int a; union { int b; int c; }; } plus
    /// typedef btf_trace_demo -> ptr -> func_proto(void *, int, int).
    fn tiny_btf() -> Vec<u8> {
        let mut strings =
            b"\0int\0outer\0a\0b\0c\0btf_trace_demo\0bpf_demo_kfunc\0demo\0DEMO_A\0DEMO_B\0"
                .to_vec();
        let s = |name: &str, strings: &[u8]| -> u32 {
            let needle = [name.as_bytes(), b"\0"].concat();
            strings
                .windows(needle.len())
                .position(|w| w == needle.as_slice())
                .unwrap() as u32
        };
        let mut types = Vec::new();
        let mut push = |words: &[u32]| {
            for w in words {
                types.extend_from_slice(&w.to_le_bytes());
            }
        };
        // 1: int (INT, size 4, encoding bits 32)
        push(&[s("int", &strings), 1 << 24, 4, 32]);
        // 2: anonymous union { b at 0, c at 0 }, size 4
        push(&[
            0,
            (5 << 24) | 2,
            4,
            s("b", &strings),
            1,
            0,
            s("c", &strings),
            1,
            0,
        ]);
        // 3: struct outer { a at 0 bits; <anon union> at 32 bits }, size 8
        push(&[
            s("outer", &strings),
            (4 << 24) | 2,
            8,
            s("a", &strings),
            1,
            0,
            0,
            2,
            32,
        ]);
        // 4: func_proto(void*, int, int) returning void, params (name 0, type)
        push(&[0, (13 << 24) | 3, 0, 0, 5, 0, 1, 0, 1]);
        // 5: ptr -> void (for the ctx param), 6: ptr -> 4
        push(&[0, 2 << 24, 0]);
        push(&[0, 2 << 24, 4]);
        // 7: typedef btf_trace_demo -> 6
        push(&[s("btf_trace_demo", &strings), 8 << 24, 6]);
        // 8: func bpf_demo_kfunc -> 4
        push(&[s("bpf_demo_kfunc", &strings), 12 << 24, 4]);
        // 9: enum demo { DEMO_A = -1, DEMO_B = 2 }, size 4
        push(&[
            s("demo", &strings),
            (6 << 24) | 2,
            4,
            s("DEMO_A", &strings),
            u32::MAX,
            s("DEMO_B", &strings),
            2,
        ]);
        strings.push(0);
        let mut blob = Vec::new();
        blob.extend_from_slice(&0xeb9fu16.to_le_bytes());
        blob.push(1);
        blob.push(0);
        for w in [
            24u32,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ] {
            blob.extend_from_slice(&w.to_le_bytes());
        }
        blob.extend_from_slice(&types);
        blob.extend_from_slice(&strings);
        blob
    }

    #[test]
    fn finds_members_through_anonymous_unions() {
        let btf = Btf::parse(tiny_btf()).unwrap();
        assert_eq!(btf.member_offset("outer", "a").unwrap(), 0);
        assert_eq!(btf.member_offset("outer", "c").unwrap(), 4);
        assert_eq!(btf.member_path_offset("outer", &["c"]).unwrap(), 4);
        assert!(btf.member_path_offset("outer", &["a", "b"]).is_err());
        assert!(matches!(
            btf.member_offset("outer", "zzz"),
            Err(BtfError::NoMember { .. })
        ));
        assert!(matches!(
            btf.member_offset("nope", "a"),
            Err(BtfError::NoStruct(_))
        ));
        assert_eq!(btf.tracepoint_args("demo"), Some(2));
        assert_eq!(btf.tracepoint_args("missing"), None);
    }

    #[test]
    fn finds_kfuncs_enum_values_and_struct_sizes() {
        let btf = Btf::parse(tiny_btf()).unwrap();
        assert_eq!(btf.func_id("bpf_demo_kfunc"), Some(8));
        assert_eq!(btf.func_id("outer"), None, "a struct is no function");
        assert_eq!(btf.enum_value("DEMO_B"), Some(2));
        assert_eq!(btf.enum_value("DEMO_A"), Some(-1));
        assert_eq!(btf.enum_value("DEMO_C"), None);
        assert_eq!(btf.struct_size("outer"), Some(8));
        assert_eq!(btf.struct_size("nope"), None);
    }

    #[test]
    fn a_truncated_blob_is_an_error_or_finds_nothing_but_never_panics() {
        let blob = tiny_btf();
        for len in 0..blob.len() {
            let Ok(btf) = Btf::parse(blob[..len].to_vec()) else {
                continue;
            };
            let _ = btf.func_id("bpf_demo_kfunc");
            let _ = btf.enum_value("DEMO_B");
            let _ = btf.struct_size("outer");
            let _ = btf.member_offset("outer", "c");
        }
        // Header offsets that point past the end.
        let mut bad = blob.clone();
        bad[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Btf::parse(bad).is_err());
    }

    #[test]
    fn rejects_garbage() {
        assert!(Btf::parse(b"not btf at all, no".to_vec()).is_err());
        assert!(Btf::parse(Vec::new()).is_err());
    }

    #[test]
    fn reads_the_running_kernel() {
        // Every kernel this project supports has BTF; the probes cannot load without it.
        let btf = Btf::from_sys_fs().expect("/sys/kernel/btf/vmlinux");
        let pid = btf.member_offset("task_struct", "pid").unwrap();
        let tgid = btf.member_offset("task_struct", "tgid").unwrap();
        assert_eq!(tgid, pid + 4, "pid and tgid are adjacent pid_t fields");
        assert!(btf.member_offset("linux_binprm", "filename").is_ok());
        let se = btf.member_offset("task_struct", "se").unwrap();
        let runtime = btf
            .member_path_offset("task_struct", &["se", "sum_exec_runtime"])
            .unwrap();
        assert!(
            runtime > se && runtime < se + 512,
            "se at {se}, runtime at {runtime}"
        );
        assert_eq!(
            btf.member_path_offset("task_struct", &["pid"]).unwrap(),
            pid
        );
        assert_eq!(btf.tracepoint_args("sched_switch"), Some(4));
        assert_eq!(btf.tracepoint_args("sched_process_fork"), Some(2));
    }
}
