//! The load test's verifier against real PostgreSQL and Redis: a kept
//! promise passes, and each way of breaking it fails the check that names it.

use seckill_core::domain::NewSale;
use seckill_core::store::Store;
use seckill_loadtest::verify::{Expect, Findings, RunFacts, verify};
use seckill_tools::loadrun::verify_keys;
use sqlx::PgPool;
use uuid::Uuid;

use crate::helpers::Scratch;

/// A sale of 5 units sold to `winners` with everything consistent: orders
/// confirmed in PostgreSQL, `sold` counted, Redis stock and buyers matching.
struct World {
    pg: PgPool,
    redis: redis::aio::MultiplexedConnection,
    scratch: Scratch,
    facts: RunFacts,
}

impl World {
    async fn new(winners: usize) -> Self {
        let scratch = Scratch::new().await;
        let pg = scratch.pg().await;
        let mut redis = redis::Client::open(scratch.redis_url())
            .expect("URL")
            .get_multiplexed_async_connection()
            .await
            .expect("Redis");
        let pool = seckill_core::redis_pool::connect_redis(
            &scratch.redis,
            std::time::Duration::from_secs(5),
        )
        .await
        .expect("Redis");
        let new = NewSale::builder("Phone", 5)
            .price_cents(100)
            .build(chrono::Utc::now())
            .expect("a sale");
        let sale = Store::new(pg.clone(), pool, scratch.prefix.clone())
            .create_sale(&new)
            .await
            .expect("create");
        let mut accepted = Vec::new();
        for i in 0..winners {
            let (user, order) = (format!("winner-{i}"), Uuid::now_v7());
            sqlx::query("INSERT INTO orders (id, sale_id, user_id, status) VALUES ($1, $2, $3, 'confirmed')")
                .bind(order)
                .bind(sale.id)
                .bind(&user)
                .execute(&pg)
                .await
                .expect("insert an order");
            accepted.push((user, order));
        }
        sqlx::query("UPDATE sales SET sold = $1 WHERE id = $2")
            .bind(winners as i32)
            .bind(sale.id)
            .execute(&pg)
            .await
            .expect("sold");
        let keys = seckill_core::keys::SaleKeys::new(&scratch.prefix, sale.id);
        let mut pipe = redis::pipe();
        pipe.set(&keys.stock, 5 - winners as i64).ignore();
        for (user, order) in &accepted {
            pipe.hset(&keys.holds, user, order.to_string()).ignore();
        }
        pipe.query_async::<()>(&mut redis)
            .await
            .expect("Redis state");
        Self {
            pg,
            redis,
            scratch,
            facts: RunFacts {
                sale_id: sale.id,
                stock: 5,
                distinct_buyers: 100,
                accepted,
                ..RunFacts::default()
            },
        }
    }

    fn keys(&self) -> seckill_core::keys::SaleKeys {
        seckill_core::keys::SaleKeys::new(&self.scratch.prefix, self.facts.sale_id)
    }

    async fn verify(&mut self, expect: Expect) -> Findings {
        let keys = verify_keys(&self.scratch.prefix, self.facts.sale_id);
        verify(&self.pg, &mut self.redis, &keys, &self.facts, expect)
            .await
            .expect("verify")
    }

    /// The names of the checks that failed.
    async fn failures(&mut self, expect: Expect) -> Vec<&'static str> {
        let verdict = self.verify(expect).await;
        verdict
            .checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| c.name)
            .collect()
    }
}

#[tokio::test]
async fn a_run_that_kept_its_promise_passes_every_check() {
    let mut world = World::new(5).await;
    let verdict = world.verify(Expect::NoOversell).await;
    assert!(verdict.passed(), "{:#?}", verdict.checks);
    assert!(verdict.checks.len() >= 10, "fewer checks than invariants");
}

#[tokio::test]
async fn an_order_promised_by_a_202_but_missing_from_postgres_fails() {
    let mut world = World::new(5).await;
    world.facts.accepted.push(("late".into(), Uuid::now_v7()));
    let failures = world.failures(Expect::NoOversell).await;
    assert!(
        failures.contains(&"accepted orders missing from PostgreSQL"),
        "{failures:?}"
    );
    assert!(
        failures.contains(&"accepted purchases (202) <= units"),
        "{failures:?}"
    );
}

