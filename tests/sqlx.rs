//! `Id` as a sqlx column against real databases: a SQLite file and a
//! PostgreSQL server started for the test (see `tests/harness/src/postgres.rs`).
//! IDs go in as `Id`, come back as `Id` (in `FromRow` structs and as
//! scalars), sort by time, and are found by a range query between
//! `Id::min_at` and `Id::max_at`. Values that are not IDs are decode
//! errors, not panics.

#![cfg(feature = "sqlx")]

use idutil_harness as harness;

use std::time::{Duration, UNIX_EPOCH};

use idutil::Id;
use sqlx::{Database, Decode, Encode, Type, TypeInfo};

const T0: u64 = 1_700_000_000;

/// A row of `records`: sqlx reads it as `FromRow`, which a derived struct
/// is too (the doctest of `Id`'s `Type` impl), and which sqlx 0.8 also has.
type Record = (Id, String);

/// IDs from two generators (shards 3 and 30) over five seconds, 40 per
/// second each, plus the smallest and largest IDs; in an order that is
/// not the sorted one.
fn ids() -> Vec<Id> {
    let mut ids = harness::ids_from_shards(&[30, 3], T0, 5, 40);
    ids.push(Id::MAX);
    ids.push(Id::MIN);
    ids.reverse();
    ids
}

fn at(unix: u64) -> std::time::SystemTime {
    UNIX_EPOCH + Duration::from_secs(unix)
}

/// The same checks on any pool, written once for both databases and both
/// sqlx majors (`$sqlx`: `sqlx` or `sqlx08`; sqlx's traits make a generic
/// function heavier to read than this).
macro_rules! exercise {
    ($sqlx:ident, $pool:expr, $create:expr) => {{
        let pool = $pool;
        $sqlx::query($create).execute(pool).await.unwrap();
        let ids = ids();
        for (i, id) in ids.iter().enumerate() {
            $sqlx::query("INSERT INTO records (id, text) VALUES ($1, $2)")
                .bind(id)
                .bind(format!("record {i}"))
                .execute(pool)
                .await
                .unwrap();
        }

        // Read back in id order: the sorted IDs, each exactly.
        let records: Vec<Record> = $sqlx::query_as("SELECT id, text FROM records ORDER BY id")
            .fetch_all(pool)
            .await
            .unwrap();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(records.iter().map(|r| r.0).collect::<Vec<_>>(), sorted);
        assert_eq!(records.first().unwrap().0, Id::MIN);
        assert_eq!(records.last().unwrap().0, Id::MAX);
        harness::assert_unique_set(&records.iter().map(|r| u64::from(r.0)).collect::<Vec<_>>());

        // One by key.
        let wanted = ids[17];
        let one: Record = $sqlx::query_as("SELECT id, text FROM records WHERE id = $1")
            .bind(wanted)
            .fetch_one(pool)
            .await
            .unwrap();
        assert_eq!(one.0, wanted);

        // A range by time, on every shard: seconds T0+1 ..= T0+3.
        let (low, high) = (
            Id::min_at(at(T0 + 1)).unwrap(),
            Id::max_at(at(T0 + 3)).unwrap(),
        );
        let found: Vec<Id> =
            $sqlx::query_scalar("SELECT id FROM records WHERE id BETWEEN $1 AND $2 ORDER BY id")
                .bind(low)
                .bind(high)
                .fetch_all(pool)
                .await
                .unwrap();
        let expected = harness::issued_between(&ids, T0 + 1, T0 + 3);
        assert_eq!(expected.len(), 2 * 3 * 40, "both shards, three seconds");
        assert_eq!(found, expected);
        // A single second.
        let found: Vec<Id> =
            $sqlx::query_scalar("SELECT id FROM records WHERE id BETWEEN $1 AND $2 ORDER BY id")
                .bind(Id::min_at(at(T0 + 4)).unwrap())
                .bind(Id::max_at(at(T0 + 4)).unwrap())
                .fetch_all(pool)
                .await
                .unwrap();
        assert_eq!(found, harness::issued_between(&ids, T0 + 4, T0 + 4));
        assert_eq!(found.len(), 80);

        // Stored as a plain integer: the database sees the same number.
        let raw: i64 = $sqlx::query_scalar("SELECT id FROM records WHERE id = $1")
            .bind(Id::MAX)
            .fetch_one(pool)
            .await
            .unwrap();
        assert_eq!(raw, 9_007_199_254_740_991);

        // Values that are not IDs fail to decode, with the reason.
        for (value, why) in [
            (-1i64, "negative"),
            (i64::MIN, "negative"),
            (1 << 53, "above 2^53 - 1"),
            (i64::MAX, "above 2^53 - 1"),
        ] {
            $sqlx::query("INSERT INTO records (id, text) VALUES ($1, 'not an id')")
                .bind(value)
                .execute(pool)
                .await
                .unwrap();
            let e = $sqlx::query_scalar::<_, Id>("SELECT id FROM records WHERE id = $1")
                .bind(value)
                .fetch_one(pool)
                .await
                .expect_err(&format!("{value} decoded as an Id"));
            assert!(e.to_string().contains(why), "{value}: {e}");
            let e = $sqlx::query_as::<_, Record>("SELECT id, text FROM records WHERE id = $1")
                .bind(value)
                .fetch_one(pool)
                .await
                .expect_err(&format!("{value} decoded into a record"));
            assert!(e.to_string().contains(why), "{value}: {e}");
            $sqlx::query("DELETE FROM records WHERE id = $1")
                .bind(value)
                .execute(pool)
                .await
                .unwrap();
        }
        // NULL is an `Option<Id>`, and an error for `Id`.
        let none: Option<Id> = $sqlx::query_scalar("SELECT CAST(NULL AS BIGINT)")
            .fetch_one(pool)
            .await
            .unwrap();
        assert_eq!(none, None);
        ids
    }};
}

