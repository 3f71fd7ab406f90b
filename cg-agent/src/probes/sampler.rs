//! The stack sampler (`--profile`): attaches cg-ebpf's perf-event program to each online
//! CPU's software CPU clock at the requested frequency, and reads back what it recorded: one
//! record per sample of a target, with its kernel, user and Python stacks, from a ring buffer
//! ([`ring_bytes`] sizes it to the sample rate) that a thread empties into a bounded queue
//! (`ring_reader`), read every interval ([`Probes::take_samples`]). A record that carries a
//! copy of the user stack (`--stacks auto|dwarf`) is handed to the caller's unwinder, whose
//! addresses then stand for the user stack ([`Walk`]).
//! Here samples are counted per (thread, stacks), and each distinct stack gets an id for the
//! whole run ([`StackId`], keyed by content), its addresses handed over once. Nothing about
//! energy here.

use std::{
    collections::{HashMap as StdHashMap, HashSet},
    os::fd::OwnedFd,
    time::{Duration, Instant},
};

use aya::{
    Ebpf,
    maps::{HashMap, MapData, PerCpuArray, RingBuf},
    programs::{
        PerfEvent,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
    },
};
use cg_common::profiling::{
    PY_MAX_FRAMES, PyProcess, STACK_COPY_BYTES, STACK_MAX_DEPTH, SampleRecord, SamplerCounters,
    StackCopyRecord, names,
};

use super::{ProbeError, Probes, ring_reader::RingReader};
use crate::functions::unwind::StackCopy;

const PROGRAM: &str = "sample_stack";

/// A native stack's id for the whole run (`>= 0`), or [`NO_STACK`] / [`LOST_STACK`].
pub type StackId = i32;
/// No stack: a kernel stack of a sample in user mode, a user stack of a thread without one.
pub const NO_STACK: StackId = -1;
/// A stack the kernel could not walk (counted in the sampler's counters).
pub const LOST_STACK: StackId = -2;

/// How a sample's user stack was walked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Walk {
    /// By frame pointer, in the kernel (`bpf_get_stack`).
    #[default]
    FramePointer,
    /// From a copy of the stack, by the files' call frame information (`.eh_frame`).
    Dwarf,
}

/// One aggregated sample, its stacks by run-long ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sample {
    pub tgid: u32,
    pub tid: u32,
    pub kernel_stack: StackId,
    pub user_stack: StackId,
    pub walk: Walk,
    /// Key of the Python stack (its content hash, never 0); 0: no Python frames.
    pub py_stack: u64,
}

/// What one read of the sampler gives.
#[derive(Debug, Default)]
pub struct SampleBatch {
    /// Samples since the last read, with their counts.
    pub samples: Vec<(Sample, u64)>,
    /// Native stacks met for the first time: their ids and addresses, innermost first.
    pub stacks: Vec<(StackId, Vec<u64>)>,
    /// Python stacks met for the first time: their keys and code object addresses,
    /// innermost first.
    pub python: Vec<(u64, Vec<u64>)>,
}

impl SampleBatch {
    /// Adds a later read of the same interval: counts of the same sample add up, stacks and
    /// Python stacks met for the first time are kept (each is new to one read only).
    pub fn merge(&mut self, later: SampleBatch) {
        if self.samples.is_empty() {
            self.samples = later.samples;
        } else {
            let mut counts: StdHashMap<Sample, u64> = self.samples.drain(..).collect();
            for (sample, n) in later.samples {
                *counts.entry(sample).or_default() += n;
            }
            self.samples = counts.into_iter().collect();
            self.samples.sort_unstable_by_key(|(s, _)| *s);
        }
        self.stacks.extend(later.stacks);
        self.python.extend(later.python);
    }
}

/// Bytes of one ring record: 2.4 KB with stacks of up to 127 frames each, 19 KB with a copy
/// of the user stack.
pub fn record_bytes(copy_stacks: bool) -> usize {
    if copy_stacks {
        std::mem::size_of::<StackCopyRecord>()
    } else {
        std::mem::size_of::<SampleRecord>()
    }
}

