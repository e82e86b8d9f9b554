//! The HTTP connections of the metrics endpoint and their limits: an accept
//! loop serving HTTP/1.1 with hyper, a header read timeout (a slowloris
//! client is closed), an idle timeout between requests, and a cap on open
//! connections well under the file limit, so that idle or hostile clients
//! can never take the descriptors the BPF side and real scrapes need.
//!
//! At the cap, a new connection closes the open connection that has been
//! idle longest (no request in flight); when every connection has a request
//! in flight, the new one is refused. Prometheus's scrape connections are
//! busy or briefly idle, so they are the last to go. Each close is counted
//! in `slowpath_http_connections_closed_total{reason}` and the limit being
//! hit is logged (at most once per [`LOG_EVERY`]).

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use prometheus::proto::MetricType;
use prometheus::{IntCounterVec, IntGauge, Opts, Registry};

use crate::exposition::{Family, FamilyList};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt;
use tracing::{debug, warn};

use super::webconfig::WebConfig;

mod table;
mod watched;

use table::{ms_since, Conn, Table, NO_PARTIAL};
use watched::{wait_deadline, Watched};

/// Warnings about a limit being hit are logged at most this often.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Most bytes of a request head (request line and headers) a connection may
/// buffer; a larger one gets 431. 64 KiB is far above any scrape's, and
/// keeps --web.max-connections slowloris clients at 512 x 64 KiB = 32 MiB,
/// under the unit's and chart's memory limits (hyper's default is ~400 KiB).
const MAX_REQUEST_HEAD_BYTES: usize = 64 * 1024;

/// The limits, from the `--web.*` flags.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Most open connections (further capped by the file limit).
    pub max_connections: usize,
    /// A client must send a whole request header within this time.
    pub read_header_timeout: Duration,
    /// A connection with no request in flight is closed after this time.
    pub idle_timeout: Duration,
}

/// Counters of the connections, registered in the agent's registry.
const OPEN: Family = Family {
    name: "slowpath_http_connections",
    help: "Open HTTP connections to the agent's endpoint",
    kind: MetricType::GAUGE,
};

const CLOSED: Family = Family {
    name: "slowpath_http_connections_closed_total",
    help: "HTTP connections the agent closed itself, by reason: read_header_timeout (no whole \
           request header in time), idle_timeout, evicted (the longest-idle one, to admit a \
           new connection at --web.max-connections), refused (at the cap with every \
           connection busy), tls_handshake_error (a failed TLS handshake: no or an untrusted \
           client certificate, a client that does not speak TLS)",
    kind: MetricType::COUNTER,
};

/// The families of the agent's HTTP connections, as `slowpath signals`
/// lists them.
pub const FAMILIES: FamilyList = FamilyList {
    defined_in: file!(),
    families: &[&OPEN, &CLOSED],
};

#[derive(Clone)]
struct Metrics {
    open: IntGauge,
    closed: IntCounterVec,
}

impl Metrics {
    /// Create and register `slowpath_http_connections` and
    /// `slowpath_http_connections_closed_total` (every reason at 0).
    ///
    /// Errors: the registry already holds them.
    fn register(registry: &Registry) -> prometheus::Result<Self> {
        let open = IntGauge::new(OPEN.name, OPEN.help)?;
        let closed = IntCounterVec::new(Opts::new(CLOSED.name, CLOSED.help), &["reason"])?;
        for reason in [
            "read_header_timeout",
            "idle_timeout",
            "evicted",
            "refused",
            "tls_handshake_error",
        ] {
            closed.with_label_values(&[reason]);
        }
        registry.register(Box::new(open.clone()))?;
        registry.register(Box::new(closed.clone()))?;
        Ok(Self { open, closed })
    }
}

/// Logs a limit being hit, at most once per [`LOG_EVERY`].
struct RateLimitedLog(Mutex<Option<Instant>>);

impl RateLimitedLog {
    fn new() -> Self {
        Self(Mutex::new(None))
    }

    /// Whether to log now (then not again for [`LOG_EVERY`]).
    fn due(&self) -> bool {
        let mut last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let due = last.is_none_or(|t| t.elapsed() >= LOG_EVERY);
        if due {
            *last = Some(Instant::now());
        }
        due
    }
}

/// What every connection's task shares.
#[derive(Clone)]
struct Shared {
    table: Arc<Table>,
    metrics: Metrics,
    app: Router,
    /// The web config when the endpoint speaks TLS.
    tls: Option<Arc<WebConfig>>,
    limits: Limits,
}

