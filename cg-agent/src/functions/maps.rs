//! A process's memory map (`/proc/PID/maps`): which file is mapped where, so that an address
//! becomes (file, file offset). A map once read is only ever completed by later reads, never
//! replaced by an empty one: a process that has exited but is not yet reaped reads as an
//! empty map (its memory is gone), and its samples must keep the map they were taken in.
//!
//! Read by hand rather than through procfs 0.17, although procfs is as fast here (20.7-23.3 µs
//! per process by hand, -0.1 to +3.0 % through procfs; `cargo xtask bench --proc`: release
//! build, this 2-CPU VM's ~100 processes, median of 31 rounds, three runs): procfs reads the
//! whole file with no bound (ours stops at [`MAPS_MAX_BYTES`]) and fails the whole map on one
//! line it cannot parse (ours skips that line), and the mapping's path rules below
//! (pseudo-files, `(deleted)`, one allocation per file) would stay ours anyway.

use std::{io::Read as _, path::PathBuf, sync::Arc};

/// The most of a maps file read (a process with ~500,000 mappings); the rest is ignored.
pub const MAPS_MAX_BYTES: u64 = 64 << 20;

/// One mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    pub executable: bool,
    /// The mapped file; `None` for anonymous memory. Pseudo-files (`[vdso]`, `[stack]`)
    /// keep their bracketed name.
    pub path: Option<Arc<PathBuf>>,
}

/// A process's mappings, sorted by address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcMaps {
    pub mappings: Vec<Mapping>,
}

impl ProcMaps {
    /// Reads `/proc/PID/maps` under `proc_root`.
    /// Up to [`MAPS_MAX_BYTES`] are read. An exited process that is not yet reaped reads as
    /// an empty map: see [`ProcMaps::update`].
    pub fn read(proc_root: &std::path::Path, pid: u32) -> std::io::Result<Self> {
        let file = std::fs::File::open(proc_root.join(pid.to_string()).join("maps"))?;
        let mut bytes = Vec::new();
        file.take(MAPS_MAX_BYTES).read_to_end(&mut bytes)?;
        Ok(Self::parse(&String::from_utf8_lossy(&bytes)))
    }

    /// Whether any file is mapped: a live process always maps its executable (a map without
    /// one is the empty read of a process that is gone).
    pub fn maps_files(&self) -> bool {
        self.mappings.iter().any(|m| {
            m.path
                .as_ref()
                .is_some_and(|p| !p.as_os_str().as_encoded_bytes().starts_with(b"["))
        })
    }

    /// Completes this map with a newer read of the same program image: the newer read's
    /// mappings win where they overlap, older mappings elsewhere stay (a library unmapped
    /// since still names the samples taken while it was mapped). A newer read that maps no
    /// file (the process is gone) changes nothing. Returns whether anything changed.
    pub fn update(&mut self, newer: ProcMaps) -> bool {
        if !newer.maps_files() || newer == *self {
            return false;
        }
        let mut merged = newer.mappings;
        let fresh = merged.clone();
        merged.extend(self.mappings.drain(..).filter(|old| {
            // Kept unless a newer mapping overlaps it (the newer list is sorted).
            let index = fresh.partition_point(|m| m.end <= old.start);
            fresh.get(index).is_none_or(|m| m.start >= old.end)
        }));
        merged.sort_by_key(|m| m.start);
        self.mappings = merged;
        true
    }

    /// Parses the text of a maps file; malformed lines are skipped.
    pub fn parse(text: &str) -> Self {
        let mut mappings: Vec<Mapping> = Vec::new();
        let mut last_path: Option<Arc<PathBuf>> = None;
        for line in text.lines() {
            let mut fields = line.splitn(6, ' ');
            let (Some(range), Some(perms), Some(offset), Some(_dev), Some(inode)) = (
                fields.next(),
                fields.next(),
                fields.next(),
                fields.next(),
                fields.next(),
            ) else {
                continue;
            };
            let Some((start, end)) = range.split_once('-') else {
                continue;
            };
            let (Ok(start), Ok(end), Ok(offset)) = (
                u64::from_str_radix(start, 16),
                u64::from_str_radix(end, 16),
                u64::from_str_radix(offset, 16),
            ) else {
                continue;
            };
            let name = fields.next().unwrap_or("").trim();
            let path = if name.is_empty() || (inode == "0" && !name.starts_with('[')) {
                None
            } else {
                let name = name.trim_end_matches(" (deleted)");
                // Share one allocation among the mappings of one file.
                match &last_path {
                    Some(p) if p.as_os_str() == name => Some(p.clone()),
                    _ => Some(Arc::new(PathBuf::from(name))),
                }
            };
            last_path.clone_from(&path);
            mappings.push(Mapping {
                start,
                end,
                offset,
                executable: perms.as_bytes().get(2) == Some(&b'x'),
                path,
            });
        }
        mappings.sort_by_key(|m| m.start);
        ProcMaps { mappings }
    }

