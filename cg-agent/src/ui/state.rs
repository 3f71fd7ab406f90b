//! The view's state and what keys do to it. Pure: no terminal, no I/O, so tests drive it with
//! key events and check the rows it would show. The main loop alone owns it
//! ([`super::run`]); rendering only reads it ([`super::render`]).

use std::{
    cell::{Cell, RefCell},
    cmp::Ordering,
    collections::{BTreeMap, HashMap, HashSet, VecDeque},
    path::PathBuf,
    time::Duration,
};

use ratatui::{
    crossterm::event::{
        KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseButton, MouseEvent, MouseEventKind,
    },
    layout::Rect,
};

use super::users::Users;
use crate::{
    attribution::ProcId,
    report::{
        FunctionEntry,
        functions::FunctionTotal,
        live::{LiveProcess, LiveReport},
    },
};

/// A column of the process table, in display order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    Pid,
    User,
    Cpu,
    Power,
    Energy,
    Share,
    Command,
}

impl SortKey {
    pub const ALL: [SortKey; 7] = [
        SortKey::Pid,
        SortKey::User,
        SortKey::Cpu,
        SortKey::Power,
        SortKey::Energy,
        SortKey::Share,
        SortKey::Command,
    ];

    /// The key that sorts by this column.
    pub fn key(self) -> char {
        match self {
            SortKey::Pid => 'p',
            SortKey::User => 'u',
            SortKey::Cpu => 'c',
            SortKey::Power => 'w',
            SortKey::Energy => 'e',
            SortKey::Share => 's',
            SortKey::Command => 'n',
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            SortKey::Pid => "PID",
            SortKey::User => "USER",
            SortKey::Cpu => "CPU%",
            SortKey::Power => "POWER W",
            SortKey::Energy => "ENERGY J",
            SortKey::Share => "SHARE",
            SortKey::Command => "COMMAND",
        }
    }

    /// Figures sort largest first; names and pids in ascending order.
    fn descending_first(self) -> bool {
        !matches!(self, SortKey::Pid | SortKey::User | SortKey::Command)
    }

    fn from_key(c: char) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.key() == c)
    }
}

/// Power points kept per process for the detail pane (one per update: 5 min at 1 s).
pub const POWER_HISTORY_POINTS: usize = 300;

/// What the main loop should do after a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Nothing,
    Redraw,
    Quit,
    /// Send `signal` to `pid` (confirmed by the user), then report with
    /// [`App::signal_sent`].
    Signal {
        pid: u32,
        signal: i32,
    },
}

/// The signals `k` offers, as htop lists them (the first is the default).
pub const SIGNALS: [(i32, &str); 9] = [
    (libc::SIGTERM, "SIGTERM"),
    (libc::SIGKILL, "SIGKILL"),
    (libc::SIGINT, "SIGINT"),
    (libc::SIGHUP, "SIGHUP"),
    (libc::SIGQUIT, "SIGQUIT"),
    (libc::SIGSTOP, "SIGSTOP"),
    (libc::SIGCONT, "SIGCONT"),
    (libc::SIGUSR1, "SIGUSR1"),
    (libc::SIGUSR2, "SIGUSR2"),
];

/// The name of a signal `k` offers.
pub fn signal_name(signal: i32) -> &'static str {
    SIGNALS
        .iter()
        .find(|(n, _)| *n == signal)
        .map_or("a signal", |(_, name)| name)
}

/// `k`'s menu: which process, which signal, and whether the user must say yes once more
/// (init, or cg-trace itself).
#[derive(Clone, Debug, PartialEq)]
pub struct SignalMenu {
    pub pid: u32,
    pub command: String,
    /// Index into [`SIGNALS`].
    pub choice: usize,
    /// Why this process needs a second yes, once asked.
    pub confirm: Option<&'static str>,
}

/// One line of the process table.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Index into the shown report's `processes`.
    pub index: usize,
    pub id: ProcId,
    /// Tree glyphs before the command (tree view).
    pub prefix: String,
    pub has_children: bool,
    /// Folded (tree view): how many descendants it hides, and the subtree's figures; in the
    /// cgroup view, the group's other processes and the group's figures.
    pub folded: Option<Subtree>,
    /// A thread row of an expanded process (`H`): the index into its
    /// [`LiveProcess::threads`] (`index` and `id` are the process's).
    pub thread: Option<usize>,
    /// The cgroup view: the group this row stands for (its processes added up).
    pub cgroup: Option<String>,
}

/// A folded process with everything below it: every column that adds up, added up.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Subtree {
    pub hidden: usize,
    pub cpu_pct: f64,
    pub cpu_time_s: f64,
    pub power_w: f64,
    /// Per domain, as [`LiveProcess::domain_power_w`].
    pub domain_power_w: Vec<f64>,
    pub energy_j: f64,
    pub share_pct: f64,
}

impl Subtree {
    /// Adds a process's figures to every column that adds up.
    fn add(&mut self, p: &LiveProcess) {
        self.cpu_pct += p.cpu_pct;
        self.cpu_time_s += p.cpu_time_s;
        self.power_w += p.power_w;
        if self.domain_power_w.len() < p.domain_power_w.len() {
            self.domain_power_w.resize(p.domain_power_w.len(), 0.0);
        }
        for (total, w) in self.domain_power_w.iter_mut().zip(&p.domain_power_w) {
            *total += w;
        }
        self.energy_j += p.energy_j;
        self.share_pct += p.share_pct;
    }
}

/// The cgroup view's group of processes whose cgroup could not be read.
pub const UNKNOWN_CGROUP: &str = "(cgroup unknown)";

/// Options the view starts with.
#[derive(Clone, Debug)]
pub struct ViewConfig {
    pub refresh: Duration,
    /// Where the wrapped command's output goes (shown on screen).
    pub command_output: Option<PathBuf>,
}