/// Bytes of the sample ring for `hz` samples per second on each of `cpus` CPUs read every
/// `interval`, records of `record` bytes: room for what the kernel records between two
/// reads, with room for reads that come late (four intervals, at least half a second), a
/// power of two between 1 and 64 MiB.
pub fn ring_bytes(hz: u64, cpus: usize, interval: Duration, record: usize) -> u32 {
    const MIN: u32 = 1 << 20;
    const MAX: u32 = 64 << 20;
    let window_s = (interval.as_secs_f64() * 4.0).max(0.5);
    let record = (record + 8) as f64;
    let bytes = hz as f64 * cpus.max(1) as f64 * window_s * record;
    let bytes = if bytes.is_finite() {
        bytes.ceil()
    } else {
        f64::MAX
    };
    (bytes.min(f64::from(MAX)) as u32)
        .next_power_of_two()
        .clamp(MIN, MAX)
}

/// How often the agent must read a sample ring of `ring` bytes so that it never fills:
/// the time the kernel takes to fill a quarter of it with `hz` samples per second on each of
/// `cpus` CPUs, records of `record` bytes (at least 10 ms). The reader thread copies the
/// records out this often. The ring is sized for four intervals, but capped at 64 MiB: 999 Hz
/// with stack copies on 16 CPUs fills it in 0.2 s, so the session reads (unwinds) the copies
/// between intervals too, and few wait.
pub fn ring_read_period(hz: u64, cpus: usize, record: usize, ring: u32) -> Duration {
    let bytes_per_s = hz as f64 * cpus.max(1) as f64 * (record + 8) as f64;
    let quarter_s = f64::from(ring) / 4.0 / bytes_per_s;
    if quarter_s.is_finite() && quarter_s < 86_400.0 {
        Duration::from_secs_f64(quarter_s).max(Duration::from_millis(10))
    } else {
        Duration::from_secs(86_400)
    }
}

/// The content key of a stack: a 64-bit hash of its addresses, never 0 (two distinct stacks
/// of a run share a key with odds of about n^2 / 2^65: 3e-10 for 100,000 stacks).
pub fn stack_key(addresses: &[u64]) -> u64 {
    let mut hash: u64 = 0x243f_6a88_85a3_08d3 ^ addresses.len() as u64;
    for &address in addresses {
        hash = (hash ^ address).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        hash ^= hash >> 29;
    }
    hash = hash.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (hash ^ (hash >> 31)) | 1
}

/// The sampler's maps, and the stacks met so far.
pub(super) struct SamplerMaps {
    ring: RingReader,
    counters: PerCpuArray<MapData, SamplerCounters>,
    py_procs: HashMap<MapData, u32, PyProcess>,
    /// Run-long ids of the native stacks met, by content key.
    stack_ids: StdHashMap<u64, StackId>,
    /// Python stacks met, by content key.
    python_known: HashSet<u64>,
    /// Records too short to be samples (none expected).
    malformed: u64,
    /// Keeps the kernel's BPF run-time statistics on (benchmarks, [`BPF_STATS_ENV`]).
    stats: Option<OwnedFd>,
    /// How often the ring must be read so that it never fills ([`ring_read_period`]).
    read_period: Duration,
}

/// Environment variable for benchmarks: `1` turns the kernel's BPF run-time statistics on
/// for the run (they cost every BPF program on the machine two clock reads per run), so
/// that the report gives the sampler's cost per sample.
pub const BPF_STATS_ENV: &str = "CG_TRACE_BENCH_BPF_STATS";

fn map_error(name: &'static str) -> impl Fn(aya::maps::MapError) -> ProbeError {
    move |source| ProbeError::Map { name, source }
}

impl SamplerMaps {
    pub(super) fn take(ebpf: &mut Ebpf, read_period: Duration) -> Result<Self, ProbeError> {
        let mut take = |name: &'static str| ebpf.take_map(name).ok_or(ProbeError::MissingMap(name));
        let ring =
            RingBuf::try_from(take(names::SAMPLE_RING)?).map_err(map_error(names::SAMPLE_RING))?;
        Ok(SamplerMaps {
            ring: RingReader::start(ring, read_period).map_err(ProbeError::RingReader)?,
            counters: PerCpuArray::try_from(take(names::SAMPLER_COUNTERS)?)
                .map_err(map_error(names::SAMPLER_COUNTERS))?,
            py_procs: HashMap::try_from(take(names::PY_PROCS)?)
                .map_err(map_error(names::PY_PROCS))?,
            stack_ids: StdHashMap::new(),
            python_known: HashSet::new(),
            malformed: 0,
            stats: None,
            read_period,
        })
    }
}

