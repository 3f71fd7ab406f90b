//! From a run's command-line arguments to the session's configuration ([`RunConfig`]): the
//! checks clap cannot do alone (what to trace, the outputs' names and formats, `--func`), made
//! before anything is measured, the energy sources' options with their defaults, and how the
//! session's notices are worded on stderr. `cg-trace` (a run, `top`, `--repeat`), `compare` and
//! `serve` all start from here.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use crate::{
    cli::{FunctionArgs, ReportFormat, RunArgs, SourceArgs},
    functions::{FunctionOptions, spec::FuncSpec},
    output::{self, OutputError},
    printable::printable,
    privileges::Invoker,
    session::{self, IdleWatts, Mode, RunConfig},
    sources::{SourceChoice, SourceOptions},
};

/// Checks the arguments that clap cannot check alone, and that every output can be written
/// for `invoker`, and builds the run's configuration.
pub fn run_config(args: &RunArgs, invoker: &Invoker) -> Result<RunConfig, String> {
    let mode = if !args.command.is_empty() {
        Mode::Wrap {
            command: args.command.clone(),
        }
    } else if !args.pid.is_empty() {
        Mode::Attach {
            pids: args.pid.clone(),
        }
    } else if args.all {
        Mode::System
    } else {
        return Err(
            "say what to trace: `cg-trace [OPTIONS] -- CMD [ARGS...]`, `--pid PID[,PID...]` or \
             `--all` (see --help)"
                .into(),
        );
    };
    if let Some(path) = &args.output {
        check_report_path(path, args.format, invoker)?;
    }
    if let Some(path) = args.csv.as_deref().filter(|p| *p != Path::new("-")) {
        check_output(path, "--csv", invoker)?;
    }
    if let Some(path) = args.html.as_deref().filter(|p| *p != Path::new("-")) {
        check_output(path, "--html", invoker)?;
    }
    let outputs = [
        (&args.output, "-o"),
        (&args.csv, "--csv"),
        (&args.html, "--html"),
        (&args.functions.folded, "--folded"),
        (&args.functions.flamegraph, "--flamegraph"),
        (&args.functions.speedscope, "--speedscope"),
        (&args.functions.pprof, "--pprof"),
        (&args.view.command_output, "--command-output"),
    ];
    for (i, (a, a_name)) in outputs.iter().enumerate() {
        for (b, b_name) in &outputs[i + 1..] {
            if let (Some(a), Some(b)) = (a, b)
                && a == b
                && (a != Path::new("-") || matches!(*b_name, "--csv" | "--html"))
            {
                return Err(format!(
                    "{a_name} and {b_name} name the same file {}: give each its own",
                    a.display()
                ));
            }
        }
    }
    let functions = function_options(&args.functions, invoker)?;
    if let Some(path) = &args.view.bench_frame_stats {
        check_output(path, "--bench-frame-stats", invoker)?;
    }
    Ok(RunConfig {
        command_stdout_to_stderr: matches!(mode, Mode::Wrap { .. })
            && (args.output.as_deref() == Some(Path::new("-"))
                || args.csv.as_deref() == Some(Path::new("-"))
                || args.html.as_deref() == Some(Path::new("-"))),
        invoker: invoker.clone(),
        mode,
        interval: Duration::from_millis(args.interval),
        duration: args.duration,
        sources: source_options(&args.sources),
        idle_watts: args.idle_watts.clone().unwrap_or(IdleWatts::Estimate),
        calibration: Duration::from_millis(args.calibrate_ms),
        timeseries: args.timeseries,
        proc_root: "/proc".into(),
        noop_probes: args.bench_noop_probes,
        accounting: args.accounting.map(Into::into),
        functions,
        notices: session::Notices::new(print_notice),
        bounded_memory: false,
    })
}

