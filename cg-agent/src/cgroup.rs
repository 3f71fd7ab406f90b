//! Which cgroup a process is in, and what its path says about it: the container runtime and
//! container id (docker, containerd, CRI-O, podman), the Kubernetes pod UID and the systemd
//! unit. [`classify`] is pure (a path in, labels out); [`of_pid`] reads `/proc/PID/cgroup`.
//!
//! The session reads it when a process is first seen, at each exec and at the end of a run
//! (`session::processes`); a process moved to another cgroup in between keeps the one read
//! last. The file is hostile input (any user may name a delegated cgroup
//! with any bytes, newlines included): the read is bounded, and a file that does not parse as
//! the kernel writes it (two cgroup v2 lines, a line without its fields, a path that is not
//! UTF-8 or holds control characters) is an error rather than a guess.
//!
//! Read by hand, not through procfs 0.17's `cgroups()`: 7.5-7.9 µs per process, where procfs
//! takes 19-20 % longer (`cargo xtask bench --proc`: release build, this 2-CPU VM's ~100
//! processes, median of 31 rounds, three runs), and procfs neither refuses a second cgroup v2
//! line nor bounds the read.

use std::{
    fs,
    io::Read,
    path::{Path, PathBuf},
};

use serde::Serialize;

/// At most this many bytes of `/proc/PID/cgroup` are read (a cgroup v1 host with every
/// controller mounted writes a few hundred bytes; paths are at most `PATH_MAX`).
pub const MAX_FILE_BYTES: usize = 64 * 1024;

/// The longest cgroup path accepted (the kernel's `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;

/// The container runtime whose naming a cgroup path follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Runtime {
    #[serde(rename = "docker")]
    Docker,
    #[serde(rename = "containerd")]
    Containerd,
    #[serde(rename = "cri-o")]
    CriO,
    #[serde(rename = "podman")]
    Podman,
}

impl Runtime {
    /// The name used in labels and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Docker => "docker",
            Runtime::Containerd => "containerd",
            Runtime::CriO => "cri-o",
            Runtime::Podman => "podman",
        }
    }
}

/// A process's cgroup and what its path says; in the report as `processes[].cgroup` (each
/// label only when found).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct CgroupInfo {
    /// The cgroup path as `/proc/PID/cgroup` gives it (`/` is the root cgroup).
    pub path: String,
    /// The container runtime, when the path follows one's naming.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Runtime>,
    /// The container id (lowercase hex), when the path names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    /// The Kubernetes pod UID (with dashes), for a path under `kubepods`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// The innermost systemd unit (`foo.service`, `session-3.scope`), when the path has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub systemd_unit: Option<String>,
}

impl CgroupInfo {
    /// A short, stable name for grouping: the container (`docker:0123456789ab`), else the
    /// pod (`pod:UID`), else the systemd unit, else the path.
    pub fn group_name(&self) -> String {
        if let Some(id) = &self.container_id {
            let short = &id[..id.len().min(12)];
            return match self.runtime {
                Some(runtime) => format!("{}:{short}", runtime.as_str()),
                None => format!("container:{short}"),
            };
        }
        if let Some(uid) = &self.pod_uid {
            return format!("pod:{uid}");
        }
        if let Some(unit) = &self.systemd_unit {
            return unit.clone();
        }
        self.path.clone()
    }
}

/// Why a process's cgroup could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is longer than {MAX_FILE_BYTES} bytes: not a cgroup file as the kernel writes it", path.display())]
    TooLong { path: PathBuf },
    #[error("{}, line {line}: {reason}", path.display())]
    Malformed {
        path: PathBuf,
        line: usize,
        reason: &'static str,
    },
    #[error("{} names no cgroup v2 path and no cpu, cpuacct or name=systemd hierarchy", path.display())]
    NoHierarchy { path: PathBuf },
}

/// Reads and classifies the cgroup of `pid` from `<proc_root>/PID/cgroup`.
pub fn of_pid(proc_root: &Path, pid: u32) -> Result<CgroupInfo, CgroupError> {
    let path = proc_root.join(pid.to_string()).join("cgroup");
    let read_error = |source| CgroupError::Read {
        path: path.clone(),
        source,
    };
    let file = fs::File::open(&path).map_err(read_error)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() > MAX_FILE_BYTES {
        return Err(CgroupError::TooLong { path });
    }
    let cgroup_path = parse_proc_cgroup(&bytes).map_err(|e| e.at(&path))?;
    Ok(classify(cgroup_path))
}

