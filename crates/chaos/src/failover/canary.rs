//! How soon the brokers store pushes again after a failover (issue 38: the first successful
//! push within 1 s of the new primary accepting writes). A canary writes straight to the
//! formation every [`TICK`] (multi-host URL, `target_session_attrs=read-write`): the first write
//! it gets through after failing is the moment a new primary accepts writes. Beside it, one
//! probe per broker pushes one message at a time to a queue of its own (no consumer reads it,
//! the checker ignores it) and records when each push was answered and how. For every outage
//! the canary saw and every broker that can reach the new primary (the pinned broker only when
//! the new primary is its node), the delay is the first push answered `queued` at or after
//! the canary's first write, minus that moment.

use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::task::JoinHandle;

use serde_json::{json, Value};

use crate::history::Micros;
use crate::workload::Ctx;

use super::{Ha, SLOTS};

/// The canary's and the probes' pace.
const TICK: Duration = Duration::from_millis(50);
/// The probes' queue (its partitions are `b<slot>`).
pub const PROBE_QUEUE: &str = "chaos-probe";
/// The target.
const WITHIN_US: Micros = 1_000_000;

#[derive(Debug, Clone, Copy)]
struct Write1 {
    at: Micros,
    /// The port of the server that took the write; `None`: the write failed.
    port: Option<u16>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Queued,
    Buffered,
    /// Another status, an error answer or none at all (0: the broker did not answer).
    Other(u16),
}

#[derive(Debug, Clone, Copy)]
struct Probe {
    slot: usize,
    answered: Micros,
    answer: Answer,
}

/// Creates the canary's table and starts the canary and one probe per broker; they stop when
/// the run's faults are done.
pub async fn spawn(ctx: &Arc<Ctx>, ha: &Arc<Ha>) -> Result<Vec<JoinHandle<()>>> {
    let pg = ctx.cluster.connect().await?;
    pg.batch_execute("CREATE TABLE IF NOT EXISTS public.chaos_canary (at timestamptz NOT NULL)")
        .await
        .context("creating the canary's table")?;
    let mut tasks = Vec::new();
    let (c, h) = (ctx.clone(), ha.clone());
    tasks.push(tokio::spawn(async move { h.canary.write_loop(&c).await }));
    for slot in 0..SLOTS {
        let (c, h) = (ctx.clone(), ha.clone());
        tasks.push(tokio::spawn(
            async move { h.canary.probe_loop(&c, slot).await },
        ));
    }
    Ok(tasks)
}

#[derive(Default)]
pub struct Canary {
    writes: Mutex<Vec<Write1>>,
    probes: Mutex<Vec<Probe>>,
}

impl Canary {
    /// Writes to the formation every tick until the run's faults are done.
    pub async fn write_loop(&self, ctx: &Ctx) {
        let mut client: Option<tokio_postgres::Client> = None;
        while !ctx.faults_done.load(std::sync::atomic::Ordering::Relaxed) {
            if client.as_ref().is_none_or(|c| c.is_closed()) {
                client = ctx.cluster.connect().await.ok();
            }
            let port = match &client {
                Some(c) => c
                    .query_one(
                        "INSERT INTO public.chaos_canary (at) VALUES (now()) \
                         RETURNING inet_server_port()",
                        &[],
                    )
                    .await
                    .ok()
                    .map(|r| r.get::<_, i32>(0) as u16),
                None => None,
            };
            if port.is_none() {
                client = None;
            }
            let at = ctx.now();
            self.writes.lock().unwrap().push(Write1 { at, port });
            tokio::time::sleep(TICK).await;
        }
    }

    /// Pushes to broker `slot` every tick until the run's faults are done.
    pub async fn probe_loop(&self, ctx: &Ctx, slot: usize) {
        let mut n = 0u64;
        while !ctx.faults_done.load(std::sync::atomic::Ordering::Relaxed) {
            n += 1;
            let body = json!({ "items": [{ "queue": PROBE_QUEUE, "partition": format!("b{slot}"),
                "transactionId": format!("probe-{slot}-{n}"), "payload": { "n": n } }] });
            let url = format!("{}/api/v1/push", ctx.cluster.url(slot));
            let answer = match ctx.http.post(url).json(&body).send().await {
                Ok(r) if r.status().as_u16() == 201 => match r.json::<Value>().await {
                    Ok(v) if v[0]["status"] == "queued" => Answer::Queued,
                    Ok(v) if v[0]["status"] == "buffered" => Answer::Buffered,
                    _ => Answer::Other(201),
                },
                Ok(r) => Answer::Other(r.status().as_u16()),
                Err(_) => Answer::Other(0),
            };
            let answered = ctx.now();
            self.probes.lock().unwrap().push(Probe {
                slot,
                answered,
                answer,
            });
            tokio::time::sleep(TICK).await;
        }
    }