/// Everything the view shows and remembers.
#[derive(Debug)]
pub struct App {
    pub config: ViewConfig,
    /// What is shown; `None` until the first figures arrive.
    pub report: Option<LiveReport>,
    /// The newest figures, held back while paused.
    pending: Option<LiveReport>,
    pub sort: SortKey,
    pub descending: bool,
    pub filter: String,
    pub editing_filter: bool,
    pub tree: bool,
    /// `C`, `--group-by cgroup`: one row per cgroup (container, pod, unit), its processes
    /// added up.
    pub cgroups: bool,
    folded: HashSet<ProcId>,
    /// Processes whose threads are listed under them (`H`).
    expanded: HashSet<ProcId>,
    pub paused: bool,
    pub help: bool,
    /// The function pane shows the functions over all processes, not the selected one's.
    pub all_functions: bool,
    /// The run was asked to stop and is winding down.
    pub stopping: bool,
    /// Wrap mode: the command ended and the final figures stay on screen until `q`; the
    /// line that says how it ended.
    pub ended: Option<String>,
    /// The cursor follows the selected process when the order changes (`F`, as in htop);
    /// otherwise it keeps its row, as htop's does.
    pub follow: bool,
    /// Kernel threads are listed (`K`, as in htop); hidden at first.
    pub kernel_threads: bool,
    /// `d`: the detail pane of the selected process (power history, per-domain power).
    pub details: bool,
    /// Each listed process's power at each update (W), oldest first, for the detail pane's
    /// sparkline; at most [`POWER_HISTORY_POINTS`] each, forgotten with the process.
    power_history: HashMap<ProcId, VecDeque<f64>>,
    /// `k`: the signal menu, while open.
    pub signal_menu: Option<SignalMenu>,
    /// A line for the footer until the next key (what `k` did).
    pub message: Option<String>,
    users: Users,
    user_names: Vec<String>,
    rows: Vec<Row>,
    cursor: usize,
    selected: Option<ProcId>,
    /// First row shown, kept by the renderer so that the cursor stays visible.
    pub(super) scroll: Cell<usize>,
    /// Rows the table showed last time (for page up/down).
    pub(super) page: Cell<usize>,
    /// Where the renderer drew the table last time (its header is the first line), and its
    /// columns' first and last x with the sort each stands for: what a click hits.
    pub(super) table_area: Cell<Rect>,
    pub(super) table_columns: RefCell<Vec<(u16, u16, Option<SortKey>)>>,
}

impl App {
    pub fn new(config: ViewConfig, users: Users) -> Self {
        App {
            config,
            report: None,
            pending: None,
            sort: SortKey::Power,
            descending: true,
            filter: String::new(),
            editing_filter: false,
            tree: false,
            cgroups: false,
            folded: HashSet::new(),
            expanded: HashSet::new(),
            paused: false,
            help: false,
            all_functions: false,
            stopping: false,
            ended: None,
            follow: false,
            kernel_threads: false,
            details: false,
            power_history: HashMap::new(),
            signal_menu: None,
            message: None,
            users,
            user_names: Vec::new(),
            rows: Vec::new(),
            cursor: 0,
            selected: None,
            scroll: Cell::new(0),
            page: Cell::new(10),
            table_area: Cell::new(Rect::default()),
            table_columns: RefCell::new(Vec::new()),
        }
    }

    /// New figures: shown now, or when the view is unpaused.
    pub fn update(&mut self, report: LiveReport) {
        if self.paused {
            self.pending = Some(report);
            return;
        }
        self.users
            .learn(report.processes.iter().filter_map(|p| p.uid));
        let mut history = std::mem::take(&mut self.power_history);
        self.power_history = report
            .processes
            .iter()
            .map(|p| {
                let mut points = history.remove(&p.id).unwrap_or_default();
                points.push_back(p.power_w);
                while points.len() > POWER_HISTORY_POINTS {
                    points.pop_front();
                }
                (p.id, points)
            })
            .collect();
        self.user_names = report
            .processes
            .iter()
            .map(|p| self.users.name(p.uid))
            .collect();
        self.report = Some(report);
        self.rebuild_rows(self.follow);
    }

    /// The selected process's power at each update so far (W), oldest first.
    pub fn selected_power_history(&self) -> Option<&VecDeque<f64>> {
        self.power_history.get(&self.selected_process()?.id)
    }

    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// Index of the selected row.
    pub fn cursor(&self) -> usize {
        self.cursor
    }

    /// The user name of the process at `index` in the shown report.
    pub fn user_of(&self, index: usize) -> &str {
        self.user_names.get(index).map_or("?", String::as_str)
    }

    pub fn selected_process(&self) -> Option<&LiveProcess> {
        let row = self.rows.get(self.cursor)?;
        self.report.as_ref()?.processes.get(row.index)
    }

    /// Function figures of the selected process, most energy first.
    pub fn selected_functions(&self) -> Vec<&FunctionEntry> {
        let (Some(report), Some(process)) = (&self.report, self.selected_process()) else {
            return Vec::new();
        };
        let mut functions: Vec<&FunctionEntry> = report
            .functions
            .iter()
            .filter(|f| f.who.pid == process.pid)
            .collect();
        functions.sort_by(|a, b| {
            b.energy_j
                .total_cmp(&a.energy_j)
                .then_with(|| a.symbol.cmp(&b.symbol))
        });
        functions
    }

    /// Functions over all processes, most energy first, when the pane shows them (`f`).
    pub fn shown_function_totals(&self) -> &[FunctionTotal] {
        match &self.report {
            Some(report) if self.all_functions => &report.function_totals,
            _ => &[],
        }
    }

