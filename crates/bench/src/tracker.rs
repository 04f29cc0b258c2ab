//! Delivery bookkeeping for one cell: per consumer group, which sequence numbers arrived, how
//! many arrived again (a redelivery when the broker says `deliveryAttempt > 1`, a duplicate
//! otherwise), whether each partition's offsets arrived in order without gaps (strict
//! per-partition FIFO), and the end-to-end latency of deliveries scheduled inside the measured
//! window.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::openloop::new_histogram;

#[derive(Default)]
struct GroupState {
    seen: Vec<u64>,
    unique: u64,
    duplicates: u64,
    redelivered: u64,
    /// Partition id → last offset delivered for the first time.
    last_offset: HashMap<String, i64>,
    order_violations: u64,
}

/// One delivery as a consumer read it: the message's sequence number, the broker's delivery
/// attempt, the scheduled send instant (µs), and the (partitionId, offset) lane when the
/// broker reports one.
pub struct Delivery<'a> {
    pub seq: u64,
    pub attempt: u32,
    pub sched_us: i64,
    pub lane: Option<(&'a str, i64)>,
}

impl GroupState {
    /// Counts one delivery (first, labelled redelivery, or duplicate) and checks its lane's
    /// order; true for the message's first delivery.
    fn deliver(&mut self, d: &Delivery<'_>) -> bool {
        let fresh = self.mark(d.seq);
        if fresh {
            self.unique += 1;
            if let Some((partition, offset)) = d.lane {
                // The partition's name is copied once, at its first delivery.
                let last = match self.last_offset.get_mut(partition) {
                    Some(last) => std::mem::replace(last, offset),
                    None => {
                        self.last_offset.insert(partition.to_string(), offset);
                        -1
                    }
                };
                if offset != last + 1 {
                    self.order_violations += 1;
                }
            }
        } else if d.attempt > 1 {
            self.redelivered += 1;
        } else {
            self.duplicates += 1;
        }
        fresh
    }

    /// Marks `seq`; true if it was new.
    fn mark(&mut self, seq: u64) -> bool {
        let (word, bit) = ((seq / 64) as usize, seq % 64);
        if word >= self.seen.len() {
            self.seen.resize(word + 1, 0);
        }
        let fresh = self.seen[word] & (1 << bit) == 0;
        self.seen[word] |= 1 << bit;
        fresh
    }
}

pub struct Tracker {
    groups: Vec<Mutex<GroupState>>,
    latency: Mutex<Histogram<u64>>,
    /// Deliveries of messages scheduled at or after this instant (µs) feed the histogram.
    window_start_us: AtomicI64,
}

/// Verdict per group after the drain.
#[derive(Debug, Clone, Serialize)]
pub struct Verification {
    pub expected: u64,
    pub delivered_unique: Vec<u64>,
    pub lost: u64,
    pub duplicates: u64,
    pub redelivered: u64,
    /// First deliveries whose offset was not the partition's previous one + 1.
    pub order_violations: u64,
    pub ok: bool,
}

impl Tracker {
    pub fn new(groups: usize) -> Self {
        Self {
            groups: (0..groups)
                .map(|_| Mutex::new(GroupState::default()))
                .collect(),
            latency: Mutex::new(new_histogram()),
            window_start_us: AtomicI64::new(i64::MAX),
        }
    }

    /// Opens the measured window: later-scheduled deliveries count towards latency.
    pub fn open_window(&self, from_us: i64) {
        self.window_start_us.store(from_us, Ordering::Relaxed);
    }

    /// Records one delivery to `group` of message `seq` scheduled at `sched_us`; `lane` is the
    /// (partitionId, offset) the broker reported, when it reports one. True for the message's
    /// first delivery to the group.
    pub fn record(
        &self,
        group: usize,
        seq: u64,
        attempt: u32,
        sched_us: i64,
        now_us: i64,
        lane: Option<(&str, i64)>,
    ) -> bool {
        let delivery = Delivery {
            seq,
            attempt,
            sched_us,
            lane,
        };
        let fresh = self.groups[group]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .deliver(&delivery);
        if fresh && sched_us >= self.window_start_us.load(Ordering::Relaxed) {
            let mut h = self.latency.lock().unwrap_or_else(|p| p.into_inner());
            let _ = h.record((now_us - sched_us).max(1) as u64);
        }
        fresh
    }

