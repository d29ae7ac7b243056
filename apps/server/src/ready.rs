//! Readiness that tells the truth, within a second: each part a request needs is checked at once,
//! each bounded by [`CHECK_DEADLINE`], and a part that does not answer in time is failing.
//!
//! | part | ready when |
//! |---|---|
//! | `draining` | the instance is not shutting down |
//! | `database` | the journal answers a read, and its writes land (after a failed write, one short write says whether they land again) |
//! | `redis` | Redis answers `PING` (when configured) |
//! | `disk` | the folders the server writes (the SQLite journal's, the state folder) have `--min-free-disk-mib` free |

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::state::AppState;

/// How long one part may take to answer.
pub const CHECK_DEADLINE: Duration = Duration::from_millis(800);

/// One part's answer.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Check {
    /// `draining`, `database`, `redis` or `disk`.
    pub part: &'static str,
    /// Whether it is ready.
    pub ok: bool,
    /// What was found.
    pub detail: String,
    /// How long it took, in milliseconds.
    pub took_ms: u64,
}

/// Every part, checked concurrently.
pub async fn check(state: &Arc<AppState>) -> Vec<Check> {
    let draining = Check {
        part: "draining",
        ok: !state.shutdown.is_cancelled(),
        detail: if state.shutdown.is_cancelled() {
            "this instance is shutting down: it finishes its calls and takes no new ones".into()
        } else {
            "serving".into()
        },
        took_ms: 0,
    };
    let (database, redis, disk) = tokio::join!(
        timed("database", database(state)),
        async {
            match &state.cluster {
                Some(_) => Some(timed("redis", redis(state)).await),
                None => None,
            }
        },
        timed("disk", disk(state)),
    );
    [Some(draining), Some(database), redis, Some(disk)].into_iter().flatten().collect()
}

async fn timed(
    part: &'static str,
    check: impl std::future::Future<Output = Result<String, String>>,
) -> Check {
    let started = Instant::now();
    let (ok, detail) = match tokio::time::timeout(CHECK_DEADLINE, check).await {
        Ok(Ok(detail)) => (true, detail),
        Ok(Err(detail)) => (false, detail),
        Err(_) => (false, format!("did not answer within {} ms", CHECK_DEADLINE.as_millis())),
    };
    Check { part, ok, detail, took_ms: started.elapsed().as_millis() as u64 }
}

async fn database(state: &Arc<AppState>) -> Result<String, String> {
    let probe = journal::AttemptFilter { limit: Some(1), ..journal::AttemptFilter::default() };
    state.journal.query("", &probe).await.map_err(|e| format!("the journal does not answer: {e}"))?;
    // Reads answer on a full disk: whether writes land is what the pipeline's own say.
    state.journal_ready().await.map_err(|e| e.message().to_owned())?;
    let waiting = state.executor.outbox().len();
    Ok(if waiting == 0 {
        "the journal answers and takes writes".to_owned()
    } else {
        format!("the journal answers and takes writes; {waiting} from the outbox still landing")
    })
}

async fn redis(state: &Arc<AppState>) -> Result<String, String> {
    let Some(cluster) = &state.cluster else { return Ok("not configured".into()) };
    cluster.ping().await.map_err(|e| format!("Redis does not answer: {e}"))?;
    Ok("Redis answers".into())
}

async fn disk(state: &Arc<AppState>) -> Result<String, String> {
    let folders = state.written_folders();
    let minimum = state.args.min_free_disk_mib.saturating_mul(1 << 20);
    let measured = tokio::task::spawn_blocking(move || {
        folders
            .into_iter()
            .map(|folder| {
                let free = rustix::fs::statvfs(&folder)
                    .map(|stat| stat.f_bavail.saturating_mul(stat.f_frsize))
                    .map_err(|errno| format!("{}: {errno}", folder.display()));
                (folder, free)
            })
            .collect::<Vec<_>>()
    })
    .await
    .map_err(|e| format!("the disk check failed: {e}"))?;
    let mut lowest: Option<(std::path::PathBuf, u64)> = None;
    for (folder, free) in measured {
        let free = free?;
        if free < minimum {
            return Err(format!(
                "{} has {} MiB free, below the {} MiB the server keeps (--min-free-disk-mib)",
                folder.display(),
                free >> 20,
                minimum >> 20
            ));
        }
        if lowest.as_ref().is_none_or(|(_, least)| free < *least) {
            lowest = Some((folder, free));
        }
    }
    Ok(match lowest {
        Some((folder, free)) => format!("{} MiB free at {} (the least)", free >> 20, folder.display()),
        None => "nothing to check".into(),
    })
}
