//! Extraction quality and speed.
//!
//! ```text
//! cargo bench -p builtin-tool-web-browsing --bench extraction
//! ```
//!
//! 1. Precision, recall and F1 per page of the corpus in `tests/fixtures/extraction`, for each
//!    strategy (dom_smoothie's candidate selection, the default; Readability.js's; and the whole
//!    page converted without extraction, as a baseline).
//! 2. The time to extract pages of about 1 MB (one built of 80 whole articles, the worst case for
//!    Readability's scoring; one as heavy pages are today: an article inside scripts, styles and
//!    menus) and a 13 KB article, and a whole `crawlSinglePage` over a loopback server: the
//!    difference is the crawl's overhead.

#[path = "../tests/common/score.rs"]
mod score;

use std::path::Path;
use std::time::{Duration, Instant};

use builtin_tool_web_browsing::WebRuntime;
use builtin_tool_web_browsing::extract::{self, Strategy};
use builtin_tool_web_browsing::settings::WebSettings;
use safe_fetch::{AllowList, Policy};
use serde_json::json;
use tool_core::{CallContext, ToolRuntime};

fn main() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/extraction");
    let corpus = score::corpus(&folder);
    println!("## Extraction quality ({} pages)\n", corpus.len());
    println!(
        "| page | dom_smoothie selection (default) P / R / F1 | Readability.js selection F1 | whole page, no extraction F1 |"
    );
    println!("|---|---|---|---|");
    let strategies = [Strategy::DomSmoothie, Strategy::Readability, Strategy::WholePage];
    let mut sums = [[0.0f64; 3]; 3];
    for (name, bytes, expected) in &corpus {
        let html = extract::decode(bytes, None, true);
        let url = format!("https://corpus.example/{name}");
        let scores: Vec<score::Score> = strategies
            .iter()
            .map(|s| score::score(&extract::extract_with(&html, Some(&url), *s).markdown, expected))
            .collect();
        for (i, s) in scores.iter().enumerate() {
            sums[i][0] += s.precision;
            sums[i][1] += s.recall;
            sums[i][2] += s.f1;
        }
        println!(
            "| {name} | {:.3} / {:.3} / {:.3} | {:.3} | {:.3} |",
            scores[0].precision, scores[0].recall, scores[0].f1, scores[1].f1, scores[2].f1
        );
    }
    let n = corpus.len() as f64;
    println!(
        "| **mean** | {:.3} / {:.3} / **{:.3}** | {:.3} | {:.3} |\n",
        sums[0][0] / n,
        sums[0][1] / n,
        sums[0][2] / n,
        sums[1][2] / n,
        sums[2][2] / n
    );

    // A page of about 1 MB: every corpus page's body, repeated, inside one document.
    let bodies: String =
        corpus.iter().map(|(_, b, _)| extract::decode(b, None, true)).collect::<Vec<_>>().join("\n");
    let mut big = String::from("<html><head><title>Big page</title></head><body>");
    while big.len() < 1_000_000 {
        big.push_str("<div class=\"section\">");
        big.push_str(&bodies);
        big.push_str("</div>");
    }
    big.push_str("</body></html>");
    let article =
        String::from_utf8(corpus.iter().find(|c| c.0 == "news-harbour").unwrap().1.clone()).unwrap();
    let typical = typical_heavy_page(&article);
    println!("## Speed\n");
    println!("| what | p50 | mean | runs |\n|---|---|---|---|");
    for (what, page) in [
        ("1 MB page built of 80 articles", &big),
        ("1 MB page: one article, scripts, styles, menus", &typical),
    ] {
        let times = time(30, || {
            std::hint::black_box(extract::extract_html(page, Some("https://corpus.example/big")));
        });
        println!(
            "| extract a {what} ({:.2} MB) | {} | {} | 30 |",
            page.len() as f64 / 1e6,
            ms(p50(&times)),
            ms(mean(&times))
        );
    }
    let times = time(200, || {
        std::hint::black_box(extract::extract_html(&article, Some("https://corpus.example/a")));
    });
    println!(
        "| extract a {:.0} KB article | {} | {} | 200 |",
        article.len() as f64 / 1e3,
        ms(p50(&times)),
        ms(mean(&times))
    );

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let page = big.clone();
        let small = article.clone();
        let app = axum::Router::new()
            .route("/big", axum::routing::get(move || std::future::ready(axum::response::Html(page.clone()))))
            .route(
                "/article",
                axum::routing::get(move || std::future::ready(axum::response::Html(small.clone()))),
            );
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let settings = WebSettings {
            policy: Policy::new(AllowList::parse(["127.0.0.1"]).unwrap()),
            ..WebSettings::default()
        };
        let web = WebRuntime::new(settings);
        for (path, runs) in [("/article", 200), ("/big", 30)] {
            let url = format!("http://{addr}{path}");
            let mut times = Vec::with_capacity(runs);
            for _ in 0..runs {
                let started = Instant::now();
                let output =
                    web.execute("crawlSinglePage", json!({"url": url}), &CallContext::new("c", "s")).await;
                times.push(started.elapsed());
                assert!(output.success, "{}", output.content);
            }
            times.sort();
            println!(
                "| crawlSinglePage {path} over loopback | {} | {} | {runs} |",
                ms(p50(&times)),
                ms(mean(&times))
            );
        }
    });
}

/// What a heavy page of today looks like: one article, with framework state, inline scripts and
/// styles, and menus of links around it, about 1 MB in all.
fn typical_heavy_page(article: &str) -> String {
    let body_at = article.find("<body").unwrap();
    let (head, body) = article.split_at(body_at);
    let mut page = head.replace("</head>", "");
    let mut filler = 0;
    while page.len() < 450_000 {
        page.push_str(&format!(
            "<style>.c{filler}{{margin:0 {filler}px;padding:1px;color:#{:06x}}}</style>\n",
            filler * 7919 % 0xffffff
        ));
        page.push_str(&format!(
            "<script>window.__STATE_{filler}__ = {{\"items\": [{}]}};</script>\n",
            (0..40)
                .map(|i| format!("{{\"id\":{i},\"label\":\"item {i} of block {filler}\"}}"))
                .collect::<Vec<_>>()
                .join(",")
        ));
        filler += 1;
    }
    page.push_str("</head>");
    let mut menu = String::from("<nav class=\"mega-menu\"><ul>");
    for i in 0..1_500 {
        menu.push_str(&format!("<li><a href=\"/section/{i}\">Section {i}</a></li>"));
    }
    menu.push_str("</ul></nav>");
    let mut rest = body.replacen("<body>", &format!("<body>{menu}"), 1);
    while page.len() + rest.len() < 1_000_000 {
        rest = rest.replace("</body>", &format!("<aside class=\"promo\">{menu}</aside></body>"));
    }
    page + &rest
}

fn time(runs: usize, mut f: impl FnMut()) -> Vec<Duration> {
    f();
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let started = Instant::now();
            f();
            started.elapsed()
        })
        .collect();
    times.sort();
    times
}

fn p50(sorted: &[Duration]) -> Duration {
    sorted[sorted.len() / 2]
}

fn mean(times: &[Duration]) -> Duration {
    times.iter().sum::<Duration>() / times.len() as u32
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}
