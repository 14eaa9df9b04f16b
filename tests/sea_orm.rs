//! `Id` as a SeaORM column and primary key against real databases: a
//! SQLite file and a PostgreSQL server started for the test (see
//! `tests/harness/src/postgres.rs`). The table is made from the entity, so
//! the column type is the one `Id` declares; records go in keyed by `Id`
//! (`auto_increment = false`), come back as models, sort by time, are found
//! by key and by a range between `Id::min_at` and `Id::max_at`, and an
//! `Option<Id>` column holds `NULL`. Values that are not IDs are errors
//! naming the reason, never a panic or a wrong `Id`.

#![cfg(feature = "sea-orm")]

use idutil_harness as harness;

use std::time::{Duration, UNIX_EPOCH};

use idutil::Id;
use sea_orm::sea_query::{ColumnType, Nullable, ValueType};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseConnection, EntityTrait, QueryFilter,
    QueryOrder, Schema, Set, Statement, TryFromU64, Value,
};

const T0: u64 = 1_750_000_000;

mod record {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "records")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub id: idutil::Id,
        pub parent: Option<idutil::Id>,
        pub text: String,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

fn at(unix: u64) -> std::time::SystemTime {
    UNIX_EPOCH + Duration::from_secs(unix)
}

/// IDs from shards 2 and 29 over four seconds, plus the smallest and
/// largest IDs, newest first.
fn ids() -> Vec<Id> {
    let mut ids = vec![Id::MIN, Id::MAX];
    ids.extend(harness::ids_from_shards(&[2, 29], T0, 4, 30));
    ids.sort_by(|a, b| b.cmp(a));
    ids
}

