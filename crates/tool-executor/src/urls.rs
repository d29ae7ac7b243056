//! `journal://KEY`: the whole output of one of the session's own past calls, as the journal kept
//! it (the model gets a long output cut, with this address to read on).

use std::sync::Arc;

use futures::future::BoxFuture;
use journal::Journal;
use tool_core::urls::{self, Lines};
use tool_core::{CallContext, ErrorKind, ToolOutput, UrlReader};

/// Reads `journal://KEY[:N-M]` for the calling session's own calls.
#[derive(Clone)]
pub struct JournalUrls {
    journal: Arc<dyn Journal>,
}

impl std::fmt::Debug for JournalUrls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JournalUrls").finish_non_exhaustive()
    }
}

impl JournalUrls {
    /// A reader over `journal`.
    pub fn new(journal: Arc<dyn Journal>) -> Self {
        Self { journal }
    }
}

impl UrlReader for JournalUrls {
    fn scheme(&self) -> &'static str {
        "journal"
    }

    fn describe(&self) -> &'static str {
        "the whole output of one of this session's calls: journal://KEY, as a cut output names it"
    }

    fn read<'a>(
        &'a self,
        rest: &'a str,
        lines: Lines,
        context: &'a CallContext,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            // Another session's key reads as no key at all: nothing says it exists.
            let unknown = || {
                ToolOutput::error(
                    ErrorKind::NotFound,
                    format!(
                        "journal://{rest} names no call of this session; use the address a cut output gave"
                    ),
                )
            };
            let Some(key) = urls::decode(rest).filter(|k| !k.is_empty()) else { return unknown() };
            let tenant = context.sandbox.tenant.as_deref().unwrap_or("local");
            let row = match self.journal.get(tenant, &key).await {
                Ok(Some(row)) if row.session_id == context.session_id => row,
                Ok(_) => return unknown(),
                Err(error) => {
                    return ToolOutput::error(
                        ErrorKind::Execution,
                        format!("the journal cannot be read now: {error}"),
                    );
                }
            };
            let stored = row.result.unwrap_or(serde_json::Value::Null);
            let Some(content) = stored.get("content").and_then(serde_json::Value::as_str) else {
                return ToolOutput::error(
                    ErrorKind::NotFound,
                    format!("the call journal://{rest} has no output (yet)"),
                );
            };
            let expired = stored.get("expired").and_then(serde_json::Value::as_bool).unwrap_or(false);
            let address = format!("journal://{rest}");
            match urls::read_lines(content, lines, &address) {
                Some(mut text) => {
                    if expired && !lines.raw {
                        text.push_str(
                            "\n[Only the beginning of this output is kept now: the rest has expired.]",
                        );
                    }
                    ToolOutput::ok(text).with_state(serde_json::json!({
                        "address": address,
                        "call_id": row.call_id,
                        "tool": row.tool,
                        "api": row.api,
                        "lines": content.lines().count(),
                    }))
                }
                None => ToolOutput::error(
                    ErrorKind::InvalidArguments,
                    format!("{address} has {} lines; start at one of them", content.lines().count()),
                ),
            }
        })
    }
}