#[tokio::test]
async fn sqlite_file_stores_ids_and_finds_them_by_time() {
    use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("records.sqlite3");
    let options = SqliteConnectOptions::new()
        .filename(&file)
        .create_if_missing(true);
    let pool = SqlitePool::connect_with(options.clone()).await.unwrap();
    let ids = exercise!(
        sqlx,
        &pool,
        "CREATE TABLE records (id INTEGER PRIMARY KEY, text TEXT NOT NULL)"
    );
    pool.close().await;

    // The file holds them: a new connection reads the same IDs back.
    assert!(file.metadata().unwrap().len() > 0);
    let pool = SqlitePool::connect_with(options).await.unwrap();
    let back: Vec<Id> = sqlx::query_scalar("SELECT id FROM records ORDER BY id DESC")
        .fetch_all(&pool)
        .await
        .unwrap();
    let mut expected = ids;
    expected.sort_by(|a, b| b.cmp(a));
    assert_eq!(back, expected);

    // A real value stored where an integer should be is refused by type.
    sqlx::query("INSERT INTO records (id, text) VALUES (1, 'x')")
        .execute(&pool)
        .await
        .unwrap();
    let e = sqlx::query_scalar::<_, Id>("SELECT CAST(id AS REAL) FROM records WHERE id = 1")
        .fetch_one(&pool)
        .await
        .expect_err("a REAL is not an Id");
    assert!(e.to_string().contains("mismatched types"), "{e}");
    pool.close().await;
}

#[tokio::test]
async fn postgres_stores_ids_as_bigint_and_finds_them_by_time() {
    let Some(server) = harness::postgres::Postgres::start() else {
        return;
    };
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&server.url())
        .await
        .unwrap_or_else(|e| panic!("connect: {e}; server log: {}", server.log_text()));
    exercise!(
        sqlx,
        &pool,
        "CREATE TABLE records (id BIGINT PRIMARY KEY, text TEXT NOT NULL)"
    );

    // The column type sqlx checks against is BIGINT (INT8): an INT4 or a
    // NUMERIC column is refused rather than misread.
    let column: String = sqlx::query_scalar(
        "SELECT data_type FROM information_schema.columns \
         WHERE table_name = 'records' AND column_name = 'id'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(column, "bigint");
    let e = sqlx::query_scalar::<_, Id>("SELECT CAST(5 AS NUMERIC)")
        .fetch_one(&pool)
        .await
        .expect_err("a NUMERIC is not an Id");
    assert!(e.to_string().contains("mismatched types"), "{e}");
    pool.close().await;
}

/// sqlx 0.8 (feature `sqlx-0_8`) reads and writes the same `BIGINT`s, with
/// the same checks: the impls are those of sqlx 0.9, instantiated for it.
#[cfg(feature = "sqlx-0_8")]
#[tokio::test]
async fn sqlx_0_8_on_postgres_stores_ids_as_bigint() {
    use sqlx08::{Type, TypeInfo};

    assert_eq!(<Id as Type<sqlx08::Postgres>>::type_info().name(), "INT8");
    let Some(server) = harness::postgres::Postgres::start() else {
        return;
    };
    let pool = sqlx08::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&server.url())
        .await
        .unwrap_or_else(|e| panic!("connect: {e}; server log: {}", server.log_text()));
    exercise!(
        sqlx08,
        &pool,
        "CREATE TABLE records (id BIGINT PRIMARY KEY, text TEXT NOT NULL)"
    );
    pool.close().await;
}

/// An `Id` has the column type of `i64` in each driver.
fn type_name<DB: Database>() -> String
where
    Id: Type<DB> + for<'q> Encode<'q, DB> + for<'r> Decode<'r, DB>,
    i64: Type<DB>,
{
    let name = <Id as Type<DB>>::type_info().name().to_string();
    assert_eq!(name, <i64 as Type<DB>>::type_info().name());
    assert!(<Id as Type<DB>>::compatible(&<i64 as Type<DB>>::type_info()));
    name
}

#[test]
fn column_types_are_bigint_and_sqlite_integer() {
    assert_eq!(type_name::<sqlx::Postgres>(), "INT8");
    assert_eq!(type_name::<sqlx::MySql>(), "BIGINT");
    assert_eq!(type_name::<sqlx::Sqlite>(), "INTEGER");
}
