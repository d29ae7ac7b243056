//! From a page's bytes to the markdown of its main content.
//!
//! Decoding follows the browser's order: a byte-order mark, the `Content-Type` charset, a
//! `<meta>` declaration in the first 4 KB, then UTF-8. Extraction is Mozilla Readability's
//! algorithm (`dom_smoothie`) and the article's HTML is converted by `htmd`; a page Readability
//! finds nothing in is converted whole with navigation, forms and scripts left out.

use dom_smoothie::{CandidateSelectMode, Config, Readability};
use encoding_rs::Encoding;
use serde::Serialize;

/// The main content of a page.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Extracted {
    /// The page's title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The main content as markdown.
    pub markdown: String,
    /// The author line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub byline: Option<String>,
    /// The site's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub site_name: Option<String>,
    /// When it was published.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub published_time: Option<String>,
    /// A short description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub excerpt: Option<String>,
    /// `readability`, or `whole page` when no article was found.
    pub method: &'static str,
}

/// Decodes a page's bytes to text.
pub fn decode(bytes: &[u8], header_charset: Option<&str>, is_html: bool) -> String {
    if let Some((encoding, _)) = Encoding::for_bom(bytes) {
        return encoding.decode_with_bom_removal(bytes).0.into_owned();
    }
    let declared = header_charset
        .and_then(|label| Encoding::for_label(label.as_bytes()))
        .or_else(|| if is_html { meta_charset(bytes) } else { None })
        .unwrap_or(encoding_rs::UTF_8);
    // A page declaring UTF-16 in its markup is already past the BOM check: it is not UTF-16.
    let encoding = if declared == encoding_rs::UTF_16LE || declared == encoding_rs::UTF_16BE {
        encoding_rs::UTF_8
    } else {
        declared
    };
    encoding.decode_without_bom_handling(bytes).0.into_owned()
}

/// The charset a `<meta charset>` or `<meta http-equiv=content-type>` declares in the first 4 KB.
fn meta_charset(bytes: &[u8]) -> Option<&'static Encoding> {
    let head = String::from_utf8_lossy(&bytes[..bytes.len().min(4096)]).to_ascii_lowercase();
    let mut rest = head.as_str();
    while let Some(at) = rest.find("<meta") {
        rest = &rest[at + 5..];
        let tag = &rest[..rest.find('>').unwrap_or(rest.len())];
        if let Some(pos) = tag.find("charset") {
            let Some(value) = tag[pos + 7..].trim_start().strip_prefix('=') else { continue };
            let value = value.trim_start();
            let value = value.trim_start_matches(['"', '\'']);
            let end =
                value.find(|c: char| c == '"' || c == '\'' || c == ';' || c == '/' || c.is_whitespace());
            let label = &value[..end.unwrap_or(value.len())];
            if let Some(encoding) = Encoding::for_label(label.as_bytes()) {
                return Some(encoding);
            }
        }
    }
    None
}

/// Tags a whole-page conversion leaves out.
const BOILERPLATE_TAGS: [&str; 14] = [
    "head", "script", "style", "noscript", "svg", "iframe", "form", "button", "nav", "header", "footer",
    "aside", "template", "select",
];

/// How the main content is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// Readability.js's candidate selection.
    Readability,
    /// dom_smoothie's own candidate selection (the default: it measured best on the corpus).
    #[default]
    DomSmoothie,
    /// No extraction: the whole page converted, boilerplate tags left out (the baseline).
    WholePage,
}

/// Extracts the main content of an HTML page as markdown.
pub fn extract_html(html: &str, url: Option<&str>) -> Extracted {
    extract_with(html, url, Strategy::default())
}

/// Extracts with a chosen strategy (for measuring them side by side).
pub fn extract_with(html: &str, url: Option<&str>, strategy: Strategy) -> Extracted {
    let mode = match strategy {
        Strategy::Readability => CandidateSelectMode::Readability,
        Strategy::DomSmoothie => CandidateSelectMode::DomSmoothie,
        Strategy::WholePage => return whole_page(html),
    };
    let config = Config { candidate_select_mode: mode, ..Config::default() };
    let url = url.filter(|u| u.starts_with("http://") || u.starts_with("https://"));
    let article = Readability::new(html, url, Some(config)).and_then(|mut r| r.parse());
    match article {
        Ok(article) if article.text_content.trim().chars().count() > crate::MIN_PAGE_CHARS => {
            let markdown =
                to_markdown(&article.content, &["script", "style", "noscript", "svg", "iframe", "form"]);
            let title = Some(article.title.trim().to_owned()).filter(|t| !t.is_empty());
            Extracted {
                markdown: with_title(title.as_deref(), markdown),
                title,
                byline: article.byline,
                site_name: article.site_name,
                published_time: article.published_time,
                excerpt: article.excerpt,
                method: "readability",
            }
        }
        _ => whole_page(html),
    }
}

