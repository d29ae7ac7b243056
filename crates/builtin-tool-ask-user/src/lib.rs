//! The `ask-user` tool: a question to the person, with choices or free text.
//!
//! `askUser {question, options?, multiple?, allowOther?}` asks through the pipeline's
//! [`tool_core::PersonAsker`]: the same channel approvals use (the terminal app inline, the
//! server's approvals API and event stream, an MCP client's elicitation form, a device's
//! person), journalled with the answer and who gave it. Where no person can answer (a headless
//! session, a device with no one at it) the result says so at once, and what to do instead.
//!
//! ```
//! let manifest = builtin_tool_ask_user::manifest();
//! assert_eq!(manifest.apis[0].name, "askUser");
//! assert!(manifest.apis[0].asks_person);
//! ```
#![deny(missing_docs)]

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tool_core::{ApiSpec, ExecutionMode, Executor, Intervention, Tier, ToolManifest, ToolMeta};

/// The tool's identifier.
pub const IDENTIFIER: &str = "ask-user";

/// The system-role template.
pub const SYSTEM_ROLE: &str = include_str!("system_role.md");

/// How long a question waits for its answer by default: as long as an approval.
pub const DEFAULT_WAIT_MS: u64 = 600_000;

tool_core::api_enum! {
    /// The APIs of the `ask-user` tool.
    pub enum AskUserApi {
        /// Ask the person a question.
        Ask = "askUser",
    }
}

/// Arguments of `askUser`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AskUserArgs {
    /// The question, complete and on its own (the person may not have followed every step).
    pub question: String,
    /// Short labels to choose from (at most 12, likeliest first); leave out for a free-text answer.
    #[serde(default)]
    pub options: Option<Vec<String>>,
    /// Several options may be chosen.
    #[serde(default)]
    pub multiple: Option<bool>,
    /// The person may also answer in their own words.
    #[serde(default)]
    pub allow_other: Option<bool>,
}

impl AskUserArgs {
    /// The question as the pipeline asks it.
    pub fn question(&self) -> tool_core::Question {
        tool_core::Question {
            question: self.question.trim().to_owned(),
            options: self.options.iter().flatten().map(|o| o.trim().to_owned()).collect(),
            multiple: self.multiple.unwrap_or(false),
            allow_other: self.allow_other.unwrap_or(false),
        }
    }
}

/// The tool's manifest.
pub fn manifest() -> ToolManifest {
    ToolManifest::new(IDENTIFIER, ToolMeta::new("Ask user", "Ask the person a question and wait for the answer").icon("❓"))
        .intervention(Intervention::Never.into())
        .executors([Executor::Server, Executor::Client])
        .system_role(SYSTEM_ROLE)
        .api(
            ApiSpec::new::<AskUserArgs>(
                AskUserApi::Ask.name(),
                "Ask the person you work for a question (with options to choose from, or free text) and wait for \
                 the answer. Only for decisions and facts you cannot find out yourself; never to ask permission \
                 to run a tool.",
            )
            .tier(Tier::Read)
            .timeout_ms(DEFAULT_WAIT_MS)
            .execution(ExecutionMode::Sequential)
            .asks_person(),
        )
}

#[cfg(feature = "runtime")]
mod runtime {
    use std::sync::Arc;

    use futures::future::BoxFuture;
    use serde_json::{Value, json};
    use tool_core::{
        Asked, CallContext, ErrorKind, MissingService, Services, ToolOutput, ToolRuntime, parse_arguments,
    };

    use super::*;

    /// What the model reads when no one can answer.
    pub const NO_ONE: &str = "No one can answer questions here";

    /// Runs `askUser`.
    #[derive(Debug, Clone, Default)]
    pub struct AskUserRuntime;

    /// Builds the runtime (this tool needs no service: it asks through the call's context).
    ///
    /// # Errors
    ///
    /// None; the signature is the one every builtin tool exports.
    pub fn runtime(_services: &Services) -> Result<Arc<dyn ToolRuntime>, MissingService> {
        Ok(Arc::new(AskUserRuntime))
    }

