//! The calculator tool: exact, unit-aware arithmetic with [fend](https://github.com/printfn/fend).
//!
//! One API, `calculate`, evaluates an expression with `fend-core` on a thread of its own under a
//! deadline (and the call's cancellation), so a pathological input like `10^10^10` cannot hang
//! the server. The result names the exact value and a decimal approximation when they differ.
//! It exports the four parts every builtin tool exports: [`manifest()`] and [`SYSTEM_ROLE`] for
//! the model, `runtime(&Services)` for the machine (feature `runtime`) and `RENDER` for people
//! (feature `render`).
//!
//! ```
//! let manifest = builtin_tool_calculator::manifest();
//! assert_eq!(manifest.identifier, "calculator");
//! assert_eq!(manifest.apis[0].name, "calculate");
//! ```
#![deny(missing_docs)]

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tool_core::{ApiSpec, Intervention, Tier, ToolManifest, ToolMeta};

/// The tool's identifier.
pub const IDENTIFIER: &str = "calculator";

/// The system-role template.
pub const SYSTEM_ROLE: &str = include_str!("system_role.md");

/// The longest expression accepted, in characters.
pub const MAX_EXPRESSION_CHARS: usize = 2_000;

/// The longest result text returned, in characters; longer results are cut and say so.
pub const MAX_RESULT_CHARS: usize = 10_000;

/// How long one evaluation may run before it is interrupted (less when the call's own deadline is
/// sooner).
pub const EVALUATION_BUDGET: Duration = Duration::from_secs(2);

tool_core::api_enum! {
    /// The APIs of the calculator tool.
    pub enum CalculatorApi {
        /// Evaluate an expression.
        Calculate = "calculate",
    }
}

/// Arguments of `calculate`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CalculateArgs {
    /// The expression to evaluate (at most 2000 characters), in fend syntax. Arithmetic with
    /// arbitrary precision and exact fractions: `2^200`, `100!`, `1/3 + 1/6`, `(3 + 4) * 5 mod 7`.
    /// Functions and constants: `sqrt 2`, `sin(30 degrees)`, `cos(pi/3)`, `ln 10`, `log10 1000`,
    /// `abs(-3)`, `pi`, `e`. Units and conversions with `to`: `5 feet to cm`, `60 mph to km/h`,
    /// `100 °F to °C`, `1 GiB to MB`, `3 days + 4 hours to minutes`. Bases: `0xff to decimal`,
    /// `255 to binary`, `12 to hex`, `0b1010 + 0o17`. Formats: `1/3 to fraction`, `pi to 5 dp`,
    /// `0.75 to mixed_fraction`. Dates as literals plus durations: `@2024-01-31 + 90 days`
    /// (there is no current date, and date differences are not supported). Several statements
    /// separated by `;`, with variables: `a = 3; a^2 + 1`. Dice: `roll d20`. Currency conversions
    /// are not supported.
    pub expression: String,
}

/// What a successful calculation produced; the call's state, for render hooks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Calculation {
    /// The expression as given.
    pub expression: String,
    /// fend's result in the format the expression asked for (`approx. ` marks a rounded one).
    pub result: String,
    /// The exact value (a fraction, a multiple of π, an integer in full…), when fend has one.
    pub exact: Option<String>,
    /// A decimal approximation (10 decimal places unless the expression asked otherwise), when
    /// the exact value is not a terminating decimal.
    pub approximate: Option<String>,
    /// Whether a value was cut to [`MAX_RESULT_CHARS`].
    #[serde(default)]
    pub truncated: bool,
}

/// fend's prefix for a rounded value.
#[cfg(any(feature = "runtime", feature = "render"))]
const APPROX_PREFIX: &str = "approx. ";

#[cfg(any(feature = "runtime", feature = "render"))]
impl Calculation {
    /// The value to show after `=` (none when only an approximation is known) and the one to
    /// show after `≈` (none when the value is exact and terminates).
    pub fn shown(&self) -> (Option<&str>, Option<&str>) {
        let equals =
            if self.result.starts_with(APPROX_PREFIX) { self.exact.as_deref() } else { Some(&*self.result) };
        let approximately = self.approximate.as_deref().filter(|approx| Some(*approx) != equals);
        (equals, approximately)
    }
}

/// The tool's manifest.
pub fn manifest() -> ToolManifest {
    ToolManifest::new(
        IDENTIFIER,
        ToolMeta::new("Calculator", "Exact arithmetic, unit conversions, bases and dates").icon("🧮"),
    )
    .intervention(Intervention::Never.into())
    .system_role(SYSTEM_ROLE)
    .api(
        ApiSpec::new::<CalculateArgs>(
            CalculatorApi::Calculate.name(),
            "Evaluate a math expression exactly (arbitrary precision, fractions, units and \
             conversions, number bases, dates plus durations). Returns the exact value and a \
             decimal approximation when they differ.",
        )
        .tier(Tier::Read)
        .timeout_ms(5_000),
    )
}

