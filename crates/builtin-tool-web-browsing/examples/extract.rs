//! Prints the markdown the model would get for a saved page, so extraction can be judged on any
//! corpus without the network.
//!
//! ```text
//! cargo run -p builtin-tool-web-browsing --example extract -- FILE.html [URL]
//! ```
//!
//! The charset comes from the page's BOM or `<meta>` declaration (there are no headers); the URL,
//! when given, resolves relative links.

use std::process::ExitCode;

use builtin_tool_web_browsing::extract;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(file), url) = (args.next(), args.next()) else {
        eprintln!("usage: extract FILE.html [URL]");
        return ExitCode::from(2);
    };
    let bytes = match std::fs::read(&file) {
        Ok(bytes) => bytes,
        Err(e) => {
            eprintln!("extract: cannot read {file}: {e}");
            return ExitCode::from(1);
        }
    };
    let html = extract::decode(&bytes, None, true);
    let page = extract::extract_html(&html, url.as_deref());
    if let Some(title) = &page.title {
        eprintln!("title: {title}");
    }
    eprintln!("method: {}", page.method);
    println!("{}", page.markdown);
    ExitCode::SUCCESS
}
