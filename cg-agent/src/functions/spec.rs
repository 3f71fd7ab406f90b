//! `--func SPEC`: parsing `[BINARY_OR_LIBRARY:]SYMBOL_GLOB`, matching globs against symbol
//! names, and finding the closest names when nothing matches.

/// One `--func` argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FuncSpec {
    /// As given, for messages.
    pub text: String,
    /// The binary or library: a path, or a file-name glob (`libz.so*`); `None` means the
    /// traced executable.
    pub object: Option<String>,
    /// The symbol glob (`*`, `?`, `[abc]`), matched against demangled and raw names.
    pub pattern: String,
}

impl FuncSpec {
    /// Parses a SPEC. The object is what comes before the first single `:` (a `::` belongs
    /// to a C++ or Rust path).
    pub fn parse(text: &str) -> Result<Self, String> {
        let bytes = text.as_bytes();
        let split = (0..bytes.len()).find(|&i| {
            bytes[i] == b':' && bytes.get(i + 1) != Some(&b':') && (i == 0 || bytes[i - 1] != b':')
        });
        let (object, pattern) = match split {
            Some(i) => (Some(text[..i].trim()), text[i + 1..].trim()),
            None => (None, text.trim()),
        };
        if pattern.is_empty() {
            return Err(format!(
                "--func {text:?}: no symbol; expected [BINARY_OR_LIBRARY:]SYMBOL_GLOB, e.g. \
                 'libz.so*:deflate*' or 'main_loop'"
            ));
        }
        if object == Some("") {
            return Err(format!(
                "--func {text:?}: empty binary or library before ':'"
            ));
        }
        // A glob globset cannot compile (`[z-a]`) is bad input, said before tracing.
        for glob in std::iter::once(pattern).chain(object.filter(|o| is_glob(o))) {
            SymbolGlob::new(glob).map_err(|err| format!("--func {text:?}: {err}"))?;
        }
        Ok(FuncSpec {
            text: text.to_string(),
            object: object.map(str::to_string),
            pattern: pattern.to_string(),
        })
    }

    /// Parses one `--func` value: a SPEC, or several separated by commas as perf takes them
    /// (`--func a,b,c`). Each part is a SPEC of its own. A comma inside brackets is part of
    /// the symbol: `std::map<int, int>::find`, `f(int, char)`, the class `[a,b]`.
    pub fn parse_list(text: &str) -> Result<Vec<Self>, String> {
        top_level_parts(text).into_iter().map(Self::parse).collect()
    }
}

/// `text` split at the commas outside `()`, `<>`, `[]` and `{}`. A closing bracket without
/// its opening one (`operator>`) opens nothing: the depth never goes below 0.
fn top_level_parts(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' | '<' | '[' | '{' => depth += 1,
            ')' | '>' | ']' | '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// A SPEC's symbol or library glob, compiled once (by `globset`) and matched against many
/// names: `*` any run of characters, `?` one (one byte of a non-ASCII character), `[...]` a
/// class (`[!...]` or `[^...]` negated, ranges `a-z`, `]` first is literal). Everything else
/// matches itself, braces and backslashes included: demangled names carry them
/// (`{{closure}}`, `{lambda()#1}`), so they are not globset's alternations or escapes, and an
/// unclosed `[` is a plain `[`.
#[derive(Clone, Debug)]
pub struct SymbolGlob {
    matcher: globset::GlobMatcher,
}

impl SymbolGlob {
    /// Compiles `pattern`.
    pub fn new(pattern: &str) -> Result<Self, String> {
        let glob = globset::GlobBuilder::new(&literal_braces(pattern))
            .literal_separator(false)
            .backslash_escape(false)
            .build()
            .map_err(|err| format!("{pattern:?} is not a glob: {err}"))?;
        Ok(SymbolGlob {
            matcher: glob.compile_matcher(),
        })
    }

    /// Whether `text` matches as a whole.
    pub fn is_match(&self, text: &str) -> bool {
        self.matcher
            .is_match_candidate(&globset::Candidate::from_bytes(text.as_bytes()))
    }
}

/// `pattern` with `{`, `}` and an unclosed `[` outside classes turned into one-character
/// classes, so that globset matches them as themselves; classes are kept as they are.
fn literal_braces(pattern: &str) -> String {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '[' => match class_end(&chars, i) {
                Some(end) => {
                    out.extend(&chars[i..end]);
                    i = end;
                    continue;
                }
                None => out.push_str("[[]"),
            },
            '{' => out.push_str("[{]"),
            '}' => out.push_str("[}]"),
            c => out.push(c),
        }
        i += 1;
    }
    out
}

/// The index after the class that starts at `p[start] == '['`, or `None` when it is not
/// closed. `!` or `^` first negates; a `]` first (after them) is a member.
fn class_end(p: &[char], start: usize) -> Option<usize> {
    let mut i = start + 1;
    if matches!(p.get(i), Some('!' | '^')) {
        i += 1;
    }
    if p.get(i) == Some(&']') {
        i += 1;
    }
    while i < p.len() {
        if p[i] == ']' {
            return Some(i + 1);
        }
        i += 1;
    }
    None
}

/// Whether `pattern` matches `text` as a whole (see [`SymbolGlob`]); a pattern that is not a
/// glob matches nothing. For one-off matches: compile a [`SymbolGlob`] to match many names.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    SymbolGlob::new(pattern).is_ok_and(|glob| glob.is_match(text))
}

/// Whether the text has glob characters.
pub fn is_glob(text: &str) -> bool {
    text.contains(['*', '?', '['])
}

