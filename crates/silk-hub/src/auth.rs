//! API tokens: bearer tokens `silk_<id>_<secret>`.
//!
//! The store keeps a token's id, name, tenant, role, and the SHA-256 of its secret (hex) — never the secret. A request's token is parsed, its row looked up by id, and
//! the hash of the presented secret compared with the stored one in constant time
//! (`subtle`). The secret exists in clear only in the answer that created it and, for the
//! admin token made at first start, in `DATA_DIR/admin.token` (mode 0600). Tokens never
//! appear in logs: errors name the token id at most.

use crate::error::HubError;
use crate::hub::HubHandle;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};
pub use silk_api::tokens::{NewToken, Role, TokenView};
use silk_store::TokenRow;
use std::path::Path;
use subtle::ConstantTimeEq;

/// The name of the admin token file in the data dir.
pub const ADMIN_TOKEN_FILE: &str = "admin.token";

/// Who a request is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The token id (`none` without auth).
    pub token_id: String,
    /// Its role.
    pub role: Role,
    /// The tenant it acts in: its own, or for an admin the one `X-Silk-Tenant` names.
    pub tenant: String,
    /// Set for a run token (`SILK_RUN_TOKEN`): it reaches only its run's program routes.
    pub run: Option<silk_core::RunId>,
}

impl Principal {
    /// Whether it is the platform's admin.
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// The admin without tokens (`--no-auth`), in the default tenant.
    pub fn local_admin() -> Principal {
        Principal {
            token_id: "none".into(),
            role: Role::Admin,
            tenant: silk_store::DEFAULT_TENANT.into(),
            run: None,
        }
    }
}

/// The API's view of a stored token.
fn token_view(t: TokenRow) -> TokenView {
    TokenView {
        role: Role::parse(&t.role).unwrap_or(Role::Viewer),
        id: t.id,
        name: t.name,
        tenant: t.tenant,
        created_ms: t.created_ms,
        last_used_ms: t.last_used_ms,
    }
}

fn hash_hex(secret: &str) -> String {
    let digest = Sha256::digest(secret.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Splits `silk_<id>_<secret>`.
fn parse(token: &str) -> Option<(&str, &str)> {
    let rest = token.strip_prefix("silk_")?;
    let (id, secret) = rest.split_once('_')?;
    let id_ok = !id.is_empty() && id.len() <= 32 && id.bytes().all(|b| b.is_ascii_hexdigit());
    (id_ok && !secret.is_empty() && secret.len() <= 256).then_some((id, secret))
}

fn new_secret() -> (String, String) {
    let mut id = [0u8; 6];
    let mut secret = [0u8; 32];
    let mut rng = rand::rng();
    rng.fill_bytes(&mut id);
    rng.fill_bytes(&mut secret);
    let id: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret);
    (id, secret)
}

/// Writes the admin token file, readable by its owner only.
fn write_token_file(path: &Path, token: &str) -> Result<(), HubError> {
    use std::io::Write;
    let storage = |e: std::io::Error| HubError::Storage {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path).map_err(storage)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(storage)?;
    }
    file.write_all(format!("{token}\n").as_bytes())
        .map_err(storage)?;
    file.sync_all().map_err(storage)
}

impl HubHandle {
    /// Creates a token of `tenant` (which must exist) with `role`.
    pub async fn create_token(
        &self,
        name: &str,
        role: Role,
        tenant: &str,
    ) -> Result<NewToken, HubError> {
        let name = name.trim();
        if name.is_empty() || name.len() > 100 {
            return Err(HubError::BadRun("token name: 1 to 100 characters".into()));
        }
        if self.store().get_tenant(tenant).await?.is_none() {
            return Err(HubError::NoSuchTenant(tenant.to_owned()));
        }
        let (id, secret) = new_secret();
        let now = self.shared().clock.now_ms();
        let row = TokenRow {
            id: id.clone(),
            name: name.to_owned(),
            hash: hash_hex(&secret),
            tenant: tenant.to_owned(),
            role: role.as_str().to_owned(),
            created_ms: now,
            last_used_ms: None,
        };
        self.store().create_token(&row).await?;
        tracing::info!(token = %id, name, tenant, role = %role, "API token created");
        Ok(NewToken {
            token: format!("silk_{id}_{secret}"),
            id,
            name: name.to_owned(),
            created_ms: now,
        })
    }

