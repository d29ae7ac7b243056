//! A scripted model server on loopback that speaks the providers' real streaming wire formats:
//! OpenAI's chat completions (`chat.completion.chunk` deltas, `tool_calls[index]` fragments,
//! `[DONE]`) and Anthropic's messages (`message_start`, content blocks, `input_json_delta`,
//! `message_delta`, `message_stop`). Each request gets the next scripted response, turn by turn,
//! and every request body is kept for the test to assert on.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

/// One piece of a scripted response body.
#[derive(Debug, Clone)]
pub enum Chunk {
    /// Bytes sent as they are.
    Raw(String),
    /// A wait before the next piece.
    Pause(Duration),
    /// The connection stays open and silent until the client goes away.
    Hang,
}

/// One scripted response.
#[derive(Debug, Clone)]
pub struct Scripted {
    /// The HTTP status.
    pub status: u16,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// The body, piece by piece.
    pub body: Vec<Chunk>,
}

impl Scripted {
    /// An error response with a JSON body.
    pub fn error(status: u16, body: Value) -> Self {
        Self { status, headers: Vec::new(), body: vec![Chunk::Raw(body.to_string())] }
    }

    /// Adds a header.
    #[must_use]
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Cuts the body after `pieces` pieces, as a dropped connection would.
    #[must_use]
    pub fn cut_after(mut self, pieces: usize) -> Self {
        self.body.truncate(pieces);
        self
    }

    /// Stops after `pieces` pieces and stays open, silent.
    #[must_use]
    pub fn hang_after(mut self, pieces: usize) -> Self {
        self.body.truncate(pieces);
        self.body.push(Chunk::Hang);
        self
    }

    /// Waits `pause` between pieces.
    #[must_use]
    pub fn paced(mut self, pause: Duration) -> Self {
        self.body = self.body.into_iter().flat_map(|c| [c, Chunk::Pause(pause)]).collect();
        self
    }
}

/// A scripted call: id, function name, argument text.
pub type Call<'a> = (&'a str, &'a str, &'a str);

fn pieces(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(size.max(1)).map(|c| c.iter().collect()).collect()
}

/// An OpenAI-compatible streamed reply: reasoning, then text, then the calls, whose argument
/// fragments are interleaved across indexes, then the finish reason and a usage chunk.
pub fn openai_reply(reasoning: &str, text: &str, calls: &[Call<'_>], finish: &str) -> Scripted {
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0, "model": "scripted",
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }],
        })
    };
    let mut events = vec![chunk(json!({ "role": "assistant", "content": "" }), Value::Null)];
    for piece in pieces(reasoning, 6) {
        events.push(chunk(json!({ "reasoning_content": piece }), Value::Null));
    }
    for piece in pieces(text, 5) {
        events.push(chunk(json!({ "content": piece }), Value::Null));
    }
    for (index, (id, name, _)) in calls.iter().enumerate() {
        events.push(chunk(
            json!({ "tool_calls": [{ "index": index, "id": id, "type": "function",
                "function": { "name": name, "arguments": "" } }] }),
            Value::Null,
        ));
    }
    let fragments: Vec<Vec<String>> = calls.iter().map(|(_, _, args)| pieces(args, 7)).collect();
    let longest = fragments.iter().map(Vec::len).max().unwrap_or(0);
    for round in 0..longest {
        for (index, parts) in fragments.iter().enumerate() {
            if let Some(part) = parts.get(round) {
                events.push(chunk(
                    json!({ "tool_calls": [{ "index": index, "function": { "arguments": part } }] }),
                    Value::Null,
                ));
            }
        }
    }
    events.push(chunk(json!({}), finish.into()));
    events.push(json!({
        "id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0, "model": "scripted",
        "choices": [], "usage": { "prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120 },
    }));
    let mut body: Vec<Chunk> = events.into_iter().map(|e| Chunk::Raw(format!("data: {e}\n\n"))).collect();
    body.push(Chunk::Raw("data: [DONE]\n\n".into()));
    Scripted { status: 200, headers: vec![("content-type".into(), "text/event-stream".into())], body }
}

