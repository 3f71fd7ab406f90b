//! `cg-trace diff`'s outputs: a text table for a terminal, a Markdown table for a
//! pull-request comment, JSON for programs. Every figure says its unit; the header says
//! whether each side's energy was measured or estimated, how significance was tested, and
//! what the gate judges (each row says whether it is gated or context).

use super::{Comparison, Row, RowKind};
use crate::printable::{markdown_cell, printable};

/// Groups and functions shown in the tables (largest changes first); JSON has every row.
pub const TABLE_ROWS_PER_KIND: usize = 20;

fn side(s: &super::SideInfo) -> String {
    let runs = if s.runs_count == 1 {
        "1 run".to_string()
    } else {
        format!("median of {} runs", s.runs_count)
    };
    format!("{} ({runs}, energy {})", printable(&s.path), s.provenance)
}

fn testing(c: &Comparison) -> String {
    if c.tested {
        let methods: Vec<&str> = {
            let mut m: Vec<&str> = c
                .rows
                .iter()
                .filter_map(|r| r.significance.as_ref().map(|t| t.method))
                .collect();
            m.sort();
            m.dedup();
            m
        };
        format!(
            "significance: Mann-Whitney U test on the per-run energies, two-sided, p < {} \
             ({})",
            c.alpha,
            methods.join("; ")
        )
    } else {
        "significance: not tested (both reports need --repeat runs); changes are single \
         figures"
            .to_string()
    }
}

/// What the gate judges, in words (every output says it).
pub fn gate(c: &Comparison) -> String {
    let what: Vec<String> = c.gates.iter().map(|g| g.describe()).collect();
    let what = what.join("; ");
    match c.max_increase_pct {
        Some(max) if c.tested => format!(
            "gate: a significant increase beyond {max} % of {what}; the other rows are \
             context, not gated"
        ),
        Some(max) => format!(
            "gate: an increase beyond {max} % of {what} (untested for significance); the other \
             rows are context, not gated"
        ),
        None => format!("gate: none (--max-increase PCT sets one, on {what})"),
    }
}

/// A row's part in the gate.
fn gated(r: &Row) -> &'static str {
    if r.gated { "gated" } else { "context" }
}

/// The rows a table shows: every total and domain row, the first groups and functions.
fn shown(c: &Comparison) -> (Vec<&Row>, Vec<(RowKind, usize)>) {
    let mut rows = Vec::new();
    let mut hidden = Vec::new();
    for kind in RowKind::ALL {
        let of_kind: Vec<&Row> = c.rows.iter().filter(|r| r.kind == kind).collect();
        let limit = match kind {
            RowKind::ProcessGroup | RowKind::Function => TABLE_ROWS_PER_KIND,
            _ => usize::MAX,
        };
        if of_kind.len() > limit {
            hidden.push((kind, of_kind.len() - limit));
        }
        rows.extend(of_kind.into_iter().take(limit));
    }
    (rows, hidden)
}

fn signed(v: f64, decimals: usize) -> String {
    format!("{v:+.decimals$}")
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "new".to_string(), |p| format!("{p:+.1} %"))
}

/// A row's energy change in percent: `new` when it had none before, `-` when neither had.
fn energy_pct(r: &Row) -> String {
    if r.base_energy_j == 0.0 && r.new_energy_j == 0.0 {
        "-".to_string()
    } else {
        pct(r.change_energy_pct)
    }
}

fn p_value(p: f64) -> String {
    if p < 0.001 {
        "< 0.001".to_string()
    } else {
        format!("= {p:.3}")
    }
}

fn name(r: &Row) -> String {
    let name = match r.kind {
        RowKind::Domain | RowKind::TargetDomain if r.top_level == Some(false) => {
            format!("{} (nested)", r.name)
        }
        _ => r.name.clone(),
    };
    printable(&name).into_owned()
}

fn verdict(r: &Row) -> String {
    let mut v = match &r.significance {
        Some(t) => format!("{} (p {})", t.verdict, p_value(t.p_value)),
        None => String::new(),
    };
    if r.regression {
        v = format!("REGRESSION {v}").trim_end().to_string();
    }
    v
}

