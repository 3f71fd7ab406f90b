//! From parsed arguments to a finished run: hands each subcommand to its module, decides
//! whether the live view shows a run, runs the session with the configuration
//! [`crate::run_config`] builds, builds the report, writes the outputs and prints the summary;
//! returns the process exit code.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use crate::{
    cli::{Cli, Command, ReportFormat, RunArgs},
    export::{csv, flamegraph, folded, html, json, pprof, speedscope, summary},
    grouping::GroupBy,
    inventory, output,
    output::OutputError,
    printable::printable,
    privileges::Invoker,
    report,
    run_config::{check_output, print_notice, report_format, run_config, source_options},
    session::{self, Mode},
    ui,
};

/// Exit code for bad usage (as clap uses).
pub const EXIT_USAGE: i32 = 2;

/// Exit code for a budget exceeded (`--max-energy`, `--max-power`); a wrapped command that
/// failed keeps its own status instead.
pub const EXIT_BUDGET: i32 = 3;

/// Why the live view shows a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum View {
    /// Headless.
    Off,
    /// `cg-trace top`.
    Top,
    /// `--tui`.
    Asked,
    /// Nothing to trace was said: `top` when stdout is a terminal.
    Default,
}

/// Runs the command line; returns the exit code.
pub fn main_with(cli: Cli) -> i32 {
    // First of all: a setuid install is refused whatever it was asked to do.
    let invoker = match Invoker::detect() {
        Ok(invoker) => invoker,
        Err(message) => return usage_error(message),
    };
    if let Some(samples) = cli.run.functions.bench_symbolize {
        return bench_symbolize(samples);
    }
    let next = match cli.subcommand {
        Some(command) => subcommand(command, cli.run, &invoker),
        None => {
            let view = view_of(&cli.run);
            Next::Record(Box::new(cli.run), view)
        }
    };
    match next {
        Next::Exit(code) => code,
        Next::Record(args, view) => record(*args, view, &invoker),
    }
}

/// What the command line asks for once a subcommand that ends the program has run.
enum Next {
    /// Done: the exit code.
    Exit(i32),
    /// A run to record, headless or in the live view.
    Record(Box<RunArgs>, View),
}

/// Bad usage found after parsing: `cg-trace: {message}` on stderr (even with `-q`); the exit
/// code.
fn usage_error(message: impl std::fmt::Display) -> i32 {
    crate::console::error(message);
    EXIT_USAGE
}

/// `--bench-symbolize N` (benchmarks): the symbolizer's speed on N samples, on stdout.
fn bench_symbolize(samples: usize) -> i32 {
    match crate::functions::symbolize::bench(samples) {
        Ok(line) => {
            println!("{line}");
            0
        }
        Err(err) => {
            crate::console::error(format_args!("--bench-symbolize: {err}"));
            1
        }
    }
}

/// Runs a subcommand, or, for `top`, says what to record.
fn subcommand(command: Command, run: RunArgs, invoker: &Invoker) -> Next {
    if let Some(message) = misplaced_option(&command, &run) {
        return Next::Exit(usage_error(message));
    }
    let code = match command {
        Command::Diff(args) => crate::diff::main(&args, invoker),
        Command::Compare(args) => crate::interleaved::main(&args, run, invoker),
        Command::Report(args) => html::main(&args.input, &args.html_output, invoker),
        Command::Sources(args) => match args.sources.after(&run.sources) {
            Ok(sources) => inventory::main(&source_options(&sources), args.json),
            Err(message) => usage_error(message),
        },
        Command::Completions(args) => crate::manual::print_completions(args.shell),
        Command::ManPage(args) => crate::manual::print_man_page(&args),
        Command::Serve(args) => serve(args, &run, invoker),
        Command::Top(mut args) => {
            return match args.sources.after(&run.sources) {
                Ok(sources) => {
                    args.sources = sources;
                    Next::Record(args, View::Top)
                }
                Err(message) => Next::Exit(usage_error(message)),
            };
        }
    };
    Next::Exit(code)
}