    impl ToolRuntime for AskUserRuntime {
        fn execute<'a>(
            &'a self,
            api: &'a str,
            arguments: Value,
            context: &'a CallContext,
        ) -> BoxFuture<'a, ToolOutput> {
            Box::pin(async move {
                if api.parse::<AskUserApi>().is_err() {
                    return ToolOutput::error(ErrorKind::UnknownTool, format!("ask-user has no api `{api}`"));
                }
                let args: AskUserArgs = match parse_arguments(api, arguments) {
                    Ok(args) => args,
                    Err(output) => return output,
                };
                let question = args.question();
                if let Err(why) = question.check() {
                    return ToolOutput::error(
                        ErrorKind::InvalidArguments,
                        format!("the question cannot be asked: {why}"),
                    );
                }
                let asked = tokio::select! {
                    asked = context.ask(question.clone()) => asked,
                    () = context.cancel.cancelled() => Asked::Cancelled,
                };
                let state = json!({ "question": question, "asked": asked });
                let output = match &asked {
                    Asked::Answered { answer, by } => {
                        let mut content = String::from("The person answered");
                        if !answer.choices.is_empty() {
                            let chose = answer.choices.join("\", \"");
                            content.push_str(&format!(": chose \"{chose}\""));
                        }
                        if let Some(text) = answer.text.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
                            let joint = if answer.choices.is_empty() { ": " } else { ", and wrote: " };
                            content.push_str(&format!("{joint}{text}"));
                        }
                        content.push_str(&format!(" (answered by {by})."));
                        ToolOutput::ok(content)
                    }
                    Asked::Declined { message, .. } => {
                        let mut content = String::from("The person declined to answer");
                        match message.as_deref().map(str::trim).filter(|m| !m.is_empty()) {
                            Some(message) => content.push_str(&format!(", saying: {message}")),
                            None => content.push('.'),
                        }
                        content.push_str(
                            " Do not ask the same again; go on with what you know, or explain what you need.",
                        );
                        ToolOutput::error(ErrorKind::Denied, content)
                    }
                    Asked::NoOne { reason } => ToolOutput::error(
                        ErrorKind::Blocked,
                        format!(
                            "{NO_ONE} ({reason}). Do not ask again: make the most reasonable choice yourself, \
                             say which and why in your answer, and go on."
                        ),
                    ),
                    Asked::TimedOut => ToolOutput::error(
                        ErrorKind::Timeout,
                        "No answer came in time. Do not ask again now: go on with the most reasonable choice \
                         and say which, or stop and explain what you need.",
                    ),
                    Asked::Cancelled => ToolOutput::error(
                        ErrorKind::Cancelled,
                        "The question was withdrawn: the call was cancelled.",
                    ),
                };
                output.with_state(state)
            })
        }
    }
}

#[cfg(feature = "runtime")]
pub use runtime::{AskUserRuntime, NO_ONE, runtime};

#[cfg(feature = "render")]
mod render {
    use serde_json::Value;
    use tool_core::render::status_badge;
    use tool_core::{Block, Card, RenderHooks, ToolOutput};

    use super::AskUserArgs;

    /// Shows the question, its options, and what the person said.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct AskUserRender;

    fn question_card(arguments: &Value) -> Card {
        let question = arguments.get("question").and_then(Value::as_str).unwrap_or("…").to_owned();
        let mut card = Card::new("Question").block(Block::Markdown { text: question });
        let options: Vec<String> = arguments
            .get("options")
            .and_then(Value::as_array)
            .map(|o| o.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default();
        if !options.is_empty() {
            card = card.block(Block::List { items: options, ordered: true });
        }
        let parsed: Option<AskUserArgs> = serde_json::from_value(arguments.clone()).ok();
        let mut notes = Vec::new();
        if parsed.as_ref().and_then(|a| a.multiple).unwrap_or(false) {
            notes.push("several may be chosen");
        }
        if parsed.as_ref().and_then(|a| a.allow_other).unwrap_or(false) {
            notes.push("or an answer of one's own");
        }
        if !notes.is_empty() {
            card = card.subtitle(notes.join(", "));
        }
        card
    }

    impl RenderHooks for AskUserRender {
        fn inspector(&self, _api: &str, partial: &Value) -> Card {
            question_card(partial).subtitle("asking…")
        }

        fn placeholder(&self, _api: &str, arguments: &Value) -> Card {
            question_card(arguments)
        }

        fn intervention(&self, _api: &str, arguments: &Value) -> Card {
            question_card(arguments)
        }

        fn result(&self, _api: &str, arguments: &Value, output: &ToolOutput) -> Card {
            let mut card = question_card(arguments);
            card.badge = Some(status_badge(output));
            let asked = output.state.as_ref().and_then(|s| s.get("asked"));
            let answer = asked
                .and_then(|a| a.get("answer"))
                .and_then(|a| serde_json::from_value::<tool_core::Answer>(a.clone()).ok());
            match (answer, asked.and_then(|a| a.get("by")).and_then(Value::as_str)) {
                (Some(answer), by) => {
                    let by = by.map(|b| format!(" — {b}")).unwrap_or_default();
                    card.block(Block::Markdown { text: format!("→ {}{by}", answer.summary()) })
                }
                _ => card.block(Block::Markdown { text: output.content.clone() }),
            }
        }
    }
}

#[cfg(feature = "render")]
pub use render::AskUserRender;

/// The render hooks, as the registry's table holds them.
#[cfg(feature = "render")]
pub static RENDER: AskUserRender = AskUserRender;

#[cfg(all(test, feature = "runtime", feature = "render"))]
mod tests {
    use super::*;
    use serde_json::json;
    use tool_core::{Answer, Asked, CallContext, ErrorKind, PersonAsker, RenderHooks, Services};

