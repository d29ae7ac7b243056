//! The encrypted store (a person's credentials) and the operator's file.
//!
//! The store is a folder (0700) holding `credentials.json` — each value sealed with
//! XChaCha20-Poly1305 under its own random 24-byte nonce, its name as associated data, so a value
//! moved to another name does not open — and `credentials.key`, 32 random bytes readable by the
//! owner only (a key file others can read is refused, as ssh refuses such a private key). Writes
//! go to a temporary file renamed into place under an exclusive lock, so two `creds set` at once
//! lose nothing.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use chacha20poly1305::XChaCha20Poly1305;
use chacha20poly1305::aead::{Aead as _, KeyInit as _, Payload};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::{CredentialError, Credentials, Secret, Source, check_name, check_value};

const STORE_FILE: &str = "credentials.json";
const KEY_FILE: &str = "credentials.key";
const LOCK_FILE: &str = "credentials.lock";
const KEY_BYTES: usize = 32;
const NONCE_BYTES: usize = 24;
/// The largest store file read (a thousand credentials fit many times over).
const MAX_STORE_BYTES: u64 = 16 * 1024 * 1024;

/// One stored credential as the store file holds it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Sealed {
    nonce: String,
    sealed: String,
    updated_unix: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct StoreFile {
    version: u32,
    cipher: String,
    credentials: BTreeMap<String, Sealed>,
}

/// A stored credential as listed: its name and when it was last set; never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoredCredential {
    /// Its name.
    pub name: String,
    /// When it was last set, in seconds since 1970.
    pub updated_unix: u64,
}

/// A person's encrypted credential store in a folder.
#[derive(Debug, Clone)]
pub struct Vault {
    dir: PathBuf,
}

fn io(what: impl std::fmt::Display, path: &Path, error: std::io::Error) -> CredentialError {
    CredentialError::Io(format!("cannot {what} {}: {error}", path.display()))
}

/// Refuses a file others may read.
fn owner_only(path: &Path, metadata: &std::fs::Metadata) -> Result<(), CredentialError> {
    if metadata.permissions().mode() & 0o077 != 0 {
        return Err(CredentialError::Permissions(path.display().to_string()));
    }
    Ok(())
}