/// A run's option given before a subcommand that would not see it: what to say instead.
fn misplaced_option(command: &Command, run: &RunArgs) -> Option<String> {
    let (option, instead) = match command {
        Command::Diff(_) => (
            option_before_subcommand(run)?,
            "is a run option, not one of `diff`: `cg-trace diff BASE.json NEW.json \
             [--max-increase PCT] [--gate WHAT] [--format text|markdown|json|html] [-o FILE]`",
        ),
        Command::Compare(_) => (
            option_before_top(run)?,
            "is an option of a single run, not one of `compare`: `cg-trace [SOURCE OPTIONS] \
             compare -n N [--prepare CMD] 'CMD_A' 'CMD_B'`",
        ),
        Command::Report(_) => (
            option_before_subcommand(run)?,
            "is a run option, not one of `report`: `cg-trace report RUN.json -o report.html`",
        ),
        Command::Top(_) => (
            option_before_top(run)?,
            "goes after `top`: `cg-trace top [OPTIONS]`",
        ),
        Command::Sources(_) | Command::Completions(_) | Command::ManPage(_) | Command::Serve(_) => {
            return None;
        }
    };
    Some(format!("{option} {instead}"))
}

/// `cg-trace serve` (or its churn benchmark).
fn serve(args: crate::cli::ServeArgs, run: &RunArgs, invoker: &Invoker) -> i32 {
    if let Some(days) = args.bench_churn {
        if let Err(message) = check_churn_days(days) {
            return usage_error(message);
        }
        return match crate::serve::churn::run(days) {
            Ok(()) => 0,
            Err(err) => {
                crate::console::error(format_args!("--bench-churn: {err}"));
                1
            }
        };
    }
    let sources = match args.sources.after(&run.sources) {
        Ok(sources) => sources,
        Err(message) => return usage_error(message),
    };
    let config = crate::serve::ServeConfig {
        listen: args.listen,
        interval: Duration::from_millis(args.interval),
        duration: args.duration,
        options: crate::serve::model::ServeOptions {
            top_groups: args.top as usize,
            grace_ns: (args.grace * 1e9) as u64,
            group_by: args.group_by,
        },
        kube_pods_url: args.kube_pods_url,
        kube_credentials: args.kube_credentials,
    };
    crate::serve::main(
        &config,
        source_options(&sources),
        invoker,
        session::Notices::new(print_notice),
    )
}

/// `--bench-churn DAYS`: a simulated span from 0 to a year.
fn check_churn_days(days: f64) -> Result<(), &'static str> {
    if days.is_finite() && days > 0.0 && days <= 366.0 {
        Ok(())
    } else {
        Err("--bench-churn: days from 0 to 366")
    }
}

/// Whether a run without a subcommand shows the live view.
fn view_of(run: &RunArgs) -> View {
    if run.view.tui {
        View::Asked
    } else if !names_targets(run) {
        View::Default
    } else {
        View::Off
    }
}

/// Records a run (once, or `--repeat` times), then writes and summarizes its report.
fn record(mut args: RunArgs, view: View, invoker: &Invoker) -> i32 {
    if let Err(message) = check_view(&args, view, ui::stdout_is_terminal()) {
        return usage_error(message);
    }
    if view != View::Off && !names_targets(&args) {
        args.all = true;
    }
    let config = match run_config(&args, invoker) {
        Ok(config) => config,
        Err(message) => return usage_error(message),
    };
    if let Some(runs) = args.repeat.repeat {
        return record_repeat(&args, view, invoker, config, runs);
    }
    let outcome = if view == View::Off {
        session::run(config).map_err(ui::ViewError::from)
    } else {
        let command_output = match view_command_output(&args, &config.mode, invoker) {
            Ok(path) => path,
            Err(message) => return usage_error(message),
        };
        run_in_view(&args, config, command_output)
    };
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(err) => {
            crate::console::error(&err);
            return err.exit_code();
        }
    };
    let report = report::build(&outcome.recording);
    write_and_summarize(&args, invoker, report, outcome.exit_code)
}

/// The live view needs a terminal on stdout; `--command-output` needs the live view.
fn check_view(args: &RunArgs, view: View, stdout_is_terminal: bool) -> Result<(), &'static str> {
    match view {
        View::Default if !stdout_is_terminal => Err(
            "say what to trace: `cg-trace [OPTIONS] -- CMD [ARGS...]`, `--pid PID[,PID...]` or \
             `--all`, with `-o FILE` for the report; `cg-trace top` (the default on a terminal) \
             needs stdout to be a terminal (see --help)",
        ),
        View::Top | View::Asked if !stdout_is_terminal => Err(
            "the live view needs a terminal, and stdout is not one; to record without it, name \
             the report with `-o FILE` (e.g. `cg-trace --all -o report.json`)",
        ),
        View::Off if args.view.command_output.is_some() => {
            Err("--command-output is for the live view: add --tui")
        }
        _ => Ok(()),
    }
}

