//! Which model to talk to: profiles in `config.toml` (in the XDG config folder), environment
//! variables, then flags, later ones winning.
//!
//! ```toml
//! profile = "local"                  # the default profile
//!
//! [profiles.local]
//! provider = "openai"                # any OpenAI-compatible chat completions endpoint
//! base_url = "http://127.0.0.1:11434/v1"
//! model = "qwen3-coder"
//!
//! [profiles.claude]
//! provider = "anthropic"
//! model = "claude-sonnet-4-5"
//! api_key_env = "ANTHROPIC_API_KEY"  # the variable holding the key (never the key itself)
//! thinking_budget = 4000
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::anthropic::AnthropicClient;
use crate::openai::OpenAiClient;
use crate::provider::ModelClient;

/// The two wire formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// OpenAI-compatible chat completions.
    Openai,
    /// Anthropic messages.
    Anthropic,
}

impl ProviderKind {
    fn default_base_url(self) -> &'static str {
        match self {
            Self::Openai => "https://api.openai.com/v1",
            Self::Anthropic => "https://api.anthropic.com/v1",
        }
    }

    fn default_key_env(self) -> &'static str {
        match self {
            Self::Openai => "OPENAI_API_KEY",
            Self::Anthropic => "ANTHROPIC_API_KEY",
        }
    }

    fn default_model(self) -> &'static str {
        match self {
            Self::Openai => "gpt-4.1",
            Self::Anthropic => "claude-sonnet-4-5",
        }
    }
}

/// One profile as written in the file (every field optional).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileSpec {
    /// `openai` (any compatible server) or `anthropic`.
    pub provider: Option<ProviderKind>,
    /// The API's base URL.
    pub base_url: Option<String>,
    /// The model.
    pub model: Option<String>,
    /// The environment variable holding the key.
    pub api_key_env: Option<String>,
    /// The model's context window, in tokens.
    pub context_window: Option<u64>,
    /// The longest reply, in tokens.
    pub max_tokens: Option<u32>,
    /// Anthropic's extended thinking budget, in tokens.
    pub thinking_budget: Option<u32>,
    /// Seconds a stream may stay silent before it counts as broken (and is retried, or resumed
    /// when part of the reply was shown); 120 by default.
    pub stall_timeout_secs: Option<u64>,
}

/// The configuration file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// The profile used when none is named.
    pub profile: Option<String>,
    /// The profile sub-agents use (default: the conversation's own; on a server, `profile`).
    pub sub_agent: Option<String>,
    /// Profiles by name.
    #[serde(default)]
    pub profiles: BTreeMap<String, ProfileSpec>,
    /// The terminal app's colours: `dark`, `light` or `none` (default: from the terminal's
    /// background).
    pub theme: Option<String>,
    /// The terminal app counts the system temp folders (`/tmp`, `/var/tmp`) as inside the
    /// working folder: file calls there run without asking. Default: they ask like any folder
    /// outside it (a session's own temp folder is always inside).
    pub temp_inside: Option<bool>,
}

/// Why no model could be set up.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid.
    #[error("{path} is not a valid configuration: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        message: String,
    },
    /// A profile that does not exist was asked for.
    #[error("no profile `{name}` in {path} (profiles: {known})")]
    UnknownProfile {
        /// The name asked for.
        name: String,
        /// The file.
        path: String,
        /// The profiles there are.
        known: String,
    },
    /// No model is configured at all.
    #[error(
        "no model configured: set OPENAI_API_KEY (with OPENAI_BASE_URL for a compatible server) or \
         ANTHROPIC_API_KEY, or write a profile in {path}"
    )]
    NoModel {
        /// Where the configuration file would be.
        path: String,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Http(String),
}

/// Where the configuration file lives: `$XDG_CONFIG_HOME/toolhost/config.toml` (or the
/// platform's equivalent).
pub fn default_path() -> Option<PathBuf> {
    use etcetera::BaseStrategy as _;
    etcetera::choose_base_strategy().ok().map(|s| s.config_dir().join("toolhost").join("config.toml"))
}

impl ConfigFile {
    /// Reads the file; a missing file is an empty configuration.
    ///
    /// # Errors
    ///
    /// An unreadable or invalid file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => toml::from_str(&text)
                .map_err(|e| ConfigError::Parse { path: path.to_owned(), message: e.to_string() }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(source) => Err(ConfigError::Read { path: path.to_owned(), source }),
        }
    }
}