/// Long sums, read in linear time.
///
/// fend's parser, after each term of a `+`/`-` chain, tries to read the rest of the chain as an
/// implicit sum (`6 feet 1 inch`) and drops what it read when the terms are not of that kind: a
/// chain of n terms costs n² (a sum of 1 000 ones, 1 999 characters, took 2.4 s unoptimised and
/// 0.39 s optimised) and recurses n deep. Plain arithmetic — digits, `.`, spaces, `+ - * / ^` and
/// parentheses, nothing that could be a unit, a date or a name — is the same value when its
/// top-level chain is added up in runs, one statement a run: `s = 1+…+1; s = s +1…+1; s`.
#[cfg(feature = "runtime")]
mod sums {
    /// Terms per statement: a run costs its length squared, so short runs keep the whole linear.
    const RUN: usize = 32;

    /// The statements that add up `expression` run by run, when it is plain arithmetic with a
    /// top-level chain long enough to be worth it; `None` otherwise (evaluate it as it is).
    pub(super) fn in_statements(expression: &str) -> Option<String> {
        let plain = expression.chars().all(|c| {
            c.is_ascii_digit() || matches!(c, '.' | ' ' | '\t' | '+' | '-' | '*' | '/' | '^' | '(' | ')')
        });
        if !plain {
            return None;
        }
        // Where each top-level binary `+` or `-` stands: after a number or a closing parenthesis
        // (after an operator or at the start, the sign is unary and belongs to its term).
        let mut cuts = Vec::new();
        let mut depth = 0usize;
        let mut previous = None;
        for (at, c) in expression.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.checked_sub(1)?,
                '+' | '-'
                    if depth == 0
                        && previous.is_some_and(|p: char| p.is_ascii_digit() || p == '.' || p == ')') =>
                {
                    cuts.push(at);
                }
                _ => {}
            }
            if !c.is_whitespace() {
                previous = Some(c);
            }
        }
        if depth != 0 || cuts.len() < RUN * 2 {
            return None;
        }
        let mut statements = String::with_capacity(expression.len() + cuts.len() + 64);
        let mut start = 0;
        for (n, &cut) in cuts.iter().enumerate().skip(RUN - 1).step_by(RUN) {
            let run = &expression[start..cut];
            if n + 1 == RUN {
                statements.push_str("toolhost_sum = ");
            } else {
                statements.push_str("toolhost_sum = toolhost_sum ");
            }
            statements.push_str(run);
            statements.push_str("; ");
            start = cut;
        }
        statements.push_str("toolhost_sum = toolhost_sum ");
        statements.push_str(&expression[start..]);
        statements.push_str("; toolhost_sum");
        Some(statements)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn only_long_plain_chains_are_cut_into_runs() {
            let ones = |n: usize| format!("1{}", "+1".repeat(n - 1));
            for expression in [
                ones(RUN * 2 - 1),                      // too short to be worth it
                format!("{} + x", ones(100)),           // a name
                format!("{} to cm", ones(100)),         // a conversion binds looser than `+`
                format!("({})", ones(100)),             // no top-level chain
                format!("{})", ones(100)),              // unbalanced
                format!("@2024-01-01 + {}", ones(100)), // a date
                format!("{} % 7", ones(100)),           // a percentage or a modulo
                format!("1e-5 + {}", ones(100)),        // an exponent
            ] {
                assert_eq!(in_statements(&expression), None, "{expression}");
            }
            let statements = in_statements(&ones(RUN * 2 + 1)).unwrap();
            let runs: Vec<&str> = statements.split("; ").collect();
            assert_eq!(runs.len(), 4, "{statements}");
            assert_eq!(runs[0], format!("toolhost_sum = {}", ones(RUN)));
            assert_eq!(runs[1], format!("toolhost_sum = toolhost_sum {}", "+1".repeat(RUN)));
            assert_eq!(runs[2], "toolhost_sum = toolhost_sum +1");
            assert_eq!(runs[3], "toolhost_sum");
            // Unary signs stay with their terms; only binary ones cut.
            let signs = format!("-1{}", "- -2 + (3 - 4) * -5 ^ -1".repeat(40));
            let statements = in_statements(&signs).unwrap();
            assert!(statements.starts_with("toolhost_sum = -1- -2 + (3 - 4) * -5 ^ -1"), "{statements}");
        }
    }
}

#[cfg(feature = "runtime")]
mod runtime {
    use std::fmt;
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;

    use futures::future::BoxFuture;
    use serde_json::Value;
    use tool_core::{
        CallContext, ErrorKind, MissingService, Services, ToolOutput, ToolRuntime, parse_arguments,
    };

    use super::*;

    /// How long past the evaluation deadline the call waits for the blocking thread to notice it
    /// before answering anyway.
    const GRACE: Duration = Duration::from_millis(500);

    /// The stack of the thread that evaluates: fend's parser and evaluator recurse once per
    /// nesting level or chained operator, and an unoptimised build needs up to ~48 MiB for the
    /// worst 2000-character inputs measured (`((…(1)…))`, `-----…1`, `1!!!…!`), an optimised one
    /// ~16 MiB. A stack overflow aborts the whole process, so leave a wide margin; the memory is
    /// only committed as it is used.
    const STACK_SIZE: usize = 128 << 20;

