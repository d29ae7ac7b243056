//! A test tool whose runtime does what each case needs: nothing, echo, sleep (honouring cancel
//! and returning its partial output), panic, nest, and a shell-like API that only records.

#![allow(dead_code, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tool_core::{
    ApiSpec, CallContext, ErrorKind, ExecutionMode, Intervention, InterventionPolicy, Tier, ToolManifest,
    ToolMeta, ToolOutput, ToolRuntime,
};
use tool_executor::{Executor, ExecutorConfig, Toolbox};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EchoArgs {
    pub text: String,
    #[serde(default)]
    pub times: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SleepArgs {
    pub ms: u64,
    #[serde(default)]
    pub timeout: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NestArgs {
    pub calls: Vec<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellArgs {
    pub command: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    pub path: String,
}

/// Counts concurrent runs, so tests can see what ran beside what.
#[derive(Debug, Default)]
pub struct Probe {
    pub running: AtomicUsize,
    pub peak: AtomicUsize,
    pub runs: AtomicUsize,
}

#[derive(Debug, Clone)]
pub struct TestRuntime {
    pub probe: Arc<Probe>,
}

pub fn manifest() -> ToolManifest {
    ToolManifest::new("test", ToolMeta::new("Test", "Test tool"))
        .intervention(Intervention::Never.into())
        .api(ApiSpec::new::<Empty>("noop", "Does nothing").tier(Tier::Read))
        .api(ApiSpec::new::<EchoArgs>("echo", "Echoes").tier(Tier::Read))
        .api(ApiSpec::new::<SleepArgs>("sleep", "Sleeps").tier(Tier::Read).timeout_ms(5_000))
        .api(
            ApiSpec::new::<SleepArgs>("sleep_alone", "Sleeps alone")
                .tier(Tier::Read)
                .execution(ExecutionMode::Sequential),
        )
        .api(ApiSpec::new::<Empty>("panic", "Panics").tier(Tier::Read))
        .api(
            ApiSpec::new::<EchoArgs>("ask_echo", "Echoes after asking")
                .tier(Tier::Read)
                .intervention(Intervention::Always.into()),
        )
        .api(ApiSpec::new::<NestArgs>("nest", "Calls others").tier(Tier::Read))
        .api(
            ApiSpec::new::<ShellArgs>("shell", "Records a command")
                .tier(Tier::Exec)
                .command_param("command")
                .intervention(Intervention::Required.into()),
        )
        .api(
            ApiSpec::new::<WriteArgs>("write", "Pretends to write")
                .tier(Tier::Write)
                .intervention(Intervention::Required.into()),
        )
        .api(ApiSpec::new::<ShellArgs>("guarded", "Rule-guarded").tier(Tier::Exec).intervention(
            InterventionPolicy::Rules {
                rules: vec![
                    tool_core::InterventionRule {
                        matchers: [("command".to_owned(), tool_core::Matcher::Wildcard("ls*".into()))].into(),
                        policy: Intervention::Never,
                    },
                    tool_core::InterventionRule {
                        matchers:
                            [("command".to_owned(), tool_core::Matcher::Wildcard("deploy*".into()))].into(),
                        policy: Intervention::Always,
                    },
                ],
            },
        ))
}

impl ToolRuntime for TestRuntime {
    fn execute<'a>(
        &'a self,
        api: &'a str,
        arguments: Value,
        context: &'a CallContext,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let probe = &self.probe;
            let now = probe.running.fetch_add(1, Ordering::SeqCst) + 1;
            probe.peak.fetch_max(now, Ordering::SeqCst);
            probe.runs.fetch_add(1, Ordering::SeqCst);
            let output = match api {
                "noop" => ToolOutput::ok(""),
                "echo" | "ask_echo" => {
                    let args: EchoArgs = serde_json::from_value(arguments).unwrap();
                    ToolOutput::ok(args.text.repeat(args.times.unwrap_or(1) as usize))
                        .with_state(json!({"echo": true}))
                }
                "sleep" | "sleep_alone" => {
                    let args: SleepArgs = serde_json::from_value(arguments).unwrap();
                    context.progress.message("sleeping");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(args.ms)) => ToolOutput::ok(format!("slept {}", args.ms)),
                        () = context.cancel.cancelled() => ToolOutput::ok("partial output before the stop"),
                    }
                }
                "panic" => panic!("boom in the runtime"),
                "nest" => {
                    let args: NestArgs = serde_json::from_value(arguments).unwrap();
                    let mut parts = Vec::new();
                    for name in args.calls {
                        let out = context.call_tool(&name, json!({"text": "inner"})).await;
                        parts.push(format!("{name}={}", out.content));
                    }
                    ToolOutput::ok(parts.join(";"))
                }
                "shell" | "guarded" | "write" => ToolOutput::ok("ran"),
                other => ToolOutput::error(ErrorKind::UnknownTool, format!("no {other}")),
            };
            probe.running.fetch_sub(1, Ordering::SeqCst);
            output
        })
    }
}

pub fn toolbox(probe: Arc<Probe>) -> Arc<Toolbox> {
    let mut toolbox = Toolbox::new();
    toolbox.add_tool(manifest(), Arc::new(TestRuntime { probe })).unwrap();
    Arc::new(toolbox)
}

pub fn fast_config() -> ExecutorConfig {
    ExecutorConfig {
        min_timeout: Duration::from_millis(10),
        stop_grace: Duration::from_millis(500),
        approval_timeout: Duration::from_secs(10),
        ..ExecutorConfig::default()
    }
}

pub fn executor(probe: Arc<Probe>, journal: Option<Arc<dyn journal::Journal>>) -> Executor {
    let builder = Executor::builder(toolbox(probe)).config(fast_config());
    match journal {
        Some(journal) => builder.journal(journal).build(),
        None => builder.build(),
    }
}
