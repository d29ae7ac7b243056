//! Prints the builtin catalogue as JSON: `catalogue [--format openai|anthropic|gemini|mcp]`.
//!
//! Without `--format` it prints every manifest with its flags. `cargo xtask catalogue` runs this.

use std::process::ExitCode;

use builtin_tools::Registry;
use tool_core::provider::Provider;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let registry = Registry::builtin();
    let value = match args.as_slice() {
        [] => registry.manifests(),
        [flag, format] if flag == "--format" => match Provider::parse(format) {
            Some(provider) => registry.catalogue(provider),
            None => {
                eprintln!("unknown format `{format}`; use openai, anthropic, gemini or mcp");
                return ExitCode::from(2);
            }
        },
        _ => {
            eprintln!("usage: catalogue [--format openai|anthropic|gemini|mcp]");
            return ExitCode::from(2);
        }
    };
    match serde_json::to_string_pretty(&value) {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("cannot print the catalogue: {error}");
            ExitCode::FAILURE
        }
    }
}
