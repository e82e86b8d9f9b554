//! HTTP endpoints: the metrics page, `/healthz` (alive), `/readyz` (probes
//! attached), `/debug/findings` (the agent's findings as JSON) and, with
//! `--debug.callsites`, `/debug/callsites` (folded stacks), served with axum
//! on the listener bound at start, every route behind the web config.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus::proto::MetricType;
use prometheus::{Encoder, Histogram, HistogramOpts, Registry, TextEncoder};
use tracing::{error, info};

use super::connections::{self, Limits};
use super::webconfig::{self, WebConfig};
use crate::bpf::ProbeStatus;
use crate::callsites::harvest::SharedFolded;
use crate::exposition::{Family, FamilyList};
use crate::findings::SharedFindings;

const SCRAPE_SECONDS: Family = Family {
    name: "slowpath_scrape_duration_seconds",
    help: "Time to gather and encode one scrape, in seconds (reads the kernel tables)",
    kind: MetricType::HISTOGRAM,
};

/// The families of the agent's HTTP server itself, as `slowpath signals`
/// lists them.
pub const FAMILIES: FamilyList = FamilyList {
    defined_in: file!(),
    families: &[&SCRAPE_SECONDS],
};

/// How long in-flight scrapes may finish after a shutdown signal.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);

struct AppState {
    registry: Registry,
    scrape_seconds: Histogram,
    /// The last encoding and when it was finished: scrapes that arrive while
    /// one is being made wait for it and share it.
    latest: tokio::sync::Mutex<Option<(Instant, Bytes)>>,
    probes: Vec<ProbeStatus>,
    telemetry_path: String,
    /// Folded call-site stacks, when `--debug.callsites` is on.
    callsites: Option<SharedFolded>,
    /// The findings engine's last page, unless `--findings.window=0`.
    findings: Option<SharedFindings>,
}

impl AppState {
    /// The state of the routes, with `slowpath_scrape_duration_seconds`
    /// registered in `registry`.
    ///
    /// Errors: the registry already holds that histogram.
    fn new(
        telemetry_path: String,
        registry: Registry,
        probes: Vec<ProbeStatus>,
        callsites: Option<SharedFolded>,
        findings: Option<SharedFindings>,
    ) -> Result<Self> {
        let scrape_seconds = Histogram::with_opts(
            HistogramOpts::new(SCRAPE_SECONDS.name, SCRAPE_SECONDS.help).buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
            ]),
        )?;
        registry.register(Box::new(scrape_seconds.clone()))?;
        Ok(Self {
            registry,
            scrape_seconds,
            latest: tokio::sync::Mutex::new(None),
            probes,
            telemetry_path,
            callsites,
            findings,
        })
    }

    /// Gather and encode every family (blocking: reads the kernel tables).
    fn render(&self) -> Result<Vec<u8>> {
        let timer = self.scrape_seconds.start_timer();
        let families = self.registry.gather();
        let mut body = Vec::with_capacity(64 * 1024);
        TextEncoder::new()
            .encode(&families, &mut body)
            .context("encoding metrics")?;
        drop(families);
        release_free_memory();
        timer.observe_duration();
        Ok(body)
    }
}

/// Give the heap's free pages back to the kernel. An encoding of tens of
/// thousands of series builds and frees tens of MiB of small objects;
/// glibc keeps freed memory mapped unless asked (`malloc_trim(3)`), so
/// without this the agent's RSS stays at its largest scrape's peak.
fn release_free_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks and trims glibc's own heap structures.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// What to serve.
pub struct Endpoints {
    /// Where the metrics page is (`--web.telemetry-path`).
    pub telemetry_path: String,
    /// What the metrics page shows; the HTTP side registers its own
    /// families (scrape duration, connections, web config) in it too.
    pub registry: Registry,
    /// Attach results, for `/readyz`.
    pub probes: Vec<ProbeStatus>,
    /// `/debug/callsites` answers 404 without it.
    pub callsites: Option<SharedFolded>,
    /// `/debug/findings` answers 404 without it.
    pub findings: Option<SharedFindings>,
    /// `--web.config.file`: TLS, basic auth, headers, rate limit.
    pub web_config: Option<Arc<WebConfig>>,
    /// Connection cap and timeouts.
    pub limits: Limits,
}

