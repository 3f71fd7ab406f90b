//! The live terminal view (`cg-trace top`, `--tui`): the energy equivalent of `htop`.
//!
//! Three threads, one channel, as bottom does it: the session runs on its own thread and its
//! observer turns each interval into [`crate::report::live`] figures, sending a snapshot every
//! refresh period; an input thread sends keys and resizes; the main loop alone owns the view's
//! state ([`state::App`]) and draws it ([`render`]). The session keeps measuring whatever the
//! view does (pause only freezes the display), and quitting stops the run as Ctrl-C would,
//! after which the caller builds the report as in any other run. In wrap mode the view stays
//! up with the final figures when the command ends, until `q` (or a signal) closes it, unless
//! `--exit-on-end`.

pub mod render;
pub mod state;
pub mod terminal;
#[cfg(test)]
mod testdata;
pub mod users;

use std::{
    io::{self, IsTerminal},
    panic::AssertUnwindSafe,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicI32, Ordering},
        mpsc,
    },
    thread,
    time::{Duration, Instant},
};

use ratatui::crossterm::event::{self as input, KeyCode, KeyEvent, KeyEventKind, MouseEvent};

use self::state::{Action, App, ViewConfig};
use crate::{
    report::live::{LiveModel, LiveReport},
    session::{
        self, Outcome, RunConfig, RunError,
        live::{LiveEvent, LiveHooks},
    },
};

/// How often the input thread checks whether the view has ended.
const INPUT_POLL: Duration = Duration::from_millis(100);
/// For the end-to-end tests: a key that makes the view panic, to check that the terminal is
/// given back before the panic is printed.
const TEST_PANIC_KEY_ENV: &str = "CG_TRACE_TEST_PANIC_KEY";

/// Everything that reaches the main loop, on one channel.
#[derive(Debug)]
pub enum Event {
    /// The run has started: take the terminal.
    Started,
    /// New figures.
    Data(Box<LiveReport>),
    Key(KeyEvent),
    /// A click or the wheel (the view asks the terminal for mouse reports).
    Mouse(MouseEvent),
    Resize,
    /// The terminal hung up (its window or connection closed): the run stops.
    TerminalGone,
    /// The run ended (`None`: its thread panicked).
    Finished(Option<Box<RunResult>>),
}

type RunResult = Result<Outcome, RunError>;

/// Errors of the live view.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("the terminal: {0}")]
    Terminal(#[source] io::Error),
    #[error("the run stopped on an internal error (see the panic message above)")]
    Panicked,
}

impl ViewError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            ViewError::Run(err) => err.exit_code(),
            ViewError::Terminal(_) | ViewError::Panicked => 1,
        }
    }
}

/// How the view runs.
#[derive(Clone, Debug)]
pub struct ViewOptions {
    /// How often the figures on screen are renewed (at most once per interval).
    pub refresh: Duration,
    /// Wrap mode: where the command's output goes.
    pub command_output: Option<PathBuf>,
    /// Wrap mode: close the view when the command ends, rather than keeping the final
    /// figures on screen until the user quits.
    pub exit_on_end: bool,
    /// Start with one row per cgroup (`--group-by cgroup`; `C` toggles it).
    pub group_by_cgroup: bool,
    /// Benchmarks: write frame render times here at the end.
    pub frame_stats: Option<PathBuf>,
}

/// Whether stdout is a terminal the view can take.
pub fn stdout_is_terminal() -> bool {
    io::stdout().is_terminal()
}