/// Words and prints a session's remark on stderr (see [`session::Notice`]).
pub fn print_notice(notice: &session::Notice) {
    use session::Notice;
    let line = match notice {
        Notice::Targets(text) => format!("cg-trace: {text}"),
        Notice::SourcesChosen {
            names,
            provenance,
            reason,
            replaced,
        } => {
            let from = if *replaced {
                " after the calibration"
            } else {
                ""
            };
            let names = names.join(", ");
            let names = printable(&names);
            match provenance {
                crate::sources::Provenance::Measured => {
                    format!("cg-trace: energy source{from}: {names} (measured): {reason}")
                }
                // Why is said once, in the quality notes at the end, with the figures.
                crate::sources::Provenance::Estimated => format!(
                    "cg-trace: energy source{from}: {names} (ESTIMATED; why: see the quality \
                     notes at the end)"
                ),
            }
        }
        Notice::SourceWarning(text) => format!("cg-trace: warning: {text}"),
        Notice::NoopProbes => "cg-trace: --bench-noop-probes: sched_switch accounts nothing; \
                               figures are meaningless"
            .to_string(),
        Notice::StillRunning(process) => format!(
            "cg-trace: warning: pid {} ({}) that the command started is still running; \
             cg-trace stopped tracing it",
            process.pid,
            printable(&process.command.join(" "))
        ),
        Notice::NeverStarted(reason) => format!("cg-trace: {reason}"),
        Notice::MeasuredNothing(err) => {
            format!("cg-trace: error: {err}; its energy is unknown for the whole run")
        }
        Notice::Functions(text) => format!("cg-trace: {text}"),
        Notice::RunDone {
            command,
            warmup,
            number,
            of,
            duration_s,
        } => format!(
            "cg-trace: {}run {number}/{of}{} done ({duration_s:.3} s)",
            if *warmup { "warm-up " } else { "" },
            match command {
                Some(0) => " of A",
                Some(_) => " of B",
                None => "",
            }
        ),
    };
    // With -q only errors, and why the exit status is not the command's, are said.
    let always = matches!(notice, Notice::NeverStarted(_) | Notice::MeasuredNothing(_));
    if always || !crate::console::is_quiet() {
        crate::console::write_stderr(&format!("{line}\n"));
    }
}

/// The options that choose and configure the energy sources, defaults applied.
pub fn source_options(args: &SourceArgs) -> SourceOptions {
    SourceOptions {
        choice: args.source.unwrap_or(SourceChoice::Auto),
        powercap_root: args
            .powercap_root
            .clone()
            .unwrap_or_else(|| PathBuf::from(crate::sources::powercap::DEFAULT_ROOT)),
        perf_root: args
            .perf_root
            .clone()
            .unwrap_or_else(|| PathBuf::from(crate::sources::perf::DEFAULT_ROOT)),
        perf_counters_from: args.perf_counters_from.clone(),
        model_watts: args.model_watts.map(|m| (m.idle_w, m.max_w)),
        nvml_lib: (!args.no_gpu).then(|| {
            args.nvml_lib
                .clone()
                .unwrap_or_else(|| PathBuf::from(crate::sources::nvml::DEFAULT_LIB))
        }),
        nvml_required: args.nvml_lib.is_some(),
        power_log: args.power_log.clone(),
        state_dir: args
            .state_dir
            .clone()
            .or_else(crate::sources::gpu_rest::default_state_dir),
    }
}

/// The report's format follows `--format`, else the file's extension (`-`: JSON on stdout);
/// the file must be possible to write before we measure.
fn check_report_path(
    path: &Path,
    format: Option<ReportFormat>,
    invoker: &Invoker,
) -> Result<(), String> {
    if path == Path::new("-") {
        return Ok(());
    }
    match report_format(path, format) {
        Some(ReportFormat::Json | ReportFormat::Csv | ReportFormat::Html) => {}
        None => {
            return Err(format!(
                "-o {}: unknown report format: name the file *.json, *.csv or *.html, add \
                 `--format json` (csv, html), or use `-o -` for JSON on stdout",
                path.display()
            ));
        }
    }
    output::check(path, invoker).map_err(|err| {
        let hint = match err {
            // `-o /dev/stdout` and the like.
            OutputError::NotRegular { .. } => " (`-o -` writes the report to standard output)",
            _ => "",
        };
        format!("-o: {err}{hint}")
    })
}

/// `--format`, else the format the file's extension names; JSON on stdout (`-o -`).
pub fn report_format(path: &Path, format: Option<ReportFormat>) -> Option<ReportFormat> {
    if path == Path::new("-") {
        return Some(format.unwrap_or(ReportFormat::Json));
    }
    let from_name = path
        .extension()
        .and_then(|e| e.to_str())
        .and_then(ReportFormat::from_extension);
    format.or(from_name)
}

