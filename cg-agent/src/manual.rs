//! Shell completions and the man pages, generated from the clap definitions in [`crate::cli`]
//! (`cg-trace completions SHELL`, `cg-trace man-page [SUBCOMMAND]`), so that neither can
//! drift from the options the binary takes. Both leave out the hidden options and
//! subcommands (benchmarks, tests). `cargo xtask dist` puts them in the release tarball.

use std::io::{self, Write};

use clap::CommandFactory as _;

use crate::cli::{Cli, EXAMPLES};

/// Writes the completion script for `shell`.
pub fn completions(shell: clap_complete::Shell, out: &mut dyn Write) {
    clap_complete::generate(shell, &mut visible(&Cli::command()), "cg-trace", out);
}

/// `command` (not yet built) without its hidden options and subcommands: clap_complete
/// offers every option it is given, hidden or not, and clap cannot remove one, so the
/// command is made anew from the visible parts.
fn visible(command: &clap::Command) -> clap::Command {
    let mut shown = clap::Command::new(command.get_name().to_owned())
        .args(
            command
                .get_arguments()
                .filter(|a| !a.is_hide_set())
                .cloned(),
        )
        .subcommands(
            command
                .get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(visible),
        );
    if let Some(about) = command.get_about() {
        shown = shown.about(about.clone());
    }
    if let Some(version) = command.get_version() {
        shown = shown.version(version.to_owned());
    }
    shown
}

/// Text for a roff page: backslashes and leading control characters escaped, `-` as a
/// minus sign (so that options can be searched and copied).
fn roff_text(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with(['.', '\'']) {
            out.push_str("\\&");
        }
        for c in line.chars() {
            match c {
                '\\' => out.push_str("\\e"),
                '-' => out.push_str("\\-"),
                c => out.push(c),
            }
        }
        out.push('\n');
    }
    out
}

/// The sections clap does not know: what the environment changes, the exit statuses, files
/// and related pages.
const EXTRA_SECTIONS: &[(&str, &[(&str, &str)])] = &[
    (
        "ENVIRONMENT",
        &[
            (
                "CG_TRACE_LOG",
                "The log on stderr: a tracing filter such as debug, info or \
                 cg_agent::sources=trace (default: warnings; errors only with -q).",
            ),
            (
                "NO_COLOR",
                "When set to a non-empty value, the log carries no colour. Without it, the log \
                 is coloured only when stderr is a terminal.",
            ),
        ],
    ),
    (
        "EXIT STATUS",
        &[
            (
                "wrap mode",
                "The command's exit status; 128+N when cg-trace was stopped by signal N; 124 \
                 when --duration ended the command; 126 or 127 when the command could not be \
                 run.",
            ),
            (
                "0",
                "Success; also a run stopped by Ctrl-C or SIGTERM in the other modes (the \
                 report is still written).",
            ),
            (
                "1",
                "The kernel refused the probes, a report could not be written, or another internal failure.",
            ),
            (
                "2",
                "Bad usage or input, said before anything is traced (no such pid, an unusable \
                 source, an output that cannot be written, missing privileges).",
            ),
            (
                "3",
                "A budget (--max-energy, --max-power) was exceeded (the report is still \
                 written), unless the wrapped command failed: its own status wins.",
            ),
        ],
    ),
    (
        "PRIVILEGES",
        &[(
            "root",
            "Loading eBPF needs root, or CAP_BPF and CAP_PERFMON: sudo setcap \
             cap_bpf,cap_perfmon+ep /usr/local/bin/cg-trace. Under sudo, the wrapped command \
             runs as the user who ran sudo. cg-trace sources needs no privileges.",
        )],
    ),
];

/// The command the man pages describe, built (bin and display names set), without the `help`
/// subcommand (`--help` is on every page).
fn paged_command() -> clap::Command {
    let mut command = Cli::command().disable_help_subcommand(true);
    command.build();
    command
}

