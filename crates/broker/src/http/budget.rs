//! The in-flight budget of inflated body bytes (`QUEEN_BODY_BUDGET_MB`): a compressed binary
//! push or transaction body is charged the bytes its headers announce it inflates to
//! (`queen_proto::push_bin::announced_inflation`) before anything is inflated, and keeps the
//! charge until its request is answered, so the bodies waiting for admission together hold at
//! most the budget. A body that does not fit is refused at once with a 503 and `Retry-After`;
//! nothing waits for the budget.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::config::Config;
use crate::error::Error;

/// The budget, shared by every request of one router (an axum extension).
#[derive(Clone)]
pub struct BodyBudget(Arc<Counter>);

struct Counter {
    limit: usize,
    used: AtomicUsize,
}

/// A charge held by one request; given back on drop.
pub struct Charge {
    budget: Option<Arc<Counter>>,
    bytes: usize,
}

impl BodyBudget {
    pub fn new(cfg: &Config) -> Self {
        Self::of_bytes(cfg.body_budget_bytes())
    }

    fn of_bytes(limit: usize) -> Self {
        BodyBudget(Arc::new(Counter {
            limit,
            used: AtomicUsize::new(0),
        }))
    }

    /// The whole budget: the most one body may inflate to.
    pub fn limit(&self) -> usize {
        self.0.limit
    }

    /// Charges `bytes`, or refuses with a 503 when the bodies in flight already hold too much
    /// of the budget for them to fit.
    pub fn charge(&self, bytes: usize) -> Result<Charge, Error> {
        if bytes == 0 {
            return Ok(Charge {
                budget: None,
                bytes,
            });
        }
        let limit = self.0.limit;
        self.0
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&total| total <= limit)
            })
            .map(|_| Charge {
                budget: Some(self.0.clone()),
                bytes,
            })
            .map_err(|used| {
                Error::TryLater(format!(
                    "the broker holds {used} of its {limit} bytes of inflated bodies in flight; \
                     this body announces {bytes} more"
                ))
            })
    }

    /// Bytes charged now.
    #[cfg(test)]
    fn used(&self) -> usize {
        self.0.used.load(Ordering::Acquire)
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if let Some(budget) = &self.budget {
            budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_fit_until_the_budget_is_spent_and_come_back_on_drop() {
        let budget = BodyBudget::of_bytes(100);
        let a = budget.charge(60).expect("fits");
        assert!(matches!(budget.charge(41), Err(Error::TryLater(_))));
        let b = budget.charge(40).expect("fits exactly");
        assert_eq!(budget.used(), 100);
        drop(a);
        assert_eq!(budget.used(), 40);
        drop(b);
        assert_eq!(budget.used(), 0);
        let free = budget.charge(0).expect("nothing to charge");
        drop(free);
        assert_eq!(budget.used(), 0);
    }
}
