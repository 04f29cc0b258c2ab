//! The typed call of `queen.log_dedup_hydrate_v1` (sql/functions/dedup_cache.sql): the sidecar rows
//! the dedup cache hydrates or catches up from, for many partitions in one snapshot. The answer
//! is read as a stream, one sidecar row per message, each row turned into the cache's 8-byte keys
//! as it arrives and kept only up to a hash limit, so a read never holds more than that (nor
//! leaves a connection's buffers sized for more).

use std::collections::HashSet;

use deadpool_postgres::GenericClient;
use futures::{pin_mut, TryStreamExt};
use tokio_postgres::{Row, RowStream};

use crate::error::{Error, Result};
use crate::store::sql_fn::sql_fns;
use queen_proto::sidecar::{self, HashRow, Hydration};

sql_fns! {
    /// The sidecar rows of many partitions, one snapshot.
    Hydrate<'a> = log_dedup_hydrate_v1(
        p_queues: &'a [&'a str],
        p_partitions: &'a [&'a str],
        p_after: &'a [i64],
        p_max_hashes: i64,
    ) select "r_ord, r_pid, r_window, r_last, r_since, r_now, r_base, r_created, r_hashes, \
        r_running";
}

/// One partition to read: rows committed after offset `after` (-1: all in the window).
pub struct HydrateAsk<'a> {
    pub queue: &'a str,
    pub partition: &'a str,
    pub after: i64,
}

/// What the read found for one ask.
#[derive(Debug)]
pub enum Hydrated {
    /// The partition does not exist.
    Missing,
    Rows(Hydration),
    /// More than the read's limit of hashes: nothing kept.
    TooLarge,
}

/// One answer per ask, in order. `max_hashes` bounds the hashes kept over all asks together:
/// a partition with more than that in its range, or more than the partitions before it left
/// of the limit, is [`Hydrated::TooLarge`] (and what it held is let go).
pub async fn hydrate(
    db: &impl GenericClient,
    asks: &[HydrateAsk<'_>],
    max_hashes: i64,
) -> Result<Vec<Hydrated>> {
    let rows = read(db, asks, max_hashes).await?;
    pin_mut!(rows);
    let mut out: Vec<Hydrated> = (0..asks.len()).map(|_| Hydrated::Missing).collect();
    let mut kept: i64 = 0;
    while let Some(row) = rows.try_next().await? {
        let slot = &mut out[ask_of(&row, asks.len())?];
        if let Hydrated::Missing = slot {
            *slot = Hydrated::Rows(window_of(&row)?);
        }
        let Hydrated::Rows(h) = slot else {
            continue; // already too large: the rest of its rows are dropped as they come
        };
        let Some(base) = row.try_get::<_, Option<i64>>(6)? else {
            continue; // a partition with no row in its range
        };
        let running: i64 = row.try_get(9)?;
        let keys: Vec<u64> = sidecar::keys(row.try_get(8)?).collect();
        let n = key_count(&keys);
        if running > max_hashes || kept.saturating_add(n) > max_hashes {
            kept -= h.rows.iter().map(|r| key_count(&r.keys)).sum::<i64>();
            *slot = Hydrated::TooLarge;
            continue;
        }
        kept += n;
        h.rows.push(HashRow {
            base,
            created_us: row.try_get(7)?,
            keys,
        });
    }
    Ok(out)
}

/// What a scan found for one ask.
#[derive(Debug)]
pub enum Scanned {
    /// The partition does not exist.
    Missing,
    /// One of the wanted keys is in the window.
    Found,
    /// None is: the window read, its rows not kept (`rows` is empty), and how many hashes
    /// it held.
    Clear { window: Hydration, hashes: i64 },
}

/// Reads the whole in-window range of each ask (`after` as in [`hydrate`]) as a stream and
/// looks for `wanted[i]`'s keys in ask i's rows, keeping nothing but the verdict: the dedup
/// check of a partition too large to cache, done here rather than by exploding every row
/// in SQL. Holds one sidecar row at a time.
pub async fn scan(
    db: &impl GenericClient,
    asks: &[HydrateAsk<'_>],
    wanted: &[HashSet<u64>],
) -> Result<Vec<Scanned>> {
    if wanted.len() != asks.len() {
        return Err(Error::internal("scan: one key set per ask"));
    }
    let rows = read(db, asks, i64::MAX - 1).await?;
    pin_mut!(rows);
    let mut out: Vec<Scanned> = (0..asks.len()).map(|_| Scanned::Missing).collect();
    while let Some(row) = rows.try_next().await? {
        let i = ask_of(&row, asks.len())?;
        if let Scanned::Missing = out[i] {
            let window = window_of(&row)?;
            out[i] = Scanned::Clear { window, hashes: 0 };
        }
        let Scanned::Clear { hashes: seen, .. } = &mut out[i] else {
            continue; // found already
        };
        let Some(hashes) = row.try_get::<_, Option<&[u8]>>(8)? else {
            continue; // a partition with no row in its range
        };
        *seen = row.try_get(9)?;
        if sidecar::keys(hashes).any(|k| wanted[i].contains(&k)) {
            out[i] = Scanned::Found;
        }
    }
    Ok(out)
}

/// The answer of `log_dedup_hydrate_v1` for `asks`, at most `max_hashes + 1` hashes' rows per
/// partition, as a stream.
async fn read(
    db: &impl GenericClient,
    asks: &[HydrateAsk<'_>],
    max_hashes: i64,
) -> Result<RowStream> {
    let queues: Vec<&str> = asks.iter().map(|a| a.queue).collect();
    let partitions: Vec<&str> = asks.iter().map(|a| a.partition).collect();
    let after: Vec<i64> = asks.iter().map(|a| a.after).collect();
    let call = Hydrate {
        p_queues: &queues,
        p_partitions: &partitions,
        p_after: &after,
        p_max_hashes: max_hashes,
    };
    let stmt = crate::store::prepare(db, Hydrate::SQL).await?;
    Ok(db.query_raw(&stmt, call.params()).await?)
}

/// The index of the ask a row answers.
fn ask_of(row: &Row, asks: usize) -> Result<usize> {
    let ord: i32 = row.try_get(0)?;
    usize::try_from(ord)
        .ok()
        .and_then(|o| o.checked_sub(1))
        .filter(|&i| i < asks)
        .ok_or_else(|| Error::internal(format!("log_dedup_hydrate_v1 answered ordinal {ord}")))
}

/// A partition's window as its first row describes it, with no rows yet.
fn window_of(row: &Row) -> Result<Hydration> {
    Ok(Hydration {
        pid: row.try_get(1)?,
        window_s: row.try_get(2)?,
        last: row.try_get(3)?,
        since_us: row.try_get(4)?,
        now_us: row.try_get(5)?,
        rows: Vec::new(),
    })
}

fn key_count(keys: &[u64]) -> i64 {
    i64::try_from(keys.len()).unwrap_or(i64::MAX)
}
