//! The in-process engine: `monty`, a sandboxed Python subset, one REPL per session.
//!
//! Code runs on a thread of its own with a large stack (a deeply nested expression cannot
//! overflow a runtime thread), under a time limit, monty's recursion limit and a cap on any one
//! allocation; a panic inside monty loses that session's state and nothing else. monty's memory
//! accounting needs its own global allocator, which a server cannot give it; instead a watcher
//! thread feeds monty's probe with this process's resident size, so the limit holds for what
//! Toolhost's memory grew by since in-process code first ran (checked at every allocation monty
//! sizes and periodically while code runs), as well as for each single allocation.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use monty::MontyRepl;
use monty_types::{
    CompileOptions, MontyException, MontyObject, PrintWriter, PrintWriterCallback, ResourceLimits,
    ResourceTracker,
};

use crate::runtime::Captured;

/// The stack of the thread code runs on.
const STACK_BYTES: usize = 256 << 20;

/// The deepest bracket nesting accepted (the parser recurses on it).
const MAX_NESTING: usize = 200;

/// Sessions whose REPL is kept; past it the least recently used tenth is forgotten.
const MAX_SESSIONS: usize = 1_000;

/// What one run produced.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) output: Captured,
    /// The last expression's value, as Python's `repr` shows it (`None` values are not shown).
    pub(crate) value: Option<String>,
    /// The exception, as Python prints it.
    pub(crate) error: Option<String>,
    /// The session's state was lost (an internal failure); the next run starts afresh.
    pub(crate) state_lost: bool,
    pub(crate) duration: Duration,
}

/// Each session's REPL.
#[derive(Debug, Clone)]
pub(crate) struct InProcess {
    sessions: Arc<Mutex<Sessions>>,
    max_memory: usize,
}

#[derive(Debug, Default)]
struct Sessions {
    by_id: HashMap<String, (u64, Option<Box<MontyRepl>>)>,
    tick: u64,
}

impl InProcess {
    pub(crate) fn new(max_memory: usize) -> Self {
        Self { sessions: Arc::default(), max_memory }
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Forgets a session's state.
    pub(crate) fn reset(&self, session: &str) -> bool {
        self.sessions().by_id.remove(session).is_some()
    }

    fn take(&self, session: &str) -> Option<Box<MontyRepl>> {
        let mut sessions = self.sessions();
        sessions.tick += 1;
        let tick = sessions.tick;
        let entry = sessions.by_id.entry(session.to_owned()).or_insert((tick, None));
        entry.0 = tick;
        entry.1.take()
    }

    fn put(&self, session: &str, repl: Box<MontyRepl>) {
        let mut sessions = self.sessions();
        sessions.tick += 1;
        let tick = sessions.tick;
        sessions.by_id.insert(session.to_owned(), (tick, Some(repl)));
        if sessions.by_id.len() > MAX_SESSIONS {
            let mut ticks: Vec<u64> = sessions.by_id.values().map(|(tick, _)| *tick).collect();
            ticks.sort_unstable();
            let cutoff = ticks[MAX_SESSIONS / 10];
            sessions.by_id.retain(|_, (tick, _)| *tick > cutoff);
        }
    }

    fn fresh(&self) -> Box<MontyRepl> {
        watch_memory();
        let limits = ResourceLimits::default().max_memory(self.max_memory);
        Box::new(MontyRepl::new("<session>", ResourceTracker::new(limits), CompileOptions::default()))
    }

    /// Runs `code` in `session`'s REPL for at most `limit`. Calls of one session are serialised
    /// by the pipeline (the API is sequential); a call racing another finds no REPL and gets a
    /// fresh one only for itself.
    pub(crate) async fn run(&self, session: &str, code: &str, limit: Duration, budget: usize) -> Outcome {
        let started = Instant::now();
        if let Some(depth) = too_deep(code) {
            return Outcome {
                output: Captured::new(budget),
                value: None,
                error: Some(format!(
                    "SyntaxError: brackets nested {depth} deep (at most {MAX_NESTING} here); \
                     build the structure in steps"
                )),
                state_lost: false,
                duration: started.elapsed(),
            };
        }
        let repl = self.take(session).unwrap_or_else(|| self.fresh());
        let (tx, rx) = tokio::sync::oneshot::channel();
        let code = code.to_owned();
        let spawned = std::thread::Builder::new()
            .name("code-in-process".into())
            .stack_size(STACK_BYTES)
            .spawn(move || {
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                    let mut repl = repl;
                    let mut output = Captured::new(budget);
                    repl.tracker_mut().set_max_duration(limit);
                    let result = repl.feed_run(&code, Vec::new(), PrintWriter::Callback(&mut output));
                    // Shown here, on the engine's thread, and cut as the full engine cuts values.
                    let result = match result {
                        Ok(MontyObject::None) => Ok(None),
                        Ok(value) => Ok(Some(cut_value(value.py_repr()))),
                        Err(exception) => Err(describe(&exception)),
                    };
                    (repl, output, result)
                }));
                let _ = tx.send(result);
            });
        if let Err(error) = spawned {
            return Outcome {
                output: Captured::new(budget),
                value: None,
                error: Some(format!("the in-process interpreter could not start a thread: {error}")),
                state_lost: true,
                duration: started.elapsed(),
            };
        }
        match rx.await {
            Ok(Ok((repl, output, result))) => {
                self.put(session, repl);
                let (value, error) = match result {
                    Ok(value) => (value, None),
                    Err(error) => (None, Some(error)),
                };
                Outcome { output, value, error, state_lost: false, duration: started.elapsed() }
            }
            // A panic inside the interpreter: this session's state is gone, nothing else.
            _ => Outcome {
                output: Captured::new(budget),
                value: None,
                error: Some("the in-process interpreter failed on this code (an internal error)".into()),
                state_lost: true,
                duration: started.elapsed(),
            },
        }
    }
}

