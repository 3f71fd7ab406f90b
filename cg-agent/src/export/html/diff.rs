//! The page of a comparison (`cg-trace diff ... --format html`, `cg-trace compare`): the
//! sides, the warnings, and a table per kind of row, on the report page's frame.

use std::fmt::Write as _;

use serde_json::json;

use super::{bar, esc, esc_short, fig, page as frame, signed};
use crate::{
    compare::{Comparison, Row, RowKind, render},
    printable::fit,
};

/// The page of a comparison.
pub fn page(c: &Comparison) -> String {
    let mut body = String::new();
    heading(&mut body, c);
    sides(&mut body, c);
    notes(&mut body, c);
    kind_tables(&mut body, c);
    frame(
        &format!(
            "cg-trace diff: {} → {}",
            fit(&c.base.path, 60),
            fit(&c.new.path, 60)
        ),
        &body,
        &json!({}),
    )
}

/// The title and the gate's outcome.
fn heading(body: &mut String, c: &Comparison) {
    let _ = writeln!(
        body,
        "<h1>Energy diff: {} → {}</h1>\n<p>{}</p>",
        esc_short(&c.base.path),
        esc_short(&c.new.path),
        if c.regression {
            format!(
                "<span class=\"badge bad\">regression</span> {}",
                esc(&render::regression_line(c))
            )
        } else if let Some(max) = c.max_increase_pct {
            format!(
                "<span class=\"badge ok\">pass</span> no gated figure rose by more than {}",
                fig(Some(max), "%")
            )
        } else {
            "No gate (<code>--max-increase</code>) given.".into()
        }
    );
}

/// Each side's report, run, machine, provenance and runs.
fn sides(body: &mut String, c: &Comparison) {
    body.push_str(
        "<table>\n<tr><th></th><th>report</th><th>run</th><th>machine</th><th>energy</th>\
         <th>sources</th><th class=\"n\">runs</th></tr>\n",
    );
    for (label, side) in [("base", &c.base), ("new", &c.new)] {
        let _ = writeln!(
            body,
            "<tr><td>{label}</td><td class=\"cmd\">{}</td><td>{}</td><td>{} / {}</td>\
             <td><span class=\"badge {p}\">{p}</span></td><td>{}</td><td class=\"n\">{}</td></tr>",
            esc_short(&side.path),
            esc(&side.run_id),
            esc(&side.hostname),
            esc(&side.cpu_model),
            esc(&side.sources.join(", ")),
            side.runs_count,
            p = side.provenance,
        );
    }
    body.push_str("</table>\n");
}

/// The warnings, how the rows were tested, and what the gate judges.
fn notes(body: &mut String, c: &Comparison) {
    for w in &c.warnings {
        let _ = writeln!(
            body,
            "<p><span class=\"badge bad\">warning</span> {}</p>",
            esc(w)
        );
    }
    let _ = writeln!(
        body,
        "<p class=\"note\">Energies are medians over the runs when a side has several. {}</p>",
        if c.tested {
            format!(
                "Both sides have --repeat runs: each row's per-run energies are compared with a \
                 Mann-Whitney U test (significant below p = {}).",
                c.alpha
            )
        } else {
            "Not both sides have --repeat runs: no significance test.".into()
        }
    );
    let _ = writeln!(body, "<p class=\"note\">{}</p>", esc(&render::gate(c)));
}

/// A table per kind of row (targets, total, domains, groups, functions).
fn kind_tables(body: &mut String, c: &Comparison) {
    let max_pct = c
        .rows
        .iter()
        .filter_map(|r| r.change_energy_pct)
        .filter(|p| p.is_finite())
        .map(f64::abs)
        .fold(0.0, f64::max);
    for kind in RowKind::ALL {
        let rows: Vec<_> = c.rows.iter().filter(|r| r.kind == kind).collect();
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(
            body,
            "<h2>{}{}</h2>\n<table>\n<tr><th>name</th><th class=\"n\">base energy</th>\
             <th class=\"n\">new energy</th><th class=\"n\">change (J)</th>\
             <th class=\"n\">change (%)</th>\
             <th></th><th class=\"n\">base CPU</th><th class=\"n\">new CPU</th>\
             <th class=\"n\">p</th><th>verdict</th></tr>",
            match kind {
                RowKind::Targets => "Targets (the traced command and its descendants)",
                RowKind::TargetDomain => "Targets per domain",
                RowKind::Total => "Total (the whole machine)",
                RowKind::Domain => "Per domain (the whole machine)",
                RowKind::ProcessGroup => "Per process group",
                RowKind::Function => "Per function",
            },
            if rows.iter().any(|r| r.gated) {
                " (gated)"
            } else {
                " (context, not gated)"
            }
        );
        for r in rows {
            row(body, r, max_pct);
        }
        body.push_str("</table>\n");
    }
}

/// One row: both energies, the change with its bar (scaled to the largest change of the
/// page, `max_pct`), both CPU times, the test's p and the verdict.
fn row(body: &mut String, r: &Row, max_pct: f64) {
    let pct = r.change_energy_pct;
    let (class, fraction) = match pct {
        Some(p) if max_pct > 0.0 => (if p > 0.0 { "up" } else { "down" }, p.abs() / max_pct),
        _ => ("", 0.0),
    };
    let verdict = match (&r.significance, r.regression) {
        (_, true) => "<span class=\"badge bad\">regression</span>".to_string(),
        (Some(t), false) => esc(t.verdict),
        (None, false) => String::new(),
    };
    let _ = writeln!(
        body,
        "<tr><td class=\"cmd\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
         <td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td>\
         <td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
        esc_short(&r.name),
        fig(Some(r.base_energy_j), "J"),
        fig(Some(r.new_energy_j), "J"),
        signed(r.change_energy_j, "J"),
        pct.map(|p| signed(p, "%")).unwrap_or_else(|| "new".into()),
        bar(fraction, class),
        fig(r.base_cpu_time_s, "s"),
        fig(r.new_cpu_time_s, "s"),
        r.significance
            .as_ref()
            .map(|t| fig(Some(t.p_value), ""))
            .unwrap_or_else(|| "—".into()),
        verdict,
    );
}
