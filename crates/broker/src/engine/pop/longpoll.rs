//! Long-poll parking (docs/spec/life-of-a-pop.md Step 7; docs/wire.md §7.6): an empty `wait=true` pop
//! waits on a wake gate, holding no connection, until a wake, its backoff interval, its
//! deadline or the broker's shutdown, whichever comes first; and the deadline margin inside
//! which a waiting pop no longer starts a claim.

use std::time::Duration;

use tokio::sync::futures::Notified;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::accel::wake::{Gate, Parked};
use crate::config::Config;

/// A waiting pop starts no claim with less than this left before its deadline (docs/wire.md §7.6):
/// the claim, the frame walk and the answer's trip to the client must fit before the client
/// gives up, or the batch is leased to nobody until the lease expires. 50 ms covers a claim
/// and a loopback or LAN round trip with room to spare; a pop woken later answers 204 and the
/// client's next pop claims the same messages.
pub const CLAIM_MARGIN: Duration = Duration::from_millis(50);

/// The last instant at which a pop with this deadline may start a claim.
pub fn claim_cutoff(deadline: Instant) -> Instant {
    deadline.checked_sub(CLAIM_MARGIN).unwrap_or(deadline)
}

/// The re-check interval: `initial` for the first `threshold` attempts, then
/// `initial × attempt × multiplier` capped at `max`. A wake resets it. It is the correctness
/// floor for a lost wake.
pub struct Backoff {
    attempt: u32,
    initial: Duration,
    threshold: u32,
    multiplier: f64,
    max: Duration,
}

impl Backoff {
    pub fn new(cfg: &Config) -> Self {
        Backoff {
            attempt: 0,
            initial: Duration::from_millis(cfg.pop_wait_initial_ms.max(1)),
            threshold: cfg.pop_wait_backoff_threshold,
            multiplier: cfg.pop_wait_backoff_multiplier.max(0.0),
            max: Duration::from_millis(cfg.pop_wait_max_ms.max(1)),
        }
    }

    /// The interval of the next attempt (attempts count from 1).
    pub fn next_interval(&mut self) -> Duration {
        self.attempt = self.attempt.saturating_add(1);
        if self.attempt <= self.threshold {
            return self.initial.min(self.max);
        }
        let grown = self.initial.as_secs_f64() * f64::from(self.attempt) * self.multiplier;
        Duration::try_from_secs_f64(grown)
            .unwrap_or(self.max)
            .clamp(self.initial.min(self.max), self.max)
    }

    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// Why a parked pop woke up.
#[derive(Debug, PartialEq, Eq)]
pub enum Woke {
    /// The gate opened: something was pushed (or released) on the queue.
    Gate,
    /// The backoff interval elapsed.
    Interval,
    /// The deadline passed or the broker is shutting down: answer now.
    Done,
}

/// A gate armed before the caller's re-check, so a wake between check and park is not lost.
pub struct Armed<'a> {
    notified: std::pin::Pin<Box<Notified<'a>>>,
    /// The wait as counted on its wake gate, so a commit can wake it at once.
    _parked: Option<Parked<'a>>,
}

impl<'a> Armed<'a> {
    /// Arms `notified` (a bare `Notify`'s) at once.
    pub fn arm(notified: Notified<'a>) -> Self {
        let mut notified = Box::pin(notified);
        notified.as_mut().enable();
        Armed {
            notified,
            _parked: None,
        }
    }

    /// Arms a wait on a queue's wake gate at once, counted among its parked waits.
    pub fn on_gate(gate: &'a Gate) -> Self {
        let mut armed = Self::arm(gate.notified());
        armed._parked = Some(gate.parked());
        armed
    }

    /// Parks until the gate opens, `interval` passes, `deadline` passes or `closing` is set.
    pub async fn park(
        self,
        interval: Duration,
        deadline: Instant,
        closing: &mut watch::Receiver<bool>,
    ) -> Woke {
        let now = Instant::now();
        if now >= deadline || *closing.borrow() {
            return Woke::Done;
        }
        let until = on_grid(now, interval).min(deadline);
        tokio::select! {
            _ = self.notified => Woke::Gate,
            _ = tokio::time::sleep_until(until) => {
                if Instant::now() >= deadline { Woke::Done } else { Woke::Interval }
            }
            _ = closed(closing) => Woke::Done,
        }
    }
}

