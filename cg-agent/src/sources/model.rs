//! The built-in power model, used when nothing is measured: every figure it produces is
//! **estimated**.
//!
//! `power = idle + (max - idle) * utilisation`, where utilisation is the fraction of all CPUs
//! busy (any task but the idle task) during the interval, from the sched_switch accounting.
//! Defaults come from the CPU count and, where recognisable, the CPU model string:
//!
//! | CPU class (model string contains)            | idle per CPU | max per CPU |
//! |----------------------------------------------|--------------|-------------|
//! | mobile (model number ending in U, `Celeron`, `Atom`)   | 0.5 W | 3.5 W       |
//! | server (`Xeon`, `EPYC`, `Virtual`, `QEMU`, `KVM`)     | 1.5 W | 6.5 W       |
//! | anything else (desktop)                                 | 1.0 W | 8.0 W       |
//!
//! plus 2 W of idle for the rest of the package. These are rough averages of published
//! package power per hardware thread; pass `--model-watts IDLE:MAX` (whole machine, watts)
//! when you know better.

use super::{DomainKind, DomainSpec, EnergySource, Provenance, ReadContext, Reading, SourceError};
use crate::{attribution::Coverage, host::HostInfo};

/// The model's parameters for the whole machine.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelParams {
    pub idle_w: f64,
    pub max_w: f64,
    /// How they were chosen.
    pub basis: String,
}

impl ModelParams {
    /// Defaults for `cpu_count` CPUs of model `cpu_model` (see the module docs).
    pub fn defaults(cpu_count: usize, cpu_model: &str) -> Self {
        let model = cpu_model.to_ascii_lowercase();
        // Mobile parts: low-power families, or a model number ending in U (i5-8250U, 4800U).
        let mobile = ["celeron", "atom", "pentium silver"]
            .iter()
            .any(|m| model.contains(m))
            || model
                .split_whitespace()
                .any(|w| w.len() > 3 && w.ends_with('u') && w.chars().any(|c| c.is_ascii_digit()));
        let server = ["xeon", "epyc", "virtual", "qemu", "kvm"]
            .iter()
            .any(|m| model.contains(m));
        let (class, idle_per_cpu, max_per_cpu) = if mobile {
            ("mobile", 0.5, 3.5)
        } else if server {
            ("server", 1.5, 6.5)
        } else {
            ("desktop", 1.0, 8.0)
        };
        let n = cpu_count.max(1) as f64;
        ModelParams {
            idle_w: 2.0 + idle_per_cpu * n,
            max_w: 2.0 + max_per_cpu * n,
            basis: format!(
                "default for {cpu_count} CPUs of class {class} ({idle_per_cpu} W idle and \
                 {max_per_cpu} W max per CPU, plus 2 W)"
            ),
        }
    }

    /// Extra watts per fully busy CPU.
    pub fn watts_per_busy_cpu(&self, cpu_count: usize) -> f64 {
        (self.max_w - self.idle_w) / cpu_count.max(1) as f64
    }
}

/// The model as an energy source with one domain, `model`, covering every CPU.
#[derive(Debug)]
pub struct ModelSource {
    params: ModelParams,
    cpu_count: usize,
    domains: Vec<DomainSpec>,
}

impl ModelSource {
    /// The defaults for `host`, or `watts = (idle, max)` when given.
    pub fn new(host: &HostInfo, watts: Option<(f64, f64)>) -> Result<Self, SourceError> {
        let params = match watts {
            Some((idle_w, max_w)) => {
                if !(idle_w.is_finite() && max_w.is_finite()) || idle_w < 0.0 || max_w < idle_w {
                    return Err(SourceError::InvalidModel(format!(
                        "--model-watts {idle_w}:{max_w}: need 0 <= IDLE <= MAX"
                    )));
                }
                ModelParams {
                    idle_w,
                    max_w,
                    basis: "given with --model-watts".into(),
                }
            }
            None => ModelParams::defaults(host.cpu_count(), &host.cpu_model),
        };
        Ok(ModelSource {
            params,
            cpu_count: host.cpu_count().max(1),
            domains: vec![model_domain()],
        })
    }

    pub fn params(&self) -> &ModelParams {
        &self.params
    }
}

/// The model's one domain: all CPUs, estimated.
pub fn model_domain() -> DomainSpec {
    DomainSpec {
        name: "model".into(),
        kind: DomainKind::Model,
        parent: None,
        coverage: Coverage::AllCpus,
        provenance: Provenance::Estimated,
        source: "model",
    }
}

