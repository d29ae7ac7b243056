//! Bearer API keys bound to tenants: stored as SHA-256 digests, compared in constant time.
//!
//! A key is given to the server as `TENANT:SHA256HEX` (from `toolhost-server hash-key`), so the
//! server never holds the key itself. Without keys the server runs open as the tenant `local`,
//! which [`crate::config`] allows only on a loopback address.

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

/// One accepted key.
#[derive(Clone)]
pub struct KeyEntry {
    tenant: String,
    digest: [u8; 32],
}

impl std::fmt::Debug for KeyEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyEntry").field("tenant", &self.tenant).finish_non_exhaustive()
    }
}

/// The accepted keys; empty means the server is open.
#[derive(Debug, Clone, Default)]
pub struct Keys(Arc<Vec<KeyEntry>>);

/// The digest of a key as stored.
pub fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// The stored form of a key: `TENANT:SHA256HEX`.
pub fn stored_form(tenant: &str, key: &str) -> String {
    let hex: String = digest(key).iter().map(|b| format!("{b:02x}")).collect();
    format!("{tenant}:{hex}")
}

impl Keys {
    /// Parses `TENANT:SHA256HEX` entries.
    ///
    /// # Errors
    ///
    /// A sentence naming the first entry that is not of that form.
    pub fn parse<'a>(entries: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let mut keys = Vec::new();
        for entry in entries {
            let entry = entry.trim();
            if entry.is_empty() || entry.starts_with('#') {
                continue;
            }
            let (tenant, hex) = entry
                .rsplit_once(':')
                .ok_or_else(|| format!("API key entry `{}` is not TENANT:SHA256HEX", redact(entry)))?;
            let tenant = tenant.trim();
            if tenant.is_empty() || !tenant.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
                return Err(format!(
                    "API key entry for tenant `{tenant}`: tenants are letters, digits, - _ ."
                ));
            }
            let digest = parse_hex(hex.trim()).ok_or_else(|| {
                format!(
                    "API key entry for tenant `{tenant}`: expected 64 hex digits (run `toolhost-server hash-key`)"
                )
            })?;
            keys.push(KeyEntry { tenant: tenant.to_owned(), digest });
        }
        Ok(Self(Arc::new(keys)))
    }

    /// The tenants the keys belong to, sorted, without repeats.
    pub fn tenants(&self) -> Vec<&str> {
        let mut tenants: Vec<&str> = self.0.iter().map(|entry| entry.tenant.as_str()).collect();
        tenants.sort_unstable();
        tenants.dedup();
        tenants
    }

    /// Whether no key is configured (the server is open).
    pub fn is_open(&self) -> bool {
        self.0.is_empty()
    }

    /// The tenant of a presented key. Every entry is compared, in constant time, whatever matches.
    pub fn tenant_of(&self, key: &str) -> Option<&str> {
        let presented = digest(key);
        let mut found = None;
        for entry in self.0.iter() {
            if bool::from(entry.digest.ct_eq(&presented)) {
                found = Some(entry.tenant.as_str());
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
        if self.is_open() {
            return Ok(Tenant(OPEN_TENANT.to_owned()));
        }
        let unauthorized = |message: &str| ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message);
        let header = authorization.ok_or_else(|| unauthorized("missing `Authorization: Bearer <key>`"))?;
        let key = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .ok_or_else(|| unauthorized("the Authorization header must be `Bearer <key>`"))?;
        self.tenant_of(key.trim())
            .map(|t| Tenant(t.to_owned()))
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
        let header = parts.headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        state.keys.authenticate(header)
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
        assert_eq!(keys.tenant_of("k-acme"), Some("acme"));
        assert_eq!(keys.tenant_of("k-globex"), Some("globex"));
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
}
