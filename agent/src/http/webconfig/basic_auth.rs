//! `basic_auth_users`: user names with bcrypt hashes of their passwords,
//! checked on every request but the probes'.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, OnceLock};

use anyhow::{anyhow, Result};
use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use tokio::sync::Semaphore;

/// Paths that answer without basic auth: liveness and readiness probes.
const UNAUTHENTICATED_PATHS: [&str; 2] = ["/healthz", "/readyz"];

/// Successful (user, password, hash) checks remembered, so that only the
/// first scrape of a client pays for bcrypt (~50 ms at cost 10).
const AUTH_CACHE_ENTRIES: usize = 256;

/// Whether requests for `path` answer without basic auth.
pub(super) fn exempt(path: &str) -> bool {
    UNAUTHENTICATED_PATHS.contains(&path)
}

/// Errors unless every hash of `users` (user name → hash) is a bcrypt hash;
/// the message says how to make one.
pub(super) fn check_hashes(users: &BTreeMap<String, String>) -> Result<()> {
    for (user, hash) in users {
        hash.parse::<bcrypt::HashParts>().map_err(|e| {
            anyhow!("basic_auth_users: the password of {user:?} is not a bcrypt hash ({e}): make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`")
        })?;
    }
    Ok(())
}

/// Checks passwords against the users' bcrypt hashes.
pub(super) struct Passwords {
    /// SHA-256 keys of the successful checks (see [`cache_key`]).
    cache: Mutex<HashSet<[u8; 32]>>,
    /// One bcrypt computation at a time: wrong passwords cannot take more
    /// than one CPU, and never the async runtime's thread.
    bcrypt_slot: Semaphore,
}

impl Passwords {
    /// A checker that remembers nothing yet.
    pub(super) fn new() -> Self {
        Self {
            cache: Mutex::new(HashSet::new()),
            bcrypt_slot: Semaphore::new(1),
        }
    }

    /// Whether `user`:`pw` is one of `users` (user name → bcrypt hash).
    /// Successes are remembered by a SHA-256 of user, hash and password
    /// (never the password itself); an unknown user costs a bcrypt too, so
    /// that timing does not tell which users exist.
    pub(super) async fn check(
        &self,
        users: &HashMap<String, String>,
        user: &str,
        pw: &str,
    ) -> bool {
        let hash = users.get(user).cloned();
        let key = cache_key(user, hash.as_deref().unwrap_or(""), pw);
        if hash.is_some() && self.remembered(&key) {
            return true;
        }
        let Ok(_slot) = self.bcrypt_slot.acquire().await else {
            return false;
        };
        let pw = pw.to_owned();
        let known = hash.is_some();
        let hash = hash.unwrap_or_else(|| decoy_hash().to_owned());
        let ok = tokio::task::spawn_blocking(move || bcrypt::verify(pw, &hash).unwrap_or(false))
            .await
            .unwrap_or(false);
        if ok && known {
            self.remember(key);
        }
        ok && known
    }

    /// Whether a check with this key succeeded before.
    fn remembered(&self, key: &[u8; 32]) -> bool {
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(key)
    }

    /// Remember a success; the whole cache is forgotten when it is full
    /// (simpler than an LRU, and a scrape every few seconds refills it).
    fn remember(&self, key: [u8; 32]) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= AUTH_CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(key);
    }

    /// How many successes are remembered.
    #[cfg(test)]
    pub(super) fn remembered_count(&self) -> usize {
        self.cache.lock().unwrap().len()
    }
}

/// The cache key of a check: a SHA-256 of the length-prefixed parts, so
/// that no two different (user, hash, password) give the same input.
fn cache_key(user: &str, hash: &str, pw: &str) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [user, hash, pw] {
        ctx.update(&(part.len() as u64).to_le_bytes());
        ctx.update(part.as_bytes());
    }
    let mut key = [0u8; 32];
    key.copy_from_slice(ctx.finish().as_ref());
    key
}

/// A bcrypt hash of nothing anyone knows, checked for unknown users.
pub(super) fn decoy_hash() -> &'static str {
    static DECOY: OnceLock<String> = OnceLock::new();
    DECOY.get_or_init(|| {
        let mut secret = [0u8; 16];
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret);
        bcrypt::hash(secret, bcrypt::DEFAULT_COST).unwrap_or_default()
    })
}

/// The user and password of an `Authorization: Basic` header.
pub(super) fn basic_credentials(request: &Request) -> Option<(String, String)> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, pw) = decoded.split_once(':')?;
    Some((user.to_owned(), pw.to_owned()))
}

/// The answer to a request without valid credentials.
pub(super) fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Basic")],
        "Unauthorized\n",
    )
        .into_response()
}
