//! Crawls of pages served on loopback (allowed by each test's own allow-list), reader services
//! as scripted loopback servers, and the refusals a model meets.

mod common;

use builtin_tool_web_browsing::settings::{Endpoint, ReaderKind, WebSettings};
use common::{Reply, Script, run};
use safe_fetch::{AllowList, Policy};
use serde_json::json;
use tool_core::ErrorKind;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/extraction");

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{FIXTURES}/{name}")).unwrap()
}

/// Loopback allowed, as a self-hoster would allow an internal wiki.
fn loopback(readers: Vec<Endpoint<ReaderKind>>) -> WebSettings {
    WebSettings {
        policy: Policy::new(AllowList::parse(["127.0.0.1"]).unwrap()),
        readers,
        ..WebSettings::default()
    }
}

fn long_article(paragraphs: usize) -> String {
    let mut html = String::from(
        "<html><head><title>Long read</title></head><body><nav>Home · About</nav><article><h1>Long read</h1>",
    );
    for i in 0..paragraphs {
        html.push_str(&format!(
            "<p>Paragraph {i}: the river carried silt from the hills to the delta, where farmers had \
             learned over generations to read its colour and plant accordingly, season after season.</p>"
        ));
    }
    html.push_str("</article><footer>© The Paper</footer></body></html>");
    html
}

/// A one-page PDF with Helvetica text, offsets computed.
fn pdf(lines: &[&str]) -> Vec<u8> {
    let mut stream = String::from("BT /F1 12 Tf 72 720 Td 14 TL\n");
    for line in lines {
        stream.push_str(&format!("({line}) Tj T*\n"));
    }
    stream.push_str("ET");
    let objects = [
        "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_owned(),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>".to_owned(),
        format!("<< /Length {} >>\nstream\n{stream}\nendstream", stream.len()),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>".to_owned(),
    ];
    let mut out = String::from("%PDF-1.4\n");
    let mut offsets = Vec::new();
    for (i, object) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.push_str(&format!("{} 0 obj\n{object}\nendobj\n", i + 1));
    }
    let xref = out.len();
    out.push_str(&format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1));
    for offset in offsets {
        out.push_str(&format!("{offset:010} 00000 n \n"));
    }
    out.push_str(&format!(
        "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
        objects.len() + 1
    ));
    out.into_bytes()
}

#[tokio::test]
async fn a_page_is_read_as_markdown_of_its_main_content_with_its_final_url() {
    let site = Script::routes(vec![
        ("/old", Reply::redirect("/news/harbour")),
        ("/news/harbour", Reply::bytes(200, "text/html; charset=utf-8", fixture("news-harbour.html"))),
    ])
    .await;
    let output = run(loopback(vec![]), "crawlSinglePage", json!({"url": site.url("/old")})).await;
    assert!(output.success, "{}", output.content);
    let final_url = site.url("/news/harbour");
    assert!(
        output.content.starts_with(&format!("<page url=\"{final_url}\" title=\"")),
        "{}",
        &output.content[..200]
    );
    let expected = String::from_utf8(fixture("news-harbour.txt")).unwrap();
    let first_paragraph = expected.split("\n\n").nth(1).unwrap();
    let words: Vec<&str> = first_paragraph.split_whitespace().take(8).collect();
    let plain = output.content.replace("**", "");
    assert!(plain.contains(&words.join(" ")), "the article's text is there: {words:?}");
    assert!(!plain.contains("cookie"), "the cookie banner is not");
    assert!(!output.content.contains("<script"), "no markup left");
    let state = output.state.unwrap();
    assert_eq!(state["pages"][0]["finalUrl"], final_url);
    assert_eq!(state["pages"][0]["crawler"], "direct");
    assert_eq!(state["pages"][0]["method"], "readability");
}