/// Records a run in the live view; says afterwards where the command's output went.
fn run_in_view(
    args: &RunArgs,
    config: session::RunConfig,
    command_output: Option<PathBuf>,
) -> Result<session::Outcome, ui::ViewError> {
    let result = ui::run(
        config,
        ui::ViewOptions {
            refresh: Duration::from_millis(args.view.refresh),
            command_output: command_output.clone(),
            exit_on_end: args.view.exit_on_end,
            group_by_cgroup: args.group_by == GroupBy::Cgroup,
            frame_stats: args.view.bench_frame_stats.clone(),
        },
    );
    if let Some(path) = command_output.filter(|p| p.exists()) {
        // Said even with -q: the command's output would be lost otherwise.
        crate::console::error(format_args!(
            "the command's output is in {}",
            printable(&path.display().to_string())
        ));
    }
    result
}

/// `--repeat N`: records the runs, and writes and summarizes the report that combines them.
fn record_repeat(
    args: &RunArgs,
    view: View,
    invoker: &Invoker,
    config: session::RunConfig,
    runs: u32,
) -> i32 {
    if let Err(message) = check_repeat(args, view) {
        return usage_error(message);
    }
    let plan = session::RepeatPlan {
        runs,
        warmup: args.repeat.warmup,
        cooldown: Duration::from_secs_f64(args.repeat.cooldown),
        commands: Vec::new(),
        prepare: None,
    };
    let outcome = match session::run_repeat(config, plan) {
        Ok(outcome) => outcome,
        Err(err) => {
            crate::console::error(&err);
            return err.exit_code();
        }
    };
    let reports = outcome.runs.iter().map(report::build).collect();
    let info = report::repeat::SetInfo {
        runs_requested_count: runs,
        warmup_runs_count: args.repeat.warmup,
        cooldown_s: args.repeat.cooldown,
        stopped_early: outcome.stopped_early,
    };
    let Some(report) = report::repeat::combine(reports, info) else {
        crate::console::error("no run was measured");
        return outcome.exit_code.max(1);
    };
    write_and_summarize(args, invoker, report, outcome.exit_code)
}

/// `--repeat` runs a command, headless.
fn check_repeat(args: &RunArgs, view: View) -> Result<(), String> {
    if args.command.is_empty() {
        return Err("--repeat runs a command: `cg-trace --repeat N -- CMD [ARGS...]`".into());
    }
    if view != View::Off {
        return Err("--repeat runs without the live view: drop --tui (or `top`)".into());
    }
    Ok(())
}

/// Writes the report and the function outputs, then prints the summary; returns the exit
/// code (1 when an output could not be written, [`EXIT_BUDGET`] over a budget).
fn write_and_summarize(
    args: &RunArgs,
    invoker: &Invoker,
    mut report: report::Report,
    exit_code: i32,
) -> i32 {
    // The peak memory includes building the report (measured now it is built).
    report.meta.profiler.cost.include_peak_so_far();
    report.budgets = report::budget::evaluate(&report, &budget_limits(args));
    let over_budget = report.budgets.iter().any(|b| b.exceeded);
    // The files first: a summary that cannot be printed (the terminal hung up) must not
    // cost the report.
    let written = write_outputs(args, invoker, &report);
    let mut text = summary_text(args, &report);
    for message in &written.messages {
        text.push_str(message);
        text.push('\n');
    }
    for budget in &report.budgets {
        if let Some(line) = report::budget::message(budget) {
            text.push_str(&line);
            text.push('\n');
        }
    }
    crate::console::write_stderr(&text);
    final_exit_code(exit_code, written.failed, over_budget)
}

/// The exit code of a run: 1 when an output could not be written, else the command's (or the
/// session's), else [`EXIT_BUDGET`] over a budget.
fn final_exit_code(exit_code: i32, write_failed: bool, over_budget: bool) -> i32 {
    if write_failed {
        1
    } else if exit_code == 0 && over_budget {
        EXIT_BUDGET
    } else {
        exit_code
    }
}

/// What writing the outputs had to say: a line each, and whether one could not be written.
#[derive(Debug, Default)]
struct Written {
    messages: Vec<String>,
    failed: bool,
}

/// One output file of a run.
struct OutputFile<'a> {
    path: &'a Path,
    /// What it is, in "{what} written to PATH".
    what: &'static str,
    /// What it is, in "{failed}: ERROR".
    failed: String,
    write: WriteFn,
    /// `-` means standard output (nothing to say where it went).
    dash_is_stdout: bool,
}

