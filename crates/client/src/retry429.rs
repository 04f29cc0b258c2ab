//! Pushes refused with 429: the broker's push door answers it, before any work, when the broker
//! is behind (docs/wire.md, the push door), and nothing of the push was stored. Like the
//! official client, the SDK sends the same push again after the answer's `Retry-After` with
//! ±20 % jitter (so refused producers do not come back in step), a bounded number of times.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::{RequestBuilder, Response, StatusCode};

use crate::Result;

/// Attempts in all by default (the official client's `retry_429.max_attempts`).
pub const DEFAULT_ATTEMPTS: u32 = 10;
/// The wait when a 429 names none, doubled per attempt up to [`MAX_BACKOFF`] (the official
/// client's `base_ms` and `cap_ms`).
const BASE_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Sends the request `build` makes, again after each 429 while attempts are left; answers the
/// last response. Public for callers that build their own push bodies.
pub async fn send(attempts: u32, build: impl Fn() -> RequestBuilder) -> Result<Response> {
    let mut tried = 1;
    loop {
        let resp = build().send().await?;
        if resp.status() != StatusCode::TOO_MANY_REQUESTS || tried >= attempts {
            return Ok(resp);
        }
        let asked = crate::retry_after(&resp);
        tokio::time::sleep(jittered(asked.unwrap_or_else(|| backoff(tried)))).await;
        tried += 1;
    }
}

fn backoff(tried: u32) -> Duration {
    BASE_BACKOFF
        .saturating_mul(1 << tried.saturating_sub(1).min(16))
        .min(MAX_BACKOFF)
}

/// `wait` × a factor in [0.8, 1.2), drawn from the clock's nanoseconds (no RNG needed: only
/// the spread across producers matters).
fn jittered(wait: Duration) -> Duration {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let factor = 0.8 + 0.4 * f64::from(nanos % 1_000_000) / 1_000_000.0;
    wait.mul_f64(factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_its_cap() {
        assert_eq!(backoff(1), Duration::from_millis(500));
        assert_eq!(backoff(2), Duration::from_secs(1));
        assert_eq!(backoff(20), MAX_BACKOFF);
    }

    #[test]
    fn jitter_stays_within_a_fifth() {
        for _ in 0..100 {
            let w = jittered(Duration::from_secs(1));
            assert!(
                w >= Duration::from_millis(800) && w < Duration::from_millis(1200),
                "{w:?}"
            );
        }
    }
}
