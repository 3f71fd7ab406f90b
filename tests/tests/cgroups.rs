//! End-to-end tests of `processes[].cgroup`: cgroups shaped like each container runtime's
//! (docker, containerd and CRI-O under Kubernetes, podman, a systemd service) are created on
//! this machine's cgroup2 mount, real workloads are moved into them, and the real cg-trace
//! must label each process as the runtime would and still attribute its energy. Every
//! cgroup is created under one directory of our own and removed even when a test fails.

use std::{fs, path::PathBuf, time::Duration};

use cg_tests::{Background, assert_adds_up, bin, cg_trace, num, process, require_root};
use serde_json::{Value, json};

/// Where cgroup2 is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on a hybrid host).
fn cgroup2_mount() -> PathBuf {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").expect("reading mountinfo");
    mountinfo
        .lines()
        .find_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            let mount_point = before.split_whitespace().nth(4)?;
            (after.split_whitespace().next() == Some("cgroup2")).then(|| PathBuf::from(mount_point))
        })
        .expect("this machine has no cgroup2 mount: the cgroup tests need one")
}

/// Cgroups created for a test, under `<mount>/cg-trace-test-PID`; dropped, it moves any
/// process still inside to the root cgroup and removes them, deepest first.
struct TestCgroups {
    mount: PathBuf,
    top: PathBuf,
    dirs: Vec<PathBuf>,
}

impl TestCgroups {
    fn new(name: &str) -> Self {
        let mount = cgroup2_mount();
        let top = mount.join(format!("cg-trace-test-{}-{name}", std::process::id()));
        fs::create_dir(&top).unwrap_or_else(|e| panic!("mkdir {}: {e}", top.display()));
        TestCgroups {
            mount,
            dirs: vec![top.clone()],
            top,
        }
    }

    /// Creates `rel` (and its parents) under our directory; returns its cgroup path as
    /// `/proc/PID/cgroup` will say it.
    fn create(&mut self, rel: &str) -> String {
        let mut dir = self.top.clone();
        for component in rel.split('/') {
            dir.push(component);
            if !dir.exists() {
                fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
                self.dirs.push(dir.clone());
            }
        }
        format!("/{}", dir.strip_prefix(&self.mount).unwrap().display())
    }

    fn dir(&self, cgroup: &str) -> PathBuf {
        self.mount.join(cgroup.trim_start_matches('/'))
    }

    fn move_into(&self, cgroup: &str, pid: u32) {
        let procs = self.dir(cgroup).join("cgroup.procs");
        fs::write(&procs, pid.to_string())
            .unwrap_or_else(|e| panic!("moving {pid} into {}: {e}", procs.display()));
    }
}

