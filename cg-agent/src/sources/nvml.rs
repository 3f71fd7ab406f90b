//! The production [`GpuBackend`]: NVIDIA's NVML, loaded at run time through nvml-wrapper from
//! a library path the caller gives (`--nvml-lib`, default [`DEFAULT_LIB`]), so that a machine
//! without the driver simply has no GPU source, and tests can load a stand-in library that
//! answers the same entry points (`tests/fake-nvml/fake_nvml.c`).
//!
//! Entry points used: `nvmlInit_v2`, `nvmlShutdown`, `nvmlDeviceGetCount_v2`,
//! `nvmlDeviceGetHandleByIndex_v2`, `nvmlDeviceGetName`, `nvmlDeviceGetUUID`,
//! `nvmlDeviceGetMemoryInfo_v2`, `nvmlDeviceGetEnforcedPowerLimit`,
//! `nvmlDeviceGetTotalEnergyConsumption`, `nvmlDeviceGetPowerUsage`,
//! `nvmlDeviceGetTemperature`, `nvmlDeviceGetUtilizationRates`,
//! `nvmlDeviceGetProcessUtilization`, `nvmlDeviceGetComputeRunningProcesses_v3`,
//! `nvmlDeviceGetGraphicsRunningProcesses_v3`, and at the end of a run
//! `nvmlDeviceGetAccountingMode`, `nvmlDeviceGetAccountingPids`,
//! `nvmlDeviceGetAccountingStats`.

use std::path::{Path, PathBuf};

use nvml_wrapper::{Nvml, enum_wrappers::device::TemperatureSensor, error::NvmlError};

use super::{
    SourceError,
    gpu::{
        AccountedProcess, GpuBackend, GpuError, GpuIdentity, GpuPoll, GpuSource, MAX_ACCOUNTED,
        ProcessSample, life_so_far_s,
    },
};

/// The NVML library the NVIDIA driver installs.
pub const DEFAULT_LIB: &str = "libnvidia-ml.so.1";

/// NVML through nvml-wrapper.
pub struct NvmlBackend {
    nvml: Nvml,
    lib: PathBuf,
}

impl NvmlBackend {
    /// Loads `lib` and initialises NVML.
    pub fn open(lib: &Path) -> Result<Self, SourceError> {
        let nvml = Nvml::builder()
            .lib_path(lib.as_os_str())
            .init()
            .map_err(|err| {
                let missing = matches!(
                    err,
                    NvmlError::LibloadingError(_) | NvmlError::LibraryNotFound
                );
                SourceError::NvmlUnavailable {
                    lib: lib.to_path_buf(),
                    reason: if missing {
                        format!("the library could not be loaded (no NVIDIA driver?): {err}")
                    } else {
                        format!("initialising NVML failed: {err}")
                    },
                    missing,
                }
            })?;
        Ok(NvmlBackend {
            nvml,
            lib: lib.to_path_buf(),
        })
    }
}

/// Opens the GPU source on NVML loaded from `lib`, with the GPUs' rest powers kept in
/// `state_dir` (see [`super::gpu_rest`]).
pub fn open_source(
    lib: &Path,
    state_dir: Option<&Path>,
) -> Result<GpuSource<NvmlBackend>, SourceError> {
    GpuSource::open(NvmlBackend::open(lib)?, lib, state_dir)
}

fn gpu_error(err: NvmlError) -> GpuError {
    match err {
        NvmlError::NotSupported
        | NvmlError::FunctionNotFound
        | NvmlError::FailedToLoadSymbol(_) => GpuError::NotSupported,
        NvmlError::GpuLost => GpuError::Lost,
        NvmlError::NotFound => GpuError::NotFound,
        other => GpuError::Other(other.to_string()),
    }
}

impl GpuBackend for NvmlBackend {
    fn accounting(&self, gpu: u32) -> Result<Option<Vec<AccountedProcess>>, GpuError> {
        let device = self.nvml.device_by_index(gpu).map_err(gpu_error)?;
        if !device.is_accounting_enabled().map_err(gpu_error)? {
            return Ok(None);
        }
        let pids = device.accounting_pids().map_err(gpu_error)?;
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        let processes = pids
            .into_iter()
            .take(MAX_ACCOUNTED)
            .filter_map(|pid| {
                let stats = device.accounting_stats_for(pid).ok()?;
                Some(AccountedProcess {
                    pid,
                    gpu_utilization_pct: stats.gpu_utilization?.min(100),
                    time_s: if stats.is_running {
                        life_so_far_s(stats.start_time, now_us)
                    } else {
                        stats.time as f64 / 1e3
                    },
                    running: stats.is_running,
                })
            })
            .collect();
        Ok(Some(processes))
    }

