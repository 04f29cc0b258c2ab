//! The typed call of `queen.log_dedup_hydrate_v1` (sql/functions/dedup_cache.sql): the sidecar rows
//! the dedup cache hydrates or catches up from, for many partitions in one snapshot.

use deadpool_postgres::GenericClient;

use crate::error::{Error, Result};
use queen_proto::sidecar::{HashRow, Hydration};

/// One partition to read: rows committed after offset `after` (-1: all in the window).
pub struct HydrateAsk<'a> {
    pub queue: &'a str,
    pub partition: &'a str,
    pub after: i64,
}

/// One answer per ask, in order; `None` where the partition does not exist.
pub async fn hydrate(
    db: &impl GenericClient,
    asks: &[HydrateAsk<'_>],
) -> Result<Vec<Option<Hydration>>> {
    let queues: Vec<&str> = asks.iter().map(|a| a.queue).collect();
    let partitions: Vec<&str> = asks.iter().map(|a| a.partition).collect();
    let after: Vec<i64> = asks.iter().map(|a| a.after).collect();
    let stmt = crate::store::prepare(
        db,
        "SELECT r_ord, r_pid, r_window, r_last, r_since, r_now, r_bases, r_created, r_hashes \
         FROM queen.log_dedup_hydrate_v1($1, $2, $3)",
    )
    .await?;
    let rows = db.query(&stmt, &[&queues, &partitions, &after]).await?;
    let mut out: Vec<Option<Hydration>> = vec![None; asks.len()];
    for row in rows {
        let ord: i32 = row.try_get(0)?;
        let slot = usize::try_from(ord)
            .ok()
            .and_then(|o| o.checked_sub(1))
            .and_then(|i| out.get_mut(i))
            .ok_or_else(|| {
                Error::internal(format!("log_dedup_hydrate_v1 answered ordinal {ord}"))
            })?;
        let bases: Option<Vec<i64>> = row.try_get(6)?;
        let created: Option<Vec<i64>> = row.try_get(7)?;
        let hashes: Option<Vec<Vec<u8>>> = row.try_get(8)?;
        let (bases, created, hashes) = (
            bases.unwrap_or_default(),
            created.unwrap_or_default(),
            hashes.unwrap_or_default(),
        );
        if bases.len() != created.len() || bases.len() != hashes.len() {
            return Err(Error::internal(
                "log_dedup_hydrate_v1 answered misaligned row arrays",
            ));
        }
        *slot = Some(Hydration {
            pid: row.try_get(1)?,
            window_s: row.try_get(2)?,
            last: row.try_get(3)?,
            since_us: row.try_get(4)?,
            now_us: row.try_get(5)?,
            rows: bases
                .into_iter()
                .zip(created)
                .zip(hashes)
                .map(|((base, created_us), hashes)| HashRow {
                    base,
                    created_us,
                    hashes,
                })
                .collect(),
        });
    }
    Ok(out)
}