/// What the command line asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--profile`.
    pub profile: Option<String>,
    /// `--model`.
    pub model: Option<String>,
    /// `--provider`.
    pub provider: Option<ProviderKind>,
    /// `--base-url`.
    pub base_url: Option<String>,
}

/// A model, resolved and ready to build.
#[derive(Clone, PartialEq, Eq)]
pub struct ModelProfile {
    /// The profile's name (`env` when it came from variables alone).
    pub name: String,
    /// The wire format.
    pub provider: ProviderKind,
    /// The base URL.
    pub base_url: String,
    /// The model.
    pub model: String,
    /// The key, read from its variable.
    pub api_key: Option<String>,
    /// The variable the key was read from.
    pub api_key_env: String,
    /// The context window, in tokens.
    pub context_window: u64,
    /// The longest reply, in tokens.
    pub max_tokens: u32,
    /// Anthropic's thinking budget.
    pub thinking_budget: Option<u32>,
    /// A stream silent this long is broken.
    pub stall_timeout: std::time::Duration,
}

impl std::fmt::Debug for ModelProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelProfile")
            .field("name", &self.name)
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .finish_non_exhaustive()
    }
}

/// Looks up a variable (the process environment, or a fixed map in tests).
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Resolves the profile to use: the named one (flag, then the file's default), else one made from
/// the environment; flags override its fields.
///
/// # Errors
///
/// An unknown profile name, or no model configured anywhere.
pub fn resolve(
    file: &ConfigFile,
    file_path: &str,
    overrides: &Overrides,
    env: Env<'_>,
) -> Result<ModelProfile, ConfigError> {
    let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let named =
        overrides.profile.clone().or_else(|| set("TOOLHOST_PROFILE")).or_else(|| file.profile.clone());
    let (name, spec) = match named {
        Some(name) => match file.profiles.get(&name) {
            Some(spec) => (name, spec.clone()),
            None => {
                return Err(ConfigError::UnknownProfile {
                    name,
                    path: file_path.to_owned(),
                    known: if file.profiles.is_empty() {
                        "none".into()
                    } else {
                        file.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
                    },
                });
            }
        },
        None => {
            // From the environment: Anthropic's key alone picks Anthropic; otherwise OpenAI's key
            // or base URL (a local server needs no key) picks the compatible API.
            let provider = overrides.provider.or_else(|| {
                if set("OPENAI_API_KEY").is_some() || set("OPENAI_BASE_URL").is_some() {
                    Some(ProviderKind::Openai)
                } else if set("ANTHROPIC_API_KEY").is_some() {
                    Some(ProviderKind::Anthropic)
                } else {
                    None
                }
            });
            match provider {
                Some(provider) => {
                    ("env".to_owned(), ProfileSpec { provider: Some(provider), ..ProfileSpec::default() })
                }
                None if overrides.base_url.is_some() => (
                    "flags".to_owned(),
                    ProfileSpec { provider: Some(ProviderKind::Openai), ..ProfileSpec::default() },
                ),
                None => return Err(ConfigError::NoModel { path: file_path.to_owned() }),
            }
        }
    };
    let provider = overrides.provider.or(spec.provider).unwrap_or(ProviderKind::Openai);
    let env_base = match provider {
        ProviderKind::Openai => set("OPENAI_BASE_URL"),
        ProviderKind::Anthropic => set("ANTHROPIC_BASE_URL"),
    };
    let base_url = overrides
        .base_url
        .clone()
        .or(spec.base_url)
        .or(env_base)
        .unwrap_or_else(|| provider.default_base_url().to_owned());
    let model = overrides
        .model
        .clone()
        .or(spec.model)
        .or_else(|| set("TOOLHOST_MODEL"))
        .unwrap_or_else(|| provider.default_model().to_owned());
    let api_key_env = spec.api_key_env.unwrap_or_else(|| provider.default_key_env().to_owned());
    Ok(ModelProfile {
        name,
        provider,
        base_url,
        model,
        api_key: set(&api_key_env),
        api_key_env,
        context_window: spec.context_window.unwrap_or(128_000),
        max_tokens: spec.max_tokens.unwrap_or(8_192),
        thinking_budget: spec.thinking_budget,
        stall_timeout: std::time::Duration::from_secs(spec.stall_timeout_secs.unwrap_or(120).max(1)),
    })
}

impl ModelProfile {
    /// The loop's limits for this model (its window and reply length; the rest default).
    pub fn agent_config(&self) -> crate::AgentConfig {
        crate::AgentConfig {
            max_tokens: self.max_tokens,
            context_window: self.context_window,
            ..crate::AgentConfig::default()
        }
    }

    /// The client for this profile.
    ///
    /// # Errors
    ///
    /// The HTTP client cannot be built.
    pub fn client(&self) -> Result<Arc<dyn ModelClient>, ConfigError> {
        let http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(30))
            // A stream silent this long is dead (providers send pings well within it): no byte
            // for the profile's stall timeout breaks it, to be retried or resumed.
            .read_timeout(self.stall_timeout)
            .build()
            .map_err(|e| ConfigError::Http(e.to_string()))?;
        Ok(match self.provider {
            ProviderKind::Openai => {
                Arc::new(OpenAiClient::new(http, &self.base_url, self.api_key.clone(), &self.model))
            }
            ProviderKind::Anthropic => Arc::new(
                AnthropicClient::new(http, &self.base_url, self.api_key.clone(), &self.model)
                    .with_thinking(self.thinking_budget),
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn environment_alone_picks_the_provider() {
        let file = ConfigFile::default();
        let anthropic =
            resolve(&file, "cfg", &Overrides::default(), &env_of(&[("ANTHROPIC_API_KEY", "k")])).unwrap();
        assert_eq!(anthropic.provider, ProviderKind::Anthropic);
        assert_eq!(anthropic.api_key.as_deref(), Some("k"));
        let local = resolve(
            &file,
            "cfg",
            &Overrides::default(),
            &env_of(&[("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1"), ("ANTHROPIC_API_KEY", "k")]),
        )
        .unwrap();
        assert_eq!(local.provider, ProviderKind::Openai);
        assert_eq!(local.base_url, "http://127.0.0.1:11434/v1");
        assert_eq!(local.api_key, None);
        let error = resolve(&file, "cfg", &Overrides::default(), &env_of(&[])).unwrap_err();
        assert!(matches!(error, ConfigError::NoModel { .. }), "{error}");
    }

    #[test]
    fn profiles_and_flags() {
        let file: ConfigFile = toml::from_str(
            r#"
            profile = "claude"
            [profiles.claude]
            provider = "anthropic"
            model = "claude-x"
            api_key_env = "MY_KEY"
            [profiles.local]
            provider = "openai"
            base_url = "http://127.0.0.1:8000/v1"
            model = "qwen"
            context_window = 32000
            "#,
        )
        .unwrap();
        let env = env_of(&[("MY_KEY", "secret"), ("OPENAI_API_KEY", "other")]);
        let default = resolve(&file, "cfg", &Overrides::default(), &env).unwrap();
        assert_eq!((default.name.as_str(), default.model.as_str()), ("claude", "claude-x"));
        assert_eq!(default.api_key.as_deref(), Some("secret"));
        assert!(!format!("{default:?}").contains("secret"), "the key never reaches a log");
        let local = resolve(
            &file,
            "cfg",
            &Overrides { profile: Some("local".into()), model: Some("llama".into()), ..Overrides::default() },
            &env,
        )
        .unwrap();
        assert_eq!((local.model.as_str(), local.context_window), ("llama", 32_000));
        assert_eq!(local.base_url, "http://127.0.0.1:8000/v1");
        let unknown =
            resolve(&file, "cfg", &Overrides { profile: Some("nope".into()), ..Overrides::default() }, &env)
                .unwrap_err();
        assert!(unknown.to_string().contains("claude, local"), "{unknown}");
        let bad = toml::from_str::<ConfigFile>("[profiles.x]\nmodle = \"typo\"\n").unwrap_err();
        assert!(bad.to_string().contains("modle"), "{bad}");
        // The terminal app's colours live here too.
        let themed = toml::from_str::<ConfigFile>("theme = \"light\"\n").unwrap();
        assert_eq!(themed.theme.as_deref(), Some("light"));
    }
}
