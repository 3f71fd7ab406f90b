//! Helpers shared by the fuzz targets: a scratch directory on tmpfs where a target writes the
//! files it fuzzes (the sysfs and procfs readers take a root path, so they run their real code
//! on a generated tree), and the small text format those trees are written in.

use std::{
    fs,
    path::{Path, PathBuf},
    sync::OnceLock,
};

use cg_agent::host::HostInfo;

static SCRATCH: OnceLock<tempfile::TempDir> = OnceLock::new();

extern "C" fn remove_scratch() {
    if let Some(dir) = SCRATCH.get() {
        let _ = fs::remove_dir_all(dir.path());
    }
}

/// A fresh, empty directory for one input (the previous input's is removed). It lives in a
/// private directory (random name, mode 0700) on `/dev/shm` where there is one, removed when
/// the fuzzer exits.
pub fn fresh_dir() -> PathBuf {
    let base = SCRATCH.get_or_init(|| {
        let parent = Path::new("/dev/shm");
        let dir = if parent.is_dir() {
            tempfile::Builder::new()
                .prefix("cg-trace-fuzz-")
                .tempdir_in(parent)
        } else {
            tempfile::Builder::new().prefix("cg-trace-fuzz-").tempdir()
        }
        .expect("a scratch directory");
        // SAFETY: registers a plain function without arguments, run at exit.
        unsafe { libc::atexit(remove_scratch) };
        dir
    });
    let run = base.path().join("run");
    match fs::remove_dir_all(&run) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => panic!("cleaning {}: {err}", run.display()),
    }
    fs::create_dir(&run).expect("creating the run directory");
    run
}

/// A file tree described by the input, one file a line: `relative/path=value` (the file then
/// holds `value` and a newline). Lines starting with `!` are updates, written with
/// [`Tree::apply_updates`] between two reads; a line `#cpus=P,P,...` gives the package of
/// each CPU of the host. Paths that could leave the tree (`..`, absolute) are dropped.
#[derive(Debug, Default)]
pub struct Tree {
    pub files: Vec<(PathBuf, Vec<u8>)>,
    pub updates: Vec<(PathBuf, Vec<u8>)>,
    pub cpu_packages: Vec<u32>,
}

/// Files in one tree at most (bounds the work per input).
const MAX_FILES: usize = 64;
const MAX_CPUS: usize = 64;

impl Tree {
    pub fn parse(data: &[u8]) -> Self {
        let mut tree = Tree::default();
        for line in data.split(|&b| b == b'\n') {
            if let Some(packages) = line.strip_prefix(b"#cpus=") {
                tree.cpu_packages = String::from_utf8_lossy(packages)
                    .split(',')
                    .filter_map(|p| p.trim().parse().ok())
                    .take(MAX_CPUS)
                    .collect();
                continue;
            }
            let (update, line) = match line.strip_prefix(b"!") {
                Some(rest) => (true, rest),
                None => (false, line),
            };
            let Some(eq) = line.iter().position(|&b| b == b'=') else {
                continue;
            };
            let Some(path) = relative_path(&line[..eq]) else {
                continue;
            };
            let list = if update {
                &mut tree.updates
            } else {
                &mut tree.files
            };
            if list.len() < MAX_FILES {
                list.push((path, line[eq + 1..].to_vec()));
            }
        }
        if tree.cpu_packages.is_empty() {
            tree.cpu_packages = vec![0, 0];
        }
        tree
    }

    /// Writes the files under `root`; a file whose path clashes with an earlier one (a file
    /// where a directory should be) is skipped.
    pub fn write(&self, root: &Path) {
        write_all(root, &self.files);
    }

    pub fn apply_updates(&self, root: &Path) {
        write_all(root, &self.updates);
    }

    pub fn host(&self) -> HostInfo {
        HostInfo {
            hostname: "fuzz".into(),
            kernel: "fuzz".into(),
            cpu_model: "fuzz".into(),
            cpu_packages: self.cpu_packages.clone(),
        }
    }
}

fn write_all(root: &Path, files: &[(PathBuf, Vec<u8>)]) {
    for (path, value) in files {
        let path = root.join(path);
        if let Some(parent) = path.parent()
            && fs::create_dir_all(parent).is_err()
        {
            continue;
        }
        let mut text = value.clone();
        text.push(b'\n');
        let _ = fs::write(&path, text);
    }
}

/// `a/b/c` as a relative path of at most four plain components.
fn relative_path(bytes: &[u8]) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let components: Vec<&[u8]> = bytes.split(|&b| b == b'/').collect();
    let plain =
        |c: &&[u8]| !c.is_empty() && *c != b"." && *c != b".." && !c.contains(&0) && c.len() <= 64;
    if components.len() > 4 || !components.iter().all(plain) {
        return None;
    }
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(bytes)))
}

/// Checks what every source promises of its domains: unique names, a parent that is one of
/// the other domains, and CPUs that exist on the host.
pub fn check_domains(domains: &[cg_agent::sources::DomainSpec], host: &HostInfo) {
    use cg_agent::attribution::Coverage;
    for (i, d) in domains.iter().enumerate() {
        assert!(!d.name.is_empty(), "a domain without a name");
        assert!(
            domains[..i].iter().all(|e| e.name != d.name),
            "domain {} twice",
            d.name
        );
        if let Some(parent) = &d.parent {
            assert!(
                parent != &d.name && domains.iter().any(|e| &e.name == parent),
                "domain {} has parent {parent}, which is not a domain",
                d.name
            );
        }
        if let Coverage::Cpus(cpus) = &d.coverage {
            assert!(
                cpus.iter().all(|&c| (c as usize) < host.cpu_count()),
                "domain {} covers CPUs {cpus:?}, the host has {}",
                d.name,
                host.cpu_count()
            );
        }
    }
}
