//! Which accounting a run uses (`--accounting`), and why. The `sched_switch` program is the
//! default; the task iterator (no program on context switches) is chosen with `--accounting
//! iterator`, and refused where the run needs per-switch clocks (`--func`). It is not the
//! default yet: on the development VM a task's final runtime (`sched_process_free`) now and
//! then never reaches the agent, and a short process whose final runtime is lost comes out
//! short (see docs/attribution.md).
//!
//! And the session's side of the accounting step ([`crate::accounting`]): which process a
//! thread's time goes to ([`interval_of`]), and when an exited thread or process may be
//! forgotten ([`settle_exits`]). The session's sampler and serve's churn benchmark both run
//! these.

use cg_common::ThreadKey;

use crate::{
    attribution::{Coverage, Interval, ProcId},
    probes::{
        Accounting,
        activity::{Activity, ActivityTracker, Snapshot},
        task_walk::WalkReads,
    },
    sources::{DomainKind, DomainSpec},
};

use super::processes::{Cleanup, ProcessTable};

/// The accounting of a run and the reason for it (the report's `meta.accounting`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct AccountingChoice {
    /// `iterator` or `switch`.
    pub method: &'static str,
    pub reason: String,
    /// Iterator accounting: how the threads were walked, `task_walk` (the open-coded walk,
    /// kernel 6.7+) or `iter_task` (the task iterator); absent in switch accounting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub walker: Option<&'static str>,
    /// The open-coded walk: how many of the run's reads walked the task list, re-read the
    /// last read's threads, or amended and re-read them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reads: Option<WalkReads>,
}

impl AccountingChoice {
    fn new(accounting: Accounting, reason: impl Into<String>) -> Self {
        AccountingChoice {
            method: accounting.as_str(),
            reason: reason.into(),
            walker: None,
            reads: None,
        }
    }

    /// Says how the open-coded walk's reads of the run were served.
    pub fn with_reads(mut self, reads: Option<WalkReads>) -> Self {
        self.reads = reads;
        self
    }

    /// Says, in iterator accounting, how the threads were walked (and why not with the
    /// open-coded walk, when not).
    pub fn with_walker(mut self, walker: Option<crate::probes::WalkerUsed>) -> Self {
        if self.accounting() != Accounting::Iterator {
            return self;
        }
        if let Some(walker) = walker {
            self.reason.push_str(&match &walker.why {
                None => "; threads walked by the open-coded task walk".to_string(),
                Some(why) => format!("; threads walked by the iter/task program ({why})"),
            });
            self.walker = Some(walker.name);
        }
        self
    }

    /// Says, in iterator accounting, where threads' final runtimes come from: the second
    /// hook on a task's free (`free_backup`) is attached only where the kernel allows fentry
    /// programs.
    pub fn with_final_runtimes(mut self, free_backup: bool) -> Self {
        if self.accounting() == Accounting::Iterator {
            self.reason.push_str(if free_backup {
                "; final runtimes from sched_process_free and fentry on __put_task_struct"
            } else {
                "; final runtimes from sched_process_free alone (this kernel refused the \
                 fentry program on __put_task_struct)"
            });
        }
        self
    }

    /// The accounting chosen.
    pub fn accounting(&self) -> Accounting {
        if self.method == Accounting::Switch.as_str() {
            Accounting::Switch
        } else {
            Accounting::Iterator
        }
    }
}

/// What the choice depends on besides the user's word.
#[derive(Clone, Copy, Debug)]
pub struct Needs<'a> {
    /// The run's energy domains.
    pub domains: &'a [DomainSpec],
    pub cpu_count: usize,
    /// `--func`: uprobes whose on-CPU clock comes from each context switch.
    pub function_probes: bool,
    /// `--bench-noop-probes`: an empty sched_switch program is what is measured.
    pub noop_switch: bool,
}