/// A parse error before it knows its file.
#[derive(Debug, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub reason: &'static str,
}

impl ParseError {
    fn at(self, path: &Path) -> CgroupError {
        if self.line == 0 {
            CgroupError::NoHierarchy {
                path: path.to_owned(),
            }
        } else {
            CgroupError::Malformed {
                path: path.to_owned(),
                line: self.line,
                reason: self.reason,
            }
        }
    }
}

/// The cgroup path in the text of a `/proc/PID/cgroup` file: the cgroup v2 line (`0::/path`);
/// on a cgroup v1 host (no v2 line), the `cpu` or `cpuacct` hierarchy, else `name=systemd`.
/// On a hybrid host whose v2 line says only `/` (the unified hierarchy has no controllers,
/// e.g. docker's cgroupfs driver), a v1 hierarchy that says more wins.
/// A line 0 error means no hierarchy was found.
pub fn parse_proc_cgroup(bytes: &[u8]) -> Result<&str, ParseError> {
    let text = std::str::from_utf8(bytes).map_err(|e| ParseError {
        line: bytes[..e.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1,
        reason: "not UTF-8",
    })?;
    let mut unified: Option<&str> = None;
    let mut cpu: Option<&str> = None;
    let mut systemd: Option<&str> = None;
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let bad = |reason| ParseError { line, reason };
        if raw.is_empty() {
            continue;
        }
        let mut fields = raw.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            return Err(bad("not `hierarchy-id:controllers:path`"));
        };
        if id.is_empty() || id.len() > 10 || !id.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("the hierarchy id is not a number"));
        }
        // A cgroup removed while its process lives on (cgroup v2 says so after the path).
        let path = path.strip_suffix(" (deleted)").unwrap_or(path);
        check_path(path).map_err(bad)?;
        if id == "0" && controllers.is_empty() {
            if unified.is_some() {
                return Err(bad(
                    "a second cgroup v2 line (a cgroup name with a newline?)",
                ));
            }
            unified = Some(path);
        } else {
            for controller in controllers.split(',') {
                match controller {
                    "cpu" | "cpuacct" => {
                        cpu.get_or_insert(path);
                    }
                    "name=systemd" => {
                        systemd.get_or_insert(path);
                    }
                    _ => {}
                }
            }
        }
    }
    let v1 = cpu.filter(|p| *p != "/").or(systemd.filter(|p| *p != "/"));
    match (unified, v1) {
        (Some("/"), Some(v1)) => Ok(v1),
        (Some(unified), _) => Ok(unified),
        (None, _) => cpu.or(systemd).ok_or(ParseError {
            line: 0,
            reason: "no hierarchy",
        }),
    }
}

fn check_path(path: &str) -> Result<(), &'static str> {
    if !path.starts_with('/') {
        return Err("the cgroup path is not absolute");
    }
    if path.len() > MAX_PATH_BYTES {
        return Err("the cgroup path is longer than PATH_MAX");
    }
    if path.chars().any(char::is_control) {
        return Err("the cgroup path holds a control character");
    }
    Ok(())
}

