//! Every SQL function of `sql/functions/*.sql` stays short enough to read in one sitting: from
//! its `CREATE … FUNCTION` line to the line that closes its dollar-quoted body, at most
//! `MAX_LINES` lines. A longer one is split into named steps (internal functions
//! `queen.log_<concept>_<step>_v1`), so its top reads as the sequence of those steps. A planted
//! long function proves the measure sees one.

use std::path::Path;

/// The most lines one function definition may span.
const MAX_LINES: usize = 150;

/// Each function defined in `sql`, as (name, lines from its CREATE line to the line closing
/// its body, both included), in file order.
fn function_lengths(sql: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = sql.lines().collect();
    let mut found = Vec::new();
    let mut at = 0;
    while at < lines.len() {
        let Some(name) = defined_function(lines[at]) else {
            at += 1;
            continue;
        };
        // The body opens with the first dollar quote after the CREATE and closes with the
        // next occurrence of the same quote.
        let rest = lines[at..].join("\n");
        let (open, tag) = dollar_quote(&rest).unwrap_or_else(|| panic!("{name}: no body"));
        let close = rest[open + tag.len()..]
            .find(&tag)
            .unwrap_or_else(|| panic!("{name}: body never closes"))
            + open
            + tag.len();
        let span = rest[..close].matches('\n').count() + 1;
        found.push((name, span));
        at += span;
    }
    found
}

/// The name of the function a `CREATE [OR REPLACE] FUNCTION` line defines.
fn defined_function(line: &str) -> Option<String> {
    let upper = line.trim_start().to_ascii_uppercase();
    let after = ["CREATE OR REPLACE FUNCTION ", "CREATE FUNCTION "]
        .iter()
        .find_map(|p| upper.strip_prefix(p).map(|_| &line.trim_start()[p.len()..]))?;
    Some(after.split('(').next().unwrap_or(after).trim().to_string())
}

/// The offset and text of the first dollar quote (`$$`, `$tag$`) in `text`.
fn dollar_quote(text: &str) -> Option<(usize, String)> {
    let bytes = text.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if b != b'$' {
            continue;
        }
        let tag_len = bytes[i + 1..]
            .iter()
            .take_while(|c| c.is_ascii_alphabetic() || **c == b'_')
            .count();
        if bytes.get(i + 1 + tag_len) == Some(&b'$') {
            return Some((i, text[i..i + tag_len + 2].to_string()));
        }
    }
    None
}

#[test]
fn every_sql_function_fits_in_one_sitting() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("sql/functions");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("read sql/functions")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no function file in {}", dir.display());
    let mut long = Vec::new();
    let mut seen = 0;
    for path in &files {
        let sql = std::fs::read_to_string(path).expect("read function file");
        for (name, span) in function_lengths(&sql) {
            seen += 1;
            if span > MAX_LINES {
                let file = path.file_name().expect("file name").to_string_lossy();
                long.push(format!("{name} ({file}): {span} lines"));
            }
        }
    }
    assert!(
        seen > 100,
        "only {seen} functions found: the parser misses definitions"
    );
    assert!(
        long.is_empty(),
        "SQL functions longer than {MAX_LINES} lines; split each into named steps:\n{}",
        long.join("\n")
    );
}

#[test]
fn a_planted_long_function_is_named_with_its_length() {
    let body = "    SELECT 1;\n".repeat(MAX_LINES);
    let sql = format!(
        "-- CREATE FUNCTION in a comment defines nothing\n\
         CREATE OR REPLACE FUNCTION queen.short_v1()\nRETURNS int LANGUAGE sql AS $$ SELECT 1 $$;\n\n\
         CREATE FUNCTION queen.planted_v1(p int)\nRETURNS void\nLANGUAGE plpgsql AS $fn$\nBEGIN\n\
         {body}END $fn$;\n\
         create or replace function queen.after_v1() returns int language sql as $$\n    SELECT 2\n$$;\n"
    );
    let found = function_lengths(&sql);
    // planted: CREATE, RETURNS, LANGUAGE, BEGIN, the body, END.
    assert_eq!(
        found,
        vec![
            ("queen.short_v1".to_string(), 2),
            ("queen.planted_v1".to_string(), MAX_LINES + 5),
            ("queen.after_v1".to_string(), 3),
        ]
    );
    assert!(found.iter().any(|(_, span)| *span > MAX_LINES));
}
