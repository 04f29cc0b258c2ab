//! A fixed set of PostgreSQL connections checked out one caller at a time, so the peer's
//! concurrency equals its connection count exactly (no pipelining on a shared connection).

use std::sync::{Arc, Mutex};

use anyhow::Result;
use tokio::sync::Semaphore;

#[derive(Clone)]
pub struct PgPool {
    idle: Arc<Mutex<Vec<tokio_postgres::Client>>>,
    permits: Arc<Semaphore>,
}

/// A checked-out connection; returns to the pool on drop.
pub struct Lease {
    client: Option<tokio_postgres::Client>,
    pool: PgPool,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl std::ops::Deref for Lease {
    type Target = tokio_postgres::Client;
    fn deref(&self) -> &Self::Target {
        self.client.as_ref().expect("present until drop")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(c) = self.client.take() {
            self.pool
                .idle
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(c);
        }
    }
}

impl PgPool {
    pub async fn connect(cfg: &tokio_postgres::Config, size: usize) -> Result<Self> {
        let mut clients = Vec::with_capacity(size);
        for _ in 0..size {
            clients.push(queen_launch::connect(cfg).await?);
        }
        Ok(Self {
            idle: Arc::new(Mutex::new(clients)),
            permits: Arc::new(Semaphore::new(size)),
        })
    }

    pub async fn get(&self) -> Lease {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .expect("semaphore never closed");
        let client = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        Lease {
            client,
            pool: self.clone(),
            _permit: permit,
        }
    }
}
