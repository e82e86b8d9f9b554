//! Client certificates: `client_auth_type`, `client_ca`/`client_ca_file`
//! and `client_allowed_sans`, as one rustls verifier.

use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};

use super::format::{pem_source, TlsSection};

/// What a `client_auth_type` asks of the client.
struct Policy {
    /// A certificate is asked for (every type but `NoClientCert`).
    asked: bool,
    /// A client without one is refused.
    mandatory: bool,
    /// It must chain to the client CA.
    verified: bool,
}

impl Policy {
    /// The policy named `auth`.
    fn named(auth: &str) -> Result<Self> {
        let (asked, mandatory, verified) = match auth {
            "" | "NoClientCert" => (false, false, false),
            "RequestClientCert" => (true, false, false),
            "RequireAnyClientCert" | "RequireClientCert" => (true, true, false),
            "VerifyClientCertIfGiven" => (true, false, true),
            "RequireAndVerifyClientCert" => (true, true, true),
            other => bail!(
                "client_auth_type {other:?}: use NoClientCert, RequestClientCert, RequireAnyClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert"
            ),
        };
        Ok(Self {
            asked,
            mandatory,
            verified,
        })
    }
}

/// The client certificate verifier of `section` (relative paths relative to
/// `dir`), checking handshake signatures with `provider`'s algorithms.
///
/// Errors: an unknown `client_auth_type`, a client CA without a type that
/// verifies against it (or a verifying type without one), an unreadable or
/// empty CA, `client_allowed_sans` with a type where the certificate is
/// optional.
pub(super) fn verifier(
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
    let policy = Policy::named(auth)?;
    if !policy.asked && ca_pem.is_some() {
        bail!("client CAs are set without a client_auth_type: use RequireAndVerifyClientCert");
    }
    let ca = match policy.verified {
        true => Some(ca_verifier(ca_pem.as_deref(), auth, provider)?),
        false => None,
    };
    if section.client_allowed_sans.is_some() && !policy.mandatory {
        bail!("client_allowed_sans needs client_auth_type RequireAnyClientCert or RequireAndVerifyClientCert");
    }
    if !policy.asked {
        return Ok(WebPkiClientVerifier::no_client_auth());
    }
    Ok(Arc::new(ClientCerts {
        ca,
        mandatory: policy.mandatory,
        allowed_sans: section.client_allowed_sans.clone(),
        algorithms: provider.signature_verification_algorithms,
    }))
}

/// rustls's check of a certificate chain against the client CA in `pem`,
/// which `client_auth_type` `auth` needs.
fn ca_verifier(
    pem: Option<&[u8]>,
    auth: &str,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>> {
    let pem = pem.ok_or_else(|| {
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
    WebPkiClientVerifier::builder_with_provider(Arc::new(store), provider.clone())
        .build()
        .map_err(|e| anyhow!("client CA: {e}"))
}

/// The client certificate check of every `client_auth_type` that asks for
/// one. The chain is checked against the client CA (`VerifyClientCertIfGiven`,
/// `RequireAndVerifyClientCert`) or not at all (`RequestClientCert`,
/// `RequireAnyClientCert`); then the certificate must carry one of
/// `client_allowed_sans` when they are set. The handshake signature is
/// always verified, so the client holds the certificate's key.
#[derive(Debug)]
struct ClientCerts {
    /// The client CA's chain check; None: any certificate is taken.
    ca: Option<Arc<dyn ClientCertVerifier>>,
    /// A client without a certificate is refused.
    mandatory: bool,
    /// Subject alternative names (DNS, e-mail, IP address or URI, compared
    /// exactly, as the toolkit does) of which the certificate must carry one.
    allowed_sans: Option<Vec<String>>,
    /// The signature algorithms of the crypto provider.
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for ClientCerts {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        match &self.ca {
            Some(ca) => ca.root_hint_subjects(),
            None => &[],
        }
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        let verified = match &self.ca {
            Some(ca) => ca.verify_client_cert(end_entity, intermediates, now)?,
            None => ClientCertVerified::assertion(),
        };
        let Some(allowed) = &self.allowed_sans else {
            return Ok(verified);
        };
        let found = cert_sans(end_entity);
        if found.iter().any(|san| allowed.contains(san)) {
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

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The subject alternative names of a DER certificate, as strings.
pub(super) fn cert_sans(der: &[u8]) -> Vec<String> {
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