    /// The mapping holding `address`.
    pub fn find(&self, address: u64) -> Option<&Mapping> {
        let index = self.mappings.partition_point(|m| m.start <= address);
        let m = self.mappings.get(index.checked_sub(1)?)?;
        (address < m.end).then_some(m)
    }

    /// Every mapped regular file, once, in address order.
    pub fn files(&self) -> Vec<Arc<PathBuf>> {
        let mut out: Vec<Arc<PathBuf>> = Vec::new();
        for path in self.mappings.iter().filter_map(|m| m.path.as_ref()) {
            if !path.to_string_lossy().starts_with('[') && !out.iter().any(|p| p == path) {
                out.push(path.clone());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c0a00000-55d0c0a02000 r--p 00000000 fe:01 1234 /usr/bin/cg-funcs
55d0c0a02000-55d0c0a09000 r-xp 00002000 fe:01 1234 /usr/bin/cg-funcs
7f0000000000-7f0000021000 rw-p 00000000 00:00 0
7f1000000000-7f1000028000 r--p 00000000 fe:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6
7f1000028000-7f100019d000 r-xp 00028000 fe:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6
7ffd1000-7ffd3000 r-xp 00000000 00:00 0                          [vdso]
";

    #[test]
    fn maps_addresses_to_files_and_back() {
        let maps = ProcMaps::parse(MAPS);
        assert_eq!(maps.mappings.len(), 6);
        let m = maps.find(0x55d0c0a02010).unwrap();
        assert!(m.executable);
        assert_eq!(m.offset, 0x2000);
        assert_eq!(
            m.path.as_deref().map(|p| p.to_str().unwrap()),
            Some("/usr/bin/cg-funcs")
        );
        assert!(maps.find(0x7f0000000010).unwrap().path.is_none());
        assert!(maps.find(0x10).is_none());
        assert_eq!(maps.files().len(), 2);
    }

    #[test]
    fn an_empty_or_fileless_read_never_replaces_a_known_map() {
        let mut maps = ProcMaps::parse(MAPS);
        let before = maps.clone();
        // An exited, unreaped process: its maps file reads as nothing.
        assert!(!maps.update(ProcMaps::parse("")));
        assert!(!maps.update(ProcMaps::parse(
            "7ffd1000-7ffd3000 r-xp 00000000 00:00 0 [vdso]\n"
        )));
        assert_eq!(maps, before);
        assert!(maps.find(0x55d0c0a02010).unwrap().path.is_some());
    }

    #[test]
    fn a_newer_read_completes_the_map_and_wins_where_it_overlaps() {
        let mut maps = ProcMaps::parse(MAPS);
        // A library mapped since, the anonymous region now a file, libc unmapped.
        let newer = ProcMaps::parse(
            "\
55d0c0a00000-55d0c0a02000 r--p 00000000 fe:01 1234 /usr/bin/cg-funcs
55d0c0a02000-55d0c0a09000 r-xp 00002000 fe:01 1234 /usr/bin/cg-funcs
7f0000000000-7f0000021000 r-xp 00000000 fe:01 77 /usr/lib/libnew.so
",
        );
        assert!(maps.update(newer));
        let path = |a: u64| {
            maps.find(a)
                .and_then(|m| m.path.as_deref())
                .map(|p| p.to_string_lossy().into_owned())
        };
        assert_eq!(path(0x7f0000000010).as_deref(), Some("/usr/lib/libnew.so"));
        // libc's samples, taken while it was mapped, keep their file.
        assert_eq!(
            path(0x7f1000028010).as_deref(),
            Some("/usr/lib/x86_64-linux-gnu/libc.so.6")
        );
        assert_eq!(path(0x55d0c0a02010).as_deref(), Some("/usr/bin/cg-funcs"));
        assert!(maps.mappings.windows(2).all(|w| w[0].end <= w[1].start));
    }
}
