//! uprobe_multi links (Linux 6.6 and later) for the function probes: one link attaches a
//! program to many offsets of one file in one system call, and closing it unregisters them
//! all behind a single RCU grace period. A uprobe made through a perf event costs several
//! grace periods to take down, one probe after the other under the kernel's global
//! `event_mutex` (about 0.1 s per probe measured here, minutes for a thousand functions).
//!
//! aya 0.14 neither knows `uprobe.multi` programs nor lets a program be loaded with the
//! expected attach type such links need, so the two function programs are loaded a second
//! time here: the object is parsed again with aya's own parser, its map references are
//! pointed at the maps aya created (so both copies share them), and the programs are loaded
//! with `BPF_TRACE_UPROBE_MULTI`. Only the kernel's own answer that it has no such programs
//! ([`unsupported`]) sends the caller to aya's one-perf-event-per-probe path; a load that a
//! signal interrupted is made again (see [`super::retry`]), and any other failure is an error.

use std::{
    collections::{HashMap, HashSet},
    ffi::CString,
    io,
    os::fd::{AsFd, AsRawFd, OwnedFd, RawFd},
    path::Path,
};

use aya::{Ebpf, maps::Map};

use super::retry::{Retried, again_after_signals};

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_PROG_TYPE_KPROBE: u32 = 2;
const BPF_TRACE_UPROBE_MULTI: u32 = 48;
/// `link_create.uprobe_multi.flags`: probe the return, not the entry.
const BPF_F_UPROBE_MULTI_RETURN: u32 = 1;

/// The head of `union bpf_attr` for `BPF_PROG_LOAD`, up to `expected_attach_type` (the
/// kernel zero-fills the rest).
#[repr(C)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}
const _: () = assert!(std::mem::size_of::<ProgLoadAttr>() == 72);

/// `union bpf_attr` for `BPF_LINK_CREATE` of a uprobe_multi link.
#[repr(C)]
struct UprobeMultiLinkAttr {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    path: u64,
    offsets: u64,
    ref_ctr_offsets: u64,
    cookies: u64,
    cnt: u32,
    multi_flags: u32,
    pid: u32,
    _pad: u32,
}
const _: () = assert!(std::mem::size_of::<UprobeMultiLinkAttr>() == 64);

/// One call that hands back a descriptor; not made again here on a signal (the callers'
/// [`again_after_signals`] checks for a stop request between tries).
fn sys_bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<OwnedFd> {
    super::sys_bpf::once(cmd, attr).and_then(super::sys_bpf::owned_fd)
}

/// The map's file descriptor, for the map types cg-ebpf uses.
fn map_fd(map: &Map) -> Option<RawFd> {
    let data = match map {
        Map::Array(d)
        | Map::HashMap(d)
        | Map::LruHashMap(d)
        | Map::PerCpuArray(d)
        | Map::PerCpuHashMap(d)
        | Map::PerCpuLruHashMap(d)
        | Map::RingBuf(d)
        | Map::StackTraceMap(d)
        | Map::PerfEventArray(d)
        | Map::ProgramArray(d)
        | Map::Queue(d)
        | Map::Stack(d)
        | Map::BloomFilter(d)
        | Map::LpmTrie(d)
        // Task storage (THREAD_MARKS), which aya 0.14 has no type for.
        | Map::Unsupported(d) => d,
        _ => return None,
    };
    Some(data.fd().as_fd().as_raw_fd())
}

/// Whether an OS error of loading or linking means "no uprobe_multi in this kernel" rather
/// than "not this program" or "not this function".
pub(super) fn unsupported(err: &io::Error) -> bool {
    // Kernels before 6.6 answer EINVAL to the unknown attach type; without CONFIG_UPROBES,
    // EOPNOTSUPP. (ENOTSUPP, 524, is a function whose first instruction cannot be probed;
    // EAGAIN and EINTR are signals, made again.)
    matches!(
        err.raw_os_error(),
        Some(libc::EINVAL | libc::EOPNOTSUPP | libc::ENOSYS)
    )
}

/// Why the programs for uprobe_multi links were not loaded.
#[derive(Debug)]
pub(super) enum MultiLoadError {
    /// The kernel said it has no such programs: take aya's path.
    Unsupported(String),
    /// A stop request (this signal) came while loading.
    Stopped(i32),
    /// Anything else: the run cannot go on as asked.
    Failed(String),
}

/// The entry and return programs, loaded for uprobe_multi links.
pub(super) struct MultiPrograms {
    entry: OwnedFd,
    ret: OwnedFd,
}