    fn describe(&self) -> String {
        format!("NVML ({})", self.lib.display())
    }

    fn device_count(&self) -> Result<u32, GpuError> {
        self.nvml.device_count().map_err(gpu_error)
    }

    fn identity(&self, gpu: u32) -> Result<GpuIdentity, GpuError> {
        let device = self.nvml.device_by_index(gpu).map_err(gpu_error)?;
        Ok(GpuIdentity {
            name: device.name().map_err(gpu_error)?,
            uuid: device.uuid().unwrap_or_else(|_| "unknown".into()),
            memory_total_bytes: device.memory_info().ok().map(|m| m.total),
            power_limit_w: device
                .enforced_power_limit()
                .ok()
                .map(|mw| f64::from(mw) / 1e3),
        })
    }

    fn poll(&self, gpu: u32, processes: bool, samples_since_us: u64) -> GpuPoll {
        let device = match self.nvml.device_by_index(gpu) {
            Ok(device) => device,
            Err(err) => return GpuPoll::failed(gpu_error(err)),
        };
        let samples = processes.then(|| {
            match device.process_utilization_stats(samples_since_us) {
                Ok(samples) => Ok(samples
                    .into_iter()
                    .map(|s| ProcessSample {
                        pid: s.pid,
                        timestamp_us: s.timestamp,
                        sm_pct: s.sm_util,
                    })
                    .collect()),
                // NOT_FOUND: no sample since that timestamp.
                Err(NvmlError::NotFound) => Ok(Vec::new()),
                Err(err) => Err(gpu_error(err)),
            }
        });
        let running_pids = processes.then(|| {
            let compute = device.running_compute_processes();
            let graphics = device.running_graphics_processes();
            match (compute, graphics) {
                (Err(err), Err(_)) => Err(gpu_error(err)),
                (compute, graphics) => {
                    let mut pids: Vec<u32> = compute
                        .unwrap_or_default()
                        .into_iter()
                        .chain(graphics.unwrap_or_default())
                        .map(|p| p.pid)
                        .collect();
                    pids.sort_unstable();
                    pids.dedup();
                    Ok(pids)
                }
            }
        });
        GpuPoll {
            energy_mj: device.total_energy_consumption().map_err(gpu_error),
            power_mw: device.power_usage().map_err(gpu_error),
            temperature_c: device
                .temperature(TemperatureSensor::Gpu)
                .map_err(gpu_error),
            utilization_pct: device.utilization_rates().map(|u| u.gpu).map_err(gpu_error),
            memory_used_bytes: device.memory_info().map(|m| m.used).map_err(gpu_error),
            samples,
            running_pids,
        }
    }
}

#[cfg(test)]
mod tests {
    //! The real nvml-wrapper path against a stand-in NVML library (a small C library, built
    //! here with the system C compiler) whose answers each test scripts in a file next to it.

    use std::{fs, process::Command};

    use super::*;
    use crate::sources::{EnergySource, ReadContext};

    /// Builds the stand-in library into `dir` and returns its path.
    fn fake_nvml(dir: &Path) -> PathBuf {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fake-nvml/fake_nvml.c");
        let lib = dir.join("libnvidia-ml.so.1");
        let output = Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
            .arg(&lib)
            .arg(&source)
            .output()
            .expect("a C compiler (cc) builds the NVML stand-in: apt-get install gcc");
        assert!(
            output.status.success(),
            "building the NVML stand-in failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        lib
    }

    fn script(dir: &Path, text: &str) {
        let tmp = dir.join("fake-nvml.script.tmp");
        fs::write(&tmp, text).unwrap();
        fs::rename(&tmp, dir.join("fake-nvml.script")).unwrap();
    }

    fn ctx(ms: u64) -> ReadContext<'static> {
        ReadContext {
            duration_ns: ms * 1_000_000,
            busy_ns_per_cpu: &[],
            wall_start_ns: 0,
            wall_end_ns: ms * 1_000_000,
        }
    }

