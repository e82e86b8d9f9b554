//! Client certificates: `client_auth_type`, `client_ca`/`client_ca_file`
//! and `client_allowed_sans`, as a rustls verifier.

use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore};

use super::file::{pem_source, TlsSection};

/// The client certificate policy of `client_auth_type`.
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
