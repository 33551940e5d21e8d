//! Secrets at rest: project passwords and webhook secrets are sealed with ChaCha20-Poly1305
//! (the RustCrypto AEAD) before they reach the store, and opened only where they are used.
//!
//! The key (32 bytes) comes from `SILK_SECRET_KEY` (base64 or 64 hex digits) or from the
//! key file `DATA_DIR/secret.key`, made at first start (mode 0600). Hubs that share a store
//! must share the key. Each sealed value is `v1:` + base64(nonce ‖ ciphertext), its purpose
//! (`project:shop:password`) bound as associated data, so a value copied to another field
//! does not open. [`SecretBox::check_store`] seals a known text once per store and opens it
//! at every start: a wrong key is a clear error then, not garbage later.

use crate::error::ProjectError;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;
use std::path::{Path, PathBuf};

/// The environment variable that holds the key.
pub const KEY_ENV: &str = "SILK_SECRET_KEY";
/// The key file's name in the data dir.
pub const KEY_FILE: &str = "secret.key";
/// The purpose of the store's check value.
const CHECK_PURPOSE: &str = "silk:key-check";
const CHECK_TEXT: &[u8] = b"silk secret key check";

/// Seals and opens secrets with the hub's key.
#[derive(Clone)]
pub struct SecretBox {
    cipher: ChaCha20Poly1305,
    /// The key of [`SecretBox::mac`], derived from the key (never the key itself).
    mac_key: [u8; 32],
    /// Where the key came from, for errors (never the key).
    source: String,
}

impl std::fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretBox")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl SecretBox {
    /// A box with `key`; `source` says where it came from.
    pub fn new(key: [u8; 32], source: impl Into<String>) -> Self {
        let mut derive = <Hmac<Sha256> as Mac>::new_from_slice(&key)
            .unwrap_or_else(|_| unreachable!("HMAC accepts 32-byte keys"));
        derive.update(b"silk:mac-key");
        Self {
            cipher: ChaCha20Poly1305::new(Key::from_slice(&key)),
            mac_key: derive.finalize().into_bytes().into(),
            source: source.into(),
        }
    }

    /// The hub's box: the key of `SILK_SECRET_KEY` (`env_key`) if set, else the key file in
    /// `data_dir` (made, mode 0600, if there is none).
    pub fn load(data_dir: &Path, env_key: Option<&str>) -> Result<Self, ProjectError> {
        if let Some(text) = env_key.filter(|t| !t.trim().is_empty()) {
            let key = parse_key(text.trim())
                .map_err(|why| ProjectError::Key(format!("{KEY_ENV}: {why}")))?;
            return Ok(Self::new(key, KEY_ENV));
        }
        let path = data_dir.join(KEY_FILE);
        let source = path.display().to_string();
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let key = parse_key(text.trim())
                    .map_err(|why| ProjectError::Key(format!("{source}: {why}")))?;
                Ok(Self::new(key, source))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut key = [0u8; 32];
                rand::rng().fill_bytes(&mut key);
                write_private(&path, &format!("{}\n", STANDARD.encode(key)))?;
                tracing::info!(path = %source, "secret key made (keep it: it opens the passwords in the store)");
                Ok(Self::new(key, source))
            }
            Err(e) => Err(ProjectError::Key(format!("{source}: {e}"))),
        }
    }

    /// Where the key came from (the variable's name or the file's path).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Seals `plain` for `purpose`.
    pub fn seal(&self, purpose: &str, plain: &str) -> String {
        let mut nonce = [0u8; 12];
        rand::rng().fill_bytes(&mut nonce);
        let sealed = self
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: plain.as_bytes(),
                    aad: purpose.as_bytes(),
                },
            )
            .unwrap_or_default();
        let mut out = nonce.to_vec();
        out.extend(sealed);
        format!("v1:{}", STANDARD.encode(out))
    }

    /// Opens a value [`SecretBox::seal`] made for `purpose`. The error names the purpose and
    /// the key's source, never the value.
    pub fn open(&self, purpose: &str, sealed: &str) -> Result<String, ProjectError> {
        let wrong = |why: &str| {
            ProjectError::Key(format!(
                "{purpose}: {why} (key from {}; hubs sharing a store must share the key)",
                self.source
            ))
        };
        let bytes = sealed
            .strip_prefix("v1:")
            .and_then(|b| STANDARD.decode(b).ok())
            .filter(|b| b.len() > 12)
            .ok_or_else(|| wrong("not a sealed value"))?;
        let (nonce, text) = bytes.split_at(12);
        let plain = self
            .cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: text,
                    aad: purpose.as_bytes(),
                },
            )
            .map_err(|_| wrong("does not open with this key"))?;
        String::from_utf8(plain).map_err(|_| wrong("not text"))
    }

    /// An authentication tag of `data` for `purpose` (HMAC-SHA256 with a key derived from
    /// the hub's key; hex): what every hub sharing the key can check, and nobody
    /// without it can make (the run tokens of program runs).
    pub fn mac(&self, purpose: &str, data: &str) -> String {
        crate::hex(&self.mac_bytes(purpose, data))
    }

    /// Whether `tag` is [`SecretBox::mac`] of `data` for `purpose` (constant time).
    pub fn verify_mac(&self, purpose: &str, data: &str, tag: &str) -> bool {
        let valid = tag.len().is_multiple_of(2) && tag.bytes().all(|b| b.is_ascii_hexdigit());
        if !valid {
            return false;
        }
        let tag: Vec<u8> = (0..tag.len())
            .step_by(2)
            .filter_map(|i| u8::from_str_radix(&tag[i..i + 2], 16).ok())
            .collect();
        self.mac_engine(purpose, data).verify_slice(&tag).is_ok()
    }

    fn mac_engine(&self, purpose: &str, data: &str) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.mac_key)
            .unwrap_or_else(|_| unreachable!("HMAC accepts 32-byte keys"));
        mac.update(purpose.as_bytes());
        mac.update(&[0]);
        mac.update(data.as_bytes());
        mac
    }

    fn mac_bytes(&self, purpose: &str, data: &str) -> Vec<u8> {
        self.mac_engine(purpose, data)
            .finalize()
            .into_bytes()
            .to_vec()
    }

    /// A check value to keep in the store the first time ([`SecretBox::check_store`]).
    pub fn check_value(&self) -> String {
        self.seal(CHECK_PURPOSE, &String::from_utf8_lossy(CHECK_TEXT))
    }

    /// Whether the store's check value (made by [`SecretBox::check_value`] with the store's
    /// key) opens with this key: a clear error at start when the key is not the store's.
    pub fn check_store(&self, stored: &str) -> Result<(), ProjectError> {
        match self.open(CHECK_PURPOSE, stored) {
            Ok(text) if text.as_bytes() == CHECK_TEXT => Ok(()),
            _ => Err(ProjectError::Key(format!(
                "the key from {} is not the key this store's secrets were sealed with; start \
                 the hub with that key (the `{KEY_FILE}` of the data dir that made them, or \
                 {KEY_ENV})",
                self.source
            ))),
        }
    }
}

