//! The admin pages: log in with the admin token, create a sale, and look
//! inside one: its orders, its stock in Redis beside PostgreSQL's, and its
//! two queues, with a button to re-drive dead-lettered jobs.
//!
//! Logging in posts the token once; the answer sets the `seckill_admin`
//! cookie, which holds a signed session that expires, never the token (see
//! `admin_token.rs`); logging out closes the session on the server. Five
//! wrong tokens from one address lock it out for 15 minutes (`429`), on
//! the login form and the admin API alike. The cookie is `HttpOnly` (no script can read it),
//! `SameSite=Strict` (no other site's post carries it) and `Secure`
//! (browsers send it only over HTTPS, and over plain HTTP to `localhost` and
//! `127.0.0.1`, which they treat as secure: a local demo works, a remote
//! one needs TLS in front). Every admin page and form checks it; without
//! it, pages show the login form (`401`) and posts are answered
//! `401 unauthorized`. The create-a-sale form, and the words it refuses
//! a value in, are `form.rs`'s.

mod form;

use std::time::Duration;

use actix_web::cookie::{Cookie, SameSite};
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use anyhow::Context;
use askama::Template;
use chrono::Utc;
use serde::Deserialize;

use crate::admin_token::{FAILURE_WINDOW, MAX_FAILED_LOGINS};
use crate::client_ip;
use crate::error::{ApiError, PageError};
use crate::limits;
use crate::lookup::{SaleView, find_sale};
use crate::pages::html;
use crate::state::AppState;
use form::{NewSaleForm, Refused};
use seckill_core::domain::OrderStatus;
use seckill_core::keys::SaleQueue;
use seckill_core::queue::QueueStats;
use seckill_core::store::OrderRow;

/// The admin login cookie.
const ADMIN_COOKIE: &str = "seckill_admin";
/// Rows of the orders table on a sale's admin page (newest first).
const ORDERS_SHOWN: i64 = 200;

#[derive(Template)]
#[template(path = "admin_login.html")]
struct LoginPage {
    notice: Option<String>,
}

#[derive(Template)]
#[template(path = "admin.html")]
struct AdminPage {
    sales: Vec<SaleView>,
    /// The create-a-sale form: what the admin typed, when it was refused.
    form: NewSaleForm,
    /// Why the form was refused, and the field it marks.
    refused: Option<Refused>,
    /// The link to the next page of older sales, when there are more.
    older: Option<i64>,
}

impl AdminPage {
    /// Whether the form marks the field `name` as the one at fault.
    fn marks(&self, name: &str) -> bool {
        self.refused
            .as_ref()
            .is_some_and(|refused| refused.field == name)
    }

    /// The label of the form's field `name`.
    fn label(&self, name: &str) -> &'static str {
        form::label(name)
    }
}

/// Sales on one page of `/admin`.
const ADMIN_PAGE: i64 = 50;

/// `GET /admin?before=ID`: the page of sales older than sale `ID`.
#[derive(serde::Deserialize)]
pub(crate) struct AdminQuery {
    before: Option<i64>,
}

#[derive(Template)]
#[template(path = "admin_sale.html")]
struct AdminSalePage {
    sale: SaleView,
    /// Units left according to Redis (`None`: the sale is not loaded).
    redis_stock: Option<i64>,
    /// Units left according to PostgreSQL: `stock_total - sold`.
    pg_left: i64,
    sold: i32,
    orders: Vec<OrderRow>,
    /// `(form value, label, stats)` of the order queue and the deadline queue.
    queues: Vec<(&'static str, &'static str, QueueStats)>,
}

impl AdminSalePage {
    fn stocks_agree(&self) -> bool {
        self.redis_stock == Some(self.pg_left)
    }
}

/// How the admin page shows an order's times.
trait OrderTimes {
    fn created(&self) -> String;
    fn deadline(&self) -> String;
}