/// Runs `config` under the live view; returns the run's outcome once the terminal is back.
pub fn run(config: RunConfig, options: ViewOptions) -> Result<Outcome, ViewError> {
    let invoker = config.invoker.clone();
    let (tx, rx) = mpsc::channel::<Event>();
    let stop = Arc::new(tokio::sync::Notify::new());
    let hooks = LiveHooks {
        observer: observer(tx.clone(), options.refresh),
        stop: stop.clone(),
        command_output: options.command_output.clone(),
    };
    let session_tx = tx.clone();
    let session = thread::Builder::new()
        .name("cg-trace-session".into())
        .spawn(move || {
            let outcome =
                std::panic::catch_unwind(AssertUnwindSafe(|| session::run_live(config, hooks)));
            let _ = session_tx.send(Event::Finished(outcome.ok().map(Box::new)));
        })
        .map_err(ViewError::Terminal)?;

    // Errors before the run starts (privileges, sources, a bad pid) are printed as usual,
    // without the terminal ever changing.
    loop {
        match rx.recv() {
            Ok(Event::Started) => break,
            Ok(Event::Finished(outcome)) => {
                let _ = session.join();
                return finish(outcome);
            }
            Ok(_) => {}
            Err(_) => return Err(ViewError::Panicked),
        }
    }

    let mut taken = match terminal::Taken::take() {
        Ok(taken) => taken,
        Err(err) => {
            // No view after all: stop the run, and say why once it has ended.
            stop.notify_one();
            while let Ok(event) = rx.recv() {
                if let Event::Finished(_) = event {
                    break;
                }
            }
            let _ = session.join();
            return Err(ViewError::Terminal(err));
        }
    };
    let input_done = Arc::new(AtomicBool::new(false));
    let input = spawn_input(tx, input_done.clone());
    let mut app = App::new(
        ViewConfig {
            refresh: options.refresh,
            command_output: options.command_output.clone(),
        },
        users::Users::system(),
    );
    app.cgroups = options.group_by_cgroup;
    let panic_key = std::env::var(TEST_PANIC_KEY_ENV)
        .ok()
        .and_then(|k| k.chars().next());
    let mut frames: Vec<FrameTime> = Vec::new();
    let mut dirty = true;
    // The run's outcome while its final figures stay on screen, and the signal handlers
    // that close that screen.
    let mut kept: Option<(Option<Box<RunResult>>, FinalSignals)> = None;
    let outcome = loop {
        if dirty {
            let started = Instant::now();
            let mut render = Duration::ZERO;
            let drawn = taken.terminal.draw(|f| {
                let rendering = Instant::now();
                f.render_widget(&app, f.area());
                render = rendering.elapsed();
            });
            if let Err(err) = drawn {
                // The terminal went away (e.g. closed): stop the run, keep its report.
                tracing::warn!("drawing the view: {err}");
                stop.notify_one();
            }
            frames.push(FrameTime {
                render,
                draw: started.elapsed(),
            });
            dirty = false;
        }
        let first = match &kept {
            None => rx.recv().ok(),
            Some(_) => match rx.recv_timeout(FINAL_SIGNAL_POLL) {
                Ok(event) => Some(event),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if FINAL_SIGNAL.load(Ordering::SeqCst) != 0 {
                        break kept.take().and_then(|(outcome, _)| outcome);
                    }
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => None,
            },
        };
        let Some(first) = first else {
            break kept.take().and_then(|(outcome, _)| outcome);
        };
        // Everything already queued is handled before the next frame.
        let mut finished = None;
        let mut quit_final = false;
        for event in std::iter::once(first).chain(rx.try_iter()) {
            match event {
                Event::Key(key) if panic_key.is_some_and(|c| key.code == KeyCode::Char(c)) => {
                    panic!("{TEST_PANIC_KEY_ENV}: panicking on request")
                }
                Event::Key(key) => match app.handle_key(key) {
                    Action::Quit if kept.is_some() => quit_final = true,
                    Action::Quit => {
                        // A second quit while the command winds down stops waiting for it.
                        stop.notify_one();
                        app.stopping = true;
                        dirty = true;
                    }
                    Action::Redraw => dirty = true,
                    Action::Signal { pid, signal } => {
                        app.signal_sent(pid, signal, send_signal(pid, signal));
                        dirty = true;
                    }
                    Action::Nothing => {}
                },
                Event::Data(report) => {
                    app.update(*report);
                    dirty = !app.paused;
                }
                Event::Mouse(mouse) => dirty |= app.handle_mouse(mouse) == Action::Redraw,
                Event::Resize => dirty = true,
                Event::TerminalGone => {
                    quit_final = true;
                    crate::session::leave_a_dead_terminal();
                    tracing::warn!("the terminal hung up: stopping the run");
                    stop.notify_one();
                    app.stopping = true;
                }
                Event::Started => {}
                Event::Finished(outcome) => finished = Some(outcome),
            }
        }
        if let Some(outcome) = finished {
            match final_line(&outcome, &options, &app) {
                Some(line) => {
                    app.ended = Some(line);
                    dirty = true;
                    kept = Some((outcome, FinalSignals::register()));
                }
                None => break outcome,
            }
        }
        if (quit_final || FINAL_SIGNAL.load(Ordering::SeqCst) != 0)
            && let Some((outcome, _)) = kept.take()
        {
            break outcome;
        }
    };
    drop(kept);
    input_done.store(true, Ordering::SeqCst);
    drop(taken);
    // The input thread ends within one poll; should the terminal have wedged it, the
    // report matters more than joining it (it ends with the process).
    let waited = Instant::now();
    while !input.is_finished() && waited.elapsed() < Duration::from_secs(1) {
        thread::sleep(Duration::from_millis(10));
    }
    if input.is_finished() {
        let _ = input.join();
    }
    let _ = session.join();
    if let Some(path) = &options.frame_stats {
        write_frame_stats(path, &frames, &invoker);
    }
    finish(outcome)
}

