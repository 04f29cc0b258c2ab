//! The floors of the broker run one way (docs/architecture.md "Floors"): this test reads every
//! `crate::…` path in `src/` and fails on an arrow a floor may not take, and on a loop between
//! the concept modules of one floor (say `engine::ack` ↔ `engine::dlq`); and no concept of the
//! engine names the whole `Engine`, nor a concept that owns a state (pop, push, ack) another's.
//!
//! `main → server → http → engine → {accel, store, spool}`, with `proto` (another crate) below
//! all of them; `config`, `error`, `log_limit`, `queue_options` and `telemetry` are leaves any floor may use and
//! that use no floor.
//! (`queen-embedded-pg` is a crate of its own and cannot use the broker at all.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Which floor each top-level module of `src/` belongs to.
pub(crate) const FLOOR_OF: &[(&str, &str)] = &[
    ("main", "main"),
    ("server", "server"),
    ("listener", "server"),
    ("logging", "server"),
    ("allocator", "server"),
    ("http", "http"),
    ("engine", "engine"),
    ("accel", "accel"),
    ("store", "store"),
    ("spool", "spool"),
    ("config", "leaf"),
    ("error", "leaf"),
    ("log_limit", "leaf"),
    ("queue_options", "leaf"),
    ("telemetry", "leaf"),
];

/// The floors each floor may use (besides itself).
pub(crate) const MAY_USE: &[(&str, &[&str])] = &[
    ("main", &["server", "leaf"]),
    ("server", &["http", "engine", "leaf"]),
    ("http", &["engine", "leaf"]),
    ("engine", &["accel", "store", "spool", "leaf"]),
    ("accel", &["leaf"]),
    ("store", &["leaf"]),
    ("spool", &["leaf"]),
    ("leaf", &["leaf"]),
];

