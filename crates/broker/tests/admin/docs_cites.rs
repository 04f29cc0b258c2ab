//! Section citations stay true (docs/README.md): code and documents cite the reference documents
//! by number (`docs/<doc>.md §6.2`, `<doc>.md §4.4–§4.5`, `<doc>.md §16.1/§17`, a decision
//! of design.md by `decision 6`, a step of a spec file by `Step 4`), and inside a document of
//! `docs/` a bare `§6.2` means that document. Every such number must be a heading of the
//! document it names (a decision of design.md, a step of the spec), so a section renumbered or
//! removed fails here, naming every place that still cites the old number.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::docs_map::repo;

/// Files whose citations are read, by extension; directories starting with `.`, `target` and
/// `node_modules` are skipped.
const READ: &[&str] = &["rs", "md", "sql", "py", "sh", "toml", "js", "html"];

/// A citable document: its file name as cited (`engine.md`, `life-of-a-pop.md`) and the numbers
/// it holds, by kind (`§`, `decision`, `Step`).
struct Cited {
    file: PathBuf,
    numbers: BTreeMap<&'static str, BTreeSet<String>>,
}

/// The numbered headings (and decisions, and steps) of a document.
fn numbers_of(text: &str) -> BTreeMap<&'static str, BTreeSet<String>> {
    let mut out: BTreeMap<&'static str, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines() {
        if let Some(title) = line
            .strip_prefix('#')
            .map(|l| l.trim_start_matches('#').trim())
        {
            if let Some(step) = title.strip_prefix("Step ") {
                out.entry("Step").or_default().insert(number(step));
            }
            out.entry("§").or_default().insert(number(title));
        } else if line
            .split_once(". **")
            .is_some_and(|(n, _)| n.chars().all(|c| c.is_ascii_digit()))
        {
            out.entry("decision").or_default().insert(number(line));
        }
    }
    out
}

/// The number a text starts with (`4.4.` → `4.4`); empty when none.
fn number(text: &str) -> String {
    let n: String = text
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    n.trim_end_matches('.').to_string()
}

/// The documents one may cite: `docs/*.md` and `docs/spec/*.md`, by file name.
fn citable() -> BTreeMap<String, Cited> {
    let mut out = BTreeMap::new();
    for dir in ["docs", "docs/spec"] {
        for entry in std::fs::read_dir(repo().join(dir)).expect("read docs") {
            let path = entry.expect("entry").path();
            let Some(name) = path
                .file_name()
                .and_then(|n| n.to_str())
                .map(str::to_string)
            else {
                continue;
            };
            if name.ends_with(".md") {
                let text = std::fs::read_to_string(&path).expect("read a document");
                let numbers = numbers_of(&text);
                out.insert(
                    name,
                    Cited {
                        file: path,
                        numbers,
                    },
                );
            }
        }
    }
    out
}

/// The citations that follow a document's name at `rest`: (kind, number) pairs, and how many
/// bytes of `rest` they span. `<doc>.md §4.4–§4.5, §6` → (§, 4.4), (§, 4.5), (§, 6).
fn citations_after(rest: &str) -> (Vec<(&'static str, String)>, usize) {
    let skip = |s: &str| {
        s.len()
            - s.trim_start_matches(|c: char| c.is_whitespace() || c == ')')
                .len()
    };
    let mut at = skip(rest);
    let mut out = Vec::new();
    for (kind, words) in [
        ("§", &["§"][..]),
        ("decision", &["decisions ", "decision "][..]),
        ("Step", &["Steps ", "Step "][..]),
    ] {
        let Some(word) = words.iter().find(|w| rest[at..].starts_with(**w)) else {
            continue;
        };
        at += word.len();
        loop {
            let n = number(&rest[at..]);
            if n.is_empty() {
                break;
            }
            at += rest[at..]
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(rest.len() - at);
            out.push((kind, n));
            // A separator, then the kind's mark again (`§`) or, for words, a number.
            let sep = rest[at..].len()
                - rest[at..]
                    .trim_start_matches([' ', '\n', ',', '–', '-', '/'])
                    .len();
            let next = &rest[at + sep..];
            let next = next
                .strip_prefix("and ")
                .or_else(|| next.strip_prefix("or "))
                .unwrap_or(next);
            let mark = if kind == "§" { "§" } else { "" };
            match next.strip_prefix(mark) {
                Some(after) if after.starts_with(|c: char| c.is_ascii_digit()) => {
                    at = rest.len() - after.len();
                }
                _ => break,
            }
        }
        break;
    }
    (out, at)
}

/// Every text file of the repository that may cite.
pub(crate) fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read a directory").flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().to_string();
        if path.is_dir() {
            if !name.starts_with('.') && name != "target" && name != "node_modules" {
                sources(&path, out);
            }
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| READ.contains(&e))
        {
            out.push(path);
        }
    }
}

