//! From parsed arguments to a finished run: picks the mode, runs the session, builds the
//! report, prints the summary and writes the outputs; returns the process exit code.

use std::{path::Path, time::Duration};

use crate::{
    cli::{Cli, FunctionArgs, RunArgs},
    export::{flamegraph, folded, json, summary},
    functions::{FunctionOptions, spec::FuncSpec},
    report,
    session::{self, IdleWatts, Mode, RunConfig},
    sources::SourceOptions,
};

/// Exit code for bad usage (as clap uses).
pub const EXIT_USAGE: i32 = 2;

/// Runs the command line; returns the exit code.
pub fn main_with(cli: Cli) -> i32 {
    let args = cli.run;
    if let Some(samples) = args.functions.bench_symbolize {
        return match crate::functions::symbolize::bench(samples) {
            Ok(line) => {
                println!("{line}");
                0
            }
            Err(err) => {
                eprintln!("cg-trace: --bench-symbolize: {err}");
                1
            }
        };
    }
    let config = match run_config(&args) {
        Ok(config) => config,
        Err(message) => {
            eprintln!("cg-trace: {message}");
            return EXIT_USAGE;
        }
    };
    let outcome = match session::run(config) {
        Ok(outcome) => outcome,
        Err(err) => {
            eprintln!("cg-trace: {err}");
            return err.exit_code();
        }
    };
    let report = report::build(&outcome.recording);
    if !args.quiet {
        eprint!("{}", summary::render(&report));
    }
    if let Some(path) = &args.output {
        match json::write_to_path(&report, path) {
            Ok(()) if path != Path::new("-") => {
                eprintln!("cg-trace: report written to {}", path.display());
            }
            Ok(()) => {}
            Err(err) => {
                eprintln!("cg-trace: writing the report to {}: {err}", path.display());
                return 1;
            }
        }
    }
    let function_outputs: [(&Option<std::path::PathBuf>, &str, WriteFn); 2] = [
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
    ];
    for (path, what, write) in function_outputs {
        if let Some(path) = path {
            match write(&report, path) {
                Ok(()) => eprintln!("cg-trace: {what} written to {}", path.display()),
                Err(err) => {
                    eprintln!("cg-trace: writing the {what} to {}: {err}", path.display());
                    return 1;
                }
            }
        }
    }
    outcome.exit_code
}

/// Checks the arguments that clap cannot check alone and builds the run's configuration.
pub fn run_config(args: &RunArgs) -> Result<RunConfig, String> {
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
        check_output_path(path)?;
    }
    Ok(RunConfig {
        mode,
        interval: Duration::from_millis(args.interval),
        duration: args.duration.map(Duration::from_secs_f64),
        sources: SourceOptions {
            choice: args.source,
            powercap_root: args.powercap_root.clone(),
            model_watts: args.model_watts.map(|m| (m.idle_w, m.max_w)),
        },
        idle_watts: args.idle_watts.clone().unwrap_or(IdleWatts::Estimate),
        calibration: Duration::from_millis(args.calibrate_ms),
        timeseries: args.timeseries,
        proc_root: "/proc".into(),
        noop_probes: args.bench_noop_probes,
        functions: function_options(&args.functions)?,
    })
}

type WriteFn = fn(&report::Report, &Path) -> std::io::Result<()>;

/// `--func`, `--profile` and their outputs.
fn function_options(args: &FunctionArgs) -> Result<FunctionOptions, String> {
    let specs = args
        .func
        .iter()
        .map(|text| FuncSpec::parse(text))
        .collect::<Result<Vec<_>, _>>()?;
    for (path, what) in [
        (&args.folded, "--folded"),
        (&args.flamegraph, "--flamegraph"),
    ] {
        if let Some(path) = path {
            check_parent(path, what)?;
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
    Ok(FunctionOptions {
        specs,
        func_limit: args.func_limit,
        profile: args.profile || args.folded.is_some() || args.flamegraph.is_some(),
        sample_hz: args.sample_hz,
        top: args.top_functions,
        bench_empty_probes: args.bench_empty_func,
    })
}

/// The directory an output goes to must exist before we measure.
fn check_parent(path: &Path, what: &str) -> Result<(), String> {
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if parent.is_dir() {
        Ok(())
    } else {
        Err(format!(
            "{what} {}: directory {} does not exist",
            path.display(),
            parent.display()
        ))
    }
}

/// The report format follows the file name; the directory must exist before we measure.
fn check_output_path(path: &Path) -> Result<(), String> {
    if path == Path::new("-") {
        return Ok(());
    }
    if path.extension().and_then(|e| e.to_str()) != Some("json") {
        return Err(format!(
            "-o {}: unknown report format; name the file *.json, or use `-o -` for JSON on stdout",
            path.display()
        ));
    }
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(format!(
            "-o {}: directory {} does not exist",
            path.display(),
            parent.display()
        ));
    }
    Ok(())
}
