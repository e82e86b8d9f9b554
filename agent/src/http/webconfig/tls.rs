//! The rustls settings of `tls_server_config`: certificate and key, cipher
//! suites, curves and protocol versions by the toolkit's (Go's) names.

use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use rustls::crypto::{CryptoProvider, SupportedKxGroup};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, SupportedCipherSuite, SupportedProtocolVersion};

use super::client_certs;
use super::format::{pem_source, TlsSection};

/// The rustls settings of a `tls_server_config` whose relative paths are
/// relative to `dir`.
///
/// Errors: one line naming the setting at fault (a missing or unreadable
/// certificate or key, a key that does not match, an unknown suite, curve,
/// version or client certificate policy).
pub(super) fn server_config(section: &TlsSection, dir: &Path) -> Result<ServerConfig> {
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

    let provider = Arc::new(crypto_provider(section)?);
    let versions = protocol_versions(
        section.min_version.as_deref(),
        section.max_version.as_deref(),
    )?;
    let verifier = client_certs::verifier(section, dir, &provider)?;
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

/// ring's suites and key exchange groups, narrowed to `cipher_suites` and
/// `curve_preferences` when they are set.
fn crypto_provider(section: &TlsSection) -> Result<CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    if let Some(names) = &section.cipher_suites {
        provider.cipher_suites = cipher_suites(&provider, names)?;
    }
    if let Some(names) = &section.curve_preferences {
        provider.kx_groups = kx_groups(&provider, names)?;
    }
    Ok(provider)
}

/// TLS 1.2 suites by their Go names (those rustls has), in the order given,
/// followed by every TLS 1.3 suite.
///
/// Errors: a name rustls does not offer for TLS 1.2 (the message lists the
/// ones it does).
pub(super) fn cipher_suites(
    provider: &CryptoProvider,
    names: &[String],
) -> Result<Vec<SupportedCipherSuite>> {
    // Go's names of the TLS 1.3 suites: accepted, and (as in Go) no effect.
    const TLS13_GO_NAMES: [&str; 3] = [
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
    ];
    let tls12 = |s: &&SupportedCipherSuite| s.version() == &rustls::version::TLS12;
    let mut chosen: Vec<SupportedCipherSuite> = Vec::new();
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
) -> Result<Vec<&'static dyn SupportedKxGroup>> {
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
///
/// Errors: an unknown name, a maximum below TLS12 (rustls has no TLS 1.0
/// or 1.1), a minimum above the maximum.
pub(super) fn protocol_versions(
    min: Option<&str>,
    max: Option<&str>,
) -> Result<Vec<&'static SupportedProtocolVersion>> {
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
pub(super) fn min_version_raised(section: &TlsSection) -> bool {
    matches!(section.min_version.as_deref(), Some("TLS10" | "TLS11"))
}
