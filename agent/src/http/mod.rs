//! The agent's HTTP side: one listener, bound at start (so that a port in
//! use is an error before anything is attached), serving
//!
//! - `/`: a landing page linking the others;
//! - the metrics page (`--web.telemetry-path`, `/metrics` by default);
//! - `/healthz` (the process answers) and `/readyz` (which probes are
//!   attached), for kubelet and systemd probes;
//! - `/debug/callsites`: folded call-site stacks, with `--debug.callsites`.
//!
//! Every route sits behind the `--web.config.file` rules when one is given
//! (TLS, client certificates, basic auth, response headers, rate limit) and
//! behind the connection limits (`--web.max-connections`,
//! `--web.read-header-timeout`, `--web.idle-timeout`), so that careless or
//! hostile clients cannot take the descriptors and memory the BPF side and
//! real scrapes need.
//!
//! - [`listener`]: binding the address, the connection limits fitted under
//!   the file limit;
//! - [`connections`]: the accept loop, hyper, timeouts and the cap;
//! - [`server`]: the routes;
//! - [`webconfig`]: the `--web.config.file` rules.

mod connections;
mod listener;
mod server;
#[cfg(test)]
mod testing;
mod webconfig;

pub use listener::{bind, connection_limits};
pub use server::{serve, Endpoints};
pub use webconfig::WebConfig;

/// The HTTP server's own families (`slowpath signals`).
pub const FAMILIES: [&crate::exposition::FamilyList; 3] = [
    &server::FAMILIES,
    &connections::FAMILIES,
    &webconfig::FAMILIES,
];