/// Interval re-checks land on a shared grid of this step, so one timer turn wakes every pop
/// due in it: 1 000 parked pops otherwise wake the runtime ~1 000 separate times a second.
const RECHECK_GRID: Duration = Duration::from_millis(25);

/// `now + interval` rounded down to the re-check grid (earlier, never later: the interval
/// is a bound on how late a lost wake is noticed), unless that leaves less than half of it.
fn on_grid(now: Instant, interval: Duration) -> Instant {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    let due = now + interval;
    let step = RECHECK_GRID.as_nanos();
    let since = due.saturating_duration_since(origin).as_nanos();
    let aligned = origin + Duration::from_nanos(u64::try_from(since / step * step).unwrap_or(0));
    if aligned < now + interval / 2 {
        due
    } else {
        aligned
    }
}

/// Resolves once the broker starts shutting down (never, if the sender is gone).
async fn closed(closing: &mut watch::Receiver<bool>) {
    if closing.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::sync::Notify;

    fn backoff() -> Backoff {
        Backoff {
            attempt: 0,
            initial: Duration::from_millis(100),
            threshold: 3,
            multiplier: 2.0,
            max: Duration::from_millis(1000),
        }
    }

    #[test]
    fn follows_the_spec_schedule_and_resets() {
        let mut b = backoff();
        let ms: Vec<u128> = (0..6).map(|_| b.next_interval().as_millis()).collect();
        assert_eq!(ms, vec![100, 100, 100, 800, 1000, 1000]);
        b.reset();
        assert_eq!(b.next_interval().as_millis(), 100);
    }

    #[test]
    fn recheck_instants_are_shared_and_never_late() {
        let interval = Duration::from_millis(1000);
        let base = Instant::now();
        let dues: Vec<Instant> = (0..40u64)
            .map(|ms| {
                let now = base + Duration::from_millis(ms);
                let due = on_grid(now, interval);
                assert!(due <= now + interval, "later than the interval");
                assert!(due >= now + interval / 2, "less than half of it");
                due
            })
            .collect();
        let mut distinct = dues.clone();
        distinct.dedup();
        // 40 pops parked a millisecond apart share at most two or three grid instants.
        assert!(distinct.len() <= 3, "{} distinct instants", distinct.len());
        // An interval shorter than the grid step is kept as asked.
        let now = base + Duration::from_millis(7);
        let short = Duration::from_millis(10);
        assert!(on_grid(now, short) >= now + short / 2);
    }

    #[tokio::test]
    async fn a_wake_between_arming_and_parking_is_kept() {
        let gate = Arc::new(Notify::new());
        let (_tx, mut closing) = watch::channel(false);
        let armed = Armed::arm(gate.notified());
        gate.notify_waiters();
        let woke = armed
            .park(
                Duration::from_secs(30),
                Instant::now() + Duration::from_secs(30),
                &mut closing,
            )
            .await;
        assert_eq!(woke, Woke::Gate);
    }

    #[tokio::test]
    async fn shutdown_and_deadline_end_the_wait() {
        let gate = Arc::new(Notify::new());
        let (tx, mut closing) = watch::channel(false);
        let far = Instant::now() + Duration::from_secs(30);
        let parked = tokio::spawn(async move {
            let armed = Armed::arm(gate.notified());
            armed.park(Duration::from_secs(30), far, &mut closing).await
        });
        tx.send_replace(true);
        assert_eq!(parked.await.expect("park task"), Woke::Done);
        let gate = Arc::new(Notify::new());
        let (_tx, mut closing) = watch::channel(false);
        let soon = Instant::now() + Duration::from_millis(20);
        assert_eq!(
            Armed::arm(gate.notified())
                .park(Duration::from_secs(5), soon, &mut closing)
                .await,
            Woke::Done
        );
    }
}