    /// Records the deliveries of one pop answer to `group`, received at `now_us`: the same as
    /// [`Tracker::record`] for each, taking each lock once per answer.
    pub fn record_all<'a>(
        &self,
        group: usize,
        now_us: i64,
        deliveries: impl IntoIterator<Item = Delivery<'a>>,
    ) {
        let window = self.window_start_us.load(Ordering::Relaxed);
        let mut latencies = Vec::new();
        {
            let mut g = self.groups[group].lock().unwrap_or_else(|p| p.into_inner());
            for d in deliveries {
                if g.deliver(&d) && d.sched_us >= window {
                    latencies.push((now_us - d.sched_us).max(1) as u64);
                }
            }
        }
        if !latencies.is_empty() {
            let mut h = self.latency.lock().unwrap_or_else(|p| p.into_inner());
            for l in latencies {
                let _ = h.record(l);
            }
        }
    }

    /// Whether a message scheduled at `sched_us` falls in the measured window.
    pub fn in_window(&self, sched_us: i64) -> bool {
        sched_us >= self.window_start_us.load(Ordering::Relaxed)
    }

    /// Unique deliveries per group so far.
    pub fn unique(&self) -> Vec<u64> {
        self.groups
            .iter()
            .map(|g| g.lock().unwrap_or_else(|p| p.into_inner()).unique)
            .collect()
    }

    pub fn latency(&self) -> Histogram<u64> {
        self.latency
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Every group must hold exactly the `expected` accepted messages, each once (a redelivery
    /// the broker labelled as such is allowed). More unique deliveries than accepted pushes
    /// (a push that failed on the wire but was stored) also fails the check.
    pub fn verify(&self, expected: u64) -> Verification {
        let mut v = Verification {
            expected,
            delivered_unique: Vec::new(),
            lost: 0,
            duplicates: 0,
            redelivered: 0,
            order_violations: 0,
            ok: true,
        };
        for g in &self.groups {
            let g = g.lock().unwrap_or_else(|p| p.into_inner());
            v.delivered_unique.push(g.unique);
            v.lost += expected.saturating_sub(g.unique);
            v.duplicates += g.duplicates;
            v.redelivered += g.redelivered;
            v.order_violations += g.order_violations;
            if g.unique != expected || g.duplicates > 0 || g.order_violations > 0 {
                v.ok = false;
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_duplicates_apart_from_redeliveries() {
        let t = Tracker::new(2);
        t.open_window(0);
        for seq in 0..100 {
            t.record(0, seq, 1, 10, 20, None);
        }
        t.record(0, 5, 2, 10, 20, None);
        assert!(t.verify(100).delivered_unique == vec![100, 0]);
        assert!(!t.verify(100).ok, "group 1 lost everything");
        for seq in 0..100 {
            t.record(1, seq, 1, 10, 20, None);
        }
        let v = t.verify(100);
        assert!(v.ok && v.redelivered == 1 && v.duplicates == 0, "{v:?}");
        t.record(1, 7, 1, 10, 20, None);
        assert!(
            !t.verify(100).ok,
            "an unlabelled second delivery is a duplicate"
        );
        assert_eq!(t.latency().len(), 200);
    }

    #[test]
    fn recording_a_whole_answer_counts_as_one_by_one() {
        // (seq, attempt, scheduled µs, lane): a labelled redelivery of 1, a gap on partition 1.
        let answer = [
            (0, 1, 5, ("1", 0)),
            (1, 1, 10, ("1", 1)),
            (2, 1, 15, ("2", 0)),
            (1, 2, 10, ("1", 1)),
            (4, 1, 20, ("1", 3)),
        ];
        let (one, all) = (Tracker::new(1), Tracker::new(1));
        one.open_window(10);
        all.open_window(10);
        for (seq, attempt, sched, lane) in answer {
            one.record(0, seq, attempt, sched, 30, Some(lane));
        }
        all.record_all(
            0,
            30,
            answer.map(|(seq, attempt, sched_us, lane)| Delivery {
                seq,
                attempt,
                sched_us,
                lane: Some(lane),
            }),
        );
        let (a, b) = (one.verify(4), all.verify(4));
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        assert_eq!((b.redelivered, b.order_violations), (1, 1), "{b:?}");
        assert_eq!(
            all.latency().len(),
            3,
            "fresh deliveries scheduled in the window"
        );
        assert_eq!(one.latency().len(), 3);
    }

    #[test]
    fn partition_offsets_must_arrive_in_order_without_gaps() {
        let t = Tracker::new(1);
        // Two partitions interleaved, each in order: fine.
        for (seq, (p, off)) in [("1", 0), ("2", 0), ("1", 1), ("2", 1)]
            .into_iter()
            .enumerate()
        {
            t.record(0, seq as u64, 1, 0, 1, Some((p, off)));
        }
        assert!(t.verify(4).ok);
        // Offset 3 before 2 on partition 1.
        t.record(0, 4, 1, 0, 1, Some(("1", 3)));
        t.record(0, 5, 1, 0, 1, Some(("1", 2)));
        let v = t.verify(6);
        assert_eq!(v.order_violations, 2, "{v:?}");
        assert!(!v.ok);
    }
}
