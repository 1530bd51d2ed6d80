//! The writes that take a unit for an order: the worker confirming a batch
//! from the queue ([`Store::confirm_orders`]), and the `postgres` strategy
//! taking a unit and storing its order in one step
//! ([`Store::take_in_postgres`]). Both change `sales.sold`, so PostgreSQL's
//! CHECK (`sold <= stock_total`) and the one-live-order-per-buyer index
//! have the last word on each.
//!
//! The worker's write is one transaction per batch. It first tries the
//! whole batch in one statement: an `INSERT ... SELECT FROM unnest(...)` of
//! every order, with `sold` raised by the number inserted in the same
//! statement (a data-modifying `WITH`). That is the common case, and its
//! transaction costs four round trips however large the batch: `BEGIN` with
//! the statement timeout, the fence, the write, `COMMIT`. If PostgreSQL
//! refuses it (the sale has fewer units left than the batch, or a buyer
//! already holds one), that transaction is rolled back, and a second one
//! writes the batch one order at a time, a savepoint per order, so that a
//! refused order rolls back alone and is stored as `rejected`. The order id
//! is the primary key, so a redelivered job is never written twice. The
//! batch's statement is a plain `INSERT`: `ON CONFLICT` costs PostgreSQL
//! a tenth more per row, and only a redelivered batch has an order to
//! skip. The key refuses such a batch, and it is tried once more in one
//! statement with `ON CONFLICT (id) DO NOTHING`, which skips the stored
//! orders; the order-by-order write skips them the same way.

use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use sqlx::{Acquire, Postgres, Transaction};

use super::{Store, schema};
use crate::config::WorkerSettings;
use crate::domain::{OrderJob, RejectReason};
use crate::keys::SaleKeys;

/// What became of one order job in PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Inserted as confirmed; it took a unit.
    Confirmed,
    /// PostgreSQL refused it (sale full, or buyer already holds a unit);
    /// stored as rejected.
    Rejected,
    /// This order id was already stored: a redelivery, and a no-op.
    AlreadyThere,
}

/// What a batch's write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirmation {
    /// Written: what became of each order, in order, and the payment
    /// deadline of those it confirmed, one for all: the transaction's
    /// `now()` plus the window.
    Written {
        written: Vec<Written>,
        pay_by: DateTime<Utc>,
    },
    /// Nothing written: the sale was loaded into Redis again after the
    /// batch was reserved, so the batch's orders belong to a Redis that
    /// lost them (a wipe), and the new one sells their units again.
    /// `recorded` is the epoch PostgreSQL held when it refused (the one a
    /// repair may write over, `Store::record_load_epoch`).
    Superseded { recorded: Option<String> },
}

/// A batch's transaction behind the load's fence, with the payment
/// deadline of the orders it confirms, or the fence's refusal.
enum Fenced {
    Open(Transaction<'static, Postgres>, DateTime<Utc>),
    Closed { recorded: Option<String> },
}

/// What the `postgres` strategy's transaction decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// The unit is taken and the order stored as confirmed, to be paid
    /// by `pay_by`.
    Confirmed { pay_by: DateTime<Utc> },
    /// No unit was left.
    SoldOut,
    /// The buyer already holds a unit of this sale.
    AlreadyPurchased,
}

impl Store {
    /// Write a batch of orders of one sale in one transaction, each with its
    /// payment deadline from now on PostgreSQL's clock, unless the sale was
    /// loaded into Redis again since the batch was reserved: `epoch` is the
    /// sale's load epoch the worker read from Redis before it reserved (see
    /// `migrations/20261124000001_load_epoch.sql`). Returns what became of
    /// each order, in order, or [`Confirmation::Superseded`] with nothing
    /// written. Tests call it to play a worker that dies between this
    /// commit and the ack.
    pub async fn confirm_orders(
        &self,
        orders: &[OrderJob],
        settings: &WorkerSettings,
        epoch: Option<&str>,
    ) -> Result<Confirmation, sqlx::Error> {
        let Some(first) = orders.first() else {
            // No order, no deadline to queue: any moment will do.
            let pay_by = Utc::now() + settings.payment_window();
            return Ok(Confirmation::Written {
                written: Vec::new(),
                pay_by,
            });
        };
        // The whole batch in one statement: as it is, and for a redelivery
        // once more skipping the orders stored already. Each try that is
        // refused leaves nothing once rolled back, and the next takes the
        // fence again (a load may have come in between).
        let mut skip_stored = false;
        loop {
            let (mut tx, pay_by) = match self.fenced(first.sale_id, settings, epoch).await? {
                Fenced::Open(tx, pay_by) => (tx, pay_by),
                Fenced::Closed { recorded } => return Ok(Confirmation::Superseded { recorded }),
            };
            match confirm_all(&mut tx, orders, pay_by, skip_stored).await? {
                Whole::Written(written) => {
                    tx.commit().await?;
                    return Ok(Confirmation::Written { written, pay_by });
                }
                refused => {
                    tx.rollback().await?;
                    match refused {
                        Whole::HasStored if !skip_stored => skip_stored = true,
                        _ => break,
                    }
                }
            }
        }
        // Refused for a unit or a buyer: order by order, to find which.
        let (mut tx, pay_by) = match self.fenced(first.sale_id, settings, epoch).await? {
            Fenced::Open(tx, pay_by) => (tx, pay_by),
            Fenced::Closed { recorded } => return Ok(Confirmation::Superseded { recorded }),
        };
        let mut written = Vec::with_capacity(orders.len());
        for order in orders {
            written.push(confirm_order(&mut tx, order, pay_by).await?);
        }
        tx.commit().await?;
        Ok(Confirmation::Written { written, pay_by })
    }