/// The text of a PDF's pages, lines trimmed (feature `pdf`; without it, an error says so).
///
/// # Errors
///
/// A message saying why the PDF could not be read.
pub fn pdf_text(bytes: &[u8]) -> Result<String, String> {
    #[cfg(feature = "pdf")]
    {
        let text = pdf_extract::extract_text_from_mem(bytes)
            .map_err(|e| format!("the PDF could not be read: {e}"))?;
        Ok(text.lines().map(str::trim_end).collect::<Vec<_>>().join("\n").trim().to_owned())
    }
    #[cfg(not(feature = "pdf"))]
    {
        let _ = bytes;
        Err("a PDF, and this build reads no PDFs (feature `pdf`)".into())
    }
}

fn whole_page(html: &str) -> Extracted {
    Extracted {
        markdown: to_markdown(html, &BOILERPLATE_TAGS),
        title: html_title(html),
        method: "whole page",
        ..Extracted::default()
    }
}

/// Readability keeps the headline outside the article body; the model should see it.
fn with_title(title: Option<&str>, markdown: String) -> String {
    match title {
        Some(title) if !markdown.trim_start().starts_with('#') || !markdown.contains(title) => {
            format!("# {title}\n\n{markdown}")
        }
        _ => markdown,
    }
}

fn to_markdown(html: &str, skip: &[&str]) -> String {
    let converter = htmd::HtmlToMarkdown::builder().skip_tags(skip.to_vec()).build();
    let markdown = converter.convert(html).unwrap_or_default();
    tidy(&markdown)
}

/// Trims trailing spaces and runs of blank lines.
fn tidy(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len());
    let mut blank = 0;
    for line in markdown.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.trim().to_owned()
}

fn html_title(html: &str) -> Option<String> {
    let lower = html.to_ascii_lowercase();
    let start = lower.find("<title")?;
    let open_end = lower[start..].find('>')? + start + 1;
    let end = lower[open_end..].find("</title")? + open_end;
    let title = html.get(open_end..end)?.split_whitespace().collect::<Vec<_>>().join(" ");
    Some(title).filter(|t| !t.is_empty())
}

/// Signs of a bot-check or script-only page instead of content.
const INTERSTITIALS: [&str; 10] = [
    "just a moment",
    "attention required! | cloudflare",
    "checking your browser",
    "enable javascript and cookies to continue",
    "please enable javascript",
    "you need to enable javascript to run this app",
    "verify you are human",
    "are you a robot",
    "ddos protection by",
    "please turn javascript on",
];

/// Whether a short page is an interstitial (a bot check, "enable JavaScript"), and which sign.
pub fn interstitial(title: Option<&str>, text: &str) -> Option<&'static str> {
    if text.chars().count() > 3_000 {
        return None;
    }
    let haystack = format!("{}\n{}", title.unwrap_or(""), text).to_lowercase();
    INTERSTITIALS.iter().copied().find(|sign| haystack.contains(sign))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charsets_come_from_the_bom_the_header_or_the_markup() {
        let latin1 = b"<html><head><meta charset=\"windows-1252\"></head><body>Gr\xfc\xdfe</body></html>";
        assert!(decode(latin1, None, true).contains("Grüße"));
        let http_equiv = b"<meta http-equiv='Content-Type' content='text/html; charset=ISO-8859-1'>caf\xe9";
        assert!(decode(http_equiv, None, true).contains("café"));
        assert!(decode(b"caf\xe9", Some("latin1"), false).contains("café"), "the header decides");
        let gbk = encoding_rs::GBK.encode("<meta charset=gbk><p>中文网页</p>").0;
        assert!(decode(&gbk, None, true).contains("中文网页"));
        assert_eq!(decode(b"\xef\xbb\xbfplain", Some("latin1"), false), "plain", "the BOM wins");
        assert!(decode("naïve".as_bytes(), None, true).contains("naïve"), "UTF-8 by default");
        assert!(decode(b"<meta charset=utf-16>ok", None, true).contains("ok"));
        let later = b"<meta name=x content=charset><meta charset=\"windows-1252\">caf\xe9";
        assert!(
            decode(later, None, true).contains("caf\u{e9}"),
            "a charset word without `=` does not end the scan"
        );
    }

    #[test]
    fn interstitials_are_recognised_only_on_short_pages() {
        assert_eq!(interstitial(Some("Just a moment..."), "Checking your browser"), Some("just a moment"));
        assert_eq!(
            interstitial(None, "You need to enable JavaScript to run this app."),
            Some("you need to enable javascript to run this app")
        );
        let article = "How Cloudflare shows 'Just a moment' pages. ".repeat(100);
        assert_eq!(interstitial(Some("About bot checks"), &article), None);
    }

    #[test]
    fn a_page_without_an_article_is_converted_without_its_chrome() {
        let html = "<html><head><title>Tiny</title><script>var x=1</script></head><body><nav><a href=/>Home</a></nav>\
                    <p>Only a line.</p><footer>© Someone</footer></body></html>";
        let page = extract_html(html, Some("https://example.org/"));
        assert_eq!(page.method, "whole page");
        assert_eq!(page.title.as_deref(), Some("Tiny"));
        assert_eq!(page.markdown, "Only a line.");
    }
}