/// The outputs the arguments name, the report first.
fn output_files(args: &RunArgs) -> Vec<OutputFile<'_>> {
    let report_writer: WriteFn = match args
        .output
        .as_deref()
        .map(|p| report_format(p, args.format))
    {
        Some(Some(ReportFormat::Csv)) => csv::write_to_path,
        Some(Some(ReportFormat::Html)) => html::write_to_path,
        _ => json::write_to_path,
    };
    let reports: [(&Option<PathBuf>, &str, &str, WriteFn); 3] = [
        (&args.output, "report", "the report (-o)", report_writer),
        (
            &args.csv,
            "CSV report",
            "the CSV report (--csv)",
            csv::write_to_path,
        ),
        (
            &args.html,
            "HTML report",
            "the HTML report (--html)",
            html::write_to_path,
        ),
    ];
    let functions: [(&Option<PathBuf>, &str, WriteFn); 4] = [
        (
            &args.functions.folded,
            "folded stacks",
            folded::write_to_path,
        ),
        (
            &args.functions.flamegraph,
            "energy flamegraph",
            flamegraph::write_to_path,
        ),
        (
            &args.functions.speedscope,
            "speedscope profile",
            speedscope::write_to_path,
        ),
        (&args.functions.pprof, "pprof profile", pprof::write_to_path),
    ];
    let reports = reports
        .into_iter()
        .filter_map(|(path, what, failed, write)| {
            Some(OutputFile {
                path: path.as_deref()?,
                what,
                failed: failed.to_string(),
                write,
                dash_is_stdout: true,
            })
        });
    let functions = functions.into_iter().filter_map(|(path, what, write)| {
        Some(OutputFile {
            path: path.as_deref()?,
            what,
            failed: format!("the {what}"),
            write,
            dash_is_stdout: false,
        })
    });
    reports.chain(functions).collect()
}

/// Writes every output the arguments name; says where each went (unless `-q`) or why not.
fn write_outputs(args: &RunArgs, invoker: &Invoker, report: &report::Report) -> Written {
    let mut written = Written::default();
    for output in output_files(args) {
        match (output.write)(report, output.path, invoker) {
            Ok(()) if args.quiet || (output.dash_is_stdout && output.path == Path::new("-")) => {}
            Ok(()) => written.messages.push(format!(
                "cg-trace: {} written to {}",
                output.what,
                printable(&output.path.display().to_string())
            )),
            Err(err) => {
                written
                    .messages
                    .push(format!("cg-trace: {}: {err}", output.failed));
                written.failed = true;
            }
        }
    }
    written
}

/// The summary, and a `--repeat` set's statistics and noise warning (nothing with `-q`).
fn summary_text(args: &RunArgs, report: &report::Report) -> String {
    if args.quiet {
        return String::new();
    }
    let mut text = summary::render_with(
        report,
        summary::SummaryOptions {
            threads: args.threads,
            group_by: args.group_by,
        },
    );
    if let Some(repeat) = &report.repeat {
        let estimated = report.meta.measurement_quality.grade == "estimated";
        text.push_str(&report::repeat::render(repeat, estimated));
        if repeat.noise_verdict.worrying() {
            text.push_str(&format!(
                "cg-trace: warning: the runs are noisy ({}: the targets' energy varies by \
                 {:.1}% (CV) from run to run); quiet the machine, add --warmup or more --repeat \
                 runs\n",
                repeat.noise_verdict.name(),
                repeat.statistics.attributed_energy_j.cv_pct
            ));
        }
    }
    text
}

/// `--max-energy` and `--max-power`, as the report checks them.
fn budget_limits(args: &RunArgs) -> Vec<report::budget::Limit> {
    use report::budget::{Kind, Limit};
    let limits = |kind: Kind, given: &[crate::cli::BudgetArg]| -> Vec<Limit> {
        given
            .iter()
            .map(|b| Limit {
                kind,
                program: b.name.clone(),
                limit: b.limit,
            })
            .collect()
    };
    let mut all = limits(Kind::Energy, &args.repeat.max_energy);
    all.extend(limits(Kind::Power, &args.repeat.max_power));
    all
}

/// An option of a run given before a subcommand that takes none of them (`diff`, `report`).
fn option_before_subcommand(run: &RunArgs) -> Option<&'static str> {
    option_before_top(run).or_else(|| run.sources.first_given())
}