impl Vault {
    /// The store in `dir` (created, 0700, on the first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// Its folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Makes its folder (0700 from the start) if it is missing, so that it can be named in a
    /// sandbox's denied reads before anything is stored.
    ///
    /// # Errors
    ///
    /// The folder cannot be made or its permissions set.
    pub fn prepare(&self) -> Result<(), CredentialError> {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(|e| io("create", &self.dir, e))?;
        std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| io("set the permissions of", &self.dir, e))
    }

    /// The key, made when `create` and there is none.
    fn key(&self, create: bool) -> Result<Option<Zeroizing<Vec<u8>>>, CredentialError> {
        let path = self.dir.join(KEY_FILE);
        match std::fs::metadata(&path) {
            Ok(metadata) => {
                owner_only(&path, &metadata)?;
                let key = Zeroizing::new(std::fs::read(&path).map_err(|e| io("read", &path, e))?);
                if key.len() != KEY_BYTES {
                    return Err(CredentialError::Io(format!(
                        "{} is not a key of {KEY_BYTES} bytes",
                        path.display()
                    )));
                }
                Ok(Some(key))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                let mut key = Zeroizing::new(vec![0u8; KEY_BYTES]);
                getrandom::fill(&mut key)
                    .map_err(|e| CredentialError::Io(format!("no randomness for a key: {e}")))?;
                // Created readable by its owner only, and never over a key another writer made.
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)
                    .map_err(|e| io("create", &path, e))?;
                file.write_all(&key).and_then(|()| file.sync_all()).map_err(|e| io("write", &path, e))?;
                Ok(Some(key))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io("read", &path, e)),
        }
    }

    fn read_file(&self) -> Result<StoreFile, CredentialError> {
        let path = self.dir.join(STORE_FILE);
        let metadata = match std::fs::metadata(&path) {
            Ok(metadata) => metadata,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(StoreFile::default()),
            Err(e) => return Err(io("read", &path, e)),
        };
        owner_only(&path, &metadata)?;
        if metadata.len() > MAX_STORE_BYTES {
            return Err(CredentialError::Io(format!("{} is larger than 16 MiB", path.display())));
        }
        let bytes = std::fs::read(&path).map_err(|e| io("read", &path, e))?;
        let file: StoreFile = serde_json::from_slice(&bytes)
            .map_err(|e| CredentialError::Io(format!("{} is not a credential store: {e}", path.display())))?;
        if file.version != 1 || file.cipher != "xchacha20poly1305" {
            return Err(CredentialError::Io(format!(
                "{} is a store of another version ({} {})",
                path.display(),
                file.version,
                file.cipher
            )));
        }
        Ok(file)
    }

    fn write_file(&self, file: &StoreFile) -> Result<(), CredentialError> {
        let path = self.dir.join(STORE_FILE);
        let mut temp = tempfile::Builder::new()
            .prefix(".credentials")
            .permissions(std::fs::Permissions::from_mode(0o600))
            .tempfile_in(&self.dir)
            .map_err(|e| io("write in", &self.dir, e))?;
        let bytes = serde_json::to_vec_pretty(file).map_err(|e| CredentialError::Io(e.to_string()))?;
        temp.write_all(&bytes).and_then(|()| temp.as_file().sync_all()).map_err(|e| io("write", &path, e))?;
        temp.persist(&path).map_err(|e| io("replace", &path, e.error))?;
        Ok(())
    }

    /// Runs `change` on the store file under an exclusive lock, and writes what it leaves.
    fn change<T>(
        &self,
        change: impl FnOnce(&mut StoreFile, &XChaCha20Poly1305) -> Result<T, CredentialError>,
    ) -> Result<T, CredentialError> {
        self.prepare()?;
        let lock_path = self.dir.join(LOCK_FILE);
        let lock = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|e| io("open", &lock_path, e))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| io("lock", &lock_path, e.into()))?;
        let mut file = self.read_file()?;
        // A store whose key is gone stays as it is: a new key would open none of its values.
        let key = self.key(file.credentials.is_empty())?.ok_or_else(|| {
            CredentialError::Io(format!(
                "{} is missing while the store holds credentials: restore it, or remove {} to start over",
                self.dir.join(KEY_FILE).display(),
                self.dir.join(STORE_FILE).display()
            ))
        })?;
        let cipher = XChaCha20Poly1305::new_from_slice(&key)
            .map_err(|_| CredentialError::Io("the key has the wrong length".into()))?;
        let out = change(&mut file, &cipher)?;
        file.version = 1;
        file.cipher = "xchacha20poly1305".into();
        self.write_file(&file)?;
        Ok(out)
    }

    /// Stores (or replaces) `name`.
    ///
    /// # Errors
    ///
    /// A refused name or value, or a store that cannot be read or written.
    pub fn set(&self, name: &str, secret: &Secret) -> Result<(), CredentialError> {
        check_name(name)?;
        check_value(name, secret.expose())?;
        self.change(|file, cipher| {
            let mut nonce = [0u8; NONCE_BYTES];
            getrandom::fill(&mut nonce)
                .map_err(|e| CredentialError::Io(format!("no randomness for a nonce: {e}")))?;
            let sealed = cipher
                .encrypt((&nonce).into(), Payload { msg: secret.expose().as_bytes(), aad: name.as_bytes() })
                .map_err(|_| CredentialError::Io("encryption failed".into()))?;
            let updated_unix =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            file.credentials.insert(
                name.to_owned(),
                Sealed { nonce: hex::encode(nonce), sealed: hex::encode(sealed), updated_unix },
            );
            Ok(())
        })
    }

    /// Removes `name`; whether it was there.
    ///
    /// # Errors
    ///
    /// A store that cannot be read or written.
    pub fn remove(&self, name: &str) -> Result<bool, CredentialError> {
        if !self.dir.join(STORE_FILE).exists() {
            return Ok(false);
        }
        self.change(|file, _| Ok(file.credentials.remove(name).is_some()))
    }

    /// The stored names (nothing is decrypted).
    ///
    /// # Errors
    ///
    /// A store that cannot be read.
    pub fn list(&self) -> Result<Vec<StoredCredential>, CredentialError> {
        Ok(self
            .read_file()?
            .credentials
            .into_iter()
            .map(|(name, sealed)| StoredCredential { name, updated_unix: sealed.updated_unix })
            .collect())
    }

    /// Every stored credential, decrypted, as a set.
    ///
    /// # Errors
    ///
    /// A store that cannot be read, a key others can read, or a value the key does not open.
    pub fn load(&self) -> Result<Credentials, CredentialError> {
        let credentials = Credentials::new();
        let file = self.read_file()?;
        if file.credentials.is_empty() {
            return Ok(credentials);
        }
        let key = self.key(false)?.ok_or_else(|| {
            CredentialError::Io(format!(
                "{} is missing: the store cannot be opened",
                self.dir.join(KEY_FILE).display()
            ))
        })?;
        let cipher = XChaCha20Poly1305::new_from_slice(&key)
            .map_err(|_| CredentialError::Io("the key has the wrong length".into()))?;
        for (name, sealed) in &file.credentials {
            let decrypt = || -> Option<Vec<u8>> {
                let nonce: [u8; NONCE_BYTES] = hex::decode(&sealed.nonce).ok()?.try_into().ok()?;
                let bytes = hex::decode(&sealed.sealed).ok()?;
                cipher.decrypt((&nonce).into(), Payload { msg: &bytes, aad: name.as_bytes() }).ok()
            };
            let plain = Zeroizing::new(decrypt().ok_or_else(|| CredentialError::Decrypt(name.clone()))?);
            let value =
                String::from_utf8(plain.to_vec()).map_err(|_| CredentialError::Decrypt(name.clone()))?;
            credentials.insert(name, Secret::new(value), Source::Store)?;
        }
        Ok(credentials)
    }
}

