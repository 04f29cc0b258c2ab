//! The maps of the repository stay true (docs/README.md "How the documents map to the code"):
//! every path a map document names exists; every crate of `crates/` is on every map; every
//! top-level module of `crates/broker/src` is named in the row of its floor (`layering.rs`'s
//! `FLOOR_OF`) in the floor table of docs/architecture.md; every source file of the broker is
//! named in docs/architecture.md. A rename on one side only (the code or the map) fails here.
//!
//! The map documents are docs/README.md, docs/architecture.md, docs/design.md and the "Layout"
//! section of README.md. A path is a `backticked` token that ends in a source extension or
//! holds a `/` (a `/`-token whose first part names nothing, like `LISTEN/NOTIFY`, is prose),
//! a markdown link's target, or the first field of a line of a "Layout" tree. `{a,b}` expands,
//! `*` matches within one name, and a part in `<…>` is a placeholder (only what precedes it is
//! checked). A path resolves against, in order: its table column when the column is a floor
//! (`http`, `engine`, …) or `sql/functions/`; for a bare file name, the directories named
//! earlier in the same paragraph or table row; then the repository root, `crates/`, `crates/broker/`,
//! `crates/broker/src/`, `crates/broker/sql/`, and `proto/…` as `crates/proto/src/…`. In a
//! Layout tree a path is relative to the entry above it with less indentation.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::layering::{rust_files, src, FLOOR_OF};

/// The map documents, and the one section a document is a map in (`None`: all of it).
const MAPS: &[(&str, Option<&str>)] = &[
    ("docs/README.md", None),
    ("docs/architecture.md", None),
    ("docs/design.md", None),
    ("README.md", Some("## Layout")),
];

/// Where a path without a column or line context may be relative to, from the root.
const BASES: &[&str] = &[
    "",
    "crates/",
    "crates/broker/",
    "crates/broker/src/",
    "crates/broker/sql/",
];

/// Endings that make a token a file path.
const EXTENSIONS: &[&str] = &[".rs", ".sql", ".md", ".sh", ".toml", ".py", ".txt"];

/// The repository root.
pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// What a map document names: the paths that exist (repository-relative) and those that do not.
#[derive(Default)]
struct Named {
    found: BTreeSet<PathBuf>,
    missing: Vec<String>,
}

/// `a/{b,c}/d{e,f}` → every combination.
fn expand_braces(token: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (token.find('{'), token.find('}')) else {
        return vec![token.to_string()];
    };
    if close < open {
        return vec![token.to_string()];
    }
    token[open + 1..close]
        .split(',')
        .flat_map(|alt| expand_braces(&format!("{}{alt}{}", &token[..open], &token[close + 1..])))
        .collect()
}

/// The existing paths `rel` names under `base` (repository-relative), with `*` matching within
/// one name and a `<placeholder>` part ending the path there.
fn matches(base: &Path, rel: &str) -> Vec<PathBuf> {
    let mut paths = vec![base.to_path_buf()];
    for part in rel.split('/').filter(|p| !p.is_empty() && *p != ".") {
        if part.contains('<') {
            break;
        }
        paths = paths.iter().flat_map(|dir| children(dir, part)).collect();
    }
    let root = repo();
    paths
        .into_iter()
        .filter(|p| root.join(p).exists())
        .collect()
}

/// The entries of `dir` that `part` names (`..` climbs; `*` is a wildcard).
fn children(dir: &Path, part: &str) -> Vec<PathBuf> {
    if part == ".." {
        return dir.parent().map(Path::to_path_buf).into_iter().collect();
    }
    let Some((head, tail)) = part.split_once('*') else {
        return vec![dir.join(part)];
    };
    let Ok(entries) = std::fs::read_dir(repo().join(dir)) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(head) && n.ends_with(tail) && n.len() >= part.len() - 1)
        .map(|n| dir.join(n))
        .collect()
}

/// Whether a backticked token is meant as a path (see the module comment).
fn path_like(token: &str) -> bool {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "_-./*{},<>".contains(c);
    if token.starts_with('/') || !token.chars().all(allowed) {
        return false;
    }
    if token.starts_with('.') && !token.starts_with("./") && !token.starts_with("../") {
        return false;
    }
    EXTENSIONS.iter().any(|e| token.ends_with(e)) || token.contains('/')
}

