//! The waiting rooms' signing key (`database_identity.room_key`, drawn by
//! its migration, the same for every instance on this database), and which
//! sales have a room worth reporting.

use anyhow::Context;

use super::Store;
use crate::domain::PassKey;

impl Store {
    /// The key the rooms' tickets and admissions are signed with; read from
    /// PostgreSQL on first use, then kept for the life of the process.
    pub async fn pass_key(&self) -> anyhow::Result<&PassKey> {
        self.pass_key
            .get_or_try_init(|| async {
                let key: Vec<u8> = sqlx::query_scalar("SELECT room_key FROM database_identity")
                    .fetch_one(&self.pg)
                    .await
                    .context("reading the rooms' signing key")?;
                anyhow::Ok(PassKey::new(key))
            })
            .await
    }
}

impl Store {
    /// The sales with a waiting room that have not ended, or ended within
    /// the rooms' grace (`--room-grace-secs`: their keys are still there,
    /// and their figures still move: admissions run out, buyers ask): what
    /// `/metrics` reports, bounded by the live sales.
    pub async fn room_sale_ids(&self) -> anyhow::Result<Vec<i64>> {
        sqlx::query_scalar(
            "SELECT id FROM sales WHERE room_mode IS NOT NULL \
             AND (ends_at IS NULL OR ends_at > now() - make_interval(secs => $1)) ORDER BY id",
        )
        .bind(self.room_grace.as_secs_f64())
        .fetch_all(&self.pg)
        .await
        .context("listing the sales with a waiting room")
    }
}
