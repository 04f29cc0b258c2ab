//! The open-loop load generator: sends are scheduled at a fixed rate independent of how fast
//! the system answers, latency is measured from each send's *scheduled* instant (so a stalled
//! server shows up as latency instead of silently lowering the offered load — coordinated
//! omission), and at most `inflight` requests are outstanding: a slot that comes due while the
//! cap is full is shed and counted, never queued. For a fixed amount of work (the first push
//! into new partitions) `run_count` is the closed-loop variant: `count` requests, each started
//! as soon as a slot frees.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

/// Latency histogram in microseconds, 3 significant digits, up to one hour.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("static histogram bounds are valid")
}

/// One open-loop run.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// Requests per second; `None` saturates: a new request starts whenever a slot frees.
    pub rate: Option<f64>,
    pub duration: Duration,
    pub inflight: usize,
}

/// What a run did. `ok` and `errors` count finished requests; `shed` slots never sent.
#[derive(Debug)]
pub struct LoadStats {
    pub scheduled: u64,
    pub shed: u64,
    pub ok: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub latency_us: Histogram<u64>,
    pub elapsed: Duration,
}

/// What finished requests add up to, shared by the request tasks.
struct Shared {
    ok: u64,
    errors: u64,
    first_error: Option<String>,
    hist: Histogram<u64>,
}

impl Shared {
    fn new() -> Arc<Mutex<Self>> {
        Arc::new(Mutex::new(Self {
            ok: 0,
            errors: 0,
            first_error: None,
            hist: new_histogram(),
        }))
    }
}

/// Spawns one request: its latency runs from `due`, and its permit is released when it ends.
fn launch<Fut>(
    fut: Fut,
    due: Instant,
    permit: OwnedSemaphorePermit,
    shared: &Arc<Mutex<Shared>>,
    tasks: &mut JoinSet<()>,
) where
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    let shared = shared.clone();
    tasks.spawn(async move {
        let result = fut.await;
        let latency = due.elapsed().as_micros().max(1) as u64;
        drop(permit);
        let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(()) => {
                s.ok += 1;
                let _ = s.hist.record(latency);
            }
            Err(e) => {
                s.errors += 1;
                s.first_error.get_or_insert(e);
            }
        }
    });
}

/// Waits for every started request and sums them up.
async fn finish(
    mut tasks: JoinSet<()>,
    shared: Arc<Mutex<Shared>>,
    start: Instant,
    scheduled: u64,
    shed: u64,
) -> LoadStats {
    while tasks.join_next().await.is_some() {}
    let elapsed = start.elapsed();
    let mut guard = shared.lock().unwrap_or_else(|p| p.into_inner());
    let s = std::mem::replace(
        &mut *guard,
        Shared {
            ok: 0,
            errors: 0,
            first_error: None,
            hist: new_histogram(),
        },
    );
    LoadStats {
        scheduled,
        shed,
        ok: s.ok,
        errors: s.errors,
        first_error: s.first_error,
        latency_us: s.hist,
        elapsed,
    }
}

/// Runs `send(slot, scheduled_instant)` on the schedule and waits for every started request.
/// `send` returns `Err(text)` for a failed request.
pub async fn run<F, Fut>(schedule: Schedule, mut send: F) -> LoadStats
where
    F: FnMut(u64, Instant) -> Fut,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(schedule.inflight.max(1)));
    let shared = Shared::new();
    let mut tasks = JoinSet::new();
    let start = Instant::now();
    let end = start + schedule.duration;
    let mut slot: u64 = 0;
    let mut shed: u64 = 0;
    // One timer for the whole run, re-armed per slot: a new timer per request costs the
    // instrument a registration in tokio's timer wheel each time.
    let timer = tokio::time::sleep_until(end.into());
    tokio::pin!(timer);
    match schedule.rate {
        None => loop {
            let permit = tokio::select! {
                p = permits.clone().acquire_owned() => p.expect("semaphore never closed"),
                _ = &mut timer => break,
            };
            let now = Instant::now();
            if now >= end {
                break;
            }
            launch(send(slot, now), now, permit, &shared, &mut tasks);
            slot += 1;
            while tasks.try_join_next().is_some() {}
        },
        Some(rate) => {
            let interval = Duration::from_secs_f64(1.0 / rate.max(1e-6));
            loop {
                let due = start + interval.mul_f64(slot as f64);
                if due >= end {
                    break;
                }
                if due > Instant::now() {
                    timer.as_mut().reset(due.into());
                    (&mut timer).await;
                }
                match permits.clone().try_acquire_owned() {
                    Ok(permit) => launch(send(slot, due), due, permit, &shared, &mut tasks),
                    Err(_) => shed += 1,
                }
                slot += 1;
                while tasks.try_join_next().is_some() {}
            }
        }
    }
    finish(tasks, shared, start, slot, shed).await
}

/// Closed loop over a fixed amount of work: `send(0..count)`, each started as soon as one of
/// `inflight` slots frees (latency from that start), none shed.
pub async fn run_count<F, Fut>(count: u64, inflight: usize, mut send: F) -> LoadStats
where
    F: FnMut(u64, Instant) -> Fut,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(inflight.max(1)));
    let shared = Shared::new();
    let mut tasks = JoinSet::new();
    let start = Instant::now();
    for slot in 0..count {
        let permit = permits
            .clone()
            .acquire_owned()
            .await
            .expect("semaphore never closed");
        let now = Instant::now();
        launch(send(slot, now), now, permit, &shared, &mut tasks);
        while tasks.try_join_next().is_some() {}
    }
    finish(tasks, shared, start, count, 0).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_slow_server_sheds_and_shows_latency_from_the_schedule() {
        // 200 req/s for 0.5 s with 2 in flight and a 50 ms server: at most ~40 can finish.
        let schedule = Schedule {
            rate: Some(200.0),
            duration: Duration::from_millis(500),
            inflight: 2,
        };
        let stats = run(schedule, |_, _| async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok(())
        })
        .await;
        assert_eq!(stats.scheduled, 100);
        assert!(stats.shed > 50, "{stats:?}");
        assert_eq!(stats.ok + stats.shed, stats.scheduled);
        assert!(stats.latency_us.min() >= 50_000);
    }

    #[tokio::test]
    async fn errors_are_counted_not_recorded() {
        let schedule = Schedule {
            rate: Some(100.0),
            duration: Duration::from_millis(100),
            inflight: 8,
        };
        let stats = run(schedule, |slot, _| async move {
            if slot % 2 == 0 {
                Err(format!("slot {slot}"))
            } else {
                Ok(())
            }
        })
        .await;
        assert_eq!(stats.errors, 5);
        assert_eq!(stats.ok, 5);
        assert_eq!(stats.latency_us.len(), 5);
        assert_eq!(stats.first_error.as_deref(), Some("slot 0"));
    }

    #[tokio::test]
    async fn a_fixed_count_runs_every_request_within_the_cap() {
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let stats = run_count(20, 3, |slot, _| {
            let (running, most) = (running.clone(), most.clone());
            async move {
                use std::sync::atomic::Ordering::SeqCst;
                let now = running.fetch_add(1, SeqCst) + 1;
                most.fetch_max(now, SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
                running.fetch_sub(1, SeqCst);
                if slot == 7 {
                    Err("slot 7".into())
                } else {
                    Ok(())
                }
            }
        })
        .await;
        assert_eq!(
            (stats.scheduled, stats.ok, stats.errors, stats.shed),
            (20, 19, 1, 0)
        );
        assert_eq!(stats.latency_us.len(), 19);
        assert!(most.load(std::sync::atomic::Ordering::SeqCst) <= 3);
    }
}
