//! The gates a request passes before its work: a semaphore with how long a
//! request may wait at it (the pool, admission, the shop's pool).

use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit, TryAcquireError};

use crate::Limit;

/// A semaphore with how long a request may wait for it.
pub(crate) struct Gate {
    permits: Semaphore,
    /// `None` waits without limit; zero does not wait at all.
    timeout: Option<Duration>,
}

impl Gate {
    pub(crate) fn new(limit: &Limit) -> Self {
        Gate {
            permits: Semaphore::new(limit.permits),
            timeout: limit.timeout,
        }
    }

    /// Takes a permit, waiting at most the gate's timeout; `None` if none
    /// could be had in time.
    pub(crate) async fn enter(&self) -> Option<SemaphorePermit<'_>> {
        // Fast path: no timer and no waiter registration when a permit is free.
        match self.permits.try_acquire() {
            Ok(permit) => return Some(permit),
            Err(TryAcquireError::Closed) => return None,
            Err(TryAcquireError::NoPermits) => {}
        }
        match self.timeout {
            None => self.permits.acquire().await.ok(),
            Some(timeout) if timeout.is_zero() => None,
            Some(timeout) => tokio::time::timeout(timeout, self.permits.acquire())
                .await
                .ok()
                .and_then(Result::ok),
        }
    }
}
