//! The payment window: a confirmed order is paid in time, or cancelled.
//!
//! When the worker confirms orders it sets their deadline, `pay_by`, on
//! PostgreSQL's clock (one for the orders of one transaction), and puts a
//! delayed job for that moment on the sale's deadline queue (the article's
//! delay queue: the same [`Queue`](crate::queue::Queue), other keys), due
//! when the window closes. The buyer pays with [`pay`]; when the deadline
//! job comes due, the worker calls [`Store::cancel_unpaid`], and gives the
//! unit of each cancelled order of that moment back in Redis with
//! [`return_unit`] (once per order: a redelivery may find them cancelled
//! by an earlier delivery that died before this step).
//!
//! The race: the buyer presses Pay at the very moment the deadline job runs.
//! Both sides are one conditional `UPDATE ... WHERE status = 'confirmed'`,
//! and PostgreSQL lets exactly one of them change the row; the comment at
//! the top of `store/orders.rs` walks through it. A payment that lost is
//! answered `409 payment_window_closed`; a cancellation that lost gives
//! nothing back.
//!
//! "The window is open" is judged on one clock, PostgreSQL's: a payment is
//! accepted only while `now() < pay_by`. The deadline job is timed by Redis'
//! clock (queue due times always are); on one machine the two agree, and
//! where they do not, the conditional updates still let only one side win.
//!
//! Giving the unit back touches PostgreSQL (the order, `sales.sold`) and
//! Redis (the stock, the holds hash), which share no transaction. PostgreSQL
//! goes first; the job is acknowledged only after both. A worker that dies
//! between the two steps leaves the job to be delivered again; the second
//! delivery finds the order already cancelled and still runs the Redis step,
//! which is idempotent (`lua/unit_return.lua`).

use std::sync::LazyLock;

use anyhow::Context;
use redis::Script;
use redis::aio::ConnectionLike;
use uuid::Uuid;

use crate::domain::{Order, OrderJob};
use crate::keys::SaleKeys;
use crate::queue::queue_script;
use crate::scripts;
use crate::store::{self, PayOutcome, Store};

static UNIT_RETURN: LazyLock<Script> = queue_script!("lua/unit_return.lua");

/// Why a payment was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayRefused {
    /// The order was cancelled, or its deadline has passed.
    WindowClosed,
    /// PostgreSQL refused the order; it holds no unit to pay for.
    Rejected,
    /// Still on the queue: not confirmed yet, so not payable yet.
    Pending,
    /// No such order anywhere.
    NotFound,
}

/// Pay for an order (simulated: no money moves). Paying a paid order
/// again changes nothing and answers as the first payment did. Returns the
/// order as it stands after the payment.
pub async fn pay(store: &Store, order_id: Uuid) -> anyhow::Result<Result<Order, PayRefused>> {
    let paid = store.pay(order_id).await?;
    if paid == PayOutcome::Paid {
        crate::metrics::metrics().orders("paid", 1);
    }
    Ok(match paid {
        PayOutcome::Paid | PayOutcome::AlreadyPaid => store
            .find_order(order_id)
            .await?
            .ok_or(PayRefused::NotFound),
        PayOutcome::WindowClosed => Err(PayRefused::WindowClosed),
        PayOutcome::Rejected => Err(PayRefused::Rejected),
        // Not in PostgreSQL when we paid. Still queued, or confirmed
        // since: either way, not payable a moment ago; try again.
        PayOutcome::NotFound => match store.find_order(order_id).await? {
            Some(_) => Err(PayRefused::Pending),
            None => Err(PayRefused::NotFound),
        },
    })
}

/// The error for a script answer this code does not know: a script and its
/// caller out of step, which no retry will fix.
pub(crate) fn unexpected_answer(script: &'static str, answer: &str) -> redis::RedisError {
    (
        redis::ErrorKind::UnexpectedReturnType,
        script,
        format!("unknown answer {answer:?}"),
    )
        .into()
}

/// What the Redis half of a deadline did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitReturn {
    /// The unit is back on sale; this many units are left now.
    Returned { stock_left: i64 },
    /// Nothing to give back: this order's unit was returned before.
    AlreadyReturned,
    /// The sale is not loaded in Redis; loading it from PostgreSQL will
    /// count the cancellation.
    SaleNotLoaded,
}

/// The Redis half of a deadline: give a cancelled order's unit back to the
/// stock, let its buyer buy again (but not with the waiting-room admission
/// that bought it), and publish the new units left. Safe to
/// call any number of times for one order (see `lua/unit_return.lua`).
pub async fn return_unit<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &SaleKeys,
    order: &OrderJob,
) -> redis::RedisResult<UnitReturn> {
    let (status, left): (String, i64) = scripts::run(
        conn,
        &UNIT_RETURN,
        UNIT_RETURN
            .key(&keys.stock)
            .key(&keys.holds)
            .key(&keys.returned)
            .key(&keys.room.bought)
            .key(&keys.room.state)
            .arg(order.order_id.to_string())
            .arg(&order.user_id)
            .arg(&keys.events),
    )
    .await?;
    Ok(match status.as_str() {
        "returned" => UnitReturn::Returned { stock_left: left },
        "already_returned" => UnitReturn::AlreadyReturned,
        "not_loaded" => UnitReturn::SaleNotLoaded,
        other => return Err(unexpected_answer("unit_return.lua", other)),
    })
}

/// The Redis half of a deadline, whatever state Redis is in. If the sale is
/// not loaded (Redis lost it), load it from PostgreSQL, which already counts
/// the cancellation, and ask again.
///
/// The race this closes: a page starts loading the sale and reads
/// PostgreSQL while the order is still confirmed; the deadline cancels it
/// and finds the sale not loaded; the page then writes what it read, with
/// the order's unit taken and its buyer in the set. Had the deadline simply
/// been acknowledged, Redis would hold one unit fewer than PostgreSQL, and
/// refuse that buyer, for ever. Loading the sale here first makes either
/// order of events end right: if our load lands first, the page's stale
/// write finds the stock key present and writes nothing; if the page's
/// write lands first, our second call finds the buyer in the set and gives
/// the unit back.
pub(crate) async fn give_unit_back<C: ConnectionLike + Send>(
    store: &Store,
    conn: &mut C,
    keys: &SaleKeys,
    order: &OrderJob,
) -> anyhow::Result<UnitReturn> {
    for _ in 0..2 {
        match return_unit(conn, keys, order)
            .await
            .context("giving a unit back in Redis")?
        {
            UnitReturn::SaleNotLoaded => {
                store::load::load_into_redis(store.pg(), conn, store.prefix(), order.sale_id)
                    .await?;
            }
            done => return Ok(done),
        }
    }
    anyhow::bail!(
        "sale {} is not loaded in Redis even after loading it",
        order.sale_id
    )
}
