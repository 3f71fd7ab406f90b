//! Draws the view from the state alone: a header (power and energy per domain, measured or
//! estimated, sources, idle and other power, lost events), a power chart, the process table,
//! a function pane when the selected process has function figures, and a footer of keys.
//! Every column and chart line comes from the report's domains, so new domain kinds (GPUs,
//! meters) show up without changes here.

use ratatui::{
    buffer::Buffer,
    layout::{Constraint, Layout, Rect},
    style::{Color, Modifier, Style, Stylize},
    symbols::Marker,
    text::{Line, Span},
    widgets::{
        Axis, Block, Borders, Cell, Chart, Clear, Dataset, GraphType, Paragraph, Row, Sparkline,
        StatefulWidget, Table, TableState, Widget,
    },
};

use super::state::{App, SIGNALS, SignalMenu, SortKey};
use crate::{
    report::{
        functions::{FunctionFigures, FunctionTotal},
        live::{HISTORY_S, LiveProcess, LiveReport},
    },
    sources::Provenance,
};

/// Width from which the table shows PPID, CPU time and one power column per top-level domain.
const WIDE: u16 = 120;
const SERIES_COLORS: [Color; 6] = [
    Color::Cyan,
    Color::Yellow,
    Color::Magenta,
    Color::Blue,
    Color::Red,
    Color::LightCyan,
];

impl Widget for &App {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let header = header_lines(self, area.width);
        let [header_area, body, footer_area] = Layout::vertical([
            Constraint::Length(header.len() as u16),
            Constraint::Fill(1),
            Constraint::Length(1),
        ])
        .areas(area);
        Paragraph::new(header).render(header_area, buf);
        render_footer(self, footer_area, buf);

        let Some(report) = &self.report else {
            Paragraph::new("waiting for the first interval…")
                .dim()
                .render(body, buf);
            return;
        };
        let chart_height = if body.height >= 16 {
            (body.height * 3 / 10).clamp(6, 16)
        } else if body.height >= 10 {
            4
        } else {
            0
        };
        let [chart_area, table_area] =
            Layout::vertical([Constraint::Length(chart_height), Constraint::Fill(1)]).areas(body);
        if chart_height > 0 {
            render_chart(report, chart_area, buf);
        }
        // `d`: the selected process's detail pane under the table.
        let table_area = if self.details && table_area.height >= 12 {
            let [rest, details] =
                Layout::vertical([Constraint::Fill(1), Constraint::Length(DETAILS_HEIGHT)])
                    .areas(table_area);
            render_details(self, report, details, buf);
            rest
        } else {
            table_area
        };
        let functions = self.selected_functions();
        let totals = self.shown_function_totals();
        let rows = if totals.is_empty() {
            functions.len()
        } else {
            totals.len()
        };
        if rows > 0 && table_area.height >= 12 {
            let pane = (rows as u16 + 2).min(table_area.height * 2 / 5);
            let [processes, functions_area] =
                Layout::vertical([Constraint::Fill(1), Constraint::Length(pane)]).areas(table_area);
            render_table(self, report, processes, buf);
            if totals.is_empty() {
                render_functions(self, report, functions_area, buf);
            } else {
                render_function_totals(totals, report, functions_area, buf);
            }
        } else {
            render_table(self, report, table_area, buf);
        }
        if self.help {
            render_help(area, buf);
        }
        if let Some(menu) = &self.signal_menu {
            render_signal_menu(menu, area, buf);
        }
    }
}

/// Watts with three significant figures or so.
pub fn watts(w: f64) -> String {
    let w = w + 0.0; // no "-0.00"
    if w.abs() >= 1000.0 {
        format!("{w:.0}")
    } else if w.abs() >= 100.0 {
        format!("{w:.1}")
    } else {
        format!("{w:.2}")
    }
}

/// Joules, with more digits while they are small.
pub fn joules(j: f64) -> String {
    let j = j + 0.0;
    if j.abs() >= 100_000.0 {
        format!("{j:.0}")
    } else if j.abs() >= 100.0 {
        format!("{j:.1}")
    } else {
        format!("{j:.2}")
    }
}

/// `m:ss`, or `h:mm:ss` past an hour.
pub fn clock(seconds: f64) -> String {
    let s = seconds.max(0.0) as u64;
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

fn provenance_span(p: Provenance) -> Span<'static> {
    match p {
        Provenance::Measured => Span::styled("measured", Style::new().green()),
        Provenance::Estimated => Span::styled("ESTIMATED", Style::new().yellow().bold()),
    }
}

/// `left` and `right` on one line, `right` flush with the edge when there is room.
fn spread(mut left: Vec<Span<'static>>, right: Vec<Span<'static>>, width: u16) -> Line<'static> {
    let used: usize = left.iter().chain(&right).map(Span::width).sum();
    left.push(Span::raw(
        " ".repeat((width as usize).saturating_sub(used).max(1)),
    ));
    left.extend(right);
    Line::from(left)
}

fn header_lines(app: &App, width: u16) -> Vec<Line<'static>> {
    let Some(r) = &app.report else {
        return vec![Line::from(vec!["cg-trace".bold(), "  starting…".dim()])];
    };
    let mut lines = vec![title_line(app, r, width)];
    lines.extend(total_lines(r, width));
    lines.extend(domain_lines(r, width));
    lines.push(sources_line(app, r));
    lines.extend(cpu_bars(&r.cpu_busy_pct, width));
    lines
}

/// What is traced on the left; the clock, interval, refresh and pause on the right.
fn title_line(app: &App, r: &LiveReport, width: u16) -> Line<'static> {
    let what = match r.mode {
        "system" => format!(" top · {}", r.target),
        "wrap" => format!(" · `{}`", r.target),
        _ => format!(" · {}", r.target),
    };
    let mut right = vec![Span::raw(format!(
        "{} · interval {} ms · refresh {}",
        clock(r.elapsed_s),
        r.interval_ms,
        refresh_text(app.config.refresh.as_millis() as u64)
    ))];
    if app.paused {
        right.push(Span::raw(" "));
        right.push(" PAUSED ".black().on_yellow().bold());
    }
    // A long command line gives way to the clock.
    let room = (width as usize)
        .saturating_sub(right.iter().map(Span::width).sum::<usize>() + "cg-trace".len() + 1)
        .max(12);
    spread(
        vec!["cg-trace".bold(), Span::raw(shorten(&what, room))],
        right,
        width,
    )
}