    /// Every token (no secrets), or those of `tenant`.
    pub async fn tokens(&self, tenant: Option<&str>) -> Result<Vec<TokenView>, HubError> {
        Ok(self
            .store()
            .list_tokens()
            .await?
            .into_iter()
            .filter(|t| tenant.is_none_or(|tenant| t.tenant == tenant))
            .map(token_view)
            .collect())
    }

    /// A token (no secret).
    pub async fn token(&self, id: &str) -> Result<TokenView, HubError> {
        match self.store().get_token(id).await? {
            Some(row) => Ok(token_view(row)),
            None => Err(HubError::NoSuchToken(id.to_owned())),
        }
    }

    /// Deletes a token.
    pub async fn delete_token(&self, id: &str) -> Result<(), HubError> {
        if self.store().delete_token(id).await? {
            tracing::info!(token = %id, "API token deleted");
            Ok(())
        } else {
            Err(HubError::NoSuchToken(id.to_owned()))
        }
    }

    /// Who holds `token`, if it is valid.
    pub async fn authenticate(&self, token: &str) -> Result<Option<Principal>, HubError> {
        let Some((id, secret)) = parse(token) else {
            return Ok(None);
        };
        let presented = hash_hex(secret);
        let Some(row) = self.store().get_token(id).await? else {
            // Same work as a match, so an unknown id is not told apart by timing.
            let _ = presented.as_bytes().ct_eq(hash_hex("").as_bytes());
            return Ok(None);
        };
        if !bool::from(presented.as_bytes().ct_eq(row.hash.as_bytes())) {
            return Ok(None);
        }
        let now = self.shared().clock.now_ms();
        if row
            .last_used_ms
            .is_none_or(|t| now.saturating_sub(t) >= 60_000)
        {
            let _ = self.store().touch_token(id, now).await;
        }
        let Some(role) = Role::parse(&row.role) else {
            tracing::warn!(token = %row.id, role = %row.role, "token refused: unknown role");
            return Ok(None);
        };
        Ok(Some(Principal {
            token_id: row.id,
            role,
            tenant: row.tenant,
            run: None,
        }))
    }

    /// At first start (no token in the store), creates the admin token and writes it to
    /// `DATA_DIR/admin.token` (mode 0600); returns it so that the caller prints it once.
    /// Later starts return `None`.
    pub async fn ensure_admin_token(&self) -> Result<Option<String>, HubError> {
        if self.store().count_tokens().await? > 0 {
            return Ok(None);
        }
        let token = self
            .create_token("admin", Role::Admin, silk_store::DEFAULT_TENANT)
            .await?;
        write_token_file(&self.data_dir().join(ADMIN_TOKEN_FILE), &token.token)?;
        Ok(Some(token.token))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_and_hash() {
        let (id, secret) = new_secret();
        let token = format!("silk_{id}_{secret}");
        assert_eq!(parse(&token), Some((id.as_str(), secret.as_str())));
        assert_eq!(parse("silk_zz_abc"), None);
        assert_eq!(parse("silk_abc"), None);
        assert_eq!(parse("Bearer x"), None);
        assert_eq!(parse("silk__x"), None);
        assert_eq!(hash_hex("abc").len(), 64);
        assert_ne!(hash_hex("abc"), hash_hex("abd"));
    }

    #[cfg(unix)]
    #[test]
    fn the_token_file_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(ADMIN_TOKEN_FILE);
        write_token_file(&path, "silk_ab_cd").unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "silk_ab_cd\n");
    }
}
