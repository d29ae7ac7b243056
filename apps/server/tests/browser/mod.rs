//! A real browser for the console's tests: Debian's `chromium`, headless, driven over the W3C
//! WebDriver protocol through `chromedriver` on a loopback port. The protocol is a handful of
//! JSON requests, spoken here with the reqwest the tests already use (a WebDriver crate would
//! bring a second HTTP stack for the same few calls).
//!
//! `chromedriver` and `chromium` come from `.ci/run`; `TOOLHOST_CHROMEDRIVER` and
//! `TOOLHOST_CHROMIUM` name others.

#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The key W3C WebDriver names an element reference by.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A headless browser with one WebDriver session.
pub struct Browser {
    driver: Child,
    base: String,
    client: reqwest::Client,
    _profile: tempfile::TempDir,
}

/// An element on the page.
#[derive(Debug, Clone)]
pub struct Element(String);

impl Browser {
    /// Starts `chromedriver` and a headless `chromium` session.
    pub async fn start() -> Self {
        let driver_path = std::env::var("TOOLHOST_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
        let chromium = std::env::var("TOOLHOST_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        let port = test_support::free_port();
        let driver = Command::new(&driver_path)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("{driver_path} did not start ({e}): install chromium-driver (.ci/run does)")
            });
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let status = format!("http://127.0.0.1:{port}/status");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(response) = client.get(&status).send().await
                && let Ok(body) = response.json::<Value>().await
                && body["value"]["ready"] == true
            {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver did not become ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile = tempfile::tempdir().unwrap();
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "pageLoadStrategy": "normal",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--no-proxy-server", "--no-first-run", "--disable-extensions", "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            },
        }}});
        let response: Value = client
            .post(format!("http://127.0.0.1:{port}/session"))
            .json(&capabilities)
            .send()
            .await
            .expect("chromedriver answers")
            .json()
            .await
            .unwrap();
        let session = response["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no browser session: {response}"))
            .to_owned();
        Self { driver, base: format!("http://127.0.0.1:{port}/session/{session}"), client, _profile: profile }
    }

    async fn command(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response: Value = request.send().await.expect("chromedriver answers").json().await.unwrap();
        response["value"].clone()
    }

    async fn checked(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let value = self.command(method, path, body).await;
        if let Some(error) = value.get("error") {
            panic!("WebDriver {path}: {error}: {}", value["message"]);
        }
        value
    }

    /// Opens `url` and waits for it to load.
    pub async fn goto(&self, url: &str) {
        self.checked(reqwest::Method::POST, "/url", Some(json!({"url": url}))).await;
    }

    /// The page's address now.
    pub async fn url(&self) -> String {
        self.checked(reqwest::Method::GET, "/url", None).await.as_str().unwrap_or_default().to_owned()
    }

    /// The page's markup now.
    pub async fn source(&self) -> String {
        self.checked(reqwest::Method::GET, "/source", None).await.as_str().unwrap_or_default().to_owned()
    }

    /// The first element `css` matches, if one does now.
    pub async fn find(&self, css: &str) -> Option<Element> {
        let value = self
            .command(reqwest::Method::POST, "/element", Some(json!({"using": "css selector", "value": css})))
            .await;
        value.get(ELEMENT).and_then(Value::as_str).map(|id| Element(id.to_owned()))
    }

    /// Every element `css` matches now.
    pub async fn find_all(&self, css: &str) -> Vec<Element> {
        let value = self
            .checked(reqwest::Method::POST, "/elements", Some(json!({"using": "css selector", "value": css})))
            .await;
        value
            .as_array()
            .map(|items| {
                items.iter().filter_map(|i| i[ELEMENT].as_str()).map(|id| Element(id.to_owned())).collect()
            })
            .unwrap_or_default()
    }

    /// Waits up to `within` for `css` to match; panics with the page when it never does.
    pub async fn wait_for(&self, css: &str, within: Duration) -> Element {
        let deadline = Instant::now() + within;
        loop {
            if let Some(element) = self.find(css).await {
                return element;
            }
            if Instant::now() > deadline {
                panic!("nothing matched {css} within {within:?}; the page:\n{}", self.source().await);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits up to `within` until `css` matches nothing.
    pub async fn wait_gone(&self, css: &str, within: Duration) {
        let deadline = Instant::now() + within;
        while self.find(css).await.is_some() {
            assert!(Instant::now() < deadline, "{css} still there after {within:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Clicks an element.
    pub async fn click(&self, element: &Element) {
        self.checked(reqwest::Method::POST, &format!("/element/{}/click", element.0), Some(json!({}))).await;
    }

    /// Types into an element.
    pub async fn type_into(&self, element: &Element, text: &str) {
        self.checked(
            reqwest::Method::POST,
            &format!("/element/{}/value", element.0),
            Some(json!({"text": text})),
        )
        .await;
    }

    /// Presses keys on whatever has the focus (`\u{E007}` is Enter).
    pub async fn press(&self, keys: &str) {
        let mut actions = Vec::new();
        for key in keys.chars() {
            actions.push(json!({"type": "keyDown", "value": key.to_string()}));
            actions.push(json!({"type": "keyUp", "value": key.to_string()}));
        }
        self.checked(
            reqwest::Method::POST,
            "/actions",
            Some(json!({"actions": [{"type": "key", "id": "keyboard", "actions": actions}]})),
        )
        .await;
        self.command(reqwest::Method::DELETE, "/actions", None).await;
    }

    /// An element's text as shown.
    pub async fn text(&self, element: &Element) -> String {
        self.checked(reqwest::Method::GET, &format!("/element/{}/text", element.0), None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// An element's attribute.
    pub async fn attribute(&self, element: &Element, name: &str) -> Option<String> {
        self.checked(reqwest::Method::GET, &format!("/element/{}/attribute/{name}", element.0), None)
            .await
            .as_str()
            .map(str::to_owned)
    }

    /// Runs `script` (a function body; `arguments` holds `args`) and returns what it returns.
    pub async fn execute(&self, script: &str, args: Value) -> Value {
        self.checked(reqwest::Method::POST, "/execute/sync", Some(json!({"script": script, "args": args})))
            .await
    }

    /// A cookie's value for the page's site (HttpOnly ones too: the driver sees them all).
    pub async fn cookie(&self, name: &str) -> Option<String> {
        let value = self.command(reqwest::Method::GET, &format!("/cookie/{name}"), None).await;
        value.get("value").and_then(Value::as_str).map(str::to_owned)
    }

    /// A PNG of the window.
    pub async fn screenshot(&self) -> Vec<u8> {
        use base64::Engine as _;
        let encoded = self.checked(reqwest::Method::GET, "/screenshot", None).await;
        base64::engine::general_purpose::STANDARD.decode(encoded.as_str().unwrap_or_default()).unwrap()
    }

    /// Resizes the window.
    pub async fn resize(&self, width: u32, height: u32) {
        self.checked(reqwest::Method::POST, "/window/rect", Some(json!({"width": width, "height": height})))
            .await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ending the session closes the browser (killing the driver alone would leave it
        // running); a plain blocking request, since a drop cannot wait on the runtime.
        use std::io::{Read as _, Write as _};
        if let Some(rest) = self.base.strip_prefix("http://")
            && let Some((address, path)) = rest.split_once('/')
            && let Ok(mut stream) = std::net::TcpStream::connect(address)
        {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            let request = format!("DELETE /{path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
            if stream.write_all(request.as_bytes()).is_ok() {
                let mut answer = Vec::new();
                let _ = stream.read_to_end(&mut answer);
            }
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
