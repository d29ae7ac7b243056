//! Toolhost's automation, run as `cargo xtask <command>`.
//!
//! * `new-tool NAME`: add a builtin tool crate with its four parts and register it.
//! * `catalogue [--format openai|anthropic|gemini|mcp]`: print the registry's catalogue as JSON.
//! * `test`: run the whole test suite (what CI runs).
//! * `bench`: run the benchmarks whose numbers go in `docs/benchmarks.md`.
//! * `load [-- OPTIONS]`: only the server's load benchmark (`apps/server/benches/load.rs`), with its
//!   options (`--journal sqlite`, `--clients 1,16,64`, `--seconds 5`…).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};

mod new_tool;

const USAGE: &str = "usage: cargo xtask <command>

commands:
  new-tool NAME                                  add crates/builtin-tool-NAME and register it
  catalogue [--format openai|anthropic|gemini|mcp]  print the builtin catalogue as JSON
  test                                           run the whole test suite
  bench                                          run the benchmarks
  bench mcp                                      only Toolhost's MCP server against the reference one
  load [-- --journal sqlite --clients 64 ...]    run the server load benchmark only";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["new-tool", name] => {
            let created = new_tool::create(&root, name)?;
            println!("created {}", created.display());
            println!("registered `{name}` in crates/builtin-tools; next: cargo test -p builtin-tool-{name}");
            Ok(())
        }
        ["catalogue", rest @ ..] => {
            let mut command = cargo(&root);
            // Manifests need neither runtimes nor render hooks: without them this builds in a
            // fraction of the time (no engines, parsers or HTTP clients of the tools).
            command
                .args([
                    "run",
                    "--quiet",
                    "-p",
                    "builtin-tools",
                    "--no-default-features",
                    "--example",
                    "catalogue",
                    "--",
                ])
                .args(rest);
            status(command)
        }
        ["test"] => test(&root),
        ["bench"] => {
            // Every benchmark whose numbers are in docs/benchmarks.md (the MCP one needs the
            // interop tools).
            let interop = interop_tools(&root)?;
            for (package, bench) in [
                ("computer-runtime", "files"),
                ("sandbox", "overhead"),
                ("builtin-tool-web-browsing", "extraction"),
                ("journal", "journal"),
                ("tool-executor", "pipeline"),
                ("tool-executor", "code"),
                ("hooks", "hooks"),
                ("checkpoints", "checkpoints"),
                ("builtin-tool-knowledge-base", "knowledge"),
                ("tool-search", "search"),
                ("toolhost-server", "load"),
                ("toolhost-server", "mcp"),
                ("toolhost-server", "console"),
                ("toolhost", "frame"),
                ("toolhost", "mcp_mount"),
                ("builtin-tool-api", "documents"),
            ] {
                let mut command = cargo(&root);
                command.env("TOOLHOST_INTEROP_DIR", &interop);
                command.args(["bench", "-p", package, "--bench", bench]);
                status(command)?;
            }
            Ok(())
        }
        ["bench", "mcp"] => {
            let interop = interop_tools(&root)?;
            let mut command = cargo(&root);
            command.env("TOOLHOST_INTEROP_DIR", interop);
            command.args(["bench", "-p", "toolhost-server", "--bench", "mcp"]);
            status(command)
        }
        ["load", rest @ ..] => {
            let rest = rest.strip_prefix(&["--"]).unwrap_or(rest);
            let mut command = cargo(&root);
            command.args(["bench", "-p", "toolhost-server", "--bench", "load", "--"]).args(rest);
            status(command)
        }
        ["help" | "--help" | "-h"] | [] => {
            println!("{USAGE}");
            Ok(())
        }
        other => bail!("unknown command `{}`\n\n{USAGE}", other.join(" ")),
    }
}

/// The workspace root: xtask lives one folder below it.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

fn cargo(root: &Path) -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    command.current_dir(root);
    command
}

fn status(mut command: Command) -> Result<()> {
    let shown = format!("{command:?}");
    let status = command.status().with_context(|| format!("cannot start {shown}"))?;
    if !status.success() {
        bail!("{shown} failed with {status}");
    }
    Ok(())
}

/// Installs the pinned third-party software the interop tests and the MCP benchmark run
/// (`.ci/interop-tools.sh`, idempotent) and returns its folder.
fn interop_tools(root: &Path) -> Result<PathBuf> {
    let interop = root.join("target/interop");
    let mut tools = Command::new("bash");
    tools.arg(root.join(".ci/interop-tools.sh")).arg(&interop);
    status(tools)?;
    Ok(interop)
}

/// The whole suite: nextest when it is installed (doc tests separately, since nextest does not
/// run them), plain `cargo test` otherwise; then the server's memory tests again in its diagnostic
/// build (`heap-stats`, a counting allocator), which the workspace's build leaves out.
fn test(root: &Path) -> Result<()> {
    let workspace = workspace_tests(root);
    let mut heap_stats = cargo(root);
    heap_stats.args(["test", "-p", "toolhost-server", "--features", "heap-stats", "--lib", "memory::"]);
    // Both run, whichever fails first.
    let heap_stats = status(heap_stats);
    workspace.and(heap_stats)
}

fn workspace_tests(root: &Path) -> Result<()> {
    // The MCP interop tests run third-party clients and the conformance suite: installed (pinned)
    // before the tests, so nothing downloads while they run.
    let interop = interop_tools(root)?;
    let has_nextest = cargo(root).args(["nextest", "--version"]).output().is_ok_and(|o| o.status.success());
    if has_nextest {
        let mut run = cargo(root);
        run.env("TOOLHOST_INTEROP_DIR", &interop);
        run.args(["nextest", "run", "--workspace", "--no-fail-fast"]);
        status(run)?;
        let mut doc = cargo(root);
        doc.args(["test", "--workspace", "--doc"]);
        status(doc)
    } else {
        let mut run = cargo(root);
        run.env("TOOLHOST_INTEROP_DIR", &interop);
        run.args(["test", "--workspace", "--no-fail-fast"]);
        status(run)
    }
}
