//! `Id` as a column in postgres-types (feature `postgres-types`), the
//! types of tokio-postgres and postgres.
//!
//! An `Id` is an `INT8` (`BIGINT`, `BIGSERIAL`'s type) in both directions.
//! Reading checks the value: a negative number or one above
//! 2<sup>53</sup> − 1 is an error naming it, never a wrong `Id`; another
//! column type is refused before any row is read, as for `i64`.

use std::error::Error as StdError;

use postgres_types::{accepts, to_sql_checked, FromSql, IsNull, ToSql, Type};

use crate::Id;

type BoxError = Box<dyn StdError + Sync + Send>;

/// Binds as an `INT8` (`BIGINT`):
///
/// ```no_run
/// // A tokio-postgres client (the synchronous `postgres` one is the same).
/// async fn insert(db: &tokio_postgres::Client, text: &str) -> Result<idutil::Id, tokio_postgres::Error> {
///     let id = idutil::IdUtil::next();
///     db.execute("INSERT INTO records (id, text) VALUES ($1, $2)", &[&id, &text]).await?;
///     let row = db.query_one("SELECT id FROM records WHERE id = $1", &[&id]).await?;
///     Ok(row.get::<_, idutil::Id>(0))
/// }
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "postgres-types")))]
impl ToSql for Id {
    fn to_sql(&self, ty: &Type, out: &mut bytes::BytesMut) -> Result<IsNull, BoxError> {
        self.as_i64().to_sql(ty, out)
    }

    accepts!(INT8);

    to_sql_checked!();
}

/// Reads an `INT8` from 0 to 2<sup>53</sup> − 1.
#[cfg_attr(docsrs, doc(cfg(feature = "postgres-types")))]
impl<'a> FromSql<'a> for Id {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Id, BoxError> {
        let n = i64::from_sql(ty, raw)?;
        Ok(Id::try_from(n)?)
    }

    accepts!(INT8);
}