impl EnergySource for ModelSource {
    fn name(&self) -> &'static str {
        "model"
    }

    fn provenance(&self) -> Provenance {
        Provenance::Estimated
    }

    fn domains(&self) -> &[DomainSpec] {
        &self.domains
    }

    fn read(&mut self, ctx: &ReadContext<'_>) -> Result<Vec<Reading>, SourceError> {
        let dt_s = ctx.duration_ns as f64 / 1e9;
        let capacity_ns = ctx.duration_ns as f64 * self.cpu_count as f64;
        let busy_ns: u64 = ctx.busy_ns_per_cpu.iter().sum();
        // Not clamped at 1: a fully busy CPU can read a few µs over the interval when reads
        // jitter, and clamping would make the model non-linear in CPU time.
        let utilisation = if capacity_ns > 0.0 {
            busy_ns as f64 / capacity_ns
        } else {
            0.0
        };
        let power_w = self.params.idle_w + (self.params.max_w - self.params.idle_w) * utilisation;
        Ok(vec![Reading::Joules(power_w * dt_s)])
    }

    fn known_idle_w(&self) -> Option<Vec<f64>> {
        Some(vec![self.params.idle_w])
    }

    fn joules_per_busy_ns(&self) -> Option<Vec<f64>> {
        // power = idle + (max - idle) x busy / (duration x CPUs): linear in busy time.
        Some(vec![
            (self.params.max_w - self.params.idle_w) / self.cpu_count as f64 / 1e9,
        ])
    }

    fn describe(&self) -> String {
        format!(
            "built-in model: power = {:.1} W + ({:.1} W - {:.1} W) x CPU utilisation ({})",
            self.params.idle_w, self.params.max_w, self.params.idle_w, self.params.basis
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(cpus: usize, model: &str) -> HostInfo {
        HostInfo {
            hostname: "h".into(),
            kernel: "k".into(),
            cpu_model: model.into(),
            cpu_packages: vec![0; cpus],
        }
    }

    #[test]
    fn energy_is_linear_in_utilisation() {
        let mut m = ModelSource::new(&host(2, "x"), Some((10.0, 30.0))).unwrap();
        let idle = m
            .read(&ReadContext {
                duration_ns: 500_000_000,
                busy_ns_per_cpu: &[0, 0],
                wall_start_ns: 0,
                wall_end_ns: 500_000_000,
            })
            .unwrap();
        assert_eq!(idle, vec![Reading::Joules(5.0)]);
        // One of two CPUs busy for the whole 0.5 s: 10 + 20 * 0.5 = 20 W -> 10 J.
        let half = m
            .read(&ReadContext {
                duration_ns: 500_000_000,
                busy_ns_per_cpu: &[500_000_000, 0],
                wall_start_ns: 500_000_000,
                wall_end_ns: 1_000_000_000,
            })
            .unwrap();
        assert_eq!(half, vec![Reading::Joules(10.0)]);
        assert!((m.params().watts_per_busy_cpu(2) - 10.0).abs() < 1e-12);
        // Time placed in an interval after its read changes the estimate as a read would:
        // 0.5 s of one CPU is the 5 J between the two reads above.
        let per_ns = m.joules_per_busy_ns().unwrap();
        assert!((per_ns[0] * 500_000_000.0 - 5.0).abs() < 1e-9);
    }

    #[test]
    fn defaults_scale_with_cpu_count_and_class() {
        let server = ModelParams::defaults(8, "Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz");
        assert_eq!(server.idle_w, 2.0 + 1.5 * 8.0);
        assert_eq!(server.max_w, 2.0 + 6.5 * 8.0);
        let laptop = ModelParams::defaults(8, "11th Gen Intel(R) Core(TM) i7-1165G7U @ 2.80GHz");
        assert!(laptop.max_w < server.max_w);
        let desktop = ModelParams::defaults(4, "AMD Ryzen 5 3600 6-Core Processor");
        assert_eq!(desktop.max_w, 2.0 + 8.0 * 4.0);
        assert!(desktop.basis.contains("desktop"));
    }

    #[test]
    fn rejects_impossible_watts() {
        assert!(ModelSource::new(&host(1, "x"), Some((20.0, 10.0))).is_err());
        assert!(ModelSource::new(&host(1, "x"), Some((-1.0, 10.0))).is_err());
        assert!(ModelSource::new(&host(1, "x"), Some((f64::NAN, 10.0))).is_err());
    }
}