/// The same checks on SQLite and PostgreSQL; returns the IDs stored.
async fn exercise(db: &DatabaseConnection) -> Vec<Id> {
    let backend = db.get_database_backend();
    let schema = Schema::new(backend);
    db.execute(&schema.create_table_from_entity(record::Entity))
        .await
        .unwrap();

    let ids = ids();
    // One inserted as an active model, the rest at once; every other record
    // points at the one before it.
    let first = record::ActiveModel {
        id: Set(ids[0]),
        parent: Set(None),
        text: Set("record 0".into()),
    }
    .insert(db)
    .await
    .unwrap();
    assert_eq!(first.id, ids[0]);
    let rest = ids
        .windows(2)
        .enumerate()
        .map(|(i, pair)| record::ActiveModel {
            id: Set(pair[1]),
            parent: Set((i % 2 == 0).then_some(pair[0])),
            text: Set(format!("record {}", i + 1)),
        });
    record::Entity::insert_many(rest).exec(db).await.unwrap();

    // All of them, in ID order: the sorted IDs, each exactly.
    let all = record::Entity::find()
        .order_by_asc(record::Column::Id)
        .all(db)
        .await
        .unwrap();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(all.iter().map(|r| r.id).collect::<Vec<_>>(), sorted);

    // By key, with its `Option<Id>`, set and not.
    let one = record::Entity::find_by_id(ids[1]).one(db).await.unwrap();
    assert_eq!(one.unwrap().parent, Some(ids[0]));
    let one = record::Entity::find_by_id(ids[2]).one(db).await.unwrap();
    assert_eq!(one.unwrap().parent, None);
    let roots = record::Entity::find()
        .filter(record::Column::Parent.is_null())
        .all(db)
        .await
        .unwrap();
    assert_eq!(roots.len(), ids.len() / 2);

    // A range by time, on every shard: seconds T0+1 ..= T0+2.
    let found: Vec<Id> = record::Entity::find()
        .filter(record::Column::Id.between(
            Id::min_at(at(T0 + 1)).unwrap(),
            Id::max_at(at(T0 + 2)).unwrap(),
        ))
        .order_by_asc(record::Column::Id)
        .all(db)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    let expected = harness::issued_between(&ids, T0 + 1, T0 + 2);
    assert_eq!(expected.len(), 2 * 2 * 30, "both shards, two seconds");
    assert_eq!(found, expected);

    // Stored as a plain integer: the database sees the same number.
    let raw = db
        .query_one_raw(Statement::from_string(
            backend,
            "SELECT MAX(id) AS id FROM records",
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(raw.try_get::<i64>("", "id").unwrap(), 9_007_199_254_740_991);

    // Values that are not IDs are errors with the reason, in the key and
    // in the `Option<Id>` column.
    for (value, why) in [
        (-1i64, "negative"),
        (i64::MIN, "negative"),
        (1 << 53, "above 2^53 - 1"),
        (i64::MAX, "above 2^53 - 1"),
    ] {
        for sql in [
            format!("INSERT INTO records (id, parent, text) VALUES ({value}, NULL, 'bad')"),
            format!("INSERT INTO records (id, parent, text) VALUES (7, {value}, 'bad')"),
        ] {
            db.execute_unprepared(&sql).await.unwrap();
            let e = record::Entity::find()
                .filter(record::Column::Text.eq("bad"))
                .one(db)
                .await
                .expect_err(&format!("{value} read as an Id"));
            let text = e.to_string();
            assert!(
                text.contains(why) && text.contains("idutil::Id"),
                "{value}: {text}"
            );
            db.execute_unprepared("DELETE FROM records WHERE text = 'bad'")
                .await
                .unwrap();
        }
    }
    ids
}

#[tokio::test]
async fn sqlite_file_keys_records_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("records.sqlite3");
    let url = format!("sqlite://{}?mode=rwc", file.display());
    let db = sea_orm::Database::connect(&url).await.unwrap();
    let ids = exercise(&db).await;
    db.close().await.unwrap();

    // The file holds them: a new connection reads the same IDs back.
    let db = sea_orm::Database::connect(&url).await.unwrap();
    let back: Vec<Id> = record::Entity::find()
        .order_by_desc(record::Column::Id)
        .all(&db)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(back, ids);
    db.close().await.unwrap();
}

#[tokio::test]
async fn postgres_keys_records_by_bigint_id() {
    let Some(server) = harness::postgres::Postgres::start() else {
        return;
    };
    let db = sea_orm::Database::connect(server.url())
        .await
        .unwrap_or_else(|e| panic!("connect: {e}; server log: {}", server.log_text()));
    exercise(&db).await;

    // The table made from the entity has a BIGINT key, not a serial.
    let column = server.psql(
        "SELECT data_type || ' ' || coalesce(column_default, 'no default') \
         FROM information_schema.columns \
         WHERE table_name = 'records' AND column_name = 'id'",
    );
    assert_eq!(column.trim(), "bigint no default");
    db.close().await.unwrap();
}

#[test]
fn values_convert_with_the_range_checked() {
    assert_eq!(<Id as ValueType>::column_type(), ColumnType::BigInteger);
    assert_eq!(<Id as Nullable>::null(), Value::BigInt(None));
    assert_eq!(
        Value::from(Id::MAX),
        Value::BigInt(Some(9_007_199_254_740_991))
    );
    let id = <Id as ValueType>::try_from(Value::BigInt(Some(1_452_736_581_206_048))).unwrap();
    assert_eq!(id, "1452736581206048".parse::<Id>().unwrap());
    for value in [
        Value::BigInt(Some(-1)),
        Value::BigInt(Some(1 << 53)),
        Value::String(Some("1".into())),
    ] {
        assert!(
            <Id as ValueType>::try_from(value.clone()).is_err(),
            "{value:?}"
        );
    }
    assert_eq!(<Id as TryFromU64>::try_from_u64(5).unwrap().as_u64(), 5);
    let e = <Id as TryFromU64>::try_from_u64(1 << 53).unwrap_err();
    assert!(e.to_string().contains("above 2^53 - 1"), "{e}");
}
