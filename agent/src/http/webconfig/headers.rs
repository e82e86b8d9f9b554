//! `http_server_config.headers`: security headers added to every response.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Result};
use axum::http::{HeaderName, HeaderValue};
use axum::response::Response;

/// Headers `http_server_config.headers` may set (the toolkit's list).
const ALLOWED_HEADERS: [&str; 5] = [
    "Content-Security-Policy",
    "X-Frame-Options",
    "X-Content-Type-Options",
    "X-XSS-Protection",
    "Strict-Transport-Security",
];

/// `http_server_config.headers`, checked as the toolkit checks them; an
/// empty value leaves the header out.
///
/// Errors: a header outside the toolkit's list, a value the toolkit refuses
/// for `X-Frame-Options` or `X-Content-Type-Options`, a value that is not a
/// valid header value.
pub(super) fn response_headers(
    headers: BTreeMap<String, String>,
) -> Result<Vec<(HeaderName, HeaderValue)>> {
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

/// The lower-case `'static` name of one of [`ALLOWED_HEADERS`], which
/// `HeaderName::from_static` needs.
fn static_lower(name: &str) -> &'static str {
    match name {
        "Content-Security-Policy" => "content-security-policy",
        "X-Frame-Options" => "x-frame-options",
        "X-Content-Type-Options" => "x-content-type-options",
        "X-XSS-Protection" => "x-xss-protection",
        _ => "strict-transport-security",
    }
}

/// Set `headers` on `response`, replacing any the handler set.
pub(super) fn apply(headers: &[(HeaderName, HeaderValue)], response: &mut Response) {
    for (name, value) in headers {
        response.headers_mut().insert(name.clone(), value.clone());
    }
}
