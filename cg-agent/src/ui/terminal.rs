//! Taking the terminal for the view and always giving it back: raw mode, the alternate
//! screen, mouse reports and a hidden cursor while the view runs; on the way out (quit, end of the run,
//! SIGTERM, an error) or on a panic (the hook restores the terminal *before* the panic is
//! printed) the terminal is restored. While the view runs, our own stderr goes to an
//! unlinked temporary file so that warnings do not tear the screen; they are printed once the
//! terminal is back.

use std::{
    fs::File,
    io::{self, Read, Seek, Write},
    os::fd::{AsRawFd, FromRawFd},
    sync::{
        Once,
        atomic::{AtomicBool, AtomicI32, Ordering},
    },
};

use ratatui::{
    Terminal,
    backend::CrosstermBackend,
    crossterm::{
        cursor::{Hide, Show},
        event::{DisableMouseCapture, EnableMouseCapture},
        execute,
        terminal::{EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode},
    },
};

/// Whether we hold the terminal (raw mode, alternate screen).
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Our original stderr while it is redirected, or -1.
static SAVED_STDERR: AtomicI32 = AtomicI32::new(-1);
/// The file stderr goes to meanwhile, or -1.
static STDERR_LOG: AtomicI32 = AtomicI32::new(-1);
static PANIC_HOOK: Once = Once::new();

pub type ViewTerminal = Terminal<CrosstermBackend<io::Stdout>>;

/// The terminal, taken; dropping it gives it back.
pub struct Taken {
    pub terminal: ViewTerminal,
}

impl Taken {
    /// Takes the terminal: panic hook first, then stderr aside, raw mode, alternate screen.
    pub fn take() -> io::Result<Self> {
        PANIC_HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore();
                previous(info);
            }));
        });
        redirect_stderr();
        let taken = (|| {
            enable_raw_mode()?;
            ACTIVE.store(true, Ordering::SeqCst);
            execute!(io::stdout(), EnterAlternateScreen, Hide, EnableMouseCapture)?;
            Terminal::new(CrosstermBackend::new(io::stdout()))
        })();
        match taken {
            Ok(terminal) => Ok(Taken { terminal }),
            Err(err) => {
                restore();
                Err(err)
            }
        }
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        restore();
    }
}

/// Gives the terminal back (cooked mode, main screen, visible cursor) and prints what was
/// written to stderr meanwhile. Safe to call more than once, and from the panic hook.
pub fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = disable_raw_mode();
        let _ = execute!(
            io::stdout(),
            DisableMouseCapture,
            LeaveAlternateScreen,
            Show
        );
    }
    let saved = SAVED_STDERR.swap(-1, Ordering::SeqCst);
    if saved >= 0 {
        // SAFETY: plain fd syscalls on descriptors we own.
        unsafe {
            libc::dup2(saved, 2);
            libc::close(saved);
        }
    }
    // A terminal that hung up takes no more output (and printing to it would panic).
    crate::session::leave_a_dead_terminal();
    let log = STDERR_LOG.swap(-1, Ordering::SeqCst);
    if log >= 0 {
        // SAFETY: we own this descriptor (opened in redirect_stderr) and nothing else uses it.
        let mut file = unsafe { File::from_raw_fd(log) };
        let mut text = Vec::new();
        if file.rewind().is_ok() && file.read_to_end(&mut text).is_ok() && !text.is_empty() {
            let _ = io::stderr().write_all(&text);
        }
    }
}

/// Sends fd 2 to an unlinked temporary file (left alone when that fails).
fn redirect_stderr() {
    if SAVED_STDERR.load(Ordering::SeqCst) >= 0 {
        return;
    }
    let path = std::env::temp_dir().join(format!(".cg-trace-stderr-{}", std::process::id()));
    let Ok(file) = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
    else {
        return;
    };
    let _ = std::fs::remove_file(&path);
    let _ = io::stderr().flush();
    // SAFETY: plain fd syscalls; `file` stays open until we take its descriptor below.
    unsafe {
        let saved = libc::dup(2);
        if saved < 0 {
            return;
        }
        if libc::dup2(file.as_raw_fd(), 2) < 0 {
            libc::close(saved);
            return;
        }
        SAVED_STDERR.store(saved, Ordering::SeqCst);
    }
    STDERR_LOG.store(std::os::fd::IntoRawFd::into_raw_fd(file), Ordering::SeqCst);
}
