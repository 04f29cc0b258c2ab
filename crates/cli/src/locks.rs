//! `queen locks ACTION NAME`: the broker's locks and semaphores (docs/wire.md §21) through the
//! SDK. `show` lists the holders; `acquire` takes a permit and prints its fencing token;
//! `renew` and `release` act on a permit named by its token (and `--slot`). A refused acquire, a
//! lost renew or release exits 1 and says who holds the lock.

use queen_client::locks::{Acquired, Holder, Kept, Permit, Refusal};
use serde_json::json;

use crate::table::{cell, printable, render};
use crate::{print, print_json, CliError, Connection, Result};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  queen locks acquire nightly-report --ttl 300 --owner ops\n  \
    queen locks show nightly-report\n  queen locks renew nightly-report 41 --ttl 300\n  \
    queen locks release nightly-report 42"
)]
pub struct LocksArgs {
    #[command(subcommand)]
    pub action: LocksAction,
    #[command(flatten)]
    pub conn: Connection,
}

/// What to do with a lock.
#[derive(Debug, clap::Subcommand)]
pub enum LocksAction {
    /// List a lock's holders (none: it is free).
    Show { name: String },
    /// Take a permit for --ttl seconds; prints its slot and fencing token.
    Acquire {
        name: String,
        /// How long the permit lasts unless renewed.
        #[arg(long, value_name = "SECONDS")]
        ttl: u64,
        /// Who holds it (minted by the broker when absent); the same owner gets its permit back.
        #[arg(long)]
        owner: Option<String>,
        /// Permits of a semaphore (1: a lock).
        #[arg(long)]
        limit: Option<u32>,
    },
    /// Extend a held permit; prints its new token.
    Renew {
        name: String,
        #[command(flatten)]
        permit: PermitArgs,
        /// The new lifetime from now.
        #[arg(long, value_name = "SECONDS")]
        ttl: u64,
        /// The permit's owner: renews even with an older token of that owner.
        #[arg(long)]
        owner: Option<String>,
    },
    /// Give a held permit up.
    Release {
        name: String,
        #[command(flatten)]
        permit: PermitArgs,
    },
}

/// A permit named by hand (`--token` is the JWT of every command, so the fencing token is
/// positional).
#[derive(Debug, clap::Args)]
pub struct PermitArgs {
    /// The permit's fencing token (as acquire or the last renew printed it).
    #[arg(value_name = "TOKEN")]
    pub fencing_token: i64,
    /// The permit's slot (semaphores).
    #[arg(long, default_value_t = 0)]
    pub slot: u32,
}

pub async fn run(a: LocksArgs) -> Result<()> {
    let locks = a.conn.client().locks();
    let fail = |e| a.conn.fail(e);
    match &a.action {
        LocksAction::Show { name } => {
            let holders = locks.holders(name).await.map_err(fail)?;
            if a.conn.json {
                return print_json(&json!({"held": !holders.is_empty(), "holders": holders}));
            }
            if holders.is_empty() {
                return print(&format!("{} is free\n", printable(name)));
            }
            print(&holder_table(&holders))
        }
        LocksAction::Acquire {
            name,
            ttl,
            owner,
            limit,
        } => {
            let answer = locks
                .acquire(name, *ttl, owner.as_deref(), *limit)
                .await
                .map_err(fail)?;
            match answer {
                Acquired::Granted(p) => granted(&a, "acquired", &p),
                Acquired::Refused { reason, holders } => {
                    let why = match reason {
                        Refusal::Held => "held",
                        Refusal::Contended => "contended",
                    };
                    lost(&a, name, why, &holders)
                }
            }
        }
        LocksAction::Renew {
            name,
            permit,
            ttl,
            owner,
        } => {
            let p = Permit::new(
                name,
                permit.slot,
                permit.fencing_token,
                owner.clone().unwrap_or_default(),
            );
            match locks.renew(&p, *ttl).await.map_err(fail)? {
                Kept::Done(p) => granted(&a, "renewed", &p),
                Kept::Lost(holders) => lost(&a, name, "lost", &holders),
            }
        }
        LocksAction::Release { name, permit } => {
            let p = Permit::new(name, permit.slot, permit.fencing_token, "");
            match locks.release(&p).await.map_err(fail)? {
                Kept::Done(()) => {
                    if a.conn.json {
                        return print_json(&json!({"released": true}));
                    }
                    print(&format!("released {} slot {}\n", printable(name), p.slot))
                }
                Kept::Lost(holders) => lost(&a, name, "lost", &holders),
            }
        }
    }
}

fn granted(a: &LocksArgs, verb: &str, p: &Permit) -> Result<()> {
    if a.conn.json {
        return print_json(&json!({"name": p.name, "slot": p.slot, "token": p.token,
                                  "owner": p.owner, "already": p.already}));
    }
    print(&format!(
        "{verb} {} slot {} token {} owner {}\n",
        printable(&p.name),
        p.slot,
        p.token,
        printable(&p.owner)
    ))
}

fn lost(a: &LocksArgs, name: &str, why: &str, holders: &[Holder]) -> Result<()> {
    if a.conn.json {
        print_json(&json!({"reason": why, "holders": holders}))?;
    } else if !holders.is_empty() {
        print(&holder_table(holders))?;
    }
    Err(CliError::NotApplied(format!("{}: {why}", printable(name))))
}

fn holder_table(holders: &[Holder]) -> String {
    let rows: Vec<Vec<String>> = holders
        .iter()
        .map(|h| {
            vec![
                h.slot.to_string(),
                cell(&h.owner),
                h.token.to_string(),
                cell(&h.since),
                cell(&h.expires_at),
                cell(&h.renewed_at),
            ]
        })
        .collect();
    render(
        &["SLOT", "OWNER", "TOKEN", "SINCE", "EXPIRES", "RENEWED"],
        &rows,
    )
}
