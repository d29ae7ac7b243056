//! The web tool through the real `toolhost-server` binary: on by default when `SEARXNG_URL` is
//! set, a search answered by a scripted SearXNG on loopback, a crawl of a page the operator
//! allowed with `TOOLHOST_FETCH_ALLOW`, and the loopback refusal without it. The same steps as
//! the README's.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use axum::extract::Query;
use axum::response::Html;
use axum::routing::get;
use serde_json::{Value, json};

struct Server {
    child: Child,
    base: String,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Server {
    async fn start(env: &[(&str, String)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let port = free_port();
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost-server"));
        command
            .env("TOOLHOST_LISTEN", format!("127.0.0.1:{port}"))
            .env("TOOLHOST_DATABASE_URL", format!("sqlite://{}/journal.db", data.display()))
            .env("TOOLHOST_STATE_DIR", &data)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // Nothing the machine's own environment configures reaches these servers.
        let inherited =
            builtin_tool_web_browsing::PROVIDER_VARIABLES.iter().flat_map(|row| row.iter()).chain(&[
                "SEARCH_PROVIDERS",
                "CRAWLERS",
                "JINA_READER_URL",
                "FIRECRAWL_API_KEY",
                "FIRECRAWL_BASE_URL",
                "TOOLHOST_FETCH_ALLOW",
                "TOOLHOST_ENABLE_TOOLS",
                "TOOLHOST_DISABLE_TOOLS",
            ]);
        for name in inherited {
            command.env_remove(name);
        }
        for (name, value) in env {
            command.env(name, value);
        }
        let child = command.spawn().unwrap();
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let server = Self { child, base: format!("http://127.0.0.1:{port}"), client, _dir: dir };
        for _ in 0..400 {
            if server.client.get(format!("{}/healthz", server.base)).send().await.is_ok() {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the server did not start");
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self.client.post(format!("{}{path}", self.base)).json(&body).send().await.unwrap();
        (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> Value {
        self.client.get(format!("{}{path}", self.base)).send().await.unwrap().json().await.unwrap()
    }

    async fn session(&self) -> String {
        let folder = self._dir.path().join("work");
        std::fs::create_dir_all(&folder).unwrap();
        let (status, view) = self.post("/v1/sessions", json!({"working_directory": folder})).await;
        assert_eq!(status, 201, "{view}");
        view["id"].as_str().unwrap().to_owned()
    }

    async fn call(&self, session: &str, id: &str, name: &str, arguments: Value) -> Value {
        let body = json!({"calls": [{"id": id, "name": name, "arguments": arguments.to_string()}]});
        let (status, response) = self.post(&format!("/v1/sessions/{session}/calls"), body).await;
        assert_eq!(status, 200, "{response}");
        response["results"][0].clone()
    }

    async fn names(&self, session: &str) -> Vec<String> {
        let catalogue = self.get(&format!("/v1/sessions/{session}/catalogue?provider=openai")).await;
        catalogue["functions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["function"]["name"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// A SearXNG stand-in (its JSON API) and a page to crawl, on one loopback port.
async fn searxng_and_site() -> String {
    let article = format!(
        "<html><head><title>Harbour dredging</title></head><body><nav>Home News Sport</nav><article>\
         <h1>Harbour dredging approved</h1>{}</article><footer>© Courier</footer></body></html>",
        "<p>The council approved the plan to deepen the inner harbour after a long night of debate, \
         with conditions on silt curtains and monitoring of the oyster beds.</p>"
            .repeat(6)
    );
    let app = axum::Router::new()
        .route(
            "/search",
            get(|Query(q): Query<std::collections::HashMap<String, String>>| async move {
                assert_eq!(q.get("format").map(String::as_str), Some("json"));
                axum::Json(json!({"query": q["q"], "results": [
                    {"url": "https://courier.example/harbour", "title": "Harbour dredging approved",
                     "content": "The council approved the plan…", "engine": "bing", "publishedDate": "2026-11-29T08:00:00"}]}))
            }),
        )
        .route("/article", get(move || std::future::ready(Html(article.clone()))));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

#[tokio::test]
async fn search_and_crawl_through_the_server() {
    let site = searxng_and_site().await;
    let server =
        Server::start(&[("SEARXNG_URL", site.clone()), ("TOOLHOST_FETCH_ALLOW", "127.0.0.1".into())]).await;
    let session = server.session().await;
    let names = server.names(&session).await;
    for api in ["search", "crawlSinglePage", "crawlMultiPages"] {
        assert!(names.iter().any(|n| n == api), "{api} is on by default with SEARXNG_URL set: {names:?}");
    }

    let result = server.call(&session, "call_1", "search", json!({"query": "harbour dredging"})).await;
    assert_eq!(result["status"], "executed", "{result}");
    let content = result["output"]["content"].as_str().unwrap();
    assert!(
        content.contains(r#"<item index="1" title="Harbour dredging approved" url="https://courier.example/harbour" publishedDate="2026-11-29T08:00:00">"#),
        "{content}"
    );
    assert_eq!(result["output"]["state"]["provider"], "searxng");

    let result =
        server.call(&session, "call_2", "crawlSinglePage", json!({"url": format!("{site}/article")})).await;
    assert_eq!(result["status"], "executed", "{result}");
    let content = result["output"]["content"].as_str().unwrap();
    assert!(content.contains("# Harbour dredging approved"), "{content}");
    assert!(content.contains("silt curtains") && !content.contains("Home News Sport"), "{content}");
}

#[tokio::test]
async fn without_a_provider_the_tool_is_off_and_loopback_stays_closed() {
    let site = searxng_and_site().await;
    let server = Server::start(&[]).await;
    let session = server.session().await;
    let names = server.names(&session).await;
    assert!(!names.iter().any(|n| n == "search"), "{names:?}");

    // Turned on without a provider: crawling works, loopback is refused, search says why.
    let server = Server::start(&[("TOOLHOST_ENABLE_TOOLS", "web-browsing".into())]).await;
    let session = server.session().await;
    let result =
        server.call(&session, "call_1", "crawlSinglePage", json!({"url": format!("{site}/article")})).await;
    assert_eq!(result["status"], "failed", "{result}");
    let content = result["output"]["content"].as_str().unwrap();
    assert!(content.contains("loopback address") && content.contains("TOOLHOST_FETCH_ALLOW"), "{content}");
    let result = server.call(&session, "call_2", "search", json!({"query": "anything"})).await;
    assert!(
        result["output"]["content"].as_str().unwrap().contains("no search provider is configured"),
        "{result}"
    );
}
