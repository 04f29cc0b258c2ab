//! A transactional pipeline stage: takes messages from `QUEUE` (default `sdk-demo`), and for
//! each batch pushes the enriched messages to `QUEUE-out` and acks the inputs in one
//! PostgreSQL transaction, so a crash between the two can neither lose nor duplicate work.

use std::time::Duration;

use queen_client::{AckMode, AckStatus, ConsumeOptions, PushItem, Queen};
use serde_json::Value;

#[tokio::main]
async fn main() -> queen_client::Result<()> {
    let queen = Queen::new(env("QUEEN_URL", "http://127.0.0.1:6632"));
    let input = env("QUEUE", "sdk-demo");
    let output = format!("{input}-out");
    let options = ConsumeOptions {
        ack: AckMode::Manual,
        idle: Some(Duration::from_secs(2)),
        ..Default::default()
    };
    let (consumer, _stop) = queen.queue(&input).batch(25).consumer(options);
    let report = consumer
        .batch(move |messages| {
            let (queen, output) = (queen.clone(), output.clone());
            async move {
                let mut enriched = Vec::with_capacity(messages.len());
                for m in &messages {
                    let mut v: Value = serde_json::from_str(m.data.get())
                        .map_err(|e| queen_client::Error::Decode(e.to_string()))?;
                    v["stage"] = "enriched".into();
                    // The input's transactionId makes a replayed bundle a duplicate.
                    let id = Some(format!("{}-out", m.transaction_id));
                    enriched.push(PushItem::json(&v, id)?);
                }
                let mut tx = queen.transaction().push(&output, "Default", enriched);
                for m in &messages {
                    tx = tx.ack(m, AckStatus::Completed, None);
                }
                tx.commit().await.map(|_| ())
            }
        })
        .await?;
    println!("moved {}", report.handled - report.failed);
    Ok(())
}

fn env(key: &str, default: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| default.to_string())
}
