//! Running one hook: a command in its own process group, or a webhook.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// The most of a hook's standard output or error that is read (the rest is drained and dropped).
pub const MAX_OUTPUT: usize = 256 * 1024;

/// How a hook run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code (a webhook that answered 2xx counts as 0).
    Code(i32),
    /// It did not finish on its own: could not start, timed out, was killed, or its webhook
    /// failed.
    Failed(String),
}

/// What a hook run gave back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    /// How it ended.
    pub exit: Exit,
    /// Its standard output (a webhook's response body).
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

impl Ran {
    fn failed(why: String) -> Self {
        Self { exit: Exit::Failed(why), stdout: String::new(), stderr: String::new() }
    }
}

/// Kills a process group when dropped, unless disarmed: a hook that outlives its time, or whose
/// caller gave up on it, leaves nothing running.
struct GroupKill(Option<i32>);

impl Drop for GroupKill {
    fn drop(&mut self) {
        if let Some(group) = self.0.take() {
            let _ = computer_runtime::process::signal_group(group, libc::SIGKILL);
        }
    }
}

/// Reads `reader` into `into`, up to [`MAX_OUTPUT`] (the rest is drained and dropped).
async fn read_capped(reader: Option<impl AsyncRead + Unpin>, into: Arc<Mutex<Vec<u8>>>) {
    let Some(mut reader) = reader else { return };
    let mut chunk = [0u8; 8192];
    loop {
        match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let mut kept = into.lock().unwrap_or_else(|p| p.into_inner());
                let room = MAX_OUTPUT.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
    }
}

/// How long the output of a hook that exited is still read (a child it left running may hold
/// its pipes open).
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(200);

/// Runs `command` with `sh -c` in `cwd`, with exactly `env`, `input` on its standard input, for
/// at most `timeout`. The command gets its own process group, killed whole at the timeout.
pub async fn command(
    command: &str,
    input: &[u8],
    cwd: Option<&Path>,
    env: &[(String, String)],
    timeout: Duration,
) -> Ran {
    let mut process = tokio::process::Command::new("/bin/sh");
    process
        .arg("-c")
        .arg(command)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(cwd) = cwd.filter(|cwd| cwd.is_dir()) {
        process.current_dir(cwd);
    }
    let mut child = match process.spawn() {
        Ok(child) => child,
        Err(error) => return Ran::failed(format!("could not start: {error}")),
    };
    let mut guard = GroupKill(child.id().and_then(|id| i32::try_from(id).ok()));
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let write = async move {
        if let Some(mut stdin) = stdin {
            // A hook that does not read its input closes the pipe: not an error.
            let _ = stdin.write_all(input).await;
            let _ = stdin.shutdown().await;
        }
    };
    let (out, err) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(Vec::new())));
    let readers = futures::future::join(read_capped(stdout, out.clone()), read_capped(stderr, err.clone()));
    let whole = async {
        tokio::pin!(readers);
        let ((), status) = tokio::join!(write, async {
            let status = child.wait().await;
            // The hook exited: what it wrote is read, but a child it left holding the pipes does
            // not hold the answer (nor count against the time).
            let _ = tokio::time::timeout(DRAIN_AFTER_EXIT, &mut readers).await;
            status
        });
        status
    };
    let text = |buffer: &Arc<Mutex<Vec<u8>>>| {
        String::from_utf8_lossy(&buffer.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    };
    match tokio::time::timeout(timeout, whole).await {
        Ok(Ok(status)) => {
            guard.0 = None;
            let exit = match status.code() {
                Some(code) => Exit::Code(code),
                None => Exit::Failed("was killed by a signal".into()),
            };
            Ran { exit, stdout: text(&out), stderr: text(&err) }
        }
        Ok(Err(error)) => Ran::failed(format!("could not be waited for: {error}")),
        Err(_) => Ran::failed(format!("timed out after {} s and was stopped", timeout.as_secs_f64())),
    }
}