    #[test]
    fn reads_gpus_through_nvml_wrapper_from_a_stand_in_library() {
        let dir = tempfile::tempdir().unwrap();
        let lib = fake_nvml(dir.path());
        script(
            dir.path(),
            "devices 2\n\
             name 0 NVIDIA A100-SXM4-40GB\n\
             uuid 0 GPU-1111\n\
             set 0 energy_mj=5000 power_mw=60000 temp_c=41 util_gpu=0 mem_total=42949672960 \
             mem_used=1000 power_limit_mw=400000\n\
             name 1 Tesla P100\n\
             uuid 1 GPU-2222\n\
             set 1 power_mw=30000\n\
             error 1 energy NOT_SUPPORTED\n",
        );
        let mut source = open_source(&lib, None).unwrap();
        let names: Vec<_> = source.domains().iter().map(|d| d.name.clone()).collect();
        assert_eq!(names, ["gpu0", "gpu1"]);
        script(
            dir.path(),
            "devices 2\n\
             name 0 NVIDIA A100-SXM4-40GB\n\
             uuid 0 GPU-1111\n\
             set 0 energy_mj=17000 power_mw=120000 temp_c=60 util_gpu=75 mem_total=42949672960 \
             mem_used=2000 power_limit_mw=400000\n\
             sample 0 pid=4242 ts=100 sm=50\n\
             sample 0 pid=4242 ts=200 sm=70\n\
             running 0 4242 compute\n\
             running 0 4343 graphics\n\
             name 1 Tesla P100\n\
             uuid 1 GPU-2222\n\
             set 1 power_mw=50000\n\
             error 1 energy NOT_SUPPORTED\n",
        );
        let j: Vec<f64> = source
            .read(&ctx(200))
            .unwrap()
            .iter()
            .map(|r| r.joules().unwrap())
            .collect();
        // gpu0: the counter moved 12 J; gpu1: (30 W + 50 W) / 2 x 0.2 s.
        assert!(
            (j[0] - 12.0).abs() < 1e-9 && (j[1] - 8.0).abs() < 1e-9,
            "{j:?}"
        );
        let activity = source.gpu_activity();
        assert!((activity[0].busy_fraction - 0.75).abs() < 1e-9);
        assert_eq!(activity[0].processes, vec![(4242, 0.6)]);
        let summary = source.summary();
        let a100 = &summary.gpus[0];
        assert_eq!(a100.name, "NVIDIA A100-SXM4-40GB");
        assert_eq!(a100.uuid, "GPU-1111");
        assert_eq!(a100.max_temperature_c, Some(60));
        assert_eq!(a100.max_memory_used_bytes, Some(2000));
        assert_eq!(a100.memory_total_bytes, Some(42_949_672_960));
        assert_eq!(a100.power_limit_w, Some(400.0));
        assert_eq!(summary.gpus[1].energy_method, "power integration");

        // The GPU falls off the bus: degraded, the source keeps going.
        script(
            dir.path(),
            "devices 2\nname 0 A\nname 1 B\nerror 0 all GPU_IS_LOST\nset 1 power_mw=50000\n\
             error 1 energy NOT_SUPPORTED\n",
        );
        let j = source.read(&ctx(100)).unwrap();
        // Its energy from then on is unknown, not 0 J.
        assert_eq!(
            j[0],
            crate::sources::Reading::unknown(crate::attribution::Glitch::Unavailable)
        );
        assert_eq!(source.summary().gpus[0].status, "lost");
    }

    #[test]
    fn no_library_or_a_failing_driver_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let err = open_source(&dir.path().join("libnvidia-ml.so.1"), None).unwrap_err();
        match &err {
            SourceError::NvmlUnavailable { missing, .. } => assert!(*missing, "{err}"),
            other => panic!("{other}"),
        }
        let lib = fake_nvml(dir.path());
        script(dir.path(), "init DRIVER_NOT_LOADED\n");
        let err = open_source(&lib, None).unwrap_err();
        match &err {
            SourceError::NvmlUnavailable {
                missing, reason, ..
            } => {
                assert!(!*missing);
                assert!(reason.contains("initialising NVML failed"), "{err}");
            }
            other => panic!("{other}"),
        }
        script(dir.path(), "devices 0\n");
        let err = open_source(&lib, None).unwrap_err();
        assert!(matches!(err, SourceError::NvmlNoDevice { .. }), "{err}");
    }
}
