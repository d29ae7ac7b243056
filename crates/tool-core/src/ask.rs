//! Questions a call asks the person (the `ask-user` tool), and how a front end answers them.
//!
//! A runtime asks through [`CallContext::ask`](crate::CallContext::ask); the pipeline that runs
//! the call gives the context a [`PersonAsker`] that puts the question on the same channel as
//! approvals (a terminal, the server's approvals, an MCP elicitation form, a device's person), and
//! journals the answer with who gave it. Without a person, the asker answers at once with
//! [`Asked::NoOne`].

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

/// The most options a question may offer.
pub const MAX_OPTIONS: usize = 12;
/// The longest question, in characters.
pub const MAX_QUESTION_CHARS: usize = 2_000;
/// The longest option, in characters.
pub const MAX_OPTION_CHARS: usize = 200;
/// The longest free-text answer kept, in characters (longer ones are refused by a server, cut
/// by a terminal).
pub const MAX_ANSWER_CHARS: usize = 4_000;

/// A question to the person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Question {
    /// What is asked.
    pub question: String,
    /// The choices, each a short label; none: the answer is free text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// Several options may be chosen.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub multiple: bool,
    /// Besides the options, the person may type an answer of their own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_other: bool,
}

/// A person's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Answer {
    /// The options chosen, as their labels (one unless the question allows several).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<String>,
    /// Text of the person's own (a question without options, or one that allows other answers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

impl Question {
    /// Whether the question is well formed; `Err` says what is wrong, for the model.
    ///
    /// # Errors
    ///
    /// An empty or overlong question, too many options, an empty, overlong or repeated option,
    /// or `multiple` without options.
    pub fn check(&self) -> Result<(), String> {
        let question = self.question.trim();
        if question.is_empty() {
            return Err("the question is empty".into());
        }
        if question.chars().count() > MAX_QUESTION_CHARS {
            return Err(format!("the question is longer than {MAX_QUESTION_CHARS} characters; shorten it"));
        }
        if self.options.len() > MAX_OPTIONS {
            return Err(format!(
                "{} options are more than {MAX_OPTIONS}; offer the likeliest and allowOther",
                self.options.len()
            ));
        }
        for (n, option) in self.options.iter().enumerate() {
            let label = option.trim();
            if label.is_empty() {
                return Err(format!("option {} is empty", n + 1));
            }
            if label.chars().count() > MAX_OPTION_CHARS {
                return Err(format!("option {} is longer than {MAX_OPTION_CHARS} characters", n + 1));
            }
            if label.chars().any(char::is_control) {
                return Err(format!("option {} holds control characters", n + 1));
            }
            if self.options[..n].iter().any(|o| o.trim() == label) {
                return Err(format!("option {} repeats an earlier one", n + 1));
            }
        }
        if self.multiple && self.options.is_empty() {
            return Err("`multiple` needs options to choose from".into());
        }
        Ok(())
    }

    /// Free text is an answer: the question has no options, or allows other answers.
    pub fn takes_text(&self) -> bool {
        self.options.is_empty() || self.allow_other
    }

    /// Whether `answer` answers this question: its choices are options (one, unless `multiple`),
    /// text only where [`Self::takes_text`], and something is said.
    ///
    /// # Errors
    ///
    /// What does not fit, in words a person (or a client) can act on.
    pub fn check_answer(&self, answer: &Answer) -> Result<(), String> {
        for choice in &answer.choices {
            if !self.options.iter().any(|o| o.trim() == choice.trim()) {
                return Err(format!("`{choice}` is not one of the options"));
            }
        }
        if answer.choices.len() > 1 && !self.multiple {
            return Err("only one option may be chosen".into());
        }
        let mut seen = Vec::new();
        for choice in &answer.choices {
            if seen.contains(&choice.trim()) {
                return Err(format!("`{choice}` is chosen twice"));
            }
            seen.push(choice.trim());
        }
        let text = answer.text.as_deref().map(str::trim).filter(|t| !t.is_empty());
        if let Some(text) = text {
            if !self.takes_text() {
                return Err("this question takes one of its options, not text of one's own".into());
            }
            if text.chars().count() > MAX_ANSWER_CHARS {
                return Err(format!("the answer is longer than {MAX_ANSWER_CHARS} characters"));
            }
            if !answer.choices.is_empty() && !self.multiple {
                return Err("choose an option or type an answer, not both".into());
            }
        }
        if answer.choices.is_empty() && text.is_none() {
            return Err("the answer is empty".into());
        }
        Ok(())
    }
}

