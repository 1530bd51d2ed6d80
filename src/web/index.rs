//! The storefront's index (`GET /`): every sale, live first, with its units
//! left.
//!
//! Built from one PostgreSQL query (the sales) and one Redis read (`MGET`
//! of their stocks), then kept for [`FRESH_FOR`] and served to every
//! request in that time: the index costs the servers the same whether a
//! hundred or a hundred thousand people open it each second. A figure on
//! it may be up to [`FRESH_FOR`] old; the sale page, where people buy,
//! reads its stock on every request and follows it live.
//!
//! Each section shows at most [`SHOWN_PER_SECTION`] sales, newest first, and
//! says how many more there are: a page of a thousand rows is a page nobody
//! reads, and its bytes would cost more than all the rest.

use std::time::Duration;

use actix_web::http::header::ContentType;
use actix_web::web::Bytes;
use actix_web::{HttpResponse, web};
use askama::Template;

use super::AppState;
use super::api::SaleView;
use super::error::ApiError;
use super::fresh::Fresh;
use crate::domain::SaleStatus;

/// How long a built index is served before the next request builds it again.
pub const FRESH_FOR: Duration = Duration::from_millis(250);
/// Sales listed per section (live, upcoming, ended).
pub const SHOWN_PER_SECTION: usize = 50;

#[derive(Template)]
#[template(path = "index.html")]
struct IndexPage {
    sections: Vec<Section>,
}

/// One heading of the index and its sales.
struct Section {
    title: &'static str,
    /// The newest [`SHOWN_PER_SECTION`] of them.
    sales: Vec<SaleView>,
    /// How many more the section has than it shows.
    more: usize,
}

/// The index as last built, shared by every request of this instance (one
/// rebuild at a time, see `fresh.rs`). A sale created on this instance
/// drops it (`Fresh::forget`): its admin expects to see it listed.
pub type IndexCache = Fresh<Bytes>;

pub async fn index(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let build = || async { build(&state).await.map(Bytes::from) };
    let (_, body) = state.index.get(FRESH_FOR, build).await?;
    Ok(HttpResponse::Ok()
        .content_type(ContentType::html())
        .body(body))
}

/// The page, from PostgreSQL's sales and Redis' stocks.
async fn build(state: &AppState) -> Result<String, ApiError> {
    let sales = state.store.sales().await?;
    let ids: Vec<i64> = sales.iter().map(|sale| sale.id).collect();
    let left = state.store.stocks_left(&ids).await?;
    let (mut live, mut upcoming, mut ended) = (Vec::new(), Vec::new(), Vec::new());
    for (sale, left) in sales.iter().zip(left) {
        let view = SaleView::new(sale, left);
        match view.status {
            SaleStatus::Upcoming => upcoming.push(view),
            SaleStatus::Live | SaleStatus::SoldOut => live.push(view),
            SaleStatus::Ended => ended.push(view),
        }
    }
    let sections = [("Live now", live), ("Upcoming", upcoming), ("Ended", ended)]
        .into_iter()
        .filter(|(_, sales)| !sales.is_empty())
        .map(|(title, mut sales)| {
            let more = sales.len().saturating_sub(SHOWN_PER_SECTION);
            sales.truncate(SHOWN_PER_SECTION);
            Section { title, sales, more }
        })
        .collect();
    Ok(IndexPage { sections }
        .render()
        .map_err(anyhow::Error::from)?)
}