/// Chooses the accounting; `asked` is `--accounting`. An ask that cannot be honoured is a
/// usage error that says what to do.
pub fn choose(asked: Option<Accounting>, needs: Needs<'_>) -> Result<AccountingChoice, String> {
    let switch_need = switch_need(needs);
    match (asked, switch_need) {
        (Some(Accounting::Iterator), Some(need)) if needs.function_probes || needs.noop_switch => {
            Err(format!(
                "--accounting iterator cannot serve this run: {need}; use --accounting switch \
                 (or leave --accounting out)"
            ))
        }
        (Some(accounting), _) => Ok(AccountingChoice::new(
            accounting,
            "asked for with --accounting",
        )),
        (None, Some(need)) => Ok(AccountingChoice::new(Accounting::Switch, need)),
        (None, None) => Ok(AccountingChoice::new(
            Accounting::Switch,
            "the default (every CPU energy domain covers all CPUs, so --accounting iterator \
             would serve too)",
        )),
    }
}

/// Why this run needs the sched_switch program, if it does.
fn switch_need(needs: Needs<'_>) -> Option<String> {
    if needs.function_probes {
        return Some("--func needs each thread's on-CPU clock at every context switch".into());
    }
    if needs.noop_switch {
        return Some("--bench-noop-probes measures an empty sched_switch program".into());
    }
    let partial = needs.domains.iter().find(|d| {
        d.kind != DomainKind::Gpu
            && match &d.coverage {
                Coverage::Cpus(cpus) => (0..needs.cpu_count as u32).any(|c| !cpus.contains(&c)),
                Coverage::AllCpus | Coverage::Gpu(_) => false,
            }
    })?;
    Some(format!(
        "domain {} covers only some CPUs (several packages), so its energy is split by the \
         time each thread spent on each CPU",
        partial.name
    ))
}

/// The interval of `activity` ([`crate::accounting::interval_of`]): in the run (`run`), each
/// thread's time goes to its process in `table` (the thread named as met); before it, all of
/// it is other.
pub fn interval_of(
    table: &mut ProcessTable,
    activity: &Activity,
    run_start_ns: u64,
    wall_start_ns: u64,
    run: bool,
) -> Interval {
    let mut process_of = |thread: ThreadKey| {
        let id = table.id_of_thread(thread, activity.start_ns);
        table.name_thread(id, thread);
        id
    };
    let process_of: Option<&mut dyn FnMut(ThreadKey) -> ProcId> = run.then_some(&mut process_of);
    crate::accounting::interval_of(activity, run_start_ns, wall_start_ns, process_of)
}

