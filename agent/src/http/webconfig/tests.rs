use std::fs;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use axum::extract::Request;
use axum::http::header;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

use super::basic_auth::basic_credentials;
use super::client_certs::{cert_sans, verifier};
use super::format::TlsSection;
use super::rate_limit::TokenBucket;
use super::tls::{cipher_suites, protocol_versions};
use super::WebConfig;

/// A directory with a CA, a server certificate and key signed by it, and a
/// second key that does not match the certificate.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("slowpath-webconfig-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let server_key = KeyPair::generate().unwrap();
        let server = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
            .unwrap()
            .signed_by(&server_key, &issuer)
            .unwrap();
        fs::write(dir.join("ca.crt"), ca_cert.pem()).unwrap();
        fs::write(dir.join("server.crt"), server.pem()).unwrap();
        fs::write(dir.join("server.key"), server_key.serialize_pem()).unwrap();
        let other = KeyPair::generate().unwrap();
        fs::write(dir.join("other.key"), other.serialize_pem()).unwrap();
        Self { dir }
    }

    /// Write `yaml` as web.yml and read it.
    fn load(&self, yaml: &str) -> Result<WebConfig> {
        let path = self.dir.join("web.yml");
        fs::write(&path, yaml).unwrap();
        WebConfig::load(&path)
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

const TLS: &str = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";

#[test]
fn a_full_file_is_read_with_paths_relative_to_it() {
    let pki = Pki::new("full");
    let hash = bcrypt::hash("secret", 4).unwrap();
    let web = pki
        .load(&format!(
            "{TLS}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  \
             client_allowed_sans: [prometheus.example]\n  min_version: TLS12\n  \
             cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]\n  \
             curve_preferences: [X25519, CurveP256]\n\
             http_server_config:\n  http2: false\n  headers:\n    X-Frame-Options: deny\n    \
             Strict-Transport-Security: max-age=31536000\n\
             basic_auth_users:\n  prometheus: '{hash}'\n\
             rate_limit:\n  interval: 100ms\n  burst: 10\n"
        ))
        .unwrap();
    assert!(web.serves_tls());
    let loaded = web.current();
    assert_eq!(loaded.users.len(), 1);
    assert_eq!(loaded.headers.len(), 2);
    assert_eq!(loaded.rate_limit, Some((Duration::from_millis(100), 10)));
    assert!(web.limiter.is_some());
    let tls = loaded.tls.as_ref().unwrap();
    assert_eq!(tls.alpn_protocols, vec![b"http/1.1".to_vec()]);
}

#[test]
fn an_empty_file_or_users_only_serves_plain_http() {
    let pki = Pki::new("plain");
    assert!(!pki.load("").unwrap().serves_tls());
    let hash = bcrypt::hash("x", 4).unwrap();
    let web = pki
        .load(&format!("basic_auth_users:\n  a: '{hash}'\n"))
        .unwrap();
    assert!(!web.serves_tls());
    assert_eq!(web.current().users.len(), 1);
}

#[test]
fn every_bad_setting_is_one_line_naming_it() {
    let pki = Pki::new("bad");
    let cases: &[(&str, &str)] = &[
        (
            "tls_server_config:\n  cert_file: server.crt\n",
            "missing one of key or key_file",
        ),
        ("tls_srever_config: {}\n", "tls_srever_config"),
        ("basic_auth_users:\n  a: plaintext\n", "not a bcrypt hash"),
        (
            "tls_server_config:\n  cert_file: nope.crt\n  key_file: server.key\n",
            "nope.crt",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: other.key\n",
            "certificate and key",
        ),
        (
            &format!("{TLS}  cert: x\n"),
            "set cert or cert_file, not both",
        ),
        (
            &format!("{TLS}  client_auth_type: RequireAndVerifyClientCert\n"),
            "needs client_ca_file",
        ),
        (
            &format!("{TLS}  client_ca_file: ca.crt\n"),
            "without a client_auth_type",
        ),
        (
            &format!("{TLS}  client_auth_type: Always\n"),
            "client_auth_type \"Always\"",
        ),
        (
            &format!(
                "{TLS}  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.crt\n  \
                 client_allowed_sans: [a]\n"
            ),
            "client_allowed_sans needs",
        ),
        (
            &format!("{TLS}  cipher_suites: [TLS_RSA_WITH_AES_128_CBC_SHA]\n"),
            "not offered",
        ),
        (
            &format!("{TLS}  curve_preferences: [CurveP521]\n"),
            "CurveP521",
        ),
        (
            &format!("{TLS}  max_version: TLS11\n"),
            "max_version below TLS12",
        ),
        (
            &format!("{TLS}  min_version: TLS13\n  max_version: TLS12\n"),
            "above max_version",
        ),
        (
            &format!("{TLS}  min_version: SSL3\n"),
            "min_version \"SSL3\"",
        ),
        (
            "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
            "use deny or sameorigin",
        ),
        (
            "http_server_config:\n  headers:\n    X-Powered-By: me\n",
            "cannot be set",
        ),
        (
            "rate_limit:\n  interval: 1s\n  burst: 0\n",
            "burst must be at least 1",
        ),
        ("rate_limit:\n  interval: soon\n", "interval \"soon\""),
    ];
    for (yaml, expected) in cases {
        let err = format!(
            "{:#}",
            pki.load(yaml)
                .err()
                .unwrap_or_else(|| panic!("accepted: {yaml}"))
        );
        assert!(err.contains(expected), "{yaml}: {err}");
        assert!(err.starts_with("bad --web.config.file"), "{err}");
        assert!(!err.contains('\n'), "not one line: {err}");
    }
}

#[test]
fn cipher_suites_restrict_tls12_and_leave_tls13_on() {
    let provider = rustls::crypto::ring::default_provider();
    let names = vec![
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384".to_string(),
        "TLS_AES_128_GCM_SHA256".to_string(), // a TLS 1.3 name: no effect
    ];
    let chosen = cipher_suites(&provider, &names).unwrap();
    let tls12: Vec<_> = chosen
        .iter()
        .filter(|s| s.version() == &rustls::version::TLS12)
        .map(|s| s.suite().as_str().unwrap())
        .collect();
    assert_eq!(tls12, ["TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"]);
    let tls13 = chosen
        .iter()
        .filter(|s| s.version() == &rustls::version::TLS13)
        .count();
    assert_eq!(tls13, 3);
}

#[test]
fn versions_follow_min_and_max() {
    let v = |min, max| -> Vec<u16> {
        protocol_versions(min, max)
            .unwrap()
            .iter()
            .map(|v| u16::from(v.version))
            .collect()
    };
    assert_eq!(v(None, None), [0x0303, 0x0304]);
    assert_eq!(v(Some("TLS13"), None), [0x0304]);
    assert_eq!(v(None, Some("TLS12")), [0x0303]);
    assert_eq!(v(Some("TLS10"), None), [0x0303, 0x0304]);
}

#[test]
fn min_version_below_tls12_is_noted() {
    let pki = Pki::new("minver");
    let web = pki.load(&format!("{TLS}  min_version: TLS10\n")).unwrap();
    assert_eq!(web.current().notes.len(), 1);
}

#[test]
fn a_broken_rewrite_keeps_the_last_valid_settings_until_fixed() {
    let pki = Pki::new("reload");
    let hash = bcrypt::hash("x", 4).unwrap();
    let web = pki
        .load(&format!("{TLS}basic_auth_users:\n  a: '{hash}'\n"))
        .unwrap();
    let path = pki.dir.join("web.yml");
    let first = web.current();
    assert!(
        Arc::ptr_eq(&first, &web.current()),
        "unchanged files are not re-read"
    );

    fs::write(&path, "tls_server_config: [\n").unwrap();
    let kept = web.current();
    assert!(Arc::ptr_eq(&first, &kept));
    assert!(!web.cached.lock().unwrap().ok);

    fs::write(
        &path,
        format!("{TLS}basic_auth_users:\n  a: '{hash}'\n  b: '{hash}'\n"),
    )
    .unwrap();
    let fixed = web.current();
    assert_eq!(fixed.users.len(), 2);
    assert!(web.cached.lock().unwrap().ok);

    // Turning TLS off needs a restart: kept, and reported as invalid.
    fs::write(&path, format!("basic_auth_users:\n  a: '{hash}'\n")).unwrap();
    assert!(web.current().tls.is_some());
    assert!(!web.cached.lock().unwrap().ok);
}

#[test]
fn a_rotated_certificate_is_read_again() {
    let pki = Pki::new("rotate");
    let web = pki.load(TLS).unwrap();
    let before = web.current();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    fs::write(pki.dir.join("server.crt"), cert.pem()).unwrap();
    fs::write(pki.dir.join("server.key"), key.serialize_pem()).unwrap();
    assert!(!Arc::ptr_eq(&before, &web.current()));
}

#[test]
fn basic_credentials_are_decoded() {
    let req = |value: &str| {
        Request::builder()
            .header(header::AUTHORIZATION, value)
            .body(axum::body::Body::empty())
            .unwrap()
    };
    // "user:pa:ss" (a password may hold colons)
    assert_eq!(
        basic_credentials(&req("Basic dXNlcjpwYTpzcw==")),
        Some(("user".into(), "pa:ss".into()))
    );
    assert_eq!(basic_credentials(&req("Bearer dXNlcjpwYTpzcw==")), None);
    assert_eq!(basic_credentials(&req("Basic !!!")), None);
}

#[tokio::test]
async fn passwords_are_checked_with_bcrypt_and_successes_remembered() {
    let pki = Pki::new("auth");
    let hash = bcrypt::hash("right", 4).unwrap();
    let web = pki
        .load(&format!("basic_auth_users:\n  a: '{hash}'\n"))
        .unwrap();
    let users = web.current().users.clone();
    assert!(!web.passwords.check(&users, "a", "wrong").await);
    assert!(!web.passwords.check(&users, "b", "right").await);
    assert_eq!(web.passwords.remembered_count(), 0);
    assert!(web.passwords.check(&users, "a", "right").await);
    assert_eq!(web.passwords.remembered_count(), 1);
    assert!(web.passwords.check(&users, "a", "right").await);
}

#[test]
fn the_token_bucket_allows_its_burst_then_one_per_interval() {
    let mut bucket = TokenBucket::new(Duration::from_secs(3600), 2);
    assert!(bucket.take());
    assert!(bucket.take());
    assert!(!bucket.take());
}

#[test]
fn sans_of_a_certificate_are_read() {
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["prometheus.example".into(), "10.0.0.1".into()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    assert_eq!(cert_sans(cert.der()), ["prometheus.example", "10.0.0.1"]);
}

#[test]
fn one_verifier_serves_every_client_auth_type() {
    use rustls::pki_types::{CertificateDer, UnixTime};
    use rustls::server::danger::ClientCertVerifier;

    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_pem = ca_params.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca_params, ca_key);
    let signed = |san: &str| {
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(vec![san.to_string()]).unwrap();
        params.signed_by(&key, &issuer).unwrap().der().clone()
    };
    let trusted = signed("prometheus.example");
    let other_san = signed("grafana.example");
    let key = KeyPair::generate().unwrap();
    let self_signed = CertificateParams::new(vec!["prometheus.example".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap()
        .der()
        .clone();

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let build = |auth: &str, sans: &[&str]| {
        let section = TlsSection {
            client_auth_type: Some(auth.to_string()),
            // a client CA is an error with NoClientCert and ignored without Verify
            client_ca: (auth != "NoClientCert").then(|| ca_pem.clone()),
            client_allowed_sans: (!sans.is_empty())
                .then(|| sans.iter().map(|s| s.to_string()).collect()),
            ..TlsSection::default()
        };
        verifier(&section, std::path::Path::new("."), &provider).unwrap()
    };
    let check = |v: &Arc<dyn ClientCertVerifier>, cert: &CertificateDer<'static>| {
        v.verify_client_cert(cert, &[], UnixTime::now())
            .map(|_| ())
            .map_err(|e| e.to_string())
    };

    assert!(!build("NoClientCert", &[]).offer_client_auth());

    let request = build("RequestClientCert", &[]);
    assert!(request.offer_client_auth() && !request.client_auth_mandatory());
    assert!(request.root_hint_subjects().is_empty());
    assert_eq!(check(&request, &self_signed), Ok(()));

    let any = build("RequireAnyClientCert", &["prometheus.example"]);
    assert!(any.client_auth_mandatory());
    assert_eq!(check(&any, &self_signed), Ok(()));
    let refused = check(&any, &other_san).unwrap_err();
    assert!(
        refused.contains("client certificate has none of client_allowed_sans"),
        "{refused}"
    );
    assert!(refused.contains("grafana.example"), "{refused}");

    let if_given = build("VerifyClientCertIfGiven", &[]);
    assert!(if_given.offer_client_auth() && !if_given.client_auth_mandatory());
    assert_eq!(if_given.root_hint_subjects().len(), 1);
    assert_eq!(check(&if_given, &trusted), Ok(()));
    assert!(check(&if_given, &self_signed).is_err());

    let verified = build("RequireAndVerifyClientCert", &["prometheus.example"]);
    assert!(verified.client_auth_mandatory());
    assert_eq!(check(&verified, &trusted), Ok(()));
    assert!(check(&verified, &other_san).is_err(), "SAN not allowed");
    assert!(check(&verified, &self_signed).is_err(), "not from the CA");
    assert_eq!(
        verified.supported_verify_schemes(),
        any.supported_verify_schemes()
    );
    assert!(!any.supported_verify_schemes().is_empty());
}
