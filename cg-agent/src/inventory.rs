//! `cg-trace sources`: what energy sources this machine offers, what each measures, whether it
//! can be read with the current privileges (and why not), and which ones `--source auto` would
//! use, now and as root. The first thing to run on a new machine; needs no root and loads no
//! eBPF.

use std::fmt::Write as _;

use serde::Serialize;

use crate::{
    host::HostInfo,
    printable::{printable, printable_lines},
    privileges,
    sources::{
        self, SourceChoice, SourceOptions, SourceProbe, select::auto_choice_with_privileges,
    },
};

/// Everything `cg-trace sources` says (its `--json` form).
#[derive(Clone, Debug, Serialize)]
pub struct Inventory {
    pub uid: u32,
    pub root: bool,
    /// Every source probed, in order of preference.
    pub sources: Vec<SourceProbe>,
    /// What `--source auto` uses with the current privileges.
    pub auto: AutoChoice,
    /// What `--source auto` would use as root (or with CAP_PERFMON).
    pub auto_as_root: Vec<&'static str>,
    /// Whether this process may load cg-trace's eBPF probes (tracing itself).
    pub tracing: Tracing,
}

#[derive(Clone, Debug, Serialize)]
pub struct AutoChoice {
    pub sources: Vec<&'static str>,
    pub reason: String,
    /// Warnings from choosing (perf and powercap disagreeing, NVML failing).
    pub warnings: Vec<String>,
    /// Why `auto` cannot run at all (an unreadable power log).
    pub error: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Tracing {
    pub allowed: bool,
    pub reason: String,
}

/// Probes everything `options` point at.
pub fn gather(options: &SourceOptions, host: &HostInfo) -> Inventory {
    let sources = sources::probe_all(options, host);
    let auto_options = SourceOptions {
        choice: SourceChoice::Auto,
        ..options.clone()
    };
    let auto = match sources::select(&auto_options, host) {
        Ok(selection) => AutoChoice {
            sources: selection.sources.iter().map(|s| s.name()).collect(),
            reason: selection.reason,
            warnings: selection.notes.into_iter().map(|n| n.text).collect(),
            error: None,
        },
        Err(err) => AutoChoice {
            sources: Vec::new(),
            reason: String::new(),
            warnings: Vec::new(),
            error: Some(err.to_string()),
        },
    };
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let tracing = match privileges::check_can_trace() {
        Ok(()) => Tracing {
            allowed: true,
            reason: "root or CAP_BPF and CAP_PERFMON: the probes can be loaded".into(),
        },
        Err(reason) => Tracing {
            allowed: false,
            reason,
        },
    };
    Inventory {
        uid,
        root: uid == 0,
        auto_as_root: auto_choice_with_privileges(&sources),
        sources,
        auto,
        tracing,
    }
}

/// Renders the table form.
pub fn render(inv: &Inventory) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "cg-trace sources (uid {}{})\n",
        inv.uid,
        if inv.root { ", root" } else { ", not root" }
    );
    let _ = writeln!(
        out,
        "{:<10} {:<10} {:<22} DOMAINS",
        "SOURCE", "PROVENANCE", "STATUS"
    );
    for p in &inv.sources {
        let status = p.status.describe();
        let domains = if p.domains.is_empty() {
            "-".to_string()
        } else {
            p.domains
                .iter()
                .map(|d| match &d.parent {
                    Some(parent) => format!("{} (in {parent})", d.name),
                    None => d.name.clone(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let domains = printable(&domains);
        let _ = writeln!(
            out,
            "{:<10} {:<10} {:<22} {domains}",
            p.name,
            p.provenance.as_str(),
            status
        );
        let _ = writeln!(out, "{:<10} {}", "", printable(&p.reason));
    }
    let _ = writeln!(out);
    match &inv.auto.error {
        Some(err) => {
            let _ = writeln!(out, "auto:     cannot run: {}", printable(err));
        }
        None => {
            let _ = writeln!(
                out,
                "auto:     uses {} ({})",
                inv.auto.sources.join(" + "),
                printable(&inv.auto.reason)
            );
        }
    }
    for warning in &inv.auto.warnings {
        let _ = writeln!(out, "          warning: {}", printable(warning));
    }
    if !inv.root {
        let _ = writeln!(
            out,
            "as root:  auto would use {}{}",
            inv.auto_as_root.join(" + "),
            if inv.sources.iter().any(|p| p.needs_privileges) {
                " (root, or CAP_PERFMON for perf, opens what is refused above)"
            } else {
                ""
            }
        );
    }
    let _ = writeln!(
        out,
        "tracing:  {}",
        if inv.tracing.allowed {
            inv.tracing.reason.clone()
        } else {
            format!("not allowed: {}", inv.tracing.reason)
        }
    );
    out
}

/// `cg-trace sources [--json]`; returns the exit code.
pub fn main(options: &SourceOptions, json: bool) -> i32 {
    let inventory = gather(options, &HostInfo::read());
    if json {
        match serde_json::to_string_pretty(&inventory) {
            Ok(text) => println!("{text}"),
            Err(err) => {
                crate::console::write_line(format_args!("cg-trace: {err}"));
                return 1;
            }
        }
    } else {
        // Not print!, which panics when stdout is gone.
        let text = render(&inventory);
        let _ =
            std::io::Write::write_all(&mut std::io::stdout(), printable_lines(&text).as_bytes());
    }
    0
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn lists_every_source_and_the_auto_choice() {
        // A powercap zone whose counter never moves (its value is written once).
        let dir = tempfile::tempdir().unwrap();
        let zone = dir.path().join("powercap/intel-rapl:0");
        fs::create_dir_all(&zone).unwrap();
        fs::write(zone.join("name"), "package-0\n").unwrap();
        fs::write(zone.join("energy_uj"), "5\n").unwrap();
        fs::write(zone.join("max_energy_range_uj"), "262143328850\n").unwrap();
        let options = SourceOptions {
            perf_root: dir.path().join("no-perf"),
            powercap_root: dir.path().join("powercap"),
            nvml_lib: Some(dir.path().join("libnvidia-ml.so.1")),
            ..SourceOptions::default()
        };
        let host = HostInfo {
            hostname: "h".into(),
            kernel: "k".into(),
            cpu_model: "m".into(),
            cpu_packages: vec![0],
        };
        let inv = gather(&options, &host);
        let names: Vec<_> = inv.sources.iter().map(|p| p.name).collect();
        assert_eq!(names, ["perf", "powercap", "nvml", "model"]);
        assert_eq!(inv.auto.sources, ["model"]);
        assert_eq!(inv.auto_as_root, ["model"]);
        let text = render(&inv);
        assert!(text.contains("no RAPL perf PMU"), "{text}");
        let powercap = text.lines().find(|l| l.starts_with("powercap ")).unwrap();
        assert!(
            powercap.contains("present, not advancing") && powercap.contains("package-0"),
            "{text}"
        );
        assert!(text.contains("auto:     uses model"), "{text}");
        let json = serde_json::to_value(&inv).unwrap();
        assert_eq!(json["sources"][1]["domains"][0]["name"], "package-0");
        assert_eq!(json["sources"][1]["status"], "not_advancing");
        assert_eq!(json["sources"][1]["usable"], false);
        assert_eq!(json["sources"][3]["status"], "usable");
    }
}