    /// What a key does.
    pub fn handle_key(&mut self, key: KeyEvent) -> Action {
        if key.kind == KeyEventKind::Release {
            return Action::Nothing;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && matches!(key.code, KeyCode::Char('c') | KeyCode::Char('C')) {
            return Action::Quit;
        }
        if self.editing_filter {
            return self.edit_filter(key);
        }
        if self.signal_menu.is_some() {
            return self.signal_key(key);
        }
        self.message = None;
        if self.help {
            if key.code == KeyCode::Char('q') {
                return Action::Quit;
            }
            self.help = false;
            return Action::Redraw;
        }
        match key.code {
            KeyCode::Char('q') => return Action::Quit,
            KeyCode::Char('?') | KeyCode::Char('h') | KeyCode::F(1) => self.help = true,
            KeyCode::Char(' ') => self.toggle_pause(),
            KeyCode::Char('/') => self.editing_filter = true,
            KeyCode::Char('f') => self.all_functions = !self.all_functions,
            KeyCode::Char('d') => self.details = !self.details,
            KeyCode::Char('F') => {
                self.follow = !self.follow;
                self.selected = self.rows.get(self.cursor).map(|r| r.id);
            }
            KeyCode::Esc if !self.filter.is_empty() => {
                self.filter.clear();
                self.rebuild();
            }
            KeyCode::Char('t') => {
                self.tree = !self.tree;
                self.cgroups = false;
                self.rebuild();
            }
            KeyCode::Char('C') => {
                self.cgroups = !self.cgroups;
                self.tree = false;
                self.rebuild();
            }
            KeyCode::Char('K') => {
                self.kernel_threads = !self.kernel_threads;
                self.rebuild();
            }
            KeyCode::Char('r') => {
                self.descending = !self.descending;
                self.rebuild();
            }
            KeyCode::Char('<') | KeyCode::Char('>') => {
                let i = SortKey::ALL
                    .iter()
                    .position(|k| *k == self.sort)
                    .unwrap_or(0);
                let n = SortKey::ALL.len();
                let next = if key.code == KeyCode::Char('<') {
                    (i + n - 1) % n
                } else {
                    (i + 1) % n
                };
                self.sort_by(SortKey::ALL[next]);
            }
            KeyCode::Char(c) if SortKey::from_key(c).is_some() => {
                if let Some(k) = SortKey::from_key(c) {
                    self.sort_by(k);
                }
            }
            KeyCode::Char('k') => self.open_signal_menu(),
            KeyCode::Up => self.move_cursor(-1),
            KeyCode::Down => self.move_cursor(1),
            KeyCode::PageUp => self.move_cursor(-(self.page.get().max(1) as isize)),
            KeyCode::PageDown => self.move_cursor(self.page.get().max(1) as isize),
            KeyCode::Home | KeyCode::Char('g') => self.move_cursor(isize::MIN / 2),
            KeyCode::End | KeyCode::Char('G') => self.move_cursor(isize::MAX / 2),
            KeyCode::Enter if self.tree => self.set_fold(None),
            KeyCode::Char('H') | KeyCode::Enter => self.toggle_threads(),
            KeyCode::Left | KeyCode::Char('-') if self.tree => self.set_fold(Some(true)),
            KeyCode::Right | KeyCode::Char('+') if self.tree => self.set_fold(Some(false)),
            _ => return Action::Nothing,
        }
        Action::Redraw
    }

    /// `k`: the menu for the selected process, unless it has exited (its pid may be
    /// another process's by now).
    fn open_signal_menu(&mut self) {
        if self
            .rows
            .get(self.cursor)
            .is_some_and(|r| r.cgroup.is_some())
        {
            self.message =
                Some("a cgroup's row: C lists its processes, to send one a signal".into());
            return;
        }
        let Some(p) = self.selected_process() else {
            return;
        };
        if !p.alive {
            self.message = Some(format!(
                "{} has exited: no signal sent (its pid may be another process's now)",
                p.pid
            ));
            return;
        }
        self.signal_menu = Some(SignalMenu {
            pid: p.pid,
            command: p.command.clone(),
            choice: 0,
            confirm: None,
        });
    }

    fn signal_key(&mut self, key: KeyEvent) -> Action {
        let Some(menu) = self.signal_menu.as_mut() else {
            return Action::Nothing;
        };
        if menu.confirm.is_some() {
            // The second yes: y sends, anything else cancels.
            let menu = self.signal_menu.take();
            if let (KeyCode::Char('y') | KeyCode::Char('Y'), Some(menu)) = (key.code, menu) {
                return Action::Signal {
                    pid: menu.pid,
                    signal: SIGNALS[menu.choice].0,
                };
            }
            self.message = Some("no signal sent".into());
            return Action::Redraw;
        }
        match key.code {
            KeyCode::Esc | KeyCode::Char('q') | KeyCode::Char('k') => {
                self.signal_menu = None;
                self.message = Some("no signal sent".into());
            }
            KeyCode::Up => menu.choice = menu.choice.saturating_sub(1),
            KeyCode::Down => menu.choice = (menu.choice + 1).min(SIGNALS.len() - 1),
            KeyCode::Char(c) if c.is_ascii_digit() && c != '0' => {
                let n = c as usize - '1' as usize;
                if n < SIGNALS.len() {
                    menu.choice = n;
                }
            }
            KeyCode::Enter => {
                let pid = menu.pid;
                // Never without a second yes: init, and cg-trace itself (or a pid that
                // kill(2) would take for a process group).
                let why = if pid == 1 {
                    Some("pid 1 is init")
                } else if pid == std::process::id() {
                    Some("this is cg-trace itself")
                } else {
                    None
                };
                if pid == 0 || i32::try_from(pid).is_err() {
                    self.signal_menu = None;
                    self.message = Some(format!("no signal sent: {pid} is not a process"));
                } else if why.is_some() {
                    menu.confirm = why;
                } else {
                    let signal = SIGNALS[menu.choice].0;
                    self.signal_menu = None;
                    return Action::Signal { pid, signal };
                }
            }
            _ => return Action::Nothing,
        }
        Action::Redraw
    }

    /// What became of a signal the user sent: the footer says so (with kill(2)'s error).
    pub fn signal_sent(&mut self, pid: u32, signal: i32, result: Result<(), String>) {
        self.message = Some(match result {
            Ok(()) => format!("sent {} to {pid}", signal_name(signal)),
            Err(err) => format!("kill({pid}, {}): {err}", signal_name(signal)),
        });
    }

    /// What the mouse does: a click on a row selects it, on a column's title sorts by it
    /// (again: reverses), the wheel moves the cursor. Ignored while a menu, the help or the
    /// filter line is open.
    pub fn handle_mouse(&mut self, mouse: MouseEvent) -> Action {
        if self.help || self.signal_menu.is_some() || self.editing_filter {
            return Action::Nothing;
        }
        let area = self.table_area.get();
        let inside = |x: u16, y: u16| {
            x >= area.x && x < area.x + area.width && y >= area.y && y < area.y + area.height
        };
        match mouse.kind {
            MouseEventKind::ScrollDown if inside(mouse.column, mouse.row) => self.move_cursor(3),
            MouseEventKind::ScrollUp if inside(mouse.column, mouse.row) => self.move_cursor(-3),
            MouseEventKind::Down(MouseButton::Left) if inside(mouse.column, mouse.row) => {
                if mouse.row == area.y {
                    let hit = self
                        .table_columns
                        .borrow()
                        .iter()
                        .find(|(from, to, _)| (*from..=*to).contains(&mouse.column))
                        .and_then(|(_, _, key)| *key);
                    match hit {
                        Some(key) => self.sort_by(key),
                        None => return Action::Nothing,
                    }
                } else {
                    let row = self.scroll.get() + usize::from(mouse.row - area.y - 1);
                    if row >= self.rows.len() {
                        return Action::Nothing;
                    }
                    self.follow = false;
                    self.cursor = row;
                    self.selected = Some(self.rows[row].id);
                }
            }
            _ => return Action::Nothing,
        }
        self.message = None;
        Action::Redraw
    }

    fn edit_filter(&mut self, key: KeyEvent) -> Action {
        match key.code {
            KeyCode::Enter => self.editing_filter = false,
            KeyCode::Esc => {
                self.editing_filter = false;
                self.filter.clear();
            }
            KeyCode::Backspace => {
                self.filter.pop();
            }
            KeyCode::Up => self.move_cursor(-1),
            KeyCode::Down => self.move_cursor(1),
            KeyCode::Char(c) if !key.modifiers.contains(KeyModifiers::CONTROL) => {
                self.filter.push(c)
            }
            _ => return Action::Nothing,
        }
        self.rebuild();
        Action::Redraw
    }

    fn toggle_pause(&mut self) {
        self.paused = !self.paused;
        if !self.paused
            && let Some(report) = self.pending.take()
        {
            self.update(report);
        }
    }

    fn sort_by(&mut self, key: SortKey) {
        if self.sort == key {
            self.descending = !self.descending;
        } else {
            self.sort = key;
            self.descending = key.descending_first();
        }
        self.rebuild();
    }

    /// Moves the cursor; as in htop, a movement ends following (`F`).
    fn move_cursor(&mut self, by: isize) {
        self.follow = false;
        if self.rows.is_empty() {
            return;
        }
        let last = self.rows.len() - 1;
        self.cursor = (self.cursor as isize)
            .saturating_add(by)
            .clamp(0, last as isize) as usize;
        self.selected = Some(self.rows[self.cursor].id);
    }

    /// Folds (`Some(true)`), unfolds (`Some(false)`) or toggles (`None`) the selected process.
    fn set_fold(&mut self, fold: Option<bool>) {
        let Some(row) = self.rows.get(self.cursor) else {
            return;
        };
        let id = row.id;
        let is_folded = self.folded.contains(&id);
        let fold = fold.unwrap_or(!is_folded);
        if fold && (row.has_children || is_folded) {
            self.folded.insert(id);
        } else {
            self.folded.remove(&id);
        }
        self.rebuild();
    }

    /// Whether a process is listed: kernel threads only with `K`, and the filter.
    fn matches(&self, p: &LiveProcess) -> bool {
        if p.kernel_thread && !self.kernel_threads {
            return false;
        }
        if self.filter.is_empty() {
            return true;
        }
        let needle = self.filter.to_lowercase();
        p.pid.to_string().starts_with(&needle)
            || p.command.to_lowercase().contains(&needle)
            || p.comm.to_lowercase().contains(&needle)
            || p.cgroup
                .as_ref()
                .is_some_and(|c| c.to_lowercase().contains(&needle))
    }

    /// The cgroup view's order: the groups' sums, or their names.
    fn compare_groups(&self, a: &Row, b: &Row) -> Ordering {
        let (Some(x), Some(y)) = (&a.folded, &b.folded) else {
            return Ordering::Equal;
        };
        let order = match self.sort {
            SortKey::Cpu => x.cpu_pct.total_cmp(&y.cpu_pct),
            SortKey::Power => x.power_w.total_cmp(&y.power_w),
            SortKey::Energy => x.energy_j.total_cmp(&y.energy_j),
            SortKey::Share => x.share_pct.total_cmp(&y.share_pct),
            SortKey::Pid | SortKey::User | SortKey::Command => a.cgroup.cmp(&b.cgroup),
        };
        let order = if self.descending {
            order.reverse()
        } else {
            order
        };
        order.then(a.cgroup.cmp(&b.cgroup))
    }

    /// One row per cgroup (processes whose cgroup is unknown share one), each standing for
    /// the first of its processes in the current order, with the group's sums.
    fn cgroup_rows(&self, processes: &[LiveProcess]) -> Vec<Row> {
        let mut groups: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, p) in processes.iter().enumerate() {
            if self.matches(p) {
                let name = p.cgroup.as_deref().unwrap_or(UNKNOWN_CGROUP);
                groups.entry(name).or_default().push(i);
            }
        }
        let mut rows: Vec<Row> = groups
            .into_iter()
            .map(|(name, mut members)| {
                members.sort_by(|&a, &b| self.compare(processes, a, b));
                let mut sum = Subtree::default();
                for &i in &members {
                    sum.add(&processes[i]);
                }
                sum.hidden = members.len() - 1;
                Row {
                    index: members[0],
                    id: processes[members[0]].id,
                    prefix: String::new(),
                    has_children: false,
                    folded: Some(sum),
                    thread: None,
                    cgroup: Some(name.to_owned()),
                }
            })
            .collect();
        rows.sort_by(|a, b| self.compare_groups(a, b));
        rows
    }

