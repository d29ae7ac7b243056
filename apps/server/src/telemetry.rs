//! Traces over OTLP: the server's spans — each request, and each call's stages through the
//! pipeline — sent as OpenTelemetry spans to a collector (`--otlp-endpoint`, or the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT`), off unless one is configured.
//!
//! A request that carries a W3C `traceparent` header joins its trace: the request's span is a
//! child of the caller's. Every call is a span `execute_tool {function}` (the GenAI semantic
//! conventions: `gen_ai.operation.name`, `gen_ai.tool.name`, `gen_ai.tool.call.id`) under the
//! request that submitted it, with a child per stage (`journal.propose`, `approval`, `run`,
//! `journal.settle`).
//!
//! The spans are the `tracing` spans the code already makes; this layer gives each an
//! OpenTelemetry identity and, when it closes, sends it in OTLP/HTTP's JSON encoding (`POST
//! {endpoint}/v1/traces`), batched once a second by a task of its own; a collector that is down
//! costs dropped spans (counted), never a request. It is written here rather than taken from
//! `opentelemetry-otlp`, whose HTTP exporter brings tonic, prost and a second reqwest (0.12) with
//! it — several megabytes and minutes of build for what is one JSON POST.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tracing::span::{Attributes, Id, Record};
use tracing::{Subscriber, field::Field};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// Spans waiting to be sent; past it they are dropped (and counted).
const QUEUE: usize = 8192;
/// The most spans one request to the collector carries.
const BATCH: usize = 512;

/// What a span is known by, and what it said.
#[derive(Debug, Clone)]
struct SpanData {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent: Option<[u8; 8]>,
    name: String,
    start: u64,
    attributes: Vec<(String, Value)>,
    error: Option<String>,
    /// Its trace came from a caller's `traceparent` (its own, or an ancestor's).
    joined: bool,
}

/// Collects a span's fields as OTLP attributes (and its name when it sets `otel.name`).
struct Fields<'a>(&'a mut SpanData);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.record_str(field, &format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "otel.name" => self.0.name = value.to_owned(),
            "otel.status_message" | "error" => self.0.error = Some(value.to_owned()),
            name => set(&mut self.0.attributes, name, json!({"stringValue": value})),
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        set(&mut self.0.attributes, field.name(), json!({"intValue": value.to_string()}));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        set(&mut self.0.attributes, field.name(), json!({"intValue": value.to_string()}));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        set(&mut self.0.attributes, field.name(), json!({"boolValue": value}));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        set(&mut self.0.attributes, field.name(), json!({"doubleValue": value}));
    }
}

fn set(attributes: &mut Vec<(String, Value)>, name: &str, value: Value) {
    match attributes.iter_mut().find(|(key, _)| key == name) {
        Some((_, old)) => *old = value,
        None => attributes.push((name.to_owned(), value)),
    }
}

fn now_nanos() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

