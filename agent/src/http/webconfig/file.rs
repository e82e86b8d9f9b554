//! Reading the web config file (its format: `format.rs`) with everything it
//! names (certificates, keys, client CAs) into the settings it gives.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use axum::http::{HeaderName, HeaderValue};
use rustls::ServerConfig;

use super::format::{resolve, FileFormat, TlsSection};
use super::{basic_auth, headers, rate_limit, tls};

/// What one reading of the file gives.
pub struct Loaded {
    /// The TLS settings, when `tls_server_config` is set.
    pub(super) tls: Option<Arc<ServerConfig>>,
    /// User name → bcrypt hash; empty: no basic auth.
    pub(super) users: HashMap<String, String>,
    /// Added to every response.
    pub(super) headers: Vec<(HeaderName, HeaderValue)>,
    /// Requests per interval and burst (read at start only).
    pub(super) rate_limit: Option<(Duration, u32)>,
    /// Settings served differently from how they are written, logged.
    pub(super) notes: Vec<String>,
}

/// Identity and version of a file: (device, inode, size, mtime ns, ctime
/// ns), or None when it cannot be stat'ed.
pub(super) type FileStamp = Option<(u64, u64, u64, i128, i128)>;

/// The stamp of `path` now.
pub(super) fn stamp(path: &Path) -> FileStamp {
    let m = fs::metadata(path).ok()?;
    let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
    Some((
        m.dev(),
        m.ino(),
        m.size(),
        ns(m.mtime(), m.mtime_nsec()),
        ns(m.ctime(), m.ctime_nsec()),
    ))
}

/// Read the file and everything it names; also returns the files read and
/// their stamps (taken before reading them, so that a change made while
/// they are read is seen at the next check).
pub(super) fn read_file(path: &Path) -> Result<(Loaded, Vec<PathBuf>, Vec<FileStamp>)> {
    let mut files = vec![path.to_path_buf()];
    let mut stamps = vec![stamp(path)];
    let format = parse(path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let tls = match format.tls_server_config.as_ref().filter(|t| t.enabled()) {
        Some(section) => {
            let named = tls_files(section, dir);
            stamps.extend(named.iter().map(|f| stamp(f)));
            files.extend(named);
            Some(Arc::new(
                tls::server_config(section, dir).context("tls_server_config")?,
            ))
        }
        None => None,
    };
    Ok((settings(format, tls)?, files, stamps))
}

/// The YAML of `path`; an empty file is an empty configuration.
fn parse(path: &Path) -> Result<FileFormat> {
    let text = fs::read_to_string(path).context("cannot read it")?;
    if text.trim().is_empty() {
        return Ok(FileFormat::default());
    }
    serde_saphyr::from_str(&text).map_err(|e| anyhow!("{}", one_line(&e.to_string())))
}

/// The settings of `format` besides TLS (built already, as `tls`), checked.
fn settings(format: FileFormat, tls: Option<Arc<ServerConfig>>) -> Result<Loaded> {
    let users = format.basic_auth_users.unwrap_or_default();
    basic_auth::check_hashes(&users)?;
    let http = format.http_server_config.unwrap_or_default();
    let headers = headers::response_headers(http.headers.unwrap_or_default())
        .context("http_server_config.headers")?;
    let rate_limit = match format.rate_limit {
        Some(r) => rate_limit::settings(&r).context("rate_limit")?,
        None => None,
    };
    let mut notes = Vec::new();
    if format
        .tls_server_config
        .as_ref()
        .is_some_and(tls::min_version_raised)
    {
        notes.push(
            "min_version below TLS12 is served as TLS12: TLS 1.0 and 1.1 are not offered".into(),
        );
    }
    Ok(Loaded {
        tls,
        users: users.into_iter().collect(),
        headers,
        rate_limit,
        notes,
    })
}

/// The first line of a parser's message (the rest quotes the input).
fn one_line(message: &str) -> String {
    let first = message.lines().map(str::trim).find(|l| !l.is_empty());
    let first = first.unwrap_or("invalid YAML");
    first.strip_prefix("error: ").unwrap_or(first).to_owned()
}

/// The files `section` names, watched for changes with the file itself.
fn tls_files(section: &TlsSection, dir: &Path) -> Vec<PathBuf> {
    [
        &section.cert_file,
        &section.key_file,
        &section.client_ca_file,
    ]
    .into_iter()
    .flatten()
    .filter(|f| !f.is_empty())
    .map(|f| resolve(dir, f))
    .collect()
}
