//! `Id` as a diesel `BigInt` primary key against real databases: a SQLite
//! file and a PostgreSQL server started for the test (see
//! `tests/harness/src/postgres.rs`). Records with an `Id` key are inserted, loaded,
//! found by key, sorted, and found by a range between `Id::min_at` and
//! `Id::max_at`. Values that are not IDs are deserialization errors.

#![cfg(feature = "diesel")]

use idutil_harness as harness;

use std::time::{Duration, UNIX_EPOCH};

use diesel::prelude::*;
use idutil::Id;

const T0: u64 = 1_800_000_000;

diesel::table! {
    records (id) {
        id -> BigInt,
        text -> Text,
    }
}

#[derive(Queryable, Selectable, Insertable, Identifiable, Debug, Clone, PartialEq, Eq)]
#[diesel(table_name = records)]
struct Record {
    id: Id,
    text: String,
}

/// Records keyed by IDs from shards 1 and 31 over four seconds, plus the
/// smallest and largest IDs, newest first.
fn records() -> Vec<Record> {
    let mut ids = vec![Id::MIN, Id::MAX];
    ids.extend(harness::ids_from_shards(&[1, 31], T0, 4, 25));
    ids.sort_by(|a, b| b.cmp(a));
    ids.into_iter()
        .map(|id| Record {
            id,
            text: format!("record {id}"),
        })
        .collect()
}

fn at(unix: u64) -> std::time::SystemTime {
    UNIX_EPOCH + Duration::from_secs(unix)
}

/// An error's message and those of its sources: diesel names the field,
/// its source says why.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

macro_rules! exercise {
    ($conn:expr, $create:expr) => {{
        let conn = $conn;
        diesel::sql_query($create).execute(conn).unwrap();
        let all = records();
        let inserted = diesel::insert_into(records::table)
            .values(&all)
            .execute(conn)
            .unwrap();
        assert_eq!(inserted, all.len());

        // Sorted by the key: oldest first, each exactly as inserted.
        let loaded: Vec<Record> = records::table
            .order(records::id)
            .select(Record::as_select())
            .load(conn)
            .unwrap();
        let mut expected = all.clone();
        expected.reverse();
        assert_eq!(loaded, expected);

        // By primary key, with an `Id`.
        let wanted = all[9].id;
        let one: Record = records::table.find(wanted).first(conn).unwrap();
        assert_eq!(one, all[9]);
        let max: Record = records::table.find(Id::MAX).first(conn).unwrap();
        assert_eq!(max.id, Id::MAX);

        // A range by time on every shard: seconds T0+1 ..= T0+2.
        let found: Vec<Id> = records::table
            .filter(records::id.between(
                Id::min_at(at(T0 + 1)).unwrap(),
                Id::max_at(at(T0 + 2)).unwrap(),
            ))
            .order(records::id.desc())
            .select(records::id)
            .load(conn)
            .unwrap();
        let expected: Vec<Id> = all
            .iter()
            .map(|r| r.id)
            .filter(|id| (T0 + 1..=T0 + 2).contains(&id.unix_seconds()))
            .collect();
        assert_eq!(expected.len(), 2 * 2 * 25);
        assert_eq!(found, expected);

        // An update through the `Id` key.
        diesel::update(records::table.find(wanted))
            .set(records::text.eq("changed"))
            .execute(conn)
            .unwrap();
        let text: String = records::table
            .find(wanted)
            .select(records::text)
            .first(conn)
            .unwrap();
        assert_eq!(text, "changed");

        // Values that are not IDs are errors, with the reason.
        for (value, why) in [(-7i64, "negative"), (1 << 53, "above 2^53 - 1")] {
            diesel::insert_into(records::table)
                .values((records::id.eq(value), records::text.eq("not an id")))
                .execute(conn)
                .unwrap();
            let e = records::table
                .filter(records::id.eq(value))
                .select(Record::as_select())
                .first::<Record>(conn)
                .expect_err("decoded a value that is not an ID");
            assert!(chain(&e).contains(why), "{value}: {}", chain(&e));
            let e = records::table
                .filter(records::id.eq(value))
                .select(records::id)
                .first::<Id>(conn)
                .expect_err("decoded a value that is not an ID");
            assert!(chain(&e).contains(why), "{value}: {}", chain(&e));
        }
    }};
}

#[test]
fn sqlite_file_keys_records_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("records.sqlite3");
    let url = file.to_str().unwrap();
    let conn = &mut SqliteConnection::establish(url).unwrap();
    exercise!(
        conn,
        "CREATE TABLE records (id INTEGER PRIMARY KEY, text TEXT NOT NULL)"
    );

    // Another connection to the file sees them.
    let conn = &mut SqliteConnection::establish(url).unwrap();
    let newest: Id = records::table
        .filter(records::id.le(Id::max_at(at(T0 + 3)).unwrap()))
        .select(records::id)
        .order(records::id.desc())
        .first(conn)
        .unwrap();
    assert_eq!(newest.unix_seconds(), T0 + 3);
    assert_eq!(newest, records()[1].id, "the newest below Id::MAX");
}

#[test]
fn postgres_keys_records_by_bigint_id() {
    let Some(server) = harness::postgres::Postgres::start() else {
        return;
    };
    let conn = &mut PgConnection::establish(&server.conninfo())
        .unwrap_or_else(|e| panic!("connect: {e}; server log: {}", server.log_text()));
    exercise!(
        conn,
        "CREATE TABLE records (id BIGINT PRIMARY KEY, text TEXT NOT NULL)"
    );
}
