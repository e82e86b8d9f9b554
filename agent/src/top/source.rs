//! Where `slowpath top` reads its numbers: a running agent's metrics
//! endpoint, over http or https (a CA to verify it, a client certificate,
//! basic auth: what the agent's `--web.config.file` may ask for), or the
//! programs the view loaded itself ([`super::standalone`]).

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use base64::Engine;

use super::rows::Reading;
use super::sample;
use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig};

/// How to reach the agent (the `--agent.*` flags of `slowpath top`).
#[derive(Clone, Debug, Default)]
pub struct AgentEndpoint {
    /// The metrics URL, `http://` or `https://`.
    pub url: String,
    /// PEM CA certificates that sign the agent's server certificate
    /// (https); without it, the system's web roots.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate and key, for an agent that asks for one.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// Basic auth user, and the file holding the password.
    pub username: Option<String>,
    pub password_file: Option<PathBuf>,
}

/// Where a view's numbers come from: each read is the agent's metrics
/// (the same families and labels whichever source serves them).
pub trait Source {
    /// One read of the metrics, by row. Errors: the source cannot be read
    /// (the message names it and what to give).
    fn read(&self) -> Result<Reading>;
    /// The findings in the doctor's JSON shape (what `/debug/findings`
    /// serves). Errors when findings are off.
    fn read_findings(&self) -> Result<serde_json::Value>;
    /// What the header says the numbers come from: the agent's URL, or
    /// `standalone (...)`.
    fn describe(&self) -> &str;
    /// Whose own CPU and BPF time the page reports: `agent`, or `view`
    /// when the view loaded the programs.
    fn reader(&self) -> &'static str;
}

/// Whether an agent answered the first read.
pub enum Presence {
    /// One did: its first read, the base of the first frame.
    Answers(Box<Reading>),
    /// Nothing listens at the URL (connection refused): why, for the header.
    Absent(String),
}

/// The rows of a metrics page read from `whence`. Errors: the page does
/// not parse.
fn parse_page(text: &str, whence: &str) -> Result<Reading> {
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|line| Ok(line.to_string())))
        .with_context(|| format!("parsing the metrics of {whence}"))?;
    Ok(Reading::from_samples(sample::parsed(&scrape)))
}

/// A connection to the agent, kept between reads (keep-alive).
pub struct AgentSource {
    agent: ureq::Agent,
    url: String,
    authorization: Option<String>,
}

/// How long one read may take: the agent answers in milliseconds; a
/// refresh should not hang on a stuck one.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

impl AgentSource {
    /// Read the certificates and password the endpoint names; errors name
    /// the file and what is wrong with it.
    pub fn new(endpoint: &AgentEndpoint) -> Result<Self> {
        let mut tls = TlsConfig::builder();
        if let Some(path) = &endpoint.ca_file {
            let pem = read(path, "--agent.ca-file")?;
            let certs = ureq::tls::parse_pem(&pem)
                .filter_map(|item| match item {
                    Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                    _ => None,
                })
                .collect::<Vec<Certificate<'static>>>();
            if certs.is_empty() {
                bail!(
                    "--agent.ca-file {}: no PEM certificate in it",
                    path.display()
                );
            }
            tls = tls.root_certs(RootCerts::new_with_certs(&certs));
        }
        match (&endpoint.cert_file, &endpoint.key_file) {
            (Some(cert), Some(key)) => {
                let chain = Certificate::from_pem(&read(cert, "--agent.cert-file")?).with_context(
                    || {
                        format!(
                            "--agent.cert-file {}: not a PEM certificate",
                            cert.display()
                        )
                    },
                )?;
                let key =
                    PrivateKey::from_pem(&read(key, "--agent.key-file")?).with_context(|| {
                        format!("--agent.key-file {}: not a PEM private key", key.display())
                    })?;
                tls = tls.client_cert(Some(ClientCert::new_with_certs(&[chain], key)));
            }
            (None, None) => {}
            _ => bail!("--agent.cert-file and --agent.key-file go together: give both or neither"),
        }
        let authorization = match (&endpoint.username, &endpoint.password_file) {
            (Some(user), Some(file)) => {
                let password = String::from_utf8(read(file, "--agent.password-file")?)
                    .with_context(|| {
                        format!("--agent.password-file {}: not UTF-8", file.display())
                    })?;
                let pair = format!("{user}:{}", password.trim_end_matches(['\n', '\r']));
                Some(format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(pair)
                ))
            }
            (None, None) => None,
            _ => bail!(
                "--agent.username and --agent.password-file go together: give both or neither"
            ),
        };
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(READ_TIMEOUT))
            .tls_config(tls.build())
            .http_status_as_error(false)
            .build()
            .new_agent();
        Ok(Self {
            agent,
            url: endpoint.url.clone(),
            authorization,
        })
    }

    /// Whether an agent answers at the URL. Errors: one answers but cannot
    /// be read (TLS, auth, a wrong path), or the address does not connect
    /// for another reason than a refusal (then standalone would hide it).
    pub fn presence(&self) -> Result<Presence> {
        match self.read() {
            Ok(first) => Ok(Presence::Answers(Box::new(first))),
            Err(err) if refused(&err) => Ok(Presence::Absent(format!(
                "no agent at {}",
                origin(&self.url)
            ))),
            Err(err) => Err(err),
        }
    }

    /// The body of `url`, with the agent's credentials.
    fn get(&self, url: &str) -> Result<String> {
        let mut request = self.agent.get(url);
        if let Some(auth) = &self.authorization {
            request = request.header("Authorization", auth);
        }
        let mut response = request
            .call()
            .with_context(|| format!("no agent answers at {url}"))?;
        let status = response.status();
        if status == 401 {
            bail!(
                "the agent at {url} asks for basic auth: give --agent.username and --agent.password-file (or they are wrong)"
            );
        }
        if !status.is_success() {
            bail!("the agent at {url} answered {status}");
        }
        response
            .body_mut()
            .read_to_string()
            .with_context(|| format!("reading {url}"))
    }
}

impl Source for AgentSource {
    fn read(&self) -> Result<Reading> {
        parse_page(&self.get(&self.url)?, &self.url)
    }

    /// `/debug/findings` beside the metrics path. Errors when findings
    /// are off (404) too.
    fn read_findings(&self) -> Result<serde_json::Value> {
        let url = format!("{}/debug/findings", origin(&self.url));
        let text = self.get(&url)?;
        serde_json::from_str(&text).with_context(|| format!("parsing {url}"))
    }

    fn describe(&self) -> &str {
        &self.url
    }

    fn reader(&self) -> &'static str {
        "agent"
    }
}

/// Whether a read failed because nothing listens at the address.
fn refused(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        matches!(e.downcast_ref::<ureq::Error>(),
            Some(ureq::Error::Io(io)) if io.kind() == std::io::ErrorKind::ConnectionRefused)
    })
}

/// `scheme://host:port` of a URL (all of it when it has no path).
fn origin(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => &url[..after_scheme + i],
        None => url,
    }
}

fn read(path: &PathBuf, flag: &str) -> Result<Vec<u8>> {
    fs::read(path).with_context(|| format!("{flag} {}: cannot read it", path.display()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_origin_is_the_url_without_its_path() {
        assert_eq!(
            super::origin("https://10.0.0.1:9891/metrics"),
            "https://10.0.0.1:9891"
        );
        assert_eq!(
            super::origin("http://[::1]:9891/x/metrics"),
            "http://[::1]:9891"
        );
        assert_eq!(super::origin("http://node:9891"), "http://node:9891");
    }
}
