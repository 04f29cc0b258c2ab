//! Consumes `QUEUE` (default `sdk-demo`) with two parallel pop loops until `COUNT` messages
//! were handled or nothing arrived for two seconds; acks automatically; stops on Ctrl-C.

use std::time::Duration;

use queen_client::{ConsumeOptions, Queen};

#[tokio::main]
async fn main() -> queen_client::Result<()> {
    let queen = Queen::new(env("QUEEN_URL", "http://127.0.0.1:6632"));
    let count: u64 = env("COUNT", "100").parse().expect("COUNT is a number");
    let options = ConsumeOptions {
        concurrency: 2,
        limit: Some(count),
        idle: Some(Duration::from_secs(2)),
        renew_every: Some(Duration::from_secs(10)),
        ..Default::default()
    };
    let queue = queen.queue(env("QUEUE", "sdk-demo")).batch(20);
    let (consumer, stop) = queue.consumer(options);
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stop.stop();
    });
    let report = consumer
        .each(|msg| async move {
            // A real worker would do its job here; an Err would nack the message.
            eprintln!("{} {}", msg.transaction_id, msg.data.get());
            Ok::<_, std::convert::Infallible>(())
        })
        .await?;
    println!("handled {} failed {}", report.handled, report.failed);
    Ok(())
}

fn env(key: &str, default: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| default.to_string())
}