impl Drop for TestCgroups {
    fn drop(&mut self) {
        for dir in self.dirs.iter().rev() {
            for _ in 0..50 {
                if let Ok(procs) = fs::read_to_string(dir.join("cgroup.procs")) {
                    for pid in procs.lines() {
                        let _ = fs::write(self.mount.join("cgroup.procs"), pid);
                    }
                }
                if fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// The cgroup entry of `pid` in the report, after checking that it ran and got energy.
fn cgroup_of(report: &Value, pid: u32) -> &Value {
    let p = process(report, pid);
    assert!(num(p, "/cpu_time_s") > 0.0, "pid {pid} did not run: {p:#}");
    assert!(num(p, "/energy_j") > 0.0, "pid {pid} got no energy: {p:#}");
    &p["cgroup"]
}

const HEX: &str = "3f4e1b2c5d6a7980a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718";
const UID: &str = "1b2c3d4e-5f60-4718-a93b-4c5d6e7f8091";

#[test]
fn attached_processes_carry_their_runtimes_labels() {
    require_root();
    let uid_ = UID.replace('-', "_");
    // (cgroup under our directory, the labels cg-trace must find besides the path)
    let shapes: Vec<(String, Value)> = vec![
        (
            format!("system.slice/docker-{HEX}.scope"),
            json!({"runtime": "docker", "container_id": HEX,
                   "systemd_unit": format!("docker-{HEX}.scope")}),
        ),
        (
            format!(
                "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice/cri-containerd-{HEX}.scope"
            ),
            json!({"runtime": "containerd", "container_id": HEX, "pod_uid": UID,
                   "systemd_unit": format!("cri-containerd-{HEX}.scope")}),
        ),
        (
            format!("kubepods/besteffort/pod{UID}/{HEX}"),
            json!({"container_id": HEX, "pod_uid": UID}),
        ),
        (
            format!("user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{HEX}.scope"),
            json!({"runtime": "podman", "container_id": HEX,
                   "systemd_unit": format!("libpod-{HEX}.scope")}),
        ),
        (
            "system.slice/cg-spin.service".to_string(),
            json!({"systemd_unit": "cg-spin.service"}),
        ),
    ];
    // Declared first, dropped last: the spinners are killed before their cgroups go.
    let mut cgroups = TestCgroups::new("attach");
    let spin = bin("cg-spin");
    let mut spinners = Vec::new();
    for (rel, _) in &shapes {
        let cgroup = cgroups.create(rel);
        let spinner = Background::spawn(&spin, &["0"]);
        cgroups.move_into(&cgroup, spinner.pid());
        spinners.push((spinner, cgroup));
    }
    let pids: Vec<String> = spinners.iter().map(|(s, _)| s.pid().to_string()).collect();
    let run = cg_trace(&[
        "--source",
        "model",
        "-q",
        "--pid",
        &pids.join(","),
        "--duration",
        "1.5",
    ]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_adds_up(report);
    for ((spinner, cgroup), (_, labels)) in spinners.iter().zip(&shapes) {
        let mut expected = labels.clone();
        expected["path"] = json!(cgroup);
        assert_eq!(cgroup_of(report, spinner.pid()), &expected);
    }
}

#[test]
fn a_command_that_moves_itself_then_execs_is_labelled_by_its_new_cgroup() {
    require_root();
    // As runc and systemd do: the child joins the container's cgroup, then execs.
    let uid_ = UID.replace('-', "_");
    let mut cgroups = TestCgroups::new("wrap");
    let cgroup = cgroups.create(&format!(
        "kubepods.slice/kubepods-pod{uid_}.slice/crio-{HEX}.scope"
    ));
    let procs = cgroups.dir(&cgroup).join("cgroup.procs");
    let script = format!(
        "echo $$ > '{}' && exec '{}' 1",
        procs.display(),
        bin("cg-spin").display()
    );
    let run = cg_trace(&["--source", "model", "-q", "--", "sh", "-c", &script]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_adds_up(report);
    let root = cg_tests::root_pid(report);
    assert_eq!(
        cgroup_of(report, root),
        &json!({"path": cgroup, "runtime": "cri-o", "container_id": HEX, "pod_uid": UID,
                "systemd_unit": format!("crio-{HEX}.scope")})
    );
}

#[test]
fn the_test_cgroups_are_removed_with_a_process_still_inside() {
    require_root();
    let spinner = Background::spawn(&bin("cg-spin"), &["0"]);
    let (top, inner) = {
        let mut cgroups = TestCgroups::new("cleanup");
        let inner = cgroups.create("a/b");
        cgroups.move_into(&inner, spinner.pid());
        (cgroups.top.clone(), cgroups.dir(&inner))
    };
    assert!(
        !inner.exists() && !top.exists(),
        "{} left behind",
        top.display()
    );
    drop(spinner);
}

#[test]
fn a_hostile_cgroup_name_reaches_the_summary_escaped() {
    require_root();
    // A unit whose name reads backwards (a right-to-left override) and one holding an OSC 52
    // clipboard write: the first names its group, the second is refused as a cgroup path
    // (control characters) with a warning; neither reaches the terminal raw.
    let mut cgroups = TestCgroups::new("hostile");
    let spin = bin("cg-spin");
    let mut spinners = Vec::new();
    // Two processes in the first, so that the summary has a row for the group.
    for rel in [
        "system.slice/\u{202e}gpj.service",
        "system.slice/\u{202e}gpj.service",
        "system.slice/x\x1b]52;c;QUJD\x07.service",
    ] {
        let cgroup = cgroups.create(rel);
        let spinner = Background::spawn(&spin, &["0"]);
        cgroups.move_into(&cgroup, spinner.pid());
        spinners.push(spinner);
    }
    let pids: Vec<String> = spinners.iter().map(|s| s.pid().to_string()).collect();
    let run = cg_trace(&[
        "--source",
        "model",
        "--group-by",
        "cgroup",
        "--pid",
        &pids.join(","),
        "--duration",
        "1",
    ]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let stderr = run.stderr();
    let raw: Vec<char> = stderr
        .chars()
        .filter(|&c| c != '\n' && (c.is_control() || ('\u{202a}'..='\u{202e}').contains(&c)))
        .collect();
    assert!(raw.is_empty(), "raw {raw:?} in:\n{}", stderr.escape_debug());
    assert!(stderr.contains("\\u202egpj.service"), "{stderr}");
}