    /// The longest a follow-up evaluation (the exact form, the approximation) may take.
    const FOLLOW_UP_BUDGET: Duration = Duration::from_millis(500);

    /// Runs `calculate` with fend-core.
    #[derive(Debug, Clone)]
    pub struct CalculatorRuntime {
        budget: Duration,
    }

    impl Default for CalculatorRuntime {
        fn default() -> Self {
            Self { budget: EVALUATION_BUDGET }
        }
    }

    impl CalculatorRuntime {
        /// A runtime whose evaluations stop after `budget` (or the call's deadline if sooner).
        pub fn with_budget(budget: Duration) -> Self {
            Self { budget }
        }
    }

    /// Builds the runtime (this tool needs no services).
    ///
    /// # Errors
    ///
    /// None today; the signature is the one every builtin tool exports.
    pub fn runtime(_services: &Services) -> Result<Arc<dyn ToolRuntime>, MissingService> {
        Ok(Arc::new(CalculatorRuntime::default()))
    }

    /// Why a calculation failed.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Failure {
        /// fend refused the expression; its message.
        Invalid(String),
        /// The deadline passed or the call was cancelled.
        Interrupted,
        /// fend panicked; the panic's message.
        Panicked(String),
    }

    impl fmt::Display for Failure {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self {
                Self::Invalid(message) => write!(f, "{message}"),
                Self::Interrupted => write!(f, "interrupted"),
                Self::Panicked(message) => write!(f, "the calculator crashed: {message}"),
            }
        }
    }

    /// Stops fend at a deadline or when the async side raises the flag (the call was cancelled).
    #[derive(Debug)]
    struct Stop {
        until: Instant,
        flag: Arc<AtomicBool>,
    }

    impl Stop {
        fn should_interrupt_now(&self) -> bool {
            fend_core::Interrupt::should_interrupt(self)
        }

        /// The same stop, with the deadline brought forward to at most `budget` from now.
        fn sooner(&self, budget: Duration) -> Self {
            Self { until: self.until.min(Instant::now() + budget), flag: Arc::clone(&self.flag) }
        }
    }

    impl fend_core::Interrupt for Stop {
        fn should_interrupt(&self) -> bool {
            self.flag.load(Ordering::Relaxed) || Instant::now() >= self.until
        }
    }

    /// A non-cryptographic random source for `roll d20` and friends: std's randomly keyed hasher
    /// over a counter and the clock.
    fn random_u32() -> u32 {
        use std::collections::hash_map::RandomState;
        use std::hash::{BuildHasher, Hasher};
        use std::sync::atomic::AtomicU64;
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.subsec_nanos());
        hasher.write_u32(nanos);
        let hash = hasher.finish();
        (hash >> 32) as u32 ^ hash as u32
    }

    /// Cuts `text` to [`MAX_RESULT_CHARS`] characters; true when it did.
    fn cap(text: String) -> (String, bool) {
        match text.char_indices().nth(MAX_RESULT_CHARS) {
            Some((end, _)) => (text[..end].to_owned(), true),
            None => (text, false),
        }
    }

    /// Evaluates `expression`, then fend's exact form and a decimal approximation of its value.
    fn evaluate(expression: &str, stop: &Stop) -> Result<Calculation, Failure> {
        let mut context = fend_core::Context::new();
        context.set_random_u32_fn(random_u32);
        let failure = |message: String| {
            if message == "interrupted" || stop.should_interrupt_now() {
                Failure::Interrupted
            } else {
                Failure::Invalid(message)
            }
        };
        let evaluated = match super::sums::in_statements(expression) {
            // The same sum, read in linear time; should fend refuse it, it refuses the text as
            // written, so that its message speaks of what the model wrote.
            Some(statements) => fend_core::evaluate_with_interrupt(&statements, &mut context, stop)
                .or_else(|_| fend_core::evaluate_with_interrupt(expression, &mut context, stop)),
            None => fend_core::evaluate_with_interrupt(expression, &mut context, stop),
        };
        let result = evaluated.map_err(failure)?.get_main_result().to_owned();
        // fend keeps the last value as `_`: format it again without evaluating (or rolling) again.
        let mut follow_up = |query: &str| {
            fend_core::evaluate_with_interrupt(query, &mut context, &stop.sooner(FOLLOW_UP_BUDGET))
                .ok()
                .map(|value| value.get_main_result().to_owned())
        };
        let exact = if result.is_empty() {
            None
        } else {
            follow_up("_ to exact").filter(|exact| !exact.is_empty() && !exact.starts_with(APPROX_PREFIX))
        };
        let approximate = match result.strip_prefix(APPROX_PREFIX) {
            Some(rounded) => Some(rounded.to_owned()),
            None if exact.is_some() => follow_up("_ to 10 dp")
                .and_then(|rounded| rounded.strip_prefix(APPROX_PREFIX).map(str::to_owned)),
            None => None,
        };
        let (result, cut_result) = cap(result);
        let (exact, cut_exact) = exact.map(cap).map_or((None, false), |(text, cut)| (Some(text), cut));
        let (approximate, cut_approximate) =
            approximate.map(cap).map_or((None, false), |(text, cut)| (Some(text), cut));
        Ok(Calculation {
            expression: expression.to_owned(),
            result,
            exact,
            approximate,
            truncated: cut_result || cut_exact || cut_approximate,
        })
    }

    /// [`evaluate`] with any panic inside fend turned into a [`Failure`].
    fn evaluate_guarded(expression: &str, stop: &Stop) -> Result<Calculation, Failure> {
        catch_unwind(AssertUnwindSafe(|| evaluate(expression, stop))).unwrap_or_else(|payload| {
            let message = payload
                .downcast_ref::<&str>()
                .map(|text| (*text).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            Err(Failure::Panicked(message))
        })
    }

    /// What to try next after fend refused an expression with `message`.
    fn hint(message: &str) -> &'static str {
        if message.contains("exchange rate") {
            "Currency conversions are not supported: the calculator has no exchange rates."
        } else if message.contains("random numbers") {
            "Random numbers are not available here."
        } else if message.contains("current date") || message.contains("current time") {
            "The current date is not available; write dates as literals like `@2024-01-31 + 90 days`."
        } else if message.contains("unknown identifier") {
            "Check the spelling of units and functions (`5 feet to cm`, `sqrt 2`, `sin(30 degrees)`); \
             currency units are not supported."
        } else if message.contains("division by zero") {
            "The expression divides by zero; check the divisor."
        } else {
            "Check the syntax: `2 * (3 + 4)`, `1/3 + 1/6`, `5 feet to cm`, `0xff to decimal`, `sqrt 2`. \
             For symbolic work (solving, integrating, statistics) use the code interpreter."
        }
    }

    /// The text the model reads for a successful calculation.
    fn content(calculation: &Calculation) -> String {
        let mut content = calculation.expression.trim().to_owned();
        let (equals, approximately) = calculation.shown();
        match (equals, approximately) {
            (None, None) | (Some(""), None) => content.push_str(" evaluated to no value"),
            (equals, approximately) => {
                if let Some(equals) = equals {
                    content.push_str(" = ");
                    content.push_str(equals);
                }
                if let Some(approximately) = approximately {
                    content.push_str(" ≈ ");
                    content.push_str(approximately);
                }
            }
        }
        if equals.is_none() && approximately.is_some() {
            content.push_str(" (approximate: no exact form)");
        }
        if calculation.truncated {
            content.push_str(&format!("\n(The result was cut to its first {MAX_RESULT_CHARS} characters.)"));
        }
        content
    }

    impl CalculatorRuntime {
        async fn calculate(&self, args: CalculateArgs, context: &CallContext) -> ToolOutput {
            let expression = args.expression;
            let length = expression.chars().count();
            if length > MAX_EXPRESSION_CHARS {
                return ToolOutput::error(
                    ErrorKind::InvalidArguments,
                    format!(
                        "the expression has {length} characters, more than {MAX_EXPRESSION_CHARS}; \
                         split the work into smaller calculations or use the code interpreter"
                    ),
                );
            }
            if expression.trim().is_empty() {
                return ToolOutput::error(
                    ErrorKind::InvalidArguments,
                    "the expression is empty; give one like `2 * (3 + 4)`",
                );
            }
            let started = Instant::now();
            let until = context
                .deadline
                .map_or(started + self.budget, |deadline| deadline.min(started + self.budget));
            let flag = Arc::new(AtomicBool::new(false));
            let stop = Stop { until, flag: Arc::clone(&flag) };
            let source = expression.clone();
            let (sender, receiver) = tokio::sync::oneshot::channel();
            let spawned = std::thread::Builder::new().name("calculator".into()).stack_size(STACK_SIZE).spawn(
                move || {
                    // The receiver is gone only when the call already answered.
                    let _ = sender.send(evaluate_guarded(&source, &stop));
                },
            );
            if let Err(error) = spawned {
                return ToolOutput::error(
                    ErrorKind::Internal,
                    format!("could not start the calculation: {error}; retry later"),
                );
            }
            let outcome = tokio::select! {
                received = receiver => received,
                () = context.cancel.cancelled() => {
                    flag.store(true, Ordering::Relaxed);
                    return if context.deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                        timed_out(started)
                    } else {
                        ToolOutput::error(ErrorKind::Cancelled, "the calculation was cancelled")
                    };
                }
                () = tokio::time::sleep_until((until + GRACE).into()) => {
                    flag.store(true, Ordering::Relaxed);
                    return timed_out(started);
                }
            };
            match outcome {
                Ok(Ok(calculation)) => ToolOutput::ok(content(&calculation)).with_state_of(&calculation),
                Ok(Err(Failure::Invalid(message))) => ToolOutput::error(
                    ErrorKind::InvalidArguments,
                    format!("cannot evaluate `{}`: {message}. {}", expression.trim(), hint(&message)),
                )
                .with_state(serde_json::json!({ "expression": expression, "error": message })),
                Ok(Err(Failure::Interrupted)) if context.cancel.is_cancelled() && Instant::now() < until => {
                    ToolOutput::error(ErrorKind::Cancelled, "the calculation was cancelled")
                }
                Ok(Err(Failure::Interrupted)) => timed_out(started),
                Ok(Err(failure @ Failure::Panicked(_))) => ToolOutput::error(
                    ErrorKind::Internal,
                    format!(
                        "{failure} on `{}`; rewrite the expression or use the code interpreter",
                        expression.trim()
                    ),
                ),
                Err(_) => ToolOutput::error(ErrorKind::Internal, "the calculation stopped without an answer"),
            }
        }
    }

    fn timed_out(started: Instant) -> ToolOutput {
        ToolOutput::error(
            ErrorKind::Timeout,
            format!(
                "the calculation was stopped after {:.1} s: the expression is too expensive (a huge \
                 power, factorial or precision). Simplify it, or use the code interpreter for heavy \
                 computation.",
                started.elapsed().as_secs_f64()
            ),
        )
    }

    impl ToolRuntime for CalculatorRuntime {
        fn execute<'a>(
            &'a self,
            api: &'a str,
            arguments: Value,
            context: &'a CallContext,
        ) -> BoxFuture<'a, ToolOutput> {
            Box::pin(async move {
                match api.parse::<CalculatorApi>() {
                    Ok(CalculatorApi::Calculate) => match parse_arguments::<CalculateArgs>(api, arguments) {
                        Ok(args) => self.calculate(args, context).await,
                        Err(output) => output,
                    },
                    Err(_) => {
                        ToolOutput::error(ErrorKind::UnknownTool, format!("calculator has no api `{api}`"))
                    }
                }
            })
        }
    }
}