fn random<const N: usize>() -> [u8; N] {
    use std::hash::{BuildHasher as _, Hasher as _};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut bytes = [0u8; N];
    for chunk in bytes.chunks_mut(8) {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(NEXT.fetch_add(1, Ordering::Relaxed));
        hasher.write_u64(now_nanos());
        let word = hasher.finish().to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
    // An id of zeros is invalid in OpenTelemetry.
    if bytes.iter().all(|b| *b == 0) {
        bytes[0] = 1;
    }
    bytes
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A W3C `traceparent` (`00-TRACEID-PARENTID-FLAGS`): the trace and the caller's span.
pub fn parse_traceparent(value: &str) -> Option<([u8; 16], [u8; 8])> {
    let mut parts = value.trim().split('-');
    let (version, trace, parent, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version.len() != 2 || version == "ff" || flags.len() != 2 || trace.len() != 32 || parent.len() != 16 {
        return None;
    }
    let decode = |text: &str, out: &mut [u8]| -> Option<()> {
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(())
    };
    let (mut trace_id, mut parent_id) = ([0u8; 16], [0u8; 8]);
    decode(trace, &mut trace_id)?;
    decode(parent, &mut parent_id)?;
    // All zeros is no trace.
    (trace_id.iter().any(|b| *b != 0) && parent_id.iter().any(|b| *b != 0)).then_some((trace_id, parent_id))
}

/// The layer that gives spans OpenTelemetry identities and sends them when they close.
#[derive(Debug)]
pub struct OtlpLayer {
    sender: mpsc::Sender<Value>,
    /// Spans not sent (the queue was full, or the collector refused them).
    pub dropped: Arc<AtomicU64>,
}

impl OtlpLayer {
    /// A layer sending to `endpoint` (`http://collector:4318`; `/v1/traces` is added unless
    /// the URL ends with it) as service `service`. Call within a Tokio runtime.
    pub fn new(endpoint: &str, service: &str) -> Self {
        let url = if endpoint.trim_end_matches('/').ends_with("/v1/traces") {
            endpoint.to_owned()
        } else {
            format!("{}/v1/traces", endpoint.trim_end_matches('/'))
        };
        let (sender, receiver) = mpsc::channel(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        tokio::spawn(export(url, service.to_owned(), receiver, dropped.clone()));
        Self { sender, dropped }
    }
}

impl<S> tracing_subscriber::Layer<S> for OtlpLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attributes: &Attributes<'_>, id: &Id, context: Context<'_, S>) {
        let Some(span) = context.span(id) else { return };
        let parent = span.parent().and_then(|parent| {
            parent.extensions().get::<SpanData>().map(|data| (data.trace_id, data.span_id, data.joined))
        });
        let mut data = SpanData {
            trace_id: parent.map_or_else(random, |(trace, _, _)| trace),
            span_id: random(),
            parent: parent.map(|(_, span, _)| span),
            name: attributes.metadata().name().to_owned(),
            start: now_nanos(),
            attributes: Vec::new(),
            error: None,
            joined: parent.is_some_and(|(_, _, joined)| joined),
        };
        attributes.record(&mut Fields(&mut data));
        adopt_remote_parent(&mut data);
        span.extensions_mut().insert(data);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, context: Context<'_, S>) {
        if let Some(span) = context.span(id)
            && let Some(data) = span.extensions_mut().get_mut::<SpanData>()
        {
            values.record(&mut Fields(data));
            adopt_remote_parent(data);
        }
    }

    fn on_close(&self, id: Id, context: Context<'_, S>) {
        let Some(span) = context.span(&id) else { return };
        let Some(data) = span.extensions_mut().remove::<SpanData>() else { return };
        let mut attributes: Vec<Value> = data
            .attributes
            .iter()
            .filter(|(key, _)| key != "traceparent")
            .map(|(key, value)| json!({"key": key, "value": value}))
            .collect();
        attributes.push(json!({"key": "code.namespace", "value": {"stringValue": span.metadata().target()}}));
        let mut otlp = json!({
            "traceId": hex(&data.trace_id),
            "spanId": hex(&data.span_id),
            "name": data.name,
            // A request is the server's side of a remote call; the rest is internal.
            "kind": if span.name() == "request" { 2 } else { 1 },
            "startTimeUnixNano": data.start.to_string(),
            "endTimeUnixNano": now_nanos().to_string(),
            "attributes": attributes,
            "status": match &data.error {
                Some(message) => json!({"code": 2, "message": message}),
                None => json!({"code": 0}),
            },
        });
        if let Some(parent) = data.parent {
            otlp["parentSpanId"] = json!(hex(&parent));
        }
        if self.sender.try_send(otlp).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A span that recorded a `traceparent` joins that trace as a child of the caller's span, unless
/// its trace was joined already (an HTTP request's header wins over what its body says): an MCP
/// request's `_meta.traceparent` rides inside an HTTP request that carried none.
fn adopt_remote_parent(data: &mut SpanData) {
    if data.joined {
        return;
    }
    let given = data.attributes.iter().find(|(key, _)| key == "traceparent");
    if let Some((trace, parent)) =
        given.and_then(|(_, value)| value["stringValue"].as_str()).and_then(parse_traceparent)
    {
        data.trace_id = trace;
        data.parent = Some(parent);
        data.joined = true;
    }
}

/// Sends finished spans in batches, once a second or every [`BATCH`] spans.
async fn export(url: String, service: String, mut receiver: mpsc::Receiver<Value>, dropped: Arc<AtomicU64>) {
    let client = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(10)).build();
    let Ok(client) = client else { return };
    let resource = json!({"attributes": [
        {"key": "service.name", "value": {"stringValue": service}},
        {"key": "service.version", "value": {"stringValue": env!("CARGO_PKG_VERSION")}},
        {"key": "host.name", "value": {"stringValue": journal::host_name()}},
    ]});
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        let deadline = tokio::time::sleep(Duration::from_secs(1));
        tokio::pin!(deadline);
        while batch.len() < BATCH {
            tokio::select! {
                span = receiver.recv() => match span {
                    Some(span) => batch.push(span),
                    None if batch.is_empty() => return,
                    None => break,
                },
                () = &mut deadline => break,
            }
        }
        if batch.is_empty() {
            continue;
        }
        let body = json!({"resourceSpans": [{
            "resource": resource,
            "scopeSpans": [{"scope": {"name": "toolhost-server", "version": env!("CARGO_PKG_VERSION")}, "spans": batch}],
        }]});
        let sent = batch.len() as u64;
        batch = Vec::with_capacity(BATCH);
        match client.post(&url).json(&body).send().await {
            Ok(response) if response.status().is_success() => {}
            Ok(response) => {
                dropped.fetch_add(sent, Ordering::Relaxed);
                tracing::debug!(status = %response.status(), "the collector refused spans");
            }
            Err(error) => {
                dropped.fetch_add(sent, Ordering::Relaxed);
                tracing::debug!(%error, "spans could not be sent to the collector");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_read_as_w3c_says() {
        let (trace, parent) =
            parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(hex(&trace), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(hex(&parent), "00f067aa0ba902b7");
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad}");
        }
    }
}