/// Settles the cleanup owed since the previous snapshot (`done`): a thread that a CPU still
/// runs (an exit can take a while) or caches time for keeps its entry until that time is
/// final (deleting it now would count that time twice), and so does one whose time was read
/// but is still carried to later intervals; a process stops being followed once its last time
/// is read (the kernel stops treating its pid as a target itself, when the process is freed).
/// Returns what still waits, and the threads to delete from the kernel's maps (the tracker
/// has forgotten them).
pub fn settle_exits(
    mut done: Cleanup,
    snapshot: &Snapshot,
    tracker: &mut ActivityTracker,
    table: &mut ProcessTable,
) -> (Cleanup, Vec<ThreadKey>) {
    let (wait_threads, delete): (Vec<ThreadKey>, Vec<ThreadKey>) = done
        .threads
        .drain(..)
        .partition(|t| snapshot.holds(t.tgid, Some(t.tid)) || tracker.owes(t.tgid, Some(t.tid)));
    tracker.forget_all(&delete);
    let records = table.records();
    let (wait_processes, retire): (Vec<ProcId>, Vec<ProcId>) =
        done.processes.drain(..).partition(|&id| {
            let pid = records[id as usize].pid;
            snapshot.holds(pid, None) || tracker.owes(pid, None)
        });
    for id in retire {
        table.retire(id);
    }
    let wait = Cleanup {
        threads: wait_threads,
        processes: wait_processes,
    };
    (wait, delete)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::Provenance;

    fn domain(name: &str, kind: DomainKind, coverage: Coverage) -> DomainSpec {
        DomainSpec {
            name: name.into(),
            kind,
            parent: None,
            coverage,
            provenance: Provenance::Measured,
            source: "test",
        }
    }

    #[test]
    fn iterator_accounting_says_where_final_runtimes_come_from() {
        let asked = |a| choose(Some(a), needs(&[])).unwrap();
        let both = asked(Accounting::Iterator).with_final_runtimes(true);
        assert!(
            both.reason
                .ends_with("sched_process_free and fentry on __put_task_struct")
        );
        let alone = asked(Accounting::Iterator).with_final_runtimes(false);
        assert!(
            alone.reason.contains("sched_process_free alone"),
            "{}",
            alone.reason
        );
        // Switch accounting needs no final runtime: its reason stands.
        let switch = asked(Accounting::Switch);
        assert_eq!(switch.clone().with_final_runtimes(false), switch);
    }

    #[test]
    fn iterator_accounting_says_which_walker_ran() {
        use crate::probes::WalkerUsed;
        let asked = |a| choose(Some(a), needs(&[])).unwrap();
        let open = asked(Accounting::Iterator).with_walker(Some(WalkerUsed {
            name: "task_walk",
            why: None,
        }));
        assert_eq!(open.walker, Some("task_walk"));
        assert!(
            open.reason.ends_with("open-coded task walk"),
            "{}",
            open.reason
        );
        let iter = asked(Accounting::Iterator).with_walker(Some(WalkerUsed {
            name: "iter_task",
            why: Some("no kfunc bpf_iter_task_new".into()),
        }));
        assert_eq!(iter.walker, Some("iter_task"));
        assert!(
            iter.reason.ends_with("(no kfunc bpf_iter_task_new)"),
            "{}",
            iter.reason
        );
        let switch = asked(Accounting::Switch);
        assert_eq!(switch.clone().with_walker(None), switch);
        let json = serde_json::to_value(&switch).unwrap();
        assert!(json.get("walker").is_none(), "{json}");
    }

    fn needs(domains: &[DomainSpec]) -> Needs<'_> {
        Needs {
            domains,
            cpu_count: 4,
            function_probes: false,
            noop_switch: false,
        }
    }

    #[test]
    fn the_switch_program_is_the_default_and_says_the_iterator_would_serve() {
        let one_package = [
            domain(
                "package-0",
                DomainKind::Package,
                Coverage::Cpus(vec![0, 1, 2, 3]),
            ),
            domain("gpu0", DomainKind::Gpu, Coverage::Gpu(0)),
        ];
        let chosen = choose(None, needs(&one_package)).unwrap();
        assert_eq!(chosen.accounting(), Accounting::Switch);
        assert!(
            chosen.reason.contains("iterator would serve"),
            "{}",
            chosen.reason
        );
        let model = [domain("model", DomainKind::Model, Coverage::AllCpus)];
        let asked = choose(Some(Accounting::Iterator), needs(&model)).unwrap();
        assert_eq!(asked.method, "iterator");
    }

    #[test]
    fn several_packages_and_function_probes_take_the_switch_program() {
        let two_packages = [
            domain("package-0", DomainKind::Package, Coverage::Cpus(vec![0, 1])),
            domain("package-1", DomainKind::Package, Coverage::Cpus(vec![2, 3])),
        ];
        let chosen = choose(None, needs(&two_packages)).unwrap();
        assert_eq!(chosen.accounting(), Accounting::Switch);
        assert!(chosen.reason.contains("package-0"), "{}", chosen.reason);
        let model = [domain("model", DomainKind::Model, Coverage::AllCpus)];
        let func = Needs {
            function_probes: true,
            ..needs(&model)
        };
        assert_eq!(choose(None, func).unwrap().method, "switch");
    }

    #[test]
    fn the_users_word_wins_unless_the_run_cannot_do_without_switches() {
        let two_packages = [
            domain("package-0", DomainKind::Package, Coverage::Cpus(vec![0, 1])),
            domain("package-1", DomainKind::Package, Coverage::Cpus(vec![2, 3])),
        ];
        let chosen = choose(Some(Accounting::Iterator), needs(&two_packages)).unwrap();
        assert_eq!(chosen.accounting(), Accounting::Iterator);
        assert_eq!(chosen.reason, "asked for with --accounting");
        let model = [domain("model", DomainKind::Model, Coverage::AllCpus)];
        let asked_switch = choose(Some(Accounting::Switch), needs(&model)).unwrap();
        assert_eq!(asked_switch.accounting(), Accounting::Switch);
        let func = Needs {
            function_probes: true,
            ..needs(&model)
        };
        let err = choose(Some(Accounting::Iterator), func).unwrap_err();
        assert!(err.contains("--accounting switch"), "{err}");
    }
}