/// Total power and energy, and their split into targets, other and idle: on one line when
/// it fits, else on two.
fn total_lines(r: &LiveReport, width: u16) -> Vec<Line<'static>> {
    let t = &r.totals;
    let busy_label = if r.mode == "system" {
        "processes"
    } else {
        "targets"
    };
    let mut total = vec![
        "power ".into(),
        format!("{} W", watts(t.power_w)).bold(),
        "  energy ".into(),
        format!("{} J", joules(t.energy_j)).bold(),
        " ".into(),
        provenance_span(if t.estimated {
            Provenance::Estimated
        } else {
            Provenance::Measured
        }),
    ];
    let split = format!(
        "{busy_label} {} W · other {} W · idle {} W",
        watts(t.targets_power_w),
        watts(t.other_power_w),
        watts(t.idle_power_w)
    );
    let used: usize = total.iter().map(Span::width).sum();
    if used + 3 + split.chars().count() <= width as usize {
        total.push(" │ ".dim());
        total.push(split.into());
        vec![Line::from(total)]
    } else {
        vec![Line::from(total), Line::from(split)]
    }
}

/// One chunk per domain (nested ones marked), wrapped over as many lines as they need.
fn domain_lines(r: &LiveReport, width: u16) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    let mut line: Vec<Span<'static>> = Vec::new();
    let mut used = 0usize;
    for d in &r.domains {
        let text = format!(
            "{}{} {} W {} J ",
            if d.top_level { "" } else { "↳" },
            d.name,
            watts(d.power_w),
            joules(d.energy_j),
        );
        // The baselines only where there is room for them.
        let idle = if width >= WIDE || r.domains.len() == 1 {
            format!(" idle {} W ({})", watts(d.idle_baseline_w), d.idle_method)
        } else {
            String::new()
        };
        let tag = provenance_span(d.provenance);
        let chunk = text.chars().count() + tag.width() + idle.chars().count();
        let sep = if line.is_empty() { 0 } else { 3 };
        if !line.is_empty() && used + sep + chunk > width as usize {
            lines.push(Line::from(std::mem::take(&mut line)));
            used = 0;
        }
        if !line.is_empty() {
            line.push(" │ ".dim());
            used += 3;
        }
        line.push(Span::styled(text, Style::new().bold()));
        line.push(tag);
        line.push(Span::styled(idle, Style::new().dim()));
        used += chunk;
    }
    if !line.is_empty() {
        lines.push(Line::from(line));
    }
    lines
}

/// The sources, where the command's output goes, and lost events (in red).
fn sources_line(app: &App, r: &LiveReport) -> Line<'static> {
    let sources: Vec<String> = r
        .sources
        .iter()
        .map(|s| format!("{} ({})", s.name, s.provenance.as_str()))
        .collect();
    let mut last = vec![Span::raw(format!("sources: {}", sources.join(", ")))];
    if let Some(path) = &app.config.command_output {
        last.push(Span::raw(" · command output → "));
        last.push(Span::raw(path.display().to_string()).underlined());
    }
    if r.lost_events.total_count > 0 {
        last.push(Span::raw(" · "));
        last.push(
            format!("lost events: {}", r.lost_events.total_count)
                .red()
                .bold(),
        );
    }
    Line::from(last)
}

/// Most lines the per-CPU bars take; more CPUs than fit get one block character each.
const CPU_BAR_LINES: usize = 4;
/// Narrowest bar worth drawing: `NN[||||   99.9%]`.
const CPU_BAR_MIN: usize = 20;
/// Widest bar (a machine with few CPUs on a wide terminal).
const CPU_BAR_MAX: usize = 40;

/// Per-CPU busy bars as htop draws them (`0[|||||      45.2%]`, several to a line), or, with
/// more CPUs than fit on a few lines, a block character per CPU (`▁` idle to `█` busy).
fn cpu_bars(busy_pct: &[f64], width: u16) -> Vec<Line<'static>> {
    let width = width as usize;
    if busy_pct.is_empty() || width < CPU_BAR_MIN {
        return Vec::new();
    }
    let style = |pct: f64| {
        if pct >= 90.0 {
            Style::new().red()
        } else if pct >= 50.0 {
            Style::new().yellow()
        } else {
            Style::new().green()
        }
    };
    let label_w = (busy_pct.len() - 1).to_string().len();
    let per_line = (width / (CPU_BAR_MIN + 4)).clamp(1, 8);
    if busy_pct.len().div_ceil(per_line) <= CPU_BAR_LINES {
        // Columns of bars, CPU 0 first, filled line by line.
        let bar_w = (width / per_line.min(busy_pct.len())).min(CPU_BAR_MAX);
        return busy_pct
            .chunks(per_line)
            .enumerate()
            .map(|(row, chunk)| {
                let mut spans = Vec::new();
                for (k, &pct) in chunk.iter().enumerate() {
                    let cpu = row * per_line + k;
                    let pct = if pct.is_finite() {
                        pct.clamp(0.0, 100.0)
                    } else {
                        0.0
                    };
                    let text = format!("{pct:.1}%");
                    // label, [, bars and the figure, ], a space between bars
                    let inner = bar_w.saturating_sub(label_w + 3);
                    let filled = ((pct / 100.0) * inner as f64).round() as usize;
                    let filled = filled.min(inner.saturating_sub(text.len()));
                    let gap = inner.saturating_sub(filled + text.len());
                    spans.push(Span::raw(format!("{cpu:>label_w$}[")).bold());
                    spans.push(Span::styled("|".repeat(filled), style(pct)));
                    spans.push(Span::raw(" ".repeat(gap)));
                    spans.push(Span::raw(text).dim());
                    spans.push(Span::raw("] "));
                }
                Line::from(spans)
            })
            .collect();
    }
    const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let room = width.saturating_sub(6).max(1);
    busy_pct
        .chunks(room)
        .take(2)
        .enumerate()
        .map(|(row, chunk)| {
            let mut spans = vec![Span::raw(if row == 0 { "cpus  " } else { "      " }).bold()];
            for &pct in chunk {
                let pct = if pct.is_finite() {
                    pct.clamp(0.0, 100.0)
                } else {
                    0.0
                };
                let level = ((pct / 100.0) * 8.0) as usize;
                spans.push(Span::styled(BLOCKS[level.min(7)].to_string(), style(pct)));
            }
            Line::from(spans)
        })
        .collect()
}

/// `text` cut to `max` characters, with an ellipsis when cut.
fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

fn refresh_text(ms: u64) -> String {
    if ms >= 1000 && ms.is_multiple_of(100) {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{ms} ms")
    }
}

