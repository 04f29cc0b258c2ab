//! Sections of BENCHMARKS.md and RELIABILITY.md cited by name stay true. These two documents
//! have no section numbers: a section is cited by its heading in double quotes right after the
//! document's name (`BENCHMARKS.md "The walls, target by target: 2026-12-06"`, also after a
//! comma, a markdown link's `)` or the word `section`). The rule: the quoted text is the whole
//! heading or its start, and names exactly one heading (whitespace and line breaks count as one
//! space). A heading is not changed once written, so a citation stays true; a heading renamed
//! or removed, or a new one that makes a short citation ambiguous, fails here with every place
//! that cites it. A finding of RELIABILITY.md is cited by its number alone
//! (`RELIABILITY.md F1`), which must start one of its headings (`F1 — …`).
//!
//! BENCHMARKS.md also keeps its anchors stable: every heading is unique (no `-1` suffixes that
//! renumber when a section arrives above), every section of its History is dated and the newest
//! comes first, and every `(#anchor)` link inside it names one of its headings.

use std::path::Path;

use crate::docs_cites::sources;
use crate::docs_map::repo;

/// The documents cited by heading.
const NAMED: &[&str] = &["BENCHMARKS.md", "RELIABILITY.md"];

/// A document's headings, whitespace collapsed.
fn headings(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            let title = line.trim_start_matches('#');
            if title.starts_with(' ') {
                out.push(collapse(title));
            }
        }
    }
    out
}

/// `text` with runs of whitespace as one space, trimmed.
fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The quoted section after a document's name at `rest`, if any: separators first (spaces, line
/// breaks, `,`, `)`, the word `section`), then text in double quotes. A quote that runs over a
/// line break loses the next line's comment marker (`///`, `//!`, `//`, `--`, `#`).
fn quoted_after(rest: &str) -> Option<String> {
    if !rest.starts_with(|c: char| c.is_whitespace() || c == ',' || c == ')') {
        return None; // `"BENCHMARKS.md"` is a string, not a citation
    }
    let rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ',' || c == ')');
    let rest = rest.strip_prefix("section ").unwrap_or(rest);
    let quote = rest.strip_prefix('"')?;
    let end = quote.find('"')?;
    let lines: Vec<&str> = quote[..end]
        .split('\n')
        .enumerate()
        .map(|(i, line)| {
            let line = line.trim_start();
            if i == 0 {
                return line;
            }
            ["///", "//!", "//", "--", "#"]
                .iter()
                .find_map(|m| line.strip_prefix(m))
                .unwrap_or(line)
        })
        .collect();
    Some(collapse(&lines.join(" ")))
}

/// The finding number after a document's name at `rest` (`RELIABILITY.md F1` → `F1`), if any.
fn finding_after(rest: &str) -> Option<&str> {
    let rest = rest.strip_prefix(' ')?;
    let digits = rest.strip_prefix('F')?;
    let n = digits.len()
        - digits
            .trim_start_matches(|c: char| c.is_ascii_digit())
            .len();
    let after = digits[n..].chars().next();
    (n > 0 && !after.is_some_and(char::is_alphanumeric)).then(|| &rest[..n + 1])
}

/// Why `cite` does not name exactly one of `heads`; `None` when it does.
fn unresolved(cite: &str, heads: &[String]) -> Option<String> {
    let named: Vec<&String> = heads.iter().filter(|h| h.starts_with(cite)).collect();
    match named.len() {
        1 => None,
        0 => Some("no heading starts so".to_string()),
        n => Some(format!("{n} headings start so: name one whole")),
    }
}

/// The citations of `text` (shown as `shown`) that name no single heading of `docs`.
fn broken_cites(shown: &str, text: &str, docs: &[(&str, Vec<String>)]) -> Vec<String> {
    let mut bad = Vec::new();
    for (name, heads) in docs {
        for (at, _) in text.match_indices(name) {
            let rest = &text[at + name.len()..];
            let (cite, start) = match (quoted_after(rest), finding_after(rest)) {
                (Some(quoted), _) => (quoted.clone(), quoted),
                (None, Some(finding)) => (finding.to_string(), format!("{finding} ")),
                (None, None) => continue,
            };
            if let Some(why) = unresolved(&start, heads) {
                let line = text[..at].matches('\n').count() + 1;
                bad.push(format!("{shown}:{line}: {name} \"{cite}\": {why}"));
            }
        }
    }
    bad
}

