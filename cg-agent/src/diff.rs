//! `cg-trace diff BASE.json NEW.json`, the subcommand: reads the two reports
//! ([`crate::report::read`]), compares them ([`crate::compare`]), and writes the comparison
//! through the renderer the format names: text, Markdown and JSON from
//! [`crate::compare::render`], the page from [`crate::export::html`]. `cg-trace compare`
//! ends here too ([`emit`]). The data flows one way: reading, then the pure comparison,
//! then the renderers; only this module knows them all.

use std::path::{Path, PathBuf};

use crate::{
    cli::{DiffArgs, DiffFormat, OutputArgs},
    compare::{Comparison, EXIT_BAD_INPUT, EXIT_REGRESSION, check_max_increase, compare, render},
    privileges::Invoker,
    report::read::load,
};

/// `cg-trace diff`: returns the exit status (0, [`EXIT_REGRESSION`], [`EXIT_BAD_INPUT`]).
pub fn main(args: &DiffArgs, invoker: &Invoker) -> i32 {
    if let Err(message) = check_max_increase(args.gate.max_increase) {
        crate::console::write_line(format_args!("cg-trace diff: {message}"));
        return EXIT_BAD_INPUT;
    }
    let load_one = |path: &PathBuf| {
        load(path).map_err(|err| {
            crate::console::write_line(format_args!(
                "cg-trace diff: {}",
                crate::printable::printable(&err.to_string())
            ));
        })
    };
    let (Ok(base), Ok(new)) = (load_one(&args.base), load_one(&args.new)) else {
        return EXIT_BAD_INPUT;
    };
    let (base_name, new_name) = (
        args.base.display().to_string(),
        args.new.display().to_string(),
    );
    let comparison = compare(
        (&base_name, &base),
        (&new_name, &new),
        args.gate.max_increase,
        &args.gate.gate,
    );
    emit("cg-trace diff", &comparison, &args.output, invoker)
}

/// Prints a comparison's warnings, writes it in the format asked for (to `-o FILE`, or
/// standard output), says the regression if there is one; returns the exit status. `who`
/// names the subcommand in messages.
pub fn emit(who: &str, comparison: &Comparison, output: &OutputArgs, invoker: &Invoker) -> i32 {
    for warning in &comparison.warnings {
        crate::console::write_line(format_args!(
            "{who}: warning: {}",
            crate::printable::printable(warning)
        ));
    }
    let text = match output.format {
        DiffFormat::Text => render::text(comparison),
        DiffFormat::Markdown => render::markdown(comparison),
        DiffFormat::Json => render::json(comparison),
        DiffFormat::Html => crate::export::html::diff::page(comparison),
    };
    let path = output.output.as_deref().unwrap_or(Path::new("-"));
    let written =
        crate::output::write_file_or_stdout(path, invoker, |out| out.write_all(text.as_bytes()));
    if let Err(err) = written {
        crate::console::write_line(format_args!("{who}: {err}"));
        return 1;
    }
    if comparison.regression {
        crate::console::write_line(format_args!(
            "{who}: {}",
            render::regression_line(comparison)
        ));
        EXIT_REGRESSION
    } else {
        0
    }
}
