//! The consume loop: parallel long-polling pop loops that hand messages to a handler, ack
//! what it returns (completed on `Ok`, failed with the error text on `Err`), renew leases
//! while a handler runs, and stop on a limit, on idleness or on a [`StopHandle`] — after the
//! batches in hand are handled and acked.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::{AckItem, AckStatus, Error, Message, QueueRef, Result};

/// How the loop runs. `Default`: one pop loop, auto-ack, no limit, no idle stop, no renewal.
#[derive(Debug, Clone)]
pub struct ConsumeOptions {
    /// Pop loops running at once (each handles its own batches in order).
    pub concurrency: usize,
    /// Who acks: the loop (from the handler's result) or the handler itself.
    pub ack: AckMode,
    /// Stop after this many messages were handed to the handler.
    pub limit: Option<u64>,
    /// Stop after this long without a message.
    pub idle: Option<Duration>,
    /// While a handler runs, extend its lease this often (by `renew_seconds`).
    pub renew_every: Option<Duration>,
    /// How far each renewal extends the lease.
    pub renew_seconds: u32,
    /// The longest single long-poll.
    pub poll: Duration,
}

impl Default for ConsumeOptions {
    fn default() -> Self {
        Self {
            concurrency: 1,
            ack: AckMode::Auto,
            limit: None,
            idle: None,
            renew_every: None,
            renew_seconds: 60,
            poll: Duration::from_secs(30),
        }
    }
}

/// Whether the loop acks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckMode {
    /// `Ok` → `completed`, `Err(e)` → `failed` with `e` as the error (retried, then DLQ).
    Auto,
    /// The handler acks (e.g. with [`crate::Queen::ack`] or inside a transaction).
    Manual,
}

/// What a finished loop did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumeReport {
    /// Messages handed to the handler.
    pub handled: u64,
    /// Of those, the ones the handler failed.
    pub failed: u64,
    /// Acks the broker refused (their messages will be delivered again).
    pub acks_refused: u64,
}

/// Asks a running loop to stop: no new pops; batches in hand finish and are acked.
#[derive(Debug, Clone)]
pub struct StopHandle(Arc<watch::Sender<bool>>);

impl StopHandle {
    /// Asks the loop to stop; returns at once (await the loop's future for it to end).
    pub fn stop(&self) {
        self.0.send_replace(true);
    }
}

/// A configured loop over one queue; run it with [`Consumer::each`] or [`Consumer::batch`].
#[derive(Debug)]
pub struct Consumer {
    queue: QueueRef,
    options: ConsumeOptions,
    stop: watch::Receiver<bool>,
}

/// Messages per pop when the queue handle sets no batch (the broker's own default).
const DEFAULT_BATCH: u32 = 200;

type Outcomes = Vec<(Message, std::result::Result<(), String>)>;
type BatchFn =
    Arc<dyn Fn(Vec<Message>) -> Pin<Box<dyn Future<Output = Outcomes> + Send>> + Send + Sync>;

impl QueueRef {
    /// A consume loop over this queue with its pop settings (group, partition, batch, …).
    ///
    /// ```no_run
    /// # async fn demo(queen: queen_client::Queen) -> queen_client::Result<()> {
    /// use queen_client::ConsumeOptions;
    /// let options = ConsumeOptions { concurrency: 4, ..Default::default() };
    /// let (consumer, stop) = queen.queue("orders").group("billing").batch(50).consumer(options);
    /// tokio::spawn(async move {
    ///     let _ = tokio::signal::ctrl_c().await;
    ///     stop.stop();
    /// });
    /// let report = consumer
    ///     .each(|msg| async move {
    ///         println!("{}", msg.data.get());
    ///         Ok::<_, std::convert::Infallible>(())
    ///     })
    ///     .await?;
    /// println!("handled {}", report.handled);
    /// # Ok(()) }
    /// ```
    pub fn consumer(&self, options: ConsumeOptions) -> (Consumer, StopHandle) {
        let (tx, rx) = watch::channel(false);
        let consumer = Consumer {
            queue: self.clone().wait(true),
            options,
            stop: rx,
        };
        (consumer, StopHandle(Arc::new(tx)))
    }
}

impl Consumer {
    /// Hands messages one at a time, in order within each batch.
    pub async fn each<F, Fut, E>(self, handler: F) -> Result<ConsumeReport>
    where
        F: Fn(Message) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
        E: std::fmt::Display,
    {
        let handler = Arc::new(handler);
        let per_batch: BatchFn = Arc::new(move |messages| {
            let handler = handler.clone();
            Box::pin(async move {
                let mut outcomes = Vec::with_capacity(messages.len());
                for m in messages {
                    let r = handler(m.clone()).await.map_err(|e| e.to_string());
                    outcomes.push((m, r));
                }
                outcomes
            })
        });
        self.run(per_batch).await
    }

