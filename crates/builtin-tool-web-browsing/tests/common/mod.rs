//! A scripted HTTP server on loopback: it answers with the replies it was given, in order (the
//! last one repeats), and records every request it received.
#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use builtin_tool_web_browsing::WebRuntime;
use builtin_tool_web_browsing::settings::WebSettings;
use serde_json::Value;
use tool_core::{CallContext, ToolOutput, ToolRuntime};

/// A reply: status, content type, body, extra headers.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub content_type: String,
    pub body: Vec<u8>,
    pub headers: Vec<(String, String)>,
}

impl Reply {
    pub fn json(status: u16, body: Value) -> Self {
        Self::bytes(status, "application/json", body.to_string().into_bytes())
    }

    pub fn text(status: u16, body: &str) -> Self {
        Self::bytes(status, "text/html", body.as_bytes().to_vec())
    }

    pub fn bytes(status: u16, content_type: &str, body: Vec<u8>) -> Self {
        Self { status, content_type: content_type.to_owned(), body, headers: Vec::new() }
    }

    pub fn redirect(location: &str) -> Self {
        let mut reply = Self::bytes(302, "text/plain", Vec::new());
        reply.headers.push(("location".into(), location.into()));
        reply
    }
}

/// A request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub raw_query: String,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

impl Seen {
    pub fn query(&self) -> serde_json::Map<String, Value> {
        url_pairs(&self.raw_query)
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

fn url_pairs(query: &str) -> serde_json::Map<String, Value> {
    let url = safe_fetch::Url::parse(&format!("http://x/?{query}")).unwrap();
    url.query_pairs().map(|(k, v)| (k.into_owned(), Value::String(v.into_owned()))).collect()
}

#[derive(Default)]
struct Inner {
    replies: Mutex<VecDeque<Reply>>,
    routes: Mutex<HashMap<String, Reply>>,
    seen: Mutex<Vec<Seen>>,
}

/// The server.
#[derive(Clone)]
pub struct Script {
    inner: Arc<Inner>,
    addr: std::net::SocketAddr,
}

impl Script {
    /// Answers every path with `replies` in order.
    pub async fn start(replies: Vec<Reply>) -> Script {
        Self::serve(replies, HashMap::new()).await
    }

    /// Answers each path with its own reply (others get 404).
    pub async fn routes(routes: Vec<(&str, Reply)>) -> Script {
        Self::serve(Vec::new(), routes.into_iter().map(|(p, r)| (p.to_owned(), r)).collect()).await
    }

    async fn serve(replies: Vec<Reply>, routes: HashMap<String, Reply>) -> Script {
        let inner = Arc::new(Inner {
            replies: Mutex::new(replies.into()),
            routes: Mutex::new(routes),
            seen: Mutex::new(Vec::new()),
        });
        let app = axum::Router::new().fallback(answer).with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Script { inner, addr }
    }

    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.inner.seen.lock().unwrap().clone()
    }
}

async fn answer(
    State(inner): State<Arc<Inner>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    request: Request,
) -> Response {
    let body: Bytes = axum::body::to_bytes(request.into_body(), 1 << 20).await.unwrap_or_default();
    inner.seen.lock().unwrap().push(Seen {
        method: method.to_string(),
        path: uri.path().to_owned(),
        raw_query: uri.query().unwrap_or("").to_owned(),
        headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned())).collect(),
        body: body.to_vec(),
    });
    let routed = inner.routes.lock().unwrap().get(uri.path()).cloned();
    let reply = routed.or_else(|| {
        let mut replies = inner.replies.lock().unwrap();
        if replies.len() > 1 { replies.pop_front() } else { replies.front().cloned() }
    });
    let reply = reply.unwrap_or_else(|| Reply::text(404, "not found"));
    let mut response = Response::builder()
        .status(StatusCode::from_u16(reply.status).unwrap())
        .header("content-type", reply.content_type);
    for (name, value) in reply.headers {
        response = response.header(name, value);
    }
    response.body(Body::from(reply.body)).unwrap()
}

/// Runs one call through a runtime built from `settings`.
pub async fn run(settings: WebSettings, api: &str, arguments: Value) -> ToolOutput {
    let runtime = WebRuntime::new(settings);
    runtime.execute(api, arguments, &CallContext::new("call-1", "session-1")).await
}