fn render_chart(r: &LiveReport, area: Rect, buf: &mut Buffer) {
    let end = r.elapsed_s;
    let start = (end - HISTORY_S).max(0.0);
    let end = end.max(start + 10.0);
    let top = r
        .history
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    let y_max = if top > 0.0 { top * 1.15 } else { 1.0 };
    let color_of = |i: usize, name: &str| {
        if name == "targets" {
            Color::Green
        } else {
            SERIES_COLORS[i % SERIES_COLORS.len()]
        }
    };
    let mut title = vec![Span::raw(format!(
        " power [W], last {} min: ",
        (HISTORY_S / 60.0).round()
    ))];
    for (i, series) in r.history.iter().enumerate() {
        title.push(Span::styled(
            format!("━ {} ", series.name),
            Style::new().fg(color_of(i, &series.name)),
        ));
    }
    let datasets = r
        .history
        .iter()
        .enumerate()
        .map(|(i, series)| {
            Dataset::default()
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(Style::new().fg(color_of(i, &series.name)))
                .data(&series.points)
        })
        .collect();
    Chart::new(datasets)
        .block(Block::new().borders(Borders::TOP).title(Line::from(title)))
        .x_axis(
            Axis::default()
                .bounds([start, end])
                .labels([clock(start), clock(end)])
                .style(Style::new().dim()),
        )
        .y_axis(
            Axis::default()
                .bounds([0.0, y_max])
                .labels(["0".to_string(), watts(y_max / 2.0), watts(y_max)])
                .style(Style::new().dim()),
        )
        .legend_position(None)
        .render(area, buf);
}

/// One column of the process table.
struct Column {
    title: String,
    width: Constraint,
    right: bool,
    sort: Option<SortKey>,
}

fn columns(app: &App, r: &LiveReport, width: u16) -> (Vec<Column>, Vec<usize>) {
    let wide = width >= WIDE;
    let col = |title: &str, w: u16, right: bool, sort: Option<SortKey>| Column {
        title: title.to_string(),
        width: Constraint::Length(w),
        right,
        sort,
    };
    let mut cols = vec![col("PID", 7, true, Some(SortKey::Pid))];
    if wide {
        cols.push(col("PPID", 7, true, None));
    }
    cols.push(col("USER", 8, false, Some(SortKey::User)));
    cols.push(col("CPU%", 6, true, Some(SortKey::Cpu)));
    if wide {
        cols.push(col("CPU s", 8, true, None));
    }
    cols.push(col("POWER W", 8, true, Some(SortKey::Power)));
    // With several top-level domains (package and DRAM, a GPU, ...), each one's power.
    let top: Vec<usize> = (0..r.domains.len())
        .filter(|&d| r.domains[d].top_level)
        .collect();
    let domain_columns = if wide && top.len() > 1 {
        top
    } else {
        Vec::new()
    };
    for &d in &domain_columns {
        let title = format!("{} W", r.domains[d].name);
        let w = title.chars().count().max(8) as u16;
        cols.push(Column {
            title,
            width: Constraint::Length(w),
            right: true,
            sort: None,
        });
    }
    cols.push(col("ENERGY J", 9, true, Some(SortKey::Energy)));
    cols.push(col("SHARE", 6, true, Some(SortKey::Share)));
    cols.push(Column {
        title: "COMMAND".into(),
        width: Constraint::Fill(1),
        right: false,
        sort: Some(SortKey::Command),
    });
    for c in &mut cols {
        if c.sort == Some(app.sort) {
            c.title.push(if app.descending { '▼' } else { '▲' });
        }
    }
    (cols, domain_columns)
}

fn render_table(app: &App, r: &LiveReport, area: Rect, buf: &mut Buffer) {
    let (cols, domain_columns) = columns(app, r, area.width);
    let wide = area.width >= WIDE;
    let rows = app.rows();
    let height = area.height.saturating_sub(1) as usize;
    app.page.set(height);
    let cursor = app.cursor();
    let scroll = scroll_to(cursor, app.scroll.get(), height, rows.len());
    app.scroll.set(scroll);

    let header = Row::new(cols.iter().map(|c| cell(c.title.clone(), c.right)))
        .style(Style::new().black().on_cyan().bold());
    let visible = rows.iter().skip(scroll).take(height).map(|row| {
        let p = &r.processes[row.index];
        match row.thread.and_then(|t| p.threads.get(t).map(|th| (t, th))) {
            Some(thread) => thread_row(app, row, p, thread, wide, domain_columns.len()),
            None => process_row(app, row, p, wide, &domain_columns),
        }
    });
    app.table_area.set(area);
    *app.table_columns.borrow_mut() = column_spans(&cols, area);
    let mut state = TableState::new()
        .with_offset(0)
        .with_selected((!rows.is_empty()).then(|| cursor - scroll));
    let table = Table::new(visible, cols.iter().map(|c| c.width))
        .header(header)
        .column_spacing(1)
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED));
    StatefulWidget::render(table, area, buf, &mut state);
    if rows.is_empty() && area.height > 1 {
        let message = if app.filter.is_empty() {
            "no process has run yet".to_string()
        } else {
            format!("no process matches {:?}", app.filter)
        };
        let inner = Rect {
            y: area.y + 1,
            height: 1,
            ..area
        };
        Paragraph::new(message).dim().render(inner, buf);
    }
}

/// The first row to show so that the cursor is on screen, moving the view from `scroll` as
/// little as possible, and never past the last page of `rows` rows.
fn scroll_to(cursor: usize, mut scroll: usize, height: usize, rows: usize) -> usize {
    if cursor < scroll {
        scroll = cursor;
    } else if height > 0 && cursor >= scroll + height {
        scroll = cursor + 1 - height;
    }
    scroll.min(rows.saturating_sub(height))
}

/// A table cell, aligned right for figures.
fn cell(text: String, right: bool) -> Cell<'static> {
    if right {
        Cell::from(Line::from(text).right_aligned())
    } else {
        Cell::from(text)
    }
}

/// Where each column lies on screen, for the mouse: (first x, last x, its sort key), with
/// widths as the table lays them out (the fill column takes what the others leave).
fn column_spans(cols: &[Column], area: Rect) -> Vec<(u16, u16, Option<SortKey>)> {
    let fixed: u16 = cols
        .iter()
        .map(|c| match c.width {
            Constraint::Length(w) => w + 1,
            _ => 1,
        })
        .sum();
    let mut x = area.x;
    cols.iter()
        .map(|c| {
            let w = match c.width {
                Constraint::Length(w) => w,
                _ => area.width.saturating_sub(fixed - 1).max(1),
            };
            let span = (x, x + w.saturating_sub(1), c.sort);
            x += w + 1;
            span
        })
        .collect()
}

