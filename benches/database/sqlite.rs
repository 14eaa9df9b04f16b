//! The benchmark's SQLite: a new database file per measurement, in WAL mode
//! with `synchronous=NORMAL` (what most applications set), a pool of one
//! connection per client, one multi-row `INSERT` per transaction.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sqlx::sqlite::SqliteSynchronous;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use sqlx::{AssertSqlSafe, ConnectOptions, Executor, QueryBuilder, Sqlite};

use crate::{Batch, Database, Key, Keys};

pub struct Lite {
    dir: PathBuf,
    pool: Option<SqlitePool>,
}

impl Lite {
    pub fn new(work: &Path, _clients: usize) -> Lite {
        Lite {
            dir: work.to_path_buf(),
            pool: None,
        }
    }

    fn file(&self, key: Key) -> PathBuf {
        self.dir.join(format!("{}.sqlite", key.table()))
    }

    fn pool(&self) -> &SqlitePool {
        self.pool.as_ref().expect("a prepared database")
    }

    async fn scalar(&self, sql: &str) -> i64 {
        sqlx::query_scalar(AssertSqlSafe(sql))
            .fetch_one(self.pool())
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }
}

fn column(key: Key) -> &'static str {
    match key {
        // The rowid: the table's own b-tree key, no index of its own.
        Key::Serial
        | Key::Counter
        | Key::Idutil
        | Key::SerialNull
        | Key::CounterSmall
        | Key::IdutilBefore => "INTEGER PRIMARY KEY",
        // A rowid table with an index on the blob.
        Key::UuidV7 | Key::UuidV4 => "BLOB PRIMARY KEY NOT NULL",
    }
}

impl Database for Lite {
    async fn prepare(&mut self, key: Key, clients: usize) {
        let file = self.file(key);
        let _ = std::fs::remove_file(&file);
        let options = SqliteConnectOptions::new()
            .filename(&file)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            // Clients wait for the one writer.
            .busy_timeout(Duration::from_secs(600))
            .disable_statement_logging();
        let pool = SqlitePoolOptions::new()
            .max_connections(clients as u32)
            .min_connections(clients as u32)
            .connect_with(options)
            .await
            .expect("open the SQLite file");
        let t = key.table();
        for sql in [
            format!(
                "CREATE TABLE {t} (id {}, body TEXT NOT NULL, created INTEGER NOT NULL)",
                column(key)
            ),
            format!("CREATE INDEX {t}_created ON {t} (created)"),
        ] {
            pool.execute(AssertSqlSafe(sql.as_str()))
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        self.pool = Some(pool);
    }

    async fn wal_position(&mut self) -> Option<u64> {
        None
    }

    async fn insert(&self, _client: usize, key: Key, batch: Batch) {
        let t = key.table();
        let rows = batch.bodies.into_iter().zip(batch.created);
        let mut q = match batch.keys {
            Keys::Serial => {
                let mut q =
                    QueryBuilder::<Sqlite>::new(format!("INSERT INTO {t} (body, created) "));
                q.push_values(rows, |mut b, (body, created)| {
                    b.push_bind(body).push_bind(created);
                });
                q
            }
            // The same statement as the given keys', NULL where they bind
            // their key.
            Keys::Null => {
                let mut q =
                    QueryBuilder::<Sqlite>::new(format!("INSERT INTO {t} (id, body, created) "));
                q.push_values(rows, |mut b, (body, created)| {
                    b.push_bind(None::<i64>).push_bind(body).push_bind(created);
                });
                q
            }
            // idutil's keys and the counter's, bound alike.
            Keys::Int(ids) => {
                let mut q =
                    QueryBuilder::<Sqlite>::new(format!("INSERT INTO {t} (id, body, created) "));
                q.push_values(ids.into_iter().zip(rows), |mut b, (id, (body, created))| {
                    b.push_bind(id).push_bind(body).push_bind(created);
                });
                q
            }
            Keys::Uuid(ids) => {
                let mut q =
                    QueryBuilder::<Sqlite>::new(format!("INSERT INTO {t} (id, body, created) "));
                q.push_values(ids.into_iter().zip(rows), |mut b, (id, (body, created))| {
                    b.push_bind(id.into_bytes().to_vec())
                        .push_bind(body)
                        .push_bind(created);
                });
                q
            }
        };
        q.build()
            .execute(self.pool())
            .await
            .unwrap_or_else(|e| panic!("insert into {t}: {e}"));
    }

    async fn sizes(&mut self, key: Key) -> (u64, u64, u64) {
        let t = key.table();
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT name, sum(pgsize) FROM dbstat GROUP BY name")
                .fetch_all(self.pool())
                .await
                .expect("page sizes from dbstat");
        let size = |name: &str| {
            rows.iter()
                .filter(|(n, _)| n == name)
                .map(|(_, s)| *s as u64)
                .sum::<u64>()
        };
        let pk = match key {
            Key::UuidV7 | Key::UuidV4 => size(&format!("sqlite_autoindex_{t}_1")),
            _ => 0,
        };
        assert!(
            !matches!(key, Key::UuidV7 | Key::UuidV4) || pk > 0,
            "no primary-key index found for {t}: {rows:?}"
        );
        (size(t), pk, size(&format!("{t}_created")))
    }

    async fn count(&mut self, key: Key) -> u64 {
        self.scalar(&format!("SELECT count(*) FROM {}", key.table()))
            .await as u64
    }

    async fn analyze(&mut self, key: Key) {
        let sql = format!("ANALYZE {}", key.table());
        self.pool()
            .execute(AssertSqlSafe(sql.as_str()))
            .await
            .expect("ANALYZE");
    }

    async fn query_created(&mut self, key: Key, (from, to): (u64, u64)) -> u64 {
        let t = key.table();
        let (n, _): (i64, i64) = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT count(*), coalesce(sum(length(body)), 0) FROM {t} \
             WHERE created >= ? AND created < ?"
        )))
        .bind((from * 1_000_000) as i64)
        .bind((to * 1_000_000) as i64)
        .fetch_one(self.pool())
        .await
        .expect("the query by created");
        n as u64
    }

    async fn query_id(&mut self, key: Key, (low, high): (i64, i64)) -> u64 {
        let t = key.table();
        let (n, _): (i64, i64) = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT count(*), coalesce(sum(length(body)), 0) FROM {t} \
             WHERE id BETWEEN ? AND ?"
        )))
        .bind(low)
        .bind(high)
        .fetch_one(self.pool())
        .await
        .expect("the query by id");
        n as u64
    }

    async fn finish(&mut self, key: Key) {
        if let Some(pool) = self.pool.take() {
            pool.close().await;
        }
        let file = self.file(key);
        for suffix in ["", "-wal", "-shm"] {
            let mut name = file.clone().into_os_string();
            name.push(suffix);
            let _ = std::fs::remove_file(name);
        }
    }
}