/// Whether a path names a file or a directory for sure (an extension or a trailing `/`), so
/// that it must exist; otherwise it is checked only when its first part exists.
fn surely_path(token: &str) -> bool {
    token.ends_with('/') || EXTENSIONS.iter().any(|e| token.ends_with(e))
}

/// Where a token may be relative to: the column's directory, the directories named just before
/// (for a bare name), then the general bases.
fn candidates(token: &str, column: Option<&str>, near: &[PathBuf]) -> Vec<PathBuf> {
    let mut bases: Vec<PathBuf> = column.map(PathBuf::from).into_iter().collect();
    if !token.contains('/') {
        bases.extend(near.iter().rev().cloned());
    }
    bases.extend(BASES.iter().map(PathBuf::from));
    if let Some(rest) = token.strip_prefix("proto/") {
        if !rest.starts_with("src/") {
            bases.push(PathBuf::from("crates/proto/src/"));
        }
    }
    bases
}

/// The paths one token names, resolved: `Ok` with what exists (nothing for prose), `Err` with
/// the expansions (`{a,b}`) that name nothing.
fn resolve(
    token: &str,
    column: Option<&str>,
    near: &[PathBuf],
) -> Result<Vec<PathBuf>, Vec<String>> {
    let bases = candidates(token, column, near);
    let (mut found, mut missing) = (Vec::new(), Vec::new());
    for path in expand_braces(token) {
        let rel = match path.strip_prefix("proto/") {
            Some(rest) if !rest.starts_with("src/") => rest.to_string(),
            _ => path.clone(),
        };
        let hit = bases.iter().find_map(|base| {
            let rel = if base.ends_with("crates/proto/src") {
                &rel
            } else {
                &path
            };
            let m = matches(base, rel);
            (!m.is_empty()).then_some(m)
        });
        match hit {
            Some(m) => found.extend(m),
            None if surely_path(&path) => missing.push(path),
            None => {
                let first = path.split('/').next().unwrap_or_default();
                if bases.iter().any(|b| !matches(b, first).is_empty()) {
                    missing.push(path);
                }
            }
        }
    }
    if missing.is_empty() {
        Ok(found)
    } else {
        Err(missing)
    }
}

/// The backticked tokens of a text.
fn backticked(text: &str) -> Vec<&str> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| !t.contains(char::is_whitespace))
        .collect()
}

/// The targets of the markdown links of a text (`[text](target)`), without their anchors;
/// web addresses and anchors alone left out.
fn link_targets(text: &str) -> Vec<&str> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .map(|t| t.split('#').next().unwrap_or_default())
        .filter(|t| !t.is_empty() && !t.contains("://") && !t.starts_with("mailto:"))
        .collect()
}

/// The cells of a table row, split at unescaped `|`.
fn cells(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = line.trim().trim_start_matches('|').chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                chars.next();
                if let Some(cell) = out.last_mut() {
                    cell.push('|');
                }
            }
            '|' => out.push(String::new()),
            _ => {
                if let Some(cell) = out.last_mut() {
                    cell.push(c);
                }
            }
        }
    }
    out
}

/// The directory a table column's paths are relative to, from its header cell.
fn column_base(header: &str) -> Option<String> {
    let h = header.trim().to_lowercase();
    if h.contains("sql/functions/") {
        return Some("crates/broker/sql/functions/".into());
    }
    ["http", "engine", "store", "accel", "spool"]
        .iter()
        .find(|f| h == **f)
        .map(|f| format!("crates/broker/src/{f}/"))
}

impl Named {
    /// Records the paths of `text` (one line or one cell), relative to `column` first; `near`
    /// holds the directories named earlier in the same paragraph or table row.
    fn scan(
        &mut self,
        doc: &str,
        at: usize,
        text: &str,
        column: Option<&str>,
        near: &mut Vec<PathBuf>,
    ) {
        for token in backticked(text).into_iter().filter(|t| path_like(t)) {
            let found: Vec<PathBuf> = match resolve(token, column, near) {
                Ok(paths) => paths,
                Err(missing) => {
                    let which = match missing.as_slice() {
                        [one] if one == token => String::new(),
                        _ => format!(" (`{}`)", missing.join("`, `")),
                    };
                    self.missing.push(format!("{doc}:{at}: `{token}`{which}"));
                    // The rest of a `{a,b}` group still counts as named.
                    expand_braces(token)
                        .into_iter()
                        .filter(|p| !missing.contains(p))
                        .flat_map(|p| resolve(&p, column, near).unwrap_or_default())
                        .collect()
                }
            };
            for p in found {
                let dir = if repo().join(&p).is_dir() {
                    p.clone()
                } else {
                    p.parent().map(Path::to_path_buf).unwrap_or_default()
                };
                near.push(dir);
                self.found.insert(p);
            }
        }
        let here = Path::new(doc)
            .parent()
            .unwrap_or(Path::new(""))
            .to_path_buf();
        for target in link_targets(text) {
            let m = matches(&here, target);
            if m.is_empty() {
                self.missing.push(format!("{doc}:{at}: link ({target})"));
            }
            self.found.extend(m);
        }
    }