/// The row of a process, of a folded subtree (its sums in every column that adds up), or
/// of a cgroup (its processes added up: no one pid, parent or user).
fn process_row<'a>(
    app: &App,
    row: &crate::ui::state::Row,
    p: &LiveProcess,
    wide: bool,
    domain_columns: &[usize],
) -> Row<'a> {
    let (cpu_pct, cpu_time_s, power_w, domain_power_w, energy_j, share_pct) = match &row.folded {
        Some(s) => (
            s.cpu_pct,
            s.cpu_time_s,
            s.power_w,
            &s.domain_power_w,
            s.energy_j,
            s.share_pct,
        ),
        None => (
            p.cpu_pct,
            p.cpu_time_s,
            p.power_w,
            &p.domain_power_w,
            p.energy_j,
            p.share_pct,
        ),
    };
    let group = row.cgroup.is_some();
    let mut cells = vec![cell(
        if group { "-".into() } else { p.pid.to_string() },
        true,
    )];
    if wide {
        cells.push(cell(
            p.ppid
                .filter(|_| !group)
                .map_or_else(|| "-".into(), |pp| pp.to_string()),
            true,
        ));
    }
    cells.push(cell(
        if group {
            "-".into()
        } else {
            app.user_of(row.index).to_string()
        },
        false,
    ));
    cells.push(cell(format!("{cpu_pct:.1}"), true));
    if wide {
        cells.push(cell(format!("{cpu_time_s:.2}"), true));
    }
    cells.push(cell(watts(power_w), true));
    for &d in domain_columns {
        cells.push(cell(
            watts(domain_power_w.get(d).copied().unwrap_or(0.0)),
            true,
        ));
    }
    cells.push(cell(joules(energy_j), true));
    cells.push(cell(format!("{share_pct:.1}%"), true));
    if let (Some(name), Some(s)) = (&row.cgroup, &row.folded) {
        let count = s.hidden + 1;
        let plural = if count == 1 { "" } else { "es" };
        cells.push(Cell::from(format!("{name} ({count} process{plural})")));
        return Row::new(cells).style(Style::new().bold());
    }
    cells.push(Cell::from(command_text(row, p)));
    let style = if !p.alive || p.command.is_empty() {
        Style::new().dim()
    } else if row.folded.is_some() || p.root {
        Style::new().bold()
    } else {
        Style::new()
    };
    Row::new(cells).style(style)
}

/// The COMMAND column of a process row: tree glyphs, what is folded or exited, the command.
fn command_text(row: &crate::ui::state::Row, p: &LiveProcess) -> String {
    let mut command = row.prefix.clone();
    if let Some(s) = &row.folded {
        command.push_str(&format!("[+{}] ", s.hidden));
    }
    if !p.alive {
        command.push_str("[exited] ");
    }
    if p.command.is_empty() {
        // Seen on a CPU, but gone from /proc before its name could be read.
        command.push_str("(unknown: gone before /proc was read)");
    } else {
        command.push_str(&p.command);
    }
    command
}

/// The row of one thread (or of the folded rest) under its expanded process: TID in the PID
/// column, its name in the COMMAND column, its own CPU, power and energy.
fn thread_row<'a>(
    app: &App,
    row: &crate::ui::state::Row,
    p: &LiveProcess,
    (t, thread): (usize, &crate::report::live::LiveThread),
    wide: bool,
    domain_columns: usize,
) -> Row<'a> {
    let mut cells = vec![cell(
        thread.tid.map_or_else(String::new, |tid| tid.to_string()),
        true,
    )];
    if wide {
        cells.push(cell(String::new(), true));
    }
    cells.push(cell(app.user_of(row.index).to_string(), false));
    cells.push(cell(format!("{:.1}", thread.cpu_pct), true));
    if wide {
        cells.push(cell(format!("{:.2}", thread.cpu_time_s), true));
    }
    cells.push(cell(watts(thread.power_w), true));
    // Threads are not split per domain.
    cells.extend((0..domain_columns).map(|_| cell(String::new(), true)));
    cells.push(cell(joules(thread.energy_j), true));
    cells.push(cell(format!("{:.1}%", thread.share_pct), true));
    let last = t + 1 == p.threads.len();
    let glyph = if last { "└─ " } else { "├─ " };
    let name = match (thread.tid, thread.folded_count) {
        (None, Some(n)) => format!("… {n} more threads"),
        _ if thread.name.is_empty() => "(thread name not read)".to_string(),
        _ => thread.name.clone(),
    };
    cells.push(Cell::from(format!("{}{glyph}{name}", row.prefix)));
    Row::new(cells).style(Style::new().italic())
}

/// Lines of the detail pane: its title, and the sparkline beside the figures.
const DETAILS_HEIGHT: u16 = 7;

/// `d`: the selected process's power at each refresh (a sparkline, since it was first
/// listed), and its power per domain now with its totals.
fn render_details(app: &App, r: &LiveReport, area: Rect, buf: &mut Buffer) {
    let Some(p) = app.selected_process() else {
        return;
    };
    let block = Block::new().borders(Borders::TOP).title(format!(
        " {} {} · power at each refresh, per domain ",
        p.pid, p.comm
    ));
    let inner = block.inner(area);
    block.render(area, buf);
    let mut figures = vec![Line::from(vec![
        "power ".into(),
        format!("{} W", watts(p.power_w)).bold(),
        format!(
            "  energy {} J  CPU {:.1}%  {:.2} s",
            joules(p.energy_j),
            p.cpu_pct,
            p.cpu_time_s
        )
        .into(),
    ])];
    for (d, domain) in r.domains.iter().enumerate() {
        let w = p.domain_power_w.get(d).copied().unwrap_or(0.0);
        figures.push(Line::from(vec![
            Span::raw(format!(
                "{:<14}",
                format!(
                    "{}{}",
                    if domain.top_level { "" } else { "↳ " },
                    domain.name
                )
            )),
            format!("{:>8} W ", watts(w)).bold(),
            provenance_span(domain.provenance),
        ]));
    }
    let figures_width = 52.min(inner.width / 2);
    let [spark_area, figures_area] =
        Layout::horizontal([Constraint::Fill(1), Constraint::Length(figures_width)]).areas(inner);
    if let Some(history) = app.selected_power_history() {
        let top = history.iter().copied().fold(0.0f64, f64::max);
        // The newest points that fit, in milliwatts (the widget draws integers).
        let width = spark_area.width.saturating_sub(1) as usize;
        let data: Vec<u64> = history
            .iter()
            .skip(history.len().saturating_sub(width))
            .map(|w| (w.max(0.0) * 1000.0) as u64)
            .collect();
        let [label, spark] =
            Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(spark_area);
        Paragraph::new(format!(
            "last {} refreshes, top {} W",
            data.len(),
            watts(top)
        ))
        .dim()
        .render(label, buf);
        Sparkline::default()
            .data(&data)
            .max((top * 1000.0).ceil().max(1.0) as u64)
            .style(Style::new().green())
            .render(spark, buf);
    }
    Paragraph::new(figures).render(figures_area, buf);
}

fn render_functions(app: &App, r: &LiveReport, area: Rect, buf: &mut Buffer) {
    let functions = app.selected_functions();
    let Some(process) = app.selected_process() else {
        return;
    };
    let title = format!(
        " functions of {} {} ({}) ",
        process.pid,
        process.comm,
        functions.first().map_or("", |f| f.source)
    );
    let rows = functions.iter().map(|f| FunctionRow::of(f, None));
    render_function_pane(&title, rows.collect(), false, r, area, buf);
}