/// The file names of the pages: `cg-trace.1`, then `cg-trace-SUBCOMMAND.1` for each
/// subcommand that is not hidden (the main page refers to each as cg-trace-SUBCOMMAND(1)).
pub fn page_names() -> Vec<String> {
    let command = paged_command();
    std::iter::once("cg-trace.1".to_string())
        .chain(
            command
                .get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(|s| format!("cg-trace-{}.1", s.get_name())),
        )
        .collect()
}

fn man(command: clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(command)
        .section("1")
        .manual("User Commands")
        .source(concat!("cg-trace ", env!("CARGO_PKG_VERSION")))
}

/// Writes the man page (roff, section 1) of cg-trace, or of one of its subcommands.
pub fn man_page(subcommand: Option<&str>, out: &mut dyn Write) -> io::Result<()> {
    let command = paged_command();
    let Some(name) = subcommand else {
        return main_page(command, out);
    };
    let Some(sub) = command
        .get_subcommands()
        .find(|s| s.get_name() == name && !s.is_hide_set())
    else {
        let names: Vec<String> = command
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
            .map(|s| s.get_name().to_string())
            .collect();
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "no page for {:?}: give one of {} (or nothing for cg-trace(1))",
                crate::printable::printable(name),
                names.join(", ")
            ),
        ));
    };
    let man = man(sub.clone());
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;
    write!(
        out,
        ".SH \"SEE ALSO\"\n\\fBcg\\-trace\\fR(1): the tracing options, exit statuses, \
         environment and privileges\n"
    )
}

fn main_page(command: clap::Command, out: &mut dyn Write) -> io::Result<()> {
    let man = man(command);
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;
    man.render_subcommands_section(out)?;
    let examples = EXAMPLES.strip_prefix("Examples:\n").unwrap_or(EXAMPLES);
    write!(out, ".SH EXAMPLES\n.nf\n{}.fi\n", roff_text(examples))?;
    for (heading, entries) in EXTRA_SECTIONS {
        writeln!(out, ".SH \"{heading}\"")?;
        for (term, text) in *entries {
            write!(out, ".TP\n\\fB{}\\fR\n{}", roff_text(term), roff_text(text))?;
        }
    }
    write!(
        out,
        ".SH \"SEE ALSO\"\n\\fBperf\\fR(1), \\fBsetcap\\fR(8), \\fBhtop\\fR(1); the report's \
         schema: docs/report.md in cg-trace's sources\n"
    )?;
    man.render_version_section(out)
}

/// `cg-trace completions SHELL`: the script on stdout; the exit code.
pub fn print_completions(shell: clap_complete::Shell) -> i32 {
    let mut buffer = Vec::new();
    completions(shell, &mut buffer);
    write_stdout(&buffer)
}

/// `cg-trace man-page [SUBCOMMAND]`: the page on stdout (`--list`: the pages' file names);
/// the exit code.
pub fn print_man_page(args: &crate::cli::ManPageArgs) -> i32 {
    if args.list {
        return write_stdout(format!("{}\n", page_names().join("\n")).as_bytes());
    }
    let mut buffer = Vec::new();
    match man_page(args.subcommand.as_deref(), &mut buffer) {
        Ok(()) => write_stdout(&buffer),
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            eprintln!("cg-trace: man-page: {err}");
            2
        }
        Err(err) => {
            eprintln!("cg-trace: the man page: {err}");
            1
        }
    }
}