/// `k`: kill(2), with its error as text. The view has checked `pid` (a positive pid, a
/// second yes for init and cg-trace itself).
fn send_signal(pid: u32, signal: i32) -> Result<(), String> {
    let pid = libc::pid_t::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| format!("{pid} is not a process"))?;
    // SAFETY: kill(2) on a positive pid: one process, never a group.
    if unsafe { libc::kill(pid, signal) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error().to_string())
    }
}

/// How often the final screen checks for a signal.
const FINAL_SIGNAL_POLL: Duration = Duration::from_millis(100);
/// The signal that closed the final screen, or 0.
static FINAL_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// Wrap mode, when the command ended by itself and the view is to stay: the line that says
/// so. `None` closes the view now: `--exit-on-end`, the user quit or the terminal hung up
/// (the run was stopping), the run stopped for another reason, or it failed.
fn final_line(
    outcome: &Option<Box<RunResult>>,
    options: &ViewOptions,
    app: &App,
) -> Option<String> {
    if options.exit_on_end || app.stopping {
        return None;
    }
    let Some(Ok(outcome)) = outcome.as_deref() else {
        return None;
    };
    let status = match outcome.recording.command_ending? {
        session::processes::Ending::Exited(code) => format!("exit status {code}"),
        session::processes::Ending::Signaled(signal) => {
            format!("killed by signal {signal} (exit status {})", 128 + signal)
        }
    };
    Some(format!("the command ended: {status}"))
}

/// While the final figures stay on screen the session's signal handling has ended: SIGINT,
/// SIGTERM and SIGHUP close the view (and the report is written) instead of going unheard.
struct FinalSignals(Vec<signal_hook_registry::SigId>);

impl FinalSignals {
    fn register() -> Self {
        FINAL_SIGNAL.store(0, Ordering::SeqCst);
        let ids = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP]
            .into_iter()
            .filter_map(|signal| {
                // SAFETY: the action only stores to an atomic, which is async-signal-safe.
                unsafe {
                    signal_hook_registry::register(signal, move || {
                        FINAL_SIGNAL.store(signal, Ordering::SeqCst);
                    })
                }
                .ok()
            })
            .collect();
        FinalSignals(ids)
    }
}

impl Drop for FinalSignals {
    fn drop(&mut self) {
        for id in self.0.drain(..) {
            signal_hook_registry::unregister(id);
        }
    }
}

fn finish(outcome: Option<Box<RunResult>>) -> Result<Outcome, ViewError> {
    match outcome {
        Some(result) => Ok((*result)?),
        None => Err(ViewError::Panicked),
    }
}

/// The session's observer: the live model runs on the session's thread, and a snapshot goes
/// to the main loop after the first interval and then every `refresh`; the last one when the
/// session lets the observer go at the end of the run, so the final screen has every interval.
fn observer(tx: mpsc::Sender<Event>, refresh: Duration) -> Box<dyn FnMut(LiveEvent<'_>) + Send> {
    let refresh_ns = refresh.as_nanos() as u64;
    let mut feed = Feed {
        tx,
        model: None,
        sent: false,
    };
    Box::new(move |event| match event {
        LiveEvent::Started(start) => {
            feed.model = Some(LiveModel::new(&start));
            let _ = feed.tx.send(Event::Started);
        }
        LiveEvent::Sample(sample) => {
            if let Some(model) = feed.model.as_mut() {
                model.add(&sample);
                if !feed.sent || model.window_ns() >= refresh_ns {
                    feed.sent = true;
                    let _ = feed.tx.send(Event::Data(Box::new(model.snapshot())));
                }
            }
        }
    })
}

/// The observer's state; dropped with the observer, it sends what the last snapshot missed.
struct Feed {
    tx: mpsc::Sender<Event>,
    model: Option<LiveModel>,
    sent: bool,
}

impl Drop for Feed {
    fn drop(&mut self) {
        if let Some(model) = self.model.as_mut()
            && model.window_ns() > 0
        {
            let _ = self.tx.send(Event::Data(Box::new(model.snapshot())));
        }
    }
}

/// Reads keys and resizes until `done`, or until the terminal hangs up.
fn spawn_input(tx: mpsc::Sender<Event>, done: Arc<AtomicBool>) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        // crossterm spins inside `poll` on a hung-up terminal (always ready, reads empty):
        // wait on the terminal ourselves and ask crossterm only without waiting.
        let tty = std::fs::File::open("/dev/tty").ok();
        while !done.load(Ordering::SeqCst) {
            let wait = match &tty {
                Some(tty) => match wait_readable(tty, INPUT_POLL) {
                    Readiness::HungUp => {
                        let _ = tx.send(Event::TerminalGone);
                        break;
                    }
                    Readiness::Readable | Readiness::Timeout => Duration::ZERO,
                },
                None => INPUT_POLL,
            };
            match input::poll(wait) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(_) => break,
            }
            let event = match input::read() {
                Ok(input::Event::Key(key)) if key.kind != KeyEventKind::Release => Event::Key(key),
                Ok(input::Event::Resize(..)) => Event::Resize,
                Ok(input::Event::Mouse(mouse)) => Event::Mouse(mouse),
                Ok(_) => continue,
                Err(_) => break,
            };
            if tx.send(event).is_err() {
                break;
            }
        }
    })
}

