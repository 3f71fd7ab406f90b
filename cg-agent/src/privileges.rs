//! Who cg-trace is and whom it acts for. Checks, before anything is loaded, that we may load
//! eBPF programs (root, or the capabilities CAP_BPF and CAP_PERFMON; CAP_SYS_ADMIN also
//! allows it), refuses setuid installs, and decides once, in [`Invoker::detect`], which user a
//! run is for: the user behind `sudo`, or ourselves. That user runs the wrapped command and
//! owns every file cg-trace writes (see [`crate::output`]).

use std::{
    ffi::{CStr, CString, OsStr},
    fs,
    os::unix::{ffi::OsStrExt, fs::MetadataExt},
    path::PathBuf,
};

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// The effective capability set of this process.
fn effective_caps() -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        })
        .unwrap_or(0)
}

fn has(caps: u64, cap: u32) -> bool {
    caps & (1 << cap) != 0
}

/// `Err(message)` when the process can't load the probes, with what to do about it.
pub fn check_can_trace() -> Result<(), String> {
    let caps = effective_caps();
    if has(caps, CAP_SYS_ADMIN) || (has(caps, CAP_BPF) && has(caps, CAP_PERFMON)) {
        return Ok(());
    }
    let missing: Vec<&str> = [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")]
        .into_iter()
        .filter(|(cap, _)| !has(caps, *cap))
        .map(|(_, name)| name)
        .collect();
    Err(format!(
        "cg-trace needs root, or the capabilities CAP_BPF and CAP_PERFMON (missing: {}), to load \
         its eBPF probes: run it with sudo, or grant them with \
         `sudo setcap cap_bpf,cap_perfmon+ep $(command -v cg-trace)`",
        missing.join(", ")
    ))
}

/// A user's entry in the passwd database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub home: PathBuf,
    pub shell: PathBuf,
}

/// The user a run is for: who runs the wrapped command and owns the files cg-trace writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invoker {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups: the group database's for a user behind sudo (as login gives
    /// them), ours otherwise.
    pub groups: Vec<u32>,
    /// The passwd entry of `uid`, when it has one.
    pub account: Option<Account>,
    /// We are root because this user ran us through `sudo`: the command is started as them
    /// and files are created with their identity. False: we act as ourselves.
    pub via_sudo: bool,
}

/// What [`Invoker::detect`] decides from: our ids, sudo's variables and our parent process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    pub ruid: u32,
    pub euid: u32,
    pub rgid: u32,
    pub egid: u32,
    pub sudo_uid: Option<String>,
    pub sudo_gid: Option<String>,
    pub parent: Option<Parent>,
}

/// Our parent process, as `/proc` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parent {
    /// Its executable (`/proc/PPID/exe`).
    pub exe: PathBuf,
    /// Owner and mode of that executable.
    pub exe_uid: u32,
    pub exe_mode: u32,
    /// Its real and effective uid (`/proc/PPID/status`).
    pub ruid: u32,
    pub euid: u32,
}

/// Who the facts say the run is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Ourselves,
    /// The user behind sudo.
    Sudo {
        uid: u32,
        gid: u32,
    },
}

impl Facts {
    /// This process's facts.
    pub fn read() -> Self {
        // SAFETY: these calls have no preconditions.
        let (ruid, euid, rgid, egid, ppid) = unsafe {
            (
                libc::getuid(),
                libc::geteuid(),
                libc::getgid(),
                libc::getegid(),
                libc::getppid(),
            )
        };
        let parent = Parent::read(ppid as u32).filter(|_| {
            // The parent must still be the one we read (not gone and its pid reused).
            // SAFETY: getppid has no preconditions.
            unsafe { libc::getppid() == ppid }
        });
        Facts {
            ruid,
            euid,
            rgid,
            egid,
            sudo_uid: std::env::var("SUDO_UID").ok(),
            sudo_gid: std::env::var("SUDO_GID").ok(),
            parent,
        }
    }

    /// Refuses setuid and setgid installs; then trusts sudo's variables only when we run as
    /// root, were started by a root sudo (our parent's executable is a setuid-root `sudo`
    /// running with effective uid 0), and that sudo's real uid (sudo keeps the invoking
    /// user's) is `SUDO_UID`. Anything else is ourselves: a stale or forged `SUDO_UID` (in a
    /// `sudo -s` shell, or set by hand) is ignored.
    pub fn decide(&self) -> Result<Decision, String> {
        if self.ruid != self.euid || self.rgid != self.egid {
            return Err(format!(
                "cg-trace refuses to run setuid or setgid (real uid {}, effective uid {}; real \
                 gid {}, effective gid {}): anyone could then trace as root. Remove the bit \
                 (`sudo chmod u-s,g-s $(command -v cg-trace)`) and run it with sudo, or grant \
                 the capabilities instead: `sudo setcap cap_bpf,cap_perfmon+ep $(command -v \
                 cg-trace)`",
                self.ruid, self.euid, self.rgid, self.egid
            ));
        }
        if self.ruid != 0 {
            return Ok(Decision::Ourselves);
        }
        let number = |v: &Option<String>| v.as_deref().and_then(|v| v.trim().parse::<u32>().ok());
        let (Some(uid), Some(gid)) = (number(&self.sudo_uid), number(&self.sudo_gid)) else {
            return Ok(Decision::Ourselves);
        };
        let Some(parent) = &self.parent else {
            return Ok(Decision::Ourselves);
        };
        let name = parent.exe.file_name().map(OsStr::as_bytes);
        let is_sudo = matches!(name, Some(b"sudo" | b"sudo (deleted)"))
            && parent.exe_uid == 0
            && parent.exe_mode & libc::S_ISUID != 0
            && parent.euid == 0;
        if uid == 0 || !is_sudo || parent.ruid != uid {
            return Ok(Decision::Ourselves);
        }
        Ok(Decision::Sudo { uid, gid })
    }
}

