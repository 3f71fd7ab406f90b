//! Reads a whole map with `BPF_MAP_LOOKUP_BATCH`: one syscall per chunk of entries instead
//! of two per entry (aya 0.14 has no batch operations). With `--all` the per-thread map holds
//! every thread that ran, and iterator accounting reads the targets' map on every read, so
//! this keeps the agent's own CPU cost low.

use std::{io, os::fd::AsRawFd, os::fd::BorrowedFd};

use cg_common::{ThreadKey, ThreadTime};

use crate::fast_hash::{HashMap, HashMapExt};

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

/// Reusable buffers for batch reads of one map: `key_size` bytes a key, `value_size` a value
/// (of a per-CPU map: 8-byte strides, one per CPU).
pub struct BatchReader {
    key_size: usize,
    value_size: usize,
    chunk: usize,
    keys: Vec<u8>,
    values: Vec<u8>,
}

impl BatchReader {
    pub fn new(key_size: usize, value_size: usize) -> Self {
        BatchReader {
            key_size,
            value_size,
            chunk: 256,
            keys: Vec::new(),
            values: Vec::new(),
        }
    }

    /// A reader of the per-CPU thread map on `cpu_count` CPUs.
    pub fn for_threads(cpu_count: usize) -> Self {
        BatchReader::new(KEY_SIZE, VALUE_STRIDE * cpu_count.max(1))
    }

    /// A reader of the targets' map (pid -> process start time).
    pub fn for_targets() -> Self {
        BatchReader::new(4, 8)
    }

    /// Reads every entry of the per-CPU thread map: each thread with its on-CPU ns per CPU id.
    pub fn threads(
        &mut self,
        fd: BorrowedFd<'_>,
    ) -> Result<Vec<(ThreadKey, Vec<u64>)>, BatchError> {
        let mut out = Vec::new();
        self.read(fd, |k, v| out.push((thread_key(k), per_cpu_ns(v))))?;
        Ok(out)
    }

    /// Reads every entry of the targets' map: pid -> start time.
    pub fn targets(&mut self, fd: BorrowedFd<'_>) -> Result<HashMap<u32, u64>, BatchError> {
        let mut out = HashMap::new();
        self.read(fd, |k, v| {
            out.insert(u32::from_ne_bytes(word(k)), u64::from_ne_bytes(word(v)));
        })?;
        Ok(out)
    }

    /// Hands each entry's key and value bytes to `each`, chunk by chunk.
    fn read(
        &mut self,
        fd: BorrowedFd<'_>,
        mut each: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), BatchError> {
        let (mut token_in, mut token_out) = (0u64, 0u64);
        let mut first = true;
        loop {
            self.keys.resize(self.chunk * self.key_size, 0);
            self.values.resize(self.chunk * self.value_size, 0);
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
            // The attr points at buffers sized for `count` keys and values, alive and
            // unaliased for the duration of the call.
            let error = super::sys_bpf::retried(BPF_MAP_LOOKUP_BATCH, &mut attr).err();
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
            let entries = (attr.count as usize).min(self.chunk);
            let keys = self.keys.chunks_exact(self.key_size);
            let values = self.values.chunks_exact(self.value_size);
            for (k, v) in keys.zip(values).take(entries) {
                each(k, v);
            }
            if done {
                return Ok(());
            }
            token_in = token_out;
            first = false;
        }
    }
}

/// One read through `reader` while it serves: `Ok(None)` where the kernel has no batch reads
/// of the map (the reader is then dropped: the caller reads entry by entry from then on).
pub fn read_or_fall_back<T>(
    reader: &mut Option<BatchReader>,
    read: impl FnOnce(&mut BatchReader) -> Result<T, BatchError>,
) -> io::Result<Option<T>> {
    match reader.as_mut().map(read) {
        Some(Ok(entries)) => Ok(Some(entries)),
        Some(Err(BatchError::Io(err))) => Err(err),
        Some(Err(BatchError::Unsupported)) | None => {
            *reader = None;
            Ok(None)
        }
    }
}

