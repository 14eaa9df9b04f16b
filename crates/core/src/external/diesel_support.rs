//! `Id` as a `BigInt` column in diesel (feature `diesel`).
//!
//! [`Id`] derives diesel's `AsExpression` and `FromSqlRow` for
//! `sql_types::BigInt` (see `src/id.rs`), so it binds in queries, fills
//! `Queryable`/`Selectable` structs and serves as an `Identifiable` key.
//! The impls here are generic over the backend and delegate to `i64`:
//! `BIGINT` in PostgreSQL and MySQL, `INTEGER` in SQLite. Reading checks the
//! range: a negative value or one above 2<sup>53</sup> − 1 is a
//! deserialization error, never a panic or a wrong `Id`.

use diesel::backend::Backend;
use diesel::deserialize::{self, FromSql};
use diesel::serialize::{self, Output, ToSql};
use diesel::sql_types::BigInt;

use crate::Id;

/// Writes the ID as its `i64` value.
///
/// An `Id` is a table's primary key type, binds in filters and fills
/// `Queryable` fields (here against an in-memory SQLite database):
///
/// ```
/// use diesel::prelude::*;
/// use idutil::Id;
/// use std::time::{Duration, UNIX_EPOCH};
///
/// diesel::table! {
///     records (id) {
///         id -> BigInt,
///         text -> Text,
///     }
/// }
///
/// #[derive(Queryable, Selectable, Insertable, Identifiable, Debug, PartialEq)]
/// #[diesel(table_name = records)]
/// struct Record {
///     id: Id,
///     text: String,
/// }
///
/// let conn = &mut SqliteConnection::establish(":memory:")?;
/// diesel::sql_query("CREATE TABLE records (id INTEGER PRIMARY KEY, text TEXT NOT NULL)")
///     .execute(conn)?;
/// let record = Record { id: "1452736581206048".parse()?, text: "hello".into() };
/// diesel::insert_into(records::table).values(&record).execute(conn)?;
///
/// let found: Record = records::table.find(record.id).first(conn)?;
/// assert_eq!(found, record);
///
/// // Everything created in that minute, on every shard.
/// let from = UNIX_EPOCH + Duration::from_secs(1_639_403_580);
/// let to = from + Duration::from_secs(59);
/// let ids: Vec<Id> = records::table
///     .filter(records::id.between(Id::min_at(from).unwrap(), Id::max_at(to).unwrap()))
///     .select(records::id)
///     .load(conn)?;
/// assert_eq!(ids, [record.id]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "diesel")))]
impl<DB: Backend> ToSql<BigInt, DB> for Id
where
    i64: ToSql<BigInt, DB>,
{
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, DB>) -> serialize::Result {
        self.as_i64_ref().to_sql(out)
    }
}

/// Reads an `i64` and checks that it is an ID.
#[cfg_attr(docsrs, doc(cfg(feature = "diesel")))]
impl<DB: Backend> FromSql<BigInt, DB> for Id
where
    i64: FromSql<BigInt, DB>,
{
    fn from_sql(bytes: DB::RawValue<'_>) -> deserialize::Result<Id> {
        let value = <i64 as FromSql<BigInt, DB>>::from_sql(bytes)?;
        Ok(Id::try_from(value)?)
    }
}
