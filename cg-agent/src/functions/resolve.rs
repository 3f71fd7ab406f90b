//! Turns `--func` SPECs into the functions to probe: finds the binary or library each SPEC
//! names (the traced executable, a path, a library it loads, else a library of that name in
//! the library search path), reads its symbols, matches the glob, and computes each
//! function's file offset (uprobes attach by file and offset, in every process that maps
//! the file, whenever it maps it). A library name found nowhere may wait for a traced process
//! to map a matching file (a library loaded with `dlopen` from elsewhere): the session then
//! resolves the SPEC in that file ([`resolve_in_file`]) and attaches as the run goes.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

use super::{
    FunctionError,
    elf::{ElfInfo, FirstInstruction},
    maps::ProcMaps,
    returns::{self, EntryOnly},
    spec::{FuncSpec, SymbolGlob, closest, glob_match, is_glob},
};

/// Where the SPECs are looked up.
#[derive(Clone, Debug, Default)]
pub struct LookupScope {
    /// The traced executable (wrap: the command; attach: the first pid's `/proc/PID/exe`).
    pub executable: Option<PathBuf>,
    /// Running processes whose mapped libraries count as "loaded" (attach mode).
    pub pids: Vec<u32>,
    pub proc_root: PathBuf,
    /// A library name or glob found nowhere waits for a traced process to map a matching
    /// file ([`Resolution::pending`]) rather than being an error (wrap and attach modes).
    pub defer_unloaded: bool,
}

/// What [`resolve`] found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resolution {
    /// The functions to probe from the start.
    pub functions: Vec<ResolvedFunction>,
    /// SPECs whose library is neither loaded by the target nor in the library search path:
    /// they wait for a traced process to map a matching file.
    pub pending: Vec<FuncSpec>,
    /// What the lookup did beyond the usual, for the user (stderr).
    pub notes: Vec<String>,
}

/// A function to probe.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedFunction {
    /// Its id in the kernel (the probes' cookie) and in the report.
    pub id: u32,
    /// Demangled name.
    pub name: String,
    /// Name as stored in the symbol table.
    pub raw: String,
    pub module: PathBuf,
    /// Virtual address in the module.
    pub address: u64,
    /// File offset: where the uprobe goes.
    pub offset: u64,
    pub first_instruction: FirstInstruction,
    /// Why it gets an entry probe only (a return probe would harm the program); `None`:
    /// entry and return probes.
    pub entry_only: Option<EntryOnly>,
    /// The `--func` argument that selected it.
    pub spec: String,
}

