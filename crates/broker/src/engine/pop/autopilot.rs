//! The pop autopilot (docs/engine.md §5.7, docs/wire.md §7.4, `QUEEN_POP_AUTOPILOT`): a pop that
//! sends `autopilot=true` leaves the knobs it did not set (`partitions`, `batch`) to the broker.
//! A wildcard pop served by the hot-list sizes them from its ring: its fair share of the
//! partitions READY there (divided by the ring's recent consumers), and a batch big enough to
//! take a few messages from each, so one pop drains many shallow partitions where a
//! one-partition pop would carry two messages. Every other autopilot pop (targeted, discovery,
//! the SQL candidate path) keeps the broker defaults. Either way the answer echoes the sizes
//! used; with `QUEEN_POP_AUTOPILOT=false` the flag is read and ignored, and nothing is echoed.
//!
//! Per-partition order and one lease per partition are untouched: sizing only chooses how many
//! partitions one claim may take and its global budget; the claim itself is the same SQL.

use crate::accel::hotlist::Seat;
use crate::engine::pop::request::{Ask, PopRequest, PopShape};
use crate::engine::pop::state::PopState;

/// `batch` when the pop sets none (docs/wire.md §7.2).
pub const DEFAULT_BATCH: i32 = 200;
/// `partitions` when the pop sets none.
pub const DEFAULT_PARTITIONS: i32 = 1;
/// Largest `partitions` honoured (the SQL candidate cap); larger requests are clamped.
pub const MAX_PARTITIONS: i32 = 512;
/// Messages budgeted per partition when the autopilot sizes a many-partition batch: enough
/// for the shallow partitions that make many-partition queues slow, without letting one deep
/// partition take a huge answer (the budget is global, spent in claim order).
const PER_PARTITION: i32 = 4;

/// The sizes one claim used: echoed as `"autopilot": {"partitions", "batch", "waitMs"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizing {
    pub partitions: i32,
    pub batch: i32,
    /// Advised pause between empty non-waiting pops. An echo rides only on an answer that
    /// delivered, when no pause is due: always 0.
    pub wait_ms: u64,
}

impl Sizing {
    /// The request's own values (its settings or the broker defaults).
    pub fn of(batch: i32, partitions: i32) -> Self {
        Sizing {
            partitions,
            batch,
            wait_ms: 0,
        }
    }

    /// Sizes the knobs `ask` leaves to the broker from a ring holding `ready` partitions shared
    /// by `consumers` pops: each takes its share of the ready partitions, at most `cap`; an
    /// unset batch covers [`PER_PARTITION`] messages of each, never below the default.
    pub fn sized(self, ask: Ask, ready: usize, consumers: usize, cap: i32) -> Self {
        let mut s = self;
        if ask.partitions {
            let share = ready.div_ceil(consumers.max(1));
            s.partitions = i32::try_from(share)
                .unwrap_or(i32::MAX)
                .clamp(1, cap.max(1));
        }
        if ask.batch {
            s.batch = s
                .partitions
                .saturating_mul(PER_PARTITION)
                .max(DEFAULT_BATCH);
        }
        s
    }
}

/// What the autopilot knows of one pop, for all its attempts.
pub struct Pilot {
    /// The knobs to size: `None` when the pop did not ask or the autopilot is off.
    ask: Option<Ask>,
    /// The pop counted among its ring's consumers (wildcard pops with the hot-list on).
    seat: Option<Seat>,
    cap: i32,
}

impl Pilot {
    pub fn new(st: &PopState, req: &PopRequest) -> Self {
        let on = st.cfg.pop_autopilot;
        let seat = match &req.shape {
            PopShape::Wildcard { queue } if on && st.cfg.hotlist => {
                Some(st.hotlist.seat(queue, &req.group))
            }
            _ => None,
        };
        Pilot {
            ask: req.autopilot.filter(|_| on),
            seat,
            cap: st.cfg.pop_autopilot_max_partitions.min(MAX_PARTITIONS),
        }
    }

    /// The sizes of a claim from a ring whose READY partitions `ready` counts; `base` (the
    /// request's values) when the pop did not ask or no ring serves it.
    pub fn size(&self, base: Sizing, ready: impl FnOnce() -> usize) -> Sizing {
        match (self.ask, &self.seat) {
            (Some(ask), Some(seat)) => base.sized(ask, ready(), seat.consumers(), self.cap),
            _ => base,
        }
    }

    /// Whether the answer echoes the sizes it used.
    pub fn echo(&self) -> bool {
        self.ask.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH: Ask = Ask {
        batch: true,
        partitions: true,
    };

    #[test]
    fn shallow_many_partition_rings_get_wide_pops() {
        let base = Sizing::of(DEFAULT_BATCH, DEFAULT_PARTITIONS);
        let s = base.sized(BOTH, 10_000, 10, 256);
        assert_eq!((s.partitions, s.batch, s.wait_ms), (256, 1024, 0));
        let s = base.sized(BOTH, 1_000, 10, 256);
        assert_eq!((s.partitions, s.batch), (100, 400));
    }

    #[test]
    fn few_partitions_keep_the_defaults() {
        let base = Sizing::of(DEFAULT_BATCH, DEFAULT_PARTITIONS);
        assert_eq!(base.sized(BOTH, 10, 10, 256), base, "one each");
        assert_eq!(base.sized(BOTH, 0, 3, 256), base, "nothing known: one");
        assert_eq!(
            base.sized(BOTH, 7, 0, 256).partitions,
            7,
            "no consumer = one"
        );
        assert_eq!(base.sized(BOTH, 5, 2, 256).partitions, 3, "rounded up");
    }

    #[test]
    fn only_unset_knobs_are_sized() {
        let set = Sizing::of(10, 3);
        let only_batch = Ask {
            batch: true,
            partitions: false,
        };
        assert_eq!(set.sized(only_batch, 10_000, 1, 256), Sizing::of(200, 3));
        let only_partitions = Ask {
            batch: false,
            partitions: true,
        };
        assert_eq!(set.sized(only_partitions, 50, 1, 256), Sizing::of(10, 50));
        let none = Ask {
            batch: false,
            partitions: false,
        };
        assert_eq!(set.sized(none, 10_000, 1, 256), set);
    }
}
