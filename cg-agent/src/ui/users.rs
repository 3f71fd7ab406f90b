//! User names for the view's USER column: uid -> name through the C library's user database
//! (`getpwuid_r`, via `uzers`), so that users from NSS (LDAP, systemd-homed, SSSD) show as
//! well as those of `/etc/passwd`. Each uid is looked up once and kept; a uid the database
//! does not know is asked again at most every few seconds, so an interval costs a map lookup
//! per process however many there are.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

/// How often a uid the database did not know may be looked up again.
const REREAD_AFTER: Duration = Duration::from_secs(5);

/// Names by uid.
#[derive(Debug, Default)]
pub struct Users {
    names: HashMap<u32, String>,
    /// Uids the database did not know, and when it was asked.
    missed: HashMap<u32, Instant>,
    /// Whether unknown uids are looked up in the system's database (not in tests).
    system: bool,
}

impl Users {
    /// Names from the system's user database, looked up as uids show up.
    pub fn system() -> Self {
        Users {
            system: true,
            ..Users::default()
        }
    }

    /// Fixed names (tests).
    pub fn from_names(names: impl IntoIterator<Item = (u32, String)>) -> Self {
        Users {
            names: names.into_iter().collect(),
            ..Users::default()
        }
    }

    /// Makes sure every uid in `uids` has a name, if the user database has it.
    pub fn learn(&mut self, uids: impl IntoIterator<Item = u32>) {
        if !self.system {
            return;
        }
        for uid in uids {
            if self.names.contains_key(&uid)
                || self
                    .missed
                    .get(&uid)
                    .is_some_and(|t| t.elapsed() < REREAD_AFTER)
            {
                continue;
            }
            match uzers::get_user_by_uid(uid) {
                Some(user) => {
                    let name = user.name().to_string_lossy().into_owned();
                    self.names.insert(uid, name);
                    self.missed.remove(&uid);
                }
                None => {
                    self.missed.insert(uid, Instant::now());
                }
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_uids_show_as_numbers() {
        let users = Users::from_names([(0, "root".to_string())]);
        assert_eq!(users.name(Some(0)), "root");
        assert_eq!(users.name(Some(4242)), "4242");
        assert_eq!(users.name(None), "?");
    }

    #[test]
    fn names_come_from_the_system_user_database_and_misses_are_kept() {
        // What the C library says (files, or NSS modules such as LDAP or systemd-homed).
        let expected =
            |uid: u32| uzers::get_user_by_uid(uid).map(|u| u.name().to_string_lossy().into_owned());
        let me = uzers::get_current_uid();
        let mut users = Users::system();
        // A uid no database holds.
        let nobody_has = (3_000_000_000..)
            .find(|uid| expected(*uid).is_none())
            .unwrap();
        users.learn([0, me, nobody_has]);
        assert_eq!(users.name(Some(0)), expected(0).unwrap());
        assert_eq!(
            users.name(Some(me)),
            expected(me).unwrap_or_else(|| me.to_string())
        );
        assert_eq!(users.name(Some(nobody_has)), nobody_has.to_string());
        assert!(users.missed.contains_key(&nobody_has));
        // Learnt once: not looked up again.
        let asked_at = users.missed[&nobody_has];
        users.learn([nobody_has]);
        assert_eq!(users.missed[&nobody_has], asked_at);
    }
}
