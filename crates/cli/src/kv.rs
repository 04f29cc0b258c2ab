//! `queen kv ACTION`: the broker's key-value store (docs/wire.md §20) through the SDK's typed
//! calls. `get`, `put`, `delete`, `list` (a prefix, a page at a time) and `incr`; each prints a
//! table or a one-line verdict (stored strings made printable), or the typed answer as JSON
//! with `--json`. A verdict that did not apply (a miss, a lost `--expect`, a bound) exits 1.

use queen_client::kv::{Expiry, KvOp, KvResult, KvVerdict};
use serde_json::{json, Number, Value};

use crate::table::{cell, printable, render};
use crate::{print, print_json, CliError, Connection, Result};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  queen kv put config feature.x true --forever\n  \
    queen kv put locks job-7 '{\"by\":\"me\"}' --ttl 60 --if-absent\n  \
    queen kv get config feature.x\n  queen kv list config feature. --limit 50\n  \
    queen kv incr quota acme:2026-12-07 --by 5 --max 1000 --ttl 86400\n  \
    queen kv delete config feature.x --expect 42"
)]
pub struct KvArgs {
    #[command(subcommand)]
    pub action: KvAction,
    #[command(flatten)]
    pub conn: Connection,
}

/// What to do in the store.
#[derive(Debug, clap::Subcommand)]
pub enum KvAction {
    /// Show a key's live row (exit 1 when it has none).
    Get { ns: String, key: String },
    /// Write a value (read as JSON when it parses, else as text) with a new version.
    Put(PutArgs),
    /// Delete a key (exit 1 when it is absent or --expect does not hold).
    Delete {
        ns: String,
        key: String,
        /// Only if the key is at this version.
        #[arg(long, value_name = "VERSION")]
        expect: Option<u64>,
    },
    /// List the live keys starting with PREFIX, in byte order, one page at a time.
    List(ListArgs),
    /// Add to a numeric value (an absent key counts as 0); exit 1 when a bound refuses it.
    Incr(IncrArgs),
}

/// Exactly one lifetime for a write.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
pub struct Lifetime {
    /// The key expires this many seconds after the write.
    #[arg(long, value_name = "SECONDS")]
    pub ttl: Option<u64>,
    /// The key lives until deleted.
    #[arg(long)]
    pub forever: bool,
}

impl Lifetime {
    fn expiry(&self) -> Expiry {
        self.ttl.map_or(Expiry::Forever, Expiry::Seconds)
    }
}

#[derive(Debug, clap::Args)]
pub struct PutArgs {
    pub ns: String,
    pub key: String,
    #[arg(allow_hyphen_values = true)]
    pub value: String,
    #[command(flatten)]
    pub lifetime: Lifetime,
    /// Only if the key is at this version (0: only if it does not exist).
    #[arg(long, value_name = "VERSION", conflicts_with = "if_absent")]
    pub expect: Option<u64>,
    /// Only if the key does not exist.
    #[arg(long)]
    pub if_absent: bool,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    pub ns: String,
    pub prefix: String,
    /// Keys after this one (the previous page's last key).
    #[arg(long)]
    pub after: Option<String>,
    /// Keys per page (the broker clamps it to 1..1000; 100 by default).
    #[arg(long)]
    pub limit: Option<u32>,
    /// Keys, versions and expiries only.
    #[arg(long)]
    pub keys_only: bool,
}

#[derive(Debug, clap::Args)]
pub struct IncrArgs {
    pub ns: String,
    pub key: String,
    /// What to add (negative subtracts; decimals allowed).
    #[arg(long, default_value = "1", allow_hyphen_values = true, value_parser = number)]
    pub by: Number,
    /// The lowest value allowed.
    #[arg(long, allow_hyphen_values = true, value_parser = number)]
    pub min: Option<Number>,
    /// The highest value allowed.
    #[arg(long, allow_hyphen_values = true, value_parser = number)]
    pub max: Option<Number>,
    /// The lifetime of a counter this call creates (a live one keeps its own).
    #[command(flatten)]
    pub lifetime: Lifetime,
}

fn number(text: &str) -> std::result::Result<Number, String> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Number(n)) => Ok(n),
        _ => Err(format!("{text:?} is not a number")),
    }
}

pub async fn run(a: KvArgs) -> Result<()> {
    let op = match &a.action {
        KvAction::Get { ns, key } => KvOp::get(ns, key),
        KvAction::Put(p) => put_op(p),
        KvAction::Delete { ns, key, expect } => KvOp::Delete {
            ns: ns.clone(),
            key: key.clone(),
            expect: *expect,
            required: false,
        },
        KvAction::List(l) => KvOp::GetPrefix {
            ns: l.ns.clone(),
            prefix: l.prefix.clone(),
            after: l.after.clone(),
            limit: l.limit,
            keys_only: l.keys_only,
        },
        KvAction::Incr(i) => KvOp::Incr {
            ns: i.ns.clone(),
            key: i.key.clone(),
            delta: i.by.clone(),
            min: i.min.clone(),
            max: i.max.clone(),
            expiry: i.lifetime.expiry(),
            required: false,
        },
    };
    let result = a
        .conn
        .client()
        .kv()
        .apply(op.clone())
        .await
        .map_err(|e| a.conn.fail(e))?;
    show(&a, &op, result)
}

