//! Calls the kernel makes give up on when a signal comes: `BPF_PROG_LOAD`'s verifier checks
//! for a pending signal as it walks the program and answers EAGAIN (a stop and continue,
//! Ctrl-Z then `fg`, a debugger, or a stop signal), and a call that waits may answer EINTR.
//! Neither says anything about the program or the kernel's features: the call is made again
//! (libbpf retries EAGAIN the same way), unless the signal asked the run to stop. This module
//! is the one home of that rule.

/// Tries in all of one call that signals keep interrupting. A Ctrl-Z and `fg` costs one; a
/// debugger a few; a program verified in a few milliseconds gets through even a storm of
/// stop/continue signals every 1-3 ms (the start-up tests send such storms).
pub const TRIES: u32 = 200;

/// Whether an OS error is the kernel's answer to a signal rather than to the call: never a
/// missing feature nor a refused program.
pub fn interrupted_by_signal(errno: Option<i32>) -> bool {
    matches!(errno, Some(libc::EAGAIN | libc::EINTR))
}

/// The OS error number somewhere in `err`'s chain of causes (aya wraps the system call's
/// `io::Error` one or two levels down).
pub fn errno_in(err: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut cause = Some(err);
    while let Some(err) = cause {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && let Some(errno) = io.raw_os_error()
        {
            return Some(errno);
        }
        cause = err.source();
    }
    None
}

/// How a call that signals interrupted ended when it did not succeed.
#[derive(Debug)]
pub enum Retried<E> {
    /// A stop request (this signal number) came: the call was not made again.
    Stopped(i32),
    /// The call failed for another reason, or [`TRIES`] times for signals: its last error.
    Failed(E),
}

/// Makes `call` until it succeeds or fails for something other than a signal (see
/// [`interrupted_by_signal`]; `errno` reads the OS error of its error), at most [`TRIES`]
/// times. After each failure for a signal, `stop()` says whether that signal (or another)
/// asked the run to stop: then it ends with [`Retried::Stopped`].
pub fn again_after_signals<T, E>(
    mut stop: impl FnMut() -> Option<i32>,
    errno: impl Fn(&E) -> Option<i32>,
    mut call: impl FnMut() -> Result<T, E>,
) -> Result<T, Retried<E>> {
    let mut tries = 0;
    loop {
        tries += 1;
        let err = match call() {
            Ok(value) => return Ok(value),
            Err(err) => err,
        };
        if !interrupted_by_signal(errno(&err)) {
            return Err(Retried::Failed(err));
        }
        if let Some(signal) = stop() {
            return Err(Retried::Stopped(signal));
        }
        if tries >= TRIES {
            tracing::warn!("a call interrupted by signals {TRIES} times in a row: giving up");
            return Err(Retried::Failed(err));
        }
        tracing::debug!("a call interrupted by a signal: trying again");
    }
}

/// Holds back (blocks) every signal that can be held, in this thread, until dropped: for a
/// call that fails on a signal and cannot be made again (aya's one-time feature probes).
/// A signal that comes meanwhile is delivered to another thread of the process, or to this
/// one once released: none is lost. SIGKILL and SIGSTOP cannot be held.
pub struct HeldSignals {
    before: libc::sigset_t,
}

impl HeldSignals {
    pub fn hold() -> Self {
        // SAFETY: the sets are ours, initialised by sigfillset/pthread_sigmask before use.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut before: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut before);
            HeldSignals { before }
        }
    }
}

