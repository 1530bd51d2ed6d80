//! A pass's orders travel as one queue job (`domain/pass_job.rs`): each is
//! still found pending from its id alone, the queue hands out a batch by
//! the orders its jobs carry, and an order at fault in a pass costs its
//! pass-mates nothing.

use std::time::Duration;

use seckill_core::domain::{OrderJob, PassIds, UserId, carried, pass_payload};
use seckill_core::queue::{Queue, QueueStats};
use seckill_core::strategy::under_lock;
use uuid::Uuid;

use crate::helpers::{Options, TestApp, spawn_app, spawn_app_with};
use crate::worker::{confirmed, enqueue_orders};

/// One pass of sale `sale` for `users`, its orders drawn as the lock
/// strategy draws them.
async fn pass_of(app: &TestApp, sale: i64, users: &[&str]) -> (Uuid, Vec<OrderJob>) {
    let key = app.store.pass_key().await.expect("the key");
    let mut pass = PassIds::new(sale, key);
    let orders = users
        .iter()
        .map(|user| pass.order(&UserId::parse(user).expect("a valid id")))
        .collect();
    (pass.job_id(), orders)
}

/// Put one pass's orders straight on a sale's queue as job `job`, as the
/// lock's commit queues them.
async fn enqueue_pass(app: &TestApp, sale: i64, job: Uuid, orders: &[OrderJob]) {
    let (id, payload) = (job.to_string(), pass_payload(orders));
    Queue::new(app.keys(sale).queue)
        .enqueue(
            &mut app.redis_conn().await,
            &[(id.as_str(), payload.as_str())],
            Duration::ZERO,
        )
        .await
        .expect("enqueue");
}

/// Put passes of `users` straight on a sale's queue, one job each.
async fn enqueue_passes(app: &TestApp, sale: i64, passes: &[&[&str]]) {
    for users in passes {
        let (job, orders) = pass_of(app, sale, users).await;
        enqueue_pass(app, sale, job, &orders).await;
    }
}

/// An app whose worker gives a job `max_attempts`, and a sale of 5 units.
async fn app_with_attempts(max_attempts: u32) -> (TestApp, i64) {
    let mut options = Options::default();
    options.worker.max_attempts = max_attempts;
    let app = spawn_app_with(options).await;
    let sale = app.create_sale(5).await;
    (app, sale)
}

/// [`pass_of`] `users`, bob's order among them one that can never be
/// written: its buyer id is too long.
async fn pass_with_bad_bob(app: &TestApp, sale: i64, users: &[&str]) -> (Uuid, Vec<OrderJob>) {
    let (job, mut orders) = pass_of(app, sale, users).await;
    for order in &mut orders {
        if order.user_id == "bob" {
            order.user_id = "x".repeat(100);
        }
    }
    (job, orders)
}

/// A queue's `(waiting, in flight, dead)`.
fn counts(stats: QueueStats) -> (u64, u64, u64) {
    (stats.waiting, stats.in_flight, stats.dead)
}

/// The lock's commit queues a pass as one job; each of its orders answers
/// `pending` from its id before the worker writes it, and `confirmed`
/// after; an id of the pass that the commit did not take is not found.
#[tokio::test]
async fn a_pass_is_one_job_and_each_of_its_orders_is_found_by_its_id() {
    let app = spawn_app().await;
    let sale = app.create_sale(10).await;
    let (mut conn, holder) = app.take_lock(sale, Duration::from_secs(30)).await;
    let (job, mut orders) = pass_of(&app, sale, &["ann", "bob", "cat", "dan"]).await;
    let untaken = orders.pop().expect("four orders");
    let left = under_lock::commit(&mut conn, &app.keys(sale), &holder, job, &orders)
        .await
        .expect("commit");
    assert_eq!(left, Some(7));
    assert_eq!(
        app.queue_stats(sale).await.waiting,
        1,
        "one job for the pass"
    );

    for order in &orders {
        let answer = app.order(order.order_id).await;
        assert_eq!(answer["status"], "pending", "{answer}");
        assert_eq!(answer["user_id"], order.user_id.as_str(), "{answer}");
    }
    let answer = app.order(untaken.order_id).await;
    assert_eq!(answer["error"], "order_not_found", "{answer}");

    let report = app.drain().await;
    assert_eq!((report.reserved, report.confirmed), (3, 3));
    for order in &orders {
        assert_eq!(app.order(order.order_id).await["status"], "confirmed");
    }
}

