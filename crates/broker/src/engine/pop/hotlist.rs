//! The hot-list serve path of a wildcard pop (docs/engine.md §5.1 step 3, §5.2, §7): the ring
//! of (queue, group) is asked first, in memory. Nothing ready answers at once: no permit, no
//! connection, no statement, which is what makes a parked long-poll free. Only a ring with
//! work (or one due a reseed) takes a pop permit and then a connection, claims the ring's
//! candidates with `log_pop_list_v1` and reports each candidate's verdict back to the ring.
//! When the first candidate is all the claim may deliver from (a pop of one partition, or a
//! lone candidate) and its id is known, it is claimed by id first (`log_pop_claim_v1`, a third
//! of the backend time): the list claim then runs only for the rest, if that claim took
//! nothing, or for all of them, if the id no longer names the partition.
//!
//! The reseed (`log_hotlist_reseed_v1`) is the backstop: it fills a cold ring (which also
//! registers the group on first contact, with its bulk seed), a ring something unnameable
//! touched, and every ring on the `QUEEN_HOTLIST_RESEED_MS` floor; one pop per ring runs it
//! while the others wait for it, so its cost is per ring, not per pop.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::Object;
use tokio::time::Instant;

use crate::accel::admission::Permit;
use crate::accel::hotlist::{candidates_for, Next, ReseedGuard, Verdict, RESEED_PAGE};
use crate::engine::pop::admit::{admit, pop_failed, Claimed};
use crate::engine::pop::autopilot::{Pilot, Sizing};
use crate::engine::pop::state::PopState;
use crate::error::Result;
use crate::store::hotlist as store;
use crate::store::pop::{self as sql, ClaimArgs, ListVerdict, PopAnswer};

/// One claim of a wildcard pop through its ring, started only before `start_by`. The
/// autopilot (`pilot`) sizes the claim from the ring as it stands before each poll; `sizing`
/// ends as the sizes the claim used.
pub(super) async fn claim(
    st: &PopState,
    queue: &str,
    args: &ClaimArgs<'_>,
    pilot: &Pilot,
    sizing: &mut Sizing,
    start_by: Instant,
) -> Result<Claimed> {
    let asked = *sizing;
    // A permit and a connection, once taken, serve the reseed and the claim after it.
    let mut held: Option<(Permit, Object)> = None;
    loop {
        let ring = st.hotlist.ring(queue, args.group);
        *sizing = pilot.size(asked, || ring.ready());
        let args = &ClaimArgs {
            budget: sizing.batch,
            max_partitions: sizing.partitions,
            ..*args
        };
        let k = candidates_for(args.max_partitions);
        let settled = ring.settled();
        tokio::pin!(settled);
        settled.as_mut().enable();
        match st.hotlist.poll(&ring, k) {
            Next::Empty => return Ok(Claimed::Nothing),
            Next::Busy => {
                // Another pop's claim or reseed of this ring is in flight: wait for its report,
                // holding nothing.
                held = None;
                if tokio::time::timeout_at(start_by, settled).await.is_err() {
                    return Ok(Claimed::OutOfTime);
                }
            }
            Next::Reseed(guard) => {
                if held.is_none() {
                    held = admit(st, start_by).await?;
                }
                let Some((_, conn)) = &held else {
                    return Ok(Claimed::OutOfTime);
                };
                reseed(conn, queue, args, guard).await?;
            }
            Next::Claim(candidates) => {
                if held.is_none() {
                    held = admit(st, start_by).await?;
                }
                let Some((_, conn)) = &held else {
                    return Ok(Claimed::OutOfTime);
                };
                let (answer, found) =
                    claim_candidates(st, conn, queue, &candidates.names(), args).await?;
                candidates.check_in(&found);
                return Ok(Claimed::Answer(answer));
            }
        }
    }
}

/// Claims `names` in order (see the module doc for the by-id shortcut) and reads the verdicts.
async fn claim_candidates(
    st: &PopState,
    conn: &Object,
    queue: &str,
    names: &[String],
    args: &ClaimArgs<'_>,
) -> Result<(PopAnswer, HashMap<String, Verdict>)> {
    let mut found = HashMap::new();
    let mut rest = names;
    let alone = args.max_partitions <= 1 || names.len() == 1;
    if let (Some(first), true) = (names.first(), alone) {
        if let Some(pid) = st.hotlist.partition_id(queue, first) {
            let claimed = sql::pop_by_id(conn, pid, queue, first, args)
                .await
                .map_err(pop_failed)?;
            if let Some((answer, verdict)) = claimed {
                st.store.charge(conn, answer.load());
                found = verdicts(&answer, &[verdict], args, &names[..1]);
                if !answer.partitions.is_empty() || names.len() == 1 {
                    return Ok((answer, found));
                }
                rest = &names[1..];
            }
        }
    }
    let (answer, states) = sql::pop_list(conn, queue, rest, args)
        .await
        .map_err(pop_failed)?;
    st.store.charge(conn, answer.load());
    found.extend(verdicts(&answer, &states, args, rest));
    Ok((answer, found))
}

/// Reads one reseed page into the ring (a failure leaves the guard to mark it failed).
async fn reseed(
    conn: &Object,
    queue: &str,
    args: &ClaimArgs<'_>,
    guard: ReseedGuard,
) -> Result<()> {
    let page = store::reseed(
        conn,
        queue,
        args.group,
        (args.sub_mode, args.sub_from),
        guard.after_id,
        RESEED_PAGE,
    )
    .await
    .map_err(pop_failed)?;
    let rows = page
        .rows
        .into_iter()
        .map(|(id, name, until)| (id, name, until.map(instant_of)))
        .collect();
    guard.finish(page.registered, rows);
    Ok(())
}

