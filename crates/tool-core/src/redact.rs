//! Secret values taken out of text: what the pipeline applies to every output before the model,
//! a person, the journal or a log sees it (BRIEF invariant 9).
//!
//! A [`Redactor`] knows each secret by a label (the credential's name) and finds it in the forms
//! it travels in: as written, percent-encoded (a query string), JSON-escaped, and base64 (standard
//! and URL-safe, padded or not, and inside a longer base64 text at any alignment: an HTTP basic
//! header, a token echoed back encoded, a JWT), form-encoded, with lower-case escapes. Each is
//! replaced by `[redacted: LABEL]`. Values shorter than [`MIN_SECRET_CHARS`] are not looked for:
//! they cannot be told apart from ordinary text.
//!
//! ```
//! use tool_core::redact::Redactor;
//!
//! let redactor = Redactor::new([("github", "ghp_abcdef123456")]);
//! assert_eq!(redactor.redact("token ghp_abcdef123456 ok"), "token [redacted: github] ok");
//! ```

use std::borrow::Cow;

use aho_corasick::{AhoCorasick, MatchKind};
use serde_json::Value;

use crate::runtime::ToolOutput;

/// The shortest value looked for. Shorter ones could not be told from ordinary text, and a
/// redaction of a short value answers guesses (a model printing candidates would see which one
/// comes back redacted).
pub const MIN_SECRET_CHARS: usize = 8;

/// Finds secret values in text and replaces them by their labels.
#[derive(Clone, Default)]
pub struct Redactor {
    matcher: Option<AhoCorasick>,
    /// The replacement of each pattern, in pattern order.
    replacements: Vec<String>,
    /// Distinct labels, for `Debug`.
    labels: Vec<String>,
    /// The automaton could not be built: nothing would be found ([`Redactor::is_broken`]).
    broken: bool,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor").field("labels", &self.labels).finish_non_exhaustive()
    }
}

impl Redactor {
    /// A redactor of these `(label, value)` pairs.
    pub fn new<L: AsRef<str>, V: AsRef<str>>(secrets: impl IntoIterator<Item = (L, V)>) -> Self {
        let mut patterns: Vec<String> = Vec::new();
        let mut replacements = Vec::new();
        let mut labels: Vec<String> = Vec::new();
        for (label, value) in secrets {
            let (label, value) = (label.as_ref(), value.as_ref());
            if value.chars().count() < MIN_SECRET_CHARS {
                continue;
            }
            if !labels.iter().any(|l| l == label) {
                labels.push(label.to_owned());
            }
            for form in forms(value) {
                if !patterns.contains(&form) {
                    patterns.push(form);
                    replacements.push(format!("[redacted: {label}]"));
                }
            }
        }
        // Leftmost-longest: a value inside a longer one's form is not cut out of it first.
        let built = (!patterns.is_empty())
            .then(|| AhoCorasick::builder().match_kind(MatchKind::LeftmostLongest).build(&patterns).ok());
        let broken = matches!(built, Some(None));
        Self { matcher: built.flatten(), replacements, labels, broken }
    }

    /// Whether it was given values but could not build its automaton (it would find nothing):
    /// whoever holds the values must refuse them rather than pass them on unredacted.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// Whether it looks for nothing.
    pub fn is_empty(&self) -> bool {
        self.matcher.is_none()
    }

    /// The labels it knows.
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// `text` with every secret replaced (borrowed when there was none).
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let Some(matcher) = &self.matcher else { return Cow::Borrowed(text) };
        if !matcher.is_match(text) {
            return Cow::Borrowed(text);
        }
        Cow::Owned(matcher.replace_all(text, &self.replacements))
    }

    /// Redacts `text` in place; whether anything was replaced.
    pub fn redact_string(&self, text: &mut String) -> bool {
        match self.redact(text) {
            Cow::Borrowed(_) => false,
            Cow::Owned(clean) => {
                *text = clean;
                true
            }
        }
    }

    /// Redacts every string in a JSON value (object keys too).
    pub fn redact_value(&self, value: &mut Value) {
        if self.is_empty() {
            return;
        }
        match value {
            Value::String(text) => {
                self.redact_string(text);
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_value(v)),
            Value::Object(map) => {
                let dirty: Vec<String> =
                    map.keys().filter(|k| matches!(self.redact(k), Cow::Owned(_))).cloned().collect();
                for key in dirty {
                    if let Some(inner) = map.remove(&key) {
                        map.insert(self.redact(&key).into_owned(), inner);
                    }
                }
                map.values_mut().for_each(|v| self.redact_value(v));
            }
            _ => {}
        }
    }

    /// Redacts an output's content, error and state.
    pub fn redact_output(&self, output: &mut ToolOutput) {
        if self.is_empty() {
            return;
        }
        self.redact_string(&mut output.content);
        if let Some(error) = &mut output.error {
            self.redact_string(&mut error.message);
        }
        if let Some(state) = &mut output.state {
            self.redact_value(state);
        }
    }
}