/// A batch holds at most the reserve's weight in orders, however they are
/// packed: passes of 5 against a limit of 8 go one at a time, a limit of
/// 10 takes two, and a pass heavier than the limit is still taken alone
/// (a batch never stalls on it). Jobs of one order weigh 1, and fill what
/// a pass leaves.
#[tokio::test]
async fn the_queue_hands_out_a_batch_by_the_orders_its_jobs_carry() {
    let app = spawn_app().await;
    let sale = app.create_sale(100).await;
    let five = ["a", "b", "c", "d", "e"];
    enqueue_passes(&app, sale, &[&five, &five, &five]).await;
    let queue = Queue::new(app.keys(sale).queue);
    let mut conn = app.redis_conn().await;
    let lease = Duration::from_secs(30);
    let orders_in = |taken: &seckill_core::queue::Reservation| -> Vec<usize> {
        taken
            .jobs
            .iter()
            .map(|job| carried(&job.payload).expect("a pass").len())
            .collect()
    };
    let taken = queue
        .reserve(&mut conn, 8, lease, 5)
        .await
        .expect("reserve");
    assert_eq!(orders_in(&taken), [5]);
    let taken = queue
        .reserve(&mut conn, 2, lease, 5)
        .await
        .expect("reserve");
    assert_eq!(orders_in(&taken), [5], "a pass heavier than the limit");
    // Due a millisecond or more apart, so that the queue's order (its
    // due times, then the ids) is the order they were queued in.
    tokio::time::sleep(Duration::from_millis(5)).await;
    enqueue_passes(&app, sale, &[&five, &five]).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    enqueue_orders(&app, sale, &["x".into(), "y".into(), "z".into()]).await;
    let taken = queue
        .reserve(&mut conn, 10, lease, 5)
        .await
        .expect("reserve");
    assert_eq!(orders_in(&taken), [5, 5]);
    let taken = queue
        .reserve(&mut conn, 10, lease, 5)
        .await
        .expect("reserve");
    assert_eq!(orders_in(&taken), [5, 1, 1, 1]);
    assert_eq!(
        counts(queue.stats(&mut conn).await.expect("stats")),
        (0, 8, 0)
    );
}

/// An order PostgreSQL refuses for a reason of its own (a buyer id the
/// table's CHECK forbids, as a corrupted job would carry) costs its
/// pass-mates nothing: they are confirmed at once, the pass's job is
/// charged and comes again, its confirmed orders are skipped then, and
/// once out of attempts the job is dead-lettered with only the bad order
/// unwritten.
#[tokio::test]
async fn an_order_at_fault_in_a_pass_is_written_around() {
    let (app, sale) = app_with_attempts(2).await;
    let (job, orders) = pass_with_bad_bob(&app, sale, &["ann", "bob", "cat"]).await;
    enqueue_pass(&app, sale, job, &orders).await;

    let first = app.drain().await;
    assert_eq!((first.confirmed, first.failed), (2, 1));
    assert_eq!(confirmed(&app, sale).await, 2);
    assert_eq!(
        counts(app.queue_stats(sale).await),
        (1, 0, 0),
        "the pass's job is charged and comes again"
    );

    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let second = app.drain().await;
    assert_eq!(
        (second.confirmed, second.redelivered, second.failed),
        (0, 2, 1)
    );
    assert_eq!(confirmed(&app, sale).await, 2);
    assert_eq!(counts(app.queue_stats(sale).await), (0, 0, 1));
}

