//! `seckill sale create`: create a sale and print it as JSON.

use anyhow::Context;
use chrono::Utc;

use crate::cli::{CreateSaleArgs, CreatedSale};
use seckill_core::domain::NewSale;
use seckill_core::store::{self, Store};
use seckill_devenv::services::Services;

/// Create the sale `args` describe, in PostgreSQL and Redis.
pub(super) async fn create(
    services: &Services,
    prefix: &str,
    args: CreateSaleArgs,
) -> anyhow::Result<()> {
    let now = Utc::now();
    // Seconds beyond i64 are refused by the builder's range check, like any
    // other out-of-range number.
    let seconds = |secs: u64| i64::try_from(secs).unwrap_or(i64::MAX);
    let room = args.room();
    let mut new = NewSale::builder(args.name, i64::from(args.stock))
        .price_cents(args.price_cents)
        .starts_in(seconds(args.starts_in));
    if let Some(duration) = args.duration {
        new = new.lasts(seconds(duration));
    }
    if let Some(room) = room {
        new = new.waiting_room(room);
    }
    let new = new.build(now).context("invalid sale")?;
    let pg = store::connect_postgres(&services.database_url).await?;
    let redis =
        seckill_core::redis_pool::connect_redis(&services.redis, std::time::Duration::from_secs(3))
            .await?;
    let sale = Store::new(pg, redis, prefix).create_sale(&new).await?;
    println!(
        "{}",
        serde_json::to_string_pretty(&CreatedSale::new(&sale, now)).expect("a sale serializes")
    );
    Ok(())
}
