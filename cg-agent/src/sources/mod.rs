//! Energy sources: each reads one kind of energy counter (or estimates one) and yields the
//! joules each of its domains used since the previous read. Every source takes its root path
//! (or opener) as a constructor argument, so tests run the real reading code on generated
//! trees; counter wraparound is handled once, in [`counter`].

pub mod counter;
pub mod model;
pub mod powercap;

use std::path::PathBuf;

use serde::Serialize;

use crate::{attribution::Coverage, host::HostInfo};

/// Whether a figure was measured by hardware or estimated by a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Provenance {
    Measured,
    Estimated,
}

impl Provenance {
    pub fn as_str(self) -> &'static str {
        match self {
            Provenance::Measured => "measured",
            Provenance::Estimated => "estimated",
        }
    }
}

/// What part of the machine a domain measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DomainKind {
    /// A CPU package (socket): cores, caches, uncore.
    Package,
    /// The cores of a package (inside the package).
    Core,
    /// The uncore of a package, e.g. an integrated GPU (inside the package).
    Uncore,
    /// Memory attached to a package (not inside the package).
    Dram,
    /// The whole platform (SoC), covering packages and DRAM.
    Psys,
    /// The built-in power model.
    Model,
}

/// One energy domain as a source offers it.
#[derive(Clone, Debug, PartialEq)]
pub struct DomainSpec {
    /// Unique name: `package-0`, `core-0`, `dram-0`, `psys`, `model`, ...
    pub name: String,
    pub kind: DomainKind,
    /// The domain whose energy already includes this one's (`core-0` in `package-0`); totals
    /// only add up domains without a parent, so nothing is counted twice.
    pub parent: Option<String>,
    /// The CPUs whose activity this domain's energy is split over.
    pub coverage: Coverage,
    pub provenance: Provenance,
    /// Name of the source that reads it.
    pub source: &'static str,
}

/// What a source may use to produce an interval's figures (the model needs activity).
#[derive(Clone, Copy, Debug)]
pub struct ReadContext<'a> {
    pub duration_ns: u64,
    /// Non-idle nanoseconds per CPU id during the interval.
    pub busy_ns_per_cpu: &'a [u64],
}

/// A reader of energy counters.
pub trait EnergySource {
    /// Short name used in reports: `powercap`, `model`, ...
    fn name(&self) -> &'static str;
    fn provenance(&self) -> Provenance;
    /// The domains, in the order [`EnergySource::read`] returns them.
    fn domains(&self) -> &[DomainSpec];
    /// Joules per domain since the previous call (since the source was opened, for the first).
    fn read(&mut self, ctx: &ReadContext<'_>) -> Result<Vec<f64>, SourceError>;
    /// One line on what this source is reading and how (shown in the report and summary).
    fn describe(&self) -> String;
    /// Idle power per domain when the source knows it exactly (a model does); measured
    /// sources leave it to the estimator in [`crate::attribution::idle`].
    fn known_idle_w(&self) -> Option<Vec<f64>> {
        None
    }
}

/// Errors of energy sources.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("no RAPL zones under {root} (this machine or VM exposes no powercap energy counters)")]
    PowercapMissing { root: PathBuf },
    #[error(
        "{path} is not readable: {reason}; energy_uj is readable only by root on kernels with the \
         PLATYPUS fix (5.10+), so run cg-trace as root"
    )]
    PowercapUnreadable { path: PathBuf, reason: String },
    #[error("malformed powercap tree: {path}: {reason}")]
    PowercapMalformed { path: PathBuf, reason: String },
    #[error("invalid power model: {0}")]
    InvalidModel(String),
}

/// The user's choice of source (`--source`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceChoice {
    /// The best measured source available, else the model.
    Auto,
    /// RAPL through the powercap sysfs interface.
    Powercap,
    /// The built-in power model (estimated).
    Model,
}

/// Options that decide and configure sources.
#[derive(Clone, Debug)]
pub struct SourceOptions {
    pub choice: SourceChoice,
    pub powercap_root: PathBuf,
    /// `--model-watts IDLE:MAX` (whole machine).
    pub model_watts: Option<(f64, f64)>,
}

impl Default for SourceOptions {
    fn default() -> Self {
        SourceOptions {
            choice: SourceChoice::Auto,
            powercap_root: PathBuf::from(powercap::DEFAULT_ROOT),
            model_watts: None,
        }
    }
}

/// What probing one candidate source found.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SourceProbe {
    pub name: &'static str,
    pub provenance: Provenance,
    pub domains: Vec<String>,
    pub usable: bool,
    /// Why it is or is not usable.
    pub reason: String,
}

/// The sources chosen for a run, why, and what else was probed.
pub struct Selection {
    pub sources: Vec<Box<dyn EnergySource>>,
    pub reason: String,
    pub probes: Vec<SourceProbe>,
}

/// Opens the sources `options` ask for. `auto` prefers a measured source and falls back to the
/// model, saying why; an explicitly requested source that cannot be used is an error.
pub fn select(options: &SourceOptions, host: &HostInfo) -> Result<Selection, SourceError> {
    let mut probes = Vec::new();
    let powercap = if matches!(options.choice, SourceChoice::Auto | SourceChoice::Powercap) {
        let opened = powercap::PowercapSource::open(&options.powercap_root, host);
        probes.push(match &opened {
            Ok(source) => SourceProbe {
                name: "powercap",
                provenance: Provenance::Measured,
                domains: source.domains().iter().map(|d| d.name.clone()).collect(),
                usable: true,
                reason: format!(
                    "RAPL counters readable under {}",
                    options.powercap_root.display()
                ),
            },
            Err(err) => SourceProbe {
                name: "powercap",
                provenance: Provenance::Measured,
                domains: Vec::new(),
                usable: false,
                reason: err.to_string(),
            },
        });
        Some(opened)
    } else {
        None
    };

    match (options.choice, powercap) {
        (SourceChoice::Powercap, Some(opened)) => {
            let source = opened?;
            Ok(Selection {
                reason: "requested with --source powercap".into(),
                sources: vec![Box::new(source)],
                probes,
            })
        }
        (SourceChoice::Auto, Some(Ok(source))) => Ok(Selection {
            reason: "auto: RAPL through powercap is the best measured source found".into(),
            sources: vec![Box::new(source)],
            probes,
        }),
        (choice, powercap) => {
            let model = model::ModelSource::new(host, options.model_watts)?;
            probes.push(SourceProbe {
                name: "model",
                provenance: Provenance::Estimated,
                domains: vec!["model".into()],
                usable: true,
                reason: model.describe(),
            });
            let reason = match (choice, powercap) {
                (SourceChoice::Model, _) => "requested with --source model".to_string(),
                (_, Some(Err(err))) => {
                    format!(
                        "auto: no measured source usable ({err}); using the built-in power model"
                    )
                }
                _ => "auto: no measured source found; using the built-in power model".to_string(),
            };
            Ok(Selection {
                reason,
                sources: vec![Box::new(model)],
                probes,
            })
        }
    }
}