/// An Anthropic streamed reply: a thinking block (with its signature), a text block, then one
/// `tool_use` block per call with its input in `input_json_delta` pieces, then `message_delta`
/// with `stop_reason` and `message_stop`.
pub fn anthropic_reply(thinking: &str, text: &str, calls: &[Call<'_>], stop_reason: &str) -> Scripted {
    let mut events = vec![json!({
        "type": "message_start",
        "message": { "id": "msg_scripted", "type": "message", "role": "assistant", "model": "scripted",
            "content": [], "stop_reason": null, "usage": { "input_tokens": 100, "output_tokens": 1 } },
    })];
    let mut index = 0;
    if !thinking.is_empty() {
        events.push(json!({ "type": "content_block_start", "index": index,
            "content_block": { "type": "thinking", "thinking": "" } }));
        for piece in pieces(thinking, 6) {
            events.push(json!({ "type": "content_block_delta", "index": index,
                "delta": { "type": "thinking_delta", "thinking": piece } }));
        }
        events.push(json!({ "type": "content_block_delta", "index": index,
            "delta": { "type": "signature_delta", "signature": "c2lnbmVk" } }));
        events.push(json!({ "type": "content_block_stop", "index": index }));
        index += 1;
    }
    events.push(json!({ "type": "ping" }));
    if !text.is_empty() {
        events.push(json!({ "type": "content_block_start", "index": index,
            "content_block": { "type": "text", "text": "" } }));
        for piece in pieces(text, 5) {
            events.push(json!({ "type": "content_block_delta", "index": index,
                "delta": { "type": "text_delta", "text": piece } }));
        }
        events.push(json!({ "type": "content_block_stop", "index": index }));
        index += 1;
    }
    for (id, name, args) in calls {
        events.push(json!({ "type": "content_block_start", "index": index,
            "content_block": { "type": "tool_use", "id": id, "name": name, "input": {} } }));
        for piece in pieces(args, 7) {
            events.push(json!({ "type": "content_block_delta", "index": index,
                "delta": { "type": "input_json_delta", "partial_json": piece } }));
        }
        events.push(json!({ "type": "content_block_stop", "index": index }));
        index += 1;
    }
    events.push(json!({ "type": "message_delta",
        "delta": { "stop_reason": stop_reason, "stop_sequence": null }, "usage": { "output_tokens": 20 } }));
    events.push(json!({ "type": "message_stop" }));
    let body = events
        .into_iter()
        .map(|e| {
            let kind = e["type"].as_str().unwrap_or_default().to_owned();
            Chunk::Raw(format!("event: {kind}\ndata: {e}\n\n"))
        })
        .collect();
    Scripted { status: 200, headers: vec![("content-type".into(), "text/event-stream".into())], body }
}

/// What the server received.
#[derive(Debug, Clone)]
pub struct Received {
    /// The path.
    pub path: String,
    /// The headers, lowercased names.
    pub headers: Vec<(String, String)>,
    /// The JSON body.
    pub body: Value,
}

impl Received {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct Shared {
    script: Mutex<VecDeque<Scripted>>,
    received: Mutex<Vec<Received>>,
}

/// The scripted server; stops when dropped.
#[derive(Debug)]
pub struct ScriptedModel {
    base_url: String,
    shared: Arc<SharedHandle>,
    task: tokio::task::JoinHandle<()>,
}

struct SharedHandle(Shared);

impl std::fmt::Debug for SharedHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedHandle")
    }
}