    /// Records one line of a Layout tree; `stack` holds (indentation, path) of the entries above.
    fn tree_line(&mut self, doc: &str, at: usize, line: &str, stack: &mut Vec<(usize, PathBuf)>) {
        let indent = line.len() - line.trim_start().len();
        // A continuation of the description column is no entry.
        if line.trim().is_empty() || indent > 4 {
            return;
        }
        // The entry: the first word, and the next while a word ends in a comma (`a/, b.rs`).
        let mut names = Vec::new();
        for word in line.split_whitespace() {
            names.push(word.trim_end_matches(','));
            if !word.ends_with(',') {
                break;
            }
        }
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        let parent = stack.last().map(|(_, p)| p.clone()).unwrap_or_default();
        for name in &names {
            let m = matches(&parent, name);
            if m.is_empty() {
                let under = parent.display();
                self.missing
                    .push(format!("{doc}:{at}: layout entry `{name}` under `{under}`"));
            }
            self.found.extend(m);
        }
        stack.push((indent, parent.join(names[0].trim_end_matches('/'))));
    }
}

/// The part of a document that is a map (its lines, numbered from 1).
fn map_lines(doc: &str, section: Option<&str>) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(repo().join(doc)).expect("read a map document");
    let mut inside = section.is_none();
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if let Some(heading) = section {
            if line.starts_with("## ") {
                inside = line.trim() == heading;
            }
        }
        if inside {
            out.push((i + 1, line.to_string()));
        }
    }
    out
}

/// Everything one map document names.
fn named_by(doc: &str, section: Option<&str>) -> Named {
    let mut named = Named::default();
    let (mut heading, mut fenced) = (String::new(), false);
    let mut columns: Vec<Option<String>> = Vec::new();
    let mut in_table = false;
    let mut stack = Vec::new();
    let mut near: Vec<PathBuf> = Vec::new();
    for (at, line) in map_lines(doc, section) {
        if line.starts_with('#') {
            heading = line.clone();
        }
        if line.starts_with('#') || line.trim().is_empty() || line.trim_start().starts_with('|') {
            near.clear(); // a new paragraph or table row
        }
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            stack.clear();
            continue;
        }
        if fenced {
            if heading.contains("Layout") {
                named.tree_line(doc, at, &line, &mut stack);
            }
            continue;
        }
        if !line.trim_start().starts_with('|') {
            in_table = false;
            named.scan(doc, at, &line, None, &mut near);
            continue;
        }
        let row = cells(&line);
        if !in_table {
            in_table = true;
            columns = row.iter().map(|h| column_base(h)).collect();
        }
        for (i, cell) in row.iter().enumerate() {
            let column = columns.get(i).cloned().flatten();
            named.scan(doc, at, cell, column.as_deref(), &mut near);
        }
    }
    named
}