/// `$NAME` and `${NAME}` in `value` replaced by the environment's value, for the names in
/// `allowed` only (Claude Code's `allowedEnvVars`); others are left as written.
pub fn interpolate(value: &str, allowed: &[String], lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, used) = if let Some(inner) = after.strip_prefix('{') {
            match inner.find('}') {
                Some(end) => (&inner[..end], end + 2),
                None => ("", 0),
            }
        } else {
            let end = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
            (&after[..end], end)
        };
        match (allowed.iter().any(|a| a == name), lookup(name)) {
            (true, Some(found)) if !name.is_empty() => out.push_str(&found),
            _ => out.push_str(&rest[at..at + 1 + used]),
        }
        rest = &after[used..];
    }
    out.push_str(rest);
    out
}

/// POSTs `input` to `url` through the SSRF-safe fetcher, for at most `timeout`.
#[cfg(feature = "http")]
pub async fn http(
    fetcher: &safe_fetch::Fetcher,
    url: &str,
    headers: &[(String, String)],
    input: Vec<u8>,
    timeout: Duration,
) -> Ran {
    let mut request = safe_fetch::Request::post(url, "application/json", input);
    for (name, value) in headers {
        match safe_fetch::header::HeaderName::from_bytes(name.as_bytes()) {
            Ok(name) => request = request.header(name, value),
            Err(_) => return Ran::failed(format!("has a header name that is not valid: {name}")),
        }
    }
    match tokio::time::timeout(timeout, fetcher.send(request)).await {
        Err(_) => Ran::failed(format!("timed out after {} s", timeout.as_secs_f64())),
        Ok(Err(error)) => Ran::failed(format!("could not be reached: {error}")),
        Ok(Ok(response)) if response.status.is_success() => Ran {
            exit: Exit::Code(0),
            stdout: String::from_utf8_lossy(&response.body[..response.body.len().min(MAX_OUTPUT)])
                .into_owned(),
            stderr: String::new(),
        },
        Ok(Ok(response)) => Ran::failed(format!("answered {}", response.status)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allowed_variables_are_put_into_headers() {
        let env = |name: &str| (name == "TOKEN" || name == "OTHER").then(|| format!("<{name}>"));
        let allowed = vec!["TOKEN".to_owned()];
        assert_eq!(interpolate("Bearer $TOKEN", &allowed, env), "Bearer <TOKEN>");
        assert_eq!(interpolate("x${TOKEN}y", &allowed, env), "x<TOKEN>y");
        assert_eq!(interpolate("$OTHER and $ alone", &allowed, env), "$OTHER and $ alone");
        assert_eq!(interpolate("${TOKEN", &allowed, env), "${TOKEN");
    }

    #[tokio::test]
    async fn a_command_gets_its_input_and_env_and_its_exit_code_counts() {
        let env =
            vec![("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()), ("X".into(), "1".into())];
        let ran =
            command("cat; echo \"x=$X\" >&2; exit 3", b"hello", None, &env, Duration::from_secs(10)).await;
        assert_eq!(ran.exit, Exit::Code(3));
        assert_eq!(ran.stdout, "hello");
        assert_eq!(ran.stderr.trim(), "x=1");
    }

    #[tokio::test]
    async fn a_hook_that_leaves_a_child_holding_its_output_answers_when_it_exits() {
        let env = vec![("PATH".to_owned(), std::env::var("PATH").unwrap_or_default())];
        let started = std::time::Instant::now();
        let ran = command("sleep 5 & echo done", b"", None, &env, Duration::from_secs(30)).await;
        assert_eq!(ran.exit, Exit::Code(0), "{ran:?}");
        assert_eq!(ran.stdout.trim(), "done");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "it waited for the child: {:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn a_hook_past_its_time_is_stopped_with_what_it_started() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("late");
        let env = vec![("PATH".to_owned(), std::env::var("PATH").unwrap_or_default())];
        let script = format!("(sleep 2; touch {}) & sleep 30", marker.display());
        let started = std::time::Instant::now();
        let ran = command(&script, b"", None, &env, Duration::from_millis(300)).await;
        assert!(matches!(ran.exit, Exit::Failed(ref why) if why.contains("timed out")), "{ran:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(!marker.exists(), "the hook's background process outlived it");
    }
}
