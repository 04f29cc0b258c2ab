//! Partition ids and names, both ways, learned from claims and reseeds: an ack names only the
//! id (which ring to report to), and a pop that claims one partition names it by id
//! (`log_pop_claim_v1` without the name resolution of `log_pop_list_v1`). Either answer may be
//! stale (a partition deleted and created again under the same name gets a new id); the
//! callers check with PostgreSQL, which names the partition an id is, or answers that it is
//! none.

use std::collections::HashMap;
use std::sync::Arc;

/// A partition's (queue, partition) names.
pub type Names = (Arc<str>, Arc<str>);

#[derive(Default)]
pub struct PartitionNames {
    by_id: HashMap<i64, Names>,
    /// queue → partition → id (nested, so a lookup by `&str` allocates nothing).
    by_name: HashMap<Arc<str>, HashMap<Arc<str>, i64>>,
}

impl PartitionNames {
    /// Records that `id` is (queue, partition); the newest id of a name wins.
    pub fn learn(&mut self, id: i64, queue: &str, partition: &str) {
        if self.id_of(queue, partition) == Some(id) {
            return;
        }
        let names: Names = (Arc::from(queue), Arc::from(partition));
        self.by_name
            .entry(names.0.clone())
            .or_default()
            .insert(names.1.clone(), id);
        self.by_id.insert(id, names);
    }

    pub fn names_of(&self, id: i64) -> Option<Names> {
        self.by_id.get(&id).cloned()
    }

    pub fn id_of(&self, queue: &str, partition: &str) -> Option<i64> {
        self.by_name.get(queue)?.get(partition).copied()
    }

    /// How many ids are known (and names: one id per name is kept).
    #[cfg(test)]
    pub fn known(&self) -> (usize, usize) {
        let names = self.by_name.values().map(HashMap::len).sum();
        (self.by_id.len(), names)
    }

    /// Keeps only the partitions of the queues `keep` accepts.
    pub fn retain_queues(&mut self, keep: impl Fn(&str) -> bool) {
        self.by_id.retain(|_, (queue, _)| keep(queue));
        self.by_name.retain(|queue, _| keep(queue));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_known_both_ways_and_the_newest_id_wins() {
        let mut n = PartitionNames::default();
        n.learn(7, "q", "p");
        n.learn(8, "r", "p");
        assert_eq!(n.id_of("q", "p"), Some(7));
        assert_eq!(n.names_of(8).map(|(q, _)| q.to_string()), Some("r".into()));
        n.learn(9, "q", "p");
        assert_eq!(n.id_of("q", "p"), Some(9), "created again: a new id");
        n.retain_queues(|q| q != "q");
        assert_eq!(n.id_of("q", "p"), None);
        assert_eq!(n.names_of(9), None);
        assert_eq!(n.id_of("r", "p"), Some(8));
    }
}
