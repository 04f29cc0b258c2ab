//! `queen dlq QUEUE [ACTION]`: a queue's dead letters. Without an action it lists them (newest
//! first); `replay` pushes one back under its transactionId, `delete` removes one, `purge`
//! removes the queue's (or one group's). Each prints the broker's JSON with `--json`, else a
//! table or a one-line summary.

use queen_client::{DlqQuery, Queen};
use serde_json::Value;

use crate::inspect::as_list;
use crate::table::{cell, render};
use crate::{print, print_json, CliError, Connection, Result};

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  queen dlq orders --group billing\n  \
    queen dlq orders replay 17 order-42\n  queen dlq orders delete 17 order-42\n  \
    queen dlq orders purge --group billing")]
pub struct DlqArgs {
    pub queue: String,
    /// Only this consumer group's dead letters (listing and purge).
    #[arg(long, global = true)]
    pub group: Option<String>,
    /// Listing only: this partition's dead letters.
    #[arg(long)]
    pub partition: Option<String>,
    /// Listing only: rows shown (default 20).
    #[arg(long)]
    pub limit: Option<u32>,
    /// Listing only: rows skipped (default 0).
    #[arg(long)]
    pub offset: Option<u32>,
    #[command(subcommand)]
    pub action: Option<DlqAction>,
    #[command(flatten)]
    pub conn: Connection,
}

/// What to do with the dead letters instead of listing them.
#[derive(Debug, clap::Subcommand)]
pub enum DlqAction {
    /// Push a dead letter's payload back to its partition (same transactionId, new offset)
    /// and remove it, for every group that filed it.
    Replay(Address),
    /// Remove a dead letter, for every group that filed it.
    Delete(Address),
    /// Remove all the queue's dead letters (of --group only, if given).
    Purge,
}

/// A dead letter's address, as the listing shows it.
#[derive(Debug, clap::Args)]
pub struct Address {
    pub partition_id: String,
    pub transaction_id: String,
}

pub async fn run(a: DlqArgs) -> Result<()> {
    let client = a.conn.client();
    let listing_only = a.partition.is_some() || a.limit.is_some() || a.offset.is_some();
    if a.action.is_some() && listing_only {
        return Err(CliError::Usage(
            "--partition, --limit and --offset apply to the listing only".into(),
        ));
    }
    let answer = match &a.action {
        None => return list(&a, &client).await,
        Some(DlqAction::Purge) => client.dlq_purge(&a.queue, a.group.as_deref()).await,
        Some(DlqAction::Replay(at)) => {
            ensure_in_queue(&a, &client, at).await?;
            client
                .dlq_replay(&at.partition_id, &at.transaction_id)
                .await
        }
        Some(DlqAction::Delete(at)) => {
            ensure_in_queue(&a, &client, at).await?;
            client
                .dlq_delete(&at.partition_id, &at.transaction_id)
                .await
        }
    }
    .map_err(|e| a.conn.fail(e))?;
    if a.conn.json {
        return print_json(&answer);
    }
    print(&summary(a.action.as_ref(), &answer))
}

/// Refuses an address whose message belongs to another queue. A message the broker no longer
/// stores cannot be checked; the dead-letter route then decides on the address alone.
async fn ensure_in_queue(a: &DlqArgs, client: &Queen, at: &Address) -> Result<()> {
    if a.group.is_some() {
        return Err(CliError::Usage(
            "--group applies to listing and purge; replay and delete act on every group".into(),
        ));
    }
    match client.message(&at.partition_id, &at.transaction_id).await {
        Ok(m) if m["queue"].as_str() != Some(a.queue.as_str()) => Err(CliError::Usage(format!(
            "partition {} belongs to queue {}, not {}",
            at.partition_id,
            cell(&m["queue"]),
            a.queue
        ))),
        Ok(_) => Ok(()),
        Err(queen_client::Error::Api { status, .. }) if status.as_u16() == 404 => Ok(()),
        Err(e) => Err(a.conn.fail(e)),
    }
}

fn summary(action: Option<&DlqAction>, v: &Value) -> String {
    match action {
        Some(DlqAction::Replay(at)) => format!(
            "replayed {} at partition {} offset {} ({} dead letters removed)\n",
            at.transaction_id,
            cell(&v["partitionId"]),
            cell(&v["offset"]),
            cell(&v["replayed"])
        ),
        Some(DlqAction::Delete(at)) => format!(
            "deleted {} dead letters of {}\n",
            cell(&v["deleted"]),
            at.transaction_id
        ),
        _ => format!("purged {} dead letters\n", cell(&v["deleted"])),
    }
}

async fn list(a: &DlqArgs, client: &Queen) -> Result<()> {
    let query = DlqQuery {
        queue: a.queue.clone(),
        group: a.group.clone(),
        partition: a.partition.clone(),
        limit: Some(a.limit.unwrap_or(20)),
        offset: Some(a.offset.unwrap_or(0)),
    };
    let v = client.dlq(&query).await.map_err(|e| a.conn.fail(e))?;
    if a.conn.json {
        return print_json(&v);
    }
    let rows: Vec<Vec<String>> = as_list(&v["messages"])
        .iter()
        .map(|d| {
            vec![
                cell(&d["failedAt"]),
                cell(&d["partition"]),
                cell(&d["partitionId"]),
                cell(&d["transactionId"]),
                cell(&d["consumerGroup"]),
                cell(&d["retryCount"]),
                cell(&d["errorMessage"]),
            ]
        })
        .collect();
    let header = [
        "FAILED AT",
        "PARTITION",
        "PARTITION ID",
        "TRANSACTION ID",
        "GROUP",
        "RETRIES",
        "ERROR",
    ];
    let mut out = render(&header, &rows);
    out.push_str(&format!("{} shown of {}\n", rows.len(), cell(&v["total"])));
    print(&out)
}