#[test]
fn every_path_a_map_names_exists() {
    let missing: Vec<String> = MAPS
        .iter()
        .flat_map(|(doc, section)| named_by(doc, *section).missing)
        .collect();
    assert!(
        missing.is_empty(),
        "paths the maps name that do not exist (rename them on both sides):\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_crate_is_on_every_map() {
    let crates: Vec<String> = std::fs::read_dir(repo().join("crates"))
        .expect("read crates/")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .map(|n| format!("crates/{n}"))
        .collect();
    let mut absent = Vec::new();
    for (doc, section) in MAPS {
        let named = named_by(doc, *section);
        for c in &crates {
            if !named.found.iter().any(|p| p.starts_with(c)) {
                absent.push(format!("{doc} does not name {c}"));
            }
        }
    }
    assert!(absent.is_empty(), "{}", absent.join("\n"));
}

/// The rows of the floor table of docs/architecture.md: floor → the paths its files column names.
fn floor_rows() -> Vec<(String, BTreeSet<PathBuf>)> {
    let doc = "docs/architecture.md";
    let lines = map_lines(doc, None);
    let start = lines
        .iter()
        .position(|(_, l)| l.starts_with("| floor | files |"))
        .expect("docs/architecture.md has a floor table (| floor | files | …)");
    lines[start + 2..]
        .iter()
        .take_while(|(_, l)| l.starts_with('|'))
        .map(|(at, l)| {
            let row = cells(l);
            let mut named = Named::default();
            let files = row.get(1).map_or("", String::as_str);
            named.scan(doc, *at, files, Some("crates/broker/src/"), &mut Vec::new());
            (row[0].trim().to_string(), named.found)
        })
        .collect()
}

#[test]
fn every_module_is_in_the_row_of_its_floor() {
    let rows = floor_rows();
    let src_rel = PathBuf::from("crates/broker/src");
    let mut wrong = Vec::new();
    for entry in std::fs::read_dir(src()).expect("read src") {
        let name = entry
            .expect("entry")
            .file_name()
            .into_string()
            .expect("utf-8 name");
        let module = name.trim_end_matches(".rs");
        if module == "lib" {
            continue; // the crate root declares the modules; it is no module of a floor
        }
        let Some((_, floor)) = FLOOR_OF.iter().find(|(m, _)| *m == module) else {
            wrong.push(format!("src/{name}: no floor in layering.rs FLOOR_OF"));
            continue;
        };
        let row_name = if *floor == "leaf" { "leaves" } else { floor };
        let named = rows.iter().find(|(f, _)| f == row_name).map(|(_, n)| n);
        let forms = [src_rel.join(format!("{module}.rs")), src_rel.join(module)];
        if !named.is_some_and(|n| forms.iter().any(|f| n.contains(f))) {
            wrong.push(format!(
                "src/{name} ({floor}) is not in the `{row_name}` row of the floor table"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/architecture.md floor table:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_source_file_is_on_the_architecture_map() {
    let named = named_by("docs/architecture.md", None).found;
    let root = repo().canonicalize().expect("repo root");
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut absent: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let rel = f
                .canonicalize()
                .ok()?
                .strip_prefix(&root)
                .ok()?
                .to_path_buf();
            let name = rel.file_name()?.to_str()?;
            // The crate root, and unit tests beside the code they test.
            if name == "lib.rs" || name == "tests.rs" || name.ends_with("_tests.rs") {
                return None;
            }
            let as_dir = (name == "mod.rs")
                .then(|| rel.parent().map(Path::to_path_buf))
                .flatten();
            let on_map = named.contains(&rel) || as_dir.is_some_and(|d| named.contains(&d));
            (!on_map).then(|| rel.display().to_string())
        })
        .collect();
    absent.sort();
    assert!(
        absent.is_empty(),
        "source files docs/architecture.md does not name (add them where their concept is mapped):\n{}",
        absent.join("\n")
    );
}

#[test]
fn the_resolver_reads_braces_globs_columns_and_placeholders() {
    assert_eq!(expand_braces("a/{b,c}.rs"), ["a/b.rs", "a/c.rs"]);
    assert!(path_like("engine/push/{mod,door}.rs") && path_like("mod.rs"));
    assert!(!path_like("/api/v1/push") && !path_like("crate::engine") && !path_like(".sql"));
    let engine = Some("crates/broker/src/engine/");
    assert_eq!(
        resolve("push/mod.rs", engine, &[]),
        Ok(vec![PathBuf::from("crates/broker/src/engine/push/mod.rs")])
    );
    assert_eq!(resolve("LISTEN/NOTIFY", None, &[]), Ok(vec![]));
    assert_eq!(
        resolve("engine/push/{mod,nothing}.rs", None, &[]),
        Err(vec!["engine/push/nothing.rs".to_string()])
    );
    assert!(resolve("accel/dedup_cache*", None, &[]).is_ok_and(|m| m.len() >= 2));
    assert!(resolve("sql/migrations/<NNNN>_<name>.sql", None, &[]).is_ok_and(|m| m.len() == 1));
    assert_eq!(
        resolve("proto/frame.rs", None, &[]),
        Ok(vec![PathBuf::from("crates/proto/src/frame.rs")])
    );
}
