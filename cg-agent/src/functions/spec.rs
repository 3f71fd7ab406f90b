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
        Ok(FuncSpec {
            text: text.to_string(),
            object: object.map(str::to_string),
            pattern: pattern.to_string(),
        })
    }
}

/// Shell-style glob match: `*` any run of characters, `?` one character, `[...]` a class
/// (`[!...]` negated, ranges `a-z`). Everything else matches itself.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // Iterative matching with backtracking to the last `*`.
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() {
            match p[pi] {
                '*' => {
                    star = Some((pi, ti));
                    pi += 1;
                    continue;
                }
                '?' => {
                    pi += 1;
                    ti += 1;
                    continue;
                }
                '[' => {
                    if let Some((matched, next)) = class_match(&p, pi, t[ti]) {
                        if matched {
                            pi = next;
                            ti += 1;
                            continue;
                        }
                    } else if t[ti] == '[' {
                        pi += 1;
                        ti += 1;
                        continue;
                    }
                }
                c if c == t[ti] => {
                    pi += 1;
                    ti += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((star_pi, star_ti)) => {
                pi = star_pi + 1;
                ti = star_ti + 1;
                star = Some((star_pi, star_ti + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Matches `c` against the class starting at `p[start] == '['`; returns whether it matched
/// and the index after the class, or `None` when the class is not closed.
fn class_match(p: &[char], start: usize, c: char) -> Option<(bool, usize)> {
    let mut i = start + 1;
    let negated = matches!(p.get(i), Some('!') | Some('^'));
    if negated {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    while i < p.len() {
        if p[i] == ']' && !first {
            return Some((matched != negated, i + 1));
        }
        first = false;
        if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
            if p[i] <= c && c <= p[i + 2] {
                matched = true;
            }
            i += 3;
        } else {
            if p[i] == c {
                matched = true;
            }
            i += 1;
        }
    }
    None
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
    fn closest_names_rank_substrings_first() {
        let names = ["cg_work_a", "cg_work_b", "main", "compress_block"];
        let best = closest("work_c", names.iter().copied(), 2);
        assert_eq!(best.len(), 2);
        assert!(best.iter().all(|n| n.starts_with("cg_work")), "{best:?}");
    }
}