/// The exception as Python prints it, with a hint when the subset lacks what the code used.
fn describe(exception: &MontyException) -> String {
    let text = exception.to_string();
    let lacking = matches!(
        exception.exc_type(),
        monty_types::ExcType::NotImplementedError | monty_types::ExcType::ModuleNotFoundError
    ) || text.contains("not supported")
        // A method a builtin type or module has in CPython may be missing from the subset.
        || (exception.exc_type() == monty_types::ExcType::AttributeError
            && (text.contains("module '")
                || ["'int'", "'float'", "'str'", "'bytes'", "'list'", "'dict'", "'set'", "'tuple'"]
                    .iter()
                    .any(|name| text.contains(&format!("{name} object has no attribute")))));
    if lacking {
        format!(
            "{text}\n(the in-process engine runs a subset of Python; run this with engine \"full\" \
             for the machine's Python — its variables are separate, so define what it needs again)"
        )
    } else {
        text
    }
}

/// Feeds monty's memory probe (`LIVE_MEMORY - BASELINE_MEMORY`) with this process's resident
/// size, from the first in-process run on: every 20 ms on a thread of its own.
fn watch_memory() {
    use std::sync::atomic::Ordering;
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        let baseline = resident_bytes().unwrap_or(0);
        monty_types::LIVE_MEMORY.store(baseline, Ordering::Relaxed);
        monty_types::BASELINE_MEMORY.store(baseline, Ordering::Relaxed);
        let spawned = std::thread::Builder::new().name("code-memory".into()).spawn(|| {
            loop {
                if let Some(resident) = resident_bytes() {
                    monty_types::LIVE_MEMORY.store(resident, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        if let Err(error) = spawned {
            tracing::warn!(%error, "no memory watcher: in-process code is held to its single-allocation cap only");
        }
    });
}

/// This process's resident size (`VmRSS`).
fn resident_bytes() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The most characters of a value shown (as the full engine's driver shows).
const VALUE_CAP: usize = 20_000;

/// A value's text, its middle cut past [`VALUE_CAP`] characters.
fn cut_value(text: String) -> String {
    let count = text.chars().count();
    if count <= VALUE_CAP {
        return text;
    }
    let head: String = text.chars().take(VALUE_CAP / 2).collect();
    let tail: String = text.chars().skip(count - VALUE_CAP / 2).collect();
    format!("{head} … [{} characters cut] … {tail}", count - VALUE_CAP)
}

/// How deep brackets nest in `code`, when deeper than allowed.
fn too_deep(code: &str) -> Option<usize> {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for byte in code.bytes() {
        match byte {
            b'(' | b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    (deepest > MAX_NESTING).then_some(deepest)
}

impl PrintWriterCallback for Captured {
    fn stdout_write(&mut self, output: Cow<'_, str>) -> Result<(), MontyException> {
        self.push(output.as_bytes());
        Ok(())
    }

    fn stdout_push(&mut self, end: char) -> Result<(), MontyException> {
        let mut buf = [0; 4];
        self.push(end.encode_utf8(&mut buf).as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> InProcess {
        InProcess::new(256 << 20)
    }

    #[tokio::test]
    async fn state_survives_between_runs_and_the_last_value_is_shown() {
        let engine = engine();
        let limit = Duration::from_secs(5);
        let first =
            engine.run("s", "def sq(x):\n    return x * x\nn = 12\nprint('hi', n)", limit, 4096).await;
        assert_eq!(first.error, None);
        assert_eq!(first.output.text(), "hi 12\n");
        let second = engine.run("s", "sq(n) + 2 ** 100", limit, 4096).await;
        assert_eq!(second.value.as_deref(), Some("1267650600228229401496703205520"), "{second:?}");
        // Another session has none of it.
        let other = engine.run("t", "n", limit, 4096).await;
        assert!(other.error.as_deref().unwrap_or("").contains("NameError"), "{other:?}");
        assert!(engine.reset("s"));
        let after = engine.run("s", "n", limit, 4096).await;
        assert!(after.error.as_deref().unwrap_or("").contains("NameError"), "{after:?}");
    }

    #[tokio::test]
    async fn loops_stop_at_the_time_limit_and_state_is_kept() {
        let engine = engine();
        engine.run("s", "keep = 7", Duration::from_secs(5), 4096).await;
        let started = Instant::now();
        let spin = engine.run("s", "while True:\n    pass", Duration::from_millis(200), 4096).await;
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(spin.error.as_deref().unwrap_or("").contains("time limit"), "{spin:?}");
        // Catching everything does not outlive the limit.
        let caught = engine
            .run(
                "s",
                "while True:\n    try:\n        pass\n    except BaseException:\n        pass",
                Duration::from_millis(200),
                4096,
            )
            .await;
        assert!(caught.error.is_some(), "{caught:?}");
        let kept = engine.run("s", "keep", Duration::from_secs(5), 4096).await;
        assert_eq!(kept.value.as_deref(), Some("7"));
    }

    #[tokio::test]
    async fn hostile_code_gets_errors_not_crashes() {
        let engine = engine();
        let limit = Duration::from_secs(5);
        let cases = [
            ("x = [0] * (10 ** 10)", "MemoryError"),
            ("s = 'a' * (10 ** 10)", "MemoryError"),
            ("def f(n):\n    return f(n + 1)\nf(0)", "RecursionError"),
            ("import os\nos.listdir('/')", ""),
            ("(7).bit_length()", "engine \"full\""),
            ("10 ** 10 ** 10", "MemoryError"),
            ("x = 2 ** (10 ** 10)", "MemoryError"),
            ("x = 7 << (10 ** 11)", "MemoryError"),
            ("open('/etc/passwd').read()", ""),
        ];
        for (code, needle) in cases {
            let outcome = engine.run("s", code, limit, 4096).await;
            let error = outcome.error.unwrap_or_default();
            assert!(!error.is_empty() && error.contains(needle), "{code}: {error}");
        }
        let nested = format!("{}1{}", "(".repeat(100_000), ")".repeat(100_000));
        let outcome = engine.run("s", &nested, limit, 4096).await;
        assert!(outcome.error.unwrap_or_default().contains("nested"), "a deep nesting is refused");
        let big = engine.run("s", "list(range(10 ** 6))", limit, 4096).await;
        let shown = big.value.unwrap_or_default();
        assert!(shown.chars().count() < 20_100 && shown.contains("characters cut"), "{}", shown.len());
        // The engine still answers.
        assert_eq!(engine.run("s", "1 + 1", limit, 4096).await.value.as_deref(), Some("2"));
    }

    #[tokio::test]
    async fn many_allocations_stop_at_the_memory_limit_too() {
        let engine = InProcess::new(512 << 20);
        let hog = "blobs = []\nwhile True:\n    blobs.append('a' * (64 * 1024 * 1024))";
        let outcome = engine.run("s", hog, Duration::from_secs(20), 4096).await;
        let error = outcome.error.unwrap_or_default();
        assert!(error.contains("MemoryError") || error.contains("memory limit"), "{error}");
        assert!(engine.reset("s"), "its state goes, and the memory with it");
        assert_eq!(engine.run("s", "1 + 1", Duration::from_secs(5), 4096).await.value.as_deref(), Some("2"));
    }

    #[tokio::test]
    async fn a_flood_of_output_keeps_its_head_and_tail() {
        let engine = engine();
        let outcome = engine
            .run("s", "for i in range(200000):\n    print('line', i)", Duration::from_secs(20), 2048)
            .await;
        assert_eq!(outcome.error, None);
        let text = outcome.output.text();
        assert!(text.starts_with("line 0\n"), "{}", &text[..40]);
        assert!(text.ends_with("line 199999\n"));
        assert!(outcome.output.dropped() > 1_000_000, "{}", outcome.output.dropped());
    }
}