/// The run-long id of a stack the kernel wrote (`bytes` of `addresses` in use, or an
/// errno), and its addresses in `new` when it is new.
fn stack_id(
    ids: &mut StdHashMap<u64, StackId>,
    bytes: i32,
    addresses: &[u64; STACK_MAX_DEPTH],
    new: &mut Vec<(StackId, Vec<u64>)>,
) -> StackId {
    if bytes < 0 {
        return LOST_STACK;
    }
    let len = (bytes as usize / 8).min(STACK_MAX_DEPTH);
    stack_id_of(ids, &addresses[..len], new)
}

/// The run-long id of the stack `addresses` (innermost first), and its addresses in `new`
/// when it is new.
fn stack_id_of(
    ids: &mut StdHashMap<u64, StackId>,
    addresses: &[u64],
    new: &mut Vec<(StackId, Vec<u64>)>,
) -> StackId {
    if addresses.is_empty() {
        return NO_STACK;
    }
    let next = ids.len() as StackId;
    *ids.entry(stack_key(addresses)).or_insert_with(|| {
        new.push((next, addresses.to_vec()));
        next
    })
}

/// Loads the sampling program and attaches it to every online CPU at `hz` samples/s.
pub(super) fn attach(
    ebpf: &mut Ebpf,
    maps: &mut SamplerMaps,
    hz: u64,
    stop: &mut dyn FnMut() -> Option<i32>,
) -> Result<(), ProbeError> {
    if std::env::var_os(BPF_STATS_ENV).is_some_and(|v| v == "1") {
        match aya::sys::enable_stats(aya::sys::Stats::RunTime) {
            Ok(fd) => maps.stats = Some(fd),
            Err(err) => tracing::warn!("BPF run-time statistics: {err}"),
        }
    }
    let program = PROGRAM;
    let prog: &mut PerfEvent = ebpf
        .program_mut(program)
        .ok_or(ProbeError::MissingProgram(program))?
        .try_into()
        .map_err(|source| ProbeError::Attach { program, source })?;
    super::load_program(program, stop, || prog.load())?;
    let cpus = aya::util::online_cpus().map_err(|(_, source)| ProbeError::Read {
        name: "/sys/devices/system/cpu/online",
        source,
    })?;
    for cpu in cpus {
        prog.attach(
            PerfEventConfig::Software(SoftwareEvent::CpuClock),
            PerfEventScope::AllProcessesOneCpu { cpu },
            SamplePolicy::Frequency(hz),
            false,
        )
        .map_err(|source| ProbeError::Attach { program, source })?;
    }
    Ok(())
}

/// The sample part of a ring record (either kind), when it is long enough to be one.
fn read_record(item: &[u8]) -> Option<SampleRecord> {
    if item.len() < std::mem::size_of::<SampleRecord>() {
        return None;
    }
    // SAFETY: the kernel wrote a whole SampleRecord (length checked above; a
    // StackCopyRecord starts with one); read unaligned, as nothing promises this type's
    // alignment.
    Some(unsafe { std::ptr::read_unaligned(item.as_ptr() as *const SampleRecord) })
}

/// The registers and stack copy of a [`StackCopyRecord`]; `None` for a plain record, or
/// one whose copy is empty (the stack could not be read).
fn stack_copy(item: &[u8]) -> Option<StackCopy<'_>> {
    use std::mem::offset_of;
    if item.len() < std::mem::size_of::<StackCopyRecord>() {
        return None;
    }
    let word = |offset: usize| -> Option<u64> {
        Some(u64::from_ne_bytes(
            item.get(offset..offset + 8)?.try_into().ok()?,
        ))
    };
    let copied = item.get(offset_of!(StackCopyRecord, stack_bytes)..)?;
    let copied = u32::from_ne_bytes(copied.get(..4)?.try_into().ok()?) as usize;
    let stack = offset_of!(StackCopyRecord, stack);
    let bytes = item.get(stack..stack + copied.min(STACK_COPY_BYTES))?;
    let copy = StackCopy {
        ip: word(offset_of!(StackCopyRecord, ip))?,
        sp: word(offset_of!(StackCopyRecord, sp))?,
        bp: word(offset_of!(StackCopyRecord, bp))?,
        base: word(offset_of!(StackCopyRecord, stack_base))?,
        bytes,
    };
    (!copy.bytes.is_empty() && copy.ip != 0).then_some(copy)
}

