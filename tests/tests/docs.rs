//! The documentation holds together: README.md stays a short first read that links every
//! docs/ page, and every relative link of README.md and docs/*.md names a file that exists
//! and, into a Markdown page, a heading that GitHub turns into that anchor. Reads files only
//! (no root, no binary).

use std::{
    collections::HashSet,
    fs,
    path::{Path, PathBuf},
};

/// The workspace root, where README.md and docs/ are.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// README.md and every Markdown page of docs/, sorted.
fn pages() -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = fs::read_dir(root().join("docs"))
        .expect("docs/ in the workspace")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    pages.insert(0, root().join("README.md"));
    pages
}

/// The page's text outside fenced code blocks, inline code spans removed: what a Markdown
/// renderer reads links and headings from.
fn prose(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            // Every other piece between backticks is code.
            let outside: String = line.split('`').step_by(2).collect();
            lines.push(outside);
        }
    }
    lines
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings (code spans kept: GitHub keeps their text).
fn anchors(text: &str) -> HashSet<String> {
    let mut fenced = false;
    let mut seen = HashSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced
            && line.starts_with('#')
            && let Some(heading) = line.trim_start_matches('#').strip_prefix(' ')
        {
            // A repeated heading gets -1, -2, ... after its anchor.
            let base = anchor(heading);
            let mut name = base.clone();
            let mut n = 0;
            while !seen.insert(name.clone()) {
                n += 1;
                name = format!("{base}-{n}");
            }
        }
    }
    seen
}

/// The targets of a page's `[text](target)` links.
fn links(text: &str) -> Vec<String> {
    prose(text)
        .iter()
        .flat_map(|line| {
            line.split("](")
                .skip(1)
                .filter_map(|rest| rest.split(')').next())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn every_relative_link_names_a_file_and_heading_that_exist() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = fs::read_to_string(&page).unwrap();
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, fragment) = target.split_once('#').unwrap_or((&target, ""));
            let file = if path.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(path)
            };
            if !file.is_file() {
                broken.push(format!("{}: {target}: no such file", page.display()));
            } else if !fragment.is_empty()
                && file.extension().is_some_and(|e| e == "md")
                && !anchors(&fs::read_to_string(&file).unwrap()).contains(fragment)
            {
                broken.push(format!("{}: {target}: no such heading", page.display()));
            }
        }
    }
    assert!(checked > 40, "only {checked} relative links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_is_short_and_links_every_docs_page() {
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines: keep it to a five-minute read and move detail into docs/"
    );
    let linked: HashSet<String> = links(&readme)
        .iter()
        .filter_map(|t| t.strip_prefix("docs/"))
        .map(|t| t.split('#').next().unwrap().to_owned())
        .collect();
    for page in pages().iter().skip(1) {
        let name = page.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            linked.contains(&name),
            "README.md does not link docs/{name}"
        );
    }
}

#[test]
fn anchors_are_github_s() {
    assert_eq!(
        anchor("Comparing runs: `cg-trace diff`"),
        "comparing-runs-cg-trace-diff"
    );
    assert_eq!(
        anchor("Whole program: `--profile`"),
        "whole-program---profile"
    );
    assert_eq!(
        anchor("`repeat` (with `--repeat N`)"),
        "repeat-with---repeat-n"
    );
    let page = "# A\n## B\n```\n# not a heading\n```\n## B\n";
    let found = anchors(page);
    assert_eq!(
        found,
        ["a", "b", "b-1"].map(str::to_owned).into_iter().collect()
    );
}
