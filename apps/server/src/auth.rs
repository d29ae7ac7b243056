//! Bearer API keys bound to tenants: stored as SHA-256 digests, compared in constant time.
//!
//! A key is given to the server as `TENANT[/ROLE[/NAME]]:SHA256HEX` (from `toolhost-server
//! new-key` or `hash-key`), so the server never holds the key itself. Without keys the server runs
//! open as the tenant `local`, which [`crate::config`] allows only on a loopback address.
//!
//! A key's role says what it may do: an `agent` key (the default) opens sessions and proposes
//! calls; an `approver` key decides approvals and revokes remembered decisions; a `person` key
//! does both. An agent therefore cannot approve its own calls unless the operator allows it
//! (`--agent-keys-decide`), and who decided is always the deciding key (`TENANT/ROLE/NAME`),
//! never what a request body says.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::state::AppState;

/// The tenant of an open (no-auth) server.
pub const OPEN_TENANT: &str = "local";

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Opens sessions and proposes calls.
    Agent,
    /// Decides approvals and revokes remembered decisions.
    Approver,
    /// Both: a person driving their own agent.
    Person,
    /// The operator: reads the server's metrics and (in the console) its instances, tenants and
    /// keys; proposes and decides nothing.
    Operator,
}

impl Role {
    /// The role's name in key entries.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::Approver => "approver",
            Self::Person => "person",
            Self::Operator => "operator",
        }
    }

    /// Whether it may open sessions and propose calls.
    pub const fn proposes(self) -> bool {
        matches!(self, Self::Agent | Self::Person)
    }

    /// Whether it may decide approvals.
    pub const fn decides(self) -> bool {
        matches!(self, Self::Approver | Self::Person)
    }

    /// Whether it may read what spans tenants (metrics, instances, keys).
    pub const fn operates(self) -> bool {
        matches!(self, Self::Operator)
    }
}

impl std::str::FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "agent" => Ok(Self::Agent),
            "approver" => Ok(Self::Approver),
            "person" => Ok(Self::Person),
            "operator" => Ok(Self::Operator),
            other => Err(format!("unknown key role `{other}`; use agent, approver, person or operator")),
        }
    }
}

/// Who is calling: the key's tenant, role and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The tenant.
    pub tenant: String,
    /// What the key may do.
    pub role: Role,
    /// `TENANT/ROLE/NAME`: what the journal records as `decided_by`.
    pub id: String,
}

/// One accepted key.
#[derive(Clone)]
pub struct KeyEntry {
    tenant: String,
    role: Role,
    name: String,
    digest: [u8; 32],
}

impl std::fmt::Debug for KeyEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyEntry").field("tenant", &self.tenant).finish_non_exhaustive()
    }
}

/// The accepted keys; empty means the server is open. Clones share one set, which a reload
/// replaces for all of them at once ([`Keys::replace`]).
#[derive(Debug, Clone, Default)]
pub struct Keys(Arc<std::sync::RwLock<Arc<Vec<KeyEntry>>>>);

/// The digest of a key as stored.
pub fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// The stored form of an agent key: `TENANT:SHA256HEX`.
pub fn stored_form(tenant: &str, key: &str) -> String {
    let hex: String = digest(key).iter().map(|b| format!("{b:02x}")).collect();
    format!("{tenant}:{hex}")
}

/// The stored form of a key with a role and a name: `TENANT/ROLE/NAME:SHA256HEX`.
pub fn stored_form_as(tenant: &str, role: Role, name: &str, key: &str) -> String {
    let hex: String = digest(key).iter().map(|b| format!("{b:02x}")).collect();
    format!("{tenant}/{}/{name}:{hex}", role.as_str())
}

/// The first 8 hex digits of a key's digest: how an unnamed key is told apart.
pub fn digest_prefix(key: &str) -> String {
    digest(key).iter().take(4).map(|b| format!("{b:02x}")).collect()
}