/// Reads an operator's credentials file: TOML, `name = "value"` per line, readable by its owner
/// only.
///
/// # Errors
///
/// An unreadable file, one others can read, not TOML of strings, or a refused name or value.
pub fn load_operator_file(path: &Path) -> Result<Credentials, CredentialError> {
    let metadata = std::fs::metadata(path).map_err(|e| io("read", path, e))?;
    owner_only(path, &metadata)?;
    if metadata.len() > MAX_STORE_BYTES {
        return Err(CredentialError::Io(format!("{} is larger than 16 MiB", path.display())));
    }
    let text = Zeroizing::new(std::fs::read_to_string(path).map_err(|e| io("read", path, e))?);
    // The parser's message may quote the line; it is not repeated.
    let table: BTreeMap<String, String> = toml::from_str(&text).map_err(|_| {
        CredentialError::Io(format!("{} is not a TOML table of `name = \"value\"` lines", path.display()))
    })?;
    let credentials = Credentials::new();
    for (name, value) in table {
        credentials.insert(&name, Secret::new(value), Source::Operator)?;
    }
    Ok(credentials)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_list_load_remove_and_nothing_in_clear() {
        let dir = tempfile::tempdir().unwrap();
        let vault = Vault::new(dir.path().join("store"));
        assert!(vault.list().unwrap().is_empty());
        assert!(vault.load().unwrap().is_empty());
        vault.set("petstore", &Secret::new("pk_live_very_secret_42".into())).unwrap();
        vault.set("github", &Secret::new("ghp_another_secret".into())).unwrap();
        vault.set("github", &Secret::new("ghp_replaced_secret".into())).unwrap();
        let names: Vec<String> = vault.list().unwrap().into_iter().map(|c| c.name).collect();
        assert_eq!(names, ["github", "petstore"]);
        let loaded = vault.load().unwrap();
        assert_eq!(loaded.get("github").unwrap().expose(), "ghp_replaced_secret");
        assert_eq!(loaded.get("petstore").unwrap().expose(), "pk_live_very_secret_42");
        // Nothing on disk holds a value in any form.
        for entry in std::fs::read_dir(vault.dir()).unwrap() {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{}", path.display());
            for value in ["pk_live_very_secret_42", "ghp_replaced_secret", "ghp_another_secret"] {
                assert!(!bytes.windows(value.len()).any(|w| w == value.as_bytes()), "{}", path.display());
            }
        }
        assert_eq!(std::fs::metadata(vault.dir()).unwrap().permissions().mode() & 0o777, 0o700);
        assert!(vault.remove("github").unwrap());
        assert!(!vault.remove("github").unwrap());
        assert!(vault.load().unwrap().get("github").is_none());
    }

    #[test]
    fn a_swapped_value_a_wrong_key_and_an_open_key_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let vault = Vault::new(dir.path());
        vault.set("one", &Secret::new("value-one-1".into())).unwrap();
        vault.set("two", &Secret::new("value-two-2".into())).unwrap();
        // A value moved under another name does not open (its name is its associated data).
        let path = dir.path().join(STORE_FILE);
        let mut file: StoreFile = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let one = file.credentials["one"].clone();
        file.credentials.insert("two".into(), one);
        std::fs::write(&path, serde_json::to_vec(&file).unwrap()).unwrap();
        assert!(matches!(vault.load(), Err(CredentialError::Decrypt(name)) if name == "two"));
        // Another key opens nothing.
        vault.remove("two").unwrap();
        std::fs::write(dir.path().join(KEY_FILE), [7u8; KEY_BYTES]).unwrap();
        assert!(matches!(vault.load(), Err(CredentialError::Decrypt(_))));
        // A key that went missing is not replaced while values it sealed remain.
        let key = std::fs::read(dir.path().join(KEY_FILE)).unwrap();
        std::fs::remove_file(dir.path().join(KEY_FILE)).unwrap();
        let error = vault.set("three", &Secret::new("value-three-3".into())).unwrap_err().to_string();
        assert!(error.contains("is missing while the store holds credentials"), "{error}");
        assert!(!dir.path().join(KEY_FILE).exists());
        std::fs::write(dir.path().join(KEY_FILE), &key).unwrap();
        std::fs::set_permissions(dir.path().join(KEY_FILE), std::fs::Permissions::from_mode(0o600)).unwrap();
        // A key others can read is refused.
        std::fs::set_permissions(dir.path().join(KEY_FILE), std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(vault.load(), Err(CredentialError::Permissions(_))));
    }

    #[test]
    fn operator_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("creds.toml");
        std::fs::write(&path, "petstore = \"op-secret-1\"\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(load_operator_file(&path), Err(CredentialError::Permissions(_))));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let loaded = load_operator_file(&path).unwrap();
        assert_eq!(loaded.get("petstore").unwrap().expose(), "op-secret-1");
        assert_eq!(loaded.list()[0].source, Source::Operator);
        std::fs::write(&path, "petstore = 1\n").unwrap();
        let error = load_operator_file(&path).unwrap_err().to_string();
        assert!(!error.contains("op-secret"), "{error}");
    }
}