/// Serve until `shutdown` resolves, then give in-flight requests
/// [`SHUTDOWN_GRACE`] to finish.
///
/// Errors: metrics that cannot be registered (names already taken), a
/// listener tokio cannot take, a failure of the connection loop.
pub async fn serve(
    listener: std::net::TcpListener,
    endpoints: Endpoints,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let Endpoints {
        telemetry_path,
        registry,
        probes,
        callsites,
        findings,
        web_config,
        limits,
    } = endpoints;
    let state = AppState::new(
        telemetry_path.clone(),
        registry.clone(),
        probes,
        callsites,
        findings,
    )?;
    let app = guarded(router(Arc::new(state)), web_config.as_ref(), &registry)?;
    let tls = web_config.filter(|w| w.serves_tls());
    let listener = tokio::net::TcpListener::from_std(listener).context("listener")?;
    info!(address = %listener.local_addr()?, path = %telemetry_path,
          scheme = if tls.is_some() { "https" } else { "http" }, "serving metrics");

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        connections::serve(listener, app, tls, limits, &registry, async {
            let _ = stop_rx.await;
        })
        .await
    });
    shutdown.await;
    let _ = stop_tx.send(());
    match tokio::time::timeout(SHUTDOWN_GRACE, server).await {
        Ok(Ok(Ok(()))) | Err(_) => Ok(()),
        Ok(Ok(Err(err))) => Err(err).context("serving HTTP"),
        Ok(Err(join)) => Err(join).context("HTTP server task"),
    }
}

/// The routes.
fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route(&state.telemetry_path, get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/debug/callsites", get(debug_callsites))
        .route("/debug/findings", get(debug_findings))
        .route("/", get(landing))
        .with_state(state)
}

/// `app` behind the web config's rules when there is one, with its metrics
/// registered in `registry`: every route, /debug/callsites included.
fn guarded(
    app: Router,
    web_config: Option<&Arc<WebConfig>>,
    registry: &Registry,
) -> Result<Router> {
    let Some(web) = web_config else {
        return Ok(app);
    };
    web.register_metrics(registry)?;
    info!(web_config = %web.describe(), "web config");
    Ok(app.layer(axum::middleware::from_fn_with_state(
        web.clone(),
        webconfig::guard,
    )))
}

/// The metrics page. Concurrent scrapes cost one encoding: a scrape waits
/// for the one being made when it arrived and is served that (its data is
/// then at most one encoding older than the request); a scrape whose client
/// goes away stops waiting. So a burst of N scrapes costs one table read and
/// one encoding, not N queued behind each other.
async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let arrived = Instant::now();
    let mut latest = state.latest.lock().await;
    if let Some((finished, body)) = latest.as_ref() {
        if *finished >= arrived {
            return text_response(body.clone());
        }
    }
    let rendering = state.clone();
    match tokio::task::spawn_blocking(move || rendering.render()).await {
        Ok(Ok(body)) => {
            let body = Bytes::from(body);
            *latest = Some((Instant::now(), body.clone()));
            text_response(body)
        }
        Ok(Err(err)) => {
            error!(error = %format!("{err:#}"), "scrape failed");
            (StatusCode::INTERNAL_SERVER_ERROR, format!("{err:#}\n")).into_response()
        }
        Err(err) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{err}\n")).into_response(),
    }
}

/// A metrics page answer in the Prometheus text format.
fn text_response(body: Bytes) -> Response {
    ([(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)], body).into_response()
}

/// 200 when every probe is attached; 200 with the list when some are not
/// (the agent still counts what it can); 503 when none is.
async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    let down: Vec<String> = state
        .probes
        .iter()
        .filter(|p| !p.attached())
        .map(|p| format!("{} ({})", p.probe, p.attach_type))
        .collect();
    if down.is_empty() {
        return (StatusCode::OK, "ready\n").into_response();
    }
    let status = if down.len() == state.probes.len() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (
        status,
        format!("degraded: not attached: {}\n", down.join(", ")),
    )
        .into_response()
}