#[tokio::test]
async fn a_confirmed_order_without_a_202_fails() {
    let mut world = World::new(3).await;
    world.facts.accepted.pop();
    let failures = world.failures(Expect::NoOversell).await;
    assert!(
        failures
            .contains(&"confirmed orders are exactly the 202s (nothing lost, nothing invented)"),
        "{failures:?}"
    );
}

/// A winner whose `202` was lost and whose retry's `409` named the order
/// was told as surely: the run passes. A named order that is not the
/// buyer's confirmed one fails, as a wrong `202` would.
#[tokio::test]
async fn a_winner_told_by_a_retrys_409_counts_as_told_and_must_be_right() {
    let mut world = World::new(5).await;
    let told_late = world.facts.accepted.pop().expect("a winner");
    world.facts.recovered.push(told_late.clone());
    let verdict = world.verify(Expect::NoOversell).await;
    assert!(verdict.passed(), "{:#?}", verdict.checks);

    world.facts.recovered = vec![(told_late.0, Uuid::now_v7())];
    let failures = world.failures(Expect::NoOversell).await;
    assert!(
        failures.contains(&"accepted orders missing from PostgreSQL"),
        "{failures:?}"
    );
    assert!(
        failures
            .contains(&"confirmed orders are exactly the 202s (nothing lost, nothing invented)"),
        "{failures:?}"
    );
}

#[tokio::test]
async fn redis_stock_out_of_step_with_postgres_fails() {
    let mut world = World::new(5).await;
    redis::cmd("SET")
        .arg(&world.keys().stock)
        .arg(-1)
        .query_async::<()>(&mut world.redis)
        .await
        .expect("SET");
    let failures = world.failures(Expect::NoOversell).await;
    assert_eq!(failures, ["Redis stock = units - sold, never negative"]);
}

/// Redis' holds name the buyers PostgreSQL has, each for PostgreSQL's
/// order: a buyer held for another order (whom a retry would tell the
/// wrong order) fails, as does a buyer PostgreSQL does not have.
#[tokio::test]
async fn redis_holds_out_of_step_with_postgres_fail() {
    let mut world = World::new(5).await;
    let keys = world.keys();
    let winner = world.facts.accepted[0].0.clone();
    let () = redis::cmd("HSET")
        .arg(&keys.holds)
        .arg(&winner)
        .arg(Uuid::now_v7().to_string())
        .query_async(&mut world.redis)
        .await
        .expect("HSET");
    let verdict = world.verify(Expect::NoOversell).await;
    let check = verdict
        .checks
        .iter()
        .find(|c| c.name == "Redis buyers = PostgreSQL buyers")
        .expect("the buyers' check");
    assert!(!check.passed, "{check:?}");
    assert!(
        check.actual.contains("some with another order"),
        "{check:?}"
    );

    let () = redis::pipe()
        .hset(&keys.holds, &winner, world.facts.accepted[0].1.to_string())
        .ignore()
        .hset(&keys.holds, "ghost", Uuid::now_v7().to_string())
        .ignore()
        .query_async(&mut world.redis)
        .await
        .expect("HSET");
    assert_eq!(
        world.failures(Expect::NoOversell).await,
        ["Redis buyers = PostgreSQL buyers"]
    );
}

#[tokio::test]
async fn a_lock_left_without_a_ttl_and_a_dead_letter_fail() {
    let mut world = World::new(5).await;
    let keys = world.keys();
    redis::pipe()
        .set(&keys.lock, "stuck")
        .ignore()
        .zadd(&keys.queue.dead, "job", 1)
        .ignore()
        .query_async::<()>(&mut world.redis)
        .await
        .expect("bad Redis state");
    let failures = world.failures(Expect::NoOversell).await;
    assert_eq!(
        failures,
        ["dead-lettered jobs", "no lock key without a TTL"]
    );
}

#[tokio::test]
async fn the_oversell_expectation_fails_when_nothing_was_oversold() {
    let mut world = World::new(5).await;
    assert_eq!(
        world.failures(Expect::Oversell).await,
        ["the naive strategy oversold (202s > units)"]
    );
    world.facts.accepted.push(("extra".into(), Uuid::now_v7()));
    // An oversell whose extra order never reached PostgreSQL is still a loss.
    assert_eq!(
        world.failures(Expect::Oversell).await,
        ["accepted orders missing from PostgreSQL"]
    );
}