    /// A transaction for a batch of `sale_id`, behind the load's fence:
    /// closed, with nothing written, when the sale was loaded into Redis
    /// again since the batch was reserved (`epoch`, see
    /// [`Store::confirm_orders`]).
    async fn fenced(
        &self,
        sale_id: i64,
        settings: &WorkerSettings,
        epoch: Option<&str>,
    ) -> Result<Fenced, sqlx::Error> {
        // Each statement ends well inside the batch's lease (see
        // `WorkerSettings::statement_timeout`), for this transaction only;
        // sent with the BEGIN, in one round trip. (A number of our own, not
        // input: nothing to escape.)
        let begin = format!(
            "BEGIN; SET LOCAL statement_timeout = {}",
            settings.statement_timeout().as_millis()
        );
        let mut tx = self.pg.begin_with(begin).await?;
        // The load's fence: the sale's row, locked until the commit, so no
        // load can read between this check and the writes. `FOR KEY SHARE`,
        // the weakest row lock, is enough and lets the batches of one sale
        // write side by side: a load takes the row `FOR UPDATE`
        // (`store/load.rs`), which waits for every batch holding it and
        // holds off every batch that comes after; two batches' locks do not
        // conflict, nor does a batch's raising of `sold` (its UPDATE takes
        // the row's `FOR NO KEY UPDATE`), which is where the batches take
        // turns, the later one adding to the row the earlier committed.
        // (The epoch repair, `Store::record_load_epoch`, is not held off,
        // and needs not be: it only compares and sets PostgreSQL's record,
        // and a batch that passed this fence found it equal to Redis'
        // epoch, which only a load, held off, can change.)
        //
        // Read with it, once for the whole transaction: its orders'
        // payment deadline, which they all share (one deadline job for
        // them, `worker/deadlines.rs`), on PostgreSQL's clock.
        let (recorded, pay_by): (Option<String>, DateTime<Utc>) = sqlx::query_as(
            "SELECT load_epoch, now() + make_interval(secs => $2)
               FROM sales WHERE id = $1 FOR KEY SHARE",
        )
        .bind(sale_id)
        .bind(settings.payment_window().as_secs_f64())
        .fetch_one(&mut *tx)
        .await?;
        if recorded.is_some() && recorded.as_deref() != epoch {
            return Ok(Fenced::Closed { recorded });
        }
        // And Redis' epoch, read under the same row lock: a load that
        // wrote Redis and then failed to record its epoch here (a reply
        // timeout, a failed COMMIT) left PostgreSQL's record as the batch
        // saw it, while the new Redis sells the batch's units again. No
        // load can run while the row is locked, so what Redis says now
        // holds until the commit. (Redis not answering is "try again".)
        let keys = SaleKeys::new(self.prefix(), sale_id);
        if let Some(epoch) = epoch {
            let held = self
                .epoch_still(&keys, epoch)
                .await
                .map_err(|error| sqlx::Error::Io(std::io::Error::other(format!("{error:#}"))))?;
            if !held {
                return Ok(Fenced::Closed { recorded });
            }
        }
        Ok(Fenced::Open(tx, pay_by))
    }

