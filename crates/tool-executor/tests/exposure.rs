//! Which functions a session declares: `auto` tools deferred past the threshold of functions or
//! tokens, activation, and what front ends read of it.

mod common;

use std::sync::Arc;

use common::{Probe, TestRuntime};
use tool_core::Exposure;
use tool_executor::{Event, Executor, ExposureConfig, SessionConfig, Toolbox};

fn executor() -> Executor {
    let probe = Arc::new(Probe::default());
    let mut toolbox = Toolbox::new();
    toolbox.add_tool(common::manifest(), Arc::new(TestRuntime { probe: probe.clone() })).unwrap();
    let mut mounted = common::manifest().exposure(Exposure::Auto);
    mounted.identifier = "mounted".into();
    mounted.meta.description = "A mounted server".into();
    toolbox.add_tool(mounted, Arc::new(TestRuntime { probe: probe.clone() })).unwrap();
    // Something that finds deferred tools (tool search's exposure): without it nothing waits.
    let finder = tool_core::ToolManifest::new("finder", tool_core::ToolMeta::new("Finder", "Finds"))
        .exposure(Exposure::WhenDeferred)
        .api(tool_core::ApiSpec::new::<common::Empty>("find", "Finds").tier(tool_core::Tier::Read));
    toolbox.add_tool(finder, Arc::new(TestRuntime { probe })).unwrap();
    Executor::builder(Arc::new(toolbox)).config(common::fast_config()).build()
}

fn open(executor: &Executor, exposure: ExposureConfig) -> Arc<tool_executor::Session> {
    executor.open_session(SessionConfig {
        id: "s".into(),
        tenant: "t".into(),
        exposure,
        ..SessionConfig::default()
    })
}

#[tokio::test]
async fn auto_tools_wait_past_the_threshold_and_are_declared_once_found() {
    let executor = executor();
    let functions = common::manifest().apis.len();
    let name = |session: &tool_executor::Session, tool: &str| {
        session.names.name_of(tool, "echo").unwrap().to_owned()
    };

    // Few enough: everything is declared.
    let few = open(&executor, ExposureConfig::default());
    assert!(!few.has_deferred());
    assert!(few.declares(&name(&few, "mounted")));

    // Past the number of functions: the mounted tool waits, the direct one does not.
    let config = ExposureConfig { max_direct_functions: functions * 2 - 1, ..ExposureConfig::default() };
    let many = open(&executor, config);
    let (direct, deferred) = (name(&many, "test"), name(&many, "mounted"));
    assert!(many.has_deferred());
    assert!(many.declares(&direct) && !many.declares(&deferred));
    assert_eq!(many.exposure_of(&deferred), Exposure::Deferred);
    let summary = tool_executor::deferred_summary(executor.toolbox(), &many);
    assert_eq!(summary, format!("- mounted ({functions} functions): A mounted server"));
    let found = tool_executor::deferred_tools(executor.toolbox(), &many);
    assert_eq!(found.len(), functions);
    assert!(found.iter().all(|t| t.tool == "mounted" && !t.declared));

    // Activation: only deferred names, once; the version moves and the event says which.
    let mut events = many.subscribe();
    let version = many.tools_version();
    let activated = many.activate("c1", &[deferred.clone(), direct.clone(), "nonsense".into()]);
    assert_eq!(activated, std::slice::from_ref(&deferred));
    assert!(many.declares(&deferred));
    assert_ne!(many.tools_version(), version);
    assert_eq!(
        events.recv().await.unwrap(),
        Event::ToolsActivated { call_id: "c1".into(), names: vec![deferred.clone()] }
    );
    assert!(many.activate("c2", std::slice::from_ref(&deferred)).is_empty(), "already declared");
    assert_eq!(many.activated(), [deferred]);

    assert!(many.declares("find"), "the finder is declared while something waits");
    assert!(!few.declares("find"), "and hidden when nothing does");

    // Past the tokens of declarations, likewise; an override beats the manifest.
    let heavy = open(&executor, ExposureConfig { max_direct_tokens: 10, ..ExposureConfig::default() });
    assert!(!heavy.declares(&name(&heavy, "mounted")));
    let mut overridden = ExposureConfig { max_direct_tokens: 10, ..ExposureConfig::default() };
    overridden.tools.insert("mounted".into(), Exposure::Direct);
    overridden.tools.insert("test".into(), Exposure::Hidden);
    let session = open(&executor, overridden);
    assert!(session.declares(&name(&session, "mounted")) && !session.has_deferred());
    assert_eq!(session.exposure_of(&name(&session, "test")), Exposure::Hidden);

    // A session without anything that finds tools declares them all, whatever their number.
    let config = ExposureConfig { max_direct_functions: 1, ..ExposureConfig::default() };
    let unsearchable = executor.open_session(SessionConfig {
        id: "u".into(),
        tenant: "t".into(),
        active_tools: Some(vec!["test".into(), "mounted".into()]),
        exposure: config,
        ..SessionConfig::default()
    });
    assert!(!unsearchable.has_deferred());
}