/// What a cgroup path says: runtime, container id, pod UID, systemd unit. Pure.
pub fn classify(path: &str) -> CgroupInfo {
    let mut info = CgroupInfo {
        path: path.to_owned(),
        ..CgroupInfo::default()
    };
    let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let mut under_kubepods = false;
    for (index, &component) in components.iter().enumerate() {
        let previous = index.checked_sub(1).map(|i| components[i]);
        if let Some(unit) = systemd_unit(component) {
            info.systemd_unit = Some(unit.to_owned());
        }
        if component.starts_with("kubepods") {
            under_kubepods = true;
        }
        // Kubernetes, systemd driver: kubepods-burstable-pod<uid with _>.slice.
        if let Some(stem) = component.strip_suffix(".slice")
            && stem.starts_with("kubepods")
            && let Some(at) = stem.rfind("-pod")
            && let Some(uid) = pod_uid(&stem[at + 4..])
        {
            info.pod_uid = Some(uid);
            continue;
        }
        // Kubernetes, cgroupfs driver: /kubepods[/burstable|/besteffort]/pod<uid>/<id>.
        if under_kubepods
            && matches!(previous, Some("kubepods" | "burstable" | "besteffort"))
            && let Some(uid) = component.strip_prefix("pod").and_then(pod_uid)
        {
            info.pod_uid = Some(uid);
            continue;
        }
        if info.pod_uid.is_some()
            && previous.is_some_and(|p| p.starts_with("pod"))
            && is_container_id(component)
        {
            info.container_id = Some(component.to_owned());
            continue;
        }
        // Scopes that systemd-driven runtimes create: <prefix><id>.scope.
        if let Some(stem) = component.strip_suffix(".scope") {
            for (prefix, runtime) in [
                ("docker-", Runtime::Docker),
                ("cri-containerd-", Runtime::Containerd),
                ("crio-", Runtime::CriO),
                ("libpod-", Runtime::Podman),
            ] {
                if let Some(id) = stem.strip_prefix(prefix)
                    && is_container_id(id)
                {
                    info.runtime = Some(runtime);
                    info.container_id = Some(id.to_owned());
                }
            }
            continue;
        }
        // cgroupfs drivers: /docker/<id>, /libpod_parent/libpod-<id>.
        if previous == Some("docker") && is_container_id(component) {
            info.runtime = Some(Runtime::Docker);
            info.container_id = Some(component.to_owned());
        } else if previous == Some("libpod_parent")
            && let Some(id) = component.strip_prefix("libpod-")
            && is_container_id(id)
        {
            info.runtime = Some(Runtime::Podman);
            info.container_id = Some(id.to_owned());
        }
    }
    info
}

/// The component as a systemd unit name, when it is one that holds processes.
fn systemd_unit(component: &str) -> Option<&str> {
    let stem = component
        .strip_suffix(".service")
        .or_else(|| component.strip_suffix(".scope"))?;
    (!stem.is_empty()).then_some(component)
}