    /// Whether Redis' epoch of the sale (`keys`) is still `epoch`, the one
    /// a batch was reserved under; called holding the sale's row, so that
    /// no load can change it before the batch commits. (Redis not
    /// answering is an error: "try again".)
    ///
    /// Redis holding no epoch at all lost the sale (a restart without
    /// persistence), and nobody loaded it yet: a load after this commit
    /// counts it. Except a load still on its way, which read PostgreSQL
    /// before this commit and lost its reply: the epoch is marked
    /// `committed:<epoch>`, so that such a load finds the sale moved on
    /// and writes nothing (`lua/sale_load.lua`). The mark names the
    /// batch's epoch, so the other batches reserved under it, in flight
    /// beside this one when Redis was lost, find it theirs and commit too:
    /// a mark of its own for each batch refused every batch but the first,
    /// and their orders, told `202`, were lost though no load had come.
    /// A load that landed first wrote another epoch: refused.
    async fn epoch_still(&self, keys: &SaleKeys, epoch: &str) -> anyhow::Result<bool> {
        let mark = format!("committed:{epoch}");
        let mut conn = self.redis().await?;
        let now = super::load::epoch(&mut conn, keys).await?;
        if let Some(now) = now {
            return Ok(now == epoch || now == mark);
        }
        let marked: Option<String> = redis::cmd("SET")
            .arg(&keys.epoch)
            .arg(&mark)
            .arg("NX")
            .query_async(&mut conn)
            .await
            .context("marking the sale's load epoch")?;
        if marked.is_some() {
            return Ok(true);
        }
        // Set meanwhile: by a batch beside this one (the same mark), not by
        // a load, which waits for this batch's hold on the row.
        let now = super::load::epoch(&mut conn, keys).await?;
        Ok(now.as_deref() == Some(mark.as_str()))
    }

    /// The `postgres` strategy's whole purchase, in one transaction: take a
    /// unit with one conditional UPDATE (the row lock serialises buyers of
    /// the sale: the database as the lock), and store the order confirmed,
    /// with its payment deadline `window` from now. A buyer who already
    /// holds a unit is refused by the unique index, and the unit goes back
    /// with the rollback.
    pub(crate) async fn take_in_postgres(
        &self,
        order: &OrderJob,
        window: Duration,
    ) -> Result<Taken, sqlx::Error> {
        let mut tx = self.pg.begin().await?;
        let taken =
            sqlx::query("UPDATE sales SET sold = sold + 1 WHERE id = $1 AND sold < stock_total")
                .bind(order.sale_id)
                .execute(&mut *tx)
                .await?;
        if taken.rows_affected() == 0 {
            return Ok(Taken::SoldOut);
        }
        let stored: Result<DateTime<Utc>, _> = sqlx::query_scalar(
            "INSERT INTO orders (id, sale_id, user_id, status, pay_by)
             VALUES ($1, $2, $3, 'confirmed', now() + make_interval(secs => $4))
             RETURNING pay_by",
        )
        .bind(order.order_id)
        .bind(order.sale_id)
        .bind(&order.user_id)
        .bind(window.as_secs_f64())
        .fetch_one(&mut *tx)
        .await;
        match stored {
            Ok(pay_by) => {
                tx.commit().await?;
                Ok(Taken::Confirmed { pay_by })
            }
            Err(error) if schema::violates(&error, schema::ONE_ORDER_PER_BUYER) => {
                Ok(Taken::AlreadyPurchased)
            }
            Err(error) => Err(error),
        }
    }
}

/// What became of a batch written in one statement.
enum Whole {
    /// Written: what became of each order, in order.
    Written(Vec<Written>),
    /// Refused by the order id's key: an order of the batch is stored
    /// already (a redelivery).
    HasStored,
    /// Refused for a unit or a buyer: the sale has fewer units left than
    /// the batch (the CHECK on `sold`), or a buyer of the batch already
    /// holds a unit (the unique index).
    Refused,
}

