//! `Id` as a column in rusqlite (feature `rusqlite`).
//!
//! An `Id` is stored as SQLite's `INTEGER`, the type of a rowid primary
//! key. Reading checks the value: text, a real, a blob, a negative number
//! or one above 2<sup>53</sup> − 1 is an error, never a wrong `Id`.

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};

use crate::Id;

/// Binds as an `INTEGER` (here into a real SQLite file):
///
/// ```
/// use idutil::Id;
///
/// # let dir = tempfile::tempdir().unwrap();
/// let db = rusqlite::Connection::open(dir.path().join("app.db"))?;
/// db.execute("CREATE TABLE records (id INTEGER PRIMARY KEY, text TEXT NOT NULL)", ())?;
/// let id: Id = "1452736581206048".parse().unwrap();
/// db.execute("INSERT INTO records (id, text) VALUES (?1, ?2)", (id, "hello"))?;
/// let back: Id = db.query_row("SELECT id FROM records", (), |row| row.get(0))?;
/// assert_eq!(back, id);
/// # Ok::<(), rusqlite::Error>(())
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "rusqlite")))]
impl ToSql for Id {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.as_i64()))
    }
}

/// Reads an `INTEGER` from 0 to 2<sup>53</sup> − 1; anything else is
/// `FromSqlError::InvalidType` (not an integer) or
/// `FromSqlError::OutOfRange` (an integer that is not an ID).
#[cfg_attr(docsrs, doc(cfg(feature = "rusqlite")))]
impl FromSql for Id {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Id> {
        let n = value.as_i64()?;
        Id::try_from(n).map_err(|_| FromSqlError::OutOfRange(n))
    }
}