/// Query of `/debug/callsites`.
#[derive(serde::Deserialize)]
struct CallSitesQuery {
    /// One kind of call as the signals name it (`signals::callsite_kinds()`,
    /// e.g. `clock`, `thp_fault`); all when absent.
    kind: Option<String>,
}

/// Folded stacks (`comm;outermost;...;innermost;[kind] samples`, most
/// sampled first), ready for flamegraph.pl or speedscope.
async fn debug_callsites(
    State(state): State<Arc<AppState>>,
    Query(query): Query<CallSitesQuery>,
) -> Response {
    let Some(folded) = &state.callsites else {
        return (
            StatusCode::NOT_FOUND,
            "call-site capture is off: start slowpath with --debug.callsites \
             (SLOWPATH_DEBUG_CALLSITES=true)\n",
        )
            .into_response();
    };
    let folded = folded.lock().unwrap_or_else(|e| e.into_inner());
    let kind = match query.kind.as_deref() {
        None => None,
        Some(name) => match folded.kind_named(name) {
            Some(i) => Some(i),
            None => {
                return (
                    StatusCode::BAD_REQUEST,
                    format!(
                        "unknown kind {name:?}: use one of {}\n",
                        folded.kind_names().join(", ")
                    ),
                )
                    .into_response()
            }
        },
    };
    let body = folded.render(kind);
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

/// The findings of the last evaluation, in the doctor's JSON shape, and
/// the shown ones (`findings::Page`).
async fn debug_findings(State(state): State<Arc<AppState>>) -> Response {
    let Some(findings) = &state.findings else {
        return (
            StatusCode::NOT_FOUND,
            "findings are off: start slowpath with --findings.window above 0\n",
        )
            .into_response();
    };
    let body = findings
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .json
        .clone();
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn landing(State(state): State<Arc<AppState>>) -> Html<String> {
    Html(format!(
        "<html><head><title>slowpath</title></head><body><h1>slowpath</h1>\
         <p><a href=\"{0}\">{0}</a> &middot; <a href=\"/healthz\">/healthz</a> &middot; \
         <a href=\"/readyz\">/readyz</a>{1}{2}</p></body></html>\n",
        state.telemetry_path,
        match state.findings {
            Some(_) => " &middot; <a href=\"/debug/findings\">/debug/findings</a>",
            None => "",
        },
        match state.callsites {
            Some(_) => " &middot; <a href=\"/debug/callsites\">/debug/callsites</a>",
            None => "",
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::callsites::harvest::FoldedStacks;

    use axum::body::Body;
    use axum::http::Request;
    use prometheus::IntCounter;
    use tower::ServiceExt;

    use crate::bpf::AttachType;
    use crate::http::testing::{read_response, send_get};

    fn probe(name: &'static str, attached: bool) -> ProbeStatus {
        ProbeStatus {
            probe: name,
            attach_type: AttachType::RawTp,
            error: (!attached).then(|| "refused".to_string()),
            left_out: None,
        }
    }

    /// The routes over `probes`, with call sites when `callsites`, the
    /// metrics page at /custom/metrics and a test counter at 7.
    fn app(probes: Vec<ProbeStatus>, callsites: bool) -> Router {
        let registry = Registry::new();
        let things = IntCounter::new("test_things_total", "Things counted by the test").unwrap();
        things.inc_by(7);
        registry.register(Box::new(things)).unwrap();
        let folded = callsites.then(|| {
            SharedFolded::new(std::sync::Mutex::new(FoldedStacks::new(
                crate::signals::callsite_kinds(),
            )))
        });
        let state =
            AppState::new("/custom/metrics".into(), registry, probes, folded, None).unwrap();
        router(Arc::new(state))
    }

    /// GET `uri`: (status, content type, body).
    async fn get(app: &Router, uri: &str) -> (StatusCode, String, String) {
        let request = Request::get(uri).body(Body::empty()).unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (
            status,
            content_type,
            String::from_utf8(body.to_vec()).unwrap(),
        )
    }

    #[tokio::test]
    async fn healthz_answers_and_readyz_follows_the_probes() {
        let all = app(vec![probe("clock", true), probe("sleep", true)], false);
        assert_eq!(get(&all, "/healthz").await.2, "ok\n");
        let (status, _, body) = get(&all, "/readyz").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ready\n"));

        let some = app(vec![probe("clock", true), probe("sleep", false)], false);
        let (status, _, body) = get(&some, "/readyz").await;
        assert_eq!(status, StatusCode::OK, "degraded still counts");
        assert_eq!(body, "degraded: not attached: sleep (raw_tp)\n");

        let none = app(vec![probe("clock", false), probe("sleep", false)], false);
        let (status, _, body) = get(&none, "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            body,
            "degraded: not attached: clock (raw_tp), sleep (raw_tp)\n"
        );
        let (status, _, body) = get(&none, "/healthz").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok\n"));
    }

    #[tokio::test]
    async fn callsites_refuse_an_unknown_kind_and_answer_404_when_off() {
        let on = app(vec![], true);
        let (status, _, body) = get(&on, "/debug/callsites?kind=bogus").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(
            body.starts_with("unknown kind \"bogus\": use one of clock, rt_sigprocmask, sleep"),
            "{body}"
        );
        let (status, content_type, body) = get(&on, "/debug/callsites?kind=clock").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(content_type, "text/plain; charset=utf-8");
        assert_eq!(body, "", "nothing sampled yet");

        let off = app(vec![], false);
        let (status, _, body) = get(&off, "/debug/callsites").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(body.starts_with("call-site capture is off"), "{body}");
    }

    #[tokio::test]
    async fn the_telemetry_path_serves_the_registry_and_times_its_scrapes() {
        let app = app(vec![], false);
        let (status, content_type, first) = get(&app, "/custom/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(content_type, prometheus::TEXT_FORMAT);
        assert!(first.contains("\ntest_things_total 7\n"), "{first}");
        // A scrape is timed after it is encoded: the next one shows it.
        assert!(first.contains("\nslowpath_scrape_duration_seconds_count 0\n"));
        let (_, _, second) = get(&app, "/custom/metrics").await;
        assert!(second.contains("\nslowpath_scrape_duration_seconds_count 1\n"));
        assert_eq!(get(&app, "/metrics").await.0, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn the_landing_page_links_callsites_only_when_on() {
        let (_, _, on) = get(&app(vec![], true), "/").await;
        assert!(on.contains("<a href=\"/custom/metrics\">"), "{on}");
        assert!(on.contains("/debug/callsites"), "{on}");
        let (_, _, off) = get(&app(vec![], false), "/").await;
        assert!(!off.contains("/debug/callsites"), "{off}");
    }

    #[tokio::test]
    async fn serve_answers_on_its_listener_until_shutdown() {
        let listener = crate::http::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let registry = Registry::new();
        let endpoints = Endpoints {
            telemetry_path: "/metrics".into(),
            registry: registry.clone(),
            probes: vec![probe("clock", true)],
            callsites: None,
            findings: None,
            web_config: None,
            limits: Limits {
                max_connections: 4,
                read_header_timeout: Duration::from_secs(10),
                idle_timeout: Duration::from_secs(10),
            },
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(serve(listener, endpoints, async {
            let _ = stopped.await;
        }));

        let client = tokio::net::TcpStream::connect(addr).await.unwrap();
        send_get(&client, "/readyz").await;
        assert_eq!(read_response(&client).await, (200, "ready\n".into()));

        stop.send(()).unwrap();
        let ended = tokio::time::timeout(Duration::from_secs(2), serving).await;
        ended
            .expect("serve() returns after shutdown")
            .unwrap()
            .unwrap();
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
        let names: Vec<String> = registry
            .gather()
            .iter()
            .map(|f| f.name().to_owned())
            .collect();
        for name in [
            "slowpath_scrape_duration_seconds",
            "slowpath_http_connections",
            "slowpath_http_connections_closed_total",
        ] {
            assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
        }
    }
}
