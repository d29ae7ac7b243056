//! A plain HTTP/1.1 service on loopback (a thread per connection, no async runtime) that keeps
//! every request it receives and answers each as its handler says: what stands in for a remote
//! REST API, so a test sees exactly what left — the request line, the headers, the body.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::sync::{Arc, Mutex};

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Received {
    /// `GET /v1/pets?limit=2 HTTP/1.1`.
    pub line: String,
    /// Header names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    /// The body as text (lossy).
    pub body: String,
}

impl Received {
    /// The method.
    pub fn method(&self) -> &str {
        self.line.split(' ').next().unwrap_or_default()
    }

    /// The target (path and query).
    pub fn target(&self) -> &str {
        self.line.split(' ').nth(1).unwrap_or_default()
    }

    /// The first header of this (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// An answer: status code and reason, content type, body.
pub type Answer = (u16, &'static str, String);

/// The service: its port and what it has received.
#[derive(Debug, Clone)]
pub struct Service {
    port: u16,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Service {
    /// Starts one on a free loopback port; `answer` says what each request gets.
    pub fn start(answer: impl Fn(&Received) -> Answer + Send + 'static) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let kept = received.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let Some(request) = read_request(&stream) else { continue };
                kept.lock().unwrap_or_else(|p| p.into_inner()).push(request.clone());
                let (status, content_type, body) = answer(&request);
                let reason = match status {
                    200 => "OK",
                    201 => "Created",
                    204 => "No Content",
                    400 => "Bad Request",
                    401 => "Unauthorized",
                    404 => "Not Found",
                    _ => "Status",
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Self { port, received }
    }

    /// Answers every request with JSON of what it received (`line`, `headers`, `body`).
    pub fn echo() -> Self {
        Self::start(|request| (200, "application/json", echo_json(request)))
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Every request so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// What [`Service::echo`] answers: `{"line", "headers": {name: value}, "body"}`.
pub fn echo_json(request: &Received) -> String {
    let mut headers = String::from("{");
    for (i, (name, value)) in request.headers.iter().enumerate() {
        if i > 0 {
            headers.push(',');
        }
        headers.push_str(&format!("{}:{}", quote(name), quote(value)));
    }
    headers.push('}');
    format!("{{\"line\":{},\"headers\":{headers},\"body\":{}}}", quote(&request.line), quote(&request.body))
}

/// A JSON string.
fn quote(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn read_request(stream: &std::net::TcpStream) -> Option<Received> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).ok()? == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.trim().split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0; length.min(16 * 1024 * 1024)];
    reader.read_exact(&mut body).ok()?;
    Some(Received {
        line: line.trim().to_owned(),
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}
