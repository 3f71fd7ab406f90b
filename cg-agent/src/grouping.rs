//! The ways processes are put together (`--group-by`): into the summary's rows and the live
//! view's (a run, `top`), or into the series of `cg-trace serve`. One list of the ways, each
//! command offering its own part of it ([`GroupBy::ROWS`], [`GroupBy::SERIES`]).

use std::ffi::OsStr;

use clap::{
    ValueEnum as _,
    builder::{PossibleValue, PossibleValuesParser, TypedValueParser},
};

/// How processes are grouped. The help of each way is the summary's (a run's `--help`);
/// `serve` lists its words without it, and groups by the kernel's command name for `comm`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum GroupBy {
    /// One row per program name (the basename of argv[0], else the kernel's name).
    Comm,
    /// One row per process subtree: each child of the wrapped command (or of an attached
    /// pid, or a process whose parent is not traced) with all its descendants.
    Tree,
    /// One row per cgroup: its container, Kubernetes pod or systemd unit, else its path.
    Cgroup,
    /// One group per systemd unit (`[no unit]` outside one).
    Unit,
    /// One row per process.
    #[default]
    None,
}

impl GroupBy {
    /// The ways of the summary's rows (a run's and `top`'s `--group-by`).
    pub const ROWS: &'static [GroupBy] =
        &[GroupBy::Comm, GroupBy::Tree, GroupBy::Cgroup, GroupBy::None];

    /// The ways of `cg-trace serve`'s series (its `--group-by`).
    pub const SERIES: &'static [GroupBy] = &[GroupBy::Comm, GroupBy::Cgroup, GroupBy::Unit];

    /// `--group-by`'s parser for a command that offers `ways`, listed with their help or
    /// without it.
    pub fn parser(ways: &'static [GroupBy], with_help: bool) -> WaysParser {
        WaysParser { ways, with_help }
    }
}

/// Parses `--group-by` into one of the ways a command offers (see [`GroupBy::parser`]); any
/// other word is refused with the list of those it takes, as clap refuses a bad value.
#[derive(Clone, Debug)]
pub struct WaysParser {
    ways: &'static [GroupBy],
    with_help: bool,
}

impl WaysParser {
    /// The words it takes, as `--help`, the man page and the completions list them.
    fn words(&self) -> Vec<PossibleValue> {
        self.ways
            .iter()
            .filter_map(|way| way.to_possible_value())
            .map(|value| {
                if self.with_help {
                    value
                } else {
                    PossibleValue::new(value.get_name().to_owned())
                }
            })
            .collect()
    }
}

impl TypedValueParser for WaysParser {
    type Value = GroupBy;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<GroupBy, clap::Error> {
        let word = PossibleValuesParser::new(self.words()).parse_ref(cmd, arg, value)?;
        self.ways
            .iter()
            .copied()
            .find(|way| {
                way.to_possible_value()
                    .is_some_and(|v| v.matches(&word, true))
            })
            .ok_or_else(|| clap::Error::new(clap::error::ErrorKind::InvalidValue).with_cmd(cmd))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(self.words().into_iter()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--group-by WORD` of a command offering `ways`.
    fn parse(ways: &'static [GroupBy], word: &str) -> Result<GroupBy, clap::Error> {
        let cmd = clap::Command::new("cg-trace");
        GroupBy::parser(ways, false).parse_ref(&cmd, None, OsStr::new(word))
    }

    #[test]
    fn a_command_takes_only_its_own_ways() {
        assert_eq!(parse(GroupBy::ROWS, "tree").unwrap(), GroupBy::Tree);
        assert_eq!(parse(GroupBy::ROWS, "none").unwrap(), GroupBy::None);
        assert_eq!(parse(GroupBy::SERIES, "unit").unwrap(), GroupBy::Unit);
        assert_eq!(parse(GroupBy::SERIES, "cgroup").unwrap(), GroupBy::Cgroup);
        assert!(parse(GroupBy::ROWS, "unit").is_err());
        assert!(parse(GroupBy::SERIES, "tree").is_err());
        assert!(parse(GroupBy::SERIES, "none").is_err());
        assert!(parse(GroupBy::SERIES, "bogus").is_err());
    }

    #[test]
    fn help_goes_with_the_words_only_where_asked() {
        let with: Vec<_> = GroupBy::parser(GroupBy::ROWS, true)
            .possible_values()
            .unwrap()
            .collect();
        assert_eq!(with.len(), 4);
        assert!(with.iter().all(|v| v.get_help().is_some()));
        let without: Vec<_> = GroupBy::parser(GroupBy::SERIES, false)
            .possible_values()
            .unwrap()
            .collect();
        let names: Vec<&str> = without.iter().map(|v| v.get_name()).collect();
        assert_eq!(names, ["comm", "cgroup", "unit"]);
        assert!(without.iter().all(|v| v.get_help().is_none()));
    }
}
