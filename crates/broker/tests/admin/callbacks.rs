//! Accelerators are called, they do not call back (docs/architecture.md "Floors"): a lower
//! floor never reaches a higher one through a trait the higher floor implements, nor through a
//! closure it keeps. `tests/admin/layering.rs` checks the paths a file names; this checks the
//! two ways around it that name no path upward.

use crate::layering::{closing_brace, code_only, floor, module_of, rust_files, src, MAY_USE};

/// A source file as (module path, code without comments, strings and test modules).
type File = (Vec<String>, String);

/// The code without its `#[cfg(test)]` modules: a test may stand in for a caller.
fn without_tests(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        match after.find('{') {
            Some(open) if after[..open].contains("mod ") => {
                let body = &after[open + 1..];
                rest = &body[(closing_brace(body) + 1).min(body.len())..];
            }
            _ => {
                out.push_str("#[cfg(test)]");
                rest = &after["#[cfg(test)]".len()..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The identifier starting `s`.
fn ident(s: &str) -> &str {
    let len = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..len]
}

/// An `impl` head without its generic parameters: `<'a, T: X<u8>> Tr for S` → `Tr for S`.
fn without_generics(head: &str) -> &str {
    let Some(params) = head.strip_prefix('<') else {
        return head;
    };
    let mut depth = 1;
    for (i, c) in params.char_indices() {
        depth += match c {
            '<' => 1,
            '>' => -1,
            _ => 0,
        };
        if depth == 0 {
            return &params[i + 1..];
        }
    }
    ""
}

/// Every trait the crate declares, with the floor of its module.
fn traits(files: &[File]) -> Vec<(String, &'static str)> {
    let mut out = Vec::new();
    for (module, code) in files {
        for (at, _) in code.match_indices("trait ") {
            let before = code[..at].trim_end();
            let declares = before.is_empty()
                || before.ends_with(['}', ';', ']', '{'])
                || before.ends_with("pub")
                || before.ends_with(')');
            let name = ident(&code[at + "trait ".len()..]);
            if declares && !name.is_empty() {
                out.push((name.to_string(), floor(&module[0])));
            }
        }
    }
    out
}

/// Whether code on floor `from` may call code on floor `to` (a floor below it).
fn below(from: &str, to: &str) -> bool {
    from != to
        && MAY_USE
            .iter()
            .any(|(f, allowed)| *f == from && allowed.contains(&to))
}

/// Every way a lower floor is handed a higher floor's code, as `module: what`.
fn callbacks(files: &[File]) -> Vec<String> {
    let declared = traits(files);
    let mut bad = Vec::new();
    for (module, code) in files {
        let here = floor(&module[0]);
        for (at, _) in code.match_indices("impl") {
            let head = without_generics(&code[at + "impl".len()..]);
            let Some(end) = head.find([';', '{']) else {
                continue;
            };
            let Some((trait_path, _)) = head[..end].split_once(" for ") else {
                continue;
            };
            let path = trait_path.trim().split('<').next().unwrap_or("");
            let name = path.rsplit("::").next().unwrap_or("").trim();
            for (t, there) in &declared {
                if t == name && below(here, there) {
                    bad.push(format!("{}: implements {name}", module.join("::")));
                }
            }
        }
        let lower = !MAY_USE
            .iter()
            .any(|(f, allowed)| *f == here && allowed.iter().any(|a| *a != "leaf"));
        if lower && here != "leaf" {
            for kept in ["dyn Fn", "dyn FnMut", "dyn FnOnce"] {
                if code.contains(kept) {
                    bad.push(format!("{}: keeps a `{kept}`", module.join("::")));
                }
            }
        }
    }
    bad.sort();
    bad.dedup();
    bad
}

fn sources() -> Vec<File> {
    let mut paths = Vec::new();
    rust_files(&src(), &mut paths);
    paths
        .iter()
        .filter(|p| module_of(p).first().is_some_and(|m| m != "lib"))
        .map(|p| {
            let text = std::fs::read_to_string(p).expect("read source");
            (module_of(p), without_tests(&code_only(&text)))
        })
        .collect()
}

#[test]
fn no_lower_floor_calls_back_into_a_higher_one() {
    let bad = callbacks(&sources());
    assert!(
        bad.is_empty(),
        "callbacks up the floors:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_check_sees_planted_callbacks() {
    let file = |m: &[&str], code: &str| -> File {
        (
            m.iter().map(|s| s.to_string()).collect(),
            without_tests(&code_only(code)),
        )
    };
    let planted = [
        file(&["accel", "fusion"], "pub trait Writer { fn write(&self); }"),
        file(
            &["engine", "push", "flush"],
            "impl crate::accel::fusion::Writer for Flusher { fn write(&self) {} }",
        ),
        file(&["store", "pool"], "struct Hook(Box<dyn Fn(u8)>);"),
        file(
            &["http", "pop"],
            "impl<'a, T: Into<u8>> Decoded for Render<'a, T> {}\n#[cfg(test)]\nmod tests { impl Decoded for T {} }",
        ),
        file(&["engine", "pop"], "pub trait Decoded {}\nimpl Decoded for Births {}"),
        file(
            &["http", "render"],
            "impl Decoded for Seen {}",
        ),
    ];
    assert_eq!(
        callbacks(&planted),
        [
            "engine::push::flush: implements Writer",
            "http::pop: implements Decoded",
            "http::render: implements Decoded",
            "store::pool: keeps a `dyn Fn`",
        ]
    );
}
