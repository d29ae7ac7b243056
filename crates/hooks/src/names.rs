//! Claude Code's tool names and input shapes for the file and command tools, so the scripts
//! people already have (`jq -r .tool_input.command`, `.tool_input.file_path`, matcher `Bash`)
//! work unchanged. A hook sees `tool_name` `Bash` and `tool_input.command` for `runCommand`, and
//! an `updatedInput` it returns in that shape is taken back into ours.

use serde_json::{Map, Value};

const TOOL: &str = "local-system";

/// Claude Code's name for a call, when it has one: `Bash`, `Read`… for the file and command
/// tools, `mcp__SERVER__TOOL` for a mounted MCP server's tool.
pub fn claude_name(tool: &str, api: &str, arguments: &Value) -> Option<std::borrow::Cow<'static, str>> {
    if let Some(server) = tool.strip_prefix("mcp-") {
        // A mounted tool's API is named for the model, `SERVER__TOOL`: the hook sees the tool as
        // its server names it, once.
        let own = api.strip_prefix(server).and_then(|rest| rest.strip_prefix("__")).unwrap_or(api);
        return Some(format!("mcp__{server}__{own}").into());
    }
    if tool != TOOL {
        return None;
    }
    Some(std::borrow::Cow::Borrowed(match api {
        "runCommand" => "Bash",
        "readFile" => "Read",
        "writeFile" => "Write",
        "editFile" if arguments.get("edits").is_some() => "MultiEdit",
        "editFile" => "Edit",
        "grepContent" => "Grep",
        "globFiles" => "Glob",
        _ => return None,
    }))
}

/// Our field → Claude Code's, per API (fields not listed keep their names).
fn renames(api: &str) -> &'static [(&'static str, &'static str)] {
    match api {
        "runCommand" => &[("background", "run_in_background"), ("escalate", "dangerouslyDisableSandbox")],
        "readFile" | "writeFile" => &[("path", "file_path")],
        "editFile" => &[
            ("path", "file_path"),
            ("oldText", "old_string"),
            ("newText", "new_string"),
            ("replaceAll", "replace_all"),
        ],
        "grepContent" => &[("caseInsensitive", "-i"), ("maxResults", "head_limit")],
        "globFiles" => &[("directory", "path")],
        _ => &[],
    }
}

fn rename(object: &Map<String, Value>, pairs: &[(&str, &str)], forward: bool) -> Map<String, Value> {
    object
        .iter()
        .map(|(key, value)| {
            let renamed = pairs
                .iter()
                .find(|(ours, theirs)| if forward { ours == key } else { theirs == key })
                .map_or(key.as_str(), |(ours, theirs)| if forward { theirs } else { ours });
            (renamed.to_owned(), value.clone())
        })
        .collect()
}

/// The call's input as Claude Code's tool would have it (ours unchanged for other tools).
pub fn to_claude(tool: &str, api: &str, arguments: &Value) -> Value {
    let (true, Value::Object(object)) =
        (tool == TOOL && claude_name(tool, api, arguments).is_some(), arguments)
    else {
        return arguments.clone();
    };
    let pairs = renames(api);
    let mut out = rename(object, pairs, true);
    if let Some(Value::Array(edits)) = out.get_mut("edits") {
        for edit in edits.iter_mut() {
            if let Value::Object(item) = edit {
                *item = rename(item, pairs, true);
            }
        }
    }
    if api == "grepContent" {
        out.insert("output_mode".into(), Value::String("content".into()));
    }
    Value::Object(out)
}

/// An input a hook returned in Claude Code's shape, in ours (our own field names pass as they
/// are; Claude's fields with no counterpart are left for validation to name).
pub fn from_claude(tool: &str, api: &str, arguments: &Value, updated: &Value) -> Value {
    let (true, Value::Object(object)) =
        (tool == TOOL && claude_name(tool, api, arguments).is_some(), updated)
    else {
        return updated.clone();
    };
    let pairs = renames(api);
    let mut out = rename(object, pairs, false);
    if let Some(Value::Array(edits)) = out.get_mut("edits") {
        for edit in edits.iter_mut() {
            if let Value::Object(item) = edit {
                *item = rename(item, pairs, false);
            }
        }
    }
    if api == "grepContent" && out.get("output_mode").and_then(Value::as_str).is_none_or(|m| m == "content") {
        out.remove("output_mode");
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn inputs_go_to_claude_codes_shape_and_back() {
        let cases = [
            ("runCommand", json!({"command": "rm -rf x", "background": true, "timeout": 5000}), "Bash"),
            ("readFile", json!({"path": "a.rs", "offset": 3}), "Read"),
            ("writeFile", json!({"path": "a.rs", "content": "x"}), "Write"),
            ("editFile", json!({"path": "a.rs", "oldText": "a", "newText": "b", "replaceAll": true}), "Edit"),
            ("editFile", json!({"path": "a.rs", "edits": [{"oldText": "a", "newText": "b"}]}), "MultiEdit"),
            ("grepContent", json!({"pattern": "fn", "caseInsensitive": true}), "Grep"),
            ("globFiles", json!({"pattern": "**/*.rs", "directory": "src"}), "Glob"),
        ];
        for (api, ours, name) in cases {
            assert_eq!(claude_name(TOOL, api, &ours).as_deref(), Some(name));
            let theirs = to_claude(TOOL, api, &ours);
            assert_eq!(from_claude(TOOL, api, &ours, &theirs), ours, "{api}");
        }
        let bash = to_claude(TOOL, "runCommand", &json!({"command": "ls", "background": true}));
        assert_eq!(bash, json!({"command": "ls", "run_in_background": true}));
        let edit =
            to_claude(TOOL, "editFile", &json!({"path": "a", "edits": [{"oldText": "x", "newText": "y"}]}));
        assert_eq!(edit, json!({"file_path": "a", "edits": [{"old_string": "x", "new_string": "y"}]}));
        // Other tools keep their names and shapes.
        assert_eq!(claude_name("web-browsing", "search", &json!({})), None);
        assert_eq!(
            claude_name("mcp-github", "create_issue", &json!({})).as_deref(),
            Some("mcp__github__create_issue")
        );
        // As the mount names its APIs for the model (`SERVER__TOOL`), the server is said once.
        assert_eq!(
            claude_name("mcp-time", "time__get_current_time", &json!({})).as_deref(),
            Some("mcp__time__get_current_time")
        );
        assert_eq!(to_claude("memory", "addMemory", &json!({"a": 1})), json!({"a": 1}));
        // Our names in an updated input are kept.
        let back = from_claude(TOOL, "readFile", &json!({"path": "a"}), &json!({"path": "b"}));
        assert_eq!(back, json!({"path": "b"}));
    }
}