fn cpu(r: &Row) -> [String; 3] {
    match (r.base_cpu_time_s, r.new_cpu_time_s) {
        (Some(b), Some(n)) => [
            format!("{b:.3}"),
            format!("{n:.3}"),
            if b == 0.0 && n == 0.0 {
                "-".to_string()
            } else {
                pct(r.change_cpu_time_pct)
            },
        ],
        _ => ["-".into(), "-".into(), "-".into()],
    }
}

/// The one line said when the gate fails.
pub fn regression_line(c: &Comparison) -> String {
    let rows: Vec<String> = c
        .rows
        .iter()
        .filter(|r| r.regression)
        .map(|r| {
            format!(
                "{} {} {:.3} J -> {:.3} J ({})",
                r.kind.label(),
                printable(&r.name),
                r.base_energy_j,
                r.new_energy_j,
                pct(r.change_energy_pct)
            )
        })
        .collect();
    format!(
        "energy regression beyond --max-increase {} %: {}",
        c.max_increase_pct.unwrap_or(0.0),
        rows.join("; ")
    )
}

/// A table for a terminal.
pub fn text(c: &Comparison) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "base: {}\nnew:  {}\n",
        side(&c.base),
        side(&c.new)
    ));
    out.push_str(&format!(
        "energy in joules (J), CPU time in seconds (s); {}\n{}\n",
        testing(c),
        gate(c)
    ));
    for w in &c.warnings {
        out.push_str(&format!("warning: {}\n", printable(w)));
    }
    let (rows, hidden) = shown(c);
    let header = [
        "KIND",
        "NAME",
        "BASE J",
        "NEW J",
        "CHANGE J",
        "CHANGE",
        "BASE CPU s",
        "NEW CPU s",
        "CPU CHANGE",
        "GATE",
        "VERDICT",
    ];
    let mut table: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for r in rows {
        let [bc, nc, cc] = cpu(r);
        let mut n = name(r);
        if n.chars().count() > 48 {
            n = n.chars().take(47).collect::<String>() + "…";
        }
        table.push(vec![
            r.kind.label().to_string(),
            n,
            format!("{:.3}", r.base_energy_j),
            format!("{:.3}", r.new_energy_j),
            signed(r.change_energy_j, 3),
            energy_pct(r),
            bc,
            nc,
            cc,
            gated(r).to_string(),
            verdict(r),
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            table
                .iter()
                .map(|row| row[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in &table {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            let pad = widths[i] - cell.chars().count();
            // Names and words left-aligned, figures right-aligned.
            if i < 2 || i >= header.len() - 2 {
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            } else {
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            }
            line.push_str("  ");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    for (kind, n) in hidden {
        out.push_str(&format!(
            "... {n} more {} rows (--format json has them all)\n",
            kind.label()
        ));
    }
    out.push_str(if c.regression {
        "result: REGRESSION\n"
    } else {
        "result: no regression\n"
    });
    out
}

/// Outside text (command lines, symbols, host names) for one Markdown table cell.
fn md(text: &str) -> String {
    markdown_cell(text, 120)
}

/// A Markdown table fit for a pull-request comment.
pub fn markdown(c: &Comparison) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "### cg-trace energy diff: {}\n\n",
        if c.regression {
            "**regression**"
        } else {
            "no regression"
        }
    ));
    out.push_str(&format!(
        "Base: {}  \nNew: {}  \n{}; {}.\n\n",
        md(&side(&c.base)),
        md(&side(&c.new)),
        md(&testing(c)),
        md(&gate(c))
    ));
    for w in &c.warnings {
        out.push_str(&format!("> **Warning:** {}\n\n", md(w)));
    }
    out.push_str(
        "| | Base (J) | New (J) | Change (J) | Change | CPU base (s) | CPU new (s) | CPU change | Gate | Verdict |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---|---|\n");
    let (rows, hidden) = shown(c);
    for r in rows {
        let [bc, nc, cc] = cpu(r);
        let what = format!("{} {}", r.kind.label(), md(&name(r)));
        let what = if r.gated || r.regression {
            format!("**{what}**")
        } else {
            what
        };
        out.push_str(&format!(
            "| {what} | {:.3} | {:.3} | {} | {} | {bc} | {nc} | {cc} | {} | {} |\n",
            r.base_energy_j,
            r.new_energy_j,
            signed(r.change_energy_j, 3),
            energy_pct(r),
            gated(r),
            md(&verdict(r)),
        ));
    }
    for (kind, n) in hidden {
        out.push_str(&format!("\n_{n} more {} rows not shown._\n", kind.label()));
    }
    out
}

/// The comparison as JSON (pretty, with a final newline).
pub fn json(c: &Comparison) -> String {
    let mut text = serde_json::to_string_pretty(c).unwrap_or_else(|err| {
        // Serializing plain structs of numbers and strings cannot fail; say so if it does.
        serde_json::json!({ "error": err.to_string() }).to_string()
    });
    text.push('\n');
    crate::printable::json_text(&text).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::{Gate, SideInfo, TestResult};

    fn side_info(path: &str, runs_count: usize) -> SideInfo {
        SideInfo {
            path: path.into(),
            run_id: "run".into(),
            schema_version: "1.6".into(),
            hostname: "host".into(),
            cpu_model: "cpu".into(),
            provenance: "measured",
            sources: vec!["rapl".into()],
            runs_count,
        }
    }

    /// A row of `kind` from `base_j` to `new_j` joules, gated, without CPU time or test.
    fn row(kind: RowKind, name: &str, base_j: f64, new_j: f64) -> Row {
        Row {
            kind,
            name: name.into(),
            top_level: None,
            gated: true,
            base_energy_j: base_j,
            new_energy_j: new_j,
            change_energy_j: new_j - base_j,
            change_energy_pct: (base_j != 0.0).then(|| (new_j - base_j) / base_j * 100.0),
            base_cpu_time_s: None,
            new_cpu_time_s: None,
            change_cpu_time_s: None,
            change_cpu_time_pct: None,
            significance: None,
            regression: false,
        }
    }

    fn comparison(rows: Vec<Row>) -> Comparison {
        Comparison {
            base: side_info("base.json", 1),
            new: side_info("new.json", 1),
            tested: false,
            alpha: 0.05,
            max_increase_pct: Some(5.0),
            gates: vec![Gate::Targets],
            warnings: Vec::new(),
            regression: rows.iter().any(|r| r.regression),
            rows,
        }
    }

    #[test]
    fn tables_show_every_total_and_the_first_groups_and_say_how_many_more() {
        let mut rows = vec![row(RowKind::Total, "energy", 10.0, 11.0)];
        for i in 0..TABLE_ROWS_PER_KIND + 3 {
            rows.push(row(RowKind::ProcessGroup, &format!("p{i}"), 1.0, 2.0));
        }
        let c = comparison(rows);
        let (shown_rows, hidden) = shown(&c);
        assert_eq!(shown_rows.len(), 1 + TABLE_ROWS_PER_KIND);
        assert_eq!(hidden, vec![(RowKind::ProcessGroup, 3)]);
        assert!(text(&c).contains("... 3 more group rows (--format json has them all)\n"));
        assert!(markdown(&c).contains("_3 more group rows not shown._"));
    }

    #[test]
    fn changes_say_new_and_nothing_apart_from_figures() {
        // Base 0 -> new 2: new; 0 -> 0: nothing to compare; 10 -> 11: +10 %.
        assert_eq!(energy_pct(&row(RowKind::Function, "f", 0.0, 2.0)), "new");
        assert_eq!(energy_pct(&row(RowKind::Function, "f", 0.0, 0.0)), "-");
        assert_eq!(
            energy_pct(&row(RowKind::Function, "f", 10.0, 11.0)),
            "+10.0 %"
        );
        let mut r = row(RowKind::Targets, "energy", 1.0, 1.0);
        assert_eq!(cpu(&r), ["-", "-", "-"]);
        (r.base_cpu_time_s, r.new_cpu_time_s) = (Some(0.0), Some(0.0));
        assert_eq!(cpu(&r), ["0.000", "0.000", "-"]);
        (r.new_cpu_time_s, r.change_cpu_time_pct) = (Some(1.5), Some(-25.0));
        assert_eq!(cpu(&r)[2], "-25.0 %");
    }

    #[test]
    fn verdicts_carry_the_p_value_and_shout_a_regression() {
        let mut r = row(RowKind::Targets, "energy", 10.0, 12.0);
        assert_eq!(verdict(&r), "");
        r.regression = true;
        assert_eq!(verdict(&r), "REGRESSION");
        r.significance = Some(TestResult {
            test: "mann-whitney-u",
            method: "exact",
            u: 25.0,
            p_value: 0.0004,
            verdict: "significant increase",
        });
        assert_eq!(verdict(&r), "REGRESSION significant increase (p < 0.001)");
        r.significance.as_mut().unwrap().p_value = 0.03;
        r.regression = false;
        assert_eq!(verdict(&r), "significant increase (p = 0.030)");
    }

    #[test]
    fn names_say_nested_domains_and_escape_control_characters() {
        let mut r = row(RowKind::Domain, "core-0", 1.0, 1.0);
        r.top_level = Some(false);
        assert_eq!(name(&r), "core-0 (nested)");
        r.top_level = Some(true);
        assert_eq!(name(&r), "core-0");
        let evil = row(RowKind::ProcessGroup, "a\x1b[2Jb", 1.0, 1.0);
        assert_eq!(name(&evil), "a\\x1b[2Jb");
    }

    #[test]
    fn the_text_table_aligns_columns_and_cuts_long_names() {
        let long = "x".repeat(60);
        let c = comparison(vec![
            row(RowKind::Targets, "energy", 10.0, 11.0),
            row(RowKind::ProcessGroup, &long, 1.0, 100.0),
        ]);
        let out = text(&c);
        let lines: Vec<&str> = out.lines().collect();
        let header = lines.iter().position(|l| l.starts_with("KIND")).unwrap();
        // Figures are right-aligned: each ends where its header ends, on every line.
        let chars = |line: &str| line.chars().collect::<Vec<char>>();
        let head = chars(lines[header]);
        let end = lines[header].find("NEW J").unwrap() + "NEW J".len();
        for line in &lines[header + 1..header + 3] {
            let line = chars(line);
            assert!(
                line[end - 1].is_ascii_digit() && line[end] == ' ',
                "{line:?}"
            );
        }
        assert_eq!(head[end - 1], 'J');
        assert!(lines[header + 2].contains(&format!("{}…", "x".repeat(47))));
        assert!(!out.contains(&"x".repeat(48)));
        assert!(out.ends_with("result: no regression\n"));
    }

    #[test]
    fn the_gate_is_said_in_words_for_each_case() {
        let mut c = comparison(vec![row(RowKind::Targets, "energy", 1.0, 1.0)]);
        assert!(gate(&c).starts_with("gate: an increase beyond 5 % of the targets' energy"));
        assert!(gate(&c).contains("(untested for significance)"));
        c.tested = true;
        assert!(gate(&c).starts_with("gate: a significant increase beyond 5 %"));
        c.max_increase_pct = None;
        assert!(gate(&c).starts_with("gate: none (--max-increase PCT sets one, on the targets'"));
    }

    #[test]
    fn the_regression_line_names_only_the_failing_rows() {
        let mut failing = row(RowKind::ProcessGroup, "app", 2.0, 3.0);
        failing.regression = true;
        let c = comparison(vec![row(RowKind::Targets, "energy", 10.0, 10.5), failing]);
        assert_eq!(
            regression_line(&c),
            "energy regression beyond --max-increase 5 %: group app 2.000 J -> 3.000 J (+50.0 %)"
        );
        assert!(text(&c).ends_with("result: REGRESSION\n"));
        assert!(markdown(&c).starts_with("### cg-trace energy diff: **regression**\n"));
    }

    #[test]
    fn json_escapes_what_a_terminal_would_obey() {
        let c = comparison(vec![row(RowKind::Function, "f\u{7f}\u{202e}", 1.0, 1.0)]);
        let out = json(&c);
        assert!(
            !out.contains('\u{7f}') && !out.contains('\u{202e}'),
            "{out}"
        );
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["rows"][0]["name"], "f\u{7f}\u{202e}");
    }
}