    fn answering(asked: Asked) -> CallContext {
        let mut context = CallContext::new("call-1", "session-1");
        context.asker = Some(PersonAsker::new(move |_| {
            let asked = asked.clone();
            Box::pin(async move { asked })
        }));
        context
    }

    #[tokio::test]
    async fn an_answer_reads_back_with_who_gave_it() {
        let runtime = runtime(&Services::new()).unwrap();
        let context = answering(Asked::Answered {
            answer: Answer { choices: vec!["Postgres".into()], text: None },
            by: "terminal".into(),
        });
        let args = json!({"question": "Which database?", "options": ["SQLite", "Postgres"]});
        let output = runtime.execute("askUser", args.clone(), &context).await;
        assert!(output.success, "{output:?}");
        assert_eq!(output.content, "The person answered: chose \"Postgres\" (answered by terminal).");
        assert_eq!(output.state.as_ref().unwrap()["asked"]["by"], "terminal");
        let card = RENDER.result("askUser", &args, &output);
        assert!(format!("{card:?}").contains("→ Postgres — terminal"), "{card:?}");
    }

    #[tokio::test]
    async fn without_a_person_the_model_is_told_to_decide_itself() {
        let runtime = runtime(&Services::new()).unwrap();
        // A front end with no asker at all.
        let output = runtime
            .execute("askUser", json!({"question": "Tabs or spaces?"}), &CallContext::new("c", "s"))
            .await;
        assert_eq!(output.error.as_ref().unwrap().kind, ErrorKind::Blocked);
        assert!(
            output.content.starts_with(NO_ONE) && output.content.contains("make the most reasonable choice")
        );
        let declined = answering(Asked::Declined { by: "ann".into(), message: Some("not now".into()) });
        let output = runtime.execute("askUser", json!({"question": "Tabs or spaces?"}), &declined).await;
        assert_eq!(output.error.as_ref().unwrap().kind, ErrorKind::Denied);
        assert!(output.content.contains("saying: not now"), "{}", output.content);
    }

    #[tokio::test]
    async fn malformed_questions_are_refused_before_anyone_is_asked() {
        let runtime = runtime(&Services::new()).unwrap();
        let context = CallContext::new("c", "s");
        for (args, needle) in [
            (json!({"question": " "}), "empty"),
            (json!({"question": "q", "options": ["a", "a"]}), "repeats"),
            (json!({"question": "q", "multiple": true}), "needs options"),
            (json!({"question": "q", "choices": ["a"]}), "unknown field"),
        ] {
            let output = runtime.execute("askUser", args, &context).await;
            assert_eq!(output.error.as_ref().unwrap().kind, ErrorKind::InvalidArguments);
            assert!(output.content.contains(needle), "{}", output.content);
        }
    }

    #[test]
    fn manifest_round_trips() {
        let manifest = manifest();
        let json = serde_json::to_string(&manifest).unwrap();
        assert_eq!(serde_json::from_str::<ToolManifest>(&json).unwrap(), manifest);
    }
}