    fn compare(&self, processes: &[LiveProcess], a: usize, b: usize) -> Ordering {
        let (x, y) = (&processes[a], &processes[b]);
        let order = match self.sort {
            SortKey::Pid => x.pid.cmp(&y.pid),
            SortKey::User => self.user_of(a).cmp(self.user_of(b)),
            SortKey::Cpu => x.cpu_pct.total_cmp(&y.cpu_pct),
            SortKey::Power => x.power_w.total_cmp(&y.power_w),
            SortKey::Energy => x.energy_j.total_cmp(&y.energy_j),
            SortKey::Share => x.share_pct.total_cmp(&y.share_pct),
            SortKey::Command => x.command.cmp(&y.command),
        };
        let order = if self.descending {
            order.reverse()
        } else {
            order
        };
        order.then(x.pid.cmp(&y.pid)).then(x.id.cmp(&y.id))
    }

    /// Recomputes the rows after the user changed the view (sort, filter, tree, fold): the
    /// selection stays on its process while it is listed.
    fn rebuild(&mut self) {
        self.rebuild_rows(true);
    }

    /// Recomputes the rows from the shown figures, the sort, the filter and the tree. On new
    /// figures the cursor keeps its row (htop's way: the biggest consumers stay in view
    /// whatever the selected process does); with `F` it follows the selected process while
    /// it is listed (`keep_process`).
    fn rebuild_rows(&mut self, keep_process: bool) {
        let rows = match &self.report {
            None => Vec::new(),
            Some(report) if self.tree => self.tree_rows(&report.processes),
            Some(report) if self.cgroups => self.cgroup_rows(&report.processes),
            Some(report) => {
                let processes = &report.processes;
                let mut order: Vec<usize> = (0..processes.len())
                    .filter(|&i| self.matches(&processes[i]))
                    .collect();
                order.sort_by(|&a, &b| self.compare(processes, a, b));
                order
                    .into_iter()
                    .map(|index| Row {
                        index,
                        id: processes[index].id,
                        prefix: String::new(),
                        has_children: false,
                        folded: None,
                        thread: None,
                        cgroup: None,
                    })
                    .collect()
            }
        };
        self.rows = self.with_threads(rows);
        let kept = self
            .selected
            .filter(|_| keep_process)
            .and_then(|id| self.rows.iter().position(|r| r.id == id));
        if let Some(at) = kept {
            self.cursor = at;
        } else {
            // Following ends with the process (gone, or filtered out), as in htop.
            self.follow = false;
            self.cursor = self.cursor.min(self.rows.len().saturating_sub(1));
            self.selected = self.rows.get(self.cursor).map(|r| r.id);
        }
    }

