//! What .ci/ends checks at each end of every integration's range: code
//! that uses `Id` through each crate's own traits and types, so that a
//! release whose traits no longer fit idutil's impls fails to compile.
//! Each crate is named by its key in idutil's Cargo.toml.

#![allow(dead_code)]

use idutil::Id;

/// Binds, reads and names the column type in sqlx 0.9 and 0.8, on the
/// driver-free `Any` database.
fn sqlx() {
    fn column<DB, T>()
    where
        DB: sqlx::Database,
        T: sqlx::Type<DB> + for<'q> sqlx::Encode<'q, DB> + for<'r> sqlx::Decode<'r, DB>,
    {
    }
    column::<sqlx::Any, Id>();
    let _ = sqlx::query::<sqlx::Any>("SELECT $1").bind(Id::MAX);

    fn column_0_8<DB, T>()
    where
        DB: sqlx08::Database,
        T: sqlx08::Type<DB> + for<'q> sqlx08::Encode<'q, DB> + for<'r> sqlx08::Decode<'r, DB>,
    {
    }
    column_0_8::<sqlx08::Any, Id>();
    let _ = sqlx08::query::<sqlx08::Any>("SELECT $1").bind(Id::MAX);
}

fn rusqlite(db: &rusqlite::Connection) -> rusqlite::Result<Id> {
    db.execute("INSERT INTO records (id) VALUES (?1)", [Id::MAX])?;
    db.query_row("SELECT id FROM records", (), |row| row.get(0))
}

fn diesel() {
    use diesel::sql_types::BigInt;
    fn column<T>()
    where
        T: diesel::serialize::ToSql<BigInt, diesel::pg::Pg>
            + diesel::deserialize::FromSql<BigInt, diesel::pg::Pg>
            + diesel::expression::AsExpression<BigInt>,
    {
    }
    column::<Id>();
}

fn postgres_types() {
    fn column<T: postgres_types::ToSql + for<'a> postgres_types::FromSql<'a>>() {}
    column::<Id>();
}

fn sea_orm() {
    fn column<T>()
    where
        T: sea_orm::TryGetable
            + sea_orm::sea_query::ValueType
            + sea_orm::sea_query::Nullable
            + Into<sea_orm::Value>
            + sea_orm::TryFromU64
            + sea_orm::IntoActiveValue<T>,
    {
    }
    column::<Id>();
}

fn schemas() -> usize {
    let json = schemars::schema_for!(Id);
    let _ = <Id as utoipa::PartialSchema>::schema();
    let _ = <Id as utoipa::ToSchema>::name();
    let _ = <Id as utoipa5::PartialSchema>::schema();
    let _ = <Id as utoipa5::ToSchema>::name();
    let _: utoipa::openapi::schema::Schema = idutil::serde::string::openapi_schema();
    let _: utoipa5::openapi::schema::Schema = idutil::serde::string::openapi_schema_utoipa5();
    let ts = <Id as ts_rs::TS>::decl(&ts_rs::Config::new());
    json.as_value().to_string().len() + ts.len()
}

fn times() {
    let _ = jiff::Timestamp::from(Id::MAX);
    let _ = jiff02::Timestamp::from(Id::MAX);
    let _ = chrono::DateTime::<chrono::Utc>::from(Id::MAX);
    let _ = time::OffsetDateTime::from(Id::MAX);
}