#[tokio::test]
async fn a_paid_order_holds_its_unit_and_a_cancelled_one_is_named() {
    let mut world = World::new(5).await;
    let (paid, cancelled) = (world.facts.accepted[0].1, world.facts.accepted[1].1);
    sqlx::query("UPDATE orders SET status = 'paid', paid_at = now() WHERE id = $1")
        .bind(paid)
        .execute(&world.pg)
        .await
        .expect("pay");
    let verdict = world.verify(Expect::NoOversell).await;
    assert!(verdict.passed(), "{:#?}", verdict.checks);

    // The payment window runs out on another order mid-run: its unit goes
    // back (as the worker does it), and the run no longer describes the race.
    sqlx::query("UPDATE orders SET status = 'cancelled', cancelled_at = now() WHERE id = $1")
        .bind(cancelled)
        .execute(&world.pg)
        .await
        .expect("cancel");
    sqlx::query("UPDATE sales SET sold = sold - 1 WHERE id = $1")
        .bind(world.facts.sale_id)
        .execute(&world.pg)
        .await
        .expect("return the unit");
    let keys = world.keys();
    redis::pipe()
        .incr(&keys.stock, 1)
        .ignore()
        .hdel(&keys.holds, &world.facts.accepted[1].0)
        .ignore()
        .query_async::<()>(&mut world.redis)
        .await
        .expect("return the unit in Redis");
    let failures = world.failures(Expect::NoOversell).await;
    assert!(
        failures.contains(&"orders cancelled by the payment window during the run"),
        "{failures:?}"
    );
}

/// `observe` judges PostgreSQL's word only: a buyer who got two `202`s
/// (one order confirmed, one refused) and a unit left unsold pass it, and
/// are counted; a `202` PostgreSQL never stored fails it.
#[tokio::test]
async fn the_observe_expectation_counts_double_winners_and_fails_on_a_lost_order() {
    let mut world = World::new(3).await;
    let refused = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO orders (id, sale_id, user_id, status, reason) VALUES ($1, $2, 'winner-0', 'rejected', 'duplicate_buyer')",
    )
    .bind(refused)
    .bind(world.facts.sale_id)
    .execute(&world.pg)
    .await
    .expect("insert the refused order");
    world.facts.accepted.push(("winner-0".into(), refused));
    let findings = world.verify(Expect::Observe).await;
    assert!(findings.passed(), "{:#?}", findings.checks);
    assert_eq!(
        (findings.duplicate_buyers, findings.lost, findings.rejected),
        (1, 0, 1)
    );
    // The same run under `no-oversell` fails: 3 units of 5 sold to 100 buyers.
    assert!(
        world
            .failures(Expect::NoOversell)
            .await
            .contains(&"confirmed orders in PostgreSQL = min(units, distinct buyers)")
    );
    world.facts.accepted.push(("ghost".into(), Uuid::now_v7()));
    assert_eq!(
        world.failures(Expect::Observe).await,
        ["accepted orders missing from PostgreSQL"]
    );
    assert_eq!(world.verify(Expect::Observe).await.lost, 1);
}

/// What the buyers were told beside their `202`s is held to the truth
/// under `no-oversell`: a `sold_out` answered before a winning purchase
/// was sent, and a winner's `409` naming another order, each fail their
/// check. `observe` (the broken strategies) judges PostgreSQL's word alone.
#[tokio::test]
async fn a_sold_out_told_while_a_unit_was_left_and_a_wrong_409_fail_under_no_oversell() {
    let mut world = World::new(5).await;
    world.facts.sold_out_done_us = vec![1_000];
    world.facts.won_sent_us = vec![500, 2_000];
    let winner = world.facts.accepted[0].0.clone();
    world.facts.named = vec![(winner, Uuid::now_v7())];
    assert_eq!(
        world.failures(Expect::NoOversell).await,
        [
            "told sold out while a unit was left (a sold_out answered before a winning purchase was sent)",
            "409s naming another order than the buyer's 202",
        ]
    );
    assert_eq!(world.failures(Expect::Observe).await, Vec::<&str>::new());
}