impl ScriptedModel {
    /// Starts on a free loopback port with these responses, one per request, in order (then 500
    /// "script exhausted").
    pub async fn start(script: Vec<Scripted>) -> Self {
        let shared =
            Arc::new(SharedHandle(Shared { script: Mutex::new(script.into()), received: Mutex::default() }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
        let address = listener.local_addr().expect("the bound address");
        let app = axum::Router::new().fallback(respond).with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { base_url: format!("http://{address}/v1"), shared, task }
    }

    /// The base URL (`http://127.0.0.1:PORT/v1`).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Adds responses to the end of the script.
    pub fn push(&self, more: impl IntoIterator<Item = Scripted>) {
        self.shared.0.script.lock().unwrap_or_else(|p| p.into_inner()).extend(more);
    }

    /// Every request so far.
    pub fn received(&self) -> Vec<Received> {
        self.shared.0.received.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Responses not yet given.
    pub fn remaining(&self) -> usize {
        self.shared.0.script.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl Drop for ScriptedModel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn respond(
    State(shared): State<Arc<SharedHandle>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let shared = &shared.0;
    shared.received.lock().unwrap_or_else(|p| p.into_inner()).push(Received {
        path: uri.path().to_owned(),
        headers: headers
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or_default().to_owned()))
            .collect(),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    let next = shared.script.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
    let Some(scripted) = next else {
        return Response::builder()
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .body(Body::from(r#"{"error":{"message":"script exhausted"}}"#))
            .unwrap_or_default();
    };
    let mut builder = Response::builder().status(scripted.status);
    for (name, value) in &scripted.headers {
        builder = builder.header(name, value);
    }
    let stream = futures::stream::unfold(scripted.body.into_iter(), |mut rest| async move {
        loop {
            match rest.next()? {
                Chunk::Raw(text) => return Some((Ok::<_, std::io::Error>(text), rest)),
                Chunk::Pause(pause) => tokio::time::sleep(pause).await,
                Chunk::Hang => futures::future::pending::<()>().await,
            }
        }
    });
    builder.body(Body::from_stream(stream)).unwrap_or_default()
}

/// A scripted OpenAI-compatible embeddings endpoint (`POST /v1/embeddings`) whose vectors know
/// which words mean the same: each group of `concepts` is one dimension, and any other word
/// weighs lightly on one of 64 more (by a hash), so texts that share a concept are near even with
/// no word in common. Stops when dropped.
#[derive(Debug)]
pub struct ScriptedEmbeddings {
    base_url: String,
    requests: Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl ScriptedEmbeddings {
    /// Starts on a free loopback port, answering for `model` only (another model gets a 404).
    pub async fn start(model: &str, concepts: &[&[&str]]) -> Self {
        let concepts: Vec<Vec<String>> =
            concepts.iter().map(|group| group.iter().map(|w| (*w).to_owned()).collect()).collect();
        let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
        let address = listener.local_addr().expect("the bound address");
        let model = model.to_owned();
        let counter = requests.clone();
        let app = axum::Router::new().route(
            "/v1/embeddings",
            axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                let concepts = concepts.clone();
                let model = model.clone();
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async move {
                    if body["model"] != model.as_str() {
                        let error = json!({"error": {"message": format!("no model {}", body["model"])}});
                        return (axum::http::StatusCode::NOT_FOUND, axum::Json(error));
                    }
                    let inputs: Vec<String> = match &body["input"] {
                        Value::String(text) => vec![text.clone()],
                        Value::Array(items) => items.iter().map(|i| i.as_str().unwrap_or("").to_owned()).collect(),
                        _ => Vec::new(),
                    };
                    let data: Vec<Value> = inputs
                        .iter()
                        .enumerate()
                        .map(|(index, text)| json!({"object": "embedding", "index": index, "embedding": vector(&concepts, text)}))
                        .collect();
                    (axum::http::StatusCode::OK, axum::Json(json!({"object": "list", "data": data, "model": model})))
                }
            }),
        );
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { base_url: format!("http://{address}/v1"), requests, task }
    }

    /// The base URL (`http://127.0.0.1:PORT/v1`).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// How many requests it answered.
    pub fn requests(&self) -> usize {
        self.requests.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for ScriptedEmbeddings {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn vector(concepts: &[Vec<String>], text: &str) -> Vec<f32> {
    let mut vector = vec![0.0f32; concepts.len() + 64];
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        let word = word.to_lowercase();
        match concepts.iter().position(|group| group.contains(&word)) {
            Some(dimension) => vector[dimension] += 1.0,
            None => {
                let hash = word.bytes().fold(5381u32, |h, b| h.wrapping_mul(33) ^ u32::from(b));
                vector[concepts.len() + (hash % 64) as usize] += 0.1;
            }
        }
    }
    vector
}
