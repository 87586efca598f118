//! `execplane bench`: figures, never assertions.

pub mod ansible;
pub mod kubernetes;
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
        let admin = Store::connect(&config.database.url, 1, None)
            .await
            .context("connecting to Postgres")?;
        admin.create_schema(&name).await?;
        Ok(Self { admin, name })
    }

    pub(crate) async fn finish(self, keep: bool) -> anyhow::Result<()> {
        if !keep {
            self.admin.drop_schema(&self.name).await?;
        }
        Ok(())
    }
}
