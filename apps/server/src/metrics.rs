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
    calls: Mutex<BTreeMap<(String, String), u64>>,
    latency: Mutex<BTreeMap<String, Histogram>>,
    http_requests: AtomicU64,
    /// Client executors connected to this instance.
    pub devices: AtomicI64,
    /// Calls waiting on a client executor at this instance.
    pub device_waits: AtomicI64,
}

impl Metrics {
    /// Counts a settled call and its duration.
    pub fn call(&self, tool: &str, status: &str, seconds: f64) {
        {
            let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
            // Look up before inserting: the key's strings are allocated once per (tool, status).
            match calls.iter_mut().find(|((t, s), _)| t == tool && s == status) {
                Some((_, count)) => *count += 1,
                None => {
                    calls.insert((tool.to_owned(), status.to_owned()), 1);
                }
            }
        }
        let mut latency = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        if !latency.contains_key(tool) {
            latency.insert(tool.to_owned(), Histogram::default());
        }
        if let Some(histogram) = latency.get_mut(tool) {
            for (i, bound) in BUCKETS.iter().enumerate() {
                if seconds <= *bound {
                    histogram.counts[i] += 1;
                }
            }
            histogram.count += 1;
            histogram.sum += seconds;
        }
    }

    /// Counts an HTTP request.
    pub fn request(&self) {
        self.http_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// The exposition text; `pending_approvals` is read by the caller from the broker.
    pub fn render(&self, pending_approvals: usize, sessions: usize) -> String {
        let mut out = String::new();
        out.push_str("# HELP toolhost_calls_total Settled tool calls by tool and status.\n");
        out.push_str("# TYPE toolhost_calls_total counter\n");
        for ((tool, status), n) in self.calls.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(
                out,
                "toolhost_calls_total{{tool=\"{}\",status=\"{}\"}} {n}",
                esc(tool),
                esc(status)
            );
        }
        out.push_str("# HELP toolhost_call_duration_seconds Time from submission to result, by tool.\n");
        out.push_str("# TYPE toolhost_call_duration_seconds histogram\n");
        for (tool, h) in self.latency.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let tool = esc(tool);
            for (i, bound) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "toolhost_call_duration_seconds_bucket{{tool=\"{tool}\",le=\"{bound}\"}} {}",
                    h.counts[i]
                );
            }
            let _ = writeln!(
                out,
                "toolhost_call_duration_seconds_bucket{{tool=\"{tool}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(out, "toolhost_call_duration_seconds_sum{{tool=\"{tool}\"}} {}", h.sum);
            let _ = writeln!(out, "toolhost_call_duration_seconds_count{{tool=\"{tool}\"}} {}", h.count);
        }
        let gauges = [
            (
                "toolhost_pending_approvals",
                "Approvals waiting for a person at this instance.",
                pending_approvals as i64,
            ),
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
            ("toolhost_sessions_open", "Sessions held in memory at this instance.", sessions as i64),
        ];
        for (name, help, value) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
        }
        if let Some(bytes) = crate::memory::live_heap_bytes() {
            let name = "toolhost_heap_live_bytes";
            let help = "Bytes Rust code holds allocated (a server built with the heap-stats feature).";
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {bytes}");
        }
        let _ = writeln!(
            out,
            "# HELP toolhost_http_requests_total HTTP requests served.\n# TYPE toolhost_http_requests_total counter\ntoolhost_http_requests_total {}",
            self.http_requests.load(Ordering::Relaxed)
        );
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
    fn calls_are_counted_by_tool_and_status_with_cumulative_buckets() {
        let metrics = Metrics::default();
        metrics.call("local-system", "executed", 0.002);
        metrics.call("local-system", "executed", 0.2);
        metrics.call("local-system", "denied", 0.0001);
        let text = metrics.render(3, 1);
        assert!(text.contains("toolhost_calls_total{tool=\"local-system\",status=\"executed\"} 2"), "{text}");
        assert!(text.contains("toolhost_calls_total{tool=\"local-system\",status=\"denied\"} 1"));
        assert!(
            text.contains("toolhost_call_duration_seconds_bucket{tool=\"local-system\",le=\"0.0025\"} 2")
        );
        assert!(text.contains("toolhost_call_duration_seconds_bucket{tool=\"local-system\",le=\"+Inf\"} 3"));
        assert!(text.contains("toolhost_pending_approvals 3"));
    }
}
