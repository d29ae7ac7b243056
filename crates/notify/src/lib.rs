//! Notifications: a message to the channels an operator configured — webhooks (Slack, Mattermost
//! and Discord-compatible incoming webhooks, or any receiver that checks an HMAC signature) and
//! e-mail over SMTP — retried with a backoff, never on the caller's path.
//!
//! The server's console tells approvers a call waits for them with it; the messages tool (a tool
//! that sends what an agent writes to a configured channel) is meant to use the same senders. A
//! channel's address is configuration, never something a model chooses: these senders do not go
//! through `safe-fetch` (an operator's webhook may well be on the private network).
//!
//! ```
//! let message = notify::Message::new("A call waits for you", "acme: runCommand `cargo test`")
//!     .link("https://toolhost.example/console/approvals/appr-1")
//!     .field("approval_id", "appr-1");
//! let body = message.webhook_body();
//! assert_eq!(body["approval_id"], "appr-1");
//! // Slack and Mattermost show `text` as it is, the link as `<url|label>`.
//! assert!(body["text"].as_str().unwrap().contains("<https://toolhost.example/console/approvals/appr-1|"));
//! ```
#![deny(missing_docs)]

use std::time::Duration;

use hmac::{KeyInit as _, Mac as _};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The header a signed webhook carries: `sha256=` and the hex HMAC-SHA256 of the body under the
/// channel's secret.
pub const SIGNATURE_HEADER: &str = "X-Toolhost-Signature-256";

/// How many times a message is tried on one channel before it is given up (and logged).
pub const ATTEMPTS: u32 = 4;

/// One message.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// A short subject (an e-mail's subject; the first line of a chat message).
    pub subject: String,
    /// The text, plain.
    pub text: String,
    /// Where to act on it (a deep link).
    pub link: Option<String>,
    /// Fields a machine reads (a webhook's JSON keys).
    pub fields: Map<String, Value>,
}

impl Message {
    /// A message with a subject and a text.
    pub fn new(subject: impl Into<String>, text: impl Into<String>) -> Self {
        Self { subject: subject.into(), text: text.into(), link: None, fields: Map::new() }
    }

    /// With a link to act on it.
    #[must_use]
    pub fn link(mut self, link: impl Into<String>) -> Self {
        self.link = Some(link.into());
        self
    }

    /// With a field for machines.
    #[must_use]
    pub fn field(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.fields.insert(name.to_owned(), value.into());
        self
    }

    /// The text a person reads, with the link.
    pub fn plain(&self) -> String {
        match &self.link {
            Some(link) => format!("{}\n\n{}\n{link}", self.subject, self.text),
            None => format!("{}\n\n{}", self.subject, self.text),
        }
    }

    /// The JSON body a webhook gets: the fields, `subject`, `link`, and a `text` a Slack or
    /// Mattermost incoming webhook shows as it is (the link as `<url|Open it>`).
    pub fn webhook_body(&self) -> Value {
        let mut body = Value::Object(self.fields.clone());
        let text = match &self.link {
            Some(link) => {
                format!("*{}*\n{}\n<{link}|Open it>", escape_chat(&self.subject), escape_chat(&self.text))
            }
            None => format!("*{}*\n{}", escape_chat(&self.subject), escape_chat(&self.text)),
        };
        body["text"] = json!(text);
        body["subject"] = json!(self.subject);
        if let Some(link) = &self.link {
            body["link"] = json!(link);
        }
        body
    }
}

/// Slack's and Mattermost's control characters in message text (`<`, `>`, `&`), escaped: what a
/// tool's arguments say is shown, never taken as a link or a mention.
fn escape_chat(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The hex HMAC-SHA256 of `body` under `secret`, as [`SIGNATURE_HEADER`] carries it.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(body);
    let bytes = mac.finalize().into_bytes();
    format!("sha256={}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// A channel as configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ChannelConfig {
    /// An HTTP(S) webhook.
    Webhook {
        /// Where it is POSTed.
        url: String,
        /// The key of the body's HMAC-SHA256 signature ([`SIGNATURE_HEADER`]); unsigned without.
        #[serde(default)]
        secret: Option<String>,
    },
    /// E-mail over SMTP.
    Email {
        /// The server: `smtp://HOST:PORT` (STARTTLS, required unless the host is loopback) or
        /// `smtps://HOST:PORT` (TLS from the start).
        smtp: String,
        /// The sender.
        from: String,
        /// The recipients.
        to: Vec<String>,
        /// A login, when the server wants one.
        #[serde(default)]
        username: Option<String>,
        /// Its password.
        #[serde(default)]
        password: Option<String>,
    },
}

/// Why a channel could not be made or a message not delivered.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// The configuration does not make a channel.
    #[error("{0}")]
    Config(String),
    /// The webhook refused or could not be reached.
    #[error("webhook {url}: {reason}")]
    Webhook {
        /// Where (its host only: the path and query may hold a token).
        url: String,
        /// What happened.
        reason: String,
    },
    /// The mail server refused or could not be reached.
    #[error("e-mail through {server}: {reason}")]
    Email {
        /// The server.
        server: String,
        /// What happened.
        reason: String,
    },
}

