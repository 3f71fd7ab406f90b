//! A process's memory map (`/proc/PID/maps`): which file is mapped where, so that an address
//! becomes (file, file offset).

use std::{path::PathBuf, sync::Arc};

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
    pub fn read(proc_root: &std::path::Path, pid: u32) -> std::io::Result<Self> {
        let text = std::fs::read_to_string(proc_root.join(pid.to_string()).join("maps"))?;
        Ok(Self::parse(&text))
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
}