/// Resolves every SPEC; fails on a SPEC that matches nothing (naming the closest symbols)
/// and when more than `limit` functions match in all. A SPEC whose library is found nowhere
/// is pending when the scope defers them, else an error that says to give the path.
pub fn resolve(
    specs: &[FuncSpec],
    scope: &LookupScope,
    limit: usize,
) -> Result<Resolution, FunctionError> {
    let mut out: Vec<ResolvedFunction> = Vec::new();
    let mut resolution = Resolution::default();
    let mut seen: BTreeSet<(PathBuf, u64)> = BTreeSet::new();
    let mut elf_cache: Vec<ElfInfo> = Vec::new();
    let libraries = loaded_libraries(scope);
    for spec in specs {
        let objects = objects_for(spec, scope, &libraries)?;
        if objects.paths.is_empty() {
            resolution.notes.push(format!(
                "--func {:?}: no library named {:?} is loaded by the target or in the library \
                 search path yet: its functions are probed when a traced process maps one \
                 (calls before that are not counted; naming the file, --func \
                 /path/to/LIBRARY:{}, probes it from the start)",
                spec.text,
                spec.object.as_deref().unwrap_or_default(),
                spec.pattern
            ));
            resolution.pending.push(spec.clone());
            continue;
        }
        if objects.from_search_path {
            resolution.notes.push(format!(
                "--func {:?}: the target does not link {:?}; probing {} from the library \
                 search path (in whichever process loads it)",
                spec.text,
                spec.object.as_deref().unwrap_or_default(),
                objects
                    .paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let mut matched = 0usize;
        for object in &objects.paths {
            let elf = match elf_cache.iter().position(|e| &e.path == object) {
                Some(i) => &elf_cache[i],
                None => {
                    elf_cache.push(ElfInfo::open(object)?);
                    elf_cache.last().expect("just pushed")
                }
            };
            matched += match_in(spec, elf, &mut seen, &mut out)?;
        }
        if matched == 0 {
            let names = elf_cache
                .iter()
                .filter(|e| objects.paths.contains(&e.path))
                .flat_map(|e| e.functions.iter().filter(|f| !f.resolver))
                .map(super::elf::Symbol::name);
            let near = closest(&spec.pattern, names, 6);
            return Err(FunctionError::Usage(format!(
                "--func {:?}: no function matches {:?} in {}{}",
                spec.text,
                spec.pattern,
                objects
                    .paths
                    .iter()
                    .map(|o| o.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                if near.is_empty() {
                    " (it has no function symbols: stripped?)".to_string()
                } else {
                    format!("; closest symbols: {}", near.join(", "))
                }
            )));
        }
        if out.len() > limit {
            return Err(FunctionError::Usage(format!(
                "--func {:?}: {} functions match so far (limit {limit}); each costs a trap per \
                 call: narrow the glob, or raise --func-limit if you mean it",
                spec.text,
                out.len() + count_rest(specs, spec, scope, &libraries, &mut elf_cache),
            )));
        }
    }
    resolution.functions = out;
    Ok(resolution)
}

/// The functions of `elf` that `spec`'s glob matches, appended to `out` with ids following
/// on (aliases of a function in `seen` are left out; `seen` gets the new ones). Returns how
/// many symbols matched, aliases included.
fn match_in(
    spec: &FuncSpec,
    elf: &ElfInfo,
    seen: &mut BTreeSet<(PathBuf, u64)>,
    out: &mut Vec<ResolvedFunction>,
) -> Result<usize, FunctionError> {
    let object = &elf.path;
    let mut matched = 0usize;
    // The file's image, for decoding the functions' code, once something matches.
    let mut image: Option<Vec<u8>> = None;
    let glob = SymbolGlob::new(&spec.pattern)
        .map_err(|err| FunctionError::Usage(format!("--func {:?}: {err}", spec.text)))?;
    for (index, symbol) in elf.functions.iter().enumerate() {
        if symbol.resolver || !glob.is_match(symbol.name()) && !glob.is_match(&symbol.raw) {
            continue;
        }
        matched += 1;
        if !seen.insert((object.clone(), symbol.address)) {
            continue; // an alias of a function already taken
        }
        let Some(offset) = elf.file_offset(symbol.address) else {
            continue;
        };
        let first_instruction = if cfg!(target_arch = "x86_64") {
            FirstInstruction::of_x86_64(&elf.prologues[index])
        } else {
            FirstInstruction::SingleStepped
        };
        if image.is_none() {
            image = Some(std::fs::read(object).map_err(|e| FunctionError::Elf {
                path: object.clone(),
                reason: e.to_string(),
            })?);
        }
        let entry_only = returns::entry_only(elf, image.as_deref().unwrap_or_default(), index);
        out.push(ResolvedFunction {
            id: out.len() as u32,
            name: symbol.name().to_string(),
            raw: symbol.raw.to_string(),
            module: object.clone(),
            address: symbol.address,
            offset,
            first_instruction,
            entry_only,
            spec: spec.text.clone(),
        });
    }
    Ok(matched)
}

/// The functions of the file `path` that a pending SPEC's glob matches (a library a traced
/// process mapped during the run), with ids from `first_id` on; `probed` holds the
/// (file, address) of the functions probed already, which are left out.
pub fn resolve_in_file(
    spec: &FuncSpec,
    path: &Path,
    first_id: u32,
    probed: &mut BTreeSet<(PathBuf, u64)>,
) -> Result<Vec<ResolvedFunction>, FunctionError> {
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let elf = ElfInfo::open(&path)?;
    let mut out = Vec::new();
    match_in(spec, &elf, probed, &mut out)?;
    for (i, function) in out.iter_mut().enumerate() {
        function.id = first_id.saturating_add(i as u32);
    }
    Ok(out)
}

/// Whether a SPEC's object part (a name, or a glob) designates a file of this name:
/// `libz.so*` matches as a glob; `libz.so` finds `libz.so.1`, `libc` finds `libc.so.6`.
pub fn object_matches(object: &str, file_name: &str) -> bool {
    if is_glob(object) {
        glob_match(object, file_name)
    } else {
        file_name == object
            || file_name.starts_with(&format!("{object}."))
            || file_name.starts_with(&format!("{object}-"))
    }
}

/// How many functions the SPECs after `current` would add (for the refusal message).
fn count_rest(
    specs: &[FuncSpec],
    current: &FuncSpec,
    scope: &LookupScope,
    libraries: &[PathBuf],
    cache: &mut Vec<ElfInfo>,
) -> usize {
    let position = specs
        .iter()
        .position(|s| s == current)
        .unwrap_or(specs.len());
    let mut count = 0;
    for spec in &specs[position + 1..] {
        let Ok(objects) = objects_for(spec, scope, libraries) else {
            continue;
        };
        for object in objects.paths {
            if !cache.iter().any(|e| e.path == object)
                && let Ok(elf) = ElfInfo::open(&object)
            {
                cache.push(elf);
            }
            if let Some(elf) = cache.iter().find(|e| e.path == object)
                && let Ok(glob) = SymbolGlob::new(&spec.pattern)
            {
                count += elf
                    .functions
                    .iter()
                    .filter(|f| !f.resolver && (glob.is_match(f.name()) || glob.is_match(&f.raw)))
                    .count();
            }
        }
    }
    count
}

/// The files a SPEC's object part designates.
#[derive(Debug, Default)]
struct Objects {
    /// Empty: found nowhere, and the scope defers such SPECs.
    paths: Vec<PathBuf>,
    /// Found in the library search path, not among the target's libraries.
    from_search_path: bool,
}

/// The files a SPEC's object part designates.
fn objects_for(
    spec: &FuncSpec,
    scope: &LookupScope,
    libraries: &[PathBuf],
) -> Result<Objects, FunctionError> {
    let found = |paths| Objects {
        paths,
        from_search_path: false,
    };
    let Some(object) = &spec.object else {
        return scope
            .executable
            .clone()
            .map(|e| found(vec![e]))
            .ok_or_else(|| {
                FunctionError::Usage(format!(
                    "--func {:?}: no executable to look in (with --all, name the binary: \
                 --func /path/to/binary:{})",
                    spec.text, spec.pattern
                ))
            });
    };
    if object.contains('/') {
        let path = PathBuf::from(object);
        if !path.is_file() {
            return Err(FunctionError::Usage(format!(
                "--func {:?}: {} is not a file",
                spec.text,
                path.display()
            )));
        }
        return Ok(found(vec![path.canonicalize().unwrap_or(path)]));
    }
    let candidates: Vec<&PathBuf> = scope.executable.iter().chain(libraries).collect();
    let base = |p: &PathBuf| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let mut loaded: Vec<PathBuf> = candidates
        .iter()
        .filter(|p| object_matches(object, &base(p)))
        .map(|p| (*p).clone())
        .collect();
    loaded.dedup();
    if !loaded.is_empty() {
        return Ok(found(loaded));
    }
    let searched = in_search_path(object, scope.executable.as_deref());
    if !searched.is_empty() {
        return Ok(Objects {
            paths: searched,
            from_search_path: true,
        });
    }
    if scope.defer_unloaded {
        return Ok(Objects::default());
    }
    let known: Vec<String> = candidates.iter().map(|p| base(p)).collect();
    Err(FunctionError::Usage(format!(
        "--func {:?}: no binary or library named {object:?} among those the target loads{} \
         or in the library search path (LD_LIBRARY_PATH, /etc/ld.so.conf, /lib, /usr/lib); \
         give the file's path instead: --func /path/to/{}:{}",
        spec.text,
        if known.is_empty() {
            String::new()
        } else {
            format!(" ({})", known.join(", "))
        },
        if is_glob(object) { "LIBRARY" } else { object },
        spec.pattern
    )))
}

/// Most files a library name or glob may designate in the library search path.
const MAX_SEARCH_MATCHES: usize = 16;

/// The ELF files in the library search path (the executable's RUNPATH, then as the dynamic
/// loader looks: [`search_dirs`]) whose name `object` designates, canonical and without
/// repeats (`libz.so`, `libz.so.1` and `libz.so.1.2.13` are one file).
fn in_search_path(object: &str, executable: Option<&Path>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = executable
        .and_then(|exe| ElfInfo::open(exe).ok())
        .map(|elf| elf.runpath.clone())
        .unwrap_or_default();
    dirs.extend(search_dirs());
    in_dirs(object, dirs)
}

/// The ELF files in `dirs` whose name `object` designates, canonical, without repeats.
fn in_dirs(object: &str, dirs: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut seen_dirs: Vec<PathBuf> = Vec::new();
    for dir in dirs {
        let dir = dir.canonicalize().unwrap_or(dir);
        if seen_dirs.contains(&dir) {
            continue;
        }
        seen_dirs.push(dir.clone());
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut names: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| object_matches(object, &e.file_name().to_string_lossy()))
            .map(|e| e.path())
            .collect();
        names.sort();
        for path in names {
            let Ok(path) = path.canonicalize() else {
                continue;
            };
            if path.is_file() && is_elf(&path) && !out.contains(&path) {
                out.push(path);
                if out.len() >= MAX_SEARCH_MATCHES {
                    return out;
                }
            }
        }
    }
    out
}

/// Whether a file starts with the ELF magic (a linker script `libc.so` or an archive does
/// not).
fn is_elf(path: &Path) -> bool {
    use std::io::Read as _;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}

/// The shared libraries the target loads: mapped by the attached processes, or the
/// executable's `DT_NEEDED` closure as the dynamic loader would resolve it.
fn loaded_libraries(scope: &LookupScope) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for &pid in &scope.pids {
        if let Ok(maps) = ProcMaps::read(&scope.proc_root, pid) {
            for file in maps.files() {
                let path = file.as_ref().clone();
                if Some(&path) != scope.executable.as_ref() && !out.contains(&path) {
                    out.push(path);
                }
            }
        }
    }
    if let Some(exe) = &scope.executable {
        for lib in needed_closure(exe) {
            if !out.contains(&lib) {
                out.push(lib);
            }
        }
    }
    out
}

/// Library search directories besides RUNPATH: `LD_LIBRARY_PATH`, `/etc/ld.so.conf`, and the
/// usual defaults.
fn search_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var("LD_LIBRARY_PATH")
        .unwrap_or_default()
        .split(':')
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .collect();
    let mut confs = vec![PathBuf::from("/etc/ld.so.conf")];
    if let Ok(entries) = std::fs::read_dir("/etc/ld.so.conf.d") {
        let mut more: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        more.sort();
        confs.extend(more);
    }
    for conf in confs {
        for line in std::fs::read_to_string(conf).unwrap_or_default().lines() {
            let line = line.trim();
            if line.starts_with('/') {
                dirs.push(PathBuf::from(line));
            }
        }
    }
    for d in [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib/aarch64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
        "/usr/local/lib",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs
}

/// The executable's libraries, breadth first, as far as they can be found.
fn needed_closure(exe: &Path) -> Vec<PathBuf> {
    let dirs = search_dirs();
    let mut out: Vec<PathBuf> = Vec::new();
    let mut queue: Vec<PathBuf> = vec![exe.to_path_buf()];
    while let Some(object) = queue.pop() {
        let Ok(elf) = ElfInfo::open(&object) else {
            continue;
        };
        for name in &elf.needed {
            let found = elf
                .runpath
                .iter()
                .chain(&dirs)
                .map(|d| d.join(name))
                .find(|p| p.is_file());
            if let Some(path) = found {
                let path = path.canonicalize().unwrap_or(path);
                if !out.contains(&path) && out.len() < 256 {
                    out.push(path.clone());
                    queue.insert(0, path);
                }
            }
        }
    }
    out
}

/// The executable a command runs: a path as given, else the first match on `PATH`.
pub fn which(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        let path = PathBuf::from(program);
        return path.is_file().then(|| path.canonicalize().unwrap_or(path));
    }
    std::env::var_os("PATH")?
        .to_string_lossy()
        .split(':')
        .map(|d| Path::new(if d.is_empty() { "." } else { d }).join(program))
        .find(|p| p.is_file())
        .map(|p| p.canonicalize().unwrap_or(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn this_test_binary() -> LookupScope {
        LookupScope {
            executable: std::env::current_exe().ok(),
            pids: Vec::new(),
            proc_root: "/proc".into(),
            defer_unloaded: false,
        }
    }

    #[test]
    fn resolves_globs_in_the_executable_with_offsets() {
        let specs = [FuncSpec::parse("main").unwrap()];
        let found = resolve(&specs, &this_test_binary(), 10).unwrap().functions;
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].raw, "main");
        assert!(found[0].offset > 0);
        assert_eq!(found[0].id, 0);
    }

    #[test]
    fn no_match_names_the_closest_symbols() {
        let specs = [FuncSpec::parse("mian").unwrap()];
        let err = resolve(&specs, &this_test_binary(), 10)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no function matches"), "{err}");
        assert!(err.contains("closest symbols"), "{err}");
        assert!(err.contains("main"), "{err}");
    }

    #[test]
    fn too_many_matches_are_refused_with_the_count() {
        let specs = [FuncSpec::parse("*").unwrap()];
        let err = resolve(&specs, &this_test_binary(), 5)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--func-limit"), "{err}");
        assert!(err.contains("limit 5"), "{err}");
    }

    #[test]
    fn finds_libraries_the_executable_loads() {
        let specs = [FuncSpec::parse("libc:malloc").unwrap()];
        let found = resolve(&specs, &this_test_binary(), 10).unwrap().functions;
        assert!(
            found[0].module.to_string_lossy().contains("libc.so"),
            "{:?}",
            found[0].module
        );
    }

    #[test]
    fn a_library_found_nowhere_waits_or_is_refused_with_the_path_form() {
        let specs = [FuncSpec::parse("libnothing*:f").unwrap()];
        let err = resolve(&specs, &this_test_binary(), 10)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--func /path/to/LIBRARY:f"), "{err}");
        let specs = [FuncSpec::parse("libnothing:f").unwrap()];
        let err = resolve(&specs, &this_test_binary(), 10)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--func /path/to/libnothing:f"), "{err}");
        let scope = LookupScope {
            defer_unloaded: true,
            ..this_test_binary()
        };
        let specs = [
            FuncSpec::parse("libnothing:f").unwrap(),
            FuncSpec::parse("main").unwrap(),
        ];
        let found = resolve(&specs, &scope, 10).unwrap();
        assert_eq!(found.pending, specs[..1]);
        assert_eq!(found.functions.len(), 1, "the other SPEC still resolves");
        assert!(found.notes[0].contains("when a traced process maps one"));
    }

    #[test]
    fn library_names_and_globs_match_file_names_as_the_loader_names_them() {
        assert!(object_matches("libz.so*", "libz.so.1.2.13"));
        assert!(object_matches("libz.so", "libz.so.1"));
        assert!(object_matches("libc", "libc.so.6"));
        assert!(object_matches("libpython3.12", "libpython3.12.so.1.0"));
        assert!(object_matches("libfoo", "libfoo-2.0.so"));
        assert!(!object_matches("libz", "libzstd.so.1"));
        assert!(!object_matches("libz.so*", "libzstd.so.1"));
    }

    #[test]
    fn the_search_path_gives_each_elf_file_once() {
        let dir = tempfile::tempdir().unwrap();
        let elf = dir.path().join("libcgtest.so.1.0");
        std::fs::copy(std::env::current_exe().unwrap(), &elf).unwrap();
        std::os::unix::fs::symlink("libcgtest.so.1.0", dir.path().join("libcgtest.so.1")).unwrap();
        std::os::unix::fs::symlink("libcgtest.so.1.0", dir.path().join("libcgtest.so")).unwrap();
        // A linker script and an archive are not libraries to probe.
        std::fs::write(dir.path().join("libcgtest.a"), b"!<arch>\n").unwrap();
        std::fs::write(
            dir.path().join("libcgtest.so.2"),
            b"GROUP ( libcgtest.so.1 )",
        )
        .unwrap();
        let found = in_dirs(
            "libcgtest*",
            vec![dir.path().to_path_buf(), dir.path().into()],
        );
        assert_eq!(found, [elf.canonicalize().unwrap()]);
        assert!(in_dirs("libother*", vec![dir.path().to_path_buf()]).is_empty());
    }

    #[test]
    fn functions_of_a_file_mapped_later_follow_on_and_are_taken_once() {
        let spec = FuncSpec::parse("main").unwrap();
        let exe = std::env::current_exe().unwrap();
        let mut probed = BTreeSet::new();
        let found = resolve_in_file(&spec, &exe, 7, &mut probed).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].id, 7);
        assert_eq!(found[0].raw, "main");
        assert!(
            resolve_in_file(&spec, &exe, 8, &mut probed)
                .unwrap()
                .is_empty(),
            "already probed"
        );
    }
}
