//! Real requests, to loopback servers started here and allowed by each test's own allow-list.
//! Every address the policy must refuse is either never connected to (a literal refused before
//! any connection) or a loopback trap (`127.0.0.2`) that counts the connections it receives: the
//! tests assert it received none.

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use safe_fetch::{AllowList, Blocked, FetchError, Fetcher, Limits, Lookup, Policy, Range, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    headers: HashMap<String, String>,
}

/// A scripted HTTP/1.1 server on a loopback address; one response per connection.
struct Server {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    connections: Arc<AtomicUsize>,
}

impl Server {
    async fn start(ip: [u8; 4], routes: fn(&str, u16) -> Reply) -> Server {
        Self::start_at(ip, 0, routes).await
    }

    async fn start_at(ip: [u8; 4], port: u16, routes: fn(&str, u16) -> Reply) -> Server {
        let listener = TcpListener::bind((IpAddr::from(ip), port)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let (seen2, connections2) = (seen.clone(), connections.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                connections2.fetch_add(1, Ordering::SeqCst);
                let seen = seen2.clone();
                tokio::spawn(async move {
                    let _ = serve(stream, seen, routes, addr.port()).await;
                });
            }
        });
        Server { addr, seen, connections }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// What a route answers.
enum Reply {
    Ok(&'static str),
    Redirect(u16, String),
    Raw(Vec<u8>, Vec<u8>),
    Slow,
}

async fn serve(
    mut stream: TcpStream,
    seen: Arc<Mutex<Vec<Seen>>>,
    routes: fn(&str, u16) -> Reply,
    port: u16,
) -> io::Result<()> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await? == 0 {
            return Ok(());
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let mut lines = head.lines();
    let path = lines.next().unwrap_or("").split(' ').nth(1).unwrap_or("/").to_owned();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    seen.lock().unwrap().push(Seen { path: path.clone(), headers });
    match routes(&path, port) {
        Reply::Ok(body) => {
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(response.as_bytes()).await?;
        }
        Reply::Redirect(status, location) => {
            let response = format!(
                "HTTP/1.1 {status} Moved\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
            stream.write_all(response.as_bytes()).await?;
        }
        Reply::Raw(extra_headers, body) => {
            let mut response =
                format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n", body.len())
                    .into_bytes();
            response.extend_from_slice(&extra_headers);
            response.extend_from_slice(b"\r\n");
            stream.write_all(&response).await?;
            // Written in pieces so the client reads (and must stop) as it goes.
            for piece in body.chunks(64 * 1024) {
                stream.write_all(piece).await?;
            }
        }
        Reply::Slow => {
            stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n")
                .await?;
            loop {
                stream.write_all(b".").await?;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    stream.shutdown().await
}

fn routes(path: &str, port: u16) -> Reply {
    match path {
        "/" | "/page" => Reply::Ok("hello from loopback"),
        "/to-private" => Reply::Redirect(302, "http://10.0.0.1/admin".into()),
        "/to-metadata" => Reply::Redirect(301, "http://169.254.169.254/latest/meta-data/".into()),
        "/to-decimal" => Reply::Redirect(307, "http://2130706434/".into()),
        "/to-file" => Reply::Redirect(302, "file:///etc/passwd".into()),
        "/relative" => Reply::Redirect(302, "/page".into()),
        "/post-307" => Reply::Redirect(307, "/page".into()),
        "/chain" => Reply::Redirect(301, "/relative".into()),
        "/bad-location" => Reply::Redirect(302, "http://[zz/".into()),
        path if path.starts_with("/loop") => Reply::Redirect(302, format!("{path}x")),
        "/huge" => Reply::Raw(b"content-type: text/plain\r\n".to_vec(), vec![b'a'; 3 * 1024 * 1024]),
        "/bomb" => Reply::Raw(b"content-type: text/html\r\ncontent-encoding: gzip\r\n".to_vec(), gzip_bomb()),
        "/small-gzip" => Reply::Raw(b"content-encoding: gzip\r\n".to_vec(), gzip(b"squeezed text")),
        "/slow" => Reply::Slow,
        other => match other.strip_prefix("/to-port/") {
            Some(rest) => {
                let (host, target_port) = rest.split_once('/').unwrap_or((rest, "80"));
                let _ = port;
                Reply::Redirect(302, format!("http://{host}:{target_port}/page"))
            }
            None => Reply::Ok("unknown"),
        },
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

/// 64 MiB of zeros, about 64 KB compressed.
fn gzip_bomb() -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![0u8; 1024 * 1024];
    for _ in 0..64 {
        encoder.write_all(&zeros).unwrap();
    }
    encoder.finish().unwrap()
}

/// A resolver scripted per name: each lookup takes the next answer, the last one repeats.
#[derive(Default)]
struct Scripted {
    answers: Mutex<HashMap<String, Vec<Vec<IpAddr>>>>,
    lookups: AtomicUsize,
}

impl Scripted {
    fn answer(self, name: &str, answers: Vec<Vec<[u8; 4]>>) -> Self {
        let answers = answers.into_iter().map(|a| a.into_iter().map(IpAddr::from).collect()).collect();
        self.answers.lock().unwrap().insert(name.to_owned(), answers);
        self
    }
}

impl Lookup for Scripted {
    fn lookup(&self, host: &str) -> BoxFuture<'static, io::Result<Vec<IpAddr>>> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        let mut answers = self.answers.lock().unwrap();
        let result = match answers.get_mut(host) {
            Some(list) if list.len() > 1 => Ok(list.remove(0)),
            Some(list) => Ok(list[0].clone()),
            None => Err(io::Error::new(io::ErrorKind::NotFound, "no such name in this test")),
        };
        Box::pin(async move { result })
    }
}

fn fetcher(allow: &[&str], lookup: Arc<dyn Lookup>, limits: Limits) -> Fetcher {
    let policy = Policy::new(AllowList::parse(allow).unwrap()).with_hint("the test's allow-list");
    Fetcher::with_lookup(policy, limits, lookup).unwrap()
}

fn loopback_only() -> Fetcher {
    fetcher(&["127.0.0.1"], Arc::new(Scripted::default()), Limits::default())
}

fn blocked_range(error: &FetchError) -> Range {
    match error {
        FetchError::Blocked { blocked: Blocked::Address { range, .. }, .. } => *range,
        other => panic!("expected an address refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn loopback_is_refused_by_default_and_reached_when_allowed() {
    let server = Server::start([127, 0, 0, 1], routes).await;
    let closed =
        Fetcher::with_lookup(Policy::default(), Limits::default(), Arc::new(Scripted::default())).unwrap();
    let error = closed.get(&server.url("/page")).await.unwrap_err();
    assert_eq!(blocked_range(&error), Range::Loopback);
    assert!(error.to_string().contains("127.0.0.1 is a loopback address"), "{error}");
    assert_eq!(server.connections.load(Ordering::SeqCst), 0);

    let response = loopback_only().get(&server.url("/page")).await.unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(&response.body[..], b"hello from loopback");
    assert_eq!(response.media_type().as_deref(), Some("text/plain"));
    assert_eq!(response.charset().as_deref(), Some("utf-8"));
    let seen = server.seen();
    assert!(seen[0].headers["user-agent"].contains("Toolhost"));
}

#[tokio::test]
async fn every_redirect_hop_is_checked() {
    let server = Server::start([127, 0, 0, 1], routes).await;
    let trap = Server::start([127, 0, 0, 2], routes).await;
    let fetch = loopback_only();
    let error = fetch.get(&server.url("/to-private")).await.unwrap_err();
    assert_eq!(blocked_range(&error), Range::Private);
    assert!(error.to_string().starts_with("http://10.0.0.1/admin was not fetched"), "{error}");
    assert_eq!(blocked_range(&fetch.get(&server.url("/to-metadata")).await.unwrap_err()), Range::Metadata);
    assert_eq!(blocked_range(&fetch.get(&server.url("/to-decimal")).await.unwrap_err()), Range::Loopback);
    let error = fetch.get(&server.url("/to-file")).await.unwrap_err();
    assert!(matches!(error, FetchError::Blocked { blocked: Blocked::Scheme { .. }, .. }), "{error:?}");
    let to_trap = server.url(&format!("/to-port/127.0.0.2/{}", trap.addr.port()));
    assert_eq!(blocked_range(&fetch.get(&to_trap).await.unwrap_err()), Range::Loopback);
    assert_eq!(trap.connections.load(Ordering::SeqCst), 0, "the trap was never connected to");

    let response = fetch.get(&server.url("/chain")).await.unwrap();
    assert_eq!(&response.body[..], b"hello from loopback");
    assert_eq!(response.url.as_str(), server.url("/page"));
    let hops: Vec<String> = response.redirects.iter().map(|u| u.path().to_owned()).collect();
    assert_eq!(hops, ["/chain", "/relative"]);

    let error = fetch.get(&server.url("/loop")).await.unwrap_err();
    assert!(matches!(error, FetchError::TooManyRedirects { limit: 5, .. }), "{error:?}");
    assert_eq!(server.seen().iter().filter(|s| s.path.starts_with("/loop")).count(), 6);
}

#[tokio::test]
async fn a_redirect_to_another_origin_drops_credentials() {
    let first = Server::start([127, 0, 0, 1], routes).await;
    let second = Server::start([127, 0, 0, 1], routes).await;
    let fetch = loopback_only();
    let request = Request::get(first.url(&format!("/to-port/127.0.0.1/{}", second.addr.port())))
        .header(reqwest::header::AUTHORIZATION, "Bearer secret")
        .header(reqwest::header::HeaderName::from_static("x-api-key"), "secret")
        .header(reqwest::header::ACCEPT, "text/html");
    let response = fetch.send(request).await.unwrap();
    assert_eq!(response.status, 200);
    let at_first = &first.seen()[0].headers;
    assert_eq!(at_first["authorization"], "Bearer secret");
    let at_second = &second.seen()[0].headers;
    assert!(
        !at_second.contains_key("authorization") && !at_second.contains_key("x-api-key"),
        "{at_second:?}"
    );
    assert_eq!(at_second["accept"], "text/html");

    let same_origin = fetch
        .send(Request::get(first.url("/relative")).header(reqwest::header::AUTHORIZATION, "Bearer kept"))
        .await
        .unwrap();
    assert_eq!(same_origin.status, 200);
    assert_eq!(first.seen().last().unwrap().headers["authorization"], "Bearer kept");
}

#[tokio::test]
async fn a_name_that_rebinds_is_pinned_to_what_was_checked() {
    // The trap and the real server share a port, so the second answer would reach the trap if
    // the connection were not pinned to the checked address.
    let trap = Server::start([127, 0, 0, 2], routes).await;
    let server = Server::start_at([127, 0, 0, 1], trap.addr.port(), routes).await;
    let lookup =
        Arc::new(Scripted::default().answer("rebind.test", vec![vec![[127, 0, 0, 1]], vec![[127, 0, 0, 2]]]));
    let fetch = fetcher(&["127.0.0.1"], lookup.clone(), Limits::default());
    let url = format!("http://rebind.test:{}/page", trap.addr.port());
    assert_eq!(fetch.get(&url).await.unwrap().status, 200, "the first answer is allowed");
    let error = fetch.get(&url).await.unwrap_err();
    assert_eq!(blocked_range(&error), Range::Loopback);
    assert!(error.to_string().contains("rebind.test resolves to a loopback address"), "{error}");
    assert_eq!(lookup.lookups.load(Ordering::SeqCst), 2);
    assert_eq!(trap.connections.load(Ordering::SeqCst), 0);

    // A name answering with both: only the allowed address is handed to the connector.
    let lookup =
        Arc::new(Scripted::default().answer("both.test", vec![vec![[127, 0, 0, 2], [127, 0, 0, 1]]]));
    let fetch = fetcher(&["127.0.0.1"], lookup, Limits::default());
    let response = fetch.get(&format!("http://both.test:{}/page", server.addr.port())).await.unwrap();
    assert_eq!(&response.body[..], b"hello from loopback");
    assert_eq!(trap.connections.load(Ordering::SeqCst), 0);

    // A redirect to a name that resolves to the trap.
    let lookup = Arc::new(Scripted::default().answer("inner.test", vec![vec![[127, 0, 0, 2]]]));
    let fetch = fetcher(&["127.0.0.1"], lookup, Limits::default());
    let to_name = server.url(&format!("/to-port/inner.test/{}", trap.addr.port()));
    assert_eq!(blocked_range(&fetch.get(&to_name).await.unwrap_err()), Range::Loopback);
    assert_eq!(trap.connections.load(Ordering::SeqCst), 0);

    // An allow-listed name opens its private addresses, and only for that name.
    let lookup = Arc::new(Scripted::default().answer("searxng.internal", vec![vec![[127, 0, 0, 1]]]));
    let fetch = fetcher(&["searxng.internal"], lookup, Limits::default());
    let by_name = format!("http://searxng.internal:{}/page", server.addr.port());
    assert_eq!(fetch.get(&by_name).await.unwrap().status, 200);
    assert_eq!(blocked_range(&fetch.get(&server.url("/page")).await.unwrap_err()), Range::Loopback);

    let unknown = fetch.get("http://nowhere.test/").await.unwrap_err();
    assert!(
        matches!(unknown, FetchError::Blocked { blocked: Blocked::Unresolved { .. }, .. }),
        "{unknown:?}"
    );
}

#[tokio::test]
async fn bodies_stop_at_the_cap_after_decompression() {
    let server = Server::start([127, 0, 0, 1], routes).await;
    let limits = Limits { max_body_bytes: 1024 * 1024, ..Limits::default() };
    let fetch = fetcher(&["127.0.0.1"], Arc::new(Scripted::default()), limits);
    let error = fetch.get(&server.url("/huge")).await.unwrap_err();
    assert!(matches!(error, FetchError::TooLarge { limit: 1_048_576, .. }), "{error:?}");
    let started = Instant::now();
    let error = fetch.get(&server.url("/bomb")).await.unwrap_err();
    assert!(matches!(error, FetchError::TooLarge { .. }), "{error:?}");
    assert!(error.to_string().contains("after decompression"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // A page may be read up to the cap instead: cut there, and said so.
    let cut = fetch.send(Request::get(server.url("/bomb")).truncate_at_cap()).await.unwrap();
    assert!(cut.truncated);
    assert_eq!(cut.body.len(), 1024 * 1024);
    let whole = fetch.send(Request::get(server.url("/page")).truncate_at_cap()).await.unwrap();
    assert!(!whole.truncated);
    let small = fetch.get(&server.url("/small-gzip")).await.unwrap();
    assert_eq!(&small.body[..], b"squeezed text");
    assert!(server.seen().iter().all(|s| s.headers["accept-encoding"].contains("gzip")));
}

#[tokio::test]
async fn a_slow_body_ends_at_the_deadline() {
    let server = Server::start([127, 0, 0, 1], routes).await;
    let limits = Limits { total_time: Duration::from_millis(800), ..Limits::default() };
    let fetch = fetcher(&["127.0.0.1"], Arc::new(Scripted::default()), limits);
    let started = Instant::now();
    let error = fetch.get(&server.url("/slow")).await.unwrap_err();
    assert!(matches!(error, FetchError::Timeout { .. }), "{error:?}");
    assert!(error.to_string().contains("did not finish within 0.8 s"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn bad_urls_and_refused_schemes_never_connect() {
    let fetch = loopback_only();
    for url in ["not a url", "http://", "file:///etc/passwd", "http://user:pw@127.0.0.1/"] {
        let error = fetch.get(url).await.unwrap_err();
        assert!(
            matches!(error, FetchError::InvalidUrl { .. } | FetchError::Blocked { .. }),
            "{url}: {error:?}"
        );
    }
    let server = Server::start([127, 0, 0, 1], routes).await;
    let error = fetch.get(&server.url("/bad-location")).await.unwrap_err();
    assert!(matches!(error, FetchError::BadRedirect { status: 302, .. }), "{error:?}");
}

#[tokio::test]
async fn messages_never_carry_a_query_string() {
    let fetch = loopback_only();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let error = fetch.get(&format!("http://127.0.0.1:{closed}/v1?key=SECRET-KEY&q=x")).await.unwrap_err();
    assert!(matches!(error, FetchError::Transport { .. }), "{error:?}");
    let text = error.to_string();
    assert!(!text.contains("SECRET-KEY"), "{text}");
    assert!(text.starts_with(&format!("http://127.0.0.1:{closed}/v1?…: ")), "{text}");
    let blocked = Fetcher::with_lookup(Policy::default(), Limits::default(), Arc::new(Scripted::default()))
        .unwrap()
        .get("http://10.0.0.1/search?key=SECRET-KEY")
        .await
        .unwrap_err();
    assert!(!blocked.to_string().contains("SECRET-KEY"), "{blocked}");
}

#[tokio::test]
async fn a_307_keeps_the_method_and_body_and_a_303_turns_into_a_get() {
    let server = Server::start([127, 0, 0, 1], routes).await;
    let fetch = loopback_only();
    let response =
        fetch.send(Request::post(server.url("/post-307"), "application/json", "{}")).await.unwrap();
    assert_eq!(response.status, 200);
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[1].headers.get("content-length").map(String::as_str),
        Some("2"),
        "the body followed: {seen:?}"
    );
    let response =
        fetch.send(Request::post(server.url("/relative"), "application/json", "{}")).await.unwrap();
    assert_eq!(response.status, 200);
    let last = server.seen().pop().unwrap();
    assert!(!last.headers.contains_key("content-type"), "a 302 after a POST is a GET: {last:?}");
}
