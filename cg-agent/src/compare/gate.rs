//! What `diff`'s gate (`--max-increase`) judges, as `--gate` names it: the words it
//! takes, and which rows of a comparison each covers.

use serde::Serialize;

use super::RowKind;
use crate::report::read::chars;

/// What the gate (`--max-increase`) judges: `--gate total|targets|group:NAME|function:NAME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    /// The whole machine: the total and each top-level domain.
    Total,
    /// The targets' energy: in total and in each top-level domain (the default).
    Targets,
    /// One process group, by program name.
    Group(String),
    /// One function, `module:symbol` or the symbol alone.
    Function(String),
}

/// The longest NAME `--gate group:NAME` or `function:NAME` takes.
const GATE_NAME_MAX: usize = 512;

impl std::str::FromStr for Gate {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let named = |name: &str, make: fn(String) -> Gate| {
            if name.is_empty() || name.len() > GATE_NAME_MAX || name.chars().any(char::is_control) {
                Err(format!(
                    "{:?}: give a name of 1 to {GATE_NAME_MAX} printable characters after the colon",
                    chars(text, 60)
                ))
            } else {
                Ok(make(name.to_string()))
            }
        };
        match text.split_once(':') {
            None if text == "total" => Ok(Gate::Total),
            None if text == "targets" => Ok(Gate::Targets),
            Some(("group", name)) => named(name, Gate::Group),
            Some(("function", name)) => named(name, Gate::Function),
            _ => Err(format!(
                "{:?}: the gate is `total` (the whole machine), `targets` (the traced command and \
                 its descendants), `group:NAME` (a program's processes) or `function:NAME`",
                chars(text, 60)
            )),
        }
    }
}

impl std::fmt::Display for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Gate::Total => f.write_str("total"),
            Gate::Targets => f.write_str("targets"),
            Gate::Group(name) => write!(f, "group:{name}"),
            Gate::Function(name) => write!(f, "function:{name}"),
        }
    }
}

impl Serialize for Gate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl Gate {
    /// What a gate judges when none is named.
    pub const DEFAULT: Gate = Gate::Targets;

    /// Whether this gate judges the row `(kind, name)`; `top_level`: a domain row's domain is
    /// top-level (nested domains' energy is in their parent's, so they are not gated).
    pub(super) fn covers(&self, kind: RowKind, name: &str, top_level: bool) -> bool {
        match self {
            Gate::Total => kind == RowKind::Total || (kind == RowKind::Domain && top_level),
            Gate::Targets => {
                kind == RowKind::Targets || (kind == RowKind::TargetDomain && top_level)
            }
            Gate::Group(program) => kind == RowKind::ProcessGroup && name == program,
            Gate::Function(function) => {
                kind == RowKind::Function
                    && (name == function
                        || name.split_once(':').map(|(_, symbol)| symbol) == Some(function))
            }
        }
    }

    /// In words, for the outputs.
    pub fn describe(&self) -> String {
        match self {
            Gate::Total => "the whole machine's energy (total and top-level domains)".into(),
            Gate::Targets => "the targets' energy (the traced command and its descendants: in \
                              total and per top-level domain)"
                .into(),
            Gate::Group(name) => format!("the energy of process group {name}"),
            Gate::Function(name) => format!("the energy of function {name}"),
        }
    }
}
