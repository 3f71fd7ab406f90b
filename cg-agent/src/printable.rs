//! One home for showing text that comes from outside (process names and command lines,
//! cgroup paths, host names, CPU models, symbols and Python function names, file names, a
//! report being read) in any text output: the summary, `diff`, `sources`, stderr notes, the
//! log, Markdown, the live view and the HTML page.
//!
//! Any local user names their own processes, so such text may hold escape sequences (a
//! clipboard write, hidden text), a carriage return or a line feed (a forged line), or
//! bidirectional overrides (text that reads backwards). [`printable`] shows each of them
//! escaped the way bash's `$'...'` quoting writes it, so the text keeps its meaning and
//! nothing reaches the terminal raw:
//!
//! - `\t`, `\n`, `\r` for tab, line feed and carriage return;
//! - `\xHH` for the other C0 controls and DEL (ESC is `\x1b`, BEL `\x07`);
//! - `\uHHHH` for C1 controls (U+0080 to U+009F), the bidirectional marks, embeddings,
//!   overrides and isolates, and the line and paragraph separators U+2028 and U+2029.
//!
//! A backslash already in the text is shown as it is (the JSON report keeps the exact text).

use std::borrow::Cow;

/// Whether `c` is shown escaped: every control character (C0, DEL, C1), the characters that
/// reorder text (bidirectional marks, embeddings, overrides, isolates) and the line and
/// paragraph separators.
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
                | '\u{2028}' | '\u{2029}'
        )
}

/// `text` with every character [`needs_escape`] names written as bash's `$'...'` would
/// (see the module's text); borrowed when there is nothing to escape.
pub fn printable(text: &str) -> Cow<'_, str> {
    escape_where(text, needs_escape)
}

/// [`printable`], keeping line feeds: for a whole message of our own, several lines long,
/// whose outside parts were already made printable (a second line of defence before stderr).
pub fn printable_lines(text: &str) -> Cow<'_, str> {
    escape_where(text, |c| c != '\n' && needs_escape(c))
}

/// [`printable`] text cut to at most `max_chars` characters, with `…` as the last one when
/// cut (the escapes count as the characters they take on the screen, and are never cut in
/// two).
pub fn fit(text: &str, max_chars: usize) -> String {
    let shown = printable(text);
    if shown.chars().count() <= max_chars {
        return shown.into_owned();
    }
    let room = max_chars.saturating_sub(1);
    let (mut cut, mut used) = (String::new(), 0);
    for c in text.chars() {
        let piece = printable(c.encode_utf8(&mut [0; 4])).into_owned();
        used += piece.chars().count();
        if used > room {
            break;
        }
        cut.push_str(&piece);
    }
    cut.push('…');
    cut
}

/// [`fit`] text for one cell of a Markdown table: on one line, with what Markdown would
/// read as markup (table pipes, emphasis, links, HTML, mentions) backslash-escaped.
pub fn markdown_cell(text: &str, max_chars: usize) -> String {
    let mut out = String::new();
    for c in fit(text, max_chars).chars() {
        if matches!(
            c,
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '|' | '#' | '@' | '!' | '~'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Serialized JSON with the characters [`needs_escape`] names that JSON leaves raw (DEL, C1
/// controls, bidirectional overrides, U+2028/U+2029) written as `\uXXXX` escapes: the same
/// value, safe on a terminal. (Outside strings JSON holds ASCII only, so every such
/// character is inside a string, where the escape is valid.)
pub fn json_text(json: &str) -> Cow<'_, str> {
    // JSON escapes the C0 controls itself but not DEL; its own line breaks stay.
    let raw = |c: char| c != '\n' && needs_escape(c);
    if !json.chars().any(raw) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        if raw(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

fn escape_where(text: &str, escape: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(&escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if !escape(c) => out.push(c),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{:04x}", c as u32)),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The payloads of the audit: OSC 52 (clipboard write) ended by BEL, hidden text (SGR 8),
    /// a forged line after CR and LF, a C1 CSI, a right-to-left override.
    const HOSTILE: &str =
        "a\x1b]52;c;aGk=\x07\x1b[8mb\r\nresult: OK\u{9b}2J\u{202e}gpj.exe\u{2066}\x7f\u{85}";

    #[test]
    fn controls_and_bidi_overrides_are_escaped_as_bash_quotes_them() {
        assert_eq!(
            printable(HOSTILE),
            "a\\x1b]52;c;aGk=\\x07\\x1b[8mb\\r\\nresult: OK\\u009b2J\\u202egpj.exe\\u2066\\x7f\
             \\u0085"
        );
        assert_eq!(printable("tab\there"), "tab\\there");
    }

    #[test]
    fn nothing_raw_is_left_and_clean_text_is_borrowed() {
        assert!(!printable(HOSTILE).chars().any(needs_escape));
        assert!(matches!(printable("python3 -c 'x = 1'"), Cow::Borrowed(_)));
        // Other text, wide characters and backslashes stay as they are.
        assert_eq!(printable("café 能源 C:\\x"), "café 能源 C:\\x");
    }

    #[test]
    fn lines_keep_their_line_feeds_only() {
        assert_eq!(printable_lines("one\ntwo\x1b[2J\r"), "one\ntwo\\x1b[2J\\r");
    }

    #[test]
    fn fit_cuts_the_escaped_text_with_an_ellipsis() {
        assert_eq!(fit("abc", 5), "abc");
        assert_eq!(fit("abcdefgh", 5), "abcd…");
        assert_eq!(fit("a\nb", 4), "a\\nb");
        assert_eq!(fit("a\nbc", 4), "a\\n…");
        // An escape is never cut in two.
        assert_eq!(fit("ab\x1bcd", 5), "ab…");
        let long = "x".repeat(100_000);
        assert_eq!(fit(&long, 26).chars().count(), 26);
    }

    #[test]
    fn json_keeps_its_value_with_nothing_raw() {
        let value = serde_json::json!({ "hostname": HOSTILE });
        let text = serde_json::to_string_pretty(&value).unwrap();
        let shown = json_text(&text);
        assert!(
            !shown.chars().any(|c| c != '\n' && needs_escape(c)),
            "{shown}"
        );
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&shown).unwrap(),
            value
        );
    }

    #[test]
    fn markdown_cells_escape_markup_on_one_line() {
        assert_eq!(
            markdown_cell("a|b\n*c* <d> @e", 120),
            "a\\|b\\\\n\\*c\\* \\<d\\> \\@e"
        );
    }
}
