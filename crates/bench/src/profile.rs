//! Run profiles: the matrix (batch sizes, partitions, groups) and how long each cell runs.
//! `tiny` keeps CI fast, `quick` finishes the whole matrix in under three minutes, `full` is
//! what BENCHMARKS.md reports.

use std::time::Duration;

use clap::ValueEnum;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProfileName {
    Tiny,
    Quick,
    Full,
}

/// One pgbench ceiling cell: script name and client count.
pub type CeilingCell = (&'static str, u32);

#[derive(Debug, Clone)]
pub struct Profile {
    pub name: ProfileName,
    pub push_batches: Vec<u32>,
    pub partitions: Vec<u32>,
    pub groups: Vec<u32>,
    /// Push cells: saturating warm-up, then a saturating and an open-loop phase of
    /// `push_measure` each (throughput, then latency at 80 % of it).
    pub push_warmup: Duration,
    pub push_measure: Duration,
    /// Partitions of the wide queue of the spread cells (`scenarios/spread.rs`), all created
    /// by the first-push cell; 0 leaves the spread cells out.
    pub spread_partitions: u32,
    pub e2e_warmup: Duration,
    pub e2e_measure: Duration,
    /// Extra attempts of an e2e cell searching for the highest rate with a stable backlog.
    pub e2e_retries: u32,
    /// Producer rate of e2e cells when no push capacity was measured in this run (msgs/s).
    pub e2e_default_rate: f64,
    /// Upper bound on how long consumers may take to drain after the producers stop (a drain
    /// also ends after 10 s without any delivery).
    pub drain_timeout: Duration,
    pub latency_measure: Duration,
    pub idle_consumers: usize,
    pub idle_settle: Duration,
    pub idle_measure: Duration,
    pub ceiling_seconds: u32,
    pub ceiling_cells: Vec<CeilingCell>,
    /// In-flight request cap of every open-loop producer (and pgmq's connection count).
    pub inflight: usize,
}

impl Profile {
    pub fn get(name: ProfileName) -> Self {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        match name {
            ProfileName::Tiny => Self {
                name,
                push_batches: vec![1, 100],
                partitions: vec![1, 10],
                groups: vec![1, 2],
                push_warmup: ms(500),
                push_measure: ms(1000),
                spread_partitions: 1_000,
                e2e_warmup: ms(500),
                e2e_measure: ms(1500),
                e2e_retries: 0,
                e2e_default_rate: 500.0,
                drain_timeout: s(30),
                latency_measure: s(2),
                idle_consumers: 50,
                idle_settle: s(1),
                idle_measure: s(2),
                ceiling_seconds: 1,
                ceiling_cells: vec![("one1k", 8), ("seg100k", 8), ("cur1", 8), ("cycle100", 8)],
                inflight: 16,
            },
            ProfileName::Quick => Self {
                name,
                push_batches: vec![1, 10, 100],
                partitions: vec![1, 10, 100],
                groups: vec![1, 5],
                push_warmup: s(1),
                push_measure: ms(1500),
                spread_partitions: 10_000,
                e2e_warmup: s(1),
                e2e_measure: s(2),
                e2e_retries: 1,
                e2e_default_rate: 5000.0,
                drain_timeout: s(60),
                latency_measure: s(4),
                idle_consumers: 1000,
                idle_settle: s(2),
                idle_measure: s(6),
                ceiling_seconds: 2,
                ceiling_cells: vec![
                    ("one1k", 32),
                    ("batch100x1k", 32),
                    ("seg100k", 8),
                    ("cur1", 8),
                    ("cur10", 8),
                    ("cur100", 8),
                    ("cycle100", 8),
                ],
                inflight: 64,
            },
            ProfileName::Full => Self {
                name,
                push_batches: vec![1, 10, 100],
                partitions: vec![1, 10, 100],
                groups: vec![1, 5],
                push_warmup: s(5),
                push_measure: s(15),
                spread_partitions: 10_000,
                e2e_warmup: s(5),
                e2e_measure: s(20),
                e2e_retries: 3,
                e2e_default_rate: 5000.0,
                drain_timeout: s(300),
                latency_measure: s(30),
                idle_consumers: 1000,
                idle_settle: s(5),
                idle_measure: s(30),
                ceiling_seconds: 10,
                ceiling_cells: vec![
                    ("one1k", 32),
                    ("batch100x1k", 32),
                    ("seg100k", 8),
                    ("cur1", 8),
                    ("cur10", 8),
                    ("cur100", 8),
                    ("cycle100", 8),
                ],
                inflight: 64,
            },
        }
    }
}