impl Parent {
    fn read(ppid: u32) -> Option<Self> {
        let dir = PathBuf::from(format!("/proc/{ppid}"));
        let exe = fs::read_link(dir.join("exe")).ok()?;
        // The executable itself, even when deleted or replaced since.
        let meta = fs::metadata(dir.join("exe")).ok()?;
        let status = fs::read_to_string(dir.join("status")).ok()?;
        let mut uids = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))?
            .split_whitespace()
            .map(|v| v.parse::<u32>().ok());
        let (ruid, euid) = (uids.next()??, uids.next()??);
        Some(Parent {
            exe,
            exe_uid: meta.uid(),
            exe_mode: meta.mode(),
            ruid,
            euid,
        })
    }
}

impl Invoker {
    /// Decides, from this process's facts, whom the run is for (see [`Facts::decide`]).
    /// `Err` (exit 2) for a setuid or setgid install.
    pub fn detect() -> Result<Self, String> {
        Ok(Self::from_decision(Facts::read().decide()?))
    }

    pub fn from_decision(decision: Decision) -> Self {
        match decision {
            Decision::Ourselves => Self::ourselves(),
            Decision::Sudo { uid, gid } => {
                let account = account_of(uid);
                let groups = account
                    .as_ref()
                    .and_then(|a| supplementary_groups(&a.name, gid))
                    .unwrap_or_else(|| vec![gid]);
                Invoker {
                    uid,
                    gid,
                    groups,
                    account,
                    via_sudo: true,
                }
            }
        }
    }

    /// This process as it is.
    pub fn ourselves() -> Self {
        // SAFETY: these calls have no preconditions.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Invoker {
            uid,
            gid,
            groups: own_groups(),
            account: account_of(uid),
            via_sudo: false,
        }
    }

    /// `uid 1000 (alice)`.
    pub fn describe(&self) -> String {
        describe_uid(self.uid)
    }

    /// The variables `sudo -u USER` sets for the user: HOME, USER, LOGNAME, SHELL and MAIL
    /// from the passwd entry. `None` for a variable to remove (no entry).
    pub fn environment(&self) -> Vec<(&'static str, Option<std::ffi::OsString>)> {
        let names = ["HOME", "USER", "LOGNAME", "SHELL", "MAIL"];
        match &self.account {
            Some(a) => vec![
                ("HOME", Some(a.home.clone().into_os_string())),
                ("USER", Some(a.name.clone().into())),
                ("LOGNAME", Some(a.name.clone().into())),
                ("SHELL", Some(a.shell.clone().into_os_string())),
                ("MAIL", Some(format!("/var/mail/{}", a.name).into())),
            ],
            None => names.into_iter().map(|n| (n, None)).collect(),
        }
    }
}

/// `uid 1000 (alice)`, or `uid 1000` without a passwd entry.
pub fn describe_uid(uid: u32) -> String {
    match account_of(uid) {
        Some(a) => format!("uid {uid} ({})", a.name),
        None => format!("uid {uid}"),
    }
}

/// The passwd entry of `uid` (getpwuid_r), when there is one.
pub fn account_of(uid: u32) -> Option<Account> {
    let mut buffer = vec![0u8; 4096];
    loop {
        // SAFETY: passwd and result are written by getpwuid_r; the strings it points at live
        // in `buffer`, which outlives their use below.
        let mut passwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let ret = unsafe {
            libc::getpwuid_r(
                uid,
                &mut passwd,
                buffer.as_mut_ptr().cast(),
                buffer.len(),
                &mut result,
            )
        };
        if ret == libc::ERANGE && buffer.len() < 1 << 20 {
            buffer.resize(buffer.len() * 4, 0);
            continue;
        }
        if ret != 0 || result.is_null() {
            return None;
        }
        let text = |p: *const libc::c_char| {
            if p.is_null() {
                Vec::new()
            } else {
                // SAFETY: getpwuid_r points at NUL-terminated strings inside `buffer`.
                unsafe { CStr::from_ptr(p) }.to_bytes().to_vec()
            }
        };
        let name = String::from_utf8(text(passwd.pw_name)).ok()?;
        return Some(Account {
            name,
            home: PathBuf::from(OsStr::from_bytes(&text(passwd.pw_dir))),
            shell: PathBuf::from(OsStr::from_bytes(&text(passwd.pw_shell))),
        });
    }
}

