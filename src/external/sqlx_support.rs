//! `Id` as a column in sqlx (feature `sqlx`).
//!
//! The impls are generic over sqlx's `Database` and delegate to `i64`, so an
//! `Id` is whatever `i64` is in each driver: `BIGINT` (`INT8`) in PostgreSQL
//! and MySQL, `INTEGER` in SQLite. This crate enables no driver, runtime or
//! TLS of sqlx: the application's own choice applies. Reading checks the
//! range: a negative value or one above 2<sup>53</sup> − 1 is a decode
//! error that names the value, never a panic or a wrong `Id`.

use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::{Database, Decode, Encode, Type};

use crate::Id;

/// The column type of `i64`: `BIGINT` in PostgreSQL and MySQL, `INTEGER`
/// in SQLite.
#[cfg_attr(docsrs, doc(cfg(feature = "sqlx")))]
impl<DB: Database> Type<DB> for Id
where
    i64: Type<DB>,
{
    fn type_info() -> DB::TypeInfo {
        <i64 as Type<DB>>::type_info()
    }

    fn compatible(ty: &DB::TypeInfo) -> bool {
        <i64 as Type<DB>>::compatible(ty)
    }
}

/// Binds the ID as its `i64` value.
#[cfg_attr(docsrs, doc(cfg(feature = "sqlx")))]
impl<'q, DB: Database> Encode<'q, DB> for Id
where
    i64: Encode<'q, DB>,
{
    fn encode_by_ref(
        &self,
        buf: &mut <DB as Database>::ArgumentBuffer<'q>,
    ) -> Result<IsNull, BoxDynError> {
        <i64 as Encode<'q, DB>>::encode_by_ref(&self.as_i64(), buf)
    }

    fn produces(&self) -> Option<DB::TypeInfo> {
        <i64 as Encode<'q, DB>>::produces(&self.as_i64())
    }

    fn size_hint(&self) -> usize {
        <i64 as Encode<'q, DB>>::size_hint(&self.as_i64())
    }
}

/// Reads an `i64` and checks that it is an ID: a negative value or one
/// above 2<sup>53</sup> − 1 is an error.
#[cfg_attr(docsrs, doc(cfg(feature = "sqlx")))]
impl<'r, DB: Database> Decode<'r, DB> for Id
where
    i64: Decode<'r, DB>,
{
    fn decode(value: <DB as Database>::ValueRef<'r>) -> Result<Id, BoxDynError> {
        let value = <i64 as Decode<'r, DB>>::decode(value)?;
        Ok(Id::try_from(value)?)
    }
}