impl OrderTimes for OrderRow {
    fn created(&self) -> String {
        self.created_at.format("%H:%M:%S%.3f").to_string()
    }
    fn deadline(&self) -> String {
        match (&self.pay_by, self.status) {
            (Some(deadline), OrderStatus::Confirmed) => deadline.format("%H:%M:%S").to_string(),
            _ => String::new(),
        }
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct LoginForm {
    token: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct RedriveForm {
    /// `orders` or `deadlines`; anything else is refused by the form parser.
    queue: SaleQueue,
}

/// The session id of the request's admin cookie, if it is signed, unexpired
/// and not logged out.
async fn session(state: &AppState, request: &HttpRequest) -> Result<String, ApiError> {
    let cookie = request.cookie(ADMIN_COOKIE);
    let id = state
        .admin
        .verify_session(cookie.as_ref().map(|c| c.value()), Utc::now().timestamp())?;
    if state.store.session_is_open(&id).await? {
        Ok(id)
    } else {
        Err(ApiError::Unauthorized)
    }
}

/// Whether the request carries a valid admin session.
async fn authenticate(state: &AppState, request: &HttpRequest) -> Result<(), ApiError> {
    session(state, request).await.map(|_| ())
}

/// The login form (`401`) for a visitor without a session; `None` for an
/// admin. A session that cannot be checked (Redis down) is an error
/// (`503`), not a reason to ask for the token again.
async fn login_unless_signed_in(
    state: &AppState,
    request: &HttpRequest,
) -> Result<Option<HttpResponse>, ApiError> {
    match authenticate(state, request).await {
        Ok(()) => Ok(None),
        Err(ApiError::Unauthorized | ApiError::AdminDisabled) => {
            login_page(None, StatusCode::UNAUTHORIZED).map(Some)
        }
        Err(other) => Err(other),
    }
}

fn admin_cookie(value: String, max_age: Duration) -> Cookie<'static> {
    Cookie::build(ADMIN_COOKIE, value)
        .path("/admin")
        .http_only(true)
        .secure(true)
        .same_site(SameSite::Strict)
        .max_age(actix_web::cookie::time::Duration::seconds(
            i64::try_from(max_age.as_secs()).unwrap_or(i64::MAX),
        ))
        .finish()
}

fn login_page(notice: Option<String>, status: StatusCode) -> Result<HttpResponse, ApiError> {
    let mut response = html(&LoginPage { notice })?;
    *response.status_mut() = status;
    Ok(response)
}

fn see_other(location: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header(("Location", location.to_owned()))
        .finish()
}

/// `GET /admin`: the sales and the form to create one, or the login form.
pub(crate) async fn index(
    state: web::Data<AppState>,
    request: HttpRequest,
    query: web::Query<AdminQuery>,
) -> Result<HttpResponse, PageError> {
    if let Some(page) = login_unless_signed_in(&state, &request).await? {
        return Ok(page);
    }
    Ok(admin_page(&state, query.before, NewSaleForm::default(), None).await?)
}

/// A page of sales older than `before` (the newest with `None`), their
/// units left read in one round trip.
async fn admin_page(
    state: &AppState,
    before: Option<i64>,
    form: NewSaleForm,
    refused: Option<Refused>,
) -> Result<HttpResponse, ApiError> {
    let status = if refused.is_some() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    let listed = state.store.sales(before, ADMIN_PAGE).await?;
    let ids: Vec<i64> = listed.iter().map(|sale| sale.id).collect();
    let left = state.store.stocks_left(&ids).await?;
    let sales: Vec<SaleView> = listed
        .iter()
        .zip(left)
        .map(|(sale, left)| SaleView::new(sale, left))
        .collect();
    let older = (listed.len() as i64 == ADMIN_PAGE)
        .then(|| ids.last().copied())
        .flatten();
    let mut response = html(&AdminPage {
        sales,
        form,
        refused,
        older,
    })?;
    *response.status_mut() = status;
    Ok(response)
}

/// `POST /admin/login`: the token in, the cookie out.
pub(crate) async fn login(
    state: web::Data<AppState>,
    request: HttpRequest,
    form: web::Form<LoginForm>,
) -> Result<HttpResponse, PageError> {
    limits::check(&state, &request, limits::On::Shop).await?;
    match admit(&state, &request, Some(&form.token)).await {
        Ok(()) => {}
        Err(ApiError::RateLimited(left)) => {
            let notice = format!(
                "Too many wrong tokens from this address; try again in {} minutes.",
                left.as_secs().div_ceil(60).max(1)
            );
            let mut response = login_page(Some(notice), StatusCode::TOO_MANY_REQUESTS)?;
            response.headers_mut().insert(
                actix_web::http::header::RETRY_AFTER,
                // Rounded up, as the API's: one who waits as long as told
                // finds the lock-out over.
                u64::try_from(left.as_millis().div_ceil(1000))
                    .unwrap_or(u64::MAX)
                    .max(1)
                    .into(),
            );
            return Ok(response);
        }
        Err(refused @ (ApiError::Unauthorized | ApiError::AdminDisabled)) => {
            return Ok(login_page(
                Some(refused.to_string()),
                StatusCode::UNAUTHORIZED,
            )?);
        }
        Err(other) => return Err(other.into()),
    }
    let ttl = state.admin.session_ttl();
    let id = uuid::Uuid::new_v4().simple().to_string();
    let expires = Utc::now().timestamp() + i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX / 2);
    state.store.open_session(&id, ttl).await?;
    let cookie = admin_cookie(state.admin.sign_session(&id, expires)?, ttl);
    let mut response = see_other("/admin");
    response
        .add_cookie(&cookie)
        .context("setting the admin cookie")?;
    Ok(response)
}

/// `POST /admin/logout`: close the session on the server, and forget the
/// cookie in the browser.
pub(crate) async fn logout(
    state: web::Data<AppState>,
    request: HttpRequest,
) -> Result<HttpResponse, PageError> {
    match session(&state, &request).await {
        Ok(id) => state.store.close_session(&id).await?,
        // No session to close (none, forged, expired, closed already): the
        // cookie goes all the same.
        Err(ApiError::Unauthorized | ApiError::AdminDisabled) => {}
        // One that cannot be checked (Redis down) cannot be closed either:
        // told it was, the admin would leave it open for its whole life.
        Err(error) => return Err(error.into()),
    }
    let mut cookie = admin_cookie(String::new(), Duration::ZERO);
    cookie.make_removal();
    let mut response = see_other("/admin");
    response
        .add_cookie(&cookie)
        .context("clearing the admin cookie")?;
    Ok(response)
}

/// `POST /admin/sales`: the create-a-sale form.
pub(crate) async fn create_sale(
    state: web::Data<AppState>,
    request: HttpRequest,
    form: web::Form<NewSaleForm>,
) -> Result<HttpResponse, PageError> {
    authenticate(&state, &request).await?;
    let form = form.into_inner();
    let new = match form.sale() {
        Ok(new) => new,
        // The page again, with what was typed and the field marked.
        Err(refused) => return Ok(admin_page(&state, None, form, Some(refused)).await?),
    };
    let sale = state.store.create_sale(&new).await?;
    state.index.forget();
    Ok(see_other(&format!("/admin/sales/{}", sale.id)))
}

/// `GET /admin/sales/{id}`: one sale, inside.
pub(crate) async fn sale(
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, PageError> {
    if let Some(page) = login_unless_signed_in(&state, &request).await? {
        return Ok(page);
    }
    let sale = find_sale(&state, &path).await?;
    let inside = state.store.sale_inside(sale.id, ORDERS_SHOWN).await?;
    Ok(html(&AdminSalePage {
        sale: SaleView::new(&sale, inside.redis_stock.unwrap_or(0)),
        redis_stock: inside.redis_stock,
        pg_left: i64::from(sale.stock_total - inside.sold),
        sold: inside.sold,
        orders: inside.orders,
        queues: vec![
            ("orders", "Orders", inside.order_queue),
            ("deadlines", "Payment deadlines", inside.deadline_queue),
        ],
    })?)
}

/// `POST /admin/sales/{id}/redrive`: put a queue's dead-lettered jobs back.
pub(crate) async fn redrive(
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
    form: web::Form<RedriveForm>,
) -> Result<HttpResponse, PageError> {
    authenticate(&state, &request).await?;
    let sale = find_sale(&state, &path).await?;
    state.store.redrive(sale.id, form.queue).await?;
    Ok(see_other(&format!("/admin/sales/{}", sale.id)))
}

/// Check a presented admin token, with the lock-out: a client address (as
/// `client_ip.rs` tells it) with too many attempts is refused (`429`)
/// before its token is even compared; every attempt is counted first, and
/// a right token clears the count.
pub(crate) async fn admit(
    state: &AppState,
    request: &HttpRequest,
    presented: Option<&str>,
) -> Result<(), ApiError> {
    let client = client_ip::of(request, &state.limits.trusted_proxies)
        .map_or_else(|| "unknown".to_owned(), |address| address.to_string());
    // Counted before the comparison, so that guesses sent all at once are
    // counted before any of them is compared (see lua/login_failure.lua).
    let (attempts, left) = state
        .store
        .note_login_attempt(&client, FAILURE_WINDOW)
        .await?;
    if attempts > MAX_FAILED_LOGINS {
        tracing::warn!(client, "admin token refused: locked out");
        return Err(ApiError::RateLimited(left));
    }
    let checked = state.admin.check(presented);
    match &checked {
        Ok(()) => state.store.clear_login_attempts(&client).await?,
        Err(_) => tracing::warn!(client, attempts, "wrong admin token"),
    }
    checked
}