/// A channel ready to send.
#[derive(Clone)]
pub enum Channel {
    /// A webhook.
    Webhook {
        /// Its URL.
        url: url::Url,
        /// Its signing key.
        secret: Option<Vec<u8>>,
        /// The client.
        client: reqwest::Client,
    },
    /// E-mail.
    Email {
        /// The server, for messages.
        server: String,
        /// The transport.
        transport: lettre::AsyncSmtpTransport<lettre::Tokio1Executor>,
        /// The sender.
        from: lettre::message::Mailbox,
        /// The recipients.
        to: Vec<lettre::message::Mailbox>,
    },
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Webhook { url, secret, .. } => f
                .debug_struct("Webhook")
                .field("url", &shown(url))
                .field("signed", &secret.is_some())
                .finish_non_exhaustive(),
            Self::Email { server, to, .. } => {
                f.debug_struct("Email").field("server", server).field("to", &to.len()).finish_non_exhaustive()
            }
        }
    }
}

/// A URL as logs and errors show it: its scheme and host (the path, query and credentials may hold a token).
fn shown(url: &url::Url) -> String {
    // Only the host: a chat webhook's path is its token (`/services/T…/B…/secret`).
    format!("{}://{}/…", url.scheme(), url.host_str().unwrap_or(""))
}

impl Channel {
    /// Makes a channel from its configuration.
    ///
    /// # Errors
    ///
    /// An invalid URL or address, an SMTP server that would be spoken to in clear beyond this
    /// machine.
    pub fn new(config: &ChannelConfig) -> Result<Self, NotifyError> {
        match config {
            ChannelConfig::Webhook { url, secret } => {
                let url =
                    url::Url::parse(url).map_err(|e| NotifyError::Config(format!("webhook url: {e}")))?;
                if !matches!(url.scheme(), "http" | "https") {
                    return Err(NotifyError::Config(format!(
                        "webhook url {}: http or https only",
                        shown(&url)
                    )));
                }
                let client = reqwest::Client::builder()
                    .no_proxy()
                    .redirect(reqwest::redirect::Policy::none())
                    .timeout(Duration::from_secs(10))
                    .build()
                    .map_err(|e| NotifyError::Config(format!("webhook client: {e}")))?;
                Ok(Self::Webhook { url, secret: secret.as_ref().map(|s| s.as_bytes().to_vec()), client })
            }
            ChannelConfig::Email { smtp, from, to, username, password } => {
                let parsed = url::Url::parse(smtp).map_err(|e| NotifyError::Config(format!("smtp: {e}")))?;
                let host = parsed.host_str().unwrap_or_default().to_owned();
                let loopback = host == "localhost"
                    || host
                        .trim_matches(['[', ']'])
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback());
                let mut builder = match parsed.scheme() {
                    "smtps" => lettre::AsyncSmtpTransport::<lettre::Tokio1Executor>::relay(&host)
                        .map_err(|e| NotifyError::Config(format!("smtp: {e}")))?,
                    "smtp" if loopback => {
                        lettre::AsyncSmtpTransport::<lettre::Tokio1Executor>::builder_dangerous(&host)
                    }
                    "smtp" => lettre::AsyncSmtpTransport::<lettre::Tokio1Executor>::starttls_relay(&host)
                        .map_err(|e| NotifyError::Config(format!("smtp: {e}")))?,
                    other => {
                        return Err(NotifyError::Config(format!(
                            "smtp: `{other}://` is not smtp:// or smtps://"
                        )));
                    }
                };
                if let Some(port) = parsed.port() {
                    builder = builder.port(port);
                }
                if let (Some(user), Some(password)) = (username, password) {
                    builder = builder.credentials(lettre::transport::smtp::authentication::Credentials::new(
                        user.clone(),
                        password.clone(),
                    ));
                }
                let transport = builder.timeout(Some(Duration::from_secs(15))).build();
                let mailbox = |address: &str| {
                    address
                        .parse::<lettre::message::Mailbox>()
                        .map_err(|e| NotifyError::Config(format!("`{address}`: {e}")))
                };
                if to.is_empty() {
                    return Err(NotifyError::Config(
                        "an e-mail channel needs at least one recipient (`to`)".into(),
                    ));
                }
                Ok(Self::Email {
                    server: format!(
                        "{host}:{}",
                        parsed.port().unwrap_or(if parsed.scheme() == "smtps" { 465 } else { 587 })
                    ),
                    transport,
                    from: mailbox(from)?,
                    to: to.iter().map(|address| mailbox(address)).collect::<Result<_, _>>()?,
                })
            }
        }
    }

    /// Sends once.
    ///
    /// # Errors
    ///
    /// The channel refused it or could not be reached.
    pub async fn send_once(&self, message: &Message) -> Result<(), NotifyError> {
        match self {
            Self::Webhook { url, secret, client } => {
                let body = serde_json::to_vec(&message.webhook_body()).unwrap_or_default();
                let mut request = client.post(url.clone()).header("content-type", "application/json");
                if let Some(secret) = secret {
                    request = request.header(SIGNATURE_HEADER, signature(secret, &body));
                }
                let failed = |reason: String| NotifyError::Webhook { url: shown(url), reason };
                let response =
                    request.body(body).send().await.map_err(|e| failed(e.without_url().to_string()))?;
                if response.status().is_success() {
                    Ok(())
                } else {
                    Err(failed(format!("answered {}", response.status())))
                }
            }
            Self::Email { server, transport, from, to } => {
                use lettre::AsyncTransport as _;
                let mut builder = lettre::Message::builder().from(from.clone()).subject(&message.subject);
                for recipient in to {
                    builder = builder.to(recipient.clone());
                }
                let email = builder
                    .header(lettre::message::header::ContentType::TEXT_PLAIN)
                    .body(message.plain())
                    .map_err(|e| NotifyError::Email { server: server.clone(), reason: e.to_string() })?;
                transport
                    .send(email)
                    .await
                    .map(|_| ())
                    .map_err(|e| NotifyError::Email { server: server.clone(), reason: e.to_string() })
            }
        }
    }

    /// Sends, trying again after 1, 4 and 16 s while it fails ([`ATTEMPTS`] in all).
    ///
    /// # Errors
    ///
    /// The last attempt's error.
    pub async fn send(&self, message: &Message) -> Result<(), NotifyError> {
        let mut wait = Duration::from_secs(1);
        let mut attempt = 1;
        loop {
            match self.send_once(message).await {
                Ok(()) => return Ok(()),
                Err(error) if attempt >= ATTEMPTS => return Err(error),
                Err(error) => {
                    tracing::debug!(%error, attempt, "a notification did not go through; trying again");
                    tokio::time::sleep(wait).await;
                    wait *= 4;
                    attempt += 1;
                }
            }
        }
    }
}