/// The function pane with `f`: each function over all processes.
fn render_function_totals(totals: &[FunctionTotal], r: &LiveReport, area: Rect, buf: &mut Buffer) {
    let title = format!(
        " functions of all processes, summed ({}; f: the selected process) ",
        totals.first().map_or("", |f| f.source)
    );
    let rows = totals
        .iter()
        .map(|f| FunctionRow::of(f, Some(f.who.processes_count)));
    render_function_pane(&title, rows.collect(), true, r, area, buf);
}

/// One line of a function pane: a process's function, or a function over all processes.
struct FunctionRow<'a> {
    symbol: &'a str,
    module: &'a str,
    line: Option<u32>,
    processes: Option<usize>,
    calls: Option<u64>,
    samples: Option<u64>,
    cpu_time_s: f64,
    energy_j: f64,
    self_energy_j: f64,
}

impl<'a> FunctionRow<'a> {
    /// The row of `f`, with the count of processes it sums (totals only).
    fn of<Who>(f: &'a FunctionFigures<Who>, processes: Option<usize>) -> Self {
        FunctionRow {
            symbol: &f.symbol,
            module: &f.module,
            line: f.line,
            processes,
            calls: f.calls,
            samples: f.samples,
            cpu_time_s: f.cpu_time_s,
            energy_j: f.energy_j,
            self_energy_j: f.self_energy_j,
        }
    }
}

/// A function pane: FUNCTION, MODULE, (PROCS,) CALLS or SAMPLES, CPU s, energy and self
/// energy (J), average power (W) since the start.
fn render_function_pane(
    title: &str,
    functions: Vec<FunctionRow<'_>>,
    with_processes: bool,
    r: &LiveReport,
    area: Rect,
    buf: &mut Buffer,
) {
    let counts = if functions.iter().any(|f| f.calls.is_some()) {
        "CALLS"
    } else {
        "SAMPLES"
    };
    let right = |s: String| Cell::from(Line::from(s).right_aligned());
    let mut header = vec![Cell::from("FUNCTION"), Cell::from("MODULE")];
    let mut widths = vec![Constraint::Fill(1), Constraint::Length(14)];
    if with_processes {
        header.push(right("PROCS".into()));
        widths.push(Constraint::Length(6));
    }
    header.extend([
        right(counts.into()),
        right("CPU s".into()),
        right("ENERGY J".into()),
        right("SELF J".into()),
        right("AVG W".into()),
    ]);
    widths.extend([
        Constraint::Length(9),
        Constraint::Length(8),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(8),
    ]);
    let header = Row::new(header).style(Style::new().black().on_cyan().bold());
    let rows = functions.into_iter().map(|f| {
        let count = f
            .calls
            .or(f.samples)
            .map_or_else(|| "-".into(), |n| n.to_string());
        // A Python function's module is its source file: its name and the line read best.
        let module = match f.line {
            Some(line) => format!("{}:{line}", crate::report::names::file_name(f.module)),
            None => f.module.to_string(),
        };
        let mut cells = vec![Cell::from(f.symbol.to_string()), Cell::from(module)];
        if let Some(processes) = f.processes {
            cells.push(right(processes.to_string()));
        }
        cells.extend([
            right(count),
            right(format!("{:.2}", f.cpu_time_s)),
            right(joules(f.energy_j)),
            right(joules(f.self_energy_j)),
            right(watts(if r.elapsed_s > 0.0 {
                f.energy_j / r.elapsed_s
            } else {
                0.0
            })),
        ]);
        Row::new(cells)
    });
    let table = Table::new(rows, widths)
        .header(header)
        .block(Block::new().borders(Borders::TOP).title(title.to_string()));
    Widget::render(table, area, buf);
}

fn render_footer(app: &App, area: Rect, buf: &mut Buffer) {
    let line = if let Some(ended) = &app.ended {
        Line::from(vec![
            format!(" {ended} ").black().on_yellow().bold(),
            Span::raw(" final figures · "),
            Span::styled("q", Style::new().black().on_cyan()),
            Span::raw(" quit"),
        ])
    } else if let Some(message) = &app.message {
        Line::from(format!(" {message}").yellow().bold())
    } else if app.stopping {
        Line::from(" stopping: waiting for the run to end…".yellow().bold())
    } else if app.editing_filter {
        Line::from(vec![
            " filter: ".bold(),
            Span::raw(app.filter.clone()),
            "▏".into(),
            "  Enter keeps it · Esc clears it".dim(),
        ])
    } else {
        let key = |k: &'static str| Span::styled(k, Style::new().black().on_cyan());
        let item = |k: &'static str, what: Span<'static>| vec![key(k), what];
        // Groups in order of importance; those that do not fit are left out (`?` lists all).
        let mut groups = vec![
            item("q", " quit ".into()),
            item("?", " help ".into()),
            item("/", " filter ".into()),
            item("t", " tree ".into()),
            item(
                "C",
                if app.cgroups {
                    " by cgroup ".yellow().bold()
                } else {
                    " cgroups ".into()
                },
            ),
            item(
                "F",
                if app.follow {
                    " following ".yellow().bold()
                } else {
                    " follow ".into()
                },
            ),
            item(
                "K",
                if app.kernel_threads {
                    " kthreads shown ".yellow().bold()
                } else {
                    " kthreads ".into()
                },
            ),
            item("k", " signal ".into()),
        ];
        let mut sort = vec![" sort ".into()];
        for k in SortKey::ALL {
            sort.push(key(match k {
                SortKey::Pid => "p",
                SortKey::User => "u",
                SortKey::Cpu => "c",
                SortKey::Power => "w",
                SortKey::Energy => "e",
                SortKey::Share => "s",
                SortKey::Command => "n",
            }));
            sort.push(" ".into());
        }
        sort.push(key("r"));
        sort.push(" reverse ".into());
        groups.push(sort);
        groups.push(item("space", " pause".into()));
        if !app.filter.is_empty() {
            groups.insert(0, vec![format!(" filter: {} ", app.filter).yellow()]);
        }
        let mut spans: Vec<Span<'static>> = Vec::new();
        let mut used = 0;
        for group in groups {
            let width: usize = group.iter().map(Span::width).sum();
            if used + width > area.width as usize {
                continue;
            }
            used += width;
            spans.extend(group);
        }
        Line::from(spans)
    };
    Paragraph::new(line).render(area, buf);
}

const HELP: &[(&str, &str)] = &[
    ("q, Ctrl-C", "quit (writes the report with -o)"),
    ("?", "this help (any key closes it)"),
    ("space", "pause or resume the display"),
    ("/", "filter by name or pid (Enter keeps, Esc clears)"),
    ("f", "functions: of the selected process, or of all"),
    ("F", "follow the selected process (moving ends it)"),
    ("t", "tree view: children under their parents"),
    (
        "Enter ← →",
        "tree view: fold or unfold the selected process",
    ),
    ("H", "show or hide the selected process's threads"),
    ("C", "one row per cgroup: container, pod, systemd unit"),
    ("K", "show or hide kernel threads (hidden at first)"),
    ("k", "send a signal to the selected process"),
    ("d", "details: the selected process's power, domains"),
    ("mouse", "click: select a row, or sort by a column"),
    (
        "p u c w e s n",
        "sort by PID USER CPU% POWER ENERGY SHARE COMMAND",
    ),
    ("", "(the same key again reverses the order)"),
    ("< > r", "previous or next column, reverse"),
    ("↑ ↓ PgUp PgDn", "move (Home, End: first, last)"),
];