/// GitHub's anchor of a heading: lower case, punctuation but `-` dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '_' || *c == '-' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The first `YYYY-MM-DD` in a text.
fn first_date(text: &str) -> Option<&str> {
    let b = text.as_bytes();
    (0..b.len().saturating_sub(9)).find_map(|i| {
        let d = text.get(i..i + 10)?;
        let shape = d.bytes().enumerate().all(|(k, c)| match k {
            4 | 7 => c == b'-',
            _ => c.is_ascii_digit(),
        });
        shape.then_some(d)
    })
}

/// What breaks BENCHMARKS.md's stable anchors: a repeated heading, an undated History section
/// or one older than the section after it, a `(#anchor)` link to no heading.
fn unstable_anchors(text: &str) -> Vec<String> {
    let heads = headings(text);
    let mut bad = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for h in &heads {
        if !seen.insert(anchor(h)) {
            bad.push(format!("heading repeated: {h}"));
        }
    }
    let history = text
        .split_once("\n## History\n")
        .map(|(_, h)| h)
        .unwrap_or("");
    let mut newer: Option<(&str, String)> = None;
    for line in history.lines().filter(|l| l.starts_with("## ")) {
        let Some(date) = first_date(line) else {
            bad.push(format!("History section without a date: {line}"));
            continue;
        };
        if let Some((before, head)) = &newer {
            if date > *before {
                bad.push(format!("History out of order: {line} after {head}"));
            }
        }
        newer = Some((date, line.to_string()));
    }
    for (at, _) in text.match_indices("](#") {
        let link = &text[at + 3..];
        let link = &link[..link.find(')').unwrap_or(link.len())];
        if !seen.contains(link) {
            bad.push(format!("link to no heading: #{link}"));
        }
    }
    bad
}

fn named_docs() -> Vec<(&'static str, Vec<String>)> {
    NAMED
        .iter()
        .map(|name| {
            let text = std::fs::read_to_string(repo().join(name)).expect("read a named document");
            (*name, headings(&text))
        })
        .collect()
}

#[test]
fn every_section_cited_by_name_is_one_heading() {
    let docs = named_docs();
    let mut files = Vec::new();
    sources(&repo(), &mut files);
    let bad: Vec<String> = files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            let shown = f.strip_prefix(repo()).unwrap_or(f).display().to_string();
            broken_cites(&shown, &text, &docs)
        })
        .collect();
    assert!(
        bad.is_empty(),
        "sections cited by a name that is not one heading (renamed, removed or ambiguous?):\n{}",
        bad.join("\n")
    );
}

#[test]
fn benchmarks_anchors_are_stable() {
    let text = std::fs::read_to_string(repo().join(Path::new("BENCHMARKS.md"))).expect("read");
    let bad = unstable_anchors(&text);
    assert!(bad.is_empty(), "BENCHMARKS.md:\n{}", bad.join("\n"));
}

#[test]
fn a_planted_bad_citation_is_caught() {
    let doc = "# B\n## Current figures\n## History\n## Overload: the door, 2026-12-06\n\
               ## Overload: the drain rule, 2026-12-07\n### Tried\n### F1 — a finding\n";
    let docs = [("B.md", headings(doc))];
    let cites = |text: &str| broken_cites("x", text, &docs);
    assert!(cites("see B.md \"Overload: the door\".").is_empty());
    assert!(cites("[B.md](B.md) \"Overload: the drain rule, 2026-12-07\"").is_empty());
    assert!(cites("(B.md, \"Tried\")").is_empty());
    assert!(cites("/// as in B.md \"Overload: the\n/// drain rule\" shows").is_empty());
    assert!(cites("path: \"B.md\", other: \"Tried\"").is_empty());
    assert!(cites("(B.md F1). And B.md Findings, B.md FAQ").is_empty());
    assert_eq!(
        cites("B.md F12 and"),
        ["x:1: B.md \"F12\": no heading starts so"]
    );
    assert_eq!(
        cites("a line\n(B.md \"Memory\")"),
        ["x:2: B.md \"Memory\": no heading starts so"]
    );
    assert_eq!(
        cites("B.md section \"Overload\""),
        ["x:1: B.md \"Overload\": 2 headings start so: name one whole"]
    );
    let unstable = unstable_anchors(&format!("{doc}## Tried\n[x](#overload-the-doors)\n"));
    assert_eq!(
        unstable,
        [
            "heading repeated: Tried",
            "History out of order: ## Overload: the drain rule, 2026-12-07 after ## Overload: the door, 2026-12-06",
            "History section without a date: ## Tried",
            "link to no heading: #overload-the-doors",
        ]
    );
    assert_eq!(
        anchor("Overload (issue 36): 22:46–23:16 UTC, `d86e0c5`"),
        "overload-issue-36-22462316-utc-d86e0c5"
    );
}
