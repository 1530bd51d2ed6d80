//! The room's door, as Redis keeps it: whether a buyer's admission may
//! buy (the room holds them as admitted, and it has not bought), and the
//! mark of one that bought, for the strategies that do not check and
//! spend it in their own commit (`lua/purchase_commit.lua` and
//! `lua/purchase_lua.lua` do).

use std::sync::LazyLock;

use anyhow::Context;
use redis::Script;
use redis::aio::ConnectionLike;

use crate::config::RedisDurability;
use crate::domain::{Pass, PassKey, PassKind, UserId};
use crate::keys::SaleKeys;
use crate::replicas;
use crate::scripts;
use crate::store::Store;

static BOUGHT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/room_bought.lua")));

/// Where a buyer's admission stands in the room's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtTheDoor {
    /// Admitted, and not bought: it may buy.
    MayBuy,
    /// It bought already (the buyer holds a unit, or held one that came
    /// back): an admission buys once.
    Spent,
    /// The room does not hold the buyer as admitted: their admission ran
    /// out (on Redis' clock, swept or not), or Redis lost it (a wipe, a
    /// failover under `local`), so a signed admission is not honoured
    /// (`Outcome::NotAdmitted`).
    NotHeld,
}

/// Where `buyer`'s admission to sale's room stands, and whether that is
/// confirmed: under `--redis-durability replica`, a refusal read from
/// data no replica holds is not final (a failover could bring back the
/// admission, or take back the purchase that spent it), so a refusal is
/// read again with a write and a `WAIT` behind it, in the read's own
/// pipeline (`replicas::all_and_confirmed`), and answered from that read;
/// `false` when no replica confirmed it in time. A `MayBuy` is not waited
/// for: the purchase that follows decides, and waits for its own.
pub async fn at_the_door(
    store: &Store,
    sale_id: i64,
    buyer: &str,
) -> anyhow::Result<(AtTheDoor, bool)> {
    let keys = SaleKeys::new(store.prefix(), sale_id);
    let mut conn = store.redis().await?;
    // One standing for one buyer: `standings` checks the count.
    let (first, _) = standings(&mut conn, &keys, &[buyer], RedisDurability::Local).await?;
    if first[0] == AtTheDoor::MayBuy || store.durability() == RedisDurability::Local {
        return Ok((first[0], true));
    }
    let (standings, confirmed) = standings(&mut conn, &keys, &[buyer], store.durability()).await?;
    Ok((standings[0], confirmed))
}

/// Where each of `buyers`' admissions to sale's room stands, in their
/// order, read in one round trip. Not confirmed under `replica`: for a
/// caller whose answers are in doubt there anyway (a lock commit whose
/// answer was lost, `strategy/under_lock/lost.rs`).
pub async fn at_the_door_all(
    store: &Store,
    sale_id: i64,
    buyers: &[&str],
) -> anyhow::Result<Vec<AtTheDoor>> {
    let keys = SaleKeys::new(store.prefix(), sale_id);
    let mut conn = store.redis().await?;
    let (standings, _) = standings(&mut conn, &keys, buyers, RedisDurability::Local).await?;
    Ok(standings)
}