fn put_op(p: &PutArgs) -> KvOp {
    let value = serde_json::from_str(&p.value).unwrap_or_else(|_| json!(p.value));
    let expiry = p.lifetime.expiry();
    if p.if_absent {
        return KvOp::put_if_absent(&p.ns, &p.key, value, expiry);
    }
    KvOp::Put {
        ns: p.ns.clone(),
        key: p.key.clone(),
        value,
        expiry,
        expect: p.expect,
        required: false,
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<Value> {
    serde_json::to_value(v).map_err(|e| CliError::Refused(e.to_string()))
}

fn show(a: &KvArgs, op: &KvOp, result: KvResult) -> Result<()> {
    let key = printable(op.key().unwrap_or_default());
    match result {
        KvResult::Get(None) => {
            if a.conn.json {
                print_json(&json!({"found": false, "key": op.key()}))?;
            }
            Err(CliError::NotApplied(format!("{key}: no such key")))
        }
        KvResult::Get(Some(entry)) => {
            if a.conn.json {
                let mut v = to_json(&entry)?;
                v["found"] = json!(true);
                return print_json(&v);
            }
            let row = vec![
                entry.key.clone(),
                entry.version.to_string(),
                expires(&entry.expires_at),
                entry.updated_at.clone(),
                entry.value.to_string(),
            ];
            print(&render(
                &["KEY", "VERSION", "EXPIRES", "UPDATED", "VALUE"],
                &[row],
            ))
        }
        KvResult::Page(page) => {
            if a.conn.json {
                return print_json(&to_json(&page)?);
            }
            let rows: Vec<Vec<String>> = page
                .rows
                .iter()
                .map(|e| {
                    vec![
                        e.key.clone(),
                        e.version.to_string(),
                        expires(&e.expires_at),
                        e.updated_at.clone(),
                        e.value.to_string(),
                    ]
                })
                .collect();
            let header = ["KEY", "VERSION", "EXPIRES", "UPDATED", "VALUE"];
            print(&(render(&header, &rows) + &more(a, page.next_after.as_deref())))
        }
        KvResult::Keys(page) => {
            if a.conn.json {
                return print_json(&to_json(&page)?);
            }
            let rows: Vec<Vec<String>> = page
                .rows
                .iter()
                .map(|k| vec![k.key.clone(), k.version.to_string(), expires(&k.expires_at)])
                .collect();
            let table = render(&["KEY", "VERSION", "EXPIRES"], &rows);
            print(&(table + &more(a, page.next_after.as_deref())))
        }
        KvResult::Many(_) => Err(CliError::Refused("an unexpected getMany answer".into())),
        KvResult::Write(verdict) => show_verdict(a, op, &key, verdict),
    }
}

fn show_verdict(a: &KvArgs, op: &KvOp, key: &str, verdict: KvVerdict) -> Result<()> {
    match verdict {
        KvVerdict::Applied(done) => {
            if a.conn.json {
                let mut v = to_json(&done)?;
                v["applied"] = json!(true);
                return print_json(&v);
            }
            let line = match op {
                KvOp::Delete { .. } => format!("deleted {key} (version {})\n", done.version),
                _ => format!(
                    "{key} = {}  version {}  expires {}\n",
                    cell(&json!(done.value.to_string())),
                    done.version,
                    expires(&done.expires_at)
                ),
            };
            print(&line)
        }
        KvVerdict::Refused(lost) => {
            if a.conn.json {
                let mut v = to_json(&lost)?;
                v["applied"] = json!(false);
                print_json(&v)?;
            }
            Err(CliError::NotApplied(format!(
                "{} of {key} not applied: {} (version {}, value {})",
                op.name(),
                lost.reason,
                lost.version,
                cell(&json!(lost.value.to_string()))
            )))
        }
    }
}

fn expires(at: &Option<String>) -> String {
    at.clone().unwrap_or_else(|| "never".into())
}

/// The footer of a page: how to ask for the next one.
fn more(a: &KvArgs, next_after: Option<&str>) -> String {
    let (KvAction::List(l), Some(next)) = (&a.action, next_after) else {
        return String::new();
    };
    format!(
        "more keys follow: queen kv list {} {} --after {}\n",
        shell_word(&l.ns),
        shell_word(&l.prefix),
        shell_word(next)
    )
}

/// `text` as one shell word: bare when it is plain, else single-quoted (and printable).
pub fn shell_word(text: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "._:/@%+=,-".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        return text.to_string();
    }
    format!("'{}'", printable(&text.replace('\'', "'\\''")))
}