    /// `rows` with the thread rows of each expanded process under it.
    fn with_threads(&self, rows: Vec<Row>) -> Vec<Row> {
        let Some(report) = &self.report else {
            return rows;
        };
        if self.expanded.is_empty() {
            return rows;
        }
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            // A group row stands for many processes: no one process's threads under it.
            let threads = if row.cgroup.is_none() && self.expanded.contains(&row.id) {
                report.processes[row.index].threads.len()
            } else {
                0
            };
            let (index, id) = (row.index, row.id);
            // Under the process's name in the tree view.
            let indent = " ".repeat(row.prefix.chars().count());
            out.push(row);
            out.extend((0..threads).map(|t| Row {
                index,
                id,
                prefix: indent.clone(),
                has_children: false,
                folded: None,
                thread: Some(t),
                cgroup: None,
            }));
        }
        out
    }

    /// Shows or hides the selected process's threads (`H`).
    fn toggle_threads(&mut self) {
        let Some(id) = self.rows.get(self.cursor).map(|r| r.id) else {
            return;
        };
        if !self.expanded.remove(&id) {
            self.expanded.insert(id);
        }
        self.selected = Some(id);
        self.rebuild();
    }

    /// The tree view's rows: each process under its parent, children sorted like the
    /// table, folded subtrees closed, and with a filter only the matches and their
    /// ancestors.
    fn tree_rows(&self, processes: &[LiveProcess]) -> Vec<Row> {
        let parent = parents(processes);
        let (mut roots, mut children) = children_of(&parent);
        let shown = self.shown_in_tree(processes, &parent);
        let sort = |list: &mut Vec<usize>| list.sort_by(|&a, &b| self.compare(processes, a, b));
        sort(&mut roots);
        for list in &mut children {
            sort(list);
        }
        let mut rows = Vec::new();
        // (node, glyphs of its ancestors' columns, is it its parent's last child, depth)
        let mut stack: Vec<(usize, String, bool, usize)> = roots
            .iter()
            .rev()
            .filter(|&&r| shown[r])
            .map(|&r| (r, String::new(), true, 0))
            .collect();
        while let Some((i, lead, last, depth)) = stack.pop() {
            let kids: Vec<usize> = children[i].iter().copied().filter(|&c| shown[c]).collect();
            let prefix = if depth == 0 {
                String::new()
            } else {
                format!("{lead}{}", if last { "└─ " } else { "├─ " })
            };
            let id = processes[i].id;
            let folded = (self.folded.contains(&id) && !children[i].is_empty())
                .then(|| subtree(processes, &children, i));
            if folded.is_none() {
                let lead = if depth == 0 {
                    String::new()
                } else {
                    format!("{lead}{}", if last { "   " } else { "│  " })
                };
                for (k, &c) in kids.iter().enumerate().rev() {
                    stack.push((c, lead.clone(), k + 1 == kids.len(), depth + 1));
                }
            }
            rows.push(Row {
                index: i,
                id,
                prefix,
                has_children: !children[i].is_empty(),
                folded,
                thread: None,
                cgroup: None,
            });
        }
        rows
    }

    /// Which processes the tree shows: all of them, or with a filter the matches and their
    /// ancestors, so the tree stays readable; kernel threads without `K`: none of them
    /// (their children are kernel threads too).
    fn shown_in_tree(&self, processes: &[LiveProcess], parent: &[Option<usize>]) -> Vec<bool> {
        let everything = self.filter.is_empty() && self.kernel_threads;
        let mut shown = vec![everything; processes.len()];
        if !everything {
            for i in (0..processes.len()).filter(|&i| self.matches(&processes[i])) {
                let mut at = Some(i);
                while let Some(j) = at {
                    if shown[j] {
                        break;
                    }
                    shown[j] = true;
                    at = parent[j];
                }
            }
        }
        shown
    }
}

/// Each process's parent among `processes` (by index), with no cycles: a pid seen twice
/// (reused after an exit) names the live one, and a process that reaches itself through
/// its parents (pid reuse can make that) becomes a root.
fn parents(processes: &[LiveProcess]) -> Vec<Option<usize>> {
    let n = processes.len();
    let mut by_pid: HashMap<u32, usize> = HashMap::new();
    for (i, p) in processes.iter().enumerate() {
        match by_pid.get(&p.pid) {
            Some(&j) if processes[j].alive && !p.alive => {}
            _ => {
                by_pid.insert(p.pid, i);
            }
        }
    }
    let mut parent: Vec<Option<usize>> = processes
        .iter()
        .enumerate()
        .map(|(i, p)| {
            p.ppid
                .and_then(|pp| by_pid.get(&pp).copied())
                .filter(|&j| j != i)
        })
        .collect();
    let in_cycle: Vec<usize> = (0..n)
        .filter(|&i| {
            let mut at = parent[i];
            let mut steps = 0;
            while let Some(j) = at {
                if j == i || steps > n {
                    return true;
                }
                at = parent[j];
                steps += 1;
            }
            false
        })
        .collect();
    for i in in_cycle {
        parent[i] = None;
    }
    parent
}

/// The roots (no parent) and each process's children, in the order of `parent`.
fn children_of(parent: &[Option<usize>]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); parent.len()];
    let mut roots = Vec::new();
    for (i, up) in parent.iter().enumerate() {
        match up {
            Some(j) => children[*j].push(i),
            None => roots.push(i),
        }
    }
    (roots, children)
}