    /// Hands each popped batch whole; one `Err` fails every message of the batch.
    pub async fn batch<F, Fut, E>(self, handler: F) -> Result<ConsumeReport>
    where
        F: Fn(Vec<Message>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
        E: std::fmt::Display,
    {
        let handler = Arc::new(handler);
        let per_batch: BatchFn = Arc::new(move |messages| {
            let handler = handler.clone();
            Box::pin(async move {
                let r = handler(messages.clone()).await.map_err(|e| e.to_string());
                messages.into_iter().map(|m| (m, r.clone())).collect()
            })
        });
        self.run(per_batch).await
    }

    async fn run(self, handler: BatchFn) -> Result<ConsumeReport> {
        let shared = Arc::new(Shared {
            budget: self.options.limit.map(AtomicU64::new),
            last_message: Mutex::new(Instant::now()),
            report: Mutex::new(ConsumeReport::default()),
        });
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..self.options.concurrency.max(1) {
            let worker = Worker {
                queue: self.queue.clone(),
                options: self.options.clone(),
                stop: self.stop.clone(),
                shared: shared.clone(),
                handler: handler.clone(),
            };
            workers.spawn(worker.run());
        }
        while let Some(done) = workers.join_next().await {
            done.map_err(|e| Error::Decode(format!("consume loop task: {e}")))??;
        }
        let report = *shared.report.lock().unwrap_or_else(|p| p.into_inner());
        Ok(report)
    }
}

/// State the pop loops share: the remaining limit, the last delivery, the tallies.
struct Shared {
    budget: Option<AtomicU64>,
    last_message: Mutex<Instant>,
    report: Mutex<ConsumeReport>,
}

impl Shared {
    /// Reserves up to `want` messages of the limit (0 once it is used up).
    fn reserve(&self, want: u64) -> u64 {
        let Some(budget) = &self.budget else {
            return want;
        };
        let took = budget.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
            Some(left - left.min(want))
        });
        took.map(|left| left.min(want)).unwrap_or(0)
    }

    fn give_back(&self, unused: u64) {
        if let Some(budget) = &self.budget {
            budget.fetch_add(unused, Ordering::SeqCst);
        }
    }

    fn idle_for(&self) -> Duration {
        self.last_message
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }

    fn touch(&self) {
        *self.last_message.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    fn tally(&self, f: impl FnOnce(&mut ConsumeReport)) {
        f(&mut self.report.lock().unwrap_or_else(|p| p.into_inner()));
    }
}

struct Worker {
    queue: QueueRef,
    options: ConsumeOptions,
    stop: watch::Receiver<bool>,
    shared: Arc<Shared>,
    handler: BatchFn,
}

impl Worker {
    async fn run(mut self) -> Result<()> {
        let batch = u64::from(self.queue.batch_size().unwrap_or(DEFAULT_BATCH));
        loop {
            if *self.stop.borrow() {
                return Ok(());
            }
            let Some(poll) = self.poll_time() else {
                return Ok(());
            };
            let want = self.shared.reserve(batch);
            if want == 0 {
                return Ok(());
            }
            let request = self
                .queue
                .clone()
                .batch(want as u32)
                .timeout_ms(poll.as_millis() as u64);
            let popped = tokio::select! {
                r = request.pop() => r,
                _ = self.stop.changed() => {
                    self.shared.give_back(want);
                    return Ok(());
                }
            };
            let messages = match popped {
                Ok(Some(resp)) => resp.messages,
                Ok(None) => Vec::new(),
                Err(e) if e.is_transient() => {
                    self.shared.give_back(want);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            self.shared
                .give_back(want - want.min(messages.len() as u64));
            if !messages.is_empty() {
                self.shared.touch();
                self.handle(messages).await?;
            }
        }
    }

    /// How long the next pop may wait, or `None` once the idle time has passed.
    fn poll_time(&self) -> Option<Duration> {
        let Some(idle) = self.options.idle else {
            return Some(self.options.poll);
        };
        let left = idle.checked_sub(self.shared.idle_for())?;
        (!left.is_zero()).then(|| left.min(self.options.poll))
    }

    async fn handle(&self, messages: Vec<Message>) -> Result<()> {
        let renewal = self.renew_while_handling(&messages);
        let outcomes = (self.handler)(messages).await;
        if let Some(task) = renewal {
            task.abort();
        }
        let failed = outcomes.iter().filter(|(_, r)| r.is_err()).count() as u64;
        self.shared.tally(|r| {
            r.handled += outcomes.len() as u64;
            r.failed += failed;
        });
        if self.options.ack == AckMode::Manual {
            return Ok(());
        }
        let acks: Vec<AckItem> = outcomes
            .iter()
            .map(|(m, r)| match r {
                Ok(()) => AckItem::completed(m),
                Err(e) => AckItem::with_status(m, AckStatus::Failed, Some(e.clone())),
            })
            .collect();
        let results = self
            .queue
            .queen()
            .ack_batch(&acks, self.queue.group_name())
            .await?;
        let refused = results.iter().filter(|r| !r.success).count() as u64;
        self.shared.tally(|r| r.acks_refused += refused);
        Ok(())
    }

    fn renew_while_handling(&self, messages: &[Message]) -> Option<tokio::task::JoinHandle<()>> {
        let every = self.options.renew_every?;
        let lease = messages.first().map(|m| m.lease_id.clone())?;
        if lease.is_empty() {
            return None;
        }
        let queen = self.queue.queen().clone();
        let seconds = self.options.renew_seconds;
        Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let _ = queen.extend_lease(&lease, seconds).await;
            }
        }))
    }
}
