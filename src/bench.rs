//! `execplane bench`: figures, never assertions.

pub mod pipeline;
pub mod store;

use anyhow::Context;

use crate::config::Config;
use crate::store::Store;

/// A schema of a bench's own, created on the configured database and
/// dropped afterwards unless kept.
pub(crate) struct ScratchSchema {
    admin: Store,
    pub name: String,
}

impl ScratchSchema {
    pub(crate) async fn create(config: &Config, name: String) -> anyhow::Result<Self> {
        let admin = Store::connect(&config.database_url, 1, None)
            .await
            .context("connecting to Postgres")?;
        sqlx::query(&format!("CREATE SCHEMA {name}"))
            .execute(admin.pool())
            .await?;
        Ok(Self { admin, name })
    }

    pub(crate) async fn finish(self, keep: bool) -> anyhow::Result<()> {
        if !keep {
            sqlx::query(&format!("DROP SCHEMA {} CASCADE", self.name))
                .execute(self.admin.pool())
                .await?;
        }
        Ok(())
    }
}
