//! Browser-facing protections: security headers on every response, and the
//! refusal of cross-site form posts.
//!
//! The pages run no inline script and no inline style, so the
//! Content-Security-Policy can allow only this origin's own files: an
//! injected `<script>` would not run even if a template forgot to escape.
//!
//! Cross-site request forgery: a page on another site can make a visitor's
//! browser post one of our forms, with the visitor's cookies attached (the
//! admin's login cookie, say). Two defences, either of which suffices in a
//! current browser:
//!
//! - the cookies are `SameSite` (`Strict` for the admin cookie), so a
//!   browser does not attach them to a post that another site started;
//! - [`guard`] refuses every form post whose
//!   `Sec-Fetch-Site`, `Origin` or `Referer` header says it came from
//!   another origin, with `403 cross_site_request`.
//!
//! A post that carries none of the three headers is let through: browsers
//! send `Origin` with every form post, so such a post comes from a program
//! (curl, a test), which forges nothing because it holds no victim's
//! cookies. The JSON API (`/api/...`) is not checked: it takes no cookies
//! (admin calls need an `Authorization` header, which a cross-site form
//! cannot set), so there is nothing for another site to borrow.
//!
//! The origin compared against is the request's `Host`. Behind a proxy that
//! rewrites `Host`, configure it to keep the original one.

use actix_web::HttpResponse;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::middleware::Next;
use tracing::Instrument;
use uuid::Uuid;

use crate::error::{ApiError, PageError};

/// Only this origin's scripts, styles, images and connections (the event
/// stream); no plugins, no `<base>`, forms post only here, and no other site
/// may frame the pages (clickjacking).
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; \
     base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The header that names the instance that answered.
pub(crate) const INSTANCE_HEADER: HeaderName = HeaderName::from_static("x-seckill-instance");

/// The security headers of a page, and of every answer outside `/api/`.
const PAGE_HEADERS: [(HeaderName, HeaderValue); 6] = [
    (
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    ),
    NOSNIFF,
    FRAME_DENIED,
    // Same-origin requests keep their Referer (a fallback for the
    // cross-site check); other sites never see our URLs, which hold order
    // ids.
    (
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    ),
    (
        HeaderName::from_static("cross-origin-opener-policy"),
        HeaderValue::from_static("same-origin"),
    ),
    (
        HeaderName::from_static("permissions-policy"),
        HeaderValue::from_static("camera=(), microphone=(), geolocation=()"),
    ),
];

/// The security headers of a JSON answer under `/api/` (OWASP's REST
/// Security Cheat Sheet): nothing may load from it, frame it, or sniff it
/// into another type, should a browser be pointed at it. The rest of
/// [`PAGE_HEADERS`] speaks to a page's own loads, links and windows,
/// which a JSON answer has none of, and made most of the bytes of every
/// purchase's answer, each read by every client (docs/bench.md, "A JSON
/// answer's headers").
const API_HEADERS: [(HeaderName, HeaderValue); 3] = [
    (
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(API_CONTENT_SECURITY_POLICY),
    ),
    NOSNIFF,
    FRAME_DENIED,
];

/// A JSON answer loads nothing, and no site may frame it.
pub(crate) const API_CONTENT_SECURITY_POLICY: &str = "default-src 'none'; frame-ancestors 'none'";

const NOSNIFF: (HeaderName, HeaderValue) = (
    header::X_CONTENT_TYPE_OPTIONS,
    HeaderValue::from_static("nosniff"),
);

/// For browsers that predate frame-ancestors.
const FRAME_DENIED: (HeaderName, HeaderValue) =
    (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));

/// The longest instance name [`instance_header`] takes.
pub(crate) const MAX_INSTANCE_CHARS: usize = 64;

/// An instance's name as its `X-Seckill-Instance` header value: 1 to
/// [`MAX_INSTANCE_CHARS`] printable ASCII characters, no spaces. Checked at
/// start: a name a header cannot carry made every HTTP worker panic as it
/// started.
pub fn instance_header(name: &str) -> Result<HeaderValue, String> {
    if name.is_empty()
        || name.len() > MAX_INSTANCE_CHARS
        || !name.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(format!(
            "an instance name is 1 to {MAX_INSTANCE_CHARS} printable ASCII characters \
             without spaces (it is sent in the X-Seckill-Instance header), got {name:?}"
        ));
    }
    Ok(HeaderValue::from_str(name).expect("printable ASCII, checked above"))
}

/// The most header bytes (names and values) a request may carry. Browsers
/// send a few hundred; a client sending more is probing for memory to
/// waste on every request.
pub(crate) const MAX_HEADER_BYTES: usize = 16 * 1024;