/// A tenant's or a key's name: letters, digits, `-`, `_`, `.`.
pub(crate) fn is_name(text: &str) -> bool {
    !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

impl Keys {
    /// Parses `TENANT:SHA256HEX` entries.
    ///
    /// # Errors
    ///
    /// A sentence naming the first entry that is not of that form.
    pub fn parse<'a>(entries: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        Self::parse_from(
            entries.into_iter().enumerate().map(|(n, entry)| (format!("--api-key #{}", n + 1), entry)),
        )
    }

    /// Parses entries, each with where it comes from (`FILE:LINE`, `--api-key #2`), which an
    /// error names.
    ///
    /// # Errors
    ///
    /// A sentence naming the first entry that is not of that form, or a key given twice under
    /// different tenants, roles or names (the last would win, and that key would open the other
    /// tenant's folders).
    pub fn parse_from<'a>(entries: impl IntoIterator<Item = (String, &'a str)>) -> Result<Self, String> {
        let mut keys: Vec<KeyEntry> = Vec::new();
        let mut origins: Vec<String> = Vec::new();
        for (origin, entry) in entries {
            let entry = entry.trim();
            if entry.is_empty() || entry.starts_with('#') {
                continue;
            }
            let (tenant, hex) = entry.rsplit_once(':').ok_or_else(|| {
                format!("{origin}: API key entry `{}` is not TENANT:SHA256HEX", redact(entry))
            })?;
            let mut parts = tenant.trim().splitn(3, '/');
            let tenant = parts.next().unwrap_or_default();
            if !is_name(tenant) {
                return Err(format!(
                    "{origin}: API key entry for tenant `{tenant}`: tenants are letters, digits, - _ ."
                ));
            }
            let role = match parts.next() {
                Some(role) => role
                    .parse::<Role>()
                    .map_err(|e| format!("{origin}: API key entry for tenant `{tenant}`: {e}"))?,
                None => Role::Agent,
            };
            let name = match parts.next() {
                Some(name) if is_name(name) => name.to_owned(),
                Some(name) => {
                    return Err(format!(
                        "{origin}: API key entry for tenant `{tenant}`: key name `{name}` must be letters, digits, - _ ."
                    ));
                }
                // Unnamed keys are told apart by the start of their digest (not the key).
                None => hex.trim().chars().take(8).collect(),
            };
            let digest = parse_hex(hex.trim()).ok_or_else(|| {
                format!(
                    "{origin}: API key entry for tenant `{tenant}`: expected 64 hex digits (run `toolhost-server hash-key`)"
                )
            })?;
            let entry = KeyEntry { tenant: tenant.to_owned(), role, name, digest };
            if let Some(at) = keys.iter().position(|known| known.digest == entry.digest) {
                let known = &keys[at];
                if (&known.tenant, known.role, &known.name) != (&entry.tenant, entry.role, &entry.name) {
                    return Err(format!(
                        "{origin}: this key is also {} (tenant `{}`, role `{}`): a key belongs to one tenant, role \
                         and name — give each its own key",
                        origins[at],
                        known.tenant,
                        known.role.as_str()
                    ));
                }
                // The very same entry twice is the same key.
                continue;
            }
            keys.push(entry);
            origins.push(origin);
        }
        Ok(Self(Arc::new(std::sync::RwLock::new(Arc::new(keys)))))
    }

    fn current(&self) -> Arc<Vec<KeyEntry>> {
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Replaces the keys with `other`'s, for every holder of this set (a reload).
    ///
    /// # Errors
    ///
    /// A server started open cannot take keys, nor one started with keys be opened, without a
    /// restart: what it listens on and what sessions may do were decided at start.
    pub fn replace(&self, other: &Keys) -> Result<(), String> {
        let new = other.current();
        if self.is_open() != new.is_empty() {
            return Err(if self.is_open() {
                "this server started without keys (open, loopback only): keys take a restart".into()
            } else {
                "the new keys are empty, which would open this server: that takes a restart".into()
            });
        }
        *self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner) = new;
        Ok(())
    }

    /// How many keys there are.
    pub fn len(&self) -> usize {
        self.current().len()
    }

    /// Whether there are none (the same as [`Keys::is_open`]).
    pub fn is_empty(&self) -> bool {
        self.is_open()
    }

    /// Each key's tenant, role and name (never its digest).
    pub fn entries(&self) -> Vec<(String, Role, String)> {
        self.current().iter().map(|e| (e.tenant.clone(), e.role, e.name.clone())).collect()
    }

    /// The tenants the keys belong to, sorted, without repeats.
    pub fn tenants(&self) -> Vec<String> {
        let mut tenants: Vec<String> = self.current().iter().map(|entry| entry.tenant.clone()).collect();
        tenants.sort_unstable();
        tenants.dedup();
        tenants
    }

    /// Whether no key is configured (the server is open).
    pub fn is_open(&self) -> bool {
        self.current().is_empty()
    }

    /// The tenant of a presented key. Every entry is compared, in constant time, whatever matches.
    pub fn tenant_of(&self, key: &str) -> Option<String> {
        self.entry_of(key).map(|entry| entry.tenant)
    }

    fn entry_of(&self, key: &str) -> Option<KeyEntry> {
        let presented = digest(key);
        let mut found = None;
        for entry in self.current().iter() {
            if bool::from(entry.digest.ct_eq(&presented)) {
                found = Some(entry.clone());
            }
        }
        found
    }

    /// The tenant of a request's `Authorization` header.
    ///
    /// # Errors
    ///
    /// 401 `unauthorized` when the header is missing, not a bearer token, or not a known key.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<Tenant, ApiError> {
        self.principal(authorization).map(|principal| Tenant(principal.tenant))
    }

    /// Who a request's `Authorization` header names; an open server's caller is the person at it.
    ///
    /// # Errors
    ///
    /// As [`authenticate`](Self::authenticate).
    pub fn principal(&self, authorization: Option<&str>) -> Result<Principal, ApiError> {
        if self.is_open() {
            return Ok(Principal {
                tenant: OPEN_TENANT.to_owned(),
                role: Role::Person,
                id: OPEN_TENANT.to_owned(),
            });
        }
        let unauthorized = |message: &str| ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message);
        let header = authorization.ok_or_else(|| unauthorized("missing `Authorization: Bearer <key>`"))?;
        let key = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .ok_or_else(|| unauthorized("the Authorization header must be `Bearer <key>`"))?;
        self.entry_of(key.trim())
            .map(|entry| Principal {
                id: format!("{}/{}/{}", entry.tenant, entry.role.as_str(), entry.name),
                tenant: entry.tenant,
                role: entry.role,
            })
            .ok_or_else(|| unauthorized("unknown API key"))
    }
}