/// A process and everything below it, added up.
fn subtree(processes: &[LiveProcess], children: &[Vec<usize>], root: usize) -> Subtree {
    let mut sum = Subtree::default();
    let mut stack = vec![root];
    while let Some(i) = stack.pop() {
        sum.add(&processes[i]);
        if i != root {
            sum.hidden += 1;
        }
        stack.extend(&children[i]);
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ui::testdata;

    fn press(app: &mut App, keys: &str) {
        for c in keys.chars() {
            app.handle_key(KeyEvent::from(KeyCode::Char(c)));
        }
    }

    fn key(app: &mut App, code: KeyCode) -> Action {
        app.handle_key(KeyEvent::from(code))
    }

    fn pids(app: &App) -> Vec<u32> {
        let report = app.report.as_ref().unwrap();
        app.rows()
            .iter()
            .map(|r| report.processes[r.index].pid)
            .collect()
    }

    fn app() -> App {
        let mut app = App::new(
            ViewConfig {
                refresh: Duration::from_secs(1),
                command_output: None,
            },
            testdata::users(),
        );
        app.update(testdata::report());
        app
    }

    #[test]
    fn h_lists_the_selected_processs_threads_under_it_and_again_hides_them() {
        let mut app = app();
        app.update(testdata::report_with_threads());
        let at = pids(&app).iter().position(|&p| p == 1200).unwrap();
        app.cursor = at;
        app.selected = Some(app.rows[at].id);
        let before = app.rows().len();
        press(&mut app, "H");
        assert_eq!(app.rows().len(), before + 3);
        let threads: Vec<Option<usize>> = app.rows()[at + 1..at + 4]
            .iter()
            .map(|r| r.thread)
            .collect();
        assert_eq!(threads, [Some(0), Some(1), Some(2)]);
        assert!(
            app.rows()[at + 1..at + 4]
                .iter()
                .all(|r| r.id == app.rows()[at].id)
        );
        // New figures keep them listed; the cursor stays on the process.
        app.update(testdata::report_with_threads());
        assert_eq!(app.rows().len(), before + 3);
        assert_eq!(app.selected_process().unwrap().pid, 1200);
        press(&mut app, "H");
        assert_eq!(app.rows().len(), before);
        // Out of the tree view Enter does the same; in it, Enter folds and H still expands.
        key(&mut app, KeyCode::Enter);
        assert_eq!(app.rows().len(), before + 3);
        key(&mut app, KeyCode::Enter);
        assert_eq!(app.rows().len(), before);
        press(&mut app, "t");
        let at = pids(&app).iter().position(|&p| p == 1200).unwrap();
        app.cursor = at;
        app.selected = Some(app.rows[at].id);
        let before = app.rows().len();
        press(&mut app, "H");
        assert_eq!(app.rows().len(), before + 3);
        assert_eq!(app.rows()[at + 1].thread, Some(0));
    }

    #[test]
    fn sorts_by_power_first_and_by_any_column_on_its_key() {
        let mut app = app();
        assert_eq!(app.sort, SortKey::Power);
        assert_eq!(pids(&app), [1200, 1201, 1202, 880, 1, 1203]);
        press(&mut app, "p");
        assert_eq!(pids(&app), [1, 880, 1200, 1201, 1202, 1203]);
        press(&mut app, "p");
        assert_eq!(
            pids(&app),
            [1203, 1202, 1201, 1200, 880, 1],
            "again: reversed"
        );
        press(&mut app, "e");
        assert!(app.descending);
        assert_eq!(pids(&app)[0], 1200);
        press(&mut app, "u");
        assert_eq!(pids(&app)[..2], [1200, 1201], "alice before root");
        press(&mut app, "n");
        assert_eq!(pids(&app)[0], 1203, "/bin/sh sorts first");
        press(&mut app, ">");
        assert_eq!(app.sort, SortKey::Pid, "> wraps around to the first column");
        press(&mut app, "<<");
        assert_eq!(app.sort, SortKey::Share);
        press(&mut app, "r");
        assert!(!app.descending);
    }

    #[test]
    fn c_groups_rows_by_cgroup_adding_up_each_groups_processes() {
        let mut app = app();
        press(&mut app, "C");
        assert!(app.cgroups);
        let names = |app: &App| -> Vec<String> {
            app.rows()
                .iter()
                .map(|r| r.cgroup.clone().expect("a cgroup row"))
                .collect()
        };
        // By power: make 6 + cc1 3 + sh 0.5 W, then the container's cc1, sshd, init.
        assert_eq!(
            names(&app),
            [
                "session-3.scope",
                "docker:3f4e1b2c5d6a",
                "ssh.service",
                "init.scope"
            ]
        );
        let session = app.rows()[0].folded.clone().unwrap();
        assert_eq!(session.hidden, 2);
        let report = app.report.as_ref().unwrap();
        let members: Vec<&LiveProcess> = report
            .processes
            .iter()
            .filter(|p| p.cgroup.as_deref() == Some("session-3.scope"))
            .collect();
        let sum = |f: fn(&LiveProcess) -> f64| members.iter().map(|p| f(p)).sum::<f64>();
        assert_eq!(session.power_w, sum(|p| p.power_w));
        assert_eq!(session.energy_j, sum(|p| p.energy_j));
        assert_eq!(session.cpu_time_s, sum(|p| p.cpu_time_s));
        assert_eq!(session.share_pct, sum(|p| p.share_pct));
        assert_eq!(session.domain_power_w, [sum(|p| p.power_w)]);
        assert_eq!(
            pids(&app)[0],
            1200,
            "the group's biggest process stands for it"
        );
        // Names sort ascending; a filter matches cgroup names too.
        press(&mut app, "n");
        assert_eq!(
            names(&app),
            [
                "docker:3f4e1b2c5d6a",
                "init.scope",
                "session-3.scope",
                "ssh.service"
            ]
        );
        press(&mut app, "/docker");
        key(&mut app, KeyCode::Enter);
        assert_eq!(names(&app), ["docker:3f4e1b2c5d6a"]);
        // A group is not a process to signal.
        press(&mut app, "k");
        assert!(app.signal_menu.is_none() && app.message.is_some());
        // The tree and the cgroup view exclude each other.
        press(&mut app, "t");
        assert!(app.tree && !app.cgroups);
        press(&mut app, "C");
        assert!(!app.tree && app.cgroups);
        press(&mut app, "C");
        assert!(app.rows().iter().all(|r| r.cgroup.is_none()));
    }

    #[test]
    fn filter_by_name_or_pid_and_escape_clears_it() {
        let mut app = app();
        assert_eq!(key(&mut app, KeyCode::Char('/')), Action::Redraw);
        assert!(app.editing_filter);
        press(&mut app, "WORK");
        assert_eq!(
            pids(&app),
            [1201, 1202],
            "case-insensitive, on the command line"
        );
        // While typing, q is text, not quit.
        assert_eq!(key(&mut app, KeyCode::Char('q')), Action::Redraw);
        assert!(app.rows().is_empty());
        key(&mut app, KeyCode::Backspace);
        key(&mut app, KeyCode::Enter);
        assert!(!app.editing_filter);
        assert_eq!(app.filter, "WORK");
        assert_eq!(pids(&app), [1201, 1202]);
        key(&mut app, KeyCode::Esc);
        assert_eq!(pids(&app).len(), 6);
        press(&mut app, "/88");
        assert_eq!(pids(&app), [880], "pid prefix");
        key(&mut app, KeyCode::Esc);
        assert!(app.filter.is_empty() && !app.editing_filter);
    }

    #[test]
    fn tree_view_nests_children_and_folds_them() {
        let mut app = app();
        press(&mut app, "t");
        assert!(app.tree);
        // 1 (init) > 880 (sshd) > 1200 (make) > 1201, 1202 (workers), 1203 (sh); by power.
        assert_eq!(pids(&app), [1, 880, 1200, 1201, 1202, 1203]);
        let prefixes: Vec<&str> = app.rows().iter().map(|r| r.prefix.as_str()).collect();
        assert_eq!(
            prefixes,
            ["", "└─ ", "   └─ ", "      ├─ ", "      ├─ ", "      └─ "]
        );
        // make, selected in the list, stays selected in the tree; fold it: its subtree adds
        // up under it.
        assert_eq!(app.selected_process().unwrap().pid, 1200);
        key(&mut app, KeyCode::Enter);
        assert_eq!(pids(&app), [1, 880, 1200]);
        let folded = app.rows()[2].folded.clone().unwrap();
        assert_eq!(folded.hidden, 3);
        assert!((folded.power_w - (6.0 + 3.0 + 2.0 + 0.5)).abs() < 1e-9);
        // Every column that adds up: CPU seconds and each domain's power too.
        let (cpu_s, domains): (f64, Vec<f64>) = {
            let r = app.report.as_ref().unwrap();
            let under: Vec<&LiveProcess> = r.processes.iter().filter(|p| p.pid >= 1200).collect();
            (
                under.iter().map(|p| p.cpu_time_s).sum(),
                vec![under.iter().map(|p| p.domain_power_w[0]).sum()],
            )
        };
        assert!(cpu_s > 30.0);
        assert!((folded.cpu_time_s - cpu_s).abs() < 1e-9, "{folded:?}");
        assert_eq!(folded.domain_power_w.len(), 1);
        assert!(
            (folded.domain_power_w[0] - domains[0]).abs() < 1e-9,
            "{folded:?}"
        );
        key(&mut app, KeyCode::Right);
        assert_eq!(pids(&app).len(), 6);
        // A filter keeps the matches' ancestors.
        press(&mut app, "/sh");
        key(&mut app, KeyCode::Enter);
        assert_eq!(pids(&app), [1, 880, 1200, 1203]);
    }

    /// `make` (1200), on the first row, exits: its power drops and it sinks.
    fn make_exits() -> LiveReport {
        let mut next = testdata::report();
        let make = next.processes.iter_mut().find(|p| p.pid == 1200).unwrap();
        make.alive = false;
        make.power_w = 0.0;
        make.cpu_pct = 0.0;
        next
    }

    #[test]
    fn the_cursor_keeps_its_row_when_the_selected_process_sinks() {
        let mut app = app();
        assert_eq!(
            (app.cursor(), app.selected_process().unwrap().pid),
            (0, 1200)
        );
        app.update(make_exits());
        assert_eq!(pids(&app)[5], 1200, "make sank to the bottom");
        assert_eq!(app.cursor(), 0, "the cursor stays on the first row");
        assert_eq!(app.selected_process().unwrap().pid, 1201);
        // A process that leaves the list: the cursor stays on its row (the last one at most).
        key(&mut app, KeyCode::End);
        let mut next = make_exits();
        next.processes.retain(|p| p.pid != 1200);
        app.update(next);
        assert_eq!(app.cursor(), 4);
        // The user's own changes to the view keep the selected process.
        key(&mut app, KeyCode::Home);
        key(&mut app, KeyCode::Down);
        assert_eq!(app.selected_process().unwrap().pid, 1202);
        press(&mut app, "p");
        assert_eq!(app.selected_process().unwrap().pid, 1202);
        press(&mut app, "t");
        assert_eq!(app.selected_process().unwrap().pid, 1202);
    }

    #[test]
    fn with_f_the_cursor_follows_its_process_until_moved() {
        let mut app = app();
        assert!(!app.follow);
        assert_eq!(key(&mut app, KeyCode::Char('F')), Action::Redraw);
        assert!(app.follow);
        app.update(make_exits());
        assert_eq!(app.cursor(), 5, "followed to the bottom");
        assert_eq!(app.selected_process().unwrap().pid, 1200);
        // A move ends following, as in htop.
        key(&mut app, KeyCode::Up);
        assert!(!app.follow);
        assert_eq!(app.selected_process().unwrap().pid, 1203);
        app.update(testdata::report());
        assert_eq!(app.cursor(), 4);
        // Following ends when the process leaves the list.
        key(&mut app, KeyCode::Home);
        key(&mut app, KeyCode::Down);
        key(&mut app, KeyCode::Down);
        press(&mut app, "F");
        assert_eq!(app.selected_process().unwrap().pid, 1202);
        let mut next = testdata::report();
        next.processes.retain(|p| p.pid != 1202);
        app.update(next);
        assert!(!app.follow);
        key(&mut app, KeyCode::End);
        assert_eq!(app.cursor(), app.rows().len() - 1);
        key(&mut app, KeyCode::Home);
        assert_eq!(app.cursor(), 0);
        key(&mut app, KeyCode::Up);
        assert_eq!(app.cursor(), 0);
    }

    #[test]
    fn k_asks_which_signal_sigterm_first_and_esc_sends_none() {
        let mut app = app();
        assert_eq!(app.selected_process().unwrap().pid, 1200);
        assert_eq!(key(&mut app, KeyCode::Char('k')), Action::Redraw);
        let menu = app.signal_menu.clone().unwrap();
        assert_eq!((menu.pid, SIGNALS[menu.choice].1), (1200, "SIGTERM"));
        // While the menu is open, keys are the menu's: q does not quit.
        assert_eq!(key(&mut app, KeyCode::Char('q')), Action::Redraw);
        assert!(app.signal_menu.is_none());
        assert_eq!(app.message.as_deref(), Some("no signal sent"));
        press(&mut app, "k");
        assert_eq!(
            key(&mut app, KeyCode::Enter),
            Action::Signal {
                pid: 1200,
                signal: libc::SIGTERM
            }
        );
        assert!(app.signal_menu.is_none());
        app.signal_sent(1200, libc::SIGTERM, Ok(()));
        assert_eq!(app.message.as_deref(), Some("sent SIGTERM to 1200"));
        // Another signal from the list, by arrow or by number.
        press(&mut app, "k");
        key(&mut app, KeyCode::Down);
        assert_eq!(
            key(&mut app, KeyCode::Enter),
            Action::Signal {
                pid: 1200,
                signal: libc::SIGKILL
            }
        );
        press(&mut app, "k6");
        assert_eq!(
            key(&mut app, KeyCode::Enter),
            Action::Signal {
                pid: 1200,
                signal: libc::SIGSTOP
            }
        );
        app.signal_sent(
            1200,
            libc::SIGSTOP,
            Err("No such process (os error 3)".into()),
        );
        assert_eq!(
            app.message.as_deref(),
            Some("kill(1200, SIGSTOP): No such process (os error 3)")
        );
        // The next key clears the message.
        key(&mut app, KeyCode::Down);
        assert!(app.message.is_none());
    }

    #[test]
    fn k_on_init_needs_a_second_yes_and_an_exited_process_gets_none() {
        let mut app = app();
        // Rows by power: 1200 1201 1202 880 1 1203 (exited).
        key(&mut app, KeyCode::End);
        assert_eq!(app.selected_process().unwrap().pid, 1203);
        assert_eq!(key(&mut app, KeyCode::Char('k')), Action::Redraw);
        assert!(app.signal_menu.is_none());
        assert!(app.message.as_deref().unwrap().contains("has exited"));
        key(&mut app, KeyCode::Up);
        assert_eq!(app.selected_process().unwrap().pid, 1);
        press(&mut app, "k");
        assert_eq!(key(&mut app, KeyCode::Enter), Action::Redraw);
        assert_eq!(
            app.signal_menu.as_ref().unwrap().confirm,
            Some("pid 1 is init")
        );
        // Anything but y cancels.
        assert_eq!(key(&mut app, KeyCode::Enter), Action::Redraw);
        assert!(app.signal_menu.is_none());
        press(&mut app, "k");
        key(&mut app, KeyCode::Enter);
        assert_eq!(
            key(&mut app, KeyCode::Char('y')),
            Action::Signal {
                pid: 1,
                signal: libc::SIGTERM
            }
        );
    }

    #[test]
    fn d_shows_the_selected_processs_power_history_kept_per_process() {
        let mut app = app();
        assert_eq!(key(&mut app, KeyCode::Char('d')), Action::Redraw);
        assert!(app.details);
        for i in 0..(POWER_HISTORY_POINTS + 5) {
            let mut next = testdata::report();
            next.processes[2].power_w = i as f64;
            app.update(next);
        }
        // make (1200): the first update (6 W) and 305 more, the oldest dropped.
        let history = app.selected_power_history().unwrap();
        assert_eq!(history.len(), POWER_HISTORY_POINTS);
        assert_eq!(history.back(), Some(&((POWER_HISTORY_POINTS + 4) as f64)));
        // A process that leaves the list is forgotten.
        let mut next = testdata::report();
        next.processes.retain(|p| p.pid != 1200);
        app.update(next);
        assert!(app.power_history.keys().all(|&id| id != 2));
        assert_eq!(app.power_history.len(), 5);
        press(&mut app, "d");
        assert!(!app.details);
    }

    #[test]
    fn pause_holds_new_figures_until_resumed() {
        let mut app = app();
        press(&mut app, " ");
        assert!(app.paused);
        let mut next = testdata::report();
        next.elapsed_s = 99.0;
        app.update(next);
        assert_ne!(app.report.as_ref().unwrap().elapsed_s, 99.0);
        press(&mut app, " ");
        assert_eq!(app.report.as_ref().unwrap().elapsed_s, 99.0);
    }

    #[test]
    fn quit_on_q_or_ctrl_c_and_help_closes_on_any_key() {
        let mut app = app();
        assert_eq!(key(&mut app, KeyCode::Char('?')), Action::Redraw);
        assert!(app.help);
        assert_eq!(key(&mut app, KeyCode::Char('x')), Action::Redraw);
        assert!(!app.help);
        assert_eq!(key(&mut app, KeyCode::Char('q')), Action::Quit);
        press(&mut app, "/");
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(
            app.handle_key(ctrl_c),
            Action::Quit,
            "even while typing a filter"
        );
        assert_eq!(key(&mut app, KeyCode::F(12)), Action::Nothing);
    }

    #[test]
    fn functions_of_the_selected_process_most_energy_first() {
        let mut app = app();
        assert!(
            app.selected_functions().is_empty(),
            "no function figures at all"
        );
        app.update(testdata::report_with_functions());
        // make (1200) is selected first; then the worker 1201, and a process without any.
        assert_eq!(app.selected_functions().len(), 1);
        key(&mut app, KeyCode::Down);
        let names: Vec<&str> = app
            .selected_functions()
            .iter()
            .map(|f| f.symbol.as_str())
            .collect();
        assert_eq!(names, ["compress_block", "checksum"]);
        key(&mut app, KeyCode::Down);
        assert!(app.selected_functions().is_empty());
    }

    #[test]
    fn parents_follow_the_live_pid_and_cycles_become_roots() {
        let base = testdata::report().processes[0].clone();
        let p = |pid, ppid, alive| LiveProcess {
            pid,
            ppid,
            alive,
            ..base.clone()
        };
        let processes = [
            // pid 10 reused: the exited one, then the live one, which 11 is a child of.
            p(10, Some(1), false),
            p(10, Some(1), true),
            p(11, Some(10), true),
            // The live 12 listed first keeps its children from the exited 12 after it.
            p(12, None, true),
            p(12, None, false),
            p(13, Some(12), true),
            // 20 and 21 each other's parent (pid reuse): both roots.
            p(20, Some(21), true),
            p(21, Some(20), true),
            // A parent that is not listed, and one's own pid as parent: roots.
            p(30, Some(99), true),
            p(31, Some(31), true),
        ];
        let parent = parents(&processes);
        assert_eq!(
            parent,
            [
                None,
                None,
                Some(1),
                None,
                None,
                Some(3),
                None,
                None,
                None,
                None
            ]
        );
        let (roots, children) = children_of(&parent);
        assert_eq!(roots, [0, 1, 3, 4, 6, 7, 8, 9]);
        assert_eq!((&children[1], &children[3]), (&vec![2], &vec![5]));
    }
}
