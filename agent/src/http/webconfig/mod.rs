//! `--web.config.file`: TLS, client certificates, basic auth, response
//! headers and a rate limit for the HTTP endpoint, in the file format of the
//! Prometheus exporter-toolkit (the one node_exporter, ebpf_exporter and
//! Prometheus read), so one file and one procedure protect them all.
//!
//! Like the toolkit, the file is read at start (a bad file is an error
//! before anything is attached) and again whenever it or a file it names
//! changes: the TLS settings and certificates on each new connection, the
//! users and headers on each request. A rotated certificate is served from
//! the next connection on. Changes are detected by `stat` (device, inode,
//! size, mtime and ctime of every file), so an unchanged file costs four
//! `stat` calls, not a parse. Whether the endpoint speaks TLS at all is
//! decided at start, as in the toolkit: a restart switches between HTTP and
//! HTTPS. A file that becomes invalid later is logged, sets
//! `slowpath_web_config_last_reload_successful` to 0 and leaves the last
//! valid settings in force until it is fixed (as a Prometheus config reload
//! does; the toolkit would refuse every connection instead, which takes a
//! fleet's scrapes down for a typo).
//!
//! Where slowpath differs from the toolkit (it uses rustls, not Go's TLS):
//! - TLS 1.0 and 1.1 do not exist in rustls: a `min_version` below TLS12
//!   is raised to TLS12 (a warning at start); a `max_version` below TLS12 is
//!   an error.
//! - `cipher_suites` takes the Go names; only the TLS 1.2 AEAD suites with
//!   ECDHE exist in rustls (the CBC and static-RSA ones are an error naming
//!   the ones that do); TLS 1.3 suites cannot be restricted, as in Go.
//! - `curve_preferences`: X25519, CurveP256 and CurveP384 (not CurveP521).
//! - `VerifyClientCertIfGiven` and `RequireAndVerifyClientCert` need
//!   `client_ca_file` or `client_ca` (Go would fall back to the system's
//!   roots, which would let any publicly issued certificate in).
//! - Responses are HTTP/1.1; `http2` is accepted and has no effect.
//! - `/healthz` and `/readyz` answer without basic auth (TLS still applies),
//!   so that kubelet and systemd probes need no password; they reveal only
//!   "ok" and which probes are attached.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use axum::extract::{Request, State};
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use prometheus::{IntCounterVec, IntGauge, Opts, Registry};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig};
use serde::Deserialize;
use tokio::sync::Semaphore;
use tracing::{error, info, warn};

/// Paths that answer without basic auth: liveness and readiness probes.
const UNAUTHENTICATED_PATHS: [&str; 2] = ["/healthz", "/readyz"];

/// Headers `http_server_config.headers` may set (the toolkit's list).
const ALLOWED_HEADERS: [&str; 5] = [
    "Content-Security-Policy",
    "X-Frame-Options",
    "X-Content-Type-Options",
    "X-XSS-Protection",
    "Strict-Transport-Security",
];

/// Successful (user, password, hash) checks remembered, so that only the
/// first scrape of a client pays for bcrypt (~50 ms at cost 10).
const AUTH_CACHE_ENTRIES: usize = 256;

/// The file as written. Every key of the toolkit's format is known; an
/// unknown key is an error (the toolkit reads strictly too).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileFormat {
    tls_server_config: Option<TlsSection>,
    http_server_config: Option<HttpSection>,
    basic_auth_users: Option<BTreeMap<String, String>>,
    rate_limit: Option<RateLimitSection>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsSection {
    cert: Option<String>,
    key: Option<String>,
    client_ca: Option<String>,
    cert_file: Option<String>,
    key_file: Option<String>,
    client_auth_type: Option<String>,
    client_ca_file: Option<String>,
    client_allowed_sans: Option<Vec<String>>,
    min_version: Option<String>,
    max_version: Option<String>,
    cipher_suites: Option<Vec<String>>,
    prefer_server_cipher_suites: Option<bool>,
    curve_preferences: Option<Vec<String>>,
}