/// A key written as base64 (44 characters) or hex (64 digits).
fn parse_key(text: &str) -> Result<[u8; 32], String> {
    let bytes = if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        (0..32)
            .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16))
            .collect::<Result<Vec<u8>, _>>()
            .map_err(|e| e.to_string())?
    } else {
        STANDARD
            .decode(text)
            .map_err(|_| "not base64 or 64 hex digits".to_string())?
    };
    bytes
        .try_into()
        .map_err(|b: Vec<u8>| format!("the key must be 32 bytes, not {}", b.len()))
}

/// Writes `text` to a new file readable by its owner only.
fn write_private(path: &PathBuf, text: &str) -> Result<(), ProjectError> {
    use std::io::Write;
    let fail = |e: std::io::Error| ProjectError::Key(format!("{}: {e}", path.display()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path).map_err(fail)?;
    file.write_all(text.as_bytes()).map_err(fail)?;
    file.sync_all().map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_check_with_the_key_purpose_and_data_only() {
        let a = SecretBox::new([7; 32], "test");
        let tag = a.mac("run", "r1");
        assert!(a.verify_mac("run", "r1", &tag));
        assert!(!a.verify_mac("run", "r2", &tag));
        assert!(!a.verify_mac("other", "r1", &tag));
        assert!(!a.verify_mac("run", "r1", "not base64 !"));
        assert!(!SecretBox::new([8; 32], "test").verify_mac("run", "r1", &tag));
    }

    #[test]
    fn sealed_values_open_with_the_key_and_purpose_only() {
        let a = SecretBox::new([7; 32], "test");
        let sealed = a.seal("project:shop:password", "hunter2");
        assert!(!sealed.contains("hunter2"));
        assert_ne!(
            sealed,
            a.seal("project:shop:password", "hunter2"),
            "fresh nonce"
        );
        assert_eq!(a.open("project:shop:password", &sealed).unwrap(), "hunter2");
        let e = a
            .open("project:blog:password", &sealed)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("project:blog:password") && !e.contains("hunter2"),
            "{e}"
        );
        let b = SecretBox::new([8; 32], "other");
        assert!(b.open("project:shop:password", &sealed).is_err());
        assert!(a.open("x", "garbage").is_err());
        a.check_store(&a.check_value()).unwrap();
        let e = b.check_store(&a.check_value()).unwrap_err().to_string();
        assert!(e.contains("not the key"), "{e}");
    }

    #[test]
    fn the_key_file_is_made_once_private_and_env_keys_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let first = SecretBox::load(dir.path(), None).unwrap();
        let sealed = first.seal("p", "x");
        let again = SecretBox::load(dir.path(), None).unwrap();
        assert_eq!(again.open("p", &sealed).unwrap(), "x");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let hex = "00".repeat(32);
        let env = SecretBox::load(dir.path(), Some(&hex)).unwrap();
        assert_eq!(env.source(), KEY_ENV);
        let e = SecretBox::load(dir.path(), Some("short"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(KEY_ENV), "{e}");
    }
}