/// Every request's span, checks, id and headers, in one middleware (each
/// layer costs every request a boxed future and a reference count, and a
/// sold-out answer is a few microseconds in all):
/// - the request runs in a span named `request` with its method, path and
///   id, so that whatever is logged while it is handled says which
///   request it was ([`request_span`]);
/// - headers adding up to more than [`MAX_HEADER_BYTES`] are refused with
///   `431 headers_too_large`;
/// - form posts another site started are refused with
///   `403 cross_site_request` (see the module comment);
/// - every answer, refusals included, carries `X-Request-Id`: the id the
///   request was logged under, so that a client who got a 500 can quote it;
/// - and the security headers (a JSON answer's fewer than a page's), and
///   `X-Seckill-Instance` with `instance`
///   (the instance's name: for the load test, and for people debugging a
///   deployment of several). These headers are this middleware's alone,
///   and set without looking first whether a handler set one.
pub(crate) async fn guard(
    request: ServiceRequest,
    next: Next<impl MessageBody>,
    instance: HeaderValue,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let mut id = Uuid::encode_buffer();
    let id: &str = request_id().hyphenated().encode_lower(&mut id);
    let span = request_span(&request, id);
    let api = request.path().starts_with("/api/");
    let mut response = async move {
        match refusal(&request) {
            // A refusal is answered as its path's other answers are: JSON
            // under `/api/`, where programs ask, and a page in the site's
            // layout elsewhere, where people do (a cross-site form post is
            // a page's; a browser's cookies can pass the header limit).
            Some(refused) => Ok::<_, actix_web::Error>({
                let answer = if api {
                    HttpResponse::from_error(refused)
                } else {
                    HttpResponse::from_error(PageError::from(refused))
                };
                request.into_response(answer).map_into_right_body()
            }),
            None => Ok(next.call(request).await?.map_into_left_body()),
        }
    }
    .instrument(span)
    .await?;
    let headers = response.headers_mut();
    headers.insert(
        HeaderName::from_static("x-request-id"),
        HeaderValue::from_str(id).expect("a UUID is a valid header value"),
    );
    headers.insert(INSTANCE_HEADER, instance);
    let security: &[_] = if api { &API_HEADERS } else { &PAGE_HEADERS };
    for (name, value) in security {
        headers.insert(name.clone(), value.clone());
    }
    Ok(response)
}

/// A random (version 4) UUID naming one request. Drawn from the thread's
/// `fastrand` generator, not the operating system's: an id names a request
/// in the logs and is no secret, and a `getrandom` call per request was a
/// share of a sold-out answer's cost.
fn request_id() -> Uuid {
    uuid::Builder::from_random_bytes(fastrand::u128(..).to_le_bytes()).into_uuid()
}

/// The span of every HTTP request, lean: its method, path and id, which
/// is what the logs of a failed request need (`web::error` logs the cause
/// inside it; the `X-Request-Id` header names it to the client).
///
/// It is the one span every request opens; with the default filter
/// (`info`) the log formatter writes its fields out as it opens, so each
/// field costs every request. tracing-actix-web's default span, used
/// before, recorded sixteen, among them the matched route (actix matched
/// the path against the route table a second time to name it).
fn request_span(request: &ServiceRequest, id: &str) -> tracing::Span {
    tracing::info_span!(
        "request",
        method = %request.method(),
        path = request.path(),
        request_id = %id,
    )
}

/// Why [`guard`] refuses `request`, if it does.
fn refusal(request: &ServiceRequest) -> Option<ApiError> {
    let bytes: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    if bytes > MAX_HEADER_BYTES {
        tracing::warn!(bytes, "request headers too large");
        return Some(ApiError::HeadersTooLarge);
    }
    if is_cross_site_form_post(request) {
        tracing::warn!(path = request.path(), "cross-site form post refused");
        return Some(ApiError::CrossSite);
    }
    None
}

fn is_cross_site_form_post(request: &ServiceRequest) -> bool {
    if request.method() == Method::GET
        || request.method() == Method::HEAD
        || request.path().starts_with("/api/")
    {
        return false;
    }
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|value| value.to_str().ok())
    };
    let host = request.connection_info().host().to_ascii_lowercase();
    // Sent by current browsers; "none" means the user started it (typed
    // the address, a bookmark), which is not a forgery.
    if let Some(site) = header("sec-fetch-site")
        && site != "same-origin"
        && site != "none"
    {
        return true;
    }
    if let Some(origin) = header("origin") {
        return authority(origin).as_deref() != Some(host.as_str());
    }
    if let Some(referer) = header("referer") {
        return authority(referer).as_deref() != Some(host.as_str());
    }
    false
}

/// `host[:port]` of a URL, as a `Host` header would name it; `None` for
/// anything that is not such a URL (including the `Origin: null` of
/// sandboxed frames and privacy-sensitive redirects).
fn authority(url: &str) -> Option<String> {
    let url = url::Url::parse(url).ok()?;
    let host = url.host_str()?.to_ascii_lowercase();
    Some(match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_name_is_one_its_header_can_carry() {
        let longest = "i".repeat(MAX_INSTANCE_CHARS);
        for good in ["127.0.0.1:8080", "shop-1", longest.as_str()] {
            assert_eq!(instance_header(good).expect("taken"), good);
        }
        let too_long = "i".repeat(MAX_INSTANCE_CHARS + 1);
        for bad in ["", "shop 1", "a\nb", "a\u{1}b", "ünï", too_long.as_str()] {
            assert!(instance_header(bad).is_err(), "{bad:?} was taken");
        }
    }

    #[test]
    fn an_origin_is_compared_as_a_host_header_would_name_it() {
        assert_eq!(
            authority("http://127.0.0.1:8080").as_deref(),
            Some("127.0.0.1:8080")
        );
        assert_eq!(
            authority("https://Shop.Example/sales/1").as_deref(),
            Some("shop.example")
        );
        assert_eq!(authority("null"), None);
    }
}
