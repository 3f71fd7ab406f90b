//! User names for the view's USER column: the uid -> name map of `/etc/passwd`, read once
//! when the view starts (and again, at most every few seconds, when an unknown uid shows up).

use std::{
    collections::HashMap,
    path::PathBuf,
    time::{Duration, Instant},
};

/// How often an unknown uid may trigger a new read of the passwd file.
const REREAD_AFTER: Duration = Duration::from_secs(5);

/// Names by uid.
#[derive(Debug, Default)]
pub struct Users {
    names: HashMap<u32, String>,
    path: Option<PathBuf>,
    read_at: Option<Instant>,
}

impl Users {
    /// Reads `path` (`/etc/passwd`); an unreadable file leaves every uid shown as a number.
    pub fn load(path: impl Into<PathBuf>) -> Self {
        let mut users = Users {
            path: Some(path.into()),
            ..Users::default()
        };
        users.reread();
        users
    }

    /// Fixed names (tests).
    pub fn from_names(names: impl IntoIterator<Item = (u32, String)>) -> Self {
        Users {
            names: names.into_iter().collect(),
            ..Users::default()
        }
    }

    fn reread(&mut self) {
        if let Some(path) = &self.path {
            if let Ok(text) = std::fs::read_to_string(path) {
                self.names = parse_passwd(&text);
            }
            self.read_at = Some(Instant::now());
        }
    }

    /// Makes sure every uid in `uids` has a name, if the passwd file has it.
    pub fn learn(&mut self, uids: impl IntoIterator<Item = u32>) {
        let unknown = uids.into_iter().any(|uid| !self.names.contains_key(&uid));
        if unknown && self.read_at.is_none_or(|t| t.elapsed() >= REREAD_AFTER) {
            self.reread();
        }
    }

    /// The name of `uid`, or the number itself.
    pub fn name(&self, uid: Option<u32>) -> String {
        match uid {
            Some(uid) => self
                .names
                .get(&uid)
                .cloned()
                .unwrap_or_else(|| uid.to_string()),
            None => "?".into(),
        }
    }
}

/// `name:password:uid:gid:...` lines; malformed lines are skipped.
pub fn parse_passwd(text: &str) -> HashMap<u32, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?.trim();
            let uid = fields.nth(1)?.trim().parse().ok()?;
            (!name.is_empty()).then(|| (uid, name.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_passwd_and_skips_junk() {
        let names = parse_passwd(
            "root:x:0:0:root:/root:/bin/bash\n# comment\nbroken\nalice:x:1000:1000::/home/alice:/bin/sh\nbob:x:notanumber:1::/:/bin/sh\n",
        );
        assert_eq!(names.len(), 2);
        assert_eq!(names[&0], "root");
        assert_eq!(names[&1000], "alice");
    }

    #[test]
    fn unknown_uids_show_as_numbers() {
        let users = Users::from_names([(0, "root".to_string())]);
        assert_eq!(users.name(Some(0)), "root");
        assert_eq!(users.name(Some(4242)), "4242");
        assert_eq!(users.name(None), "?");
    }
}
