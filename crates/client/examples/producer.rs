//! Pushes `COUNT` (default 100) JSON messages to `QUEUE` (default `sdk-demo`) on the broker
//! at `QUEEN_URL`, in batches, and prints how many were queued.

use queen_client::{PushItem, Queen};
use serde_json::json;

#[tokio::main]
async fn main() -> queen_client::Result<()> {
    let queen = Queen::new(env("QUEEN_URL", "http://127.0.0.1:6632"));
    let queue = queen.queue(env("QUEUE", "sdk-demo"));
    let count: usize = env("COUNT", "100").parse().expect("COUNT is a number");
    let mut queued = 0;
    for start in (0..count).step_by(50) {
        let items = (start..count.min(start + 50))
            .map(|i| PushItem::json(&json!({ "order": i }), None))
            .collect::<queen_client::Result<Vec<_>>>()?;
        let results = queue.push(&items).await?;
        queued += results.iter().filter(|r| r.is_queued()).count();
    }
    println!("queued {queued}");
    Ok(())
}

fn env(key: &str, default: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| default.to_string())
}
