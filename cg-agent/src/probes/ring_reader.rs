//! The sample ring's reader: a thread that copies the ring's records into a bounded queue,
//! from the moment the sampler's maps are taken and every [`super::sampler::ring_read_period`],
//! so that the kernel never waits on the agent: neither on the set-up between attaching the
//! sampler and the session's first read, nor on a read that unwinds slowly (the first record
//! of a process loads the unwind information of every file it maps: 60 ms for a large binary
//! in a debug build). A read ([`RingReader::take`]) takes the queue, with what the ring holds
//! at that moment. Past [`QUEUE_MAX_BYTES`] records stay in the ring, and once it is full the
//! kernel drops new samples and counts them lost.

use std::{
    io,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        mpsc::{self, RecvTimeoutError},
    },
    thread::JoinHandle,
    time::Duration,
};

use aya::maps::{MapData, RingBuf};

/// Bytes of copies that wait at most: 0.9 s of samples of 16 CPUs at 999 Hz with stack
/// copies (records of 18,800 bytes), 70 s of 2 CPUs at 99 Hz.
const QUEUE_MAX_BYTES: usize = 256 << 20;

/// Ring records copied and not yet read, oldest first, up to a cap on their bytes.
#[derive(Debug)]
struct RecordQueue {
    records: Vec<Vec<u8>>,
    bytes: usize,
    max_bytes: usize,
}

impl RecordQueue {
    fn new(max_bytes: usize) -> Self {
        RecordQueue {
            records: Vec::new(),
            bytes: 0,
            max_bytes,
        }
    }

    /// Whether one more record may wait: while fewer than `max_bytes` do (so the last one
    /// may pass the cap).
    fn has_room(&self) -> bool {
        self.bytes < self.max_bytes
    }

    fn push(&mut self, record: &[u8]) {
        self.bytes += record.len();
        self.records.push(record.to_vec());
    }

    fn take(&mut self) -> Vec<Vec<u8>> {
        self.bytes = 0;
        std::mem::take(&mut self.records)
    }
}

/// The ring and its queue, which the thread and the reads share.
struct Ring {
    ring: RingBuf<MapData>,
    queue: RecordQueue,
    /// No copies until the next read: the run's last read is done.
    held: bool,
}

impl Ring {
    /// Copies the ring's records into the queue while it has room.
    fn copy(&mut self) {
        if self.held || !self.queue.has_room() {
            return;
        }
        while self.queue.has_room() {
            let Some(item) = self.ring.next() else {
                return;
            };
            self.queue.push(&item);
        }
        tracing::debug!(
            "sample queue full ({} records, {} bytes): samples wait in the ring until the next read",
            self.queue.records.len(),
            self.queue.bytes
        );
    }
}

/// The thread that copies the sample ring's records, and the queue the reads take.
pub(super) struct RingReader {
    ring: Arc<Mutex<Ring>>,
    /// Dropped to end the thread: it wakes at once.
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl RingReader {
    /// Starts copying `ring`'s records every `period`.
    pub(super) fn start(ring: RingBuf<MapData>, period: Duration) -> io::Result<Self> {
        let ring = Arc::new(Mutex::new(Ring {
            ring,
            queue: RecordQueue::new(QUEUE_MAX_BYTES),
            held: false,
        }));
        let (stop, stopped) = mpsc::channel::<()>();
        let shared = Arc::clone(&ring);
        let thread = std::thread::Builder::new()
            .name("cg-sample-ring".into())
            .spawn(move || {
                while stopped.recv_timeout(period) == Err(RecvTimeoutError::Timeout) {
                    lock(&shared).copy();
                }
            })?;
        Ok(RingReader {
            ring,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The records copied since the last read and those the ring holds now, oldest first;
    /// copies start again if they were held.
    pub(super) fn take(&self) -> Vec<Vec<u8>> {
        let mut ring = lock(&self.ring);
        ring.held = false;
        ring.copy();
        ring.queue.take()
    }

    /// Leaves the records in the ring until the next read: after a run's last read, copies
    /// would only take memory while the run's stacks are named.
    pub(super) fn hold(&self) {
        lock(&self.ring).held = true;
    }
}

impl Drop for RingReader {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The shared ring; a copy never panics, but a poisoned lock still holds a sound queue.
fn lock(ring: &Mutex<Ring>) -> MutexGuard<'_, Ring> {
    ring.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_takes_records_until_its_cap_and_empties_when_read() {
        let mut queue = RecordQueue::new(40_000);
        let record = [7u8; 18_800];
        queue.push(&record);
        assert!(queue.has_room());
        queue.push(&record);
        assert!(queue.has_room(), "37,600 of 40,000 bytes");
        // The third passes the cap: room for none after it.
        queue.push(&record);
        assert!(!queue.has_room());
        let taken = queue.take();
        assert_eq!(taken.len(), 3);
        assert_eq!(taken[0], record);
        assert!(queue.has_room());
        assert!(queue.take().is_empty());
    }
}
