//! `Id` as a rusqlite column in a real SQLite file: IDs go in as `Id` and
//! come back exactly, sorted by time, found by a range query between
//! `Id::min_at` and `Id::max_at`, and still there after the file is
//! reopened. A stored value that is not an ID is an error, not a panic.

#![cfg(feature = "rusqlite")]

use idutil_harness as harness;

use std::time::{Duration, UNIX_EPOCH};

use idutil::Id;
use rusqlite::types::FromSqlError;
use rusqlite::Connection;

const T0: u64 = 1_700_000_000;

#[test]
fn ids_round_trip_through_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let mut ids = harness::ids_from_shards(&[30, 3], T0, 5, 40);
    ids.extend([Id::MAX, Id::MIN]);
    ids.reverse();
    {
        let db = Connection::open(&path).unwrap();
        db.execute(
            "CREATE TABLE records (id INTEGER PRIMARY KEY, text TEXT NOT NULL)",
            (),
        )
        .unwrap();
        for (i, id) in ids.iter().enumerate() {
            db.execute(
                "INSERT INTO records (id, text) VALUES (?1, ?2)",
                (id, format!("record {i}")),
            )
            .unwrap();
        }
    }

    let db = Connection::open(&path).unwrap();
    let read = |sql: &str, params: &[&dyn rusqlite::ToSql]| -> Vec<Id> {
        let mut stmt = db.prepare(sql).unwrap();
        let rows = stmt.query_map(params, |row| row.get::<_, Id>(0)).unwrap();
        rows.map(Result::unwrap).collect()
    };
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(read("SELECT id FROM records ORDER BY id", &[]), sorted);
    // The stored integers are the IDs' values.
    let raw: Vec<i64> = {
        let mut stmt = db.prepare("SELECT id FROM records ORDER BY id").unwrap();
        let rows = stmt.query_map((), |row| row.get::<_, i64>(0)).unwrap();
        rows.map(Result::unwrap).collect()
    };
    assert_eq!(raw, sorted.iter().map(|id| id.as_i64()).collect::<Vec<_>>());

    // Seconds 1 to 3 of 0 to 4, every shard, by the primary key alone.
    let at = |unix| UNIX_EPOCH + Duration::from_secs(unix);
    let (from, to) = (
        Id::min_at(at(T0 + 1)).unwrap(),
        Id::max_at(at(T0 + 3)).unwrap(),
    );
    let found = read(
        "SELECT id FROM records WHERE id BETWEEN ?1 AND ?2 ORDER BY id",
        &[&from, &to],
    );
    let expected = harness::issued_between(&sorted, T0 + 1, T0 + 3);
    assert_eq!(found.len(), 3 * 2 * 40);
    assert_eq!(found, expected);

    // An `Id` parameter finds its row.
    let text: String = db
        .query_row("SELECT text FROM records WHERE id = ?1", [Id::MAX], |row| {
            row.get(0)
        })
        .unwrap();
    assert_eq!(text, "record 1");
}

#[test]
fn a_stored_value_that_is_not_an_id_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = Connection::open(dir.path().join("app.db")).unwrap();
    db.execute("CREATE TABLE t (n)", ()).unwrap();
    let get = |sql: &str| db.query_row(sql, (), |row| row.get::<_, Id>(0));
    for (value, out_of_range) in [
        ("-1", Some(-1)),
        ("9007199254740992", Some(9_007_199_254_740_992)),
        ("9223372036854775807", Some(i64::MAX)),
        ("'1452736581206048'", None),
        ("1.5", None),
        ("x'00'", None),
    ] {
        db.execute("DELETE FROM t", ()).unwrap();
        db.execute(&format!("INSERT INTO t VALUES ({value})"), ())
            .unwrap();
        match get("SELECT n FROM t") {
            Err(rusqlite::Error::FromSqlConversionFailure(_, _, e)) => {
                let e = e.downcast::<FromSqlError>().unwrap();
                assert!(
                    matches!((*e, out_of_range), (FromSqlError::OutOfRange(n), Some(m)) if n == m),
                    "{value}: {out_of_range:?}"
                );
            }
            Err(rusqlite::Error::IntegralValueOutOfRange(_, n)) => {
                assert_eq!(Some(n), out_of_range, "{value}");
            }
            Err(rusqlite::Error::InvalidColumnType(..)) => {
                assert_eq!(out_of_range, None, "{value}");
            }
            other => panic!("{value}: {other:?}"),
        }
    }
    // NULL is no ID either, but an `Option<Id>` reads it as `None`.
    db.execute("DELETE FROM t", ()).unwrap();
    db.execute("INSERT INTO t VALUES (NULL)", ()).unwrap();
    assert!(get("SELECT n FROM t").is_err());
    let none: Option<Id> = db
        .query_row("SELECT n FROM t", (), |row| row.get(0))
        .unwrap();
    assert_eq!(none, None);
}