enum Readiness {
    Readable,
    Timeout,
    HungUp,
}

/// Waits until the terminal has input, hangs up, or `timeout` passes.
fn wait_readable(tty: &std::fs::File, timeout: Duration) -> Readiness {
    use std::os::fd::AsRawFd;
    let mut fd = libc::pollfd {
        fd: tty.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd we own.
    let ready = unsafe { libc::poll(&mut fd, 1, timeout.as_millis() as libc::c_int) };
    if ready <= 0 {
        Readiness::Timeout
    } else if fd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
        Readiness::HungUp
    } else {
        Readiness::Readable
    }
}

/// Per frame: the time to render the view into the frame's buffer, and the whole draw
/// (render, diff against the previous frame, write to the terminal, flush).
#[derive(Clone, Copy, Debug)]
struct FrameTime {
    render: Duration,
    draw: Duration,
}

/// `frames N`, then mean, 95th percentile and worst of both times, in milliseconds.
fn write_frame_stats(
    path: &std::path::Path,
    frames: &[FrameTime],
    invoker: &crate::privileges::Invoker,
) {
    let summary = |pick: fn(&FrameTime) -> Duration| {
        let mut ms: Vec<f64> = frames.iter().map(|f| pick(f).as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let mean = if ms.is_empty() {
            0.0
        } else {
            ms.iter().sum::<f64>() / ms.len() as f64
        };
        let p95 = ms
            .get(((ms.len() as f64 * 0.95) as usize).min(ms.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0);
        (mean, p95, ms.last().copied().unwrap_or(0.0))
    };
    let (render_mean, render_p95, render_max) = summary(|f| f.render);
    let (draw_mean, draw_p95, draw_max) = summary(|f| f.draw);
    let text = format!(
        "frames {}\nrender_mean_ms {render_mean:.3}\nrender_p95_ms {render_p95:.3}\n\
         render_max_ms {render_max:.3}\ndraw_mean_ms {draw_mean:.3}\ndraw_p95_ms {draw_p95:.3}\n\
         draw_max_ms {draw_max:.3}\n",
        frames.len()
    );
    if let Err(err) = crate::output::write_file(path, invoker, |f| f.write_all(text.as_bytes())) {
        eprintln!("cg-trace: frame stats: {err}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_signal_gives_kills_error_and_refuses_what_is_not_one_process() {
        // Beyond any pid_max: no such process.
        let err = send_signal(i32::MAX as u32, 0).unwrap_err();
        assert!(err.contains("No such process"), "{err}");
        // 0 and pids that kill(2) would read as a process group are refused.
        assert!(send_signal(0, 0).unwrap_err().contains("not a process"));
        assert!(
            send_signal(u32::MAX, 0)
                .unwrap_err()
                .contains("not a process")
        );
        // Signal 0 to ourselves: allowed, and nothing happens.
        assert_eq!(send_signal(std::process::id(), 0), Ok(()));
    }

    #[test]
    fn the_observer_sends_after_the_first_interval_then_once_per_refresh() {
        let (tx, rx) = mpsc::channel();
        let mut observer = observer(tx, Duration::from_millis(500));
        // 2.5 s of 100 ms intervals.
        testdata::wrapped_run(25, &mut observer);
        let events: Vec<Event> = rx.try_iter().collect();
        assert!(matches!(events[0], Event::Started));
        let windows: Vec<f64> = events[1..]
            .iter()
            .map(|e| match e {
                Event::Data(report) => report.window_s,
                other => panic!("{other:?}"),
            })
            .collect();
        // The first interval at once, then every 500 ms of data.
        assert_eq!(windows.len(), 5, "{windows:?}");
        assert!((windows[0] - 0.1).abs() < 1e-9);
        assert!(
            windows[1..].iter().all(|w| (w - 0.5).abs() < 1e-9),
            "{windows:?}"
        );
        // The end of the run lets the observer go: the last 400 ms follow, and the final
        // figures cover the whole run.
        drop(observer);
        let last: Vec<Event> = rx.try_iter().collect();
        match last.as_slice() {
            [Event::Data(report)] => {
                assert!((report.window_s - 0.4).abs() < 1e-9, "{}", report.window_s);
                assert!(
                    (report.elapsed_s - 2.5).abs() < 1e-9,
                    "{}",
                    report.elapsed_s
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
