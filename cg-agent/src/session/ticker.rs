//! The sampling clock: wakes the run once per interval.
//!
//! A `tokio::time::interval` of 100 ms woke the agent three times per interval on an idle
//! machine: its timer wheel first wakes at a coarse slot (~60 ms) to move the timer down a
//! level, and re-arming the timer after each tick writes the runtime's eventfd, which the
//! next poll then reads. Each wakeup is a context switch and a cold cache, the largest part
//! of the idle agent's cost beside the read itself (docs/overhead.md). A periodic timerfd
//! wakes it once: the kernel re-arms it, and the runtime only polls its fd.
//!
//! Ticks the run was too busy to take collapse into one (the next tick keeps the period's
//! grid); where no timerfd can be made the tokio interval serves, with the same behaviour.

use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    time::Duration,
};

use tokio::{
    io::{Interest, unix::AsyncFd},
    time::{Interval, MissedTickBehavior},
};

/// A clock that ticks every `period`, first one period after it was made.
pub struct Ticker {
    period: Duration,
    clock: Clock,
}

enum Clock {
    TimerFd(AsyncFd<OwnedFd>),
    Tokio(Interval),
}

impl Ticker {
    /// A ticker for `period` (at least 1 ms). Must be called within the tokio runtime.
    pub fn new(period: Duration) -> Self {
        let period = period.max(Duration::from_millis(1));
        let registered = timerfd(period).and_then(|fd| {
            // SAFETY: the fd is an OwnedFd, open until the AsyncFd that owns it is dropped,
            // and always the same fd.
            unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
                .map_err(io::Error::from)
        });
        let clock = match registered {
            Ok(fd) => Clock::TimerFd(fd),
            Err(err) => {
                tracing::debug!("no timerfd for the sampling clock ({err}); tokio's timer serves");
                tokio_clock(period)
            }
        };
        Ticker { period, clock }
    }

    /// Waits for the next tick; returns how many periods ended since the last one (more
    /// than 1: ticks missed while the run was busy, collapsed into this one).
    pub async fn tick(&mut self) -> u64 {
        if let Clock::TimerFd(fd) = &self.clock {
            loop {
                let Ok(mut ready) = fd.readable().await else {
                    // The runtime is shutting down; no tick will come.
                    return std::future::pending().await;
                };
                // The count of expirations since the last read: ticks missed collapse.
                match ready.try_io(|fd| read_expirations(fd.get_ref())) {
                    Ok(Ok(count)) => return count,
                    // Not expired after all (readiness cleared), or interrupted: wait again.
                    Err(_) => {}
                    Ok(Err(err)) if err.kind() == io::ErrorKind::Interrupted => {}
                    // Anything else would come again at once and spin here, keeping the run
                    // from its signals: tokio's timer takes over.
                    Ok(Err(err)) => {
                        tracing::debug!(
                            "the sampling clock's timerfd failed ({err}); tokio's timer serves"
                        );
                        break;
                    }
                }
            }
            self.clock = tokio_clock(self.period);
        }
        if let Clock::Tokio(interval) = &mut self.clock {
            interval.tick().await;
        }
        1
    }
}

/// tokio's interval, first ticking one `period` from now; missed ticks collapse.
fn tokio_clock(period: Duration) -> Clock {
    let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    interval.set_missed_tick_behavior(MissedTickBehavior::Skip);
    Clock::Tokio(interval)
}

/// A non-blocking periodic CLOCK_MONOTONIC timerfd, first expiring one `period` from now.
fn timerfd(period: Duration) -> io::Result<OwnedFd> {
    // SAFETY: plain system call; the fd it returns is owned here.
    let raw = unsafe {
        libc::timerfd_create(
            libc::CLOCK_MONOTONIC,
            libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh fd no one else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let spec = libc::timespec {
        tv_sec: period.as_secs() as libc::time_t,
        tv_nsec: period.subsec_nanos() as libc::c_long,
    };
    let value = libc::itimerspec {
        it_interval: spec,
        it_value: spec,
    };
    // SAFETY: `value` is a valid itimerspec; the old value is not asked for.
    if unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &value, std::ptr::null_mut()) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Reads a timerfd's expiration count (`WouldBlock` when it has not expired).
fn read_expirations(fd: &OwnedFd) -> io::Result<u64> {
    let mut count = 0u64;
    // SAFETY: reads 8 bytes into `count`, which holds 8.
    let read = unsafe { libc::read(fd.as_raw_fd(), (&raw mut count).cast(), 8) };
    match read {
        8 => Ok(count),
        n if n < 0 => Err(io::Error::last_os_error()),
        _ => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "short timerfd read",
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn ticks_once_per_period_on_the_timerfd() {
        runtime().block_on(async {
            let mut ticker = Ticker::new(Duration::from_millis(20));
            assert!(matches!(ticker.clock, Clock::TimerFd(_)));
            let start = Instant::now();
            let mut ticks = 0;
            while ticks < 5 {
                ticks += ticker.tick().await;
            }
            // Five ticks of 20 ms cannot come sooner than 100 ms after the start.
            assert!(start.elapsed() >= Duration::from_millis(100));
        });
    }

    #[test]
    fn tokios_timer_ticks_where_no_timerfd_serves() {
        runtime().block_on(async {
            let period = Duration::from_millis(10);
            let mut ticker = Ticker {
                period,
                clock: tokio_clock(period),
            };
            let start = Instant::now();
            for _ in 0..3 {
                assert_eq!(ticker.tick().await, 1);
            }
            assert!(start.elapsed() >= 3 * period);
        });
    }

    #[test]
    fn ticks_missed_while_busy_collapse_into_one() {
        runtime().block_on(async {
            let mut ticker = Ticker::new(Duration::from_millis(5));
            assert!(matches!(ticker.clock, Clock::TimerFd(_)));
            // Eight periods pass while the run is busy: one tick says so...
            std::thread::sleep(Duration::from_millis(40));
            assert!(ticker.tick().await >= 7);
            // ...and the next is a tick of its own again.
            let next = ticker.tick().await;
            assert!(next >= 1);
        });
    }
}
