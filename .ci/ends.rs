//! What .ci/ends checks at each end of every integration's range: code
//! that uses `Id` through each crate's own traits and types, so that a
//! release whose traits no longer fit idutil's impls fails to compile.
//! Each crate is named by its key in idutil-core's Cargo.toml, each check by the
//! feature it needs (the scratch app has features of the same names).

#![allow(dead_code)]

use idutil::Id;

/// Binds, reads and names the column type on sqlx's driver-free `Any`.
#[cfg(feature = "sqlx")]
fn sqlx() {
    fn column<DB, T>()
    where
        DB: sqlx::Database,
        T: sqlx::Type<DB> + for<'q> sqlx::Encode<'q, DB> + for<'r> sqlx::Decode<'r, DB>,
    {
    }
    column::<sqlx::Any, Id>();
    let _ = sqlx::query::<sqlx::Any>("SELECT $1").bind(Id::MAX);
}

#[cfg(feature = "sqlx-0_8")]
fn sqlx_0_8() {
    fn column<DB, T>()
    where
        DB: sqlx08::Database,
        T: sqlx08::Type<DB> + for<'q> sqlx08::Encode<'q, DB> + for<'r> sqlx08::Decode<'r, DB>,
    {
    }
    column::<sqlx08::Any, Id>();
    let _ = sqlx08::query::<sqlx08::Any>("SELECT $1").bind(Id::MAX);
}

#[cfg(feature = "rusqlite")]
fn rusqlite(db: &rusqlite::Connection) -> rusqlite::Result<Id> {
    db.execute("INSERT INTO records (id) VALUES (?1)", [Id::MAX])?;
    db.query_row("SELECT id FROM records", [], |row| row.get(0))
}

#[cfg(feature = "diesel")]
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

#[cfg(feature = "postgres-types")]
fn postgres_types() {
    fn column<T: postgres_types::ToSql + for<'a> postgres_types::FromSql<'a>>() {}
    column::<Id>();
}

#[cfg(feature = "sea-orm")]
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

#[cfg(feature = "schemars")]
fn schemars() -> String {
    let _ = idutil::serde::string::json_schema;
    schemars::schema_for!(Id).as_value().to_string()
}

#[cfg(feature = "utoipa")]
fn utoipa() {
    let _ = <Id as utoipa::PartialSchema>::schema();
    let _ = <Id as utoipa::ToSchema>::name();
    let _: utoipa::openapi::schema::Schema = idutil::serde::string::openapi_schema();
}

#[cfg(feature = "utoipa-5")]
fn utoipa_5() {
    let _ = <Id as utoipa5::PartialSchema>::schema();
    let _ = <Id as utoipa5::ToSchema>::name();
    let _: utoipa5::openapi::schema::Schema = idutil::serde::string::openapi_schema_utoipa5();
}

#[cfg(feature = "ts-rs")]
fn ts_rs() -> String {
    <Id as ts_rs::TS>::decl(&ts_rs::Config::new())
}

#[cfg(feature = "jiff")]
fn jiff() -> jiff::Timestamp {
    jiff::Timestamp::from(Id::MAX)
}

#[cfg(feature = "jiff-0_2")]
fn jiff_0_2() -> jiff02::Timestamp {
    jiff02::Timestamp::from(Id::MAX)
}

#[cfg(feature = "chrono")]
fn chrono() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::<chrono::Utc>::from(Id::MAX)
}

#[cfg(feature = "time")]
fn time() -> time::OffsetDateTime {
    time::OffsetDateTime::from(Id::MAX)
}