/// `--func`, `--profile` and their outputs.
fn function_options(args: &FunctionArgs, invoker: &Invoker) -> Result<FunctionOptions, String> {
    let mut specs = Vec::new();
    for text in &args.func {
        specs.extend(FuncSpec::parse_list(text)?);
    }
    for (path, what) in [
        (&args.folded, "--folded"),
        (&args.flamegraph, "--flamegraph"),
        (&args.speedscope, "--speedscope"),
        (&args.pprof, "--pprof"),
    ] {
        if let Some(path) = path {
            check_output(path, what, invoker)?;
        }
    }
    if let Some(path) = &args.flamegraph
        && path.extension().and_then(|e| e.to_str()) != Some("svg")
    {
        return Err(format!(
            "--flamegraph {}: the flamegraph is an SVG; name the file *.svg",
            path.display()
        ));
    }
    if args.func_limit == 0 {
        return Err("--func-limit 0: nothing could be probed; give a limit of at least 1".into());
    }
    for dir in &args.debug_dir {
        if !dir.is_absolute() || !dir.is_dir() {
            return Err(format!(
                "--debug-dir {}: not an existing directory given by its absolute path; \
                 name the folder that holds the debug files (its .build-id/ tree)",
                dir.display()
            ));
        }
    }
    Ok(FunctionOptions {
        specs,
        func_limit: args.func_limit,
        profile: args.profile
            || args.folded.is_some()
            || args.flamegraph.is_some()
            || args.speedscope.is_some()
            || args.pprof.is_some(),
        sample_hz: args.sample_hz,
        stacks: args.stacks,
        top: args.top_functions,
        bench_empty_probes: args.bench_empty_func,
        lines: !args.no_lines,
        debug_dirs: if args.debug_dir.is_empty() {
            crate::functions::debuginfo::DebugDirs::default()
        } else {
            crate::functions::debuginfo::DebugDirs(args.debug_dir.clone())
        },
    })
}

/// An output must be possible to write, for the user the run is for, before we measure:
/// its directory opens, a fresh file can be created there (and is removed at once), and an
/// existing file of that name is one cg-trace may replace (see [`crate::output`]).
pub fn check_output(path: &Path, what: &str, invoker: &Invoker) -> Result<(), String> {
    output::check(path, invoker).map_err(|err| format!("{what}: {err}"))
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::Cli;

    /// The run options of `cg-trace ARGS...`.
    fn run(args: &[&str]) -> RunArgs {
        Cli::try_parse_from(std::iter::once("cg-trace").chain(args.iter().copied()))
            .unwrap_or_else(|err| panic!("{args:?}: {err}"))
            .run
    }

    #[test]
    fn the_report_format_is_the_options_else_the_files_extension() {
        let format = |path: &str, given| report_format(Path::new(path), given);
        assert_eq!(format("r.json", None), Some(ReportFormat::Json));
        assert_eq!(format("r.html", None), Some(ReportFormat::Html));
        assert_eq!(format("r.txt", None), None);
        assert_eq!(
            format("r.txt", Some(ReportFormat::Csv)),
            Some(ReportFormat::Csv)
        );
        // `-o -`: JSON on stdout unless told otherwise.
        assert_eq!(format("-", None), Some(ReportFormat::Json));
        assert_eq!(
            format("-", Some(ReportFormat::Csv)),
            Some(ReportFormat::Csv)
        );
    }

    #[test]
    fn a_run_says_what_to_trace_and_gives_each_output_its_own_file() {
        let me = Invoker::ourselves();
        let err = run_config(&run(&[]), &me).unwrap_err();
        assert!(err.starts_with("say what to trace"), "{err}");
        let dir = std::env::temp_dir().join(format!("cg-run-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("same.svg").display().to_string();
        let args = ["--folded", &file, "--flamegraph", &file, "--", "true"];
        let err = run_config(&run(&args), &me).unwrap_err();
        assert!(
            err.starts_with("--folded and --flamegraph name the same file"),
            "{err}"
        );
        let err = run_config(&run(&["-o", "r.txt", "--", "true"]), &me).unwrap_err();
        assert!(err.contains("unknown report format"), "{err}");
        let config = run_config(&run(&["-o", "-", "--", "true"]), &me).unwrap();
        assert!(config.command_stdout_to_stderr, "the report has stdout");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
