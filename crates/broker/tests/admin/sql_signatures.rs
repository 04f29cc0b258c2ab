//! Rust and SQL agree on every SQL function the store calls (store/sql_fn.rs): each `sql_fns!`
//! declaration names a function of schema `queen` that the applied schema has, once, with the
//! declared parameter names in the declared order (the ones left off all have defaults), each
//! Rust type taking the parameter's PostgreSQL type; each declared statement prepares, its
//! placeholders taking the Rust types bound to them. Every declaring file is in the store's
//! list, and no Rust source writes a call to a `queen.` function by hand. A function or a
//! parameter renamed or retyped on one side only fails here.

use std::collections::BTreeSet;

use queen_broker::store::sql_fn::Signature;
use tokio_postgres::types::Type;

use crate::common;
use crate::layering::{rust_files, src};

/// What pg_proc says of one function of schema `queen`.
struct Proc {
    arguments: String,
    input_names: Vec<String>,
    input_types: Vec<u32>,
    defaults: usize,
}

async fn procs(db: &tokio_postgres::Client, function: &str) -> Vec<Proc> {
    db.query(
        "SELECT pg_get_function_arguments(p.oid), p.proargtypes::oid[],
                COALESCE(p.proargnames, '{}'), COALESCE(p.proargmodes::text[], '{}'),
                p.pronargdefaults::int
           FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname = 'queen' AND p.proname = $1",
        &[&function],
    )
    .await
    .expect("read pg_proc")
    .iter()
    .map(|r| {
        let types: Vec<u32> = r.get(1);
        let names: Vec<String> = r.get(2);
        let modes: Vec<String> = r.get(3);
        // Without modes every argument is an input; with them, OUT and TABLE ones are not.
        let input_names = if modes.is_empty() {
            names.into_iter().take(types.len()).collect()
        } else {
            names
                .into_iter()
                .zip(modes)
                .filter(|(_, m)| matches!(m.as_str(), "i" | "b" | "v"))
                .map(|(n, _)| n)
                .collect()
        };
        Proc {
            arguments: r.get(0),
            input_names,
            input_types: types,
            defaults: usize::try_from(r.get::<_, i32>(4)).expect("defaults"),
        }
    })
    .collect()
}

/// What is wrong with one declaration against the applied schema (empty: nothing).
async fn mismatches(db: &tokio_postgres::Client, sig: &Signature) -> Vec<String> {
    let at = format!("{} ({} in {})", sig.function, sig.call, sig.file);
    let found = procs(db, sig.function).await;
    let [proc] = found.as_slice() else {
        return vec![format!(
            "{at}: the schema has {} functions queen.{} (a declaration names exactly one)",
            found.len(),
            sig.function
        )];
    };
    let mut wrong = Vec::new();
    let declared: Vec<&str> = sig.params.iter().map(|p| p.name).collect();
    let inputs = &proc.input_names;
    let k = declared.len();
    if k > inputs.len() || inputs[..k] != declared[..] || k + proc.defaults < inputs.len() {
        wrong.push(format!(
            "{at}: declares ({}), the schema has queen.{}({})",
            declared.join(", "),
            sig.function,
            proc.arguments
        ));
        return wrong;
    }
    for (p, oid) in sig.params.iter().zip(&proc.input_types) {
        if !p.direct {
            continue;
        }
        match Type::from_oid(*oid) {
            Some(ty) if (p.accepts)(&ty) => {}
            ty => wrong.push(format!(
                "{at}: {} is {} in Rust, {} in the schema",
                p.name,
                p.rust,
                ty.map_or_else(|| format!("oid {oid}"), |t| t.name().to_string())
            )),
        }
    }
    match db.prepare(sig.sql).await {
        Err(e) => wrong.push(format!("{at}: `{}` does not prepare: {e:?}", sig.sql)),
        Ok(stmt) => {
            let bound: Vec<_> = sig.params.iter().filter(|p| p.bound.is_some()).collect();
            if bound.len() != stmt.params().len() {
                wrong.push(format!(
                    "{at}: binds {} values, `{}` takes {}",
                    bound.len(),
                    sig.sql,
                    stmt.params().len()
                ));
            }
            for p in bound {
                let ty = p.bound.and_then(|n| stmt.params().get(n - 1));
                match ty {
                    Some(ty) if (p.accepts)(ty) => {}
                    Some(ty) => wrong.push(format!(
                        "{at}: {} ({}) is bound as {}, the statement takes {}",
                        p.name,
                        p.sql,
                        p.rust,
                        ty.name()
                    )),
                    None => wrong.push(format!(
                        "{at}: {} ({}) has no placeholder in `{}`",
                        p.name, p.sql, sig.sql
                    )),
                }
            }
        }
    }
    wrong
}

