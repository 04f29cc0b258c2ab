//! The typed call of the hot-list's reseed (sql/functions/hotlist.sql): one page of the
//! partitions of a queue that may have pending data for a group, after registering the group.
//! The ring's claims go through `store::pop::pop_list`.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use crate::error::Result;
use crate::store::sql_fn::sql_fns;

sql_fns! {
    /// One reseed page, after registering the group.
    Reseed<'a> = log_hotlist_reseed_v1(
        p_queue: &'a str,
        p_group: &'a str,
        p_sub_mode: &'a str,
        p_sub_from: &'a str,
        p_after_id: Option<i64>,
        p_limit: i32,
    ) select "r_registered, r_ids, r_names, r_until";
}

/// One reseed page.
#[derive(Debug, Default)]
pub struct ReseedPage {
    /// The group is registered on the queue (false when the queue does not exist).
    pub registered: bool,
    /// Per partition: id, name, and the end of its live lease when it has one.
    pub rows: Vec<(i64, String, Option<DateTime<Utc>>)>,
}

/// `queen.log_hotlist_reseed_v1`: registers (queue, group) on first contact with the pop's
/// subscription, then answers up to `limit` partitions after `after_id`.
pub async fn reseed(
    db: &impl GenericClient,
    queue: &str,
    group: &str,
    (sub_mode, sub_from): (&str, &str),
    after_id: Option<i64>,
    limit: i32,
) -> Result<ReseedPage> {
    let row = Reseed {
        p_queue: queue,
        p_group: group,
        p_sub_mode: sub_mode,
        p_sub_from: sub_from,
        p_after_id: after_id,
        p_limit: limit,
    }
    .query_one(db)
    .await?;
    let ids: Vec<i64> = row.try_get(1)?;
    let names: Vec<String> = row.try_get(2)?;
    let until: Vec<Option<DateTime<Utc>>> = row.try_get(3)?;
    Ok(ReseedPage {
        registered: row.try_get(0)?,
        rows: ids
            .into_iter()
            .zip(names)
            .zip(until)
            .map(|((id, name), until)| (id, name, until))
            .collect(),
    })
}