/// The standings of `buyers`, one each, in their order, and whether a
/// replica holds what they were read from as `durability` asks (always
/// under `local`).
async fn standings<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &SaleKeys,
    buyers: &[&str],
    durability: RedisDurability,
) -> anyhow::Result<(Vec<AtTheDoor>, bool)> {
    // One snapshot, a transaction: the unit's return moves a buyer from
    // the holds to the bought in one step (`lua/unit_return.lua`), and a
    // purchase takes them off the admitted in the step that names them in
    // the holds. Redis' clock is read in it too: an admission whose end
    // (its score among the admitted) has passed there is not held, though
    // no visit has swept it out yet and the instance's clock, running
    // behind, still calls it valid (as the commit scripts judge it). The
    // `WAIT` goes behind it in the same pipeline, not in the transaction
    // (where it would not wait).
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    pipe.cmd("MULTI");
    for buyer in buyers {
        bought_reads(&mut pipe, keys, buyer);
        pipe.zscore(&keys.room.admitted, *buyer);
    }
    pipe.cmd("TIME");
    pipe.cmd("EXEC");
    // MULTI's `OK`, a `QUEUED` for each read, and EXEC's answers.
    let queued = 3 * buyers.len() + 1;
    let (answers, confirmed) =
        replicas::all_and_confirmed(conn, pipe, queued + 2, durability, &keys.waited)
            .await
            .context("reading a waiting room")?;
    let mut answers = answers.into_iter();
    let exec = answers
        .nth(queued + 1)
        .context("reading a waiting room: no transaction's answer")?
        .context("reading a waiting room")?;
    let mut found: Vec<redis::Value> =
        redis::from_redis_value(exec).context("reading a waiting room's answers")?;
    if found.len() != queued {
        anyhow::bail!(
            "reading a waiting room: {} answers for {} buyers",
            found.len(),
            buyers.len()
        );
    }
    let (secs, micros): (i64, i64) =
        redis::from_redis_value(found.pop().unwrap_or(redis::Value::Nil))
            .context("reading Redis' clock")?;
    let now_ms = (secs * 1000 + micros / 1000) as f64;
    let mut standings = Vec::with_capacity(buyers.len());
    for reads in found.chunks_exact(3) {
        let holds: bool = redis::from_redis_value_ref(&reads[0])?;
        let bought: bool = redis::from_redis_value_ref(&reads[1])?;
        let admitted: Option<f64> = redis::from_redis_value_ref(&reads[2])?;
        standings.push(if holds || bought {
            AtTheDoor::Spent
        } else if admitted.is_none_or(|ends| ends <= now_ms) {
            AtTheDoor::NotHeld
        } else {
            AtTheDoor::MayBuy
        });
    }
    Ok((standings, confirmed))
}

/// Add to `pipe` the two reads that say whether `buyer`'s admission
/// bought: it did when either answers 1 (the holds name them, or the
/// room's bought holds them: keys.rs, `RoomKeys::bought`). The one place
/// outside `lua/room_visit.lua` that says where "bought" is kept.
pub fn bought_reads(pipe: &mut redis::Pipeline, keys: &SaleKeys, buyer: &str) {
    pipe.hexists(&keys.holds, buyer)
        .sismember(&keys.room.bought, buyer);
}

/// `buyer`'s admission bought: spent, and their place among the active
/// goes to the next in line (`lua/room_bought.lua`).
pub async fn bought(store: &Store, sale_id: i64, buyer: &UserId) -> anyhow::Result<()> {
    let keys = SaleKeys::new(store.prefix(), sale_id);
    let mut conn = store.redis().await?;
    let _: i64 = scripts::run(
        &mut conn,
        &BOUGHT,
        BOUGHT
            .key(&keys.room.admitted)
            .key(&keys.room.bought)
            .key(&keys.room.state)
            .key(&keys.holds)
            .arg(buyer.as_str()),
    )
    .await
    .context("spending an admission")?;
    Ok(())
}

/// The signed admission of a buyer admitted until `until_ms`.
pub fn admission(key: &PassKey, sale_id: i64, buyer: &UserId, until_ms: i64) -> String {
    key.sign(
        PassKind::Admission,
        &Pass {
            sale_id,
            buyer: buyer.clone(),
            number: 0,
            generation: 0,
            expires_ms: until_ms,
        },
    )
}

/// Seat `buyers` among the admitted at once, until `until_ms`, past the
/// line and the room's pace: for a bench that measures what the door
/// costs a purchase, not the line (`seckill bench --only roomed`), whose
/// buyers outnumber what any pace would admit in its run. Nothing a
/// buyer asks for calls it.
pub async fn seat(
    store: &Store,
    sale_id: i64,
    buyers: &[String],
    until_ms: i64,
) -> anyhow::Result<()> {
    let keys = SaleKeys::new(store.prefix(), sale_id);
    let mut conn = store.redis().await?;
    for chunk in buyers.chunks(10_000) {
        let members: Vec<(i64, &str)> = chunk.iter().map(|b| (until_ms, b.as_str())).collect();
        let _: i64 = redis::cmd("ZADD")
            .arg(&keys.room.admitted)
            .arg(&members)
            .query_async(&mut conn)
            .await
            .context("seating buyers among the admitted")?;
    }
    Ok(())
}
