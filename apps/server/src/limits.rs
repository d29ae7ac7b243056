//! Per-tenant limits, so one caller cannot exhaust the server for the others.
//!
//! Each tenant has a budget of held sessions, batches in flight, open event streams and tool runs
//! on the server's own machine. A request past a budget is answered `429 too_many_requests` with
//! `Retry-After`; tool runs past the budget wait for a turn (bounded by the call's own deadline),
//! so a tenant whose calls hang on slow files queues behind itself and nobody else.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;

/// How much of the server one tenant may use at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitConfig {
    /// Sessions held at once.
    pub sessions: usize,
    /// Batches in flight.
    pub batches: usize,
    /// Open event streams.
    pub streams: usize,
    /// Tool runs on the server's machine (files, search, commands) at once.
    pub runs: usize,
}

impl Default for LimitConfig {
    fn default() -> Self {
        Self { sessions: 1000, batches: 64, streams: 32, runs: 16 }
    }
}

/// What is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    /// Batches in flight.
    Batches,
    /// Open event streams.
    Streams,
}

impl Resource {
    fn name(self) -> &'static str {
        match self {
            Self::Batches => "batches in flight",
            Self::Streams => "open event streams",
        }
    }
}

/// The per-tenant counters and tool-run pools.
#[derive(Debug, Default)]
pub struct Limits {
    config: LimitConfig,
    counts: Mutex<HashMap<(String, Resource), usize>>,
    pools: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// Holds one unit of a tenant's budget until dropped.
#[derive(Debug)]
pub struct Slot {
    limits: Arc<Limits>,
    key: (String, Resource),
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.limits.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = counts.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&self.key);
            }
        }
    }
}

impl Limits {
    /// Limits with these budgets.
    pub fn new(config: LimitConfig) -> Self {
        Self { config, ..Self::default() }
    }

    /// The budgets.
    pub fn config(&self) -> LimitConfig {
        self.config
    }

    /// Takes one unit of `resource` for `tenant`, or says when to try again.
    ///
    /// # Errors
    ///
    /// 429 with `Retry-After` when the tenant is at its budget.
    pub fn take(self: &Arc<Self>, tenant: &str, resource: Resource) -> Result<Slot, ApiError> {
        let limit = match resource {
            Resource::Batches => self.config.batches,
            Resource::Streams => self.config.streams,
        };
        let key = (tenant.to_owned(), resource);
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let count = counts.entry(key.clone()).or_default();
        if *count >= limit {
            return Err(ApiError::too_many(
                format!(
                    "this tenant has {limit} {} already, the most it may; try again shortly",
                    resource.name()
                ),
                1,
            ));
        }
        *count += 1;
        Ok(Slot { limits: self.clone(), key })
    }

    /// Checks that `tenant` may hold one more session, given how many it holds.
    ///
    /// # Errors
    ///
    /// 429 when it holds its budget already.
    pub fn check_sessions(&self, held: usize) -> Result<(), ApiError> {
        if held >= self.config.sessions {
            return Err(ApiError::too_many(
                format!(
                    "this tenant holds {held} active sessions, the most it may; end sessions it no longer uses"
                ),
                5,
            ));
        }
        Ok(())
    }

    /// Waits for a turn to run a tool on this machine for `tenant`.
    pub async fn run_turn(&self, tenant: &str) -> OwnedSemaphorePermit {
        let pool = self.pool(tenant);
        // The semaphore is never closed.
        pool.acquire_owned().await.expect("tenant pools are never closed")
    }

    fn pool(&self, tenant: &str) -> Arc<Semaphore> {
        let mut pools = self.pools.lock().unwrap_or_else(PoisonError::into_inner);
        // Every call takes this path: look up without allocating, insert the first time only.
        if let Some(pool) = pools.get(tenant) {
            return pool.clone();
        }
        let pool = Arc::new(Semaphore::new(self.config.runs));
        pools.insert(tenant.to_owned(), pool.clone());
        pool
    }

    /// Tenants whose tool-run pool is fully in use (their calls queue).
    pub fn starved(&self) -> Vec<String> {
        let mut starved: Vec<String> = self
            .pools
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(_, pool)| pool.available_permits() == 0)
            .map(|(tenant, _)| tenant.clone())
            .collect();
        starved.sort();
        starved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_past_its_budget_gets_429_and_others_do_not() {
        let limits = Arc::new(Limits::new(LimitConfig { batches: 2, ..LimitConfig::default() }));
        let a1 = limits.take("a", Resource::Batches).unwrap();
        let _a2 = limits.take("a", Resource::Batches).unwrap();
        let error = limits.take("a", Resource::Batches).unwrap_err();
        assert_eq!(error.status().as_u16(), 429);
        let _b = limits.take("b", Resource::Batches).unwrap();
        drop(a1);
        let _a3 = limits.take("a", Resource::Batches).expect("a slot came free");
    }

    #[tokio::test]
    async fn runs_queue_per_tenant() {
        let limits = Limits::new(LimitConfig { runs: 1, ..LimitConfig::default() });
        let turn = limits.run_turn("a").await;
        assert_eq!(limits.starved(), ["a"]);
        // B is not behind A.
        let _b = tokio::time::timeout(std::time::Duration::from_secs(1), limits.run_turn("b")).await.unwrap();
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), limits.run_turn("a")).await;
        assert!(waiting.is_err(), "A's second run waits for its first");
        drop(turn);
        let _again =
            tokio::time::timeout(std::time::Duration::from_secs(1), limits.run_turn("a")).await.unwrap();
    }
}