/// Said under the keys when there is room.
const HELP_NOTES: [&str; 6] = [
    " POWER and CPU% cover the last refresh period; ENERGY and",
    " SHARE the run so far. Folded processes show their subtree.",
    " The cursor keeps its row as the order changes (F follows).",
    " Live figures use the idle baseline estimated so far; the",
    " report at the end re-attributes the whole run. A wrapped",
    " command's final figures stay on screen until q.",
];

/// `k`'s menu over the view: the signals, the chosen one highlighted; or the second yes.
fn render_signal_menu(menu: &SignalMenu, area: Rect, buf: &mut Buffer) {
    let mut lines = vec![Line::raw(format!(" {}", shorten(&menu.command, 40)))];
    lines.push(Line::raw(""));
    if let Some(why) = menu.confirm {
        lines.push(Line::from(
            format!(" {why}: send it {}?", SIGNALS[menu.choice].1)
                .yellow()
                .bold(),
        ));
        lines.push(Line::raw(" y sends it · any other key cancels"));
    } else {
        for (i, (number, name)) in SIGNALS.iter().enumerate() {
            let text = format!(" {}  {name:<8} ({number:>2})", i + 1);
            lines.push(if i == menu.choice {
                Line::from(Span::styled(
                    text,
                    Style::new().add_modifier(Modifier::REVERSED),
                ))
            } else {
                Line::raw(text)
            });
        }
        lines.push(Line::raw(""));
        lines.push(Line::raw(" ↑ ↓ or 1-9 choose · Enter sends · Esc cancels"));
    }
    let title = format!(" send a signal to {} ", menu.pid);
    render_popup(area, buf, 50, title, lines);
}

fn render_help(area: Rect, buf: &mut Buffer) {
    let mut lines: Vec<Line> = HELP
        .iter()
        .map(|(k, what)| Line::from(vec![format!(" {k:<14}").bold(), Span::raw(*what)]))
        .collect();
    if lines.len() + HELP_NOTES.len() + 3 <= area.height as usize {
        lines.push(Line::raw(""));
        lines.extend(HELP_NOTES.iter().map(|note| Line::raw(*note)));
    }
    render_popup(area, buf, 66, " keys ".to_string(), lines);
}