impl MultiPrograms {
    /// Loads `entry` and `ret` from `object` against the maps aya created for it. Must run
    /// before any map is taken out of `ebpf`. `stop()` says whether a stop signal came (asked
    /// when a signal interrupts a load).
    pub(super) fn load(
        ebpf: &Ebpf,
        object: &[u8],
        entry: &str,
        ret: &str,
        stop: &mut dyn FnMut() -> Option<i32>,
    ) -> Result<Self, MultiLoadError> {
        use MultiLoadError::Failed;
        let mut obj =
            aya_obj::Object::parse(object).map_err(|e| Failed(format!("parsing: {e}")))?;
        let fds: HashMap<&str, RawFd> = ebpf
            .maps()
            .filter_map(|(name, map)| Some((name, map_fd(map)?)))
            .collect();
        let definitions = obj.maps.clone();
        let mut maps = Vec::new();
        for (name, definition) in &definitions {
            let fd = fds.get(name.as_str()).ok_or_else(|| {
                Failed(format!("map {name} was not created or has an unknown type"))
            })?;
            maps.push((name.as_str(), *fd, definition));
        }
        let text_sections: HashSet<usize> = obj.functions.keys().map(|(s, _)| *s).collect();
        obj.relocate_maps(maps.into_iter(), &text_sections)
            .map_err(|e| Failed(format!("relocating maps: {e}")))?;
        obj.relocate_calls(&text_sections)
            .map_err(|e| Failed(format!("relocating calls: {e}")))?;
        let mut load = |name: &str| -> Result<OwnedFd, MultiLoadError> {
            let program = obj
                .programs
                .get(name)
                .ok_or_else(|| Failed(format!("no program {name}")))?;
            let function = obj
                .functions
                .get(&program.function_key())
                .ok_or_else(|| Failed(format!("no code for {name}")))?;
            let mut prog_name = [0u8; 16];
            for (slot, byte) in prog_name.iter_mut().zip(name.bytes().take(15)) {
                *slot = byte;
            }
            let license: &CString = &program.license;
            let loaded = again_after_signals(&mut *stop, io::Error::raw_os_error, || {
                let mut attr = ProgLoadAttr {
                    prog_type: BPF_PROG_TYPE_KPROBE,
                    insn_cnt: function.instructions.len() as u32,
                    insns: function.instructions.as_ptr() as u64,
                    license: license.as_ptr() as u64,
                    log_level: 0,
                    log_size: 0,
                    log_buf: 0,
                    kern_version: program.kernel_version.unwrap_or(0),
                    prog_flags: 0,
                    prog_name,
                    prog_ifindex: 0,
                    expected_attach_type: BPF_TRACE_UPROBE_MULTI,
                };
                sys_bpf(BPF_PROG_LOAD, &mut attr)
            });
            match loaded {
                Ok(fd) => Ok(fd),
                Err(Retried::Stopped(signal)) => Err(MultiLoadError::Stopped(signal)),
                Err(Retried::Failed(e)) if unsupported(&e) => {
                    Err(MultiLoadError::Unsupported(format!("loading {name}: {e}")))
                }
                Err(Retried::Failed(e)) => Err(Failed(format!("loading {name}: {e}"))),
            }
        };
        Ok(MultiPrograms {
            entry: load(entry)?,
            ret: load(ret)?,
        })
    }

    /// Attaches the entry (or return) program to `offsets` of `path`, each with its cookie,
    /// in every process. The link detaches when dropped.
    pub(super) fn attach(
        &self,
        path: &Path,
        offsets: &[u64],
        cookies: &[u64],
        return_probe: bool,
    ) -> io::Result<OwnedFd> {
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(offsets.len(), cookies.len());
        let path = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let program = if return_probe { &self.ret } else { &self.entry };
        let mut attr = UprobeMultiLinkAttr {
            prog_fd: program.as_raw_fd() as u32,
            target_fd: 0,
            attach_type: BPF_TRACE_UPROBE_MULTI,
            flags: 0,
            path: path.as_ptr() as u64,
            offsets: offsets.as_ptr() as u64,
            ref_ctr_offsets: 0,
            cookies: cookies.as_ptr() as u64,
            cnt: offsets.len() as u32,
            multi_flags: if return_probe {
                BPF_F_UPROBE_MULTI_RETURN
            } else {
                0
            },
            pid: 0,
            _pad: 0,
        };
        sys_bpf(BPF_LINK_CREATE, &mut attr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_kernels_feature_answers_mean_no_uprobe_multi() {
        let os = io::Error::from_raw_os_error;
        for no_such_links in [libc::EINVAL, libc::EOPNOTSUPP, libc::ENOSYS] {
            assert!(unsupported(&os(no_such_links)), "{no_such_links}");
        }
        // A signal in the middle of the call, a function that cannot be probed, no rights.
        for other in [libc::EAGAIN, libc::EINTR, 524, libc::EPERM, libc::ENOMEM] {
            assert!(!unsupported(&os(other)), "{other}");
        }
    }
}