fn redact(entry: &str) -> &str {
    entry.split(':').next().unwrap_or("")
}

fn parse_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// The caller's tenant, from its key. Every handler that reads or writes tenant data takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant(pub String);

impl FromRequestParts<Arc<AppState>> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self, Self::Rejection> {
        Principal::from_request_parts(parts, state).await.map(|principal| Tenant(principal.tenant))
    }
}

impl FromRequestParts<Arc<AppState>> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self, Self::Rejection> {
        let header = parts.headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        let found = state.keys.principal(header);
        match &found {
            Ok(principal) => {
                if let Some(audit) = parts.extensions.get::<crate::RequestAudit>() {
                    audit.note(&principal.tenant, &principal.id);
                }
                state.key_used(&principal.id);
            }
            Err(error) => {
                state.metrics.refused_keys.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let peer = parts
                    .extensions
                    .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                    .map(|info| info.0.ip().to_string())
                    .unwrap_or_default();
                // Never the key itself: only that it was refused, and why.
                tracing::warn!(
                    event = "auth.refused",
                    reason = %error.message(),
                    route = %parts.uri.path(),
                    peer = %peer,
                    "a request's key was refused"
                );
            }
        }
        found
    }
}

impl Principal {
    /// The person a key names (its name), on a server with keys; `None` on an open server.
    pub fn person(&self) -> Option<&str> {
        let mut parts = self.id.splitn(3, '/');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(_), Some(_), Some(name)) => Some(name),
            _ => None,
        }
    }

    /// Refuses a key that may not open sessions or propose calls.
    ///
    /// # Errors
    ///
    /// 403 `forbidden`.
    pub fn must_propose(&self) -> Result<(), ApiError> {
        if self.role.proposes() {
            return Ok(());
        }
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "a key with the role `{}` may not open sessions or propose calls; use an agent key",
                self.role.as_str()
            ),
        ))
    }

    /// Refuses a key that may not read what spans tenants (anything but an operator key; the
    /// person at an open server may).
    ///
    /// # Errors
    ///
    /// 403 `forbidden`.
    pub fn must_operate(&self) -> Result<(), ApiError> {
        if self.role.operates() || self.tenant == OPEN_TENANT && self.id == OPEN_TENANT {
            return Ok(());
        }
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "a key with the role `{}` may not read what spans tenants; use an operator key (`new-key --role operator`)",
                self.role.as_str()
            ),
        ))
    }

    /// Refuses a key that may not decide approvals (agent keys, unless `agents_decide`).
    ///
    /// # Errors
    ///
    /// 403 `forbidden`.
    pub fn must_decide(&self, agents_decide: bool) -> Result<(), ApiError> {
        if self.role.decides() || agents_decide {
            return Ok(());
        }
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "an agent key may propose calls but not decide them; decide with an approver or person key",
        ))
    }
}