/// The ring's reading of `log_pop_list_v1`'s verdicts on the `candidates` it was given. A
/// candidate without a verdict was not evaluated (the budget or the partition cap ended the
/// claim first) or is no partition of the queue (deleted): the second when the claim ended
/// with budget and partitions to spare. A state this broker does not know keeps the
/// candidate in the ring, as a row that was only locked does.
fn verdicts(
    answer: &PopAnswer,
    states: &[ListVerdict],
    args: &ClaimArgs<'_>,
    candidates: &[String],
) -> HashMap<String, Verdict> {
    let until = |v: &ListVerdict| v.until.map_or_else(Instant::now, instant_of);
    let mut verdicts: HashMap<String, Verdict> = states
        .iter()
        .map(|v| {
            let verdict = match v.state.as_str() {
                "took" => Verdict::Took {
                    lease_until: (!args.auto_ack).then(|| until(v)),
                    more_behind: more_behind(answer, v),
                },
                "empty" => Verdict::Empty,
                "leased" => Verdict::Leased { until: until(v) },
                _ => Verdict::Leased {
                    until: Instant::now(),
                },
            };
            (v.partition.clone(), verdict)
        })
        .collect();
    let taken: i64 = answer
        .partitions
        .iter()
        .flat_map(|p| &p.segments)
        .map(|s| i64::from(s.take))
        .sum();
    let cut_short = taken >= i64::from(args.budget)
        || answer.partitions.len() >= usize::try_from(args.max_partitions.max(1)).unwrap_or(1);
    if !cut_short {
        for name in candidates {
            verdicts.entry(name.clone()).or_insert(Verdict::Gone);
        }
    }
    verdicts
}

/// Whether the partition held more than the answer took from it (unknown counts as more).
fn more_behind(answer: &PopAnswer, v: &ListVerdict) -> bool {
    let last_taken = answer
        .partitions
        .iter()
        .filter(|p| p.partition == v.partition)
        .flat_map(|p| &p.segments)
        .map(|s| s.base + i64::from(s.start_idx) + i64::from(s.take) - 1)
        .max();
    match (v.last_offset, last_taken) {
        (Some(last), Some(taken)) => last > taken,
        _ => true,
    }
}

/// The broker's instant for a database timestamp (the clocks are taken to agree; the ring
/// adds slack to every horizon).
fn instant_of(t: DateTime<Utc>) -> Instant {
    let ahead = (t - Utc::now()).to_std().unwrap_or_default();
    Instant::now() + ahead
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::pop::{ClaimedPartition, ClaimedSegment};

    fn verdict(p: &str, s: &str, until: Option<&str>, last: Option<i64>) -> ListVerdict {
        ListVerdict {
            partition: p.into(),
            state: s.into(),
            until: until.and_then(queen_proto::time::parse_iso),
            last_offset: last,
        }
    }

    fn args(budget: i32, auto_ack: bool) -> ClaimArgs<'static> {
        ClaimArgs {
            group: "g",
            budget,
            lease_seconds: None,
            lease_id: "l",
            auto_ack,
            max_partitions: 5,
            sub_mode: "all",
            sub_from: "",
        }
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn verdicts_say_whether_a_claim_drained_its_partition() {
        let answer = PopAnswer {
            partitions: vec![ClaimedPartition {
                partition: "a".into(),
                partition_id: 1,
                queue: "q".into(),
                delivery_attempt: 1,
                lease_expires_at: None,
                segments: vec![ClaimedSegment {
                    base: 10,
                    start_idx: 2,
                    take: 3,
                    msg_count: 8,
                    created_at: 0,
                }],
            }],
            min_pop_wait_ms: None,
            blobs: Vec::new(),
        };
        let later = (Utc::now() + chrono::Duration::seconds(60)).to_rfc3339();
        let states = [
            verdict("a", "took", None, Some(14)),
            verdict("b", "leased", Some(&later), Some(3)),
            verdict("c", "empty", None, Some(0)),
            verdict("e", "mystery", None, None),
        ];
        let all = names(&["a", "b", "c", "d", "e"]);
        let v = verdicts(&answer, &states, &args(10, true), &all);
        assert_eq!(
            v["a"],
            Verdict::Took {
                lease_until: None,
                more_behind: false
            },
            "offsets 12..=14 taken, 14 the last"
        );
        let Verdict::Leased { until } = v["b"] else {
            panic!("{:?}", v["b"]);
        };
        assert!(until > Instant::now() + std::time::Duration::from_secs(50));
        assert_eq!(v["c"], Verdict::Empty);
        assert_eq!(
            v["d"],
            Verdict::Gone,
            "budget left over: a name without a verdict is no partition"
        );
        assert!(
            matches!(v["e"], Verdict::Leased { until } if until <= Instant::now()),
            "an unknown state keeps the candidate"
        );
        let v = verdicts(&answer, &states, &args(3, true), &all);
        assert!(
            !v.contains_key("d"),
            "the budget ended the claim: the rest was not evaluated"
        );
        let states = [verdict("a", "took", Some(&later), Some(20))];
        let Verdict::Took {
            lease_until: Some(_),
            more_behind: true,
        } = verdicts(&answer, &states, &args(3, false), &all)["a"]
        else {
            panic!("a leased take with more behind");
        };
    }
}
