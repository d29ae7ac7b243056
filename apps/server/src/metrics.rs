//! Prometheus metrics in the text exposition format, kept by hand (a few counters, one histogram
//! family and gauges do not justify a metrics framework).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0, 30.0];

#[derive(Debug, Default, Clone)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// The server's metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Settled calls by (tenant, tool, status).
    calls: Mutex<BTreeMap<(String, String, String), u64>>,
    /// Call durations by (tenant, tool).
    latency: Mutex<BTreeMap<(String, String), Histogram>>,
    /// HTTP responses by status code.
    http_responses: Mutex<BTreeMap<u16, u64>>,
    /// HTTP requests refused for their key (missing, malformed, unknown).
    pub refused_keys: AtomicU64,
    /// Client executors connected to this instance.
    pub devices: AtomicI64,
    /// Calls waiting on a client executor at this instance.
    pub device_waits: AtomicI64,
}

/// What the metrics page reads from elsewhere in the state.
#[derive(Debug, Default)]
pub struct Gauges {
    /// Approvals waiting for a person at this instance, by tenant.
    pub pending_approvals: BTreeMap<String, usize>,
    /// Sessions held in memory here.
    pub sessions: usize,
    /// Connections open, and closed to make room or for silence.
    pub connections: Option<(usize, u64, u64)>,
    /// Journal writes waiting in the outbox.
    pub outbox: usize,
    /// Whether the journal's last write failed.
    pub journal_down: bool,
    /// Events not sent to the other instances.
    pub events_dropped: u64,
}

impl Metrics {
    /// Counts a settled call of `tenant` and its duration.
    pub fn call(&self, tenant: &str, tool: &str, status: &str, seconds: f64) {
        {
            let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
            // Look up before inserting: the key's strings are allocated once per label set.
            match calls.iter_mut().find(|((n, t, s), _)| n == tenant && t == tool && s == status) {
                Some((_, count)) => *count += 1,
                None => {
                    calls.insert((tenant.to_owned(), tool.to_owned(), status.to_owned()), 1);
                }
            }
        }
        let mut latency = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        let histogram = match latency.iter_mut().find(|((n, t), _)| n == tenant && t == tool) {
            Some((_, histogram)) => histogram,
            None => latency.entry((tenant.to_owned(), tool.to_owned())).or_default(),
        };
        for (i, bound) in BUCKETS.iter().enumerate() {
            if seconds <= *bound {
                histogram.counts[i] += 1;
            }
        }
        histogram.count += 1;
        histogram.sum += seconds;
    }

    /// Counts an HTTP response.
    pub fn response(&self, status: u16) {
        *self.http_responses.lock().unwrap_or_else(|p| p.into_inner()).entry(status).or_default() += 1;
    }

