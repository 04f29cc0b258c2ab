//! Spooled writes whose commit was in doubt (docs/engine.md §4.6): the connection was lost after
//! the write reached PostgreSQL, so it may have committed. Before the drain stores such a group
//! again, it asks PostgreSQL which of its messages are there already: the offsets whose stored
//! transactionId hash equals theirs (`queen.log_txn_offsets_v1`), and of those the ones that
//! hold the message's own id (read back from the covering segment). Those are dropped from the
//! replay; the rest are stored. With a queue's dedup on the dedup layers would answer
//! `duplicate` anyway; with it off (`dedupWindowSeconds: 0`) this is what keeps an in-doubt
//! commit from being stored twice.

use queen_proto::hash::txn_hash;

use crate::engine::push::flush::OriginalIds;
use crate::engine::push::PushState;
use crate::error::Result;
use crate::spool::SpoolGroup;
use crate::store::push::txn_offsets;

/// `groups` without the messages PostgreSQL holds already, for the groups that are in doubt
/// (every group when `all`); the count of messages dropped. Groups left empty go.
pub async fn without_stored(
    st: &PushState,
    groups: &[SpoolGroup],
    all: bool,
) -> Result<(Vec<SpoolGroup>, u64)> {
    let mut out = Vec::with_capacity(groups.len());
    let mut dropped = 0u64;
    if !groups.iter().any(|g| all || g.in_doubt) {
        return Ok((groups.to_vec(), 0));
    }
    let conn = st.store.conn().await?;
    let mut originals = OriginalIds::default();
    for g in groups {
        if !(all || g.in_doubt) {
            out.push(g.clone());
            continue;
        }
        let hashes: Vec<u8> = g
            .items
            .iter()
            .flat_map(|item| txn_hash(&item.transaction_id))
            .collect();
        let mut stored = vec![false; g.items.len()];
        for (idx, pid, off) in txn_offsets(&conn, &g.queue, &g.partition, &hashes).await? {
            let Some(item) = g.items.get(idx) else {
                continue;
            };
            if !stored[idx] && originals.resolve(&conn, pid, off).await? == item.message_id {
                stored[idx] = true;
            }
        }
        let items: Vec<_> = g
            .items
            .iter()
            .zip(&stored)
            .filter(|(_, &s)| !s)
            .map(|(item, _)| item.clone())
            .collect();
        dropped += (g.items.len() - items.len()) as u64;
        if !items.is_empty() {
            out.push(SpoolGroup { items, ..g.clone() });
        }
    }
    Ok((out, dropped))
}
