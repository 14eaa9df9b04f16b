//! `Id` as a column type in SeaORM (feature `sea-orm`).
//!
//! An `Id` is a `BigInteger` column (`BIGINT` in PostgreSQL and MySQL,
//! `INTEGER` in SQLite) holding its `i64` value, and a primary key of its
//! own with `auto_increment = false`: the application sets it, no sequence
//! does. The impls are those SeaORM's `DeriveValueType` writes for a
//! newtype over `i64`, plus the range check: reading a negative value or
//! one above 2<sup>53</sup> − 1 is an error naming it, never a wrong `Id`.
//! This crate enables no driver or runtime of SeaORM: the application's
//! own choice applies.

use std::sync::Arc;

use sea_orm::sea_query::{ArrayType, ColumnType, Nullable, ValueType, ValueTypeErr};
use sea_orm::{
    ActiveValue, ColIdx, DbErr, IntoActiveValue, QueryResult, TryFromU64, TryGetError, TryGetable,
    Value,
};

use crate::Id;

/// The error of a value that is not an ID, as SeaORM reports a conversion.
fn not_an_id(from: &'static str, error: crate::IdError) -> DbErr {
    DbErr::TryIntoErr {
        from,
        into: "idutil::Id",
        source: Arc::new(error),
    }
}

/// Reads a `BigInteger` from 0 to 2<sup>53</sup> − 1; any other value is a
/// `DbErr::TryIntoErr` naming it.
///
/// An `Id` is an entity's primary key and fills its model (here against an
/// in-memory SQLite database, the table made from the entity):
///
/// ```
/// mod record {
///     use sea_orm::entity::prelude::*;
///
///     #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
///     #[sea_orm(table_name = "records")]
///     pub struct Model {
///         #[sea_orm(primary_key, auto_increment = false)]
///         pub id: idutil::Id,
///         pub parent: Option<idutil::Id>,
///         pub text: String,
///     }
///
///     #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
///     pub enum Relation {}
///
///     impl ActiveModelBehavior for ActiveModel {}
/// }
///
/// use idutil::Id;
/// use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Schema, Set};
/// use std::time::{Duration, UNIX_EPOCH};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let db = sea_orm::Database::connect("sqlite::memory:").await?;
/// let schema = Schema::new(db.get_database_backend());
/// db.execute(&schema.create_table_from_entity(record::Entity)).await?;
///
/// let id: Id = "1452736581206048".parse()?; // 2021-12-13T13:53:03Z
/// let inserted = record::ActiveModel { id: Set(id), parent: Set(None), text: Set("hello".into()) }
///     .insert(&db)
///     .await?;
/// assert_eq!(inserted.id, id);
/// let found = record::Entity::find_by_id(id).one(&db).await?.unwrap();
/// assert_eq!(found, inserted);
///
/// // Everything created in that minute, on every shard.
/// let from = UNIX_EPOCH + Duration::from_secs(1_639_403_580);
/// let to = from + Duration::from_secs(59);
/// let records = record::Entity::find()
///     .filter(record::Column::Id.between(Id::min_at(from).unwrap(), Id::max_at(to).unwrap()))
///     .all(&db)
///     .await?;
/// assert_eq!(records, [found]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "sea-orm")))]
impl TryGetable for Id {
    fn try_get_by<I: ColIdx>(res: &QueryResult, index: I) -> Result<Id, TryGetError> {
        let n = i64::try_get_by(res, index)?;
        <Id as TryFrom<i64>>::try_from(n).map_err(|e| TryGetError::DbErr(not_an_id("i64", e)))
    }
}

/// A `BigInteger` column; a `Value::BigInt` that is not an ID is a
/// `ValueTypeErr`.
#[cfg_attr(docsrs, doc(cfg(feature = "sea-orm")))]
impl ValueType for Id {
    fn try_from(v: Value) -> Result<Id, ValueTypeErr> {
        let n = <i64 as ValueType>::try_from(v)?;
        <Id as TryFrom<i64>>::try_from(n).map_err(|_| ValueTypeErr)
    }

    fn type_name() -> String {
        "Id".to_owned()
    }

    fn array_type() -> ArrayType {
        ArrayType::BigInt
    }

    fn column_type() -> ColumnType {
        ColumnType::BigInteger
    }
}

/// `NULL` of a `BigInteger` column, for `Option<Id>` fields.
#[cfg_attr(docsrs, doc(cfg(feature = "sea-orm")))]
impl Nullable for Id {
    fn null() -> Value {
        Value::BigInt(None)
    }
}

/// Binds the ID as its `i64` value.
#[cfg_attr(docsrs, doc(cfg(feature = "sea-orm")))]
impl From<Id> for Value {
    fn from(id: Id) -> Value {
        Value::BigInt(Some(id.as_i64()))
    }
}

/// A value set by the application, for `IntoActiveModel`.
#[cfg_attr(docsrs, doc(cfg(feature = "sea-orm")))]
impl IntoActiveValue<Id> for Id {
    fn into_active_value(self) -> ActiveValue<Id> {
        ActiveValue::Set(self)
    }
}

/// A last-insert ID the database reports, checked like any other value
/// (with `auto_increment = false` SeaORM uses the key it was given).
#[cfg_attr(docsrs, doc(cfg(feature = "sea-orm")))]
impl TryFromU64 for Id {
    fn try_from_u64(n: u64) -> Result<Id, DbErr> {
        <Id as TryFrom<u64>>::try_from(n).map_err(|e| not_an_id("u64", e))
    }
}