#[cfg(feature = "runtime")]
pub use runtime::{CalculatorRuntime, runtime};

#[cfg(feature = "render")]
mod render {
    use serde_json::Value;
    use tool_core::render::status_badge;
    use tool_core::{Block, Card, RenderHooks, ToolOutput};

    use super::*;

    /// Shows the expression and its value.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct CalculatorRender;

    const TITLE: &str = "Calculator";

    fn expression(arguments: &Value) -> String {
        arguments["expression"].as_str().unwrap_or_default().to_owned()
    }

    impl RenderHooks for CalculatorRender {
        fn inspector(&self, _api: &str, partial: &Value) -> Card {
            Card::new(TITLE).subtitle("writing…").fields([("Expression", expression(partial))])
        }

        fn placeholder(&self, _api: &str, arguments: &Value) -> Card {
            Card::new(TITLE).fields([("Expression", expression(arguments))])
        }

        fn result(&self, _api: &str, arguments: &Value, output: &ToolOutput) -> Card {
            let calculation = output
                .state
                .as_ref()
                .and_then(|state| serde_json::from_value::<Calculation>(state.clone()).ok())
                .filter(|_| output.success);
            let mut card = match &calculation {
                Some(calculation) => {
                    let (equals, approximately) = calculation.shown();
                    Card::new(TITLE).fields([
                        ("Expression", calculation.expression.clone()),
                        ("Result", equals.unwrap_or_default().to_owned()),
                        ("Approximately", approximately.unwrap_or_default().to_owned()),
                    ])
                }
                None => Card::new(TITLE).fields([("Expression", expression(arguments))]),
            };
            card.badge = Some(status_badge(output));
            match calculation {
                Some(calculation) if calculation.truncated => card.block(Block::Markdown {
                    text: format!("The result was cut to its first {MAX_RESULT_CHARS} characters."),
                }),
                Some(_) => card,
                None if output.success => {
                    card.block(Block::Code { language: None, text: output.content.clone() })
                }
                None => card.block(Block::Markdown { text: output.content.clone() }),
            }
        }
    }
}

