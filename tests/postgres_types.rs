//! `Id` as a postgres-types column (tokio-postgres, postgres) against a
//! real PostgreSQL server started for the test (see
//! `tests/harness/src/postgres.rs`), through the synchronous `postgres`
//! client, which runs tokio-postgres underneath: IDs go into a `BIGINT`
//! primary key and come back exactly, found by a range query between
//! `Id::min_at` and `Id::max_at`. A stored value that is not an ID, or a
//! column that is not `BIGINT`, is an error, not a panic.

#![cfg(feature = "postgres-types")]

use idutil_harness as harness;

use std::time::{Duration, UNIX_EPOCH};

use idutil::Id;
use postgres::{Client, NoTls};

const T0: u64 = 1_700_000_000;

fn connect(server: &harness::postgres::Postgres) -> Client {
    Client::connect(&server.conninfo(), NoTls)
        .unwrap_or_else(|e| panic!("connect: {e}; server log: {}", server.log_text()))
}

#[test]
fn ids_round_trip_through_postgresql() {
    let Some(server) = harness::postgres::Postgres::start() else {
        return;
    };
    let mut db = connect(&server);
    db.batch_execute("CREATE TABLE records (id BIGINT PRIMARY KEY, text TEXT NOT NULL)")
        .unwrap();
    let mut ids = harness::ids_from_shards(&[30, 3], T0, 5, 40);
    ids.extend([Id::MAX, Id::MIN]);
    ids.reverse();
    let insert = db
        .prepare("INSERT INTO records (id, text) VALUES ($1, $2)")
        .unwrap();
    for (i, id) in ids.iter().enumerate() {
        db.execute(&insert, &[id, &format!("record {i}")]).unwrap();
    }

    let mut sorted = ids.clone();
    sorted.sort();
    let all: Vec<Id> = db
        .query("SELECT id FROM records ORDER BY id", &[])
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(all, sorted);
    let raw: Vec<i64> = db
        .query("SELECT id FROM records ORDER BY id", &[])
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(raw, sorted.iter().map(|id| id.as_i64()).collect::<Vec<_>>());

    let at = |unix| UNIX_EPOCH + Duration::from_secs(unix);
    let (from, to) = (
        Id::min_at(at(T0 + 1)).unwrap(),
        Id::max_at(at(T0 + 3)).unwrap(),
    );
    let found: Vec<Id> = db
        .query(
            "SELECT id FROM records WHERE id BETWEEN $1 AND $2 ORDER BY id",
            &[&from, &to],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    let expected = harness::issued_between(&sorted, T0 + 1, T0 + 3);
    assert_eq!(found.len(), 3 * 2 * 40);
    assert_eq!(found, expected);

    // Nullable columns read as `Option<Id>`.
    let row = db.query_one("SELECT NULL::BIGINT", &[]).unwrap();
    assert_eq!(row.get::<_, Option<Id>>(0), None);
}

#[test]
fn a_stored_value_that_is_not_an_id_is_refused() {
    let Some(server) = harness::postgres::Postgres::start() else {
        return;
    };
    let mut db = connect(&server);
    for value in ["-1", "9007199254740992", "9223372036854775807"] {
        let row = db
            .query_one(&format!("SELECT {value}::BIGINT"), &[])
            .unwrap();
        let e = row.try_get::<_, Id>(0).unwrap_err();
        let e = std::error::Error::source(&e)
            .expect("the ID's error")
            .to_string();
        assert!(e.contains(value.trim_start_matches('-')), "{value}: {e}");
        // The `i64` reads, so the refusal is the ID's range, not the type.
        assert!(row.try_get::<_, i64>(0).is_ok());
    }
    // Another column type is refused, as for `i64`: an INT4, a text.
    for sql in ["SELECT 5::INT4", "SELECT '5'::TEXT"] {
        let row = db.query_one(sql, &[]).unwrap();
        assert!(row.try_get::<_, Id>(0).is_err(), "{sql}");
    }
    // And an `Id` is not bound to a parameter of another type.
    let id: Id = "1452736581206048".parse().unwrap();
    assert!(db.query_one("SELECT $1::INT4", &[&id]).is_err());
    let row = db.query_one("SELECT $1::BIGINT", &[&id]).unwrap();
    assert_eq!(row.get::<_, Id>(0), id);
}