/// Every channel of a configuration.
#[derive(Debug, Clone, Default)]
pub struct Notifier {
    channels: Vec<Channel>,
}

impl Notifier {
    /// The channels `configs` make.
    ///
    /// # Errors
    ///
    /// The first configuration that makes no channel.
    pub fn new(configs: &[ChannelConfig]) -> Result<Self, NotifyError> {
        Ok(Self { channels: configs.iter().map(Channel::new).collect::<Result<_, _>>()? })
    }

    /// Whether there is nowhere to send.
    pub fn is_empty(&self) -> bool {
        self.channels.is_empty()
    }

    /// Sends `message` to every channel in the background (each retried on its own); a channel
    /// that gives up is logged. Never waits: a notification never holds up what caused it.
    pub fn spawn(&self, message: Message) {
        for channel in self.channels.clone() {
            let message = message.clone();
            tokio::spawn(async move {
                if let Err(error) = channel.send(&message).await {
                    tracing::warn!(event = "notify.failed", %error, subject = %message.subject, "a notification was given up");
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_hmac_sha256_of_the_body() {
        // RFC 4231, test case 2.
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn chat_text_cannot_be_a_link_or_a_mention() {
        let body =
            Message::new("A call <b>", "runCommand `curl <https://evil|click> & <!channel>`").webhook_body();
        let text = body["text"].as_str().unwrap();
        assert!(!text.contains("<https://evil") && !text.contains("<!channel>"), "{text}");
        assert!(text.contains("&lt;!channel&gt;"));
    }

    #[test]
    fn channels_refuse_what_would_leak_or_go_nowhere() {
        let webhook = |url: &str| ChannelConfig::Webhook { url: url.into(), secret: None };
        assert!(Channel::new(&webhook("ftp://x")).is_err());
        assert!(Channel::new(&webhook("https://hooks.example/T/x?token=secret")).is_ok());
        let email = |smtp: &str, to: Vec<String>| ChannelConfig::Email {
            smtp: smtp.into(),
            from: "toolhost@example.org".into(),
            to,
            username: None,
            password: None,
        };
        assert!(Channel::new(&email("smtp://127.0.0.1:2525", vec![])).is_err(), "no recipient");
        assert!(Channel::new(&email("imap://mail.example", vec!["a@example.org".into()])).is_err());
        assert!(Channel::new(&email("smtp://127.0.0.1:2525", vec!["not an address".into()])).is_err());
        assert!(Channel::new(&email("smtp://mail.example:587", vec!["a@example.org".into()])).is_ok());
        let shown =
            format!("{:?}", Channel::new(&webhook("https://hooks.example/T/x?token=secret")).unwrap());
        assert!(!shown.contains("secret"), "{shown}");
    }
}
