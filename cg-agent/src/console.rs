//! What cg-trace says on stderr besides the summary, and how: `-q` (errors only: the source
//! choice, warnings and "written to" lines are left to the report), the log's set-up (colour
//! only on a terminal, never with `NO_COLOR`).
//! Whatever goes out here has its control characters escaped ([`crate::printable`]): a
//! message may quote a process name, a path or a report's text.

use std::{
    ffi::OsString,
    fmt::Display,
    io::{IsTerminal as _, Write as _},
    sync::atomic::{AtomicBool, Ordering},
};

use crate::printable::{printable, printable_lines};

/// `-q`: set once, from the command line, before anything runs.
static QUIET: AtomicBool = AtomicBool::new(false);

/// Says that only errors are to be printed from now on (`-q`).
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether only errors are printed (`-q`).
pub fn is_quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// Prints `cg-trace: {line}` on stderr unless `-q` was given: a message that is not an
/// error (which source was chosen, a warning that the report also holds, where a file went).
/// Never panics when stderr is gone.
pub fn say(line: impl Display) {
    if !is_quiet() {
        error(line);
    }
}

/// Prints `cg-trace: {line}` on stderr, even with `-q` (an error, or what must not be lost),
/// with control characters escaped but its own line breaks kept. Never panics when stderr
/// is gone.
pub fn error(line: impl Display) {
    write_stderr(&format!("cg-trace: {line}\n"));
}

/// Writes `text` on stderr with control characters escaped but line breaks kept (the last
/// line of defence: outside text in it should already be [`printable`]). Not `eprint!`,
/// which panics when stderr is gone (a closed pipe, a terminal hung up).
pub fn write_stderr(text: &str) {
    let _ = std::io::stderr().write_all(printable_lines(text).as_bytes());
}

/// Prints `line` on stderr as it is (a subcommand's own prefix, `cg-trace diff: ...`), even
/// with `-q`, with control characters escaped but its own line breaks kept: `eprintln!` that
/// neither lets outside text write to the terminal nor panics when stderr is gone.
pub fn write_line(line: impl Display) {
    write_stderr(&format!("{line}\n"));
}

/// Prints `cg-trace: warning: {text}` on stderr unless `-q` was given.
pub fn warn(text: impl Display) {
    say(format_args!("warning: {text}"));
}

/// Whether log lines may carry colour: stderr is a terminal and `NO_COLOR` is unset or
/// empty (<https://no-color.org>).
pub fn log_colour(stderr_is_terminal: bool, no_color: Option<OsString>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// The log filter when `CG_TRACE_LOG` does not give one: warnings, or errors alone with `-q`.
pub fn default_log_level(quiet: bool) -> &'static str {
    if quiet { "error" } else { "warn" }
}

/// Sets up the log (`tracing`) on stderr: the level from `CG_TRACE_LOG` (an `EnvFilter`,
/// e.g. `debug` or `cg_agent::sources=trace`), else [`default_log_level`]; colour as
/// [`log_colour`] says.
pub fn init_logging(quiet: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CG_TRACE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_log_level(quiet)));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .fmt_fields(log_fields())
        .with_ansi(log_colour(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR"),
        ))
        .with_writer(std::io::stderr)
        .init();
}

/// How the log writes an event's fields: `message` alone, others as `name=value`, each value
/// [`printable`] (a field may quote a process name, a symbol or a path).
fn log_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + 'static {
    use tracing_subscriber::field::MakeExt as _;
    tracing_subscriber::fmt::format::debug_fn(|out, field, value| {
        let value = format!("{value:?}");
        if field.name() == "message" {
            write!(out, "{}", printable(&value))
        } else {
            write!(out, "{field}={}", printable(&value))
        }
    })
    .delimited(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_and_never_with_no_color() {
        assert!(log_colour(true, None));
        assert!(log_colour(true, Some("".into())));
        assert!(!log_colour(true, Some("1".into())));
        assert!(!log_colour(false, None));
        assert!(!log_colour(false, Some("1".into())));
    }

    /// The log's lines, gathered for a test.
    #[derive(Clone, Default)]
    struct Gathered(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Gathered {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_log_escapes_what_its_message_and_fields_quote() {
        let gathered = Gathered::default();
        let sink = gathered.clone();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(log_fields())
            .with_ansi(false)
            .with_writer(move || sink.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(
                path = %"/tmp/a\nforged line",
                "cannot read {}",
                "x\x1b]52;c;AA\x07\u{202e}"
            );
        });
        let text = String::from_utf8(gathered.0.lock().unwrap().clone()).unwrap();
        assert!(
            text.contains("cannot read x\\x1b]52;c;AA\\x07\\u202e path=/tmp/a\\nforged line"),
            "{text}"
        );
        assert_eq!(text.matches('\n').count(), 1, "{text}");
        assert!(!text.contains('\x1b'), "{text}");
    }

    #[test]
    fn quiet_logs_errors_only() {
        assert_eq!(default_log_level(true), "error");
        assert_eq!(default_log_level(false), "warn");
    }
}
