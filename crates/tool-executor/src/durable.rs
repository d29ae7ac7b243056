//! The record first: how the pipeline writes the journal when the journal may fail.
//!
//! **Architecture invariant:** a call runs only after its proposal is durable. A propose that
//! fails or does not answer within the deadline ([`ExecutorConfig::journal_deadline`], 2 s by
//! default) refuses the call (`unavailable`: nothing ran, retry later); a read, journalled once
//! when it ends while the journal is healthy, is proposed before it runs as soon as a journal
//! write has failed. A settlement, a decision or an approval's outcome that the journal does not
//! take goes to the [`Outbox`](journal::outbox::Outbox) and lands later, in order; a retry of the
//! call's message meanwhile gets the result waiting there.
//!
//! [`JournalHealth`] is what the pipeline knows of the journal from its own writes (and the
//! heartbeat's): the server's readiness and admission read it, and the reconciler waits for a
//! full lease of health after any failure before it judges another instance dead, so that peers
//! that could not beat while the database was away are not taken for dead.
//!
//! [`ExecutorConfig::journal_deadline`]: crate::ExecutorConfig::journal_deadline

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use journal::JournalError;

/// What the pipeline knows of the journal from its own writes.
#[derive(Debug, Default)]
pub struct JournalHealth {
    /// Orders failures and successes (a clock's milliseconds cannot: both may fall in one).
    sequence: AtomicU64,
    /// The sequence number of the last failure (0: none).
    last_failure: AtomicU64,
    /// The sequence number of the first success after the last failure.
    recovered: AtomicU64,
    /// Unix milliseconds of the last failure (0: none).
    failed_at: AtomicI64,
    /// What the last failure said.
    last_error: Mutex<Option<String>>,
}

impl JournalHealth {
    /// A write failed (or did not answer in time).
    pub fn failed(&self, error: &str) {
        *self.last_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(error.to_owned());
        self.failed_at.store(now_ms(), Ordering::Relaxed);
        self.last_failure.store(self.sequence.fetch_add(1, Ordering::Relaxed) + 1, Ordering::Release);
    }

    /// A write landed. (Free while the journal is healthy: nothing is stored.)
    pub fn succeeded(&self) {
        if self.is_down() {
            self.recovered.store(self.sequence.fetch_add(1, Ordering::Relaxed) + 1, Ordering::Release);
        }
    }

    /// Whether the last write failed (no write has landed since).
    pub fn is_down(&self) -> bool {
        self.last_failure.load(Ordering::Acquire) > self.recovered.load(Ordering::Acquire)
    }

    /// How long since the last failure; `None` when nothing ever failed.
    pub fn since_failure(&self) -> Option<Duration> {
        match self.failed_at.load(Ordering::Relaxed) {
            0 => None,
            at => Some(Duration::from_millis(u64::try_from(now_ms() - at).unwrap_or(0))),
        }
    }

    /// What the last failure said.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Runs one journal write within `deadline`, noting how it went; a write past the deadline
    /// is an error (and is dropped: its outcome is unknown, and the caller treats it as failed).
    ///
    /// # Errors
    ///
    /// The journal's error, or a sentence saying it did not answer in time.
    pub async fn timed<T>(
        &self,
        deadline: Duration,
        write: impl Future<Output = Result<T, JournalError>>,
    ) -> Result<T, String> {
        match tokio::time::timeout(deadline, write).await {
            Ok(Ok(value)) => {
                self.succeeded();
                Ok(value)
            }
            Ok(Err(error)) => {
                let error = error.to_string();
                self.failed(&error);
                Err(error)
            }
            Err(_) => {
                let error = format!("the journal did not answer within {} ms", deadline.as_millis());
                self.failed(&error);
                Err(error)
            }
        }
    }
}

/// The message a call refused for the journal's sake carries (the model reads it; `unavailable`
/// is its kind).
pub(crate) fn refused(error: &str) -> String {
    format!(
        "This call was not run: the journal that must record every call before it runs could not take it \
         ({error}). Nothing was done. Retry the same call in a few seconds."
    )
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn down_after_a_failure_until_a_write_lands() {
        let health = JournalHealth::default();
        assert!(!health.is_down() && health.since_failure().is_none());
        health.failed("disk full");
        assert!(health.is_down());
        assert_eq!(health.last_error().as_deref(), Some("disk full"));
        health.succeeded();
        assert!(!health.is_down(), "in the same millisecond too");
        health.failed("again");
        assert!(health.is_down());
        health.succeeded();
        assert!(health.since_failure().is_some());
    }
}