/// An option of a run given before `top`, where it would not reach it (the source options
/// do: [`crate::cli::SourceArgs::after`]).
fn option_before_top(run: &RunArgs) -> Option<&'static str> {
    [
        (!run.pid.is_empty(), "--pid"),
        (run.all, "--all"),
        (run.output.is_some(), "-o"),
        (run.format.is_some(), "--format"),
        (run.csv.is_some(), "--csv"),
        (run.html.is_some(), "--html"),
        (run.interval != 100, "--interval"),
        (run.duration.is_some(), "--duration"),
        (run.idle_watts.is_some(), "--idle-watts"),
        (run.calibrate_ms != 500, "--calibrate-ms"),
        (run.timeseries, "--timeseries"),
        (run.quiet, "-q"),
        (run.threads, "--threads"),
        (run.group_by != GroupBy::None, "--group-by"),
        (run.view.tui, "--tui"),
        (run.view.refresh != 1000, "--refresh"),
        (run.view.command_output.is_some(), "--command-output"),
        (!run.functions.func.is_empty(), "--func"),
        (
            run.functions.func_limit != crate::functions::DEFAULT_FUNC_LIMIT,
            "--func-limit",
        ),
        (run.functions.profile, "--profile"),
        (
            run.functions.sample_hz != crate::functions::DEFAULT_SAMPLE_HZ,
            "--sample-hz",
        ),
        (
            run.functions.top_functions != crate::functions::DEFAULT_TOP_FUNCTIONS,
            "--top-functions",
        ),
        (run.functions.folded.is_some(), "--folded"),
        (run.functions.flamegraph.is_some(), "--flamegraph"),
        (run.functions.speedscope.is_some(), "--speedscope"),
        (run.functions.pprof.is_some(), "--pprof"),
        (!run.functions.debug_dir.is_empty(), "--debug-dir"),
        (run.functions.no_lines, "--no-lines"),
        (run.repeat.repeat.is_some(), "--repeat"),
        (!run.repeat.max_energy.is_empty(), "--max-energy"),
        (!run.repeat.max_power.is_empty(), "--max-power"),
    ]
    .into_iter()
    .find_map(|(given, name)| given.then_some(name))
}

/// Whether the arguments say what to trace.
fn names_targets(args: &RunArgs) -> bool {
    !args.command.is_empty() || !args.pid.is_empty() || args.all
}

/// Wrap mode under the live view: the file for the command's output (it must be possible to
/// create before we start).
fn view_command_output(
    args: &RunArgs,
    mode: &Mode,
    invoker: &Invoker,
) -> Result<Option<PathBuf>, String> {
    if !matches!(mode, Mode::Wrap { .. }) {
        return Ok(None);
    }
    let path = args
        .view
        .command_output
        .clone()
        .unwrap_or_else(output::default_command_output);
    check_output(&path, "--command-output", invoker)?;
    Ok(Some(path))
}

