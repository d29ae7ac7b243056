//! Best-effort parsing of JSON that is still streaming.
//!
//! Models stream tool arguments token by token; the inspector hook wants to show `path: src/ma…`
//! before the closing brace arrives. [`parse_partial`] closes what is open and drops what is too
//! incomplete to mean anything (a key without its value, a dangling comma, half an escape).

use serde_json::Value;

/// Parses a prefix of a JSON document; `None` when nothing sensible can be made of it yet.
///
/// ```
/// use serde_json::json;
/// use tool_core::partial_json::parse_partial;
///
/// assert_eq!(parse_partial(r#"{"path": "src/ma"#), Some(json!({"path": "src/ma"})));
/// assert_eq!(parse_partial(r#"{"a": [1, 2, tr"#), Some(json!({"a": [1, 2, true]})));
/// ```
pub fn parse_partial(text: &str) -> Option<Value> {
    if let Ok(value) = serde_json::from_str(text) {
        return Some(value);
    }
    let repaired = repair(text)?;
    serde_json::from_str(&repaired).ok()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    Key,
    Colon,
    Value,
    CommaOrEnd,
}

struct Frame {
    object: bool,
    expect: Expect,
    /// Where to cut to drop the member being written (just after `{`, `[` or before `,`).
    member_start: usize,
}

fn repair(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut stack: Vec<Frame> = Vec::new();
    let mut in_string = false;
    let mut string_is_key = false;
    let mut escaped = false;
    let mut scalar_start: Option<usize> = None;
    let mut top_done = false;

    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
                finish_token(&mut stack, string_is_key, &mut top_done);
            }
            i += 1;
            continue;
        }
        if scalar_start.is_some() && matches!(b, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') {
            scalar_start = None;
            finish_token(&mut stack, false, &mut top_done);
        }
        match b {
            b'"' => {
                in_string = true;
                string_is_key = stack.last().is_some_and(|f| f.object && f.expect == Expect::Key);
            }
            b'{' | b'[' => stack.push(Frame {
                object: b == b'{',
                expect: if b == b'{' { Expect::Key } else { Expect::Value },
                member_start: i + 1,
            }),
            b'}' | b']' => {
                stack.pop()?;
                finish_token(&mut stack, false, &mut top_done);
            }
            b':' => stack.last_mut()?.expect = Expect::Value,
            b',' => {
                let frame = stack.last_mut()?;
                frame.expect = if frame.object { Expect::Key } else { Expect::Value };
                frame.member_start = i;
            }
            b' ' | b'\n' | b'\r' | b'\t' => {}
            _ => {
                if scalar_start.is_none() {
                    scalar_start = Some(i);
                }
            }
        }
        i += 1;
    }

    let mut out = text.to_owned();
    if in_string {
        if string_is_key {
            out.truncate(stack.last()?.member_start);
        } else {
            trim_incomplete_escape(&mut out);
            out.push('"');
        }
    } else if let Some(start) = scalar_start {
        match complete_scalar(&text[start..]) {
            Some(done) => {
                out.truncate(start);
                out.push_str(&done);
            }
            None => out.truncate(stack.last()?.member_start),
        }
    } else if let Some(frame) = stack.last() {
        let dangling = match (frame.object, frame.expect) {
            (true, Expect::Colon | Expect::Value) => true,
            (_, Expect::Key | Expect::Value) => bytes.get(frame.member_start) == Some(&b','),
            _ => false,
        };
        if dangling {
            out.truncate(frame.member_start);
        }
    } else if !top_done {
        return None;
    }
    for frame in stack.iter().rev() {
        out.push(if frame.object { '}' } else { ']' });
    }
    Some(out)
}

fn finish_token(stack: &mut [Frame], was_key: bool, top_done: &mut bool) {
    match stack.last_mut() {
        Some(frame) if was_key => frame.expect = Expect::Colon,
        Some(frame) => frame.expect = Expect::CommaOrEnd,
        None => *top_done = true,
    }
}

fn trim_incomplete_escape(out: &mut String) {
    // A lone trailing backslash, or `\u` with fewer than four hex digits, cannot be closed.
    if let Some(pos) = out.rfind("\\u") {
        let tail = &out[pos + 2..];
        let preceding_backslashes = out[..pos].bytes().rev().take_while(|&b| b == b'\\').count();
        if tail.len() < 4 && preceding_backslashes % 2 == 0 {
            out.truncate(pos);
            return;
        }
    }
    let trailing = out.bytes().rev().take_while(|&b| b == b'\\').count();
    if trailing % 2 == 1 {
        out.pop();
    }
}

fn complete_scalar(token: &str) -> Option<String> {
    for literal in ["true", "false", "null"] {
        if literal.starts_with(token) {
            return Some(literal.to_owned());
        }
    }
    let trimmed = token.trim_end_matches(['.', '-', '+', 'e', 'E']);
    (!trimmed.is_empty() && trimmed.parse::<f64>().is_ok()).then(|| trimmed.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prefixes() {
        let cases: &[(&str, Option<Value>)] = &[
            ("", None),
            ("{", Some(json!({}))),
            (r#"{""#, Some(json!({}))),
            (r#"{"pa"#, Some(json!({}))),
            (r#"{"path""#, Some(json!({}))),
            (r#"{"path":"#, Some(json!({}))),
            (r#"{"path": "a\"#, Some(json!({"path": "a"}))),
            (r#"{"path": "a\u00"#, Some(json!({"path": "a"}))),
            (r#"{"path": "a\\"#, Some(json!({"path": "a\\"}))),
            (r#"{"path": "a.txt", "#, Some(json!({"path": "a.txt"}))),
            (r#"{"path": "a.txt", "lim"#, Some(json!({"path": "a.txt"}))),
            (r#"{"limit": 12"#, Some(json!({"limit": 12}))),
            (r#"{"limit": 1.5e"#, Some(json!({"limit": 1.5}))),
            (r#"{"limit": -"#, Some(json!({}))),
            (r#"{"all": fa"#, Some(json!({"all": false}))),
            (
                r#"{"edits": [{"old": "x", "new": "y"}, {"old"#,
                Some(json!({"edits": [{"old": "x", "new": "y"}, {}]})),
            ),
            (r#"{"items": [1, 2,"#, Some(json!({"items": [1, 2]}))),
            (r#"{"items": [1, 2"#, Some(json!({"items": [1, 2]}))),
            (r#"{"a": {"b": {"c": "dee"#, Some(json!({"a": {"b": {"c": "dee"}}}))),
            (r#"{"a": 1}"#, Some(json!({"a": 1}))),
            ("tr", Some(json!(true))),
            (r#"{"a": 1}}"#, None),
        ];
        for (input, expected) in cases {
            assert_eq!(&parse_partial(input), expected, "input: {input}");
        }
    }
}
