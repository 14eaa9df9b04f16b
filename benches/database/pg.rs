//! The benchmark's PostgreSQL: a server of its own, a pool of one
//! connection per client, rows sent as arrays (`UNNEST`), one `INSERT` per
//! transaction.

use idutil_harness::postgres::Postgres;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, ConnectOptions, Executor};

use crate::{Batch, Database, Key, Keys};

pub struct Pg {
    pool: PgPool,
    // Last, so the pool closes before the server stops.
    _server: Postgres,
}

impl Pg {
    /// Starts a server for `clients` clients, or `None` when PostgreSQL is
    /// not installed (after the harness's notice; a panic under `CI=true`).
    pub async fn start(clients: usize) -> Option<Pg> {
        let server = Postgres::start_for_benchmark()?;
        let options: PgConnectOptions = server.url().parse().expect("the server's URL");
        let pool = PgPoolOptions::new()
            .max_connections(clients as u32)
            .min_connections(clients as u32)
            .connect_with(options.disable_statement_logging())
            .await
            .expect("connect to the benchmark's server");
        Some(Pg {
            pool,
            _server: server,
        })
    }

    async fn scalar(&self, sql: &str) -> i64 {
        sqlx::query_scalar(AssertSqlSafe(sql))
            .fetch_one(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }
}

fn column(key: Key) -> &'static str {
    match key {
        Key::Serial => "bigserial",
        Key::Idutil => "bigint",
        Key::UuidV7 | Key::UuidV4 => "uuid",
        _ => unreachable!("{key:?} is measured in SQLite only (Key::runs_in)"),
    }
}

/// Microseconds since the Unix epoch as a `timestamptz`.
const AT: &str = "'epoch'::timestamptz + c * interval '1 microsecond'";

impl Database for Pg {
    async fn prepare(&mut self, key: Key, _clients: usize) {
        let t = key.table();
        for sql in [
            format!("DROP TABLE IF EXISTS {t}"),
            format!(
                "CREATE TABLE {t} (id {} PRIMARY KEY, body text NOT NULL, \
                 created timestamptz NOT NULL)",
                column(key)
            ),
            format!("CREATE INDEX {t}_created ON {t} (created)"),
            // Each measurement starts with no dirty pages and a new round
            // of full-page images in the log.
            "CHECKPOINT".into(),
        ] {
            self.pool
                .execute(AssertSqlSafe(sql.as_str()))
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    }

    async fn wal_position(&mut self) -> Option<u64> {
        let lsn = self
            .scalar("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::int8")
            .await;
        Some(lsn as u64)
    }

    async fn insert(&self, _client: usize, key: Key, batch: Batch) {
        let t = key.table();
        let result = match batch.keys {
            Keys::Serial => {
                sqlx::query(AssertSqlSafe(format!(
                    "INSERT INTO {t} (body, created) SELECT b, {AT} \
                     FROM UNNEST($1::text[], $2::int8[]) AS u(b, c)"
                )))
                .bind(batch.bodies)
                .bind(batch.created)
                .execute(&self.pool)
                .await
            }
            Keys::Int(ids) => {
                sqlx::query(AssertSqlSafe(format!(
                    "INSERT INTO {t} (id, body, created) SELECT i, b, {AT} \
                     FROM UNNEST($1::int8[], $2::text[], $3::int8[]) AS u(i, b, c)"
                )))
                .bind(ids)
                .bind(batch.bodies)
                .bind(batch.created)
                .execute(&self.pool)
                .await
            }
            Keys::Null => unreachable!("measured in SQLite only"),
            Keys::Uuid(ids) => {
                sqlx::query(AssertSqlSafe(format!(
                    "INSERT INTO {t} (id, body, created) SELECT i, b, {AT} \
                     FROM UNNEST($1::uuid[], $2::text[], $3::int8[]) AS u(i, b, c)"
                )))
                .bind(ids)
                .bind(batch.bodies)
                .bind(batch.created)
                .execute(&self.pool)
                .await
            }
        };
        result.unwrap_or_else(|e| panic!("insert into {t}: {e}"));
    }

    async fn sizes(&mut self, key: Key) -> (u64, u64, u64) {
        let t = key.table();
        let (table, pk, created): (i64, i64, i64) = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT pg_table_size('{t}'), pg_relation_size('{t}_pkey'), \
             pg_relation_size('{t}_created')"
        )))
        .fetch_one(&self.pool)
        .await
        .expect("the sizes");
        (table as u64, pk as u64, created as u64)
    }

    async fn count(&mut self, key: Key) -> u64 {
        self.scalar(&format!("SELECT count(*) FROM {}", key.table()))
            .await as u64
    }

    async fn analyze(&mut self, key: Key) {
        // What autovacuum would have done by the time anyone queries: the
        // statistics, and the visibility map index-only scans rely on.
        let sql = format!("VACUUM ANALYZE {}", key.table());
        self.pool
            .execute(AssertSqlSafe(sql.as_str()))
            .await
            .expect("VACUUM ANALYZE");
    }

    async fn query_created(&mut self, key: Key, (from, to): (u64, u64)) -> u64 {
        let t = key.table();
        let (n, _): (i64, i64) = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT count(*), coalesce(sum(length(body)), 0) FROM {t} \
             WHERE created >= to_timestamp($1) AND created < to_timestamp($2)"
        )))
        .bind(from as f64)
        .bind(to as f64)
        .fetch_one(&self.pool)
        .await
        .expect("the query by created");
        n as u64
    }

    async fn query_id(&mut self, key: Key, (low, high): (i64, i64)) -> u64 {
        let t = key.table();
        let (n, _): (i64, i64) = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT count(*), coalesce(sum(length(body)), 0) FROM {t} \
             WHERE id BETWEEN $1 AND $2"
        )))
        .bind(low)
        .bind(high)
        .fetch_one(&self.pool)
        .await
        .expect("the query by id");
        n as u64
    }

    async fn finish(&mut self, key: Key) {
        let sql = format!("DROP TABLE {}", key.table());
        self.pool
            .execute(AssertSqlSafe(sql.as_str()))
            .await
            .expect("drop the table");
    }
}
