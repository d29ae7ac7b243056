//! Results stored once: a call's `state` often repeats its `content` (a read's text is both what
//! the model reads and what a person sees). Before a result is stored, every long string of the
//! state that occurs in the content is replaced by a reference to where it occurs; reading a row
//! puts it back. The stored row keeps the state's structure and one copy of the text.
//!
//! ```
//! use serde_json::json;
//!
//! let text = "fn main() {}\n".repeat(20);
//! let result = json!({"content": format!("{text}\n[Showing lines 1-20 of 20]"), "state": {"content": text, "size": 260}});
//! let stored = journal::compact::compact(&result);
//! assert!(stored.to_string().len() < result.to_string().len() * 6 / 10);
//! assert_eq!(journal::compact::expand(stored), result);
//! ```

use serde_json::{Map, Value, json};

/// Strings shorter than this are stored as they are (a reference would not be smaller).
const MIN_LEN: usize = 64;

/// The key of a reference: `{"$content": [start, len]}`, byte offsets into the content.
const REFERENCE: &str = "$content";

/// The result with the state's long strings that occur in its content replaced by references.
/// Anything that is not `{"content": string, "state": …}` is returned as it is.
pub fn compact(result: &Value) -> Value {
    let Some(content) = result.get("content").and_then(Value::as_str) else { return result.clone() };
    let Some(state) = result.get("state") else { return result.clone() };
    let mut out = result.clone();
    out["state"] = replace(state, content);
    out
}

/// A stored result with its references put back.
pub fn expand(mut result: Value) -> Value {
    let Some(content) = result.get("content").and_then(Value::as_str).map(str::to_owned) else {
        return result;
    };
    if let Some(state) = result.get_mut("state") {
        restore(state, &content);
    }
    result
}

fn replace(value: &Value, content: &str) -> Value {
    match value {
        Value::String(text) if text.len() >= MIN_LEN => match content.find(text.as_str()) {
            Some(start) => json!({REFERENCE: [start, text.len()]}),
            None => value.clone(),
        },
        Value::Array(items) => Value::Array(items.iter().map(|item| replace(item, content)).collect()),
        // A state's own object that looks like a reference is escaped, so it reads back as itself.
        Value::Object(map) if is_reference(map) => json!({REFERENCE: {"escaped": value}}),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), replace(v, content))).collect())
        }
        _ => value.clone(),
    }
}

fn restore(value: &mut Value, content: &str) {
    match value {
        Value::Object(map) if is_reference(map) => {
            let reference = &map[REFERENCE];
            if let Some(original) = reference.get("escaped") {
                *value = original.clone();
            } else if let Some(text) = slice(reference, content) {
                *value = Value::String(text.to_owned());
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| restore(item, content)),
        Value::Object(map) => map.values_mut().for_each(|item| restore(item, content)),
        _ => {}
    }
}

fn is_reference(map: &Map<String, Value>) -> bool {
    map.len() == 1 && map.contains_key(REFERENCE)
}

fn slice<'a>(reference: &Value, content: &'a str) -> Option<&'a str> {
    let start = usize::try_from(reference.get(0)?.as_u64()?).ok()?;
    let len = usize::try_from(reference.get(1)?.as_u64()?).ok()?;
    content.get(start..start.checked_add(len)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_leaves_other_results_alone() {
        let long = "x".repeat(100);
        let cases = [
            json!({"content": format!("header\n{long}\nfooter"), "state": {"content": long, "lines": [long, "short"]}}),
            json!({"content": "short", "state": {"content": "short"}}),
            json!({"content": long, "state": null}),
            json!({"content": long, "state": {"$content": [0, 5]}}),
            json!({"content": long, "state": {"other": "not in the content at all, and long enough to be considered"}}),
            json!({"no": "content"}),
            json!("a string"),
        ];
        for case in &cases {
            assert_eq!(&expand(compact(case)), case, "{case}");
        }
        let stored = compact(&cases[0]);
        assert_eq!(stored["state"]["content"], json!({"$content": [7, 100]}));
        assert_eq!(stored["state"]["lines"][1], "short");
    }
}
