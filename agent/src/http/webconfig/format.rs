//! The web config file's format, the exporter-toolkit's keys as written,
//! and how the paths in it resolve: the one model that reading the file
//! (`file.rs`) and building its TLS, client-certificate and rate-limit
//! settings (`tls.rs`, `client_certs.rs`, `rate_limit.rs`) share.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

/// The file as written. Every key of the toolkit's format is known; an
/// unknown key is an error (the toolkit reads strictly too).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileFormat {
    pub(super) tls_server_config: Option<TlsSection>,
    pub(super) http_server_config: Option<HttpSection>,
    pub(super) basic_auth_users: Option<BTreeMap<String, String>>,
    pub(super) rate_limit: Option<RateLimitSection>,
}

/// `tls_server_config`; the fields are the toolkit's keys, with its
/// meaning (see the module documentation for where slowpath differs).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TlsSection {
    pub(super) cert: Option<String>,
    pub(super) key: Option<String>,
    pub(super) client_ca: Option<String>,
    pub(super) cert_file: Option<String>,
    pub(super) key_file: Option<String>,
    pub(super) client_auth_type: Option<String>,
    pub(super) client_ca_file: Option<String>,
    pub(super) client_allowed_sans: Option<Vec<String>>,
    pub(super) min_version: Option<String>,
    pub(super) max_version: Option<String>,
    pub(super) cipher_suites: Option<Vec<String>>,
    pub(super) prefer_server_cipher_suites: Option<bool>,
    pub(super) curve_preferences: Option<Vec<String>>,
}

impl TlsSection {
    /// The toolkit serves TLS when any of these is set.
    pub(super) fn enabled(&self) -> bool {
        [
            &self.cert,
            &self.key,
            &self.client_ca,
            &self.cert_file,
            &self.key_file,
            &self.client_ca_file,
            &self.client_auth_type,
        ]
        .iter()
        .any(|v| v.as_deref().is_some_and(|s| !s.is_empty()))
    }
}

/// `http_server_config`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HttpSection {
    /// Accepted for compatibility; responses are HTTP/1.1.
    #[allow(dead_code)]
    pub(super) http2: Option<bool>,
    pub(super) headers: Option<BTreeMap<String, String>>,
}

/// `rate_limit`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RateLimitSection {
    /// A Go duration ("100ms", "1s"); 0 turns the limiter off.
    pub(super) interval: Option<String>,
    pub(super) burst: Option<u32>,
}

/// Relative paths are relative to the config file's directory.
pub(super) fn resolve(dir: &Path, file: &str) -> PathBuf {
    let p = Path::new(file);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    }
}

/// PEM text from the inline setting (`inline_key`) or the file setting
/// (`file_key`, relative to `dir`); None when neither is set.
///
/// Errors: both are set, or the file cannot be read (naming it).
pub(super) fn pem_source(
    inline: &Option<String>,
    file: &Option<String>,
    dir: &Path,
    inline_key: &str,
    file_key: &str,
) -> Result<Option<Vec<u8>>> {
    let inline = inline.as_deref().filter(|s| !s.is_empty());
    let file = file.as_deref().filter(|s| !s.is_empty());
    match (inline, file) {
        (Some(_), Some(_)) => bail!("set {inline_key} or {file_key}, not both"),
        (Some(text), None) => Ok(Some(text.as_bytes().to_vec())),
        (None, Some(f)) => {
            let path = resolve(dir, f);
            fs::read(&path)
                .map(Some)
                .with_context(|| format!("{file_key} {}", path.display()))
        }
        (None, None) => Ok(None),
    }
}