/// The citations of one file that name no heading, as `file:line: doc §n`.
fn broken_in(path: &Path, docs: &BTreeMap<String, Cited>) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new(); // not UTF-8: no citations to read
    };
    let own = docs
        .values()
        .find(|d| d.file == path && path.parent().is_some_and(|p| p.ends_with("docs")));
    let shown = path
        .strip_prefix(repo())
        .unwrap_or(path)
        .display()
        .to_string();
    let line_of = |at: usize| text[..at].matches('\n').count() + 1;
    let mut bad = Vec::new();
    let mut covered = vec![false; text.len()];
    for (name, doc) in docs {
        for (start, _) in text.match_indices(name.as_str()) {
            let end = start + name.len();
            let (cites, span) = citations_after(&text[end..]);
            covered[end..end + span].iter_mut().for_each(|c| *c = true);
            for (kind, n) in cites {
                if !doc.numbers.get(kind).is_some_and(|ns| ns.contains(&n)) {
                    let space = if kind == "§" { "" } else { " " };
                    bad.push(format!(
                        "{shown}:{}: {name} {kind}{space}{n}",
                        line_of(start)
                    ));
                }
            }
        }
    }
    if let Some(doc) = own {
        for (at, _) in text.match_indices('§').filter(|(at, _)| !covered[*at]) {
            let n = number(&text[at + '§'.len_utf8()..]);
            if !n.is_empty() && !doc.numbers.get("§").is_some_and(|ns| ns.contains(&n)) {
                bad.push(format!("{shown}:{}: §{n} (this document)", line_of(at)));
            }
        }
    }
    bad
}

#[test]
fn every_cited_section_is_a_heading() {
    let docs = citable();
    let mut files = Vec::new();
    sources(&repo(), &mut files);
    let bad: Vec<String> = files.iter().flat_map(|f| broken_in(f, &docs)).collect();
    assert!(
        bad.is_empty(),
        "citations of sections that are not headings (renumbered or removed?):\n{}",
        bad.join("\n")
    );
}

#[test]
fn citations_read_ranges_lists_and_words() {
    let numbers = |s: &str| -> Vec<String> {
        citations_after(s)
            .0
            .into_iter()
            .map(|(k, n)| format!("{k}{n}"))
            .collect()
    };
    assert_eq!(numbers(" §4.4–§4.5, §6. Then"), ["§4.4", "§4.5", "§6"]);
    assert_eq!(numbers(" §16.1/§17)"), ["§16.1", "§17"]);
    assert_eq!(numbers("\n   §4.4), which"), ["§4.4"]);
    assert_eq!(numbers(" §7.3 JSON or §7.7"), ["§7.3"]);
    assert_eq!(numbers(" decision 6 and"), ["decision6"]);
    assert_eq!(numbers(" Steps 2–6"), ["Step2", "Step6"]);
    assert_eq!(numbers(" (the map)"), Vec::<String>::new());
    let heads = numbers_of("# T\n## 4. Push\n### 4.4 SQL\n## Step 7: wait\n1. **Rust.** x\n");
    assert!(heads["§"].contains("4") && heads["§"].contains("4.4"));
    assert!(heads["Step"].contains("7") && heads["decision"].contains("1"));
}