#[tokio::test]
async fn private_addresses_are_refused_and_never_handed_to_a_reader() {
    let site = Script::routes(vec![("/", Reply::text(200, &long_article(5)))]).await;
    let jina =
        Script::start(vec![Reply::json(200, json!({"code": 200, "data": {"content": "x".repeat(500)}}))])
            .await;
    let settings = WebSettings {
        readers: vec![Endpoint::new(ReaderKind::Jina, jina.base(), None)],
        ..WebSettings::default()
    };
    let output = run(settings, "crawlSinglePage", json!({"url": site.url("/")})).await;
    assert!(!output.success);
    assert!(output.content.contains("127.0.0.1 is a loopback address"), "{}", output.content);
    assert!(output.content.contains("TOOLHOST_FETCH_ALLOW"), "{}", output.content);
    assert!(site.seen().is_empty() && jina.seen().is_empty());

    for (url, refusal) in [
        ("file:///etc/passwd", "`file:` URLs are not fetched"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a cloud metadata endpoint"),
        ("http://user:pw@example.com/", "URLs with a user name or password are refused"),
        ("not a url", "is not a valid URL"),
    ] {
        let output = run(loopback(vec![]), "crawlSinglePage", json!({"url": url})).await;
        assert!(!output.success && output.content.contains(refusal), "{url}: {}", output.content);
    }

    // A page that redirects to a private address is not handed to the reader either.
    let site = Script::routes(vec![("/hop", Reply::redirect("http://10.1.2.3/admin"))]).await;
    let settings = loopback(vec![Endpoint::new(ReaderKind::Jina, jina.base(), None)]);
    let output = run(settings, "crawlSinglePage", json!({"url": site.url("/hop")})).await;
    assert!(!output.success);
    assert!(output.content.contains("10.1.2.3 is a private-network address"), "{}", output.content);
    assert!(jina.seen().is_empty(), "the reader was not asked to follow the redirect");
}

#[tokio::test]
async fn long_pages_are_cut_with_a_notice_that_reads_on() {
    let site = Script::routes(vec![("/long", Reply::text(200, &long_article(400)))]).await;
    let url = site.url("/long");
    let first = run(loopback(vec![]), "crawlSinglePage", json!({"url": url})).await;
    assert!(first.success);
    let total = first.state.as_ref().unwrap()["pages"][0]["totalChars"].as_u64().unwrap();
    assert!(total > 50_000, "{total}");
    assert!(
        first.content.contains(&format!(
            "[Showing characters 1–25000 of {total}. To read on, call crawlSinglePage with url=\"{url}\" and offset=25000.]"
        )),
        "{}",
        &first.content[first.content.len() - 300..]
    );
    let second = run(loopback(vec![]), "crawlSinglePage", json!({"url": url, "offset": 25_000})).await;
    assert!(second.content.contains("offset=50000"));
    let state = &second.state.unwrap()["pages"][0];
    assert_eq!((state["offset"].as_u64(), state["shownChars"].as_u64()), (Some(25_000), Some(25_000)));
    let past = run(loopback(vec![]), "crawlSinglePage", json!({"url": url, "offset": total + 5})).await;
    assert_eq!(past.error.unwrap().kind, ErrorKind::InvalidArguments);
    assert!(past.content.contains(&format!("the page has {total} characters")));
}

#[tokio::test]
async fn an_interstitial_tries_the_next_crawler() {
    let challenge = "<html><head><title>Just a moment...</title></head><body><h1>Checking your browser before accessing \
                     the site.</h1><p>Enable JavaScript and cookies to continue. This process is automatic.</p></body></html>";
    let site =
        Script::routes(vec![("/guarded", Reply::text(503, challenge)), ("/js", Reply::text(200, challenge))])
            .await;
    let jina = Script::start(vec![Reply::json(
        200,
        json!({"code": 200, "status": 20000, "data": {"title": "Guarded article", "url": site.url("/js/final"),
            "content": "The real article text, as the reader service rendered it. ".repeat(5), "publishedTime": "2026-10-01"}}),
    )])
    .await;
    let settings = loopback(vec![Endpoint::new(ReaderKind::Jina, jina.base(), Some("JK"))]);
    let output = run(settings, "crawlSinglePage", json!({"url": site.url("/js")})).await;
    assert!(output.success, "{}", output.content);
    assert!(output.content.contains("The real article text"));
    assert!(output.content.contains("publishedTime=\"2026-10-01\""));
    let state = output.state.unwrap();
    assert_eq!(state["pages"][0]["crawler"], "jina");
    assert_eq!(state["pages"][0]["failures"][0]["crawler"], "direct");
    assert!(state["pages"][0]["failures"][0]["reason"].as_str().unwrap().contains("interstitial"));
    assert_eq!(state["pages"][0]["finalUrl"], site.url("/js/final"), "the reader's final URL");
    let seen = jina.seen();
    assert_eq!((seen[0].method.as_str(), seen[0].path.as_str()), ("POST", "/"));
    assert_eq!(seen[0].json()["url"], site.url("/js"));
    assert_eq!(seen[0].headers["authorization"], "Bearer JK");

    // The page's URL travels in the body, normalised: dot segments cannot walk the reader's host.
    let output = run(
        loopback(vec![Endpoint::new(ReaderKind::Jina, jina.base(), Some("JK"))]),
        "crawlSinglePage",
        json!({"url": site.url("/js/../../../../admin")}),
    )
    .await;
    assert!(output.success, "{}", output.content);
    let last = jina.seen().pop().unwrap();
    assert_eq!((last.path.as_str(), last.json()["url"].as_str()), ("/", Some(site.url("/admin").as_str())));

    // Without a reader the failure says why, for every crawler tried.
    let output = run(loopback(vec![]), "crawlSinglePage", json!({"url": site.url("/js")})).await;
    assert!(!output.success);
    assert!(
        output.content.contains("direct: an interstitial page (\"just a moment\")"),
        "{}",
        output.content
    );
    let output = run(loopback(vec![]), "crawlSinglePage", json!({"url": site.url("/guarded")})).await;
    assert!(output.content.contains("direct: HTTP 503"), "{}", output.content);
}

#[tokio::test]
async fn firecrawl_is_a_fallback_too_and_its_errors_are_reported() {
    let site =
        Script::routes(vec![("/tiny", Reply::text(200, "<html><body><p>Hi.</p></body></html>"))]).await;
    let firecrawl = Script::start(vec![
        Reply::json(402, json!({"success": false, "error": "Payment required to access this resource."})),
        Reply::json(200, json!({"success": true, "data": {"markdown": "# Tiny\n\n".to_owned() + &"Rendered text. ".repeat(20),
            "metadata": {"title": "Tiny page", "sourceURL": site.url("/tiny"), "url": site.url("/tiny/final"), "statusCode": 200}}})),
    ])
    .await;
    let settings = || loopback(vec![Endpoint::new(ReaderKind::Firecrawl, firecrawl.base(), Some("FC"))]);
    let output = run(settings(), "crawlSinglePage", json!({"url": site.url("/tiny")})).await;
    assert!(!output.success);
    assert!(output.content.contains("direct: only 3 characters of text"), "{}", output.content);
    assert!(
        output
            .content
            .contains("firecrawl: HTTP 402 Payment Required: Payment required to access this resource."),
        "{}",
        output.content
    );
    let output = run(settings(), "crawlSinglePage", json!({"url": site.url("/tiny")})).await;
    assert!(output.success, "{}", output.content);
    assert!(output.content.contains("title=\"Tiny page\""));
    assert!(
        output.content.starts_with(&format!("<page url=\"{}\"", site.url("/tiny/final"))),
        "{}",
        output.content
    );
    let request = &firecrawl.seen()[0];
    assert_eq!(request.path, "/v1/scrape");
    assert_eq!(request.json()["url"], site.url("/tiny"));
    assert_eq!(request.headers["authorization"], "Bearer FC");
}

#[tokio::test]
async fn text_charsets_and_pdfs_are_read() {
    let lines = [
        "Quarterly report of the river authority.",
        "Water levels stayed within the seasonal band for the whole quarter.",
        "Dredging of the northern channel finished two weeks ahead of plan.",
    ];
    let site = Script::routes(vec![
        ("/notes.txt", Reply::bytes(200, "text/plain", "Plain notes. ".repeat(20).into_bytes())),
        ("/german", Reply::bytes(200, "text/html", fixture("german-news.html"))),
        ("/report.pdf", Reply::bytes(200, "application/pdf", pdf(&lines))),
        ("/logo.png", Reply::bytes(200, "image/png", vec![0x89, b'P', b'N', b'G', 0, 0, 0, 0])),
    ])
    .await;
    let text = run(loopback(vec![]), "crawlSinglePage", json!({"url": site.url("/notes.txt")})).await;
    assert!(text.success && text.content.contains("Plain notes. Plain notes."), "{}", text.content);
    let german = run(loopback(vec![]), "crawlSinglePage", json!({"url": site.url("/german")})).await;
    assert!(german.success, "{}", german.content);
    let expected = String::from_utf8(fixture("german-news.txt")).unwrap();
    let with_umlaut = expected.split_whitespace().find(|w| w.contains(['ä', 'ö', 'ü', 'ß'])).unwrap();
    assert!(german.content.contains(with_umlaut), "windows-1252 decoded: {with_umlaut}");
    let report = run(loopback(vec![]), "crawlSinglePage", json!({"url": site.url("/report.pdf")})).await;
    assert!(report.success, "{}", report.content);
    assert!(report.content.contains("Dredging of the northern channel"), "{}", report.content);
    assert_eq!(report.state.unwrap()["pages"][0]["kind"], "pdf");
    let image = run(loopback(vec![]), "crawlSinglePage", json!({"url": site.url("/logo.png")})).await;
    assert!(image.content.contains("not a readable page (image/png)"), "{}", image.content);
}

#[tokio::test]
async fn several_pages_are_read_in_parallel_and_share_the_budget() {
    let site = Script::routes(vec![
        ("/a", Reply::text(200, &long_article(300))),
        ("/b", Reply::bytes(200, "text/html", fixture("docs-config.html"))),
    ])
    .await;
    let urls = [site.url("/a"), site.url("/missing"), site.url("/b"), site.url("/a")];
    let output = run(loopback(vec![]), "crawlMultiPages", json!({"urls": urls})).await;
    assert!(output.success, "{}", output.content);
    assert!(output.content.starts_with(&format!("<page index=\"1\" url=\"{}\"", urls[0])));
    assert!(output.content.contains(&format!("<page index=\"2\" url=\"{}\" error=\"", urls[1])));
    assert!(output.content.contains("HTTP 404"));
    assert!(output.content.contains(&format!("<page index=\"3\" url=\"{}\"", urls[2])));
    assert!(!output.content.contains("index=\"4\""), "duplicates are read once");
    let state = output.state.unwrap();
    assert_eq!(state["pages"][0]["shownChars"], 25_000 / 3);
    assert_eq!(state["errors"][0]["url"], urls[1]);

    let too_many: Vec<String> = (0..11).map(|i| site.url(&format!("/p{i}"))).collect();
    let output = run(loopback(vec![]), "crawlMultiPages", json!({"urls": too_many})).await;
    assert_eq!(output.error.unwrap().kind, ErrorKind::InvalidArguments);
    let output = run(loopback(vec![]), "crawlMultiPages", json!({"urls": [site.url("/missing")]})).await;
    assert!(!output.success, "all pages failing is a failure");
}

#[tokio::test]
async fn a_page_over_the_cap_is_read_up_to_it_and_says_so() {
    let site = Script::routes(vec![
        ("/huge", Reply::text(200, &long_article(4_000))),
        (
            "/huge.pdf",
            Reply::bytes(
                200,
                "application/pdf",
                [pdf(&["Page text."]), vec![b' '; 2 * 1024 * 1024]].concat(),
            ),
        ),
    ])
    .await;
    let mut settings = loopback(vec![]);
    settings.page_limits.max_body_bytes = 256 * 1024;
    let output = run(settings.clone(), "crawlSinglePage", json!({"url": site.url("/huge")})).await;
    assert!(output.success, "{}", output.content);
    assert!(output.content.contains("Paragraph 1:"), "the beginning was read");
    let state = output.state.unwrap();
    let markdown = state["pages"][0]["markdown"].as_str().unwrap();
    assert!(state["pages"][0]["totalChars"].as_u64().unwrap() > 25_000);
    let total = state["pages"][0]["totalChars"].as_u64().unwrap() as usize;
    let last =
        run(settings.clone(), "crawlSinglePage", json!({"url": site.url("/huge"), "offset": total - 200}))
            .await;
    assert!(last.content.contains("only its beginning was read"), "{}", last.content);
    assert!(!markdown.is_empty());
    let pdf = run(settings, "crawlSinglePage", json!({"url": site.url("/huge.pdf")})).await;
    assert!(!pdf.success && pdf.content.contains("a cut PDF cannot be parsed"), "{}", pdf.content);
}