/// The whole batch of one sale in one statement: every order inserted, and
/// `sold` raised by the number inserted. When PostgreSQL refuses it, the
/// statement wrote nothing, and the transaction can only be rolled back.
///
/// A plain `INSERT` unless `skip_stored`: `ON CONFLICT (id) DO NOTHING`
/// costs PostgreSQL a speculative insertion for every row, and only a
/// redelivered batch has an order to skip, which the key then refuses
/// ([`Whole::HasStored`]); the caller tries again skipping them.
async fn confirm_all(
    tx: &mut Transaction<'_, Postgres>,
    orders: &[OrderJob],
    pay_by: DateTime<Utc>,
    skip_stored: bool,
) -> Result<Whole, sqlx::Error> {
    let Some(first) = orders.first() else {
        return Ok(Whole::Written(Vec::new()));
    };
    let ids: Vec<uuid::Uuid> = orders.iter().map(|order| order.order_id).collect();
    let users: Vec<&str> = orders.iter().map(|order| order.user_id.as_str()).collect();
    // Both parts of a data-modifying WITH run once, whatever the outer
    // SELECT reads; the UPDATE sees the INSERT's rows only through its
    // RETURNING.
    // One of two texts of our own, not input: nothing to escape.
    let skip = match skip_stored {
        true => "ON CONFLICT (id) DO NOTHING",
        false => "",
    };
    let statement = format!(
        "WITH inserted AS (
             INSERT INTO orders (id, sale_id, user_id, status, pay_by)
             SELECT id, $2, user_id, 'confirmed', $4
               FROM unnest($1::uuid[], $3::text[]) AS batch(id, user_id)
             {skip}
             RETURNING id
         ), taken AS (
             UPDATE sales SET sold = sold + (SELECT count(*) FROM inserted)
              WHERE id = $2 AND EXISTS (SELECT 1 FROM inserted)
         )
         SELECT id FROM inserted"
    );
    let inserted: Result<Vec<uuid::Uuid>, sqlx::Error> = sqlx::query_scalar(&statement)
        .bind(&ids)
        .bind(first.sale_id)
        .bind(&users)
        .bind(pay_by)
        .fetch_all(&mut **tx)
        .await;
    let inserted = match inserted {
        Ok(inserted) => inserted,
        Err(error) if schema::violates(&error, schema::ORDER_ID) => return Ok(Whole::HasStored),
        Err(error)
            if schema::violates(&error, schema::ONE_ORDER_PER_BUYER)
                || schema::violates(&error, schema::SOLD_WITHIN_STOCK) =>
        {
            return Ok(Whole::Refused);
        }
        Err(error) => return Err(error),
    };
    if inserted.len() == orders.len() {
        return Ok(Whole::Written(vec![Written::Confirmed; orders.len()]));
    }
    let inserted: std::collections::HashSet<uuid::Uuid> = inserted.into_iter().collect();
    Ok(Whole::Written(
        orders
            .iter()
            .map(|order| match inserted.contains(&order.order_id) {
                true => Written::Confirmed,
                false => Written::AlreadyThere,
            })
            .collect(),
    ))
}

/// Insert one order, with its payment deadline `pay_by`. Each order gets
/// a savepoint, so that a refused order
/// rolls back only itself, and is then stored as rejected.
async fn confirm_order(
    tx: &mut Transaction<'_, Postgres>,
    order: &OrderJob,
    pay_by: DateTime<Utc>,
) -> Result<Written, sqlx::Error> {
    let mut savepoint = tx.begin().await?;
    let inserted = sqlx::query(
        "INSERT INTO orders (id, sale_id, user_id, status, pay_by)
         VALUES ($1, $2, $3, 'confirmed', $4)
         ON CONFLICT (id) DO NOTHING",
    )
    .bind(order.order_id)
    .bind(order.sale_id)
    .bind(&order.user_id)
    .bind(pay_by)
    .execute(&mut *savepoint)
    .await;
    let refused = match inserted {
        Ok(done) if done.rows_affected() == 0 => {
            // Redelivered: this order id is already stored.
            savepoint.commit().await?;
            return Ok(Written::AlreadyThere);
        }
        Ok(_) => {
            // Only a newly inserted order takes a unit. The CHECK
            // (sold <= stock_total) refuses the unit if none is left.
            let taken = sqlx::query("UPDATE sales SET sold = sold + 1 WHERE id = $1")
                .bind(order.sale_id)
                .execute(&mut *savepoint)
                .await;
            match taken {
                Ok(_) => {
                    savepoint.commit().await?;
                    return Ok(Written::Confirmed);
                }
                Err(error) if schema::violates(&error, schema::SOLD_WITHIN_STOCK) => {
                    RejectReason::SoldOut
                }
                Err(error) => return Err(error),
            }
        }
        Err(error) if schema::violates(&error, schema::ONE_ORDER_PER_BUYER) => {
            RejectReason::DuplicateBuyer
        }
        Err(error) => return Err(error),
    };
    savepoint.rollback().await?;
    tracing::warn!(
        order_id = %order.order_id,
        sale_id = order.sale_id,
        user_id = %order.user_id,
        reason = refused.as_str(),
        "oversell attempt refused by PostgreSQL"
    );
    sqlx::query(
        "INSERT INTO orders (id, sale_id, user_id, status, reason) VALUES ($1, $2, $3, 'rejected', $4)
         ON CONFLICT (id) DO NOTHING",
    )
    .bind(order.order_id)
    .bind(order.sale_id)
    .bind(&order.user_id)
    .bind(refused)
    .execute(&mut **tx)
    .await?;
    Ok(Written::Rejected)
}