/// The forms a value travels in.
fn forms(value: &str) -> Vec<String> {
    let mut out = vec![value.to_owned()];
    let mut add = |form: String| {
        if form.len() >= MIN_SECRET_CHARS && !out.contains(&form) {
            out.push(form);
        }
    };
    add(crate::urls::encode(value));
    let percent = percent_all(value);
    add(lower_escapes(&percent));
    add(percent);
    add(form_encode(value));
    let json = serde_json::to_string(value).unwrap_or_default();
    let inner = json.strip_prefix('"').and_then(|j| j.strip_suffix('"')).unwrap_or(&json).to_owned();
    add(inner.replace('/', "\\/"));
    add(inner);
    for alphabet in [STANDARD, URL_SAFE] {
        for pad in [true, false] {
            add(base64(value.as_bytes(), alphabet, pad));
        }
        // Inside a longer base64 text the value starts at any of three alignments; the characters
        // its neighbours share are left out, the rest is always the same.
        for offset in 0..3 {
            let mut bytes = vec![0u8; offset];
            bytes.extend_from_slice(value.as_bytes());
            let encoded = base64(&bytes, alphabet, false);
            let start = (offset * 8).div_ceil(6);
            let end = (bytes.len() * 8 / 6).min(encoded.len());
            if end > start {
                add(encoded[start..end].to_owned());
            }
        }
    }
    out
}

/// Percent escapes with lower-case hex digits (`%2f`), as some clients write them.
fn lower_escapes(percent: &str) -> String {
    let mut out = String::with_capacity(percent.len());
    let mut chars = percent.chars();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '%' {
            out.extend(chars.next().map(|h| h.to_ascii_lowercase()));
            out.extend(chars.next().map(|h| h.to_ascii_lowercase()));
        }
    }
    out
}

/// `application/x-www-form-urlencoded`: letters, digits and `*-._` kept, a space as `+`, the rest
/// escaped (a query string built by a URL library, a form body).
fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b' ' => out.push('+'),
            b if b.is_ascii_alphanumeric() || b"*-._".contains(&b) => out.push(b as char),
            b => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Every byte but unreserved ones (RFC 3986: letters, digits, `-._~`) percent-encoded, as a form
/// body, a path segment or a strict client writes it.
pub fn percent_all(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

const STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URL_SAFE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Base64 of `bytes` in `alphabet`, padded or not.
pub fn base64(bytes: &[u8], alphabet: &[u8; 64], pad: bool) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        let sextets = [(n >> 18) & 63, (n >> 12) & 63, (n >> 6) & 63, n & 63];
        for (i, sextet) in sextets.iter().enumerate() {
            if i <= chunk.len() {
                out.push(alphabet[*sextet as usize] as char);
            } else if pad {
                out.push('=');
            }
        }
    }
    out
}

/// Base64 in the standard alphabet, padded (an HTTP basic header's form).
pub fn base64_standard(bytes: &[u8]) -> String {
    base64(bytes, STANDARD, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn base64_matches_the_rfc_vectors() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
        ] {
            assert_eq!(base64_standard(plain.as_bytes()), encoded);
        }
        assert_eq!(base64(&[0xfb, 0xff], URL_SAFE, false), "-_8");
    }

    #[test]
    fn every_form_of_a_value_is_replaced() {
        let secret = "s3cr3t/value+x";
        let redactor = Redactor::new([("api", secret)]);
        let basic = base64_standard(secret.as_bytes());
        let text = format!(
            "raw {secret}; query key=s3cr3t%2Fvalue%2Bx; basic {basic}; unpadded {}",
            basic.trim_end_matches('=')
        );
        let clean = redactor.redact(&text);
        assert!(!clean.contains("s3cr3t"), "{clean}");
        assert!(!clean.contains(basic.trim_end_matches('=')), "{clean}");
        assert_eq!(clean.matches("[redacted: api]").count(), 4, "{clean}");
    }

    #[test]
    fn a_value_inside_longer_base64_and_other_encodings_is_found() {
        let secret = "key with/space+42";
        let redactor = Redactor::new([("k", secret)]);
        // Inside base64 of a larger document, at each of the three alignments.
        for prefix in ["", "x", "xy", "{\"token\":\""] {
            let document = format!("{prefix}{secret}\",\"more\":1}}");
            for encoded in
                [base64_standard(document.as_bytes()), base64(document.as_bytes(), URL_SAFE, false)]
            {
                let clean = redactor.redact(&encoded);
                assert!(clean.contains("[redacted: k]"), "{prefix:?}: {encoded} -> {clean}");
            }
        }
        for form in ["key+with%2Fspace%2B42", "key%20with%2fspace%2b42", "key with\\/space+42"] {
            assert_eq!(redactor.redact(form), "[redacted: k]", "{form}");
        }
        assert!(!Redactor::new([("k", "12345678")]).is_broken());
    }

    #[test]
    fn values_keys_outputs_and_short_values() {
        let redactor = Redactor::new([("a", "tok-123456"), ("short", "abc")]);
        assert_eq!(redactor.labels(), ["a"]);
        let mut value = json!({"tok-123456": ["x tok-123456", 1, {"k": "tok-123456"}], "abc": "abc"});
        redactor.redact_value(&mut value);
        assert_eq!(
            value,
            json!({"[redacted: a]": ["x [redacted: a]", 1, {"k": "[redacted: a]"}], "abc": "abc"})
        );
        let mut output = ToolOutput::error(crate::ErrorKind::Execution, "bad key tok-123456")
            .with_state(json!({"url": "https://h/?k=tok-123456"}));
        redactor.redact_output(&mut output);
        assert_eq!(output.content, "bad key [redacted: a]");
        assert_eq!(output.error.unwrap().message, "bad key [redacted: a]");
        assert_eq!(output.state.unwrap()["url"], "https://h/?k=[redacted: a]");
        assert!(Redactor::default().is_empty());
        assert!(matches!(Redactor::default().redact("x"), Cow::Borrowed("x")));
    }

    #[test]
    fn the_longest_overlapping_value_wins() {
        let redactor = Redactor::new([("inner", "abcd1234"), ("outer", "xxabcd1234yy")]);
        assert_eq!(redactor.redact("-xxabcd1234yy-abcd1234"), "-[redacted: outer]-[redacted: inner]");
    }
}
