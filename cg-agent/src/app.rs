//! From parsed arguments to a finished run: picks the mode (and whether the live view shows
//! it), runs the session, builds the report, prints the summary and writes the outputs;
//! returns the process exit code.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use crate::{
    cli::{Cli, Command, ReportFormat, RunArgs},
    export::{csv, flamegraph, folded, html, json, pprof, speedscope, summary},
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
        Err(message) => {
            crate::console::write_line(format_args!("cg-trace: {message}"));
            return EXIT_USAGE;
        }
    };
    if let Some(samples) = cli.run.functions.bench_symbolize {
        return match crate::functions::symbolize::bench(samples) {
            Ok(line) => {
                println!("{line}");
                0
            }
            Err(err) => {
                crate::console::write_line(format_args!("cg-trace: --bench-symbolize: {err}"));
                1
            }
        };
    }
    let (mut args, view) = match cli.subcommand {
        Some(Command::Diff(diff_args)) => {
            if let Some(option) = option_before_subcommand(&cli.run) {
                crate::console::write_line(format_args!(
                    "cg-trace: {option} is a run option, not one of `diff`: `cg-trace diff \
                     BASE.json NEW.json [--max-increase PCT] [--gate WHAT] [--format \
                     text|markdown|json|html] [-o FILE]`"
                ));
                return EXIT_USAGE;
            }
            return crate::compare::main(&diff_args, &invoker);
        }
        Some(Command::Compare(compare_args)) => {
            if let Some(option) = option_before_top(&cli.run) {
                crate::console::write_line(format_args!(
                    "cg-trace: {option} is an option of a single run, not one of `compare`: \
                     `cg-trace [SOURCE OPTIONS] compare -n N [--prepare CMD] 'CMD_A' 'CMD_B'`"
                ));
                return EXIT_USAGE;
            }
            return crate::compare::interleaved::main(&compare_args, cli.run, &invoker);
        }
        Some(Command::Report(report_args)) => {
            if let Some(option) = option_before_subcommand(&cli.run) {
                crate::console::write_line(format_args!(
                    "cg-trace: {option} is a run option, not one of `report`: `cg-trace report \
                     RUN.json -o report.html`"
                ));
                return EXIT_USAGE;
            }
            return html::main(&report_args, &invoker);
        }
        Some(Command::Sources(sources_args)) => {
            let sources = match sources_args.sources.after(&cli.run.sources) {
                Ok(sources) => sources,
                Err(message) => return usage_error(&message),
            };
            return inventory::main(&source_options(&sources), sources_args.json);
        }
        Some(Command::Completions(args)) => return crate::manual::print_completions(args.shell),
        Some(Command::Serve(serve_args)) => {
            if let Some(days) = serve_args.bench_churn {
                if !(days.is_finite() && days > 0.0 && days <= 366.0) {
                    crate::console::write_line(format_args!(
                        "cg-trace: --bench-churn: days from 0 to 366"
                    ));
                    return EXIT_USAGE;
                }
                return match crate::serve::churn::run(days) {
                    Ok(()) => 0,
                    Err(err) => {
                        crate::console::write_line(format_args!("cg-trace: --bench-churn: {err}"));
                        1
                    }
                };
            }
            let sources = match serve_args.sources.after(&cli.run.sources) {
                Ok(sources) => sources,
                Err(message) => return usage_error(&message),
            };
            let config = crate::serve::ServeConfig {
                listen: serve_args.listen,
                interval: Duration::from_millis(serve_args.interval),
                duration: serve_args.duration,
                options: crate::serve::model::ServeOptions {
                    top_groups: serve_args.top as usize,
                    grace_ns: (serve_args.grace * 1e9) as u64,
                    group_by: match serve_args.group_by {
                        crate::cli::GroupByArg::Comm => crate::serve::model::GroupBy::Comm,
                        crate::cli::GroupByArg::Cgroup => crate::serve::model::GroupBy::Cgroup,
                        crate::cli::GroupByArg::Unit => crate::serve::model::GroupBy::Unit,
                    },
                },
                kube_pods_url: serve_args.kube_pods_url.clone(),
                kube_credentials: serve_args.kube_credentials.clone(),
            };
            return crate::serve::main(
                &config,
                source_options(&sources),
                &invoker,
                session::Notices::new(print_notice),
            );
        }
        Some(Command::ManPage(args)) => return crate::manual::print_man_page(&args),
        Some(Command::Top(mut args)) => {
            if let Some(option) = option_before_top(&cli.run) {
                crate::console::write_line(format_args!(
                    "cg-trace: {option} goes after `top`: `cg-trace top [OPTIONS]`"
                ));
                return EXIT_USAGE;
            }
            args.sources = match args.sources.after(&cli.run.sources) {
                Ok(sources) => sources,
                Err(message) => return usage_error(&message),
            };
            (*args, View::Top)
        }
        None if cli.run.view.tui => (cli.run, View::Asked),
        None if !names_targets(&cli.run) => (cli.run, View::Default),
        None => (cli.run, View::Off),
    };
    if view != View::Off && !ui::stdout_is_terminal() {
        if view == View::Default {
            crate::console::write_line(format_args!(
                "cg-trace: say what to trace: `cg-trace [OPTIONS] -- CMD [ARGS...]`, `--pid \
                 PID[,PID...]` or `--all`, with `-o FILE` for the report; `cg-trace top` (the \
                 default on a terminal) needs stdout to be a terminal (see --help)"
            ));
        } else {
            crate::console::write_line(format_args!(
                "cg-trace: the live view needs a terminal, and stdout is not one; to record \
                 without it, name the report with `-o FILE` (e.g. `cg-trace --all -o \
                 report.json`)"
            ));
        }
        return EXIT_USAGE;
    }
    if view == View::Off && args.view.command_output.is_some() {
        crate::console::write_line(format_args!(
            "cg-trace: --command-output is for the live view: add --tui"
        ));
        return EXIT_USAGE;
    }
    if view != View::Off && !names_targets(&args) {
        args.all = true;
    }
    let config = match run_config(&args, &invoker) {
        Ok(config) => config,
        Err(message) => {
            crate::console::error(message);
            return EXIT_USAGE;
        }
    };
    if let Some(runs) = args.repeat.repeat {
        if let Err(message) = check_repeat(&args, view) {
            crate::console::write_line(format_args!("cg-trace: {message}"));
            return EXIT_USAGE;
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
            crate::console::write_line(format_args!("cg-trace: no run was measured"));
            return outcome.exit_code.max(1);
        };
        return write_and_summarize(&args, &invoker, report, outcome.exit_code);
    }
    let outcome = if view == View::Off {
        session::run(config).map_err(ui::ViewError::from)
    } else {
        let command_output = match view_command_output(&args, &config.mode, &invoker) {
            Ok(path) => path,
            Err(message) => {
                crate::console::write_line(format_args!("cg-trace: {message}"));
                return EXIT_USAGE;
            }
        };
        let result = ui::run(
            config,
            ui::ViewOptions {
                refresh: Duration::from_millis(args.view.refresh),
                command_output: command_output.clone(),
                exit_on_end: args.view.exit_on_end,
                group_by_cgroup: args.group_by == crate::export::summary::GroupBy::Cgroup,
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
    };
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(err) => {
            crate::console::error(&err);
            return err.exit_code();
        }
    };
    let report = report::build(&outcome.recording);
    write_and_summarize(&args, &invoker, report, outcome.exit_code)
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
/// code (1 when an output could not be written).
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
    let mut messages = Vec::new();
    let mut exit_code = exit_code;
    if let Some(path) = &args.output {
        let write = match report_format(path, args.format) {
            Some(ReportFormat::Csv) => csv::write_to_path,
            Some(ReportFormat::Html) => html::write_to_path,
            _ => json::write_to_path,
        };
        match write(&report, path, invoker) {
            Ok(()) if path != Path::new("-") && !args.quiet => {
                messages.push(format!(
                    "cg-trace: report written to {}",
                    printable(&path.display().to_string())
                ));
            }
            Ok(()) => {}
            Err(err) => {
                messages.push(format!("cg-trace: the report (-o): {err}"));
                exit_code = 1;
            }
        }
    }
    if let Some(path) = &args.csv {
        match csv::write_to_path(&report, path, invoker) {
            Ok(()) if path != Path::new("-") && !args.quiet => {
                messages.push(format!(
                    "cg-trace: CSV report written to {}",
                    path.display()
                ));
            }
            Ok(()) => {}
            Err(err) => {
                messages.push(format!("cg-trace: the CSV report (--csv): {err}"));
                exit_code = 1;
            }
        }
    }
    if let Some(path) = &args.html {
        match html::write_to_path(&report, path, invoker) {
            Ok(()) if path != Path::new("-") && !args.quiet => {
                messages.push(format!(
                    "cg-trace: HTML report written to {}",
                    path.display()
                ));
            }
            Ok(()) => {}
            Err(err) => {
                messages.push(format!("cg-trace: the HTML report (--html): {err}"));
                exit_code = 1;
            }
        }
    }
    let function_outputs: [(&Option<PathBuf>, &str, WriteFn); 4] = [
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
    for (path, what, write) in function_outputs {
        if let Some(path) = path {
            match write(&report, path, invoker) {
                Ok(()) if args.quiet => {}
                Ok(()) => messages.push(format!("cg-trace: {what} written to {}", path.display())),
                Err(err) => {
                    messages.push(format!("cg-trace: the {what}: {err}"));
                    exit_code = 1;
                }
            }
        }
    }
    let mut text = if args.quiet {
        String::new()
    } else {
        summary::render_with(
            &report,
            summary::SummaryOptions {
                threads: args.threads,
                group_by: args.group_by,
            },
        )
    };
    if let Some(repeat) = &report.repeat {
        if !args.quiet {
            let estimated = report.meta.measurement_quality.grade == "estimated";
            text.push_str(&report::repeat::render(repeat, estimated));
        }
        if repeat.noise_verdict.worrying() && !args.quiet {
            text.push_str(&format!(
                "cg-trace: warning: the runs are noisy ({}: the targets' energy varies by \
                 {:.1}% (CV) from run to run); quiet the machine, add --warmup or more --repeat \
                 runs\n",
                repeat.noise_verdict.name(),
                repeat.statistics.attributed_energy_j.cv_pct
            ));
        }
    }
    for message in messages {
        text.push_str(&message);
        text.push('\n');
    }
    for budget in &report.budgets {
        if let Some(line) = report::budget::message(budget) {
            text.push_str(&line);
            text.push('\n');
        }
    }
    crate::console::write_stderr(&text);
    if over_budget && exit_code == 0 {
        EXIT_BUDGET
    } else {
        exit_code
    }
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

/// Bad usage found after parsing: said on stderr; the exit code.
fn usage_error(message: &str) -> i32 {
    eprintln!("cg-trace: {message}");
    EXIT_USAGE
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
        (
            run.group_by != crate::export::summary::GroupBy::None,
            "--group-by",
        ),
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

type WriteFn = fn(&report::Report, &Path, &Invoker) -> Result<(), OutputError>;