/// Accept and serve connections on `listener` with `app` (over TLS with
/// `tls`'s settings when given) until `stop` resolves; then stop accepting
/// and let open requests finish on their own (the caller bounds how long
/// it waits).
///
/// Errors: the connection metrics cannot be registered in `registry`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<Arc<WebConfig>>,
    limits: Limits,
    registry: &Registry,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let shared = Shared {
        table: Arc::new(Table::new()),
        metrics: Metrics::register(registry)?,
        app,
        tls,
        limits,
    };
    accept_until(&listener, &shared, stop).await;
    // Stopped accepting: wait for the requests in flight (not for idle
    // keep-alive connections); the caller bounds the wait.
    drop(listener);
    while shared.table.busy() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// The accept loop: each connection admitted gets a task, until `stop`.
async fn accept_until(listener: &TcpListener, shared: &Shared, stop: impl Future<Output = ()>) {
    let at_cap_log = RateLimitedLog::new();
    let accept_error_log = RateLimitedLog::new();
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(err) => {
                // EMFILE/ENFILE: out of descriptors despite the cap (other
                // parts of the agent): wait for some to be closed.
                if accept_error_log.due() {
                    warn!(error = %err, "cannot accept HTTP connections; retrying");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let max = shared.limits.max_connections;
        if !admit(&shared.table, &shared.metrics, max, &at_cap_log) {
            drop(stream);
            continue;
        }
        let (id, conn) = shared.table.insert();
        shared.metrics.open.inc();
        tokio::spawn(run_connection(stream, id, conn, shared.clone()));
    }
}

/// One connection's task: the TLS handshake when the endpoint speaks TLS,
/// then HTTP until the connection ends; its table entry goes with it.
async fn run_connection(stream: TcpStream, id: u64, conn: Arc<Conn>, shared: Shared) {
    match &shared.tls {
        None => serve_connection(stream, conn, &shared).await,
        Some(web) => {
            let limits = shared.limits;
            if let Some(tls_stream) = handshake(stream, web, &conn, limits, &shared.metrics).await {
                serve_connection(tls_stream, conn, &shared).await
            }
        }
    }
    shared.table.remove(id);
    shared.metrics.open.dec();
}

/// Make room for one more connection: true when there is room (after
/// closing the longest-idle one if the table is full).
fn admit(table: &Table, metrics: &Metrics, max: usize, log: &RateLimitedLog) -> bool {
    if table.len() < max {
        return true;
    }
    match table.longest_idle() {
        Some(idle) => {
            // Evicted now: the connection's task drops it, and the table
            // entry goes with the task.
            idle.evicted.store(true, Ordering::Release);
            idle.close.notify_one();
            metrics.closed.with_label_values(&["evicted"]).inc();
            if log.due() {
                warn!(
                    max_connections = max,
                    "HTTP connection limit reached: closing the longest-idle connection \
                     (--web.max-connections)"
                );
            }
            true
        }
        None => {
            metrics.closed.with_label_values(&["refused"]).inc();
            if log.due() {
                warn!(
                    max_connections = max,
                    "HTTP connection limit reached with every connection busy: refusing new ones \
                     (--web.max-connections)"
                );
            }
            false
        }
    }
}

/// The TLS handshake of a new connection, with the settings in force now
/// and within the read header timeout; None when it fails (counted as
/// `tls_handshake_error`), times out or the connection is evicted meanwhile.
async fn handshake(
    stream: TcpStream,
    web: &WebConfig,
    conn: &Conn,
    limits: Limits,
    metrics: &Metrics,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    // Always Some: TLS cannot be turned off without a restart.
    let acceptor = web.tls_acceptor()?;
    tokio::select! {
        result = tokio::time::timeout(limits.read_header_timeout, acceptor.accept(stream)) => {
            match result {
                Ok(Ok(stream)) => Some(stream),
                Ok(Err(err)) => {
                    debug!(error = %err, "TLS handshake failed");
                    metrics.closed.with_label_values(&["tls_handshake_error"]).inc();
                    None
                }
                Err(_) => {
                    metrics.closed.with_label_values(&["read_header_timeout"]).inc();
                    None
                }
            }
        }
        _ = conn.close.notified() => None, // evicted
    }
}

/// Serve one connection until the client closes it, a timeout closes it,
/// or it is evicted.
async fn serve_connection<S>(stream: S, conn: Arc<Conn>, shared: &Shared)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let epoch = shared.table.epoch;
    let service = {
        let (app, conn) = (shared.app.clone(), conn.clone());
        tower::service_fn(move |req| tracked(app.clone(), conn.clone(), epoch, req))
    };
    let io = Watched {
        stream,
        conn: conn.clone(),
        epoch,
    };
    let connection = http1().serve_connection(TokioIo::new(io), TowerToHyperService::new(service));
    tokio::pin!(connection);
    loop {
        let Some(wait) = time_left(&conn, &shared.limits, epoch, &shared.metrics) else {
            return;
        };
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(err) = result {
                    debug!(error = %err, "HTTP connection ended");
                }
                return;
            }
            _ = conn.close.notified() => return, // evicted
            _ = conn.changed.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// hyper's HTTP/1.1 settings for every connection.
fn http1() -> hyper::server::conn::http1::Builder {
    // hyper's own header read timeout would also run while a keep-alive
    // connection waits for its next request; ours (wait_deadline) tells
    // the two apart.
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .max_buf_size(MAX_REQUEST_HEAD_BYTES)
        .keep_alive(true);
    builder
}

/// Serve one request with `app`, keeping `conn`'s bookkeeping: in flight
/// while it is served (never evicted, no timeout), then active as of its end.
async fn tracked(
    app: Router,
    conn: Arc<Conn>,
    epoch: Instant,
    req: Request<hyper::body::Incoming>,
) -> Result<axum::response::Response, Infallible> {
    conn.in_flight.fetch_add(1, Ordering::AcqRel);
    conn.partial_since_ms.store(NO_PARTIAL, Ordering::Release);
    let response = app.oneshot(req.map(axum::body::Body::new)).await;
    conn.last_active_ms
        .store(ms_since(epoch), Ordering::Relaxed);
    conn.in_flight.fetch_sub(1, Ordering::AcqRel);
    conn.changed.notify_one();
    Ok(response.unwrap_or_else(|never| match never {}))
}

/// How long the connection may wait now before its deadline is checked
/// again; None when the deadline has passed (the close is counted under
/// its reason).
fn time_left(conn: &Conn, limits: &Limits, epoch: Instant, metrics: &Metrics) -> Option<Duration> {
    let now = ms_since(epoch);
    match wait_deadline(conn, limits) {
        Some((deadline, reason)) if now >= deadline => {
            metrics.closed.with_label_values(&[reason]).inc();
            None
        }
        Some((deadline, _)) => Some(Duration::from_millis(deadline - now)),
        None => Some(Duration::from_secs(3600)), // busy: the request's end wakes us
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::net::SocketAddr;

    use axum::routing::get;
    use prometheus::{Encoder, TextEncoder};
    use tokio::sync::oneshot;
    use tokio::task::JoinHandle;

    use crate::http::testing::{closed_by_server, read_response, send_get, write_all};

    /// How long `/slow` takes to answer.
    const SLOW: Duration = Duration::from_millis(800);

    /// [`serve`] on a loopback port with `/` (answers "hi") and `/slow`.
    struct TestServer {
        addr: SocketAddr,
        registry: Registry,
        stop: oneshot::Sender<()>,
        task: JoinHandle<anyhow::Result<()>>,
    }

    impl TestServer {
        async fn start(max_connections: usize, read_header: Duration, idle: Duration) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let app = Router::new().route("/", get(|| async { "hi\n" })).route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(SLOW).await;
                    "slow\n"
                }),
            );
            let limits = Limits {
                max_connections,
                read_header_timeout: read_header,
                idle_timeout: idle,
            };
            let registry = Registry::new();
            let serving = registry.clone();
            let (stop, stopped) = oneshot::channel::<()>();
            let task = tokio::spawn(async move {
                let stop = async {
                    let _ = stopped.await;
                };
                serve(listener, app, None, limits, &serving, stop).await
            });
            Self {
                addr,
                registry,
                stop,
                task,
            }
        }

        async fn connect(&self) -> TcpStream {
            TcpStream::connect(self.addr).await.unwrap()
        }

        /// The value of one series of the registry, as the metrics page
        /// shows it (`name{labels}`); None when it is not there.
        fn sample(&self, series: &str) -> Option<f64> {
            let mut text = Vec::new();
            TextEncoder::new()
                .encode(&self.registry.gather(), &mut text)
                .unwrap();
            let text = String::from_utf8(text).unwrap();
            let line = text
                .lines()
                .find(|l| l.starts_with(&format!("{series} ")))?;
            line[series.len() + 1..].parse().ok()
        }

        fn closed(&self, reason: &str) -> f64 {
            let series = format!("slowpath_http_connections_closed_total{{reason=\"{reason}\"}}");
            self.sample(&series).unwrap()
        }

        /// Stop, and check that serve() returns Ok in time.
        async fn stop(self) {
            let _ = self.stop.send(());
            let ended = tokio::time::timeout(Duration::from_secs(5), self.task).await;
            ended.expect("serve() returns after stop").unwrap().unwrap();
        }
    }

    async fn get_ok(stream: &TcpStream, path: &str) -> String {
        send_get(stream, path).await;
        let (status, body) = read_response(stream).await;
        assert_eq!(status, 200, "{path}: {body}");
        body
    }

    /// A connection with a `/slow` request in flight.
    async fn in_flight(server: &TestServer) -> TcpStream {
        let stream = server.connect().await;
        send_get(&stream, "/slow").await;
        // Time for the server to read the request and start the handler.
        tokio::time::sleep(Duration::from_millis(200)).await;
        stream
    }

    /// Check that the server closes `stream` not much before `due`, and
    /// counts it under the first of `reasons`, never the second.
    async fn assert_timed_out(
        server: &TestServer,
        stream: &TcpStream,
        due: Instant,
        reasons: (&str, &str),
    ) {
        assert!(closed_by_server(stream, Duration::from_secs(5)).await);
        // The idle clock starts when the handler ends, a little before the
        // client has read the response.
        let early = due.saturating_duration_since(Instant::now());
        assert!(early <= Duration::from_millis(50), "closed {early:?} early");
        assert_eq!(server.closed(reasons.0), 1.0);
        assert_eq!(server.closed(reasons.1), 0.0);
    }

    const LONG: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn at_the_cap_a_new_connection_closes_the_longest_idle_one() {
        let server = TestServer::start(2, LONG, LONG).await;
        let first = server.connect().await;
        assert_eq!(get_ok(&first, "/").await, "hi\n");
        tokio::time::sleep(Duration::from_millis(30)).await;
        let second = server.connect().await;
        assert_eq!(get_ok(&second, "/").await, "hi\n");
        tokio::time::sleep(Duration::from_millis(30)).await;
        // A request on the first makes the second the longest idle.
        get_ok(&first, "/").await;
        tokio::time::sleep(Duration::from_millis(30)).await;

        let third = server.connect().await;
        assert_eq!(get_ok(&third, "/").await, "hi\n");
        assert!(closed_by_server(&second, Duration::from_secs(2)).await);
        assert_eq!(get_ok(&first, "/").await, "hi\n", "still open");
        assert_eq!(server.closed("evicted"), 1.0);
        assert_eq!(server.closed("refused"), 0.0);
        assert_eq!(server.sample("slowpath_http_connections"), Some(2.0));
        server.stop().await;
    }

    #[tokio::test]
    async fn at_the_cap_with_every_connection_busy_a_new_one_is_refused() {
        let server = TestServer::start(1, LONG, LONG).await;
        let busy = in_flight(&server).await;

        let refused = server.connect().await;
        assert!(closed_by_server(&refused, Duration::from_millis(500)).await);
        assert_eq!(read_response(&busy).await, (200, "slow\n".into()));
        assert_eq!(server.closed("refused"), 1.0);
        assert_eq!(server.closed("evicted"), 0.0);
        server.stop().await;
    }

    #[tokio::test]
    async fn a_header_not_sent_in_time_closes_the_connection() {
        let timeout = Duration::from_millis(300);
        let server = TestServer::start(8, timeout, LONG).await;
        let slow = server.connect().await;
        let start = Instant::now();
        write_all(&slow, b"GET / HTTP/1.1\r\nHost: test\r\n")
            .await
            .unwrap();
        let reasons = ("read_header_timeout", "idle_timeout");
        assert_timed_out(&server, &slow, start + timeout, reasons).await;
        server.stop().await;
    }

    #[tokio::test]
    async fn a_kept_alive_connection_waits_for_the_idle_timeout_not_the_header_timeout() {
        let idle = Duration::from_millis(800);
        let server = TestServer::start(8, Duration::from_millis(100), idle).await;
        let client = server.connect().await;
        get_ok(&client, "/").await;
        // Waiting between requests is not a slow header.
        tokio::time::sleep(Duration::from_millis(300)).await;
        get_ok(&client, "/").await;
        let answered = Instant::now();

        let reasons = ("idle_timeout", "read_header_timeout");
        assert_timed_out(&server, &client, answered + idle, reasons).await;
        server.stop().await;
    }

    #[tokio::test]
    async fn stop_lets_the_requests_in_flight_finish() {
        let server = TestServer::start(8, LONG, LONG).await;
        let client = in_flight(&server).await;

        let addr = server.addr;
        let start = Instant::now();
        server.stop().await;
        assert!(start.elapsed() >= SLOW / 2, "serve() waited for /slow");
        assert_eq!(read_response(&client).await, (200, "slow\n".into()));
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "the listener is closed"
        );
    }
}