#[cfg(feature = "render")]
pub use render::CalculatorRender;

/// The render hooks, as the registry's table holds them.
#[cfg(feature = "render")]
pub static RENDER: CalculatorRender = CalculatorRender;

#[cfg(all(test, feature = "runtime", feature = "render"))]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use serde_json::{Value, json};
    use tool_core::{Block, CallContext, ErrorKind, Field, RenderHooks, Services, ToolOutput, ToolRuntime};

    async fn calculate(expression: &str) -> ToolOutput {
        let runtime = runtime(&Services::new()).unwrap();
        runtime.execute("calculate", json!({ "expression": expression }), &CallContext::new("c", "s")).await
    }

    /// A runtime no machine is too slow for: what a test checks is the answer, never a race
    /// against the evaluation budget (the speed is `cargo bench -p tool-executor --bench code`'s).
    async fn calculate_unhurried(expression: &str) -> ToolOutput {
        let runtime = CalculatorRuntime::with_budget(Duration::from_secs(600));
        runtime.execute("calculate", json!({ "expression": expression }), &CallContext::new("c", "s")).await
    }

    fn state(output: &ToolOutput) -> Calculation {
        assert!(output.success, "{}", output.content);
        serde_json::from_value(output.state.clone().unwrap()).unwrap()
    }

    fn error_kind(output: &ToolOutput) -> ErrorKind {
        assert!(!output.success, "{}", output.content);
        output.error.as_ref().unwrap().kind
    }

    #[tokio::test]
    async fn big_integers_are_exact_in_full() {
        let out = calculate("2^200").await;
        let two_200 = "1606938044258990275541962092341162602522202993782792835301376";
        assert_eq!(out.content, format!("2^200 = {two_200}"));
        let calc = state(&out);
        assert_eq!(
            (calc.result.as_str(), calc.exact.as_deref(), calc.approximate),
            (two_200, Some(two_200), None)
        );

        let out = calculate("100!").await;
        let calc = state(&out);
        assert_eq!(calc.result.len(), 158);
        assert!(
            calc.result.starts_with("93326215443944152681699238856266700490715968264381621468592963895217")
        );
        assert!(calc.result.ends_with(&format!("210916864{}", "0".repeat(24))), "{}", calc.result);
    }

    #[tokio::test]
    async fn fractions_give_the_exact_value_and_an_approximation() {
        let out = calculate("1/3").await;
        assert_eq!(out.content, "1/3 = 1/3 ≈ 0.3333333333");
        let calc = state(&out);
        assert_eq!(calc.result, "approx. 0.3333333333");
        assert_eq!(calc.exact.as_deref(), Some("1/3"));
        assert_eq!(calc.approximate.as_deref(), Some("0.3333333333"));
        assert_eq!(
            out.state.unwrap(),
            json!({"expression": "1/3", "result": "approx. 0.3333333333", "exact": "1/3",
                   "approximate": "0.3333333333", "truncated": false})
        );

        // fend's exact form of a terminating value is its decimal; `to fraction` asks for `1/2`.
        let calc = state(&calculate("1/3 + 1/6").await);
        assert_eq!(
            (calc.result.as_str(), calc.exact.as_deref(), calc.approximate),
            ("0.5", Some("0.5"), None)
        );
        assert_eq!(calculate("1/3 + 1/6 to fraction").await.content, "1/3 + 1/6 to fraction = 1/2");
        assert_eq!(calculate("2/3 to fraction").await.content, "2/3 to fraction = 2/3 ≈ 0.6666666667");

        let out = calculate("pi").await;
        assert_eq!(out.content, "pi = π ≈ 3.1415926536");
        let out = calculate("sqrt 2").await;
        assert_eq!(out.content, "sqrt 2 ≈ 1.4142135624 (approximate: no exact form)");
        assert_eq!(state(&out).exact, None);
        assert_eq!(calculate("sin(30 degrees)").await.content, "sin(30 degrees) = 0.5");
    }

    #[tokio::test]
    async fn units_bases_and_dates() {
        let cases = [
            ("5 feet to cm", "152.4 cm"),
            ("60 mph to km/h", "96.56064 km / h"),
            ("3 days + 4 hours to minutes", "4560 minutes"),
            ("0xff to decimal", "255"),
            ("255 to binary", "11111111"),
            ("12 to hex", "c"),
            ("@2024-01-01 + 90 days", "Sunday, 31 March 2024"),
            ("a = 3; a^2 + 1", "10"),
        ];
        for (expression, expected) in cases {
            let out = calculate(expression).await;
            assert_eq!(out.content, format!("{expression} = {expected}"));
            assert_eq!(state(&out).result, expected);
        }
        let out = calculate("100 °F to °C").await;
        assert_eq!(out.content, "100 °F to °C = 37 7/9 °C ≈ 37.7777777778 °C");
    }

    #[tokio::test]
    async fn dice_use_a_random_source() {
        for _ in 0..20 {
            let calc = state(&calculate("roll d20").await);
            let value: u32 = calc.result.parse().unwrap();
            assert!((1..=20).contains(&value), "{value}");
            assert_eq!(calc.exact.as_deref(), Some(calc.result.as_str()), "one roll, not two");
        }
    }

    #[tokio::test]
    async fn nonsense_unknown_units_and_division_by_zero_are_invalid_arguments() {
        let cases = [
            ("2 +* banana", "unexpected input found", "Check the syntax"),
            ("5 flurbs to cm", "unknown identifier 'flurbs'", "Check the spelling"),
            ("1/0", "division by zero", "divides by zero"),
            ("10 USD to EUR", "exchange rates are not available", "Currency conversions are not supported"),
            ("5 feet + 3 kg", "units 'kilogram' and 'meter' are incompatible", "Check the syntax"),
            ("today", "unable to get the current date", "write dates as literals"),
        ];
        for (expression, message, hint) in cases {
            let out = calculate(expression).await;
            assert_eq!(error_kind(&out), ErrorKind::InvalidArguments, "{expression}");
            assert!(out.content.starts_with(&format!("cannot evaluate `{expression}`: ")), "{}", out.content);
            assert!(out.content.contains(message), "{}", out.content);
            assert!(out.content.contains(hint), "{}", out.content);
            assert_eq!(out.state.as_ref().unwrap()["expression"], expression);
        }
    }

    #[tokio::test]
    async fn bad_arguments_are_refused_before_evaluating() {
        let long = format!("1{}", "+1".repeat(MAX_EXPRESSION_CHARS / 2));
        let out = calculate(&long).await;
        assert_eq!(error_kind(&out), ErrorKind::InvalidArguments);
        assert!(out.content.contains("2001 characters, more than 2000"), "{}", out.content);
        assert!(calculate_unhurried(&long[..MAX_EXPRESSION_CHARS - 1]).await.success);

        assert_eq!(error_kind(&calculate("  ").await), ErrorKind::InvalidArguments);
        let runtime = runtime(&Services::new()).unwrap();
        let context = CallContext::new("c", "s");
        let out = runtime.execute("calculate", json!({"expr": "1+1"}), &context).await;
        assert_eq!(error_kind(&out), ErrorKind::InvalidArguments);
        let out = runtime.execute("solve", json!({"expression": "1+1"}), &context).await;
        assert_eq!(error_kind(&out), ErrorKind::UnknownTool);
    }

    #[tokio::test]
    async fn deep_nesting_and_long_chains_do_not_overflow_the_stack() {
        let n = MAX_EXPRESSION_CHARS / 2 - 1;
        let cases = [
            (format!("{}1{}", "(".repeat(n), ")".repeat(n)), "1"),
            (format!("{}1", "-".repeat(MAX_EXPRESSION_CHARS - 1)), "-1"),
            (format!("1{}", "!".repeat(MAX_EXPRESSION_CHARS - 1)), "1"),
            (format!("1{}", "+1".repeat(n)), "1000"),
            (format!("{}1{}", "abs(".repeat(399), ")".repeat(399)), "1"),
        ];
        for (expression, expected) in cases {
            let out = calculate_unhurried(&expression).await;
            assert_eq!(state(&out).result, expected, "{}…", &expression[..20]);
        }
    }

    /// A long plain sum is added up in runs (see `sums`): the value, its exact form and its
    /// approximation are the ones fend gives the sum read whole, and a refused sum is refused
    /// in the model's own words.
    #[tokio::test]
    async fn long_sums_read_in_runs_keep_their_value() {
        let thirds = format!("1/3{}", " + 1/6 - 1/7".repeat(70));
        let mixed = format!("2^10{}", " - (3 * 4) + 0.5 / 2 + -1".repeat(60));
        for expression in [thirds.as_str(), mixed.as_str()] {
            assert!(sums::in_statements(expression).is_some(), "{expression}");
            let read_whole = state(&calculate_unhurried(&format!("({expression})")).await);
            let in_runs = state(&calculate_unhurried(expression).await);
            assert_eq!(
                (&in_runs.result, &in_runs.exact, &in_runs.approximate),
                (&read_whole.result, &read_whole.exact, &read_whole.approximate),
                "{expression}"
            );
            assert_eq!(in_runs.expression, expression);
        }
        let broken = format!("{} +* 2", "1+".repeat(200));
        let out = calculate_unhurried(&broken).await;
        assert_eq!(error_kind(&out), ErrorKind::InvalidArguments);
        assert!(out.content.starts_with(&format!("cannot evaluate `{broken}`")), "{}", out.content);
        assert!(!out.content.contains("toolhost_sum"), "{}", out.content);
    }

    #[tokio::test]
    async fn long_results_are_cut_and_say_so() {
        let out = calculate("10^20000").await;
        let calc = state(&out);
        assert!(calc.truncated);
        assert_eq!(calc.result.len(), MAX_RESULT_CHARS);
        assert_eq!(calc.result, format!("1{}", "0".repeat(MAX_RESULT_CHARS - 1)));
        assert!(
            out.content.ends_with("(The result was cut to its first 10000 characters.)"),
            "{}",
            out.content
        );
    }

    /// Each of these would run for minutes: what stops it is the budget, and nothing sooner.
    /// (The async side answers at the budget plus a grace whether or not fend has noticed, so
    /// the upper bound holds on any machine; it is far below the minutes the work would take.)
    #[tokio::test]
    async fn huge_computations_are_interrupted_at_the_budget() {
        let budget = Duration::from_millis(400);
        let runtime = CalculatorRuntime::with_budget(budget);
        for expression in ["10^10^10", "100000!", "pi to float"] {
            let started = Instant::now();
            let out = runtime
                .execute("calculate", json!({ "expression": expression }), &CallContext::new("c", "s"))
                .await;
            let elapsed = started.elapsed();
            assert_eq!(error_kind(&out), ErrorKind::Timeout, "{expression}: {}", out.content);
            assert!(out.content.contains("too expensive"), "{}", out.content);
            assert!(elapsed >= budget && elapsed < Duration::from_secs(30), "{expression}: {elapsed:?}");
        }
        assert_eq!(
            format!("{:?}", CalculatorRuntime::default()),
            format!("{:?}", CalculatorRuntime::with_budget(EVALUATION_BUDGET))
        );
    }

    /// With a budget of minutes, only the call's deadline or its cancellation can end these in
    /// seconds.
    #[tokio::test]
    async fn the_call_deadline_and_cancellation_stop_the_evaluation() {
        let runtime = CalculatorRuntime::with_budget(Duration::from_secs(600));
        let args = json!({"expression": "10^10^10"});

        let context = CallContext::new("c", "s").with_deadline(Instant::now() + Duration::from_millis(300));
        let started = Instant::now();
        let out = runtime.execute("calculate", args.clone(), &context).await;
        assert_eq!(error_kind(&out), ErrorKind::Timeout);
        assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());

        let context = CallContext::new("c", "s");
        let cancel = context.cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            cancel.cancel();
        });
        let started = Instant::now();
        let out = runtime.execute("calculate", args.clone(), &context).await;
        assert_eq!(error_kind(&out), ErrorKind::Cancelled);
        assert_eq!(out.content, "the calculation was cancelled");
        assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());

        let runtime = CalculatorRuntime::with_budget(Duration::from_millis(100));
        let started = Instant::now();
        let out = runtime.execute("calculate", args, &CallContext::new("c", "s")).await;
        assert_eq!(error_kind(&out), ErrorKind::Timeout);
        assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
    }

    /// Every example the schema and the system role give the model evaluates.
    #[tokio::test]
    async fn documented_examples_evaluate() {
        let schema = serde_json::to_string(&schemars::schema_for!(CalculateArgs)).unwrap();
        let documented: Vec<String> = [schema.as_str(), SYSTEM_ROLE]
            .iter()
            .flat_map(|text| text.split('`').skip(1).step_by(2).map(str::to_owned).collect::<Vec<_>>())
            .filter(|example| !["calculate", "to", ";", "runCode", "≈"].contains(&example.as_str()))
            .filter(|example| !example.contains(" ≈ "))
            .collect();
        assert!(documented.len() > 30, "{documented:?}");
        for example in documented {
            let out = calculate(&example).await;
            assert!(out.success, "`{example}`: {}", out.content);
        }
    }

    fn fields(card: &tool_core::Card) -> Vec<(String, String)> {
        match &card.blocks[0] {
            Block::Fields { fields } => {
                fields.iter().map(|Field { label, value }| (label.clone(), value.clone())).collect()
            }
            other => panic!("not fields: {other:?}"),
        }
    }

    #[tokio::test]
    async fn the_card_shows_the_expression_and_the_result() {
        let args = json!({"expression": "1/3"});
        let card = RENDER.result("calculate", &args, &calculate("1/3").await);
        assert_eq!(card.title, "Calculator");
        assert_eq!(card.badge.as_ref().unwrap().label, "done");
        assert_eq!(
            fields(&card),
            [
                ("Expression".to_owned(), "1/3".to_owned()),
                ("Result".to_owned(), "1/3".to_owned()),
                ("Approximately".to_owned(), "0.3333333333".to_owned()),
            ]
        );
        assert_eq!(card.blocks.len(), 1);

        let card = RENDER.result("calculate", &json!({"expression": "2^10"}), &calculate("2^10").await);
        assert_eq!(
            fields(&card),
            [("Expression".to_owned(), "2^10".to_owned()), ("Result".to_owned(), "1024".to_owned())]
        );

        let card =
            RENDER.result("calculate", &json!({"expression": "10^20000"}), &calculate("10^20000").await);
        assert_eq!(
            card.blocks[1],
            Block::Markdown { text: "The result was cut to its first 10000 characters.".into() }
        );
    }

    #[tokio::test]
    async fn the_card_shows_the_error_on_failure() {
        let args = json!({"expression": "1/0"});
        let out = calculate("1/0").await;
        let card = RENDER.result("calculate", &args, &out);
        assert_eq!(card.title, "Calculator");
        assert_eq!(card.badge.as_ref().unwrap().label, "invalid_arguments");
        assert_eq!(fields(&card), [("Expression".to_owned(), "1/0".to_owned())]);
        assert_eq!(card.blocks[1], Block::Markdown { text: out.content.clone() });
        assert!(out.content.contains("division by zero"));

        let placeholder = RENDER.placeholder("calculate", &args);
        assert_eq!(fields(&placeholder), [("Expression".to_owned(), "1/0".to_owned())]);
        let inspector = RENDER.inspector("calculate", &Value::Null);
        assert_eq!((inspector.title.as_str(), inspector.blocks.len()), ("Calculator", 0));
    }

    #[test]
    fn manifest_round_trips() {
        let manifest = manifest();
        assert_eq!(manifest.apis.len(), 1);
        assert_eq!(manifest.apis[0].name, "calculate");
        let json = serde_json::to_string(&manifest).unwrap();
        assert_eq!(serde_json::from_str::<ToolManifest>(&json).unwrap(), manifest);
    }
}