/// A container id: 12 to 64 lowercase hex digits (docker's short and full ids).
pub(crate) fn is_container_id(id: &str) -> bool {
    (12..=64).contains(&id.len()) && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A pod UID as the path writes it (`_` for `-` in systemd slice names), with dashes.
fn pod_uid(raw: &str) -> Option<String> {
    let ok = (8..=64).contains(&raw.len())
        && raw
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f' | b'-' | b'_'));
    ok.then(|| raw.replace('_', "-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f4e1b2c5d6a7980a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718";
    const UID: &str = "1b2c3d4e-5f60-4718-a93b-4c5d6e7f8091";

    struct Case {
        path: String,
        runtime: Option<Runtime>,
        container_id: Option<&'static str>,
        pod_uid: Option<&'static str>,
        unit: Option<String>,
    }

    fn case(path: String) -> Case {
        Case {
            path,
            runtime: None,
            container_id: None,
            pod_uid: None,
            unit: None,
        }
    }

    #[test]
    fn classifies_each_runtimes_paths() {
        let uid_ = UID.replace('-', "_");
        let cases = [
            // docker, systemd driver and cgroupfs driver
            Case {
                runtime: Some(Runtime::Docker),
                container_id: Some(ID),
                unit: Some(format!("docker-{ID}.scope")),
                ..case(format!("/system.slice/docker-{ID}.scope"))
            },
            Case {
                runtime: Some(Runtime::Docker),
                container_id: Some(ID),
                ..case(format!("/docker/{ID}"))
            },
            // containerd and CRI-O under Kubernetes, systemd driver, each QoS class
            Case {
                runtime: Some(Runtime::Containerd),
                container_id: Some(ID),
                pod_uid: Some(UID),
                unit: Some(format!("cri-containerd-{ID}.scope")),
                ..case(format!(
                    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice/cri-containerd-{ID}.scope"
                ))
            },
            Case {
                runtime: Some(Runtime::CriO),
                container_id: Some(ID),
                pod_uid: Some(UID),
                unit: Some(format!("crio-{ID}.scope")),
                ..case(format!(
                    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid_}.slice/crio-{ID}.scope"
                ))
            },
            Case {
                runtime: Some(Runtime::Containerd),
                container_id: Some(ID),
                pod_uid: Some(UID),
                unit: Some(format!("cri-containerd-{ID}.scope")),
                ..case(format!(
                    "/kubepods.slice/kubepods-pod{uid_}.slice/cri-containerd-{ID}.scope"
                ))
            },
            // Seen from inside another cgroup namespace (cg-trace in a pod): relative
            Case {
                runtime: Some(Runtime::Containerd),
                container_id: Some(ID),
                pod_uid: Some(UID),
                unit: Some(format!("cri-containerd-{ID}.scope")),
                ..case(format!(
                    "/../../kubepods-besteffort.slice/kubepods-besteffort-pod{uid_}.slice/cri-containerd-{ID}.scope"
                ))
            },
            Case {
                container_id: Some(ID),
                pod_uid: Some(UID),
                ..case(format!("/../kubepods/burstable/pod{UID}/{ID}"))
            },
            // Kubernetes, cgroupfs driver: the runtime is not in the path
            Case {
                container_id: Some(ID),
                pod_uid: Some(UID),
                ..case(format!("/kubepods/burstable/pod{UID}/{ID}"))
            },
            Case {
                container_id: Some(ID),
                pod_uid: Some(UID),
                ..case(format!("/kubepods/pod{UID}/{ID}"))
            },
            // A pod's own slice (its pause process's parent), no container
            Case {
                pod_uid: Some(UID),
                ..case(format!(
                    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid_}.slice"
                ))
            },
            // podman: root (machine.slice, with its inner `container` cgroup), rootless
            // (a user slice), cgroupfs
            Case {
                runtime: Some(Runtime::Podman),
                container_id: Some(ID),
                unit: Some(format!("libpod-{ID}.scope")),
                ..case(format!("/machine.slice/libpod-{ID}.scope/container"))
            },
            Case {
                runtime: Some(Runtime::Podman),
                container_id: Some(ID),
                unit: Some(format!("libpod-{ID}.scope")),
                ..case(format!(
                    "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope"
                ))
            },
            Case {
                runtime: Some(Runtime::Podman),
                container_id: Some(ID),
                ..case(format!("/libpod_parent/libpod-{ID}"))
            },
            // systemd units: a service, a login session, a user's app
            Case {
                unit: Some("nginx.service".into()),
                ..case("/system.slice/nginx.service".into())
            },
            Case {
                unit: Some("session-3.scope".into()),
                ..case("/user.slice/user-1000.slice/session-3.scope".into())
            },
            Case {
                unit: Some("app-firefox-1234.scope".into()),
                ..case(
                    "/user.slice/user-1000.slice/user@1000.service/app.slice/app-firefox-1234.scope"
                        .into(),
                )
            },
            Case {
                unit: Some("user@1000.service".into()),
                ..case("/user.slice/user-1000.slice/user@1000.service".into())
            },
            // Nothing to say
            case("/".into()),
            case("/my/own/group".into()),
            // Look-alikes: not hex, too short, an empty unit name
            Case {
                unit: Some("docker-xyz.scope".into()),
                ..case("/system.slice/docker-xyz.scope".into())
            },
            case("/docker/abc".into()),
            case("/system.slice/.service".into()),
            case(format!("/kubepods/burstable/podnot-a-uid!/{ID}")),
        ];
        for case in cases {
            let info = classify(&case.path);
            assert_eq!(info.path, case.path);
            assert_eq!(info.runtime, case.runtime, "{}", case.path);
            assert_eq!(
                info.container_id.as_deref(),
                case.container_id,
                "{}",
                case.path
            );
            assert_eq!(info.pod_uid.as_deref(), case.pod_uid, "{}", case.path);
            assert_eq!(info.systemd_unit, case.unit, "{}", case.path);
        }
    }

    #[test]
    fn group_name_prefers_container_then_pod_then_unit() {
        assert_eq!(
            classify(&format!("/system.slice/docker-{ID}.scope")).group_name(),
            format!("docker:{}", &ID[..12])
        );
        assert_eq!(
            classify(&format!("/kubepods/burstable/pod{UID}/{ID}")).group_name(),
            format!("container:{}", &ID[..12])
        );
        assert_eq!(
            classify(&format!("/kubepods/burstable/pod{UID}")).group_name(),
            format!("pod:{UID}")
        );
        assert_eq!(
            classify("/system.slice/cron.service").group_name(),
            "cron.service"
        );
        assert_eq!(classify("/a/b").group_name(), "/a/b");
    }

    #[test]
    fn reads_the_v2_line_and_falls_back_to_v1() {
        let table: [(&str, &str); 6] = [
            (
                "0::/system.slice/cron.service\n",
                "/system.slice/cron.service",
            ),
            // hybrid: the unified line is used when it says something
            (
                "4:cpu,cpuacct:/docker/abc\n1:name=systemd:/x.service\n0::/y.service\n",
                "/y.service",
            ),
            // hybrid with an empty unified hierarchy: the v1 cpu hierarchy says more
            ("4:cpu,cpuacct:/docker/abc\n0::/\n", "/docker/abc"),
            // v1 only: cpu first, then name=systemd
            (
                "9:name=systemd:/system.slice/a.service\n3:memory:/m\n2:cpuacct:/c\n",
                "/c",
            ),
            (
                "9:name=systemd:/system.slice/a.service\n3:memory:/m\n",
                "/system.slice/a.service",
            ),
            // a cgroup removed under a live process
            ("0::/gone.scope (deleted)\n", "/gone.scope"),
        ];
        for (text, path) in table {
            assert_eq!(parse_proc_cgroup(text.as_bytes()), Ok(path), "{text:?}");
        }
    }

    #[test]
    fn rejects_what_the_kernel_does_not_write() {
        let table: [(&[u8], usize); 6] = [
            // a newline in a cgroup name forging a second v2 line
            (b"0::/evil\n0::/system.slice/docker-x.scope\n", 2),
            (b"0:/no-fields\n", 1),
            (b"x::/a\n", 1),
            (b"0::relative\n", 1),
            (b"0::/tab\there\n", 1),
            (b"0::/ok\n0::/\xff\n", 2),
        ];
        for (text, line) in table {
            assert_eq!(
                parse_proc_cgroup(text).map_err(|e| e.line),
                Err(line),
                "{text:?}"
            );
        }
        assert_eq!(
            parse_proc_cgroup(b"3:memory:/m\n").map_err(|e| e.line),
            Err(0)
        );
        let long = format!("0::/{}\n", "a".repeat(MAX_PATH_BYTES));
        assert!(parse_proc_cgroup(long.as_bytes()).is_err());
    }

    #[test]
    fn of_pid_reads_a_bounded_file_and_names_it_in_errors() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("42");
        fs::create_dir(&dir).unwrap();
        fs::write(
            dir.join("cgroup"),
            format!("0::/system.slice/docker-{ID}.scope\n"),
        )
        .unwrap();
        let info = of_pid(root.path(), 42).unwrap();
        assert_eq!(info.runtime, Some(Runtime::Docker));

        fs::write(dir.join("cgroup"), vec![b'/'; MAX_FILE_BYTES + 1]).unwrap();
        assert!(matches!(
            of_pid(root.path(), 42),
            Err(CgroupError::TooLong { .. })
        ));

        fs::write(dir.join("cgroup"), "0::/a\n0::/b\n").unwrap();
        let message = of_pid(root.path(), 42).unwrap_err().to_string();
        assert!(message.contains("42/cgroup, line 2"), "{message}");

        fs::write(dir.join("cgroup"), "5:memory:/m\n").unwrap();
        assert!(matches!(
            of_pid(root.path(), 42),
            Err(CgroupError::NoHierarchy { .. })
        ));
        assert!(matches!(
            of_pid(root.path(), 43),
            Err(CgroupError::Read { .. })
        ));
    }

    #[test]
    fn reads_our_own_cgroup() {
        let info = of_pid(Path::new("/proc"), std::process::id()).unwrap();
        assert!(info.path.starts_with('/'));
    }
}