/// Up to `n` names closest to `pattern` (its glob characters removed), best first.
pub fn closest<'a>(pattern: &str, names: impl Iterator<Item = &'a str>, n: usize) -> Vec<String> {
    let needle: String = pattern
        .chars()
        .filter(|c| !matches!(c, '*' | '?' | '[' | ']'))
        .collect::<String>()
        .to_lowercase();
    let mut scored: Vec<(f64, &str)> = names
        .map(|name| {
            let lower = name.to_lowercase();
            let mut score = strsim::jaro_winkler(&needle, &lower);
            if !needle.is_empty() && lower.contains(&needle) {
                score += 1.0;
            }
            (score, name)
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    let mut out: Vec<String> = Vec::new();
    for (_, name) in scored {
        if !out.iter().any(|o| o == name) {
            out.push(name.to_string());
        }
        if out.len() == n {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_splits_at_top_level_commas_only() {
        let patterns = |text: &str| -> Vec<(Option<String>, String)> {
            FuncSpec::parse_list(text)
                .unwrap()
                .into_iter()
                .map(|s| (s.object, s.pattern))
                .collect()
        };
        let own = |p: &str| (None, p.to_string());
        assert_eq!(patterns("a,b, c"), [own("a"), own("b"), own("c")]);
        assert_eq!(patterns("main"), [own("main")]);
        assert_eq!(
            patterns("libz.so*:deflate*,inflate*"),
            [
                (Some("libz.so*".into()), "deflate*".into()),
                own("inflate*")
            ]
        );
        // Commas inside template arguments, parameter lists and classes stay.
        assert_eq!(
            patterns("std::map<int, std::pair<int, int>>::find,f(int, char),x[a,b]"),
            [
                own("std::map<int, std::pair<int, int>>::find"),
                own("f(int, char)"),
                own("x[a,b]")
            ]
        );
        assert_eq!(
            patterns("operator>,operator()"),
            [own("operator>"), own("operator()")]
        );
        // An empty part is an error that says what was expected.
        let err = FuncSpec::parse_list("a,,b").unwrap_err();
        assert!(err.contains("no symbol"), "{err}");
    }

    #[test]
    fn splits_object_from_symbol_but_not_paths_of_names() {
        let spec = FuncSpec::parse("libz.so*:deflate*").unwrap();
        assert_eq!(spec.object.as_deref(), Some("libz.so*"));
        assert_eq!(spec.pattern, "deflate*");
        let spec = FuncSpec::parse("ns::Klass::*").unwrap();
        assert_eq!(spec.object, None);
        assert_eq!(spec.pattern, "ns::Klass::*");
        let spec = FuncSpec::parse("/usr/lib/libfoo.so:ns::f").unwrap();
        assert_eq!(spec.object.as_deref(), Some("/usr/lib/libfoo.so"));
        assert_eq!(spec.pattern, "ns::f");
        assert!(FuncSpec::parse("libz.so:").is_err());
        assert!(FuncSpec::parse(":f").is_err());
    }

    #[test]
    fn globs_match_like_a_shell() {
        assert!(glob_match("compress_*", "compress_block"));
        assert!(!glob_match("compress_*", "decompress_block"));
        assert!(glob_match("*work*", "cg_work_a"));
        assert!(glob_match("cg_work_?", "cg_work_b"));
        assert!(!glob_match("cg_work_?", "cg_work_bb"));
        assert!(glob_match("f[a-c]o", "fbo"));
        assert!(!glob_match("f[!a-c]o", "fbo"));
        assert!(glob_match("libz.so*", "libz.so.1.2.13"));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exactly"));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "axxbyy"));
    }

    #[test]
    fn braces_backslashes_and_unclosed_brackets_match_themselves() {
        // Demangled names carry braces: not alternations.
        assert!(glob_match("*::{{closure}}", "app::main::{{closure}}"));
        assert!(!glob_match("*::{{closure}}", "app::main::closure"));
        assert!(glob_match("f{a,b}", "f{a,b}"));
        assert!(!glob_match("f{a,b}", "fa"));
        assert!(glob_match(
            "ns::f()::{lambda(int)#1}::*",
            "ns::f()::{lambda(int)#1}::operator()"
        ));
        assert!(glob_match("a\\b*", "a\\bc"));
        assert!(glob_match("operator[*", "operator[]"));
        assert!(glob_match("x[", "x["));
        // Classes: `]` first is a member, `^` negates like `!`, braces inside are members.
        assert!(glob_match("f[]a]o", "f]o"));
        assert!(glob_match("f[^a-c]o", "fzo"));
        assert!(!glob_match("f[^a-c]o", "fbo"));
        assert!(glob_match("f[{}]o", "f}o"));
        // `**` is `*`, across `/` and `::` alike.
        assert!(glob_match("a**b", "a/x::yb"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("?", ""));
    }

    #[test]
    fn a_glob_that_cannot_compile_is_refused_when_parsed() {
        let err = FuncSpec::parse("f[z-a]").unwrap_err();
        assert!(err.contains("f[z-a]"), "{err}");
        assert!(FuncSpec::parse("lib[z-a].so:f").is_err());
        assert!(!glob_match("f[z-a]", "fz"));
    }

    #[test]
    fn closest_names_rank_substrings_first() {
        let names = ["cg_work_a", "cg_work_b", "main", "compress_block"];
        let best = closest("work_c", names.iter().copied(), 2);
        assert_eq!(best.len(), 2);
        assert!(best.iter().all(|n| n.starts_with("cg_work")), "{best:?}");
    }
}