    /// The report's lines: outages the canary saw, and the delays.
    pub fn render(&self, pinned_slot: usize, pinned_port: u16, slots: usize) -> String {
        let writes = self.writes.lock().unwrap().clone();
        let probes = self.probes.lock().unwrap().clone();
        let outages = outages(&writes);
        let mut delays = Vec::new();
        // (delay, broker, when writes resumed) of every delay past the target.
        let mut slow = Vec::new();
        let (mut missed, mut restarting) = (0, 0);
        for (k, o) in outages.iter().enumerate() {
            let horizon = outages.get(k + 1).map_or(Micros::MAX, |n| n.down);
            for slot in 0..slots {
                if slot == pinned_slot && o.port != pinned_port {
                    continue; // the pinned broker cannot reach this primary
                }
                match first_stored(&probes, slot, o.up, horizon) {
                    Delay::Stored(at) => {
                        delays.push(at - o.up);
                        if at - o.up > WITHIN_US {
                            slow.push((at - o.up, slot, o.up));
                        }
                    }
                    Delay::Restarting => restarting += 1,
                    Delay::Missed => missed += 1,
                }
            }
        }
        delays.sort_unstable();
        let moved = outages.iter().filter(|o| o.before != Some(o.port)).count();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\nfailover (canary writing straight to the formation):"
        );
        let row = |out: &mut String, k: &str, v: String| {
            let _ = writeln!(out, "  {k:<46} {v:>12}");
        };
        row(
            &mut out,
            "outages seen by the canary",
            outages.len().to_string(),
        );
        row(
            &mut out,
            "  failovers (writes resumed on another node)",
            moved.to_string(),
        );
        row(
            &mut out,
            "  longest (ms)",
            outages
                .iter()
                .map(|o| (o.up - o.down) / 1000)
                .max()
                .unwrap_or(0)
                .to_string(),
        );
        let pct = |p: f64| -> String {
            if delays.is_empty() {
                return "-".into();
            }
            let i = ((delays.len() as f64 * p).ceil() as usize).clamp(1, delays.len()) - 1;
            format!("{}", delays[i] / 1000)
        };
        row(
            &mut out,
            "first stored push after writes resume",
            format!("{} (outage, broker)", delays.len()),
        );
        row(&mut out, "  p50 (ms)", pct(0.50));
        row(&mut out, "  p99 (ms)", pct(0.99));
        row(
            &mut out,
            "  max (ms)",
            delays.last().map_or("-".into(), |d| (d / 1000).to_string()),
        );
        row(
            &mut out,
            "  within 1 s",
            format!(
                "{}/{}",
                delays.iter().filter(|&&d| d <= WITHIN_US).count(),
                delays.len()
            ),
        );
        row(
            &mut out,
            "  none before the next outage",
            missed.to_string(),
        );
        row(
            &mut out,
            "  broker restarting (not counted)",
            restarting.to_string(),
        );
        for (delay, slot, up) in slow {
            let _ = writeln!(
                out,
                "  over 1 s: broker {slot}, {} ms after writes resumed at {:.1} s",
                delay / 1000,
                up as f64 / 1e6
            );
        }
        out
    }
}

#[derive(Debug, Clone, Copy)]
struct Outage {
    down: Micros,
    up: Micros,
    /// The port of the server that took the last write before it (none at the start).
    before: Option<u16>,
    /// The port of the server that took the first write after it.
    port: u16,
}

/// Runs of failed canary writes, each with the first write that got through after it.
fn outages(writes: &[Write1]) -> Vec<Outage> {
    let mut out = Vec::new();
    let mut down = None;
    let mut before = None;
    for w in writes {
        match (w.port, down) {
            (None, None) => down = Some(w.at),
            (Some(port), Some(d)) => {
                out.push(Outage {
                    down: d,
                    up: w.at,
                    before,
                    port,
                });
                down = None;
            }
            _ => {}
        }
        if w.port.is_some() {
            before = w.port;
        }
    }
    out
}

enum Delay {
    Stored(Micros),
    /// The broker did not answer (killed, restarting) before it stored one.
    Restarting,
    Missed,
}

/// The first probe of `slot` answered `queued` in `[from, horizon)`.
fn first_stored(probes: &[Probe], slot: usize, from: Micros, horizon: Micros) -> Delay {
    for p in probes
        .iter()
        .filter(|p| p.slot == slot && p.answered >= from && p.answered < horizon)
    {
        match p.answer {
            Answer::Queued => return Delay::Stored(p.answered),
            Answer::Other(0) => return Delay::Restarting,
            _ => {}
        }
    }
    Delay::Missed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(at: Micros, port: Option<u16>) -> Write1 {
        Write1 { at, port }
    }

    #[test]
    fn an_outage_runs_from_the_first_failed_write_to_the_next_good_one() {
        let writes = [
            w(0, Some(1)),
            w(10, None),
            w(20, None),
            w(30, Some(2)),
            w(40, Some(2)),
            w(50, None),
            w(60, Some(2)),
        ];
        let o = outages(&writes);
        assert_eq!(o.len(), 2);
        assert_eq!(
            (o[0].down, o[0].up, o[0].before, o[0].port),
            (10, 30, Some(1), 2)
        );
        assert_eq!(
            (o[1].down, o[1].up, o[1].before, o[1].port),
            (50, 60, Some(2), 2)
        );
    }

    #[test]
    fn the_delay_is_the_first_queued_answer_from_the_resumption_on() {
        let p = |slot, answered, answer| Probe {
            slot,
            answered,
            answer,
        };
        let probes = [
            p(0, 5, Answer::Queued),
            p(0, 12, Answer::Buffered),
            p(1, 14, Answer::Other(0)),
            p(0, 15, Answer::Other(503)),
            p(0, 18, Answer::Queued),
            p(1, 19, Answer::Queued),
        ];
        assert!(matches!(
            first_stored(&probes, 0, 10, 100),
            Delay::Stored(18)
        ));
        assert!(matches!(
            first_stored(&probes, 1, 10, 100),
            Delay::Restarting
        ));
        assert!(matches!(first_stored(&probes, 0, 10, 17), Delay::Missed));
    }
}
