//! What the benchmarks ask of Postgres: scratch schemas, the rows a run
//! wrote, and the bare-pipeline baseline's plain inserts.

use super::{Store, StoreError};

/// A schema name the benchmarks may create: letters, digits, underscores.
fn checked(name: &str) -> Result<&str, StoreError> {
    if !name.is_empty()
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
    {
        Ok(name)
    } else {
        Err(StoreError::Corrupt(format!("not a schema name: `{name}`")))
    }
}

impl Store {
    pub async fn create_schema(&self, name: &str) -> Result<(), StoreError> {
        sqlx::query(&format!("CREATE SCHEMA {}", checked(name)?))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn drop_schema(&self, name: &str) -> Result<(), StoreError> {
        sqlx::query(&format!("DROP SCHEMA {} CASCADE", checked(name)?))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The schemas bench runs created (`execplane_bench_*`).
    pub async fn bench_schemas(&self) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'execplane\\_bench\\_%' ORDER BY 1",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Where the cluster's WAL ends now.
    pub async fn wal_lsn(&self) -> Result<String, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT pg_current_wal_insert_lsn()::text")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// Bytes of WAL written since `lsn` ([`Store::wal_lsn`]).
    pub async fn wal_bytes_since(&self, lsn: &str) -> Result<u64, StoreError> {
        let bytes: i64 = sqlx::query_scalar(
            "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint",
        )
        .bind(lsn)
        .fetch_one(&self.pool)
        .await?;
        Ok(bytes.max(0) as u64)
    }

    /// Rows inserted and updated in the tables of `schema` so far, but for
    /// the tables named in `except`.
    pub async fn rows_written(&self, schema: &str, except: &[&str]) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT COALESCE(sum(n_tup_ins + n_tup_upd), 0)::bigint FROM pg_stat_user_tables
             WHERE schemaname = $1 AND relname <> ALL($2)",
        )
        .bind(schema)
        .bind(except)
        .fetch_one(&self.pool)
        .await?)
    }

    /// The bare baseline: `rows` rows of 300 bytes in 500-row inserts into
    /// a table of their own (in this store's schema).
    pub async fn insert_bare_rows(&self, rows: u64) -> Result<(), StoreError> {
        sqlx::query(
            "CREATE TABLE bare_rows (id bigint PRIMARY KEY, key text NOT NULL, payload bytea NOT NULL)",
        )
        .execute(&self.pool)
        .await?;
        let mut next = 0u64;
        while next < rows {
            let count = (rows - next).min(500);
            sqlx::query(
                "INSERT INTO bare_rows SELECT g, g::text, decode(repeat('78', 300), 'hex')
                 FROM generate_series($1::bigint, $2::bigint) g",
            )
            .bind(i64::try_from(next).unwrap_or(i64::MAX))
            .bind(i64::try_from(next + count - 1).unwrap_or(i64::MAX))
            .execute(&self.pool)
            .await?;
            next += count;
        }
        Ok(())
    }
}
