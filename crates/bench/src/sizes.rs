//! Table sizes over time: what the soak watches to show that retention keeps the broker's
//! storage bounded (docs/engine.md §10). `pg_total_relation_size` of the tables that grow
//! with traffic (heap, TOAST and indexes), sampled at a fixed period while a cell runs, each
//! sample printed as it is taken.

use std::time::{Duration, Instant};

use serde::Serialize;

/// The tables sampled, with the name a sample line gives them.
const TABLES: &[(&str, &str)] = &[
    ("segments", "queen.log_segments"),
    ("sidecar", "queen.log_txns"),
    ("cursors", "queen.log_consumers"),
    ("partitions", "queen.log_partitions"),
];

/// One sample: seconds since sampling began and the bytes of each table of [`TABLES`].
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub at_s: f64,
    pub bytes: Vec<(String, i64)>,
    /// Live segment rows.
    pub segments: i64,
}

impl Sample {
    fn line(&self) -> String {
        let sizes: Vec<String> = self
            .bytes
            .iter()
            .map(|(name, b)| format!("{name} {:>7.2} MB", *b as f64 / 1_048_576.0))
            .collect();
        format!(
            "  [{:>5.0}s] {}; {} segment rows",
            self.at_s,
            sizes.join(", "),
            self.segments
        )
    }
}

/// Samples every `every` for `total` (one sample at the start, one at the end), printing each.
pub async fn sample(db: &tokio_postgres::Client, every: Duration, total: Duration) -> Vec<Sample> {
    let started = Instant::now();
    let mut samples = Vec::new();
    loop {
        match take(db, started).await {
            Ok(s) => {
                eprintln!("{}", s.line());
                samples.push(s);
            }
            Err(e) => eprintln!("  table sizes: {e}"),
        }
        let left = total.saturating_sub(started.elapsed());
        if left.is_zero() {
            return samples;
        }
        tokio::time::sleep(every.min(left)).await;
    }
}

async fn take(
    db: &tokio_postgres::Client,
    started: Instant,
) -> Result<Sample, tokio_postgres::Error> {
    let mut bytes = Vec::with_capacity(TABLES.len());
    for (name, table) in TABLES {
        let row = db
            .query_one(
                "SELECT pg_total_relation_size($1::text::regclass)",
                &[table],
            )
            .await?;
        bytes.push((name.to_string(), row.get(0)));
    }
    let segments = db
        .query_one("SELECT count(*) FROM queen.log_segments", &[])
        .await?
        .get(0);
    Ok(Sample {
        at_s: started.elapsed().as_secs_f64(),
        bytes,
        segments,
    })
}

/// Whether every table stayed flat from the first sample at or after `settle` on: no later
/// sample above 125 % of that one (plus 1 MiB, for the small tables that grow by whole
/// pages). `None` when no sample was taken after `settle`.
pub fn flat_after(samples: &[Sample], settle: Duration) -> Option<bool> {
    let settle = settle.as_secs_f64();
    let start = samples.iter().position(|s| s.at_s >= settle)?;
    let (reference, later) = (&samples[start], &samples[start + 1..]);
    if later.is_empty() {
        return None;
    }
    let bound = |b: i64| b + (b / 4).max(1 << 20);
    Some(later.iter().all(|s| {
        s.bytes
            .iter()
            .zip(&reference.bytes)
            .all(|((_, now), (_, then))| *now <= bound(*then))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at_s: f64, mb: i64) -> Sample {
        Sample {
            at_s,
            bytes: vec![("segments".into(), mb << 20)],
            segments: 0,
        }
    }

    #[test]
    fn flat_means_no_later_sample_a_quarter_above_the_settled_one() {
        let settle = Duration::from_secs(60);
        let grew = [
            sample(0.0, 1),
            sample(60.0, 40),
            sample(90.0, 45),
            sample(120.0, 51),
        ];
        assert_eq!(flat_after(&grew, settle), Some(false));
        let flat = [
            sample(0.0, 1),
            sample(60.0, 40),
            sample(90.0, 48),
            sample(120.0, 44),
        ];
        assert_eq!(flat_after(&flat, settle), Some(true));
        assert_eq!(
            flat_after(&flat[..2], settle),
            None,
            "nothing after the reference"
        );
    }
}