/// The user's groups from the group database (getgrouplist), read before forking because
/// it is not async-signal-safe.
fn supplementary_groups(user: &str, gid: u32) -> Option<Vec<u32>> {
    let name = CString::new(user).ok()?;
    let mut count: libc::c_int = 64;
    loop {
        let mut groups = vec![0 as libc::gid_t; count as usize];
        let before = count;
        // SAFETY: groups has room for `count` entries; getgrouplist updates count.
        let ret =
            unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut count) };
        if ret >= 0 {
            groups.truncate(count as usize);
            return Some(groups);
        }
        if count <= before {
            count = before * 2;
        }
        if count > 65_536 {
            return None;
        }
    }
}

/// This process's supplementary groups.
fn own_groups() -> Vec<u32> {
    // SAFETY: getgroups with size 0 returns the count; then fills a buffer of that size.
    unsafe {
        let count = libc::getgroups(0, std::ptr::null_mut());
        if count <= 0 {
            return Vec::new();
        }
        let mut groups = vec![0 as libc::gid_t; count as usize];
        let got = libc::getgroups(count, groups.as_mut_ptr());
        groups.truncate(got.max(0) as usize);
        groups
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sudo_parent(ruid: u32) -> Parent {
        Parent {
            exe: "/usr/bin/sudo".into(),
            exe_uid: 0,
            exe_mode: 0o104755,
            ruid,
            euid: 0,
        }
    }

    fn root_under_sudo(uid: u32) -> Facts {
        Facts {
            sudo_uid: Some(uid.to_string()),
            sudo_gid: Some("1000".into()),
            parent: Some(sudo_parent(uid)),
            ..Facts::default()
        }
    }

    #[test]
    fn a_root_sudo_parent_whose_real_uid_is_sudo_uid_is_trusted() {
        assert_eq!(
            root_under_sudo(1000).decide(),
            Ok(Decision::Sudo {
                uid: 1000,
                gid: 1000
            })
        );
    }

    #[test]
    fn setuid_and_setgid_installs_are_refused_with_how_to_install() {
        for facts in [
            Facts {
                ruid: 1000,
                euid: 0,
                ..root_under_sudo(4242)
            },
            Facts {
                rgid: 1000,
                egid: 0,
                ..root_under_sudo(4242)
            },
        ] {
            let err = facts.decide().unwrap_err();
            assert!(err.contains("sudo") && err.contains("setcap"), "{err}");
        }
    }

    #[test]
    fn sudo_variables_are_ignored_unless_a_root_sudo_started_us_for_that_user() {
        let forged = [
            // Not root (capabilities install): the variables mean nothing.
            Facts {
                ruid: 1000,
                euid: 1000,
                ..root_under_sudo(4242)
            },
            // The parent is a shell (`sudo -s`, or variables set by hand).
            Facts {
                parent: Some(Parent {
                    exe: "/usr/bin/bash".into(),
                    ..sudo_parent(4242)
                }),
                ..root_under_sudo(4242)
            },
            // A file named sudo that is not setuid root.
            Facts {
                parent: Some(Parent {
                    exe: "/home/mallory/sudo".into(),
                    exe_uid: 1000,
                    exe_mode: 0o100755,
                    ..sudo_parent(4242)
                }),
                ..root_under_sudo(4242)
            },
            // sudo was run by another user than SUDO_UID says.
            Facts {
                parent: Some(sudo_parent(1000)),
                ..root_under_sudo(4242)
            },
            // No parent to check.
            Facts {
                parent: None,
                ..root_under_sudo(4242)
            },
            // SUDO_UID=0 or unparsable.
            root_under_sudo(0),
            Facts {
                sudo_uid: Some("x".into()),
                ..root_under_sudo(4242)
            },
        ];
        for facts in forged {
            assert_eq!(facts.decide(), Ok(Decision::Ourselves), "{facts:?}");
        }
    }

    #[test]
    fn the_sudo_users_environment_comes_from_the_passwd_entry() {
        // uid 0 always has an entry; its fields, not our environment, make the variables.
        let invoker = Invoker {
            account: account_of(0),
            ..Invoker::ourselves()
        };
        let account = invoker.account.clone().expect("root has a passwd entry");
        let env: std::collections::HashMap<_, _> = invoker.environment().into_iter().collect();
        assert_eq!(env["HOME"].as_deref(), Some(account.home.as_os_str()));
        assert_eq!(env["USER"].as_deref(), Some(OsStr::new(&account.name)));
        assert_eq!(env["LOGNAME"].as_deref(), Some(OsStr::new(&account.name)));
        assert_eq!(
            env["MAIL"].as_deref(),
            Some(OsStr::new(&format!("/var/mail/{}", account.name)))
        );
        let nobody = Invoker {
            account: None,
            ..invoker
        };
        assert!(nobody.environment().iter().all(|(_, v)| v.is_none()));
    }
}
