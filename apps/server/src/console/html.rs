//! The console's markup, with maud: every value is escaped where it is written (tool arguments,
//! file contents and model text are data, never markup). No inline script or style: the page's
//! behaviour is `console.js`, its looks `console.css`, both served from the binary.

use maud::{DOCTYPE, Markup, html};
use serde_json::Value;
use tool_core::render::{Block, Card, Tone};

use super::Viewer;

/// A whole page: the navigation for what the viewer may see, the body, the script.
pub fn page(viewer: Option<&Viewer>, title: &str, current: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="color-scheme" content="light dark";
                @if let Some(viewer) = viewer {
                    meta name="csrf-token" content=(viewer.csrf);
                }
                title { (title) " · Toolhost" }
                link rel="stylesheet" href=(super::asset("console.css"));
                script src=(super::asset("console.js")) defer {}
            }
            body data-page=(current) {
                a class="skip" href="#main" { "Skip to the content" }
                header class="top" {
                    a class="brand" href="/console" { "Toolhost" }
                    @if let Some(viewer) = viewer {
                        nav aria-label="Console" {
                            @for (href, label, name) in viewer.sections() {
                                a href=(href) aria-current=[(name == current).then_some("page")] { (label) }
                            }
                        }
                        span id="live-state" class="live-state" role="status" { "Not live" }
                        form class="signout" method="post" action="/console/logout" {
                            input type="hidden" name="csrf" value=(viewer.csrf);
                            span class="who" { (viewer.principal.id) }
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main id="main" tabindex="-1" {
                    h1 { (title) }
                    (body)
                }
                div id="live" class="visually-hidden" role="status" aria-live="polite" {}
            }
        }
    }
}

/// The colour class of a tone.
fn tone(tone: Tone) -> &'static str {
    match tone {
        Tone::Neutral => "neutral",
        Tone::Info => "info",
        Tone::Success => "success",
        Tone::Warning => "warning",
        Tone::Danger => "danger",
    }
}

/// A card as the tool's render hooks drew it.
pub fn card(card: &Card) -> Markup {
    html! {
        div class="card" {
            div class="card-head" {
                span class="card-title" { (card.title) }
                @if let Some(badge) = &card.badge {
                    span class={ "badge " (tone(badge.tone)) } { (badge.label) }
                }
            }
            @if let Some(subtitle) = &card.subtitle {
                div class="card-subtitle" { (subtitle) }
            }
            @for block in &card.blocks {
                (self::block(block))
            }
        }
    }
}

fn block(block: &Block) -> Markup {
    match block {
        Block::Fields { fields } => html! {
            dl class="fields" {
                @for field in fields {
                    @if !field.value.is_empty() {
                        dt { (field.label) }
                        dd { (field.value) }
                    }
                }
            }
        },
        Block::Code { language, text } => html! {
            pre class="code" data-language=[language.as_deref()] { code { (text) } }
        },
        Block::List { items, ordered } => html! {
            @if *ordered {
                ol { @for item in items { li { (item) } } }
            } @else {
                ul { @for item in items { li { (item) } } }
            }
        },
        Block::Table { headers, rows } => html! {
            div class="table" {
                table {
                    thead { tr { @for header in headers { th scope="col" { (header) } } } }
                    tbody { @for row in rows { tr { @for cell in row { td { (cell) } } } } }
                }
            }
        },
        Block::Diff { unified } => diff(unified),
        // Markdown is shown as written: rendering it would be rendering what a model or a file
        // says into the page.
        Block::Markdown { text } => html! { pre class="markdown" { (text) } },
        Block::Progress { label, fraction } => html! {
            div class="progress" {
                (label)
                @if let Some(fraction) = fraction {
                    " " progress max="100" value=(format!("{:.0}", fraction * 100.0)) {}
                }
            }
        },
        Block::Badge(badge) => html! { span class={ "badge " (tone(badge.tone)) } { (badge.label) } },
        Block::File { path, mime, bytes } => html! {
            div class="file" { "File " code { (path) } " (" (mime) ", " (bytes) " bytes)" }
        },
    }
}

/// A unified diff, each line marked added, removed or hunk.
pub fn diff(unified: &str) -> Markup {
    html! {
        pre class="diff" {
            @for line in unified.lines() {
                @let class = if line.starts_with("+++") || line.starts_with("---") { "file" }
                    else if line.starts_with('+') { "add" }
                    else if line.starts_with('-') { "del" }
                    else if line.starts_with("@@") { "hunk" }
                    else { "ctx" };
                span class=(class) { (line) } "\n"
            }
        }
    }
}

/// Pretty JSON for people.
pub fn json(value: &Value) -> Markup {
    html! { pre class="code" data-language="json" { code { (serde_json::to_string_pretty(value).unwrap_or_default()) } } }
}

/// A time, in UTC, with a machine-readable attribute the script shows in the reader's zone.
pub fn time(ms: i64) -> Markup {
    let text = utc(ms);
    html! { time datetime=(text) data-ms=(ms) { (text) } }
}

/// `YYYY-MM-DDTHH:MM:SSZ` of Unix milliseconds (no calendar crate for one format).
pub fn utc(ms: i64) -> String {
    let seconds = ms.div_euclid(1000);
    let (days, rest) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rest / 3600, rest % 3600 / 60, rest % 60)
}

/// A duration in words (`4 s`, `3 min`, `2 h 5 min`).
pub fn duration(ms: i64) -> String {
    let seconds = ms.max(0) / 1000;
    match seconds {
        0..=59 => format!("{seconds} s"),
        60..=3599 => format!("{} min", seconds / 60),
        _ => format!("{} h {} min", seconds / 3600, seconds % 3600 / 60),
    }
}

/// A short message (a notice or an error) above a page's content.
pub fn notice(kind: &str, text: &str) -> Markup {
    html! { p class={ "notice " (kind) } role=(if kind == "error" { "alert" } else { "status" }) { (text) } }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_tools_and_models_say_is_text() {
        let hostile = Card::new("<img src=x onerror=alert(1)>")
            .subtitle("<script>alert(2)</script>")
            .block(Block::Code {
                language: Some("\"><script>".into()),
                text: "</pre><script>x</script>".into(),
            })
            .block(Block::Diff { unified: "+<b onmouseover=y>".into() })
            .block(Block::Markdown { text: "[a](javascript:alert(3))".into() });
        let markup = card(&hostile).into_string();
        assert!(
            !markup.contains("<img") && !markup.contains("<script>") && !markup.contains("<b "),
            "{markup}"
        );
        assert!(markup.contains("&lt;img src=x onerror=alert(1)&gt;"));
        assert!(!markup.contains("href"), "markdown is not rendered into links: {markup}");
    }

    #[test]
    fn times_are_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(1_796_601_600_000), "2026-12-07T00:00:00Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(duration(65_000), "1 min");
        assert_eq!(duration(7_500_000), "2 h 5 min");
    }
}