fn write_stdout(bytes: &[u8]) -> i32 {
    let mut stdout = io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("cg-trace: writing to stdout: {err}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roff_text_escapes_what_roff_would_read_as_commands() {
        assert_eq!(roff_text(".hidden"), "\\&.hidden\n");
        assert_eq!(roff_text("'quoted"), "\\&'quoted\n");
        assert_eq!(roff_text("a\\b -o"), "a\\eb \\-o\n");
    }

    #[test]
    fn every_shell_gets_a_script_naming_the_options() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut out = Vec::new();
            completions(shell, &mut out);
            let text = String::from_utf8(out).unwrap();
            for word in ["cg-trace", "sample-hz", "freq", "sources", "power-log"] {
                assert!(text.contains(word), "{shell}: no {word}");
            }
        }
    }

    /// The script `completions` writes for `shell`.
    fn script(shell: clap_complete::Shell) -> String {
        let mut out = Vec::new();
        completions(shell, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn completions_leave_out_the_hidden_options_and_subcommands() {
        let mut command = Cli::command();
        command.build();
        let mut hidden: Vec<String> = Vec::new();
        let mut shown: Vec<String> = Vec::new();
        let mut commands = vec![&command];
        while let Some(c) = commands.pop() {
            for arg in c
                .get_arguments()
                .filter_map(|a| Some((a.get_long()?, a.is_hide_set())))
            {
                let list = if arg.1 { &mut hidden } else { &mut shown };
                list.push(arg.0.to_string());
            }
            commands.extend(c.get_subcommands());
        }
        // The flags the issue named are among them: this test sees what it must.
        for flag in [
            "bench-noop-probes",
            "bench-churn",
            "bench-symbolize",
            "perf-counters-from",
        ] {
            assert!(hidden.iter().any(|h| h == flag), "{flag} is not hidden");
        }
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let text = script(shell);
            for flag in &hidden {
                assert!(
                    !text.contains(flag.as_str()),
                    "{shell} offers the hidden --{flag}"
                );
            }
            assert!(
                !text.contains("man-page"),
                "{shell} offers the hidden man-page"
            );
            for flag in &shown {
                assert!(text.contains(flag.as_str()), "{shell} lacks --{flag}");
            }
        }
    }

    /// Every `cg-trace…(1)` a page names.
    fn cg_trace_references(page: &str) -> Vec<String> {
        let text = page
            .replace("\\-", "-")
            .replace("\\fB", "")
            .replace("\\fR", "");
        let mut found = Vec::new();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("cg-trace") {
            let tail = &rest[at..];
            let name_len = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .unwrap_or(tail.len());
            if tail[name_len..].starts_with("(1)") {
                found.push(format!("{}.1", &tail[..name_len]));
            }
            rest = &tail[name_len..];
        }
        found
    }

    #[test]
    fn every_page_a_page_refers_to_is_generated() {
        let names = page_names();
        assert!(names.len() >= 6, "{names:?}");
        let mut referred = 0;
        for name in &names {
            let subcommand = name
                .strip_prefix("cg-trace-")
                .and_then(|n| n.strip_suffix(".1"));
            let mut out = Vec::new();
            man_page(subcommand, &mut out).unwrap();
            let page = String::from_utf8(out).unwrap();
            let title = name.trim_end_matches(".1");
            assert!(page.contains(&format!(".TH {title} 1")), "{name}: {page}");
            for reference in cg_trace_references(&page) {
                assert!(
                    names.contains(&reference),
                    "{name} refers to {reference}, not generated"
                );
                referred += 1;
            }
        }
        // The main page names each subcommand's page, and each of those names cg-trace(1).
        assert!(referred >= 2 * (names.len() - 1), "{referred}");
        let mut out = Vec::new();
        let err = man_page(Some("man-page"), &mut out).unwrap_err();
        assert!(err.to_string().contains("give one of sources"), "{err}");
    }

    #[test]
    fn the_man_page_has_the_options_and_the_extra_sections() {
        let mut out = Vec::new();
        man_page(None, &mut out).unwrap();
        let page = String::from_utf8(out).unwrap();
        for needle in [
            ".TH cg-trace 1",
            ".SH OPTIONS",
            "sample\\-hz",
            ".SH EXAMPLES",
            ".SH \"EXIT STATUS\"",
            "NO_COLOR",
        ] {
            assert!(page.contains(needle), "no {needle:?} in the page");
        }
    }
}
