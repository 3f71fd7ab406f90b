//! Shell completions and the man page, generated from the clap definitions in [`crate::cli`]
//! (`cg-trace completions SHELL`, `cg-trace man-page`), so that neither can drift from the
//! options the binary takes. `cargo xtask dist` puts both in the release tarball.

use std::io::{self, Write};

use clap::CommandFactory as _;

use crate::cli::{Cli, EXAMPLES};

/// Writes the completion script for `shell`.
pub fn completions(shell: clap_complete::Shell, out: &mut dyn Write) {
    clap_complete::generate(shell, &mut Cli::command(), "cg-trace", out);
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

/// Writes the man page (roff, section 1).
pub fn man_page(out: &mut dyn Write) -> io::Result<()> {
    let man = clap_mangen::Man::new(Cli::command())
        .section("1")
        .manual("User Commands")
        .source(concat!("cg-trace ", env!("CARGO_PKG_VERSION")));
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

/// `cg-trace man-page`: the page on stdout; the exit code.
pub fn print_man_page() -> i32 {
    let mut buffer = Vec::new();
    match man_page(&mut buffer) {
        Ok(()) => write_stdout(&buffer),
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

    #[test]
    fn the_man_page_has_the_options_and_the_extra_sections() {
        let mut out = Vec::new();
        man_page(&mut out).unwrap();
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
