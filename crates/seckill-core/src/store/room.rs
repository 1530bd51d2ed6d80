//! The waiting rooms' signing key: `database_identity.room_key`, drawn by
//! its migration, the same for every instance on this database.

use anyhow::Context;

use super::Store;
use crate::domain::PassKey;

impl Store {
    /// The key the rooms' tickets and admissions are signed with; read from
    /// PostgreSQL on first use, then kept for the life of the process.
    pub async fn pass_key(&self) -> anyhow::Result<PassKey> {
        self.pass_key
            .get_or_try_init(|| async {
                let key: Vec<u8> = sqlx::query_scalar("SELECT room_key FROM database_identity")
                    .fetch_one(&self.pg)
                    .await
                    .context("reading the rooms' signing key")?;
                anyhow::Ok(PassKey::new(key))
            })
            .await
            .cloned()
    }
}
