//! Reads the whole per-thread map with `BPF_MAP_LOOKUP_BATCH`: one syscall per chunk of
//! entries instead of two per entry (aya 0.14 has no batch operations). With `--all` the map
//! holds every thread that ran, so this keeps the agent's own CPU cost low.

use std::{io, os::fd::AsRawFd, os::fd::BorrowedFd};

use cg_common::{ThreadKey, ThreadTime};

const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
const KEY_SIZE: usize = std::mem::size_of::<ThreadKey>();
/// Per-CPU values are laid out at 8-byte strides.
const VALUE_STRIDE: usize = std::mem::size_of::<ThreadTime>().next_multiple_of(8);

/// The `batch` member of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

pub enum BatchError {
    /// The kernel does not support batch lookups on this map: fall back to iterating.
    Unsupported,
    Io(io::Error),
}

/// Reusable buffers for batch reads of the per-CPU thread map.
pub struct BatchReader {
    cpu_count: usize,
    chunk: usize,
    keys: Vec<u8>,
    values: Vec<u8>,
}

impl BatchReader {
    pub fn new(cpu_count: usize) -> Self {
        BatchReader {
            cpu_count: cpu_count.max(1),
            chunk: 256,
            keys: Vec::new(),
            values: Vec::new(),
        }
    }

    /// Reads every entry: each thread with its on-CPU ns per CPU id.
    pub fn read(&mut self, fd: BorrowedFd<'_>) -> Result<Vec<(ThreadKey, Vec<u64>)>, BatchError> {
        let mut out = Vec::new();
        let (mut token_in, mut token_out) = (0u64, 0u64);
        let mut first = true;
        loop {
            self.keys.resize(self.chunk * KEY_SIZE, 0);
            self.values
                .resize(self.chunk * VALUE_STRIDE * self.cpu_count, 0);
            let mut attr = BatchAttr {
                in_batch: if first {
                    0
                } else {
                    &token_in as *const u64 as u64
                },
                out_batch: &mut token_out as *mut u64 as u64,
                keys: self.keys.as_mut_ptr() as u64,
                values: self.values.as_mut_ptr() as u64,
                count: self.chunk as u32,
                map_fd: fd.as_raw_fd() as u32,
                ..BatchAttr::default()
            };
            // SAFETY: the attr points at buffers sized for `count` keys and per-CPU values,
            // which stay alive and unaliased for the duration of the call.
            let ret = unsafe {
                libc::syscall(
                    libc::SYS_bpf,
                    BPF_MAP_LOOKUP_BATCH,
                    &mut attr as *mut BatchAttr,
                    std::mem::size_of::<BatchAttr>(),
                )
            };
            let error = (ret < 0).then(io::Error::last_os_error);
            let done = match &error {
                None => false,
                Some(e) if e.raw_os_error() == Some(libc::ENOENT) => true,
                Some(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                    // One hash bucket holds more entries than the chunk: grow and retry.
                    self.chunk *= 2;
                    continue;
                }
                Some(e)
                    if first && matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOTSUP)) =>
                {
                    return Err(BatchError::Unsupported);
                }
                Some(_) => {
                    return Err(BatchError::Io(
                        error.unwrap_or_else(io::Error::last_os_error),
                    ));
                }
            };
            self.decode(attr.count as usize, &mut out);
            if done {
                return Ok(out);
            }
            token_in = token_out;
            first = false;
        }
    }

    fn decode(&self, count: usize, out: &mut Vec<(ThreadKey, Vec<u64>)>) {
        for i in 0..count {
            let k = &self.keys[i * KEY_SIZE..(i + 1) * KEY_SIZE];
            let key = ThreadKey {
                tgid: u32::from_ne_bytes([k[0], k[1], k[2], k[3]]),
                tid: u32::from_ne_bytes([k[4], k[5], k[6], k[7]]),
                start_ns: u64::from_ne_bytes([
                    k[8], k[9], k[10], k[11], k[12], k[13], k[14], k[15],
                ]),
            };
            let base = i * VALUE_STRIDE * self.cpu_count;
            let per_cpu = (0..self.cpu_count)
                .map(|cpu| {
                    let at = base + cpu * VALUE_STRIDE;
                    let mut ns = [0u8; 8];
                    ns.copy_from_slice(&self.values[at..at + 8]);
                    u64::from_ne_bytes(ns)
                })
                .collect();
            out.push((key, per_cpu));
        }
    }
}