/// The first `N` bytes of `bytes` (a batch buffer's entry, at least that long).
fn word<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(&bytes[..N]);
    out
}

/// A thread map's key from its bytes.
fn thread_key(k: &[u8]) -> ThreadKey {
    ThreadKey {
        tgid: u32::from_ne_bytes(word(k)),
        tid: u32::from_ne_bytes(word(&k[4..])),
        start_ns: u64::from_ne_bytes(word(&k[8..])),
    }
}

/// A per-CPU value's on-CPU ns, one per CPU (the first 8 bytes of each stride).
fn per_cpu_ns(v: &[u8]) -> Vec<u64> {
    v.chunks_exact(VALUE_STRIDE)
        .map(|cpu| u64::from_ne_bytes(word(cpu)))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsFd, OwnedFd};

    use super::*;
    use crate::probes::sys_bpf;

    /// A new hash map (`map_type` 1) or per-CPU hash (5) of `entries` entries.
    fn map(map_type: u32, key_size: u32, value_size: u32, entries: u32) -> OwnedFd {
        let mut attr = [0u64; 6];
        attr[0] = u64::from(map_type) | (u64::from(key_size) << 32);
        attr[1] = u64::from(value_size) | (u64::from(entries) << 32);
        sys_bpf::once(0, &mut attr)
            .and_then(sys_bpf::owned_fd)
            .expect("BPF_MAP_CREATE")
    }

    fn update(fd: &OwnedFd, key: &[u8], value: &[u8]) {
        let mut attr = [0u64; 6];
        attr[0] = fd.as_fd().as_raw_fd() as u64;
        attr[1] = key.as_ptr() as u64;
        attr[2] = value.as_ptr() as u64;
        sys_bpf::once(2, &mut attr).expect("BPF_MAP_UPDATE_ELEM");
    }

    #[test]
    fn reads_every_entry_of_a_map_larger_than_a_chunk() {
        // 1,000 targets: four chunks of 256.
        let targets = map(1, 4, 8, 1_024);
        for pid in 0..1_000u32 {
            update(
                &targets,
                &pid.to_ne_bytes(),
                &(u64::from(pid) * 7).to_ne_bytes(),
            );
        }
        let read = BatchReader::for_targets().targets(targets.as_fd()).ok();
        let expected: HashMap<u32, u64> = (0..1_000).map(|pid| (pid, u64::from(pid) * 7)).collect();
        assert_eq!(read, Some(expected));

        // The per-thread map: each CPU's slot of each thread.
        let cpus = aya::util::nr_cpus().unwrap();
        let threads = map(5, KEY_SIZE as u32, 8, 1_024);
        for tid in 0..600u32 {
            let key: Vec<u8> = [(tid + 1).to_ne_bytes(), tid.to_ne_bytes()].concat();
            let key = [key, u64::from(tid).to_ne_bytes().to_vec()].concat();
            let value: Vec<u8> = (0..cpus as u64)
                .flat_map(|cpu| (u64::from(tid) * 100 + cpu).to_ne_bytes())
                .collect();
            update(&threads, &key, &value);
        }
        let Ok(mut read) = BatchReader::for_threads(cpus).threads(threads.as_fd()) else {
            panic!("the batch read failed");
        };
        read.sort_by_key(|(k, _)| k.tid);
        assert_eq!(read.len(), 600);
        for (tid, (key, per_cpu)) in read.iter().enumerate() {
            let tid = tid as u32;
            assert_eq!(
                (key.tid, key.tgid, key.start_ns),
                (tid, tid + 1, u64::from(tid))
            );
            let expected: Vec<u64> = (0..cpus as u64).map(|c| u64::from(tid) * 100 + c).collect();
            assert_eq!(per_cpu, &expected);
        }
    }
}