/// An order at fault, then PostgreSQL refusing the next order of the same
/// pass as an outage would (a trigger answering `57014`, a cancelled
/// statement, for `dan` only): the worker gives the job back uncharged,
/// though it is at its last attempt, since dan's order was never tried.
/// Once the outage is over, the next delivery writes dan's order, and the
/// job goes to the dead-letter set for bob's alone. Charged at the
/// outage, it took dan's order there untried, a `202` never written.
#[tokio::test]
async fn an_outage_after_an_order_at_fault_dead_letters_no_untried_order() {
    let (app, sale) = app_with_attempts(1).await;
    sqlx::raw_sql(
        "CREATE FUNCTION outage_for_dan() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF NEW.user_id = 'dan' THEN
             RAISE EXCEPTION 'an outage, for dan' USING ERRCODE = '57014';
           END IF;
           RETURN NEW;
         END $$;
         CREATE TRIGGER outage_for_dan BEFORE INSERT ON orders
           FOR EACH ROW EXECUTE FUNCTION outage_for_dan();",
    )
    .execute(&app.pg)
    .await
    .expect("the trigger");
    let (job, orders) = pass_with_bad_bob(&app, sale, &["ann", "bob", "dan"]).await;
    enqueue_pass(&app, sale, job, &orders).await;

    let outage = app.worker.run_once().await;
    assert!(outage.is_err(), "dan's outage ended no batch: {outage:?}");
    assert_eq!(confirmed(&app, sale).await, 1, "ann's order is written");
    assert_eq!(
        counts(app.queue_stats(sale).await),
        (1, 0, 0),
        "the job, at its last attempt, was charged at the outage"
    );

    sqlx::raw_sql("DROP TRIGGER outage_for_dan ON orders")
        .execute(&app.pg)
        .await
        .expect("the outage over");
    let after = app.drain().await;
    assert_eq!((after.confirmed, after.failed), (1, 1));
    assert_eq!(confirmed(&app, sale).await, 2, "ann's and dan's orders");
    assert_eq!(counts(app.queue_stats(sale).await), (0, 0, 1));
}

/// An order at fault, and then a PostgreSQL that takes 0.4 s for each
/// order alone (a trigger): the orders written one by one take the
/// write's time limit too, half the lease (1 s here), as the batch's one
/// write does. Past it, the rest of the job goes back uncharged, though
/// it is at its last attempt: the worker does not write on past its
/// lease while the queue hands the job to another and charges it. (Before,
/// the one-by-one writes had no bound: all five orders written in 2 s,
/// past the lease, and the job charged for bob and dead-lettered.)
#[tokio::test]
async fn orders_written_one_by_one_stop_within_the_writes_time_limit() {
    let mut options = Options::default();
    options.worker.max_attempts = 1;
    options.worker.lease_ms = 2_000;
    let app = spawn_app_with(options).await;
    let sale = app.create_sale(10).await;
    sqlx::raw_sql(
        "CREATE FUNCTION slow_alone() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF (SELECT count(*) FROM inserted) = 1 THEN
             PERFORM pg_sleep(0.4);
           END IF;
           RETURN NULL;
         END $$;
         CREATE TRIGGER slow_alone AFTER INSERT ON orders
           REFERENCING NEW TABLE AS inserted
           FOR EACH STATEMENT EXECUTE FUNCTION slow_alone();",
    )
    .execute(&app.pg)
    .await
    .expect("the trigger");
    let users = ["ann", "bob", "cy", "dan", "eve", "fay"];
    let (job, orders) = pass_with_bad_bob(&app, sale, &users).await;
    enqueue_pass(&app, sale, job, &orders).await;

    let cut = app.worker.run_once().await;
    assert!(cut.is_err(), "the writes ran past their limit: {cut:?}");
    let written = confirmed(&app, sale).await;
    assert!(
        (1..5).contains(&written),
        "{written} of five orders written in the limit"
    );
    assert_eq!(
        counts(app.queue_stats(sale).await),
        (1, 0, 0),
        "the job, at its last attempt, given back uncharged"
    );
}