impl Answer {
    /// The answer in one line: the choices, then the text.
    pub fn summary(&self) -> String {
        let mut parts: Vec<String> = self.choices.clone();
        if let Some(text) = self.text.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
            parts.push(format!("\"{text}\""));
        }
        parts.join(", ")
    }
}

/// How asking ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Asked {
    /// The person answered.
    Answered {
        /// The answer.
        answer: Answer,
        /// Who answered (a key's id, `terminal`, an MCP client…).
        by: String,
    },
    /// The person chose not to answer.
    Declined {
        /// Who declined.
        by: String,
        /// What they said, if anything.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// No one is there to answer (headless, no person at a device, a client that cannot show
    /// forms); nothing waited.
    NoOne {
        /// Why.
        reason: String,
    },
    /// No answer came in time.
    TimedOut,
    /// The call was cancelled while it waited.
    Cancelled,
}

/// How a call's context asks its person: given by the pipeline that runs the call.
#[derive(Clone)]
pub struct PersonAsker(Arc<dyn Fn(Question) -> BoxFuture<'static, Asked> + Send + Sync>);

impl PersonAsker {
    /// An asker that runs `f(question)`.
    pub fn new(f: impl Fn(Question) -> BoxFuture<'static, Asked> + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    /// Asks.
    pub fn ask(&self, question: Question) -> BoxFuture<'static, Asked> {
        (self.0)(question)
    }
}

impl fmt::Debug for PersonAsker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PersonAsker(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn question(options: &[&str], multiple: bool, allow_other: bool) -> Question {
        Question {
            question: "Which database?".into(),
            options: options.iter().map(|s| (*s).to_owned()).collect(),
            multiple,
            allow_other,
        }
    }

    fn answer(choices: &[&str], text: Option<&str>) -> Answer {
        Answer { choices: choices.iter().map(|s| (*s).to_owned()).collect(), text: text.map(str::to_owned) }
    }

    #[test]
    fn malformed_questions_say_why() {
        assert!(question(&[], false, false).check().is_ok());
        assert!(Question { question: "  ".into(), ..question(&[], false, false) }.check().is_err());
        assert!(question(&["a", "a "], false, false).check().unwrap_err().contains("repeats"));
        assert!(question(&["a", ""], false, false).check().unwrap_err().contains("empty"));
        assert!(question(&[], true, false).check().is_err());
        let many: Vec<String> = (0..13).map(|n| n.to_string()).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(question(&many, false, false).check().unwrap_err().contains("13 options"));
        assert!(question(&["a\u{1b}[2J"], false, false).check().is_err());
    }

    #[test]
    fn only_fitting_answers_pass() {
        let single = question(&["SQLite", "Postgres"], false, false);
        assert!(single.check_answer(&answer(&["Postgres"], None)).is_ok());
        assert!(single.check_answer(&answer(&["MySQL"], None)).is_err());
        assert!(single.check_answer(&answer(&["SQLite", "Postgres"], None)).is_err());
        assert!(single.check_answer(&answer(&[], Some("MySQL"))).is_err());
        assert!(single.check_answer(&answer(&[], None)).is_err());
        let multiple = question(&["a", "b", "c"], true, true);
        assert!(multiple.check_answer(&answer(&["a", "c"], Some("and d"))).is_ok());
        assert!(multiple.check_answer(&answer(&["a", "a"], None)).is_err());
        let open = question(&[], false, false);
        assert!(open.check_answer(&answer(&[], Some("whatever you think"))).is_ok());
        assert!(open.check_answer(&answer(&[], Some("   "))).is_err());
        let other = question(&["a"], false, true);
        assert!(other.check_answer(&answer(&["a"], Some("x"))).is_err());
        assert!(other.check_answer(&answer(&[], Some("x"))).is_ok());
    }

    #[test]
    fn wire_shapes_are_camel_case_and_tagged() {
        let q = question(&["a"], false, true);
        let json = serde_json::to_value(&q).unwrap();
        assert_eq!(json["allowOther"], true);
        assert!(json.get("multiple").is_none());
        let asked = Asked::Answered { answer: answer(&["a"], None), by: "terminal".into() };
        let json = serde_json::to_value(&asked).unwrap();
        assert_eq!(json["outcome"], "answered");
        assert_eq!(serde_json::from_value::<Asked>(json).unwrap(), asked);
    }
}