pub(crate) fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`.
pub(crate) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file: `src/engine/push/flush.rs` → `["engine", "push", "flush"]`,
/// `src/engine/push/mod.rs` → `["engine", "push"]`.
pub(crate) fn module_of(file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src()).expect("under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// The code of a file without comments and string literals, so only real paths remain.
pub(crate) fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '"' => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    match c {
                        '\\' if !escaped => escaped = true,
                        '"' if !escaped => break,
                        _ => escaped = false,
                    }
                }
                out.push_str("\"\"");
            }
            _ => out.push(c),
        }
    }
    out
}

/// Every path the code names from the crate root, as segments: `crate::a::b::C` and each
/// branch of `crate::{a::b, c}` (one level of braces is enough for this code base's style;
/// nested groups are followed too). `root` is the prefix naming the crate (`crate`, or
/// `queen_broker` in the binary).
fn crate_paths(code: &str, root: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let needle = format!("{root}::");
    let mut at = 0;
    while let Some(found) = code[at..].find(&needle) {
        let start = at + found;
        at = start + needle.len();
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        paths.extend(expand(&code[at..], Vec::new()));
    }
    paths
}

/// The paths a path tail (after `prefix::`) names: a plain path, or a `{…}` group.
fn expand(tail: &str, prefix: Vec<String>) -> Vec<Vec<String>> {
    let mut segs = prefix;
    let mut rest = tail;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let body = &group[..closing_brace(group)];
            return split_top_level(body)
                .into_iter()
                .flat_map(|branch| expand(branch.trim(), segs.clone()))
                .collect();
        }
        let len = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if len == 0 {
            return vec![segs];
        }
        segs.push(rest[..len].to_string());
        rest = &rest[len..];
        match rest.strip_prefix("::") {
            Some(r) => rest = r,
            None => return vec![segs],
        }
    }
}

pub(crate) fn closing_brace(s: &str) -> usize {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return i,
            '}' => depth -= 1,
            _ => {}
        }
    }
    s.len()
}

fn split_top_level(s: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0, 0, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter().filter(|b| !b.trim().is_empty()).collect()
}

/// A source file and every crate path it names.
struct Source {
    module: Vec<String>,
    paths: Vec<Vec<String>>,
}

fn sources() -> Vec<Source> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files
        .iter()
        .map(|file| {
            let code = code_only(&std::fs::read_to_string(file).expect("read source"));
            let module = module_of(file);
            let root = if module == ["main"] {
                "queen_broker"
            } else {
                "crate"
            };
            Source {
                paths: crate_paths(&code, root),
                module,
            }
        })
        .collect()
}

pub(crate) fn floor(top: &str) -> &'static str {
    FLOOR_OF
        .iter()
        .find(|(m, _)| *m == top)
        .map(|(_, f)| *f)
        .unwrap_or_else(|| panic!("src/{top}: no floor assigned; add it to FLOOR_OF"))
}

/// Arrows between floors that the table does not allow, as `from-module → path`.
fn upward_arrows(sources: &[Source]) -> Vec<String> {
    let mut bad = Vec::new();
    for s in sources {
        let Some(top) = s.module.first() else {
            continue; // lib.rs declares the modules
        };
        let from = floor(top);
        let allowed = MAY_USE
            .iter()
            .find(|(f, _)| *f == from)
            .map(|(_, a)| *a)
            .unwrap_or(&[]);
        for path in &s.paths {
            let Some(target) = path.first() else { continue };
            let to = floor(target);
            if to != from && !allowed.contains(&to) {
                bad.push(format!(
                    "{} ({from}) uses {} ({to})",
                    s.module.join("::"),
                    path.join("::")
                ));
            }
        }
    }
    bad
}

/// The concept a path lands on within its floor: `engine::push::flush::X` → `engine::push`.
/// A name the floor's root re-exports (`engine::Engine`) lands on the module it comes from.
fn concept(
    path: &[String],
    submodules: &BTreeSet<String>,
    aliases: &BTreeMap<String, String>,
) -> String {
    let full = path.join("::");
    if path.len() < 2 {
        return full;
    }
    let key = format!("{}::{}", path[0], path[1]);
    if submodules.contains(&key) {
        return key;
    }
    aliases
        .get(&key)
        .cloned()
        .unwrap_or_else(|| path[0].clone())
}

/// Loops between the concept modules of one floor.
fn concept_loops(sources: &[Source]) -> Vec<String> {
    let submodules: BTreeSet<String> = sources
        .iter()
        .filter(|s| s.module.len() >= 2)
        .map(|s| format!("{}::{}", s.module[0], s.module[1]))
        .collect();
    // `pub use child::{A, B}` in a floor's root: `floor::A` is `floor::child`'s.
    let mut aliases = BTreeMap::new();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    for file in &files {
        let module = module_of(file);
        if module.len() != 1 {
            continue;
        }
        let code = code_only(&std::fs::read_to_string(file).expect("read source"));
        for line in code
            .lines()
            .filter_map(|l| l.trim().strip_prefix("pub use "))
        {
            for path in expand(line.trim_end_matches(';'), Vec::new()) {
                if let (Some(child), Some(name)) = (path.first(), path.last()) {
                    let child = format!("{}::{child}", module[0]);
                    if submodules.contains(&child) {
                        aliases.insert(format!("{}::{name}", module[0]), child);
                    }
                }
            }
        }
    }
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in sources.iter().filter(|s| s.module.len() >= 2) {
        let from = format!("{}::{}", s.module[0], s.module[1]);
        for path in s.paths.iter().filter(|p| p.first() == s.module.first()) {
            let to = concept(path, &submodules, &aliases);
            if to != from && to.contains("::") {
                edges.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    let mut loops = Vec::new();
    for (a, targets) in &edges {
        for b in targets {
            if let Some(back) = path_between(&edges, b, a) {
                let mut cycle = vec![a.clone()];
                cycle.extend(back);
                loops.push(cycle.join(" → "));
            }
        }
    }
    loops.sort();
    loops.dedup();
    loops
}

/// A path of edges from `from` to `to`, if any (breadth first).
fn path_between(
    edges: &BTreeMap<String, BTreeSet<String>>,
    from: &str,
    to: &str,
) -> Option<Vec<String>> {
    let mut previous: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([from.to_string()]);
    let mut seen = BTreeSet::from([from.to_string()]);
    while let Some(node) = queue.pop_front() {
        if node == to {
            let mut path = vec![node.clone()];
            let mut at = node;
            while let Some(p) = previous.get(&at) {
                path.push(p.clone());
                at = p.clone();
            }
            path.reverse();
            return Some(path);
        }
        for next in edges.get(&node).into_iter().flatten() {
            if seen.insert(next.clone()) {
                previous.insert(next.clone(), node.clone());
                queue.push_back(next.clone());
            }
        }
    }
    None
}

#[test]
fn every_arrow_points_down() {
    let bad = upward_arrows(&sources());
    assert!(
        bad.is_empty(),
        "arrows against the floors:\n{}",
        bad.join("\n")
    );
}

#[test]
fn no_loop_between_the_concepts_of_a_floor() {
    let loops = concept_loops(&sources());
    assert!(loops.is_empty(), "loops:\n{}", loops.join("\n"));
}

/// The concepts that own a state (docs/architecture.md "The engine context") and its type.
const CONCEPT_STATES: &[(&str, &str)] = &[
    ("pop", "PopState"),
    ("push", "PushState"),
    ("ack", "AckState"),
];

/// Where a concept of the engine names the whole engine (`Engine`, `Inner`: only
/// `engine/mod.rs`, which assembles it, and the floors above may) or, for a concept that owns a
/// state, another concept's state: each `module: name` found. A concept's functions take its
/// own state (or the states they write through, named in their signatures) and the shared part.
fn reaches_beyond_its_state(files: &[(Vec<String>, String)]) -> Vec<String> {
    let mut bad = Vec::new();
    for (module, code) in files {
        if module.len() < 2 || module[0] != "engine" {
            continue;
        }
        let own = CONCEPT_STATES
            .iter()
            .find(|(c, _)| module[1] == *c)
            .map(|(_, s)| *s);
        let others = CONCEPT_STATES
            .iter()
            .map(|(_, s)| *s)
            .filter(|s| own.is_some_and(|own| own != *s));
        for name in others.chain(["Engine", "Inner"]) {
            if names_type(code, name) {
                bad.push(format!("{}: {name}", module.join("::")));
            }
        }
    }
    bad
}

/// Whether `code` names `name` as a word of its own, other than as the last segment of another
/// crate's path (`base64::Engine` is not the broker's engine).
fn names_type(code: &str, name: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    code.match_indices(name).any(|(at, _)| {
        let before = &code[..at];
        let after = &code[at + name.len()..];
        let foreign_path = before.ends_with("::") && !before.ends_with("engine::");
        !before.ends_with(word) && !after.starts_with(word) && !foreign_path
    })
}

#[test]
fn a_concept_reaches_only_its_state_and_the_shared_part() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let files: Vec<(Vec<String>, String)> = files
        .iter()
        .map(|f| {
            let code = code_only(&std::fs::read_to_string(f).expect("read source"));
            (module_of(f), code)
        })
        .collect();
    let bad = reaches_beyond_its_state(&files);
    assert!(bad.is_empty(), "beyond their state:\n{}", bad.join("\n"));
    let planted = |module: &[&str], code: &str| {
        let module = module.iter().map(|m| m.to_string()).collect();
        reaches_beyond_its_state(&[(module, code.to_string())])
    };
    assert_eq!(
        planted(
            &["engine", "ack", "x"],
            "fn f(st: &Engine, p: &PopState, a: &AckState) {}"
        ),
        ["engine::ack::x: PopState", "engine::ack::x: Engine"],
        "the check sees a planted reach"
    );
    assert_eq!(
        planted(
            &["engine", "groups"],
            "fn f(st: &Shared, pop: &PopState) {}"
        ),
        Vec::<String>::new(),
        "a concept without a state names the states it acts on"
    );
    assert_eq!(
        planted(&["engine", "kv"], "fn f(st: &Inner) {}"),
        ["engine::kv: Inner"]
    );
    assert_eq!(
        planted(
            &["engine", "kv"],
            "use base64::Engine as _; fn f(e: crate::engine::Engine) {}"
        ),
        ["engine::kv: Engine"],
        "another crate's Engine is not the broker's"
    );
}

#[test]
fn the_checker_sees_grouped_and_nested_paths() {
    let code = code_only(
        "use crate::{engine::Engine, store::{self, push::x}};\n// crate::http::no\nlet s = \"crate::http::no\"; crate::accel::wake::f();",
    );
    let paths: Vec<String> = crate_paths(&code, "crate")
        .iter()
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(
        paths,
        [
            "engine::Engine",
            "store::self",
            "store::push::x",
            "accel::wake::f"
        ]
    );
}