impl Probes {
    fn sampler_maps(&self) -> Result<&SamplerMaps, ProbeError> {
        self.sampler
            .as_ref()
            .ok_or(ProbeError::MissingMap(names::SAMPLE_RING))
    }

    /// Takes the samples recorded since the last call, counted per (thread, stacks), with
    /// the stacks met for the first time. A record with a copy of its user stack goes to
    /// `unwind(tgid, copy)`: the addresses it gives stand for the user stack ([`Walk::Dwarf`]);
    /// `None` keeps the kernel's frame-pointer walk.
    pub fn take_samples(
        &mut self,
        unwind: &mut dyn FnMut(u32, &StackCopy<'_>) -> Option<Vec<u64>>,
    ) -> Result<SampleBatch, ProbeError> {
        let Some(maps) = self.sampler.as_mut() else {
            return Ok(SampleBatch::default());
        };
        let SamplerMaps {
            ring,
            stack_ids,
            python_known,
            malformed,
            ..
        } = maps;
        let started = Instant::now();
        let items = ring.take();
        let mut batch = SampleBatch::default();
        let mut counts: StdHashMap<Sample, u64> = StdHashMap::new();
        // What this read found (each record took an 8-byte header and a multiple of 8 bytes
        // in the ring): how much ring its records would have needed (`ring_bytes`).
        let bytes: u64 = items
            .iter()
            .map(|item| 8 + (item.len() as u64).next_multiple_of(8))
            .sum();
        for item in &items {
            let Some(record) = read_record(item) else {
                *malformed += 1;
                continue;
            };
            let kernel_stack = stack_id(
                stack_ids,
                record.kernel_bytes,
                &record.kernel,
                &mut batch.stacks,
            );
            let unwound = stack_copy(item).and_then(|copy| unwind(record.tgid, &copy));
            let (user_stack, walk) = match unwound {
                Some(addresses) => (
                    stack_id_of(stack_ids, &addresses, &mut batch.stacks),
                    Walk::Dwarf,
                ),
                None => (
                    stack_id(
                        stack_ids,
                        record.user_bytes,
                        &record.user,
                        &mut batch.stacks,
                    ),
                    Walk::FramePointer,
                ),
            };
            let py_len = (record.py_len as usize).min(PY_MAX_FRAMES);
            let py_stack = if py_len == 0 {
                0
            } else {
                let codes = &record.py_codes[..py_len];
                let key = stack_key(codes);
                if python_known.insert(key) {
                    batch.python.push((key, codes.to_vec()));
                }
                key
            };
            let sample = Sample {
                tgid: record.tgid,
                tid: record.tid,
                kernel_stack,
                user_stack,
                walk,
                py_stack,
            };
            *counts.entry(sample).or_default() += 1;
        }
        tracing::debug!(
            "sample ring read: {} records, {bytes} bytes, in {:.1} ms",
            items.len(),
            started.elapsed().as_secs_f64() * 1e3
        );
        batch.samples = counts.into_iter().collect();
        batch.samples.sort_unstable_by_key(|(s, _)| *s);
        Ok(batch)
    }

    /// How often the samples must be read so that few copies wait, when the run samples:
    /// more often than once an interval where the ring's size is capped (many CPUs).
    pub fn sample_ring_read_period(&self) -> Option<Duration> {
        self.sampler.as_ref().map(|maps| maps.read_period)
    }

    /// The sampling program's kernel run time and runs so far, when the kernel's BPF
    /// run-time statistics are on (`kernel.bpf_stats_enabled`, or [`BPF_STATS_ENV`]).
    pub fn sampler_run_time(&self) -> Option<(Duration, u64)> {
        self.sampler.as_ref()?;
        let prog: &PerfEvent = self._ebpf.program(PROGRAM)?.try_into().ok()?;
        let info = prog.info().ok()?;
        (info.run_count() > 0).then(|| (info.run_time(), info.run_count()))
    }

    /// Leaves the samples in the ring until the next [`Self::take_samples`]: the run's last
    /// read is done.
    pub fn hold_samples(&self) {
        if let Some(maps) = self.sampler.as_ref() {
            maps.ring.hold();
        }
    }

    /// Makes the sampler walk the Python frames of process `tgid`.
    pub fn set_python(&mut self, tgid: u32, process: PyProcess) -> Result<(), ProbeError> {
        let Some(maps) = self.sampler.as_mut() else {
            return Ok(());
        };
        maps.py_procs
            .insert(tgid, process, 0)
            .map_err(map_error(names::PY_PROCS))
    }

    /// Stops walking process `tgid`'s Python frames (it exec'd or exited).
    pub fn forget_python(&mut self, tgid: u32) {
        if let Some(maps) = self.sampler.as_mut() {
            let _ = maps.py_procs.remove(&tgid);
        }
    }

    /// The sampler's counters, summed over CPUs (with the records found malformed here).
    pub fn sampler_counters(&self) -> Result<SamplerCounters, ProbeError> {
        let maps = self.sampler_maps()?;
        let values = maps
            .counters
            .get(&0, 0)
            .map_err(map_error(names::SAMPLER_COUNTERS))?;
        // A record too short to read (none expected) is a sample lost.
        let start = SamplerCounters {
            lost_samples: maps.malformed,
            ..SamplerCounters::default()
        };
        Ok(values.iter().fold(start, |a, c| SamplerCounters {
            samples: a.samples + c.samples,
            lost_samples: a.lost_samples + c.lost_samples,
            lost_kernel_stacks: a.lost_kernel_stacks + c.lost_kernel_stacks,
            lost_user_stacks: a.lost_user_stacks + c.lost_user_stacks,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring record of a sample with a stack copy, as the kernel lays it out.
    fn copy_record(ip: u64, sp: u64, copied: u32) -> Vec<u8> {
        use std::mem::offset_of;
        let mut item = vec![0u8; std::mem::size_of::<StackCopyRecord>()];
        let mut put = |offset: usize, bytes: &[u8]| {
            item[offset..offset + bytes.len()].copy_from_slice(bytes);
        };
        put(offset_of!(StackCopyRecord, ip), &ip.to_ne_bytes());
        put(offset_of!(StackCopyRecord, sp), &sp.to_ne_bytes());
        put(offset_of!(StackCopyRecord, bp), &7u64.to_ne_bytes());
        put(
            offset_of!(StackCopyRecord, stack_base),
            &(sp & !1023).to_ne_bytes(),
        );
        put(
            offset_of!(StackCopyRecord, stack_bytes),
            &copied.to_ne_bytes(),
        );
        put(offset_of!(StackCopyRecord, stack), &[0xaa; 16]);
        item
    }

    #[test]
    fn a_stack_copy_record_gives_its_registers_and_only_the_bytes_copied() {
        let item = copy_record(0x401000, 0x7fff_1234, 2048);
        let copy = stack_copy(&item).expect("a copy");
        assert_eq!((copy.ip, copy.sp, copy.bp), (0x401000, 0x7fff_1234, 7));
        assert_eq!(copy.base, 0x7fff_1000);
        assert_eq!(copy.bytes.len(), 2048);
        assert_eq!(&copy.bytes[..16], &[0xaa; 16]);
        // A length past the array is cut to it.
        let item = copy_record(0x401000, 0x7fff_1234, u32::MAX);
        assert_eq!(stack_copy(&item).unwrap().bytes.len(), STACK_COPY_BYTES);
        // Nothing copied, or no user registers: nothing to unwind.
        assert!(stack_copy(&copy_record(0x401000, 0x7fff_1234, 0)).is_none());
        assert!(stack_copy(&copy_record(0, 0, 1024)).is_none());
        // A plain record, or one cut short, carries no copy; the sample part still reads.
        let plain = vec![0u8; std::mem::size_of::<SampleRecord>()];
        assert!(stack_copy(&plain).is_none());
        assert!(read_record(&plain).is_some());
        assert!(read_record(&plain[1..]).is_none());
        assert!(stack_copy(&item[..item.len() - 1]).is_none());
    }

    #[test]
    fn the_ring_is_sized_to_the_sample_rate_within_bounds() {
        let interval = Duration::from_millis(100);
        let plain = record_bytes(false);
        // The default rate on a small machine: the floor.
        assert_eq!(ring_bytes(99, 2, interval, plain), 1 << 20);
        // 999 Hz on 2 CPUs: 999 x 2 x 0.5 s x 2,384 bytes, rounded up to a power of two.
        assert_eq!(ring_bytes(999, 2, interval, plain), 4 << 20);
        // Longer intervals: four of them.
        assert_eq!(ring_bytes(999, 2, Duration::from_secs(1), plain), 32 << 20);
        // The ceiling, whatever the input.
        assert_eq!(ring_bytes(u64::MAX, usize::MAX, interval, plain), 64 << 20);
        assert_eq!(ring_bytes(0, 0, Duration::ZERO, plain), 1 << 20);
        // With stack copies (18,800 bytes a record): 99 Hz x 2 x 0.5 s fits in 2 MiB,
        // 999 Hz needs 32 MiB.
        let copies = record_bytes(true);
        assert_eq!(ring_bytes(99, 2, interval, copies), 2 << 20);
        assert_eq!(ring_bytes(999, 2, interval, copies), 32 << 20);
    }

    #[test]
    fn a_capped_ring_is_read_between_intervals_often_enough() {
        let interval = Duration::from_millis(100);
        let copies = record_bytes(true);
        // 2 CPUs at 999 Hz: the ring holds four intervals; a quarter of it is one.
        let ring = ring_bytes(999, 2, interval, copies);
        let period = ring_read_period(999, 2, copies, ring);
        assert!(period >= interval, "{period:?}");
        // 16 CPUs at 999 Hz with copies: capped at 64 MiB, which 16 x 999 records of
        // 18,800 bytes fill in 0.22 s: read every 55 ms.
        let ring = ring_bytes(999, 16, interval, copies);
        assert_eq!(ring, 64 << 20);
        let period = ring_read_period(999, 16, copies, ring);
        assert!((0.050..0.060).contains(&period.as_secs_f64()), "{period:?}");
        // Never more often than every 10 ms, whatever the rate; no rate: never.
        assert_eq!(
            ring_read_period(u64::MAX, usize::MAX, copies, 1 << 20),
            Duration::from_millis(10)
        );
        assert_eq!(
            ring_read_period(0, 2, copies, ring),
            Duration::from_secs(86_400)
        );
    }

    #[test]
    fn batches_of_one_interval_merge_their_counts() {
        let sample = |tid, user_stack| Sample {
            tgid: 1,
            tid,
            kernel_stack: LOST_STACK,
            user_stack,
            walk: Walk::Dwarf,
            py_stack: 0,
        };
        let mut first = SampleBatch {
            samples: vec![(sample(1, 7), 3), (sample(2, 7), 1)],
            stacks: vec![(7, vec![0x401000])],
            python: vec![],
        };
        first.merge(SampleBatch {
            samples: vec![(sample(2, 7), 2), (sample(2, 8), 5)],
            stacks: vec![(8, vec![0x402000])],
            python: vec![(9, vec![0x7f00])],
        });
        assert_eq!(
            first.samples,
            [(sample(1, 7), 3), (sample(2, 7), 3), (sample(2, 8), 5)]
        );
        assert_eq!(first.stacks, [(7, vec![0x401000]), (8, vec![0x402000])]);
        assert_eq!(first.python, [(9, vec![0x7f00])]);
        // Into an empty batch: the later one as it is.
        let mut empty = SampleBatch::default();
        empty.merge(first);
        assert_eq!(empty.samples.len(), 3);
    }

    #[test]
    fn stack_keys_tell_stacks_apart_and_are_never_zero() {
        let a = stack_key(&[0x401000, 0x402000]);
        assert_eq!(a, stack_key(&[0x401000, 0x402000]));
        assert_ne!(a, stack_key(&[0x402000, 0x401000]), "order matters");
        assert_ne!(a, stack_key(&[0x401000, 0x402000, 0]), "length matters");
        assert_ne!(a, stack_key(&[0x401001, 0x402000]));
        assert_ne!(stack_key(&[]), 0);
        // 100,000 stacks that differ in their innermost address by one byte: no two alike.
        let keys: HashSet<u64> = (0..100_000u64)
            .map(|i| stack_key(&[0x7f00_0000_0000 + i, 0x401000, 0x402000]))
            .collect();
        assert_eq!(keys.len(), 100_000);
    }
}