/// A fresh random key (32 bytes from the OS, hex).
///
/// # Errors
///
/// The OS random source cannot be read.
pub fn generate_key() -> std::io::Result<String> {
    use std::io::Read as _;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(format!("th_{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_matched_by_digest_and_bound_to_their_tenant() {
        let stored = [stored_form("acme", "k-acme"), stored_form("globex", "k-globex")];
        let keys = Keys::parse(stored.iter().map(String::as_str)).unwrap();
        assert_eq!(keys.tenant_of("k-acme").as_deref(), Some("acme"));
        assert_eq!(keys.tenant_of("k-globex").as_deref(), Some("globex"));
        assert_eq!(keys.tenant_of("k-nobody"), None);
        assert!(!stored[0].contains("k-acme"), "the stored form holds no key");
        assert_eq!(keys.authenticate(Some("Bearer k-acme")).unwrap(), Tenant("acme".into()));
        for bad in [None, Some("k-acme"), Some("Bearer nope"), Some("Basic k-acme")] {
            assert_eq!(keys.authenticate(bad).unwrap_err().status(), StatusCode::UNAUTHORIZED, "{bad:?}");
        }
    }

    #[test]
    fn malformed_entries_are_refused_without_echoing_the_digest() {
        assert!(Keys::parse(["acme"]).unwrap_err().contains("TENANT:SHA256HEX"));
        assert!(Keys::parse(["acme:1234"]).unwrap_err().contains("64 hex digits"));
        assert!(Keys::parse(["a b:".to_owned() + &"0".repeat(64)].iter().map(String::as_str)).is_err());
        assert!(Keys::parse(["# comment", ""]).unwrap().is_open());
    }

    #[test]
    fn one_key_under_two_tenants_is_refused_naming_both_entries() {
        let acme = stored_form("acme", "shared");
        let globex = stored_form("globex", "shared");
        let error = Keys::parse_from([
            ("keys.txt:1".to_owned(), acme.as_str()),
            ("keys.txt:4".to_owned(), globex.as_str()),
        ])
        .unwrap_err();
        assert!(error.starts_with("keys.txt:4: this key is also keys.txt:1 (tenant `acme`"), "{error}");
        let as_approver = stored_form_as("acme", Role::Approver, "ann", "shared");
        assert!(Keys::parse([acme.as_str(), as_approver.as_str()]).unwrap_err().contains("--api-key #1"));
        // The same entry twice is one key.
        assert_eq!(Keys::parse([acme.as_str(), acme.as_str()]).unwrap().len(), 1);
    }

    #[test]
    fn a_reload_replaces_the_keys_for_every_holder_but_never_opens_or_closes_the_server() {
        let keys = Keys::parse([stored_form("acme", "old").as_str()]).unwrap();
        let held = keys.clone();
        keys.replace(&Keys::parse([stored_form("acme", "new").as_str()]).unwrap()).unwrap();
        assert_eq!(held.tenant_of("new").as_deref(), Some("acme"));
        assert_eq!(held.tenant_of("old"), None);
        assert!(keys.replace(&Keys::default()).unwrap_err().contains("open this server"));
        assert!(Keys::default().replace(&keys).unwrap_err().contains("take a restart"));
    }
}
