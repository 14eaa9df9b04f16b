//! `Id` as a column in sqlx (feature `sqlx` for sqlx 0.9, `sqlx-0_8` for
//! sqlx 0.8).
//!
//! The impls are generic over sqlx's `Database` and delegate to `i64`, so an
//! `Id` is whatever `i64` is in each driver: `BIGINT` (`INT8`) in PostgreSQL
//! and MySQL, `INTEGER` in SQLite. This crate enables no driver, runtime or
//! TLS of sqlx: the application's own choice applies. Reading checks the
//! range: a negative value or one above 2<sup>53</sup> − 1 is a decode
//! error that names the value, never a panic or a wrong `Id`.
//!
//! The two majors' traits have the same shape, so the impls are written
//! once, in `sqlx_impls!`, and instantiated for each.

/// The impls for the sqlx crate `$sqlx` (under feature `$feature`), with
/// the docs of its `Type` impl first; the one difference between the
/// majors, whether `Database::ArgumentBuffer` takes the `'q` of `Encode`,
/// is written out where the macro is used.
macro_rules! sqlx_impls {
    ($(#[$doc:meta])* $sqlx:ident, $feature:literal, ArgumentBuffer $(<$q:lifetime>)?) => {
        $(#[$doc])*
        #[cfg_attr(docsrs, doc(cfg(feature = $feature)))]
        impl<DB: $sqlx::Database> $sqlx::Type<DB> for crate::Id
        where
            i64: $sqlx::Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <i64 as $sqlx::Type<DB>>::type_info()
            }

            fn compatible(ty: &DB::TypeInfo) -> bool {
                <i64 as $sqlx::Type<DB>>::compatible(ty)
            }
        }

        /// Binds the ID as its `i64` value.
        #[cfg_attr(docsrs, doc(cfg(feature = $feature)))]
        impl<'q, DB: $sqlx::Database> $sqlx::Encode<'q, DB> for crate::Id
        where
            i64: $sqlx::Encode<'q, DB>,
        {
            fn encode_by_ref(
                &self,
                buf: &mut <DB as $sqlx::Database>::ArgumentBuffer$(<$q>)?,
            ) -> Result<$sqlx::encode::IsNull, $sqlx::error::BoxDynError> {
                <i64 as $sqlx::Encode<'q, DB>>::encode_by_ref(&self.as_i64(), buf)
            }

            fn produces(&self) -> Option<DB::TypeInfo> {
                <i64 as $sqlx::Encode<'q, DB>>::produces(&self.as_i64())
            }

            fn size_hint(&self) -> usize {
                <i64 as $sqlx::Encode<'q, DB>>::size_hint(&self.as_i64())
            }
        }

        /// Reads an `i64` and checks that it is an ID: a negative value or one
        /// above 2<sup>53</sup> − 1 is an error.
        #[cfg_attr(docsrs, doc(cfg(feature = $feature)))]
        impl<'r, DB: $sqlx::Database> $sqlx::Decode<'r, DB> for crate::Id
        where
            i64: $sqlx::Decode<'r, DB>,
        {
            fn decode(
                value: <DB as $sqlx::Database>::ValueRef<'r>,
            ) -> Result<crate::Id, $sqlx::error::BoxDynError> {
                let value = <i64 as $sqlx::Decode<'r, DB>>::decode(value)?;
                Ok(crate::Id::try_from(value)?)
            }
        }
    };
}

#[cfg(feature = "sqlx")]
sqlx_impls! {
    /// The column type of `i64`: `BIGINT` in PostgreSQL and MySQL, `INTEGER`
    /// in SQLite.
    ///
    /// An `Id` binds as a parameter and fills a `FromRow` field (here against
    /// an in-memory SQLite database):
    ///
    /// ```
    /// use idutil::Id;
    /// use std::time::{Duration, UNIX_EPOCH};
    ///
    /// #[derive(sqlx::FromRow)]
    /// struct Record {
    ///     id: Id,
    ///     text: String,
    /// }
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let db = sqlx::SqlitePool::connect("sqlite::memory:").await?;
    /// sqlx::query("CREATE TABLE records (id INTEGER PRIMARY KEY, text TEXT NOT NULL)")
    ///     .execute(&db)
    ///     .await?;
    /// let id: Id = "1452736581206048".parse()?; // 2021-12-13T13:53:03Z
    /// sqlx::query("INSERT INTO records (id, text) VALUES ($1, $2)")
    ///     .bind(id)
    ///     .bind("hello")
    ///     .execute(&db)
    ///     .await?;
    ///
    /// // Everything created in that minute, on every shard.
    /// let from = UNIX_EPOCH + Duration::from_secs(1_639_403_580);
    /// let to = from + Duration::from_secs(59);
    /// let records: Vec<Record> =
    ///     sqlx::query_as("SELECT id, text FROM records WHERE id BETWEEN $1 AND $2 ORDER BY id")
    ///         .bind(Id::min_at(from).unwrap())
    ///         .bind(Id::max_at(to).unwrap())
    ///         .fetch_all(&db)
    ///         .await?;
    /// assert_eq!(records[0].id, id);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    ///
    /// With the checked macros (`query_as!`), which infer `i64` for the column,
    /// name the type in the query: `SELECT id AS "id: Id", text FROM records`.
    sqlx, "sqlx", ArgumentBuffer
}

#[cfg(feature = "sqlx-0_8")]
sqlx_impls! {
    /// The column type of `i64`, as with feature `sqlx` (sqlx 0.9).
    sqlx08, "sqlx-0_8", ArgumentBuffer<'q>
}