/// A bordered box of `lines` under `title`, at most `width` wide, centred in `area` over
/// what was drawn there.
fn render_popup(area: Rect, buf: &mut Buffer, width: u16, title: String, lines: Vec<Line>) {
    let width = width.min(area.width);
    let height = (lines.len() as u16 + 2).min(area.height);
    let popup = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    Clear.render(popup, buf);
    Paragraph::new(lines)
        .block(Block::bordered().title(title))
        .render(popup, buf);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ratatui::{
        Terminal,
        backend::TestBackend,
        crossterm::event::{KeyCode, KeyEvent},
    };

    use super::*;
    use crate::ui::{
        state::ViewConfig,
        testdata::{self, measured_report, report},
    };

    fn app(report: LiveReport, output: Option<&str>) -> App {
        let mut app = App::new(
            ViewConfig {
                refresh: Duration::from_millis(1000),
                command_output: output.map(Into::into),
            },
            testdata::users(),
        );
        app.update(report);
        app
    }

    /// The screen as text, one line per row, trailing blanks cut.
    fn screen(app: &App, width: u16, height: u16) -> String {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        terminal.draw(|f| f.render_widget(app, f.area())).unwrap();
        let buffer = terminal.backend().buffer();
        let mut out = String::new();
        for y in 0..height {
            let mut line = String::new();
            for x in 0..width {
                line.push_str(buffer[(x, y)].symbol());
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    fn keys(app: &mut App, keys: &[KeyCode]) {
        for k in keys {
            app.handle_key(KeyEvent::from(*k));
        }
    }

    #[test]
    fn whole_machine_at_80x24() {
        insta::assert_snapshot!(screen(&app(report(), None), 80, 24));
    }

    #[test]
    fn whole_machine_at_160x48() {
        insta::assert_snapshot!(screen(&app(report(), None), 160, 48));
    }

    #[test]
    fn measured_domains_get_columns_when_wide_at_160x48() {
        insta::assert_snapshot!(screen(&app(measured_report(), None), 160, 48));
    }

    #[test]
    fn measured_domains_at_80x24() {
        insta::assert_snapshot!(screen(&app(measured_report(), None), 80, 24));
    }

    #[test]
    fn one_row_per_cgroup_at_120x24() {
        let mut a = app(report(), None);
        keys(&mut a, &[KeyCode::Char('C')]);
        let text = screen(&a, 120, 24);
        assert!(
            text.contains("session-3.scope (3 processes)")
                && text.contains("docker:3f4e1b2c5d6a (1 process)"),
            "{text}"
        );
        insta::assert_snapshot!(text);
    }

    #[test]
    fn tree_folded_filtered_and_paused_at_80x24() {
        let mut a = app(report(), None);
        keys(
            &mut a,
            &[KeyCode::Char('t'), KeyCode::Enter, KeyCode::Char(' ')],
        );
        insta::assert_snapshot!("tree_folded", screen(&a, 80, 24));
        keys(
            &mut a,
            &[
                KeyCode::Right,
                KeyCode::Char('/'),
                KeyCode::Char('w'),
                KeyCode::Char('o'),
            ],
        );
        insta::assert_snapshot!("tree_filter_typing", screen(&a, 80, 24));
    }

    #[test]
    fn tree_folded_sums_every_column_at_160x48() {
        let mut a = app(measured_report(), None);
        keys(
            &mut a,
            &[
                KeyCode::Char('t'),
                KeyCode::Home,
                KeyCode::Down,
                KeyCode::Down,
                KeyCode::Enter,
            ],
        );
        let text = screen(&a, 160, 48);
        // make (1200) folded over its two workers and sh: each summed column is the sum of
        // the four processes' figures.
        let under: Vec<&crate::report::live::LiveProcess> = a
            .report
            .as_ref()
            .unwrap()
            .processes
            .iter()
            .filter(|p| p.pid >= 1200)
            .collect();
        let sum = |f: &dyn Fn(&crate::report::live::LiveProcess) -> f64| -> f64 {
            under.iter().map(|p| f(p)).sum()
        };
        let mut expected = vec![
            sum(&|p| p.cpu_pct),
            sum(&|p| p.cpu_time_s),
            sum(&|p| p.power_w),
        ];
        // package-0, dram-0 and gpu0 (core-0 sits inside the package).
        for d in [0, 2, 3] {
            expected.push(sum(&|p| p.domain_power_w[d]));
        }
        expected.push(sum(&|p| p.energy_j));
        expected.push(sum(&|p| p.share_pct));
        let line = text
            .lines()
            .find(|l| l.contains("[+3]"))
            .unwrap_or_else(|| panic!("no folded row:\n{text}"));
        let fields: Vec<&str> = line.split_whitespace().collect();
        // PID PPID USER, then CPU% CPU s POWER W, a column per domain, ENERGY J, SHARE.
        assert_eq!(&fields[..3], ["1200", "880", "alice"], "{line}");
        let shown: Vec<f64> = fields[3..11]
            .iter()
            .map(|f| f.trim_end_matches('%').parse().unwrap())
            .collect();
        for (column, (shown, expected)) in shown.iter().zip(&expected).enumerate() {
            // Within the rounding of two decimals (one for CPU% and SHARE).
            assert!(
                (shown - expected).abs() <= 0.051,
                "column {column}: {shown} shown, {expected} summed: {line}"
            );
        }
        assert!(expected[1] > 30.0 && expected[6] > 7.9, "{expected:?}");
        insta::assert_snapshot!(text);
    }

    #[test]
    fn function_pane_for_the_selected_process_at_160x48() {
        let mut a = app(testdata::report_with_functions(), None);
        keys(&mut a, &[KeyCode::Down]);
        insta::assert_snapshot!(screen(&a, 160, 48));
    }

    #[test]
    fn function_pane_of_all_processes_sums_them_at_160x48() {
        let mut a = app(testdata::report_with_functions(), None);
        keys(&mut a, &[KeyCode::Char('f')]);
        let text = screen(&a, 160, 48);
        // checksum: 1,200 calls in one process and 300 in one no longer listed.
        let line = text
            .lines()
            .find(|l| l.contains("checksum"))
            .unwrap_or_else(|| panic!("no checksum line:\n{text}"));
        assert!(line.contains(" 2 ") && line.contains("1500"), "{line}");
        insta::assert_snapshot!(text);
        // f again: back to the selected process.
        keys(&mut a, &[KeyCode::Char('f')]);
        assert!(!screen(&a, 160, 48).contains("all processes"));
    }

    #[test]
    fn help_over_the_view_at_80x24() {
        let mut a = app(report(), None);
        keys(&mut a, &[KeyCode::Char('?')]);
        let text = screen(&a, 80, 24);
        // Every key fits; the notes under them only where they fit whole.
        assert!(text.contains("↑ ↓ PgUp PgDn"), "{text}");
        assert!(!text.contains("refresh period"), "{text}");
        let tall = screen(&a, 80, 40);
        assert!(
            tall.contains("refresh period") && tall.contains("stay on screen until q"),
            "{tall}"
        );
        insta::assert_snapshot!(text);
    }

    #[test]
    fn wrapped_command_through_the_live_model_at_80x24() {
        // The output file is named after our pid, as in a real run: filtered out.
        let output = format!("/tmp/cg-trace-{}.out", std::process::id());
        let a = app(
            testdata::wrapped_run_through_the_live_model(),
            Some(&output),
        );
        let text = screen(&a, 80, 24).replace(&output, "/tmp/cg-trace-[PID].out");
        insta::assert_snapshot!(text);
    }

    #[test]
    fn final_screen_says_how_the_command_ended_at_80x24() {
        let mut a = app(
            testdata::wrapped_run_through_the_live_model(),
            Some("/tmp/cg-trace-1.out"),
        );
        a.ended = Some("the command ended: exit status 3".into());
        let text = screen(&a, 80, 24);
        let footer = text.lines().last().unwrap();
        assert!(
            footer.contains("the command ended: exit status 3") && footer.contains("q quit"),
            "{footer}"
        );
        insta::assert_snapshot!(text);
    }

    #[test]
    fn kernel_threads_hidden_until_k_then_in_brackets_at_80x24() {
        let mut a = app(testdata::report_with_kernel_threads(), None);
        let text = screen(&a, 80, 24);
        assert!(
            !text.contains("ksoftirqd") && !text.contains("kworker"),
            "{text}"
        );
        keys(&mut a, &[KeyCode::Char('K')]);
        let text = screen(&a, 80, 24);
        let line = text
            .lines()
            .find(|l| l.contains("ksoftirqd"))
            .unwrap_or_else(|| panic!("no kernel thread:\n{text}"));
        assert!(line.ends_with("[ksoftirqd/1]"), "{line}");
        assert!(text.contains("[kworker/0:1-events]"), "{text}");
        assert!(text.contains("K kthreads shown"), "{text}");
        insta::assert_snapshot!(text);
        // In the tree too.
        keys(&mut a, &[KeyCode::Char('K'), KeyCode::Char('t')]);
        assert!(!screen(&a, 80, 24).contains("ksoftirqd"));
        keys(&mut a, &[KeyCode::Char('K')]);
        assert!(screen(&a, 80, 24).contains("[ksoftirqd/1]"));
    }

    #[test]
    fn a_process_gone_before_its_name_was_read_says_so() {
        let mut r = report();
        r.processes[4].command.clear();
        r.processes[4].comm.clear();
        let text = screen(&app(r, None), 160, 48);
        assert!(
            text.contains("(unknown: gone before /proc was read)"),
            "{text}"
        );
    }

    #[test]
    fn signal_menu_and_what_it_did_at_80x24() {
        let mut a = app(report(), None);
        keys(&mut a, &[KeyCode::Char('k'), KeyCode::Down]);
        let text = screen(&a, 80, 24);
        assert!(
            text.contains("send a signal to 1200") && text.contains("SIGKILL"),
            "{text}"
        );
        insta::assert_snapshot!(text);
        keys(&mut a, &[KeyCode::Esc]);
        let text = screen(&a, 80, 24);
        assert!(!text.contains("send a signal to"), "{text}");
        assert!(text.lines().last().unwrap().contains("no signal sent"));
        a.signal_sent(1200, 15, Err("Operation not permitted (os error 1)".into()));
        let text = screen(&a, 80, 24);
        assert!(
            text.lines()
                .last()
                .unwrap()
                .contains("kill(1200, SIGTERM): Operation not permitted"),
            "{text}"
        );
        for (w, h) in [(1, 1), (10, 3), (30, 10)] {
            keys(&mut a, &[KeyCode::Char('k')]);
            screen(&a, w, h);
            keys(&mut a, &[KeyCode::Esc]);
        }
    }

    #[test]
    fn an_expanded_process_shows_its_threads_at_80x24() {
        let mut a = app(testdata::report_with_threads(), None);
        while a.selected_process().is_some_and(|p| p.pid != 1200) {
            keys(&mut a, &[KeyCode::Down]);
        }
        keys(&mut a, &[KeyCode::Char('H')]);
        let text = screen(&a, 80, 24);
        let lines: Vec<&str> = text.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.contains("make -j2 all"))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(
            lines[at + 1].contains("1203") && lines[at + 1].contains("├─ worker-0"),
            "{text}"
        );
        assert!(
            lines[at + 2].contains("1200") && lines[at + 2].contains("├─ make"),
            "{text}"
        );
        assert!(lines[at + 3].contains("└─ … 12 more threads"), "{text}");
        // The help says how.
        keys(&mut a, &[KeyCode::Char('?')]);
        let text = screen(&a, 80, 30);
        assert!(text.contains("the selected process's threads"), "{text}");
    }

    #[test]
    fn per_cpu_busy_bars_in_the_header() {
        let text = screen(&app(report(), None), 80, 24);
        // Two CPUs, 92.5 % and 41 % busy: bars in proportion.
        let line = text
            .lines()
            .find(|l| l.starts_with("0["))
            .unwrap_or_else(|| panic!("no CPU bars:\n{text}"));
        assert!(line.contains("92.5%]") && line.contains("1[") && line.contains("41.0%]"));
        let bars = |cpu: &str| -> usize {
            let bar = line.split(&format!("{cpu}[")).nth(1).unwrap();
            bar.split(']').next().unwrap().matches('|').count()
        };
        assert!(bars("0") > 2 * bars("1") - 2 && bars("1") > 3, "{line}");
        // Many CPUs: one block character each, on at most two lines.
        let many: Vec<f64> = (0..128).map(|i| f64::from(i % 9) * 12.5).collect();
        let lines = cpu_bars(&many, 80);
        assert_eq!(lines.len(), 2);
        let chars: usize = lines.iter().map(|l| l.width()).sum::<usize>() - 12;
        assert_eq!(chars, 128);
        assert!(
            lines[0].to_string().starts_with("cpus  ▁▂▃▄▅▆▇██▁"),
            "{}",
            lines[0]
        );
        assert!(
            cpu_bars(&[f64::NAN, 250.0], 80)[0]
                .to_string()
                .contains("0.0%")
        );
        assert!(cpu_bars(&[50.0], 10).is_empty());
    }

    #[test]
    fn detail_pane_of_the_selected_process_at_160x48() {
        let mut a = app(measured_report(), None);
        for i in 0..30 {
            let mut next = measured_report();
            for p in &mut next.processes {
                p.power_w *= 1.0 + (f64::from(i) / 5.0).sin() * 0.5;
            }
            a.update(next);
        }
        keys(&mut a, &[KeyCode::Char('d')]);
        let text = screen(&a, 160, 48);
        // The worker on the GPU (1201) is first: its power per domain.
        assert!(text.contains(" 1201 cc1 · power at each refresh"), "{text}");
        let gpu = text
            .lines()
            .find(|l| l.contains("gpu0") && l.contains("measured") && !l.contains("J"))
            .unwrap_or_else(|| panic!("no gpu0 line:\n{text}"));
        assert!(gpu.contains("8.00 W"), "{gpu}");
        assert!(text.contains("↳ core-0"), "{text}");
        assert!(text.contains("last 31 refreshes"), "{text}");
        insta::assert_snapshot!(text);
        for (w, h) in [(1, 1), (10, 3), (30, 14), (80, 24)] {
            screen(&a, w, h);
        }
    }

    #[test]
    fn a_click_selects_a_row_or_sorts_by_a_column() {
        use crate::ui::state::Action;
        use ratatui::crossterm::event::{KeyModifiers, MouseButton, MouseEvent, MouseEventKind};
        let click = |column: u16, row: u16| MouseEvent {
            kind: MouseEventKind::Down(MouseButton::Left),
            column,
            row,
            modifiers: KeyModifiers::NONE,
        };
        for width in [80, 160] {
            let mut a = app(report(), None);
            let text = screen(&a, width, 24);
            let (y, line) = text
                .lines()
                .enumerate()
                .find(|(_, l)| l.contains("sshd"))
                .unwrap();
            assert_eq!(a.handle_mouse(click(3, y as u16)), Action::Redraw);
            assert_eq!(a.selected_process().unwrap().pid, 880, "{line}");
            // The header: a click on CPU% sorts by it, a second one reverses.
            let (hy, header) = text
                .lines()
                .enumerate()
                .find(|(_, l)| l.contains("PID") && l.contains("COMMAND"))
                .unwrap();
            let x = header.find("CPU%").unwrap() as u16;
            a.handle_mouse(click(x + 1, hy as u16));
            assert_eq!((a.sort, a.descending), (SortKey::Cpu, true));
            a.handle_mouse(click(x + 1, hy as u16));
            assert_eq!((a.sort, a.descending), (SortKey::Cpu, false));
            let x = header.find("COMMAND").unwrap() as u16;
            a.handle_mouse(click(x + 3, hy as u16));
            assert_eq!(a.sort, SortKey::Command, "{header}");
            // Below the last row, and outside the table: nothing.
            screen(&a, width, 24);
            assert_eq!(a.handle_mouse(click(3, 22)), Action::Nothing);
            assert_eq!(a.handle_mouse(click(3, 0)), Action::Nothing);
            // The wheel moves the cursor.
            let wheel = MouseEvent {
                kind: MouseEventKind::ScrollDown,
                ..click(3, hy as u16 + 1)
            };
            let before = a.cursor();
            a.handle_mouse(wheel);
            assert_eq!(a.cursor(), (before + 3).min(a.rows().len() - 1));
        }
    }

    #[test]
    fn tiny_and_odd_sizes_do_not_panic() {
        let mut a = app(measured_report(), None);
        for (w, h) in [(1, 1), (10, 3), (20, 8), (40, 12), (80, 10), (300, 100)] {
            screen(&a, w, h);
        }
        keys(&mut a, &[KeyCode::Char('?')]);
        for (w, h) in [(1, 1), (10, 3), (30, 10)] {
            screen(&a, w, h);
        }
        let empty = App::new(
            ViewConfig {
                refresh: Duration::from_secs(1),
                command_output: None,
            },
            testdata::users(),
        );
        assert!(screen(&empty, 80, 24).contains("waiting for the first interval"));
    }

    #[test]
    fn units_format_with_sensible_digits() {
        assert_eq!(watts(3.456), "3.46");
        assert_eq!(watts(-0.0), "0.00");
        assert_eq!(watts(123.45), "123.5");
        assert_eq!(watts(12345.6), "12346");
        assert_eq!(joules(0.5), "0.50");
        assert_eq!(joules(1234.56), "1234.6");
        assert_eq!(clock(75.0), "1:15");
        assert_eq!(clock(3725.0), "1:02:05");
    }
}
