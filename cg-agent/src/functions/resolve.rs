//! Turns `--func` SPECs into the functions to probe: finds the binary or library each SPEC
//! names (the traced executable, a path, or a library it loads), reads its symbols, matches
//! the glob, and computes each function's file offset (uprobes attach by file and offset).

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

use super::{
    FunctionError,
    elf::{ElfInfo, FirstInstruction},
    maps::ProcMaps,
    returns::{self, EntryOnly},
    spec::{FuncSpec, closest, glob_match, is_glob},
};

/// Where the SPECs are looked up.
#[derive(Clone, Debug, Default)]
pub struct LookupScope {
    /// The traced executable (wrap: the command; attach: the first pid's `/proc/PID/exe`).
    pub executable: Option<PathBuf>,
    /// Running processes whose mapped libraries count as "loaded" (attach mode).
    pub pids: Vec<u32>,
    pub proc_root: PathBuf,
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
/// and when more than `limit` functions match in all.
pub fn resolve(
    specs: &[FuncSpec],
    scope: &LookupScope,
    limit: usize,
) -> Result<Vec<ResolvedFunction>, FunctionError> {
    let mut out: Vec<ResolvedFunction> = Vec::new();
    let mut seen: BTreeSet<(PathBuf, u64)> = BTreeSet::new();
    let mut elf_cache: Vec<ElfInfo> = Vec::new();
    // The file images of objects with matches, for decoding the functions' code.
    let mut images: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    let libraries = loaded_libraries(scope);
    for spec in specs {
        let objects = objects_for(spec, scope, &libraries)?;
        let mut matched = 0usize;
        for object in &objects {
            let elf = match elf_cache.iter().position(|e| &e.path == object) {
                Some(i) => &elf_cache[i],
                None => {
                    elf_cache.push(ElfInfo::open(object)?);
                    elf_cache.last().expect("just pushed")
                }
            };
            for (index, symbol) in elf.functions.iter().enumerate() {
                if !glob_match(&spec.pattern, &symbol.name)
                    && !glob_match(&spec.pattern, &symbol.raw)
                {
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
                if !images.iter().any(|(p, _)| p == object) {
                    let image = std::fs::read(object).map_err(|e| FunctionError::Elf {
                        path: object.clone(),
                        reason: e.to_string(),
                    })?;
                    images.push((object.clone(), image));
                }
                let image = images
                    .iter()
                    .find(|(p, _)| p == object)
                    .map_or(&[][..], |(_, image)| image.as_slice());
                let entry_only = returns::entry_only(elf, image, index);
                out.push(ResolvedFunction {
                    id: out.len() as u32,
                    name: symbol.name.clone(),
                    raw: symbol.raw.clone(),
                    module: object.clone(),
                    address: symbol.address,
                    offset,
                    first_instruction,
                    entry_only,
                    spec: spec.text.clone(),
                });
            }
        }
        if matched == 0 {
            let names = elf_cache
                .iter()
                .filter(|e| objects.contains(&e.path))
                .flat_map(|e| e.functions.iter().map(|f| f.name.as_str()));
            let near = closest(&spec.pattern, names, 6);
            return Err(FunctionError::Usage(format!(
                "--func {:?}: no function matches {:?} in {}{}",
                spec.text,
                spec.pattern,
                objects
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
    Ok(out)
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
        for object in objects {
            if !cache.iter().any(|e| e.path == object)
                && let Ok(elf) = ElfInfo::open(&object)
            {
                cache.push(elf);
            }
            if let Some(elf) = cache.iter().find(|e| e.path == object) {
                count += elf
                    .functions
                    .iter()
                    .filter(|f| {
                        glob_match(&spec.pattern, &f.name) || glob_match(&spec.pattern, &f.raw)
                    })
                    .count();
            }
        }
    }
    count
}

/// The files a SPEC's object part designates.
fn objects_for(
    spec: &FuncSpec,
    scope: &LookupScope,
    libraries: &[PathBuf],
) -> Result<Vec<PathBuf>, FunctionError> {
    let Some(object) = &spec.object else {
        return scope.executable.clone().map(|e| vec![e]).ok_or_else(|| {
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
        return Ok(vec![path.canonicalize().unwrap_or(path)]);
    }
    let candidates: Vec<&PathBuf> = scope.executable.iter().chain(libraries).collect();
    let base = |p: &PathBuf| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let mut found: Vec<PathBuf> = candidates
        .iter()
        .filter(|p| {
            let name = base(p);
            if is_glob(object) {
                glob_match(object, &name)
            } else {
                // `libz.so` finds `libz.so.1`, `libc` finds `libc.so.6`.
                name == *object
                    || name.starts_with(&format!("{object}."))
                    || name.starts_with(&format!("{object}-"))
            }
        })
        .map(|p| (*p).clone())
        .collect();
    found.dedup();
    if found.is_empty() {
        let known: Vec<String> = candidates.iter().map(|p| base(p)).collect();
        return Err(FunctionError::Usage(format!(
            "--func {:?}: no binary or library named {object:?} among those the target loads{}; \
             give a path instead (e.g. --func /usr/lib/x86_64-linux-gnu/{object}:{})",
            spec.text,
            if known.is_empty() {
                String::new()
            } else {
                format!(" ({})", known.join(", "))
            },
            spec.pattern
        )));
    }
    Ok(found)
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
        }
    }

    #[test]
    fn resolves_globs_in_the_executable_with_offsets() {
        let specs = [FuncSpec::parse("main").unwrap()];
        let found = resolve(&specs, &this_test_binary(), 10).unwrap();
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
        let found = resolve(&specs, &this_test_binary(), 10).unwrap();
        assert!(
            found[0].module.to_string_lossy().contains("libc.so"),
            "{:?}",
            found[0].module
        );
        let specs = [FuncSpec::parse("libnothing:f").unwrap()];
        assert!(resolve(&specs, &this_test_binary(), 10).is_err());
    }
}
