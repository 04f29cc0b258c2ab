//! Overload: the e2e shape of 10 partitions and one group, with the producers offered 1×,
//! 1.5×, 2× and 4× of the highest stable rate found in the same run (the e2e scenario's,
//! confirmed again right before the steps, or searched here when it did not run). A broker at
//! capacity should keep delivering at capacity and refuse the excess early: each step prints
//! what was offered, accepted and refused (by status; `shed` counts the sends the producers'
//! in-flight cap skipped), delivered msg/s (also over the 1× step's), the p99 of accepted
//! pushes, and the CPU of each side. Every step is drained and verified: no accepted message may be lost.

use anyhow::Result;

use super::e2e::{self, Cell};
use super::Ctx;
use crate::report::Row;

/// The cell: 10 partitions, one group (queue mode).
const PARTITIONS: u32 = 10;
const GROUPS: u32 = 1;
/// Offered load as multiples of the stable rate.
pub const STEPS: [f64; 4] = [1.0, 1.5, 2.0, 4.0];
/// `extra` key: delivered msg/s ÷ the stable rate.
pub const OF_STABLE: &str = "delivered_of_stable";
/// `extra` key: delivered msg/s ÷ what the 1× step delivered: what overload itself costs,
/// apart from how well the search's one window predicted the sustained rate.
pub const OF_FIRST_STEP: &str = "delivered_of_1x";

pub async fn run(ctx: &mut Ctx) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let stable = match ctx.e2e_rates.get(&(PARTITIONS, GROUPS)).copied() {
        Some(given) if ctx.overrides.e2e_rate.is_some() => given,
        // Found earlier in the run: the database has grown since, so it must hold again now.
        Some(found) => {
            let (mut row, rate) = e2e::confirm(ctx, PARTITIONS, GROUPS, found).await?;
            row.cell = format!("{} before overload", row.cell);
            rows.push(row);
            rate
        }
        None => {
            let (row, rate) = e2e::search(ctx, PARTITIONS, GROUPS).await?;
            ctx.e2e_rates.insert((PARTITIONS, GROUPS), rate);
            rows.push(row);
            rate
        }
    };
    for step in STEPS {
        let cell = Cell {
            scenario: "overload",
            label: format!("{} x{step}", e2e::label(PARTITIONS, GROUPS)),
            partitions: PARTITIONS,
            groups: GROUPS,
            push_batch: 100,
            rate: stable * step,
            consumers_per_group: e2e::consumers_for(PARTITIONS),
            warmup: ctx.profile.e2e_warmup,
            measure: ctx.profile.e2e_measure,
            options: e2e::queue_options(),
            sample_sizes: None,
        };
        let mut row = e2e::run_cell(ctx, &cell, false).await?;
        row.extra.insert(OF_STABLE.into(), row.msgs_per_s / stable);
        row.notes.push(format!("stable rate {stable:.0} msg/s"));
        eprintln!(
            "  overload x{step}: offered {:.0}, accepted {:.0}, delivered {:.0} msg/s",
            cell.rate,
            row.extra.get("pushed_per_s").copied().unwrap_or(0.0),
            row.msgs_per_s
        );
        rows.push(row);
    }
    let from = rows.len() - STEPS.len();
    let first = rows[from].msgs_per_s;
    if first > 0.0 {
        for row in &mut rows[from..] {
            row.extra
                .insert(OF_FIRST_STEP.into(), row.msgs_per_s / first);
        }
    }
    Ok(rows)
}
