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

mod basic_auth;
mod client_certs;
mod file;
mod format;
mod headers;
mod rate_limit;
mod tls;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::{bail, Context, Result};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use prometheus::proto::MetricType;
use prometheus::{IntCounterVec, IntGauge, Opts, Registry};
use tracing::{error, info, warn};

use self::basic_auth::Passwords;
use self::file::{read_file, stamp, FileStamp, Loaded};
use self::rate_limit::TokenBucket;
use crate::exposition::{Family, FamilyList};

const RELOAD_OK: Family = Family {
    name: "slowpath_web_config_last_reload_successful",
    help: "1 when the last reading of --web.config.file (and the certificates it names) \
           succeeded, 0 while it is invalid (the last valid settings stay in force)",
    kind: MetricType::GAUGE,
};

const REJECTED: Family = Family {
    name: "slowpath_http_requests_rejected_total",
    help: "HTTP requests refused by the --web.config.file rules, by reason: unauthorized \
           (401, basic auth missing or wrong), rate_limited (429)",
    kind: MetricType::COUNTER,
};

/// The families of the `--web.config.file` rules, as `slowpath signals`
/// lists them.
pub const FAMILIES: FamilyList = FamilyList {
    defined_in: file!(),
    families: &[&RELOAD_OK, &REJECTED],
};

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
    passwords: Passwords,
    metrics: OnceLock<WebMetrics>,
}

impl WebConfig {
    /// Read and check the file at `path`.
    ///
    /// Errors: one line starting `bad --web.config.file PATH` and naming
    /// the setting at fault (or the file that cannot be read).
    pub fn load(path: &Path) -> Result<Self> {
        let (loaded, files, stamps) =
            read_file(path).with_context(|| format!("bad --web.config.file {}", path.display()))?;
        for note in &loaded.notes {
            warn!(file = %path.display(), "{note}");
        }
        if !loaded.users.is_empty() {
            // Made now (one bcrypt, ~80 ms) rather than at the first unknown
            // user, whose answer would then take visibly longer.
            basic_auth::decoy_hash();
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
            passwords: Passwords::new(),
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
    ///
    /// Errors: the registry already holds them.
    pub fn register_metrics(&self, registry: &Registry) -> prometheus::Result<()> {
        let reload_ok = IntGauge::new(RELOAD_OK.name, RELOAD_OK.help)?;
        reload_ok.set(1); // load() succeeded
        let rejected = IntCounterVec::new(Opts::new(REJECTED.name, REJECTED.help), &["reason"])?;
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
        self.reload(&mut cached);
        if let Some(m) = self.metrics.get() {
            m.reload_ok.set(i64::from(cached.ok));
        }
        cached.good.clone()
    }

    /// Read the files again into `cached`: the new settings when they are
    /// valid, else the old ones kept and the error logged.
    fn reload(&self, cached: &mut Cached) {
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
    }

    /// The TLS acceptor for a new connection, from the settings now in
    /// force; None when the endpoint serves plain HTTP.
    pub fn tls_acceptor(&self) -> Option<tokio_rustls::TlsAcceptor> {
        self.current()
            .tls
            .clone()
            .map(tokio_rustls::TlsAcceptor::from)
    }

    /// Count a request refused for `reason`.
    fn reject(&self, reason: &str) {
        if let Some(m) = self.metrics.get() {
            m.rejected.with_label_values(&[reason]).inc();
        }
    }
}

/// The axum middleware: rate limit, basic auth and headers, from the
/// settings in force for this request.
pub async fn guard(State(web): State<Arc<WebConfig>>, request: Request, next: Next) -> Response {
    let loaded = web.current();
    // What admit() needs, taken out first: a request body is not Sync, so
    // a reference to the request cannot be held across its awaits.
    let path = request.uri().path().to_owned();
    let credentials = basic_auth::basic_credentials(&request);
    let mut response = match admit(&web, &loaded, &path, credentials).await {
        Ok(()) => next.run(request).await,
        Err(refused) => refused,
    };
    headers::apply(&loaded.headers, &mut response);
    response
}

/// Ok when the request may go on, else the response that refuses it.
async fn admit(
    web: &WebConfig,
    loaded: &Loaded,
    path: &str,
    credentials: Option<(String, String)>,
) -> std::result::Result<(), Response> {
    if let Some(limiter) = &web.limiter {
        if !limiter.lock().unwrap_or_else(|p| p.into_inner()).take() {
            web.reject("rate_limited");
            return Err(rate_limit::too_many_requests());
        }
    }
    if loaded.users.is_empty() || basic_auth::exempt(path) {
        return Ok(());
    }
    if let Some((user, pw)) = credentials {
        if web.passwords.check(&loaded.users, &user, &pw).await {
            return Ok(());
        }
    }
    web.reject("unauthorized");
    Err(basic_auth::unauthorized())
}

#[cfg(test)]
mod tests;
