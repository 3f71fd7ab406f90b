//! `cg-trace compare -n N [--prepare CMD] 'CMD_A' 'CMD_B'`: two commands measured head to
//! head. The runs alternate (A B A B ...) in one `--repeat` session, so that a machine whose
//! load drifts weighs on both alike; each command's runs become a `--repeat` report, and the
//! two reports go through `diff` (A as the base, B as the new), table, test and gate alike.
//! A subcommand, like [`crate::diff`]: it stands above the comparison it runs.

use crate::{
    cli::{CompareArgs, RunArgs},
    compare::{self, EXIT_BAD_INPUT, LoadError, ReportView},
    privileges::Invoker,
    report::{self, Report, repeat},
    run_config::run_config,
    session,
};

const WHO: &str = "cg-trace compare";

/// A shell command line as the argv cg-trace runs.
fn shell(command: &str) -> Vec<String> {
    vec!["sh".into(), "-c".into(), command.into()]
}

/// How a side is named in the outputs: its letter and its command (bounded, on one line).
fn side_name(letter: char, command: &str) -> String {
    format!("{letter}: {}", crate::printable::fit(command, 80))
}

/// `cg-trace compare`: returns the exit status (0, 3 on a regression, 2 on bad usage, the
/// failing command's status when a run fails).
pub fn main(args: &CompareArgs, mut run: RunArgs, invoker: &Invoker) -> i32 {
    if let Err(message) = compare::check_max_increase(args.gate.max_increase) {
        crate::console::write_line(format_args!("{WHO}: {message}"));
        return EXIT_BAD_INPUT;
    }
    if let Some(path) = args
        .output
        .output
        .as_deref()
        .filter(|p| p.as_os_str() != "-")
        && let Err(err) = crate::output::check(path, invoker)
    {
        crate::console::write_line(format_args!("{WHO}: -o: {err}"));
        return EXIT_BAD_INPUT;
    }
    let commands = [&args.command_a, &args.command_b];
    if let Some(empty) = commands.iter().position(|c| c.trim().is_empty()) {
        crate::console::write_line(format_args!(
            "{WHO}: command {} is empty: give two shell commands, `cg-trace compare 'CMD_A' \
             'CMD_B'`",
            ["A", "B"][empty]
        ));
        return EXIT_BAD_INPUT;
    }
    run.command = shell(&args.command_a);
    let config = match run_config(&run, invoker) {
        Ok(config) => config,
        Err(message) => {
            crate::console::write_line(format_args!("{WHO}: {message}"));
            return EXIT_BAD_INPUT;
        }
    };
    let plan = session::RepeatPlan {
        runs: args.runs,
        warmup: args.warmup,
        cooldown: std::time::Duration::from_secs_f64(args.cooldown),
        commands: commands.iter().map(|c| shell(c)).collect(),
        prepare: args.prepare.as_deref().map(shell),
    };
    let outcome = match session::run_repeat(config, plan) {
        Ok(outcome) => outcome,
        Err(err) => {
            crate::console::write_line(format_args!("{WHO}: {err}"));
            return err.exit_code();
        }
    };
    if outcome.exit_code != 0 {
        crate::console::write_line(format_args!(
            "{WHO}: the set ended early ({}): no comparison",
            outcome.stopped_early.as_deref().unwrap_or("a run failed")
        ));
        return outcome.exit_code;
    }
    let mut sides = [Vec::new(), Vec::new()];
    for (recording, command) in outcome.runs.iter().zip(&outcome.commands) {
        sides[*command].push(report::build(recording));
    }
    let [base, new] = sides.map(|reports| side_report(reports, args));
    let (Some(base), Some(new)) = (base, new) else {
        crate::console::write_line(format_args!(
            "{WHO}: a command has no measured run: no comparison"
        ));
        return 1;
    };
    let names = [
        side_name('A', &args.command_a),
        side_name('B', &args.command_b),
    ];
    let views = [(&names[0], &base), (&names[1], &new)].map(|(name, report)| view(name, report));
    let [Ok(base), Ok(new)] = views else {
        crate::console::write_line(format_args!(
            "{WHO}: the runs' reports could not be read back (a bug)"
        ));
        return 1;
    };
    let comparison = compare::compare(
        (&names[0], &base),
        (&names[1], &new),
        args.gate.max_increase,
        &args.gate.gate,
    );
    crate::diff::emit(WHO, &comparison, &args.output, invoker)
}

/// One command's runs as a `--repeat` report.
fn side_report(reports: Vec<Report>, args: &CompareArgs) -> Option<Report> {
    repeat::combine(
        reports,
        repeat::SetInfo {
            runs_requested_count: args.runs,
            warmup_runs_count: args.warmup,
            cooldown_s: args.cooldown,
            stopped_early: None,
        },
    )
}

/// A report as `diff` reads it: written as JSON and read back, the very path a report file
/// takes.
fn view(name: &str, report: &Report) -> Result<ReportView, LoadError> {
    let bytes = serde_json::to_vec(report).map_err(|source| LoadError::Shape {
        path: name.to_string(),
        field: ".".into(),
        source,
    })?;
    compare::parse(name, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sides_are_named_by_letter_and_command_on_one_line() {
        assert_eq!(side_name('A', "./bench --fast"), "A: ./bench --fast");
        assert_eq!(side_name('B', "a\nb\x1b[2J"), "B: a\\nb\\x1b[2J");
        assert!(side_name('A', &"x".repeat(500)).chars().count() < 90);
        assert_eq!(shell("make -j2"), ["sh", "-c", "make -j2"]);
    }
}