#[tokio::test]
async fn every_declared_sql_function_matches_the_applied_schema() {
    let b = common::broker().await;
    let db = b.sql().await;
    let signatures = queen_broker::store::sql_signatures();
    assert!(!signatures.is_empty(), "no SQL function is declared");
    let mut wrong = Vec::new();
    for sig in &signatures {
        wrong.extend(mismatches(&db, sig).await);
    }
    assert!(
        wrong.is_empty(),
        "Rust and SQL disagree:\n{}",
        wrong.join("\n")
    );
    b.stop().await;
}

/// The `src/`-relative path of a file `file!()` named (`crates/broker/src/store/ack.rs`).
fn under_src(file: &str) -> String {
    let file = file.replace('\\', "/");
    file.rsplit_once("src/")
        .map_or(file.clone(), |(_, rel)| rel.to_string())
}

#[test]
fn every_declaring_file_is_listed_and_no_call_is_written_by_hand() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let listed: BTreeSet<String> = queen_broker::store::sql_signatures()
        .iter()
        .map(|s| under_src(s.file))
        .collect();
    let mut declaring = BTreeSet::new();
    let mut by_hand = Vec::new();
    for path in &files {
        let rel = under_src(&path.to_string_lossy());
        let text = std::fs::read_to_string(path).expect("read source");
        if text
            .lines()
            .any(|l| l.trim_start().starts_with("sql_fns! {"))
        {
            declaring.insert(rel.clone());
        }
        by_hand.extend(hand_written_calls(&rel, &text));
    }
    assert_eq!(
        declaring, listed,
        "files with a `sql_fns!` block vs the files `store::sql_signatures` lists"
    );
    assert!(
        by_hand.is_empty(),
        "calls of queen.* functions written outside a `sql_fns!` declaration:\n{}",
        by_hand.join("\n")
    );
}

/// Lines of code (not comments) of `text` that spell a call `queen.name(`.
fn hand_written_calls(rel: &str, text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("queen.") {
            let after = &rest[at + "queen.".len()..];
            let name_len = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            // `TABLE queen.t (` and `INTO queen.t (` name a table and its columns.
            let before = rest[..at].trim_end().to_ascii_uppercase();
            let table =
                before.ends_with("TABLE") || before.ends_with("EXISTS") || before.ends_with("INTO");
            if name_len > 0 && !table && after[name_len..].trim_start().starts_with('(') {
                found.push(format!("src/{rel}:{}: {}", i + 1, line.trim()));
                break;
            }
            rest = after;
        }
    }
    found
}

#[test]
fn the_scan_finds_a_call_written_by_hand() {
    let text = "let s = \"SELECT queen.log_x_v1($1)\";\n// queen.log_x_v1(1) in prose\n";
    assert_eq!(hand_written_calls("store/x.rs", text).len(), 1);
    assert!(hand_written_calls("store/x.rs", "FROM queen.queues q").is_empty());
    assert!(hand_written_calls("store/x.rs", "CREATE TABLE queen.t (a int)").is_empty());
}