impl TlsSection {
    /// The toolkit serves TLS when any of these is set.
    fn enabled(&self) -> bool {
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

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpSection {
    /// Accepted for compatibility; responses are HTTP/1.1.
    #[allow(dead_code)]
    http2: Option<bool>,
    headers: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RateLimitSection {
    /// A Go duration ("100ms", "1s"); 0 turns the limiter off.
    interval: Option<String>,
    burst: Option<u32>,
}

/// What one reading of the file gives.
pub struct Loaded {
    /// The TLS settings, when `tls_server_config` is set.
    tls: Option<Arc<ServerConfig>>,
    /// User name → bcrypt hash; empty: no basic auth.
    users: HashMap<String, String>,
    /// Added to every response.
    headers: Vec<(HeaderName, HeaderValue)>,
    /// Requests per interval and burst (read at start only).
    rate_limit: Option<(Duration, u32)>,
    /// Settings served differently from how they are written, logged.
    notes: Vec<String>,
}

/// Identity and version of a file: (device, inode, size, mtime ns, ctime
/// ns), or None when it cannot be stat'ed.
type FileStamp = Option<(u64, u64, u64, i128, i128)>;

fn stamp(path: &Path) -> FileStamp {
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

/// The settings in force and the stamps of the files last read.
struct Cached {
    files: Vec<PathBuf>,
    stamps: Vec<FileStamp>,
    /// The last valid reading.
    good: Arc<Loaded>,
    /// Whether the files as they are now gave `good`.
    ok: bool,
}

/// Metrics of the web configuration and of the requests it rejects.
#[derive(Clone)]
struct WebMetrics {
    reload_ok: IntGauge,
    rejected: IntCounterVec,
}

/// The `--web.config.file` in force: read at start, re-read when it or a
/// file it names changes.
pub struct WebConfig {
    path: PathBuf,
    /// Whether the endpoint speaks TLS (decided at start).
    tls: bool,
    cached: Mutex<Cached>,
    limiter: Option<Mutex<TokenBucket>>,
    auth_cache: Mutex<HashSet<[u8; 32]>>,
    /// One bcrypt computation at a time: wrong passwords cannot take more
    /// than one CPU, and never the async runtime's thread.
    bcrypt_slot: Semaphore,
    metrics: OnceLock<WebMetrics>,
}

impl WebConfig {
    /// Read and check the file: any error names the file and the setting.
    pub fn load(path: &Path) -> Result<Self> {
        let (loaded, files, stamps) =
            read_file(path).with_context(|| format!("bad --web.config.file {}", path.display()))?;
        for note in &loaded.notes {
            warn!(file = %path.display(), "{note}");
        }
        if !loaded.users.is_empty() {
            // Made now (one bcrypt, ~80 ms) rather than at the first unknown
            // user, whose answer would then take visibly longer.
            decoy_hash();
        }
        let limiter = loaded
            .rate_limit
            .map(|(interval, burst)| Mutex::new(TokenBucket::new(interval, burst)));
        Ok(Self {
            path: path.to_path_buf(),
            tls: loaded.tls.is_some(),
            cached: Mutex::new(Cached {
                files,
                stamps,
                good: Arc::new(loaded),
                ok: true,
            }),
            limiter,
            auth_cache: Mutex::new(HashSet::new()),
            bcrypt_slot: Semaphore::new(1),
            metrics: OnceLock::new(),
        })
    }

    /// Whether the endpoint serves HTTPS.
    pub fn serves_tls(&self) -> bool {
        self.tls
    }

    /// One line for the start-up log.
    pub fn describe(&self) -> String {
        let users = self.current().users.len();
        format!(
            "{}: {}, basic auth {}, rate limit {}",
            self.path.display(),
            if self.tls { "TLS" } else { "plain HTTP" },
            if users > 0 {
                format!("on ({users} users)")
            } else {
                "off".into()
            },
            if self.limiter.is_some() { "on" } else { "off" },
        )
    }

    /// Register `slowpath_web_config_last_reload_successful` and
    /// `slowpath_http_requests_rejected_total`.
    pub fn register_metrics(&self, registry: &Registry) -> prometheus::Result<()> {
        let reload_ok = IntGauge::new(
            "slowpath_web_config_last_reload_successful",
            "1 when the last reading of --web.config.file (and the certificates it names) \
             succeeded, 0 while it is invalid (the last valid settings stay in force)",
        )?;
        reload_ok.set(1); // load() succeeded
        let rejected = IntCounterVec::new(
            Opts::new(
                "slowpath_http_requests_rejected_total",
                "HTTP requests refused by the --web.config.file rules, by reason: unauthorized \
                 (401, basic auth missing or wrong), rate_limited (429)",
            ),
            &["reason"],
        )?;
        for reason in ["unauthorized", "rate_limited"] {
            rejected.with_label_values(&[reason]);
        }
        registry.register(Box::new(reload_ok.clone()))?;
        registry.register(Box::new(rejected.clone()))?;
        let _ = self.metrics.set(WebMetrics {
            reload_ok,
            rejected,
        });
        Ok(())
    }

    /// The settings now in force, re-read if a file changed since the last
    /// reading. A change that makes the file invalid is logged once, sets
    /// `slowpath_web_config_last_reload_successful` to 0 and keeps the last
    /// valid settings (as a Prometheus config reload does): a typo in a
    /// rotated file must not take a fleet's scrapes down.
    pub fn current(&self) -> Arc<Loaded> {
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        let stamps: Vec<FileStamp> = cached.files.iter().map(|f| stamp(f)).collect();
        if stamps == cached.stamps {
            return cached.good.clone();
        }
        let result = read_file(&self.path).and_then(|(loaded, files, stamps)| {
            // Read again whenever any of them changes, valid or not.
            cached.files = files;
            cached.stamps = stamps;
            if loaded.tls.is_some() != self.tls {
                bail!(
                    "tls_server_config was turned {} after start: restart slowpath to serve {}",
                    if self.tls { "off" } else { "on" },
                    if self.tls { "plain HTTP" } else { "HTTPS" }
                );
            }
            Ok(loaded)
        });
        match result {
            Ok(loaded) => {
                info!(file = %self.path.display(), "web config reloaded");
                for note in &loaded.notes {
                    warn!(file = %self.path.display(), "{note}");
                }
                cached.good = Arc::new(loaded);
                cached.ok = true;
            }
            Err(err) => {
                // Not again until one of the files changes (the fix).
                cached.stamps = cached.files.iter().map(|f| stamp(f)).collect();
                error!(file = %self.path.display(), error = %format!("{err:#}"),
                       "web config invalid: keeping the settings read last");
                cached.ok = false;
            }
        }
        if let Some(m) = self.metrics.get() {
            m.reload_ok.set(i64::from(cached.ok));
        }
        cached.good.clone()
    }

    /// The TLS acceptor for a new connection, from the settings now in force.
    pub fn tls_acceptor(&self) -> Option<tokio_rustls::TlsAcceptor> {
        self.current()
            .tls
            .clone()
            .map(tokio_rustls::TlsAcceptor::from)
    }

    fn reject(&self, reason: &str) {
        if let Some(m) = self.metrics.get() {
            m.rejected.with_label_values(&[reason]).inc();
        }
    }

    /// Whether `user`:`password` is one of the users. Successes are
    /// remembered by a SHA-256 of user, hash and password (never the
    /// password itself); an unknown user costs a bcrypt too, so that timing
    /// does not tell which users exist.
    async fn check_password(&self, users: &HashMap<String, String>, user: &str, pw: &str) -> bool {
        let hash = users.get(user).cloned();
        let key = {
            let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
            for part in [user, hash.as_deref().unwrap_or(""), pw] {
                ctx.update(&(part.len() as u64).to_le_bytes());
                ctx.update(part.as_bytes());
            }
            let mut key = [0u8; 32];
            key.copy_from_slice(ctx.finish().as_ref());
            key
        };
        if hash.is_some() && self.auth_cache_contains(&key) {
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
            let mut cache = self.auth_cache.lock().unwrap_or_else(|p| p.into_inner());
            if cache.len() >= AUTH_CACHE_ENTRIES {
                cache.clear();
            }
            cache.insert(key);
        }
        ok && known
    }

    fn auth_cache_contains(&self, key: &[u8; 32]) -> bool {
        self.auth_cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(key)
    }
}

/// A bcrypt hash of nothing anyone knows, checked for unknown users.
fn decoy_hash() -> &'static str {
    static DECOY: OnceLock<String> = OnceLock::new();
    DECOY.get_or_init(|| {
        let mut secret = [0u8; 16];
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret);
        bcrypt::hash(secret, bcrypt::DEFAULT_COST).unwrap_or_default()
    })
}

/// The axum middleware: rate limit, basic auth and headers, from the
/// settings in force for this request.
pub async fn guard(State(web): State<Arc<WebConfig>>, request: Request, next: Next) -> Response {
    let loaded = web.current();
    // What admit() needs, taken out first: a request body is not Sync, so
    // a reference to the request cannot be held across its awaits.
    let path = request.uri().path().to_owned();
    let credentials = basic_credentials(&request);
    let mut response = match admit(&web, &loaded, &path, credentials).await {
        Ok(()) => next.run(request).await,
        Err(refused) => refused,
    };
    for (name, value) in &loaded.headers {
        response.headers_mut().insert(name.clone(), value.clone());
    }
    response
}

/// None when the request may go on, else the response that refuses it.
async fn admit(
    web: &WebConfig,
    loaded: &Loaded,
    path: &str,
    credentials: Option<(String, String)>,
) -> std::result::Result<(), Response> {
    if let Some(limiter) = &web.limiter {
        if !limiter.lock().unwrap_or_else(|p| p.into_inner()).take() {
            web.reject("rate_limited");
            return Err((StatusCode::TOO_MANY_REQUESTS, "Too Many Requests\n").into_response());
        }
    }
    if loaded.users.is_empty() || UNAUTHENTICATED_PATHS.contains(&path) {
        return Ok(());
    }
    if let Some((user, pw)) = credentials {
        if web.check_password(&loaded.users, &user, &pw).await {
            return Ok(());
        }
    }
    web.reject("unauthorized");
    Err((
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Basic")],
        "Unauthorized\n",
    )
        .into_response())
}

/// The user and password of an `Authorization: Basic` header.
fn basic_credentials(request: &Request) -> Option<(String, String)> {
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

/// A token bucket: `burst` requests at once, one more every `interval`.
struct TokenBucket {
    interval: Duration,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    fn new(interval: Duration, burst: u32) -> Self {
        Self {
            interval,
            burst: f64::from(burst),
            tokens: f64::from(burst),
            last: Instant::now(),
        }
    }

    fn take(&mut self) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.last).as_secs_f64() / self.interval.as_secs_f64();
        self.tokens = (self.tokens + refill).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Read the file and everything it names; also returns the files read and
/// their stamps (taken before reading them).
fn read_file(path: &Path) -> Result<(Loaded, Vec<PathBuf>, Vec<FileStamp>)> {
    let mut files = vec![path.to_path_buf()];
    let mut stamps = vec![stamp(path)];
    let text = fs::read_to_string(path).context("cannot read it")?;
    let format: FileFormat = if text.trim().is_empty() {
        FileFormat::default()
    } else {
        serde_saphyr::from_str(&text).map_err(|e| anyhow!("{}", one_line(&e.to_string())))?
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let tls = match format.tls_server_config.as_ref().filter(|t| t.enabled()) {
        Some(section) => {
            let named = tls_files(section, dir);
            for f in &named {
                stamps.push(stamp(f));
            }
            files.extend(named);
            Some(Arc::new(
                build_tls(section, dir).context("tls_server_config")?,
            ))
        }
        None => None,
    };
    let users = format.basic_auth_users.unwrap_or_default();
    for (user, hash) in &users {
        hash.parse::<bcrypt::HashParts>().map_err(|e| {
            anyhow!("basic_auth_users: the password of {user:?} is not a bcrypt hash ({e}): make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`")
        })?;
    }
    let http = format.http_server_config.unwrap_or_default();
    let headers =
        response_headers(http.headers.unwrap_or_default()).context("http_server_config.headers")?;
    let rate_limit = match format.rate_limit {
        Some(r) => rate_limit(&r).context("rate_limit")?,
        None => None,
    };
    let mut notes = Vec::new();
    if format
        .tls_server_config
        .as_ref()
        .is_some_and(min_version_raised)
    {
        notes.push(
            "min_version below TLS12 is served as TLS12: TLS 1.0 and 1.1 are not offered".into(),
        );
    }
    let loaded = Loaded {
        tls,
        users: users.into_iter().collect(),
        headers,
        rate_limit,
        notes,
    };
    Ok((loaded, files, stamps))
}

/// The first line of a parser's message (the rest quotes the input).
fn one_line(message: &str) -> String {
    let first = message.lines().map(str::trim).find(|l| !l.is_empty());
    let first = first.unwrap_or("invalid YAML");
    first.strip_prefix("error: ").unwrap_or(first).to_owned()
}

/// Relative paths are relative to the config file's directory.
fn resolve(dir: &Path, file: &str) -> PathBuf {
    let p = Path::new(file);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    }
}

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

/// PEM text from the inline setting or the file setting.
fn pem_source(
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

/// The rustls settings of a `tls_server_config`.
fn build_tls(section: &TlsSection, dir: &Path) -> Result<ServerConfig> {
    let cert_pem = pem_source(&section.cert, &section.cert_file, dir, "cert", "cert_file")?
        .ok_or_else(|| anyhow!("missing one of cert or cert_file"))?;
    let key_pem = pem_source(&section.key, &section.key_file, dir, "key", "key_file")?
        .ok_or_else(|| anyhow!("missing one of key or key_file"))?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<std::result::Result<_, _>>()
        .context("the certificate is not valid PEM")?;
    if certs.is_empty() {
        bail!("the certificate file holds no CERTIFICATE block");
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| anyhow!("the key is not a PEM private key (PKCS#8, PKCS#1 or SEC1): {e}"))?;

    let mut provider = rustls::crypto::ring::default_provider();
    if let Some(names) = &section.cipher_suites {
        provider.cipher_suites = cipher_suites(&provider, names)?;
    }
    if let Some(names) = &section.curve_preferences {
        provider.kx_groups = kx_groups(&provider, names)?;
    }
    let provider = Arc::new(provider);
    let versions = protocol_versions(
        section.min_version.as_deref(),
        section.max_version.as_deref(),
    )?;
    let verifier = client_verifier(section, dir, &provider)?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .context("TLS versions")?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| anyhow!("certificate and key: {e}"))?;
    config.ignore_client_order = section.prefer_server_cipher_suites.unwrap_or(true);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// TLS 1.2 suites by their Go names (those rustls has), in the order given.
fn cipher_suites(
    provider: &CryptoProvider,
    names: &[String],
) -> Result<Vec<rustls::SupportedCipherSuite>> {
    // Go's names of the TLS 1.3 suites: accepted, and (as in Go) no effect.
    const TLS13_GO_NAMES: [&str; 3] = [
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
    ];
    let tls12 = |s: &&rustls::SupportedCipherSuite| s.version() == &rustls::version::TLS12;
    let mut chosen: Vec<rustls::SupportedCipherSuite> = Vec::new();
    for name in names {
        if TLS13_GO_NAMES.contains(&name.as_str()) {
            continue;
        }
        let suite = provider
            .cipher_suites
            .iter()
            .filter(tls12)
            .find(|s| s.suite().as_str() == Some(name.as_str()))
            .ok_or_else(|| {
                let known: Vec<&str> = provider
                    .cipher_suites
                    .iter()
                    .filter(tls12)
                    .filter_map(|s| s.suite().as_str())
                    .collect();
                anyhow!(
                    "cipher suite {name:?} is unknown or not offered (TLS 1.2 suites: {})",
                    known.join(", ")
                )
            })?;
        chosen.push(*suite);
    }
    // Every TLS 1.3 suite stays on: the cipher list never restricts TLS 1.3.
    chosen.extend(
        provider
            .cipher_suites
            .iter()
            .filter(|s| s.version() == &rustls::version::TLS13),
    );
    Ok(chosen)
}

/// Key exchange groups by the toolkit's curve names.
fn kx_groups(
    provider: &CryptoProvider,
    names: &[String],
) -> Result<Vec<&'static dyn rustls::crypto::SupportedKxGroup>> {
    names
        .iter()
        .map(|name| {
            let group = match name.as_str() {
                "X25519" => rustls::NamedGroup::X25519,
                "CurveP256" => rustls::NamedGroup::secp256r1,
                "CurveP384" => rustls::NamedGroup::secp384r1,
                other => bail!(
                    "curve {other:?} is unknown or not offered (X25519, CurveP256, CurveP384)"
                ),
            };
            provider
                .kx_groups
                .iter()
                .find(|g| g.name() == group)
                .copied()
                .ok_or_else(|| anyhow!("curve {name:?} is not offered"))
        })
        .collect()
}

/// The protocol versions from `min_version` and `max_version` (TLS12 and
/// TLS13 by default).
fn protocol_versions(
    min: Option<&str>,
    max: Option<&str>,
) -> Result<Vec<&'static rustls::SupportedProtocolVersion>> {
    let rank = |v: &str, key: &str| -> Result<u8> {
        match v {
            "TLS10" => Ok(10),
            "TLS11" => Ok(11),
            "TLS12" => Ok(12),
            "TLS13" => Ok(13),
            other => bail!("{key} {other:?}: use TLS10, TLS11, TLS12 or TLS13"),
        }
    };
    let min = rank(min.unwrap_or("TLS12"), "min_version")?;
    let max = rank(max.unwrap_or("TLS13"), "max_version")?;
    if max < 12 {
        bail!("max_version below TLS12: slowpath's TLS library offers only TLS 1.2 and 1.3");
    }
    if min > max {
        bail!("min_version is above max_version");
    }
    let mut versions = Vec::new();
    if min <= 12 {
        versions.push(&rustls::version::TLS12);
    }
    versions.push(&rustls::version::TLS13);
    if max == 12 {
        versions.retain(|v| v.version == rustls::ProtocolVersion::TLSv1_2);
    }
    Ok(versions)
}

/// Whether `min_version` asks for TLS 1.0 or 1.1 (served as TLS 1.2).
fn min_version_raised(section: &TlsSection) -> bool {
    matches!(section.min_version.as_deref(), Some("TLS10" | "TLS11"))
}

/// The client certificate policy of `client_auth_type`.
fn client_verifier(
    section: &TlsSection,
    dir: &Path,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>> {
    let ca_pem = pem_source(
        &section.client_ca,
        &section.client_ca_file,
        dir,
        "client_ca",
        "client_ca_file",
    )?;
    let auth = section
        .client_auth_type
        .as_deref()
        .unwrap_or("NoClientCert");
    let roots = || -> Result<Arc<RootCertStore>> {
        let pem = ca_pem.as_ref().ok_or_else(|| {
            anyhow!("client_auth_type {auth} needs client_ca_file (or client_ca): the CA that signs the clients' certificates")
        })?;
        let mut store = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.context("client CA is not valid PEM")?;
            store
                .add(cert)
                .map_err(|e| anyhow!("client CA certificate: {e}"))?;
        }
        if store.is_empty() {
            bail!("the client CA holds no CERTIFICATE block");
        }
        Ok(Arc::new(store))
    };
    let webpki = |store, optional: bool| -> Result<Arc<dyn ClientCertVerifier>> {
        let builder = WebPkiClientVerifier::builder_with_provider(store, provider.clone());
        let builder = if optional {
            builder.allow_unauthenticated()
        } else {
            builder
        };
        builder.build().map_err(|e| anyhow!("client CA: {e}"))
    };
    let any = |mandatory| -> Arc<dyn ClientCertVerifier> {
        Arc::new(AnyClientCert {
            mandatory,
            algorithms: provider.signature_verification_algorithms,
        })
    };
    let verifier: Arc<dyn ClientCertVerifier> = match auth {
        "" | "NoClientCert" => {
            if ca_pem.is_some() {
                bail!("client CAs are set without a client_auth_type: use RequireAndVerifyClientCert");
            }
            WebPkiClientVerifier::no_client_auth()
        }
        "RequestClientCert" => any(false),
        "RequireAnyClientCert" | "RequireClientCert" => any(true),
        "VerifyClientCertIfGiven" => webpki(roots()?, true)?,
        "RequireAndVerifyClientCert" => webpki(roots()?, false)?,
        other => bail!(
            "client_auth_type {other:?}: use NoClientCert, RequestClientCert, RequireAnyClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert"
        ),
    };
    match &section.client_allowed_sans {
        None => Ok(verifier),
        Some(sans) => {
            if !matches!(
                auth,
                "RequireAnyClientCert" | "RequireClientCert" | "RequireAndVerifyClientCert"
            ) {
                bail!("client_allowed_sans needs client_auth_type RequireAnyClientCert or RequireAndVerifyClientCert");
            }
            Ok(Arc::new(AllowedSans {
                inner: verifier,
                sans: sans.clone(),
            }))
        }
    }
}

/// `RequestClientCert` and `RequireAnyClientCert`: a certificate is asked
/// for (or required) but not checked against any CA; the handshake
/// signature is still verified (the client holds the key).
#[derive(Debug)]
struct AnyClientCert {
    mandatory: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyClientCert {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// `client_allowed_sans`: after the policy's own checks, the client's
/// certificate must carry one of these subject alternative names (DNS,
/// e-mail, IP address or URI, compared exactly, as the toolkit does).
#[derive(Debug)]
struct AllowedSans {
    inner: Arc<dyn ClientCertVerifier>,
    sans: Vec<String>,
}

impl ClientCertVerifier for AllowedSans {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let found = cert_sans(end_entity);
        if found.iter().any(|san| self.sans.contains(san)) {
            Ok(verified)
        } else {
            Err(rustls::Error::General(format!(
                "client certificate has none of client_allowed_sans (it has {found:?})"
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The subject alternative names of a DER certificate, as strings.
fn cert_sans(der: &[u8]) -> Vec<String> {
    use x509_parser::extensions::GeneralName;
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return Vec::new();
    };
    let Ok(Some(ext)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    ext.value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::DNSName(s) | GeneralName::RFC822Name(s) | GeneralName::URI(s) => {
                Some((*s).to_owned())
            }
            GeneralName::IPAddress(bytes) => match bytes.len() {
                4 => Some(std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*bytes).ok()?).to_string()),
                16 => {
                    Some(std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*bytes).ok()?).to_string())
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// `http_server_config.headers`, checked as the toolkit checks them.
fn response_headers(headers: BTreeMap<String, String>) -> Result<Vec<(HeaderName, HeaderValue)>> {
    let mut out = Vec::new();
    for (name, value) in headers {
        let Some(known) = ALLOWED_HEADERS
            .iter()
            .find(|h| h.eq_ignore_ascii_case(&name))
        else {
            bail!(
                "header {name:?} cannot be set: use {}",
                ALLOWED_HEADERS.join(", ")
            );
        };
        if value.is_empty() {
            continue;
        }
        let lower = value.to_ascii_lowercase();
        if *known == "X-Frame-Options" && !matches!(lower.as_str(), "deny" | "sameorigin") {
            bail!("X-Frame-Options {value:?}: use deny or sameorigin");
        }
        if *known == "X-Content-Type-Options" && lower != "nosniff" {
            bail!("X-Content-Type-Options {value:?}: use nosniff");
        }
        let value = HeaderValue::from_str(&value)
            .map_err(|_| anyhow!("{known}: {value:?} is not a valid header value"))?;
        out.push((HeaderName::from_static(static_lower(known)), value));
    }
    Ok(out)
}

fn static_lower(name: &str) -> &'static str {
    match name {
        "Content-Security-Policy" => "content-security-policy",
        "X-Frame-Options" => "x-frame-options",
        "X-Content-Type-Options" => "x-content-type-options",
        "X-XSS-Protection" => "x-xss-protection",
        _ => "strict-transport-security",
    }
}

/// `rate_limit`: (interval, burst), or None when the interval is 0.
fn rate_limit(section: &RateLimitSection) -> Result<Option<(Duration, u32)>> {
    let interval = match section.interval.as_deref().map(str::trim) {
        None | Some("0") | Some("") => return Ok(None),
        Some(text) => humantime::parse_duration(text)
            .map_err(|e| anyhow!("interval {text:?}: {e} (e.g. 100ms or 1s)"))?,
    };
    if interval.is_zero() {
        return Ok(None);
    }
    match section.burst {
        Some(burst) if burst > 0 => Ok(Some((interval, burst))),
        _ => bail!("burst must be at least 1 when interval is set"),
    }
}

#[cfg(test)]
mod tests;