impl Drop for HeldSignals {
    fn drop(&mut self) {
        // SAFETY: restores the mask this thread had, saved by `hold`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.before, std::ptr::null_mut()) };
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    fn os(errno: i32) -> io::Error {
        io::Error::from_raw_os_error(errno)
    }

    /// A call that fails with these errors in turn, then succeeds; counts its calls.
    fn failing(
        errors: Vec<i32>,
    ) -> (
        impl FnMut() -> io::Result<&'static str>,
        std::rc::Rc<std::cell::Cell<usize>>,
    ) {
        let calls = std::rc::Rc::new(std::cell::Cell::new(0));
        let seen = calls.clone();
        let call = move || {
            let n = seen.get();
            seen.set(n + 1);
            match errors.get(n) {
                Some(&errno) => Err(os(errno)),
                None => Ok("loaded"),
            }
        };
        (call, calls)
    }

    fn errno(err: &io::Error) -> Option<i32> {
        err.raw_os_error()
    }

    #[test]
    fn eagain_and_eintr_are_signals_and_never_a_missing_feature() {
        assert!(interrupted_by_signal(Some(libc::EAGAIN)));
        assert!(interrupted_by_signal(Some(libc::EINTR)));
        for feature_answer in [libc::EINVAL, libc::EOPNOTSUPP, libc::ENOSYS, libc::EPERM] {
            assert!(
                !interrupted_by_signal(Some(feature_answer)),
                "{feature_answer}"
            );
        }
        assert!(!interrupted_by_signal(None));
    }

    #[test]
    fn a_load_that_signals_interrupt_is_made_again_until_it_succeeds() {
        let (call, calls) = failing(vec![libc::EAGAIN, libc::EINTR, libc::EAGAIN]);
        let result = again_after_signals(|| None, errno, call);
        assert_eq!(result.ok(), Some("loaded"));
        assert_eq!(calls.get(), 4);
    }

    #[test]
    fn another_error_is_the_answer_at_once() {
        let (call, calls) = failing(vec![libc::EINVAL]);
        match again_after_signals(|| None, errno, call) {
            Err(Retried::Failed(err)) => assert_eq!(err.raw_os_error(), Some(libc::EINVAL)),
            other => panic!("{other:?}"),
        }
        assert_eq!(calls.get(), 1);
    }

    #[test]
    fn a_stop_request_ends_the_tries_with_its_signal() {
        let (call, calls) = failing(vec![libc::EAGAIN; 5]);
        let mut asked = 0;
        let stop = || {
            asked += 1;
            (asked == 2).then_some(libc::SIGTERM)
        };
        match again_after_signals(stop, errno, call) {
            Err(Retried::Stopped(signal)) => assert_eq!(signal, libc::SIGTERM),
            other => panic!("{other:?}"),
        }
        assert_eq!(calls.get(), 2);
    }

    #[test]
    fn the_tries_are_bounded() {
        let (call, calls) = failing(vec![libc::EAGAIN; TRIES as usize + 10]);
        match again_after_signals(|| None, errno, call) {
            Err(Retried::Failed(err)) => assert_eq!(err.raw_os_error(), Some(libc::EAGAIN)),
            other => panic!("{other:?}"),
        }
        assert_eq!(calls.get(), TRIES as usize);
    }

    #[test]
    fn the_errno_is_found_down_the_chain_of_causes() {
        let load = aya::programs::ProgramError::LoadError {
            io_error: os(libc::EAGAIN),
            verifier_log: aya_obj::VerifierLog::new(String::new()),
        };
        assert_eq!(errno_in(&load), Some(libc::EAGAIN));
        let map = aya::EbpfError::MapError(aya::maps::MapError::CreateError {
            name: "EVENTS".into(),
            io_error: os(libc::EINTR),
        });
        assert_eq!(errno_in(&map), Some(libc::EINTR));
        assert_eq!(errno_in(&aya::programs::ProgramError::NotAttached), None);
    }

    /// A signal sent while held waits, and reaches its handler once released.
    #[test]
    fn held_signals_wait_and_are_not_lost() {
        use std::sync::atomic::{AtomicBool, Ordering};
        static SEEN: AtomicBool = AtomicBool::new(false);
        // SAFETY: the handler only stores into an atomic.
        let id = unsafe {
            signal_hook_registry::register(libc::SIGUSR2, || SEEN.store(true, Ordering::SeqCst))
        }
        .unwrap();
        {
            let _held = HeldSignals::hold();
            // SAFETY: a signal to this very thread.
            unsafe { libc::pthread_kill(libc::pthread_self(), libc::SIGUSR2) };
            assert!(!SEEN.load(Ordering::SeqCst), "delivered while held");
        }
        assert!(SEEN.load(Ordering::SeqCst), "lost");
        signal_hook_registry::unregister(id);
    }
}