    /// The exposition text.
    pub fn render(&self, gauges: &Gauges) -> String {
        let mut out = String::new();
        out.push_str("# HELP toolhost_calls_total Settled tool calls by tenant, tool and status.\n");
        out.push_str("# TYPE toolhost_calls_total counter\n");
        for ((tenant, tool, status), n) in self.calls.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(
                out,
                "toolhost_calls_total{{tenant=\"{}\",tool=\"{}\",status=\"{}\"}} {n}",
                esc(tenant),
                esc(tool),
                esc(status)
            );
        }
        out.push_str(
            "# HELP toolhost_call_duration_seconds Time from submission to result, by tenant and tool.\n",
        );
        out.push_str("# TYPE toolhost_call_duration_seconds histogram\n");
        for ((tenant, tool), h) in self.latency.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let labels = format!("tenant=\"{}\",tool=\"{}\"", esc(tenant), esc(tool));
            for (i, bound) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "toolhost_call_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {}",
                    h.counts[i]
                );
            }
            let _ =
                writeln!(out, "toolhost_call_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
            let _ = writeln!(out, "toolhost_call_duration_seconds_sum{{{labels}}} {}", h.sum);
            let _ = writeln!(out, "toolhost_call_duration_seconds_count{{{labels}}} {}", h.count);
        }
        out.push_str(
            "# HELP toolhost_pending_approvals Approvals waiting for a person at this instance, by tenant.\n",
        );
        out.push_str("# TYPE toolhost_pending_approvals gauge\n");
        let total: usize = gauges.pending_approvals.values().sum();
        for (tenant, n) in &gauges.pending_approvals {
            let _ = writeln!(out, "toolhost_pending_approvals{{tenant=\"{}\"}} {n}", esc(tenant));
        }
        let _ = writeln!(
            out,
            "# HELP toolhost_pending_approvals_total Approvals waiting for a person at this instance.\n\
             # TYPE toolhost_pending_approvals_total gauge\ntoolhost_pending_approvals_total {total}"
        );
        let (open, evicted, timed_out) = gauges.connections.unwrap_or_default();
        let gauges = [
            (
                "toolhost_client_executors_connected",
                "Client executors connected to this instance.",
                self.devices.load(Ordering::Relaxed),
            ),
            (
                "toolhost_client_executor_waits",
                "Calls waiting on a client executor at this instance.",
                self.device_waits.load(Ordering::Relaxed),
            ),
            ("toolhost_sessions_open", "Sessions held in memory at this instance.", gauges.sessions as i64),
            ("toolhost_connections_open", "HTTP connections open at this instance.", open as i64),
            (
                "toolhost_outbox_waiting",
                "Journal writes waiting in the outbox for the journal.",
                gauges.outbox as i64,
            ),
            (
                "toolhost_journal_down",
                "1 while the journal's last write failed.",
                i64::from(gauges.journal_down),
            ),
        ];
        for (name, help, value) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
        }
        let counters = [
            ("toolhost_connections_closed_total{reason=\"evicted\"}", evicted),
            ("toolhost_connections_closed_total{reason=\"header_timeout\"}", timed_out),
            ("toolhost_refused_keys_total", self.refused_keys.load(Ordering::Relaxed)),
        ];
        out.push_str("# HELP toolhost_connections_closed_total Connections the server closed: to make room or idle (evicted), or no request head in time.\n# TYPE toolhost_connections_closed_total counter\n");
        let _ = writeln!(out, "{} {}", counters[0].0, counters[0].1);
        let _ = writeln!(out, "{} {}", counters[1].0, counters[1].1);
        let _ = writeln!(
            out,
            "# HELP toolhost_refused_keys_total Requests refused for a missing or unknown key.\n# TYPE toolhost_refused_keys_total counter\n{} {}",
            counters[2].0, counters[2].1
        );
        if let Some(bytes) = crate::memory::live_heap_bytes() {
            let name = "toolhost_heap_live_bytes";
            let help = "Bytes Rust code holds allocated (a server built with the heap-stats feature).";
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {bytes}");
        }
        out.push_str("# HELP toolhost_http_responses_total HTTP responses by status code.\n# TYPE toolhost_http_responses_total counter\n");
        for (status, n) in self.http_responses.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(out, "toolhost_http_responses_total{{code=\"{status}\"}} {n}");
        }
        out
    }
}

fn esc(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_by_tenant_tool_and_status_with_cumulative_buckets() {
        let metrics = Metrics::default();
        metrics.call("acme", "local-system", "executed", 0.002);
        metrics.call("acme", "local-system", "executed", 0.2);
        metrics.call("acme", "local-system", "denied", 0.0001);
        metrics.call("globex", "local-system", "executed", 0.2);
        metrics.response(200);
        metrics.response(503);
        metrics.response(200);
        let gauges = Gauges {
            pending_approvals: [("acme".to_owned(), 2), ("globex".to_owned(), 1)].into(),
            ..Gauges::default()
        };
        let text = metrics.render(&gauges);
        assert!(
            text.contains(
                "toolhost_calls_total{tenant=\"acme\",tool=\"local-system\",status=\"executed\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains("toolhost_calls_total{tenant=\"acme\",tool=\"local-system\",status=\"denied\"} 1")
        );
        assert!(
            text.contains(
                "toolhost_calls_total{tenant=\"globex\",tool=\"local-system\",status=\"executed\"} 1"
            )
        );
        assert!(text.contains(
            "toolhost_call_duration_seconds_bucket{tenant=\"acme\",tool=\"local-system\",le=\"0.0025\"} 2"
        ));
        assert!(text.contains(
            "toolhost_call_duration_seconds_bucket{tenant=\"acme\",tool=\"local-system\",le=\"+Inf\"} 3"
        ));
        assert!(text.contains("toolhost_pending_approvals{tenant=\"acme\"} 2"));
        assert!(text.contains("toolhost_pending_approvals_total 3"));
        assert!(text.contains("toolhost_http_responses_total{code=\"200\"} 2"));
        assert!(text.contains("toolhost_http_responses_total{code=\"503\"} 1"));
    }
}
