//! The storefront's index (`GET /?page=N`): the sales, live first, then
//! upcoming, sold out and ended, with their units left.
//!
//! A page is built from one PostgreSQL query (its sales) and one Redis
//! read (`MGET` of their stocks); the first page is then kept for
//! [`FRESH_FOR`] and served to every request in that time: it costs the
//! servers the same whether a hundred or a hundred thousand people open it
//! each second. A figure on it may be up to [`FRESH_FOR`] old; the sale
//! page, where people buy, reads its stock on every request and follows it
//! live.
//!
//! The index is paged, [`PER_PAGE`] sales a page, so that every sale can
//! be reached and no page grows with the number of sales. PostgreSQL sorts
//! and cuts the list (one scan of `sales` and a top-N sort), and Redis
//! reads the page's stocks only. The first page, the one people open, is
//! built at most once per [`FRESH_FOR`]; pages after it are built for each
//! request, a few at a time ([`IndexCache`]): they are for the few who
//! browse the archive.

use std::time::Duration;

use actix_web::http::header::ContentType;
use actix_web::web::Bytes;
use actix_web::{HttpResponse, web};
use askama::Template;
use chrono::Utc;

use crate::error::{ApiError, PageError};
use crate::lookup::SaleView;
use crate::state::AppState;
use seckill_core::domain::SaleStatus;

/// How long a built first page is served before the next request builds
/// it again.
pub(crate) const FRESH_FOR: Duration = Duration::from_millis(250);
/// Sales listed per page.
pub(crate) const PER_PAGE: u32 = 20;

#[derive(Template)]
#[template(path = "index.html")]
struct IndexPage {
    sections: Vec<Section>,
    /// This page's number, from 1.
    page: u32,
    /// How many pages the sales fill.
    pages: u32,
    /// Sales in all.
    total: i64,
}

/// One heading of the index (live, upcoming, ended) and its sales on this
/// page.
struct Section {
    title: &'static str,
    sales: Vec<SaleView>,
}

/// `GET /?page=N`.
#[derive(serde::Deserialize)]
pub(crate) struct IndexQuery {
    page: Option<String>,
}

impl IndexQuery {
    /// The page asked for: 1 when none is.
    fn page(&self) -> Result<u32, ApiError> {
        let Some(raw) = &self.page else {
            return Ok(1);
        };
        raw.parse().ok().filter(|page| *page >= 1).ok_or_else(|| {
            ApiError::invalid(format!("page must be a whole number from 1, not {raw:?}"))
        })
    }
}

pub(crate) async fn index(
    state: web::Data<AppState>,
    query: web::Query<IndexQuery>,
) -> Result<HttpResponse, PageError> {
    let page = query.page()?;
    let body = if page == 1 {
        // Called only when the page is rebuilt: the task gets a handle of
        // its own on the state.
        let build = || {
            let state = state.clone();
            async move { build(&state, 1).await.map(Bytes::from) }
        };
        state
            .index
            .first
            .get(state.store.runtime(), FRESH_FOR, build)
            .await?
            .1
    } else {
        let _turn = state
            .index
            .archive
            .acquire()
            .await
            .map_err(anyhow::Error::from)?;
        Bytes::from(build(&state, page).await?)
    };
    Ok(HttpResponse::Ok()
        .content_type(ContentType::html())
        .body(body))
}

/// Page `page`, from PostgreSQL's sales and Redis' stocks; `NotFound` past
/// the last page (the first always exists, empty or not).
async fn build(state: &AppState, page: u32) -> Result<String, ApiError> {
    let now = Utc::now();
    let listed = state
        .store
        .sales_page(
            now,
            i64::from(page - 1) * i64::from(PER_PAGE),
            i64::from(PER_PAGE),
        )
        .await?;
    if listed.sales.is_empty() && page > 1 {
        return Err(ApiError::NotFound);
    }
    let ids: Vec<i64> = listed.sales.iter().map(|sale| sale.id).collect();
    let left = state.store.stocks_left(&ids).await?;
    // PostgreSQL gives the rows live first, then upcoming, then ended
    // (`sales_page`); a sale sold out in its window is in the first part,
    // but only Redis' stock, read at the same `now`, tells it from a live
    // one: it is listed under its own heading, after what can still be
    // bought. Within a heading, the rows keep their order.
    let mut sections: Vec<Section> = ["Live now", "Upcoming", "Sold out", "Ended"]
        .into_iter()
        .map(|title| Section {
            title,
            sales: Vec::new(),
        })
        .collect();
    for (sale, left) in listed.sales.iter().zip(left) {
        let view = SaleView::new_at(sale, left, now);
        let section = match view.status {
            SaleStatus::Live => 0,
            SaleStatus::Upcoming => 1,
            SaleStatus::SoldOut => 2,
            SaleStatus::Ended => 3,
        };
        sections[section].sales.push(view);
    }
    sections.retain(|section| !section.sales.is_empty());
    let pages = u64::try_from(listed.total)
        .unwrap_or(0)
        .div_ceil(u64::from(PER_PAGE));
    Ok(IndexPage {
        sections,
        page,
        pages: u32::try_from(pages).unwrap_or(u32::MAX),
        total: listed.total,
    }
    .render()
    .map_err(anyhow::Error::from)?)
}
