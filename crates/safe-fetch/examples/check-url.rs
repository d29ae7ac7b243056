//! Prints, for each URL, whether the fetcher would reach it and why not: names are resolved with
//! the system resolver, nothing is ever connected to.
//!
//! ```text
//! cargo run -p safe-fetch --example check-url -- [--allow ENTRY,ENTRY…] URL…
//! printf 'http://127.1/\nhttps://example.com/\n' | cargo run -p safe-fetch --example check-url
//! ```
//!
//! Exit status: 0 when every URL is allowed, 1 when one is blocked, 2 on bad usage.

use std::io::BufRead;
use std::process::ExitCode;

use safe_fetch::{AllowList, Fetcher, Limits, Policy};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1).peekable();
    let mut allow = Vec::new();
    let mut urls = Vec::new();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--allow" => match args.next() {
                Some(list) => allow.extend(list.split(',').map(str::to_owned)),
                None => return usage("--allow needs a list"),
            },
            "-h" | "--help" => return usage(""),
            _ => urls.push(arg),
        }
    }
    if urls.is_empty() {
        urls = std::io::stdin().lock().lines().map_while(Result::ok).collect();
    }
    let allow = match AllowList::parse(&allow) {
        Ok(allow) => allow,
        Err(e) => return usage(&e.to_string()),
    };
    let policy = Policy::new(allow).with_hint("the --allow list");
    let fetcher = match Fetcher::new(policy, Limits::default()) {
        Ok(fetcher) => fetcher,
        Err(e) => return usage(&e.to_string()),
    };
    let mut status = ExitCode::SUCCESS;
    for url in urls.iter().map(|u| u.trim()).filter(|u| !u.is_empty() && !u.starts_with('#')) {
        match fetcher.check(url).await {
            Ok(addresses) => {
                let addresses: Vec<String> = addresses.iter().map(ToString::to_string).collect();
                println!("allowed\t{url}\t{}", addresses.join(" "));
            }
            Err(safe_fetch::FetchError::Blocked { blocked, .. }) => {
                println!("blocked\t{url}\t{blocked}");
                status = ExitCode::from(1);
            }
            Err(e) => {
                println!("blocked\t{url}\t{e}");
                status = ExitCode::from(1);
            }
        }
    }
    status
}

fn usage(problem: &str) -> ExitCode {
    if !problem.is_empty() {
        eprintln!("check-url: {problem}");
    }
    eprintln!("usage: check-url [--allow ENTRY,ENTRY…] URL…   (or URLs on stdin, one per line)");
    ExitCode::from(2)
}