/// A writer of one output file: the report (JSON, CSV, HTML) or a function profile.
type WriteFn = fn(&report::Report, &Path, &Invoker) -> Result<(), OutputError>;

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    /// The command line `cg-trace ARGS...`, parsed.
    fn cli(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("cg-trace").chain(args.iter().copied()))
            .unwrap_or_else(|err| panic!("{args:?}: {err}"))
    }

    /// What `cg-trace ARGS...` says of a run option given before its subcommand.
    fn misplaced(args: &[&str]) -> Option<String> {
        let cli = cli(args);
        misplaced_option(cli.subcommand.as_ref().expect("a subcommand"), &cli.run)
    }

    #[test]
    fn a_run_option_before_a_subcommand_is_named_with_the_subcommands_usage() {
        let diff = misplaced(&["--all", "diff", "a.json", "b.json"]).unwrap();
        assert!(
            diff.starts_with("--all is a run option, not one of `diff`: "),
            "{diff}"
        );
        assert!(diff.contains("`cg-trace diff BASE.json NEW.json"), "{diff}");
        let report = misplaced(&["-q", "report", "run.json", "-o", "r.html"]).unwrap();
        assert!(
            report.starts_with("-q is a run option, not one of `report`"),
            "{report}"
        );
        let top = misplaced(&["--interval", "50", "top"]).unwrap();
        assert_eq!(top, "--interval goes after `top`: `cg-trace top [OPTIONS]`");
        let compare = misplaced(&["--pid", "1", "compare", "true", "false"]).unwrap();
        assert!(compare.starts_with("--pid is an option of a single run, not one of `compare`"));
    }

    #[test]
    fn source_options_may_come_before_top_and_compare_but_not_diff_or_report() {
        fn with<'a>(tail: &[&'a str]) -> Vec<&'a str> {
            [&["--model-watts", "5:50"][..], tail].concat()
        }
        assert_eq!(misplaced(&with(&["top"])), None);
        assert_eq!(misplaced(&with(&["compare", "true", "false"])), None);
        assert!(misplaced(&with(&["diff", "a.json", "b.json"])).is_some());
        assert!(misplaced(&with(&["report", "run.json", "-o", "r.html"])).is_some());
        // Subcommands that take every option they need, or none.
        assert_eq!(misplaced(&["--all", "sources"]), None);
        assert_eq!(misplaced(&["diff", "a.json", "b.json"]), None);
    }

    #[test]
    fn the_live_view_shows_a_run_asked_for_it_or_without_targets() {
        assert_eq!(view_of(&cli(&["--", "true"]).run), View::Off);
        assert_eq!(view_of(&cli(&["--all", "-o", "r.json"]).run), View::Off);
        assert_eq!(view_of(&cli(&["--tui", "--", "true"]).run), View::Asked);
        assert_eq!(view_of(&cli(&[]).run), View::Default);
    }

    #[test]
    fn the_live_view_needs_a_terminal_and_command_output_needs_the_view() {
        let plain = cli(&["--", "true"]).run;
        for view in [View::Off, View::Top, View::Asked, View::Default] {
            assert_eq!(check_view(&plain, view, true), Ok(()), "{view:?}");
        }
        assert_eq!(check_view(&plain, View::Off, false), Ok(()));
        let default = check_view(&plain, View::Default, false).unwrap_err();
        assert!(default.starts_with("say what to trace"), "{default}");
        for view in [View::Top, View::Asked] {
            let err = check_view(&plain, view, false).unwrap_err();
            assert!(err.starts_with("the live view needs a terminal"), "{err}");
        }
        let output = cli(&["--command-output", "out.txt", "--", "true"]).run;
        assert_eq!(
            check_view(&output, View::Off, true),
            Err("--command-output is for the live view: add --tui")
        );
        assert_eq!(check_view(&output, View::Asked, true), Ok(()));
    }

    #[test]
    fn repeat_runs_a_command_headless() {
        let run = cli(&["--repeat", "3", "--", "true"]).run;
        assert_eq!(check_repeat(&run, View::Off), Ok(()));
        let err = check_repeat(&run, View::Asked).unwrap_err();
        assert!(err.contains("drop --tui"), "{err}");
        let err = check_repeat(&cli(&["--repeat", "3", "--all"]).run, View::Off).unwrap_err();
        assert!(err.starts_with("--repeat runs a command"), "{err}");
    }

    #[test]
    fn churn_days_are_from_zero_to_a_year() {
        assert_eq!(check_churn_days(1.0), Ok(()));
        assert_eq!(check_churn_days(366.0), Ok(()));
        for days in [0.0, -1.0, 367.0, f64::NAN, f64::INFINITY] {
            assert!(check_churn_days(days).is_err(), "{days}");
        }
    }

    #[test]
    fn a_failed_output_wins_over_the_commands_status_which_wins_over_a_budget() {
        assert_eq!(final_exit_code(0, false, false), 0);
        assert_eq!(final_exit_code(0, false, true), EXIT_BUDGET);
        assert_eq!(final_exit_code(7, false, true), 7);
        assert_eq!(final_exit_code(7, true, false), 1);
        assert_eq!(final_exit_code(0, true, true), 1);
    }

    #[test]
    fn outputs_are_written_report_first_each_named_as_its_option_says() {
        let run = cli(&[
            "--pprof", "p.pb", "--csv", "r.csv", "-o", "r.html", "--folded", "f.txt", "--", "true",
        ])
        .run;
        let files = output_files(&run);
        let named: Vec<(&str, &str, bool)> = files
            .iter()
            .map(|f| {
                (
                    f.path.to_str().unwrap(),
                    f.failed.as_str(),
                    f.dash_is_stdout,
                )
            })
            .collect();
        assert_eq!(
            named,
            [
                ("r.html", "the report (-o)", true),
                ("r.csv", "the CSV report (--csv)", true),
                ("f.txt", "the folded stacks", false),
                ("p.pb", "the pprof profile", false),
            ]
        );
        assert!(output_files(&cli(&["--", "true"]).run).is_empty());
    }
}
