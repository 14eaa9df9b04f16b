//! The database as a holder: PostgreSQL itself holds a shard of the ID
//! space, and a SQL function hands out its IDs (`DEFAULT
//! idutil_next_id()`), for every writer that is not a Rust holder.

use super::conn::{off_runtime, Conn};
use super::history::whole_seconds;
use super::sql::database::{self, Limits, Names};
use super::target::Target;
use crate::layout::Layout;
use idutil_lease::schemes::scheme;
use idutil_lease::{LeaseConfig, LeaseError, LeaseResult};

/// The SQL that makes PostgreSQL itself a holder of one shard of an ID
/// space, so that any writer (psql, a migration, a service in another
/// language, `COPY`) gets IDs in the same space as the Rust holders:
///
/// ```sql
/// CREATE TABLE notes (id bigint PRIMARY KEY DEFAULT idutil_next_id(), body text);
/// ```
///
/// See [*The database as a holder*](super#the-database-as-a-holder) for
/// what the function promises and how its counter works.
///
/// ```no_run
/// use idutil::lease::{postgres::DatabaseHolder, LeaseConfig};
///
/// let config = LeaseConfig::new("postgres://app@db.internal/app");
/// let holder = DatabaseHolder::new(&config, 31);
/// // For a migration file (sqlx, diesel, refinery): the same script
/// // `idutil lease sql --shard 31` prints.
/// std::fs::write("migrations/0007_idutil.sql", holder.install_sql()?)?;
/// // Or run it now, in one transaction.
/// holder.install()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct DatabaseHolder {
    config: LeaseConfig,
    layout: Layout,
    shard: u32,
    name: String,
}

impl DatabaseHolder {
    /// The database as the holder of `shard` of `config`'s ID space
    /// ([`LeaseConfig::prefix`]), in `config`'s schema, with the default
    /// layout and the functions named `idutil_*`. The shard is taken for as
    /// long as the function is installed: choose one outside the range your
    /// holders lease, or any shard (they never take it).
    pub fn new(config: &LeaseConfig, shard: u32) -> DatabaseHolder {
        DatabaseHolder {
            config: config.clone(),
            layout: Layout::DEFAULT,
            shard,
            name: "idutil".to_string(),
        }
    }

    /// The ID space's layout (default [`Layout::DEFAULT`]), as the Rust
    /// holders have it.
    pub fn layout(mut self, layout: Layout) -> DatabaseHolder {
        self.layout = layout;
        self
    }

    /// The functions' and the counter's names start with `name`, then `_`
    /// (default `idutil`: `idutil_next_id()`); another name lets one
    /// schema hold functions for several ID spaces. Lower-case letters,
    /// digits and `_`, starting with a letter, at most 40.
    pub fn name(mut self, name: &str) -> DatabaseHolder {
        self.name = name.to_string();
        self
    }

    /// The install script: the lease tables if missing, the shard's row
    /// taken (refused while a live holder has it, or for an ID space
    /// recorded with another layout), the counter, and the functions
    /// `NAME_next_id()`, `NAME_time(id)`, `NAME_min_at(t)` and
    /// `NAME_max_at(t)`. Run it in one transaction (`psql -1 -v
    /// ON_ERROR_STOP=1`, or as a migration). It is idempotent, and a later
    /// version's script upgrades the functions in place.
    ///
    /// # Errors
    ///
    /// [`LeaseError::InvalidConfig`] for a URL that is not PostgreSQL's, a
    /// bad schema or name, or a shard outside the layout.
    pub fn install_sql(&self) -> LeaseResult<String> {
        let (target, names) = self.names()?;
        let limits = Limits {
            max_lead: whole_seconds(self.config.get_max_lead()),
            max_skew: whole_seconds(self.config.get_max_skew()),
        };
        Ok(database::install(
            &target,
            self.config.get_prefix(),
            &self.layout,
            self.shard,
            &names,
            &limits,
        ))
    }

    /// The script that gives the shard back: the counter's exact last ID
    /// recorded in the row first (the next holder resumes after it), then
    /// the functions and the counter dropped. PostgreSQL refuses it while
    /// a column's default still calls the function. Harmless when nothing
    /// is installed.
    ///
    /// # Errors
    ///
    /// As [`install_sql`](DatabaseHolder::install_sql).
    pub fn uninstall_sql(&self) -> LeaseResult<String> {
        let (target, names) = self.names()?;
        Ok(database::uninstall(
            &target,
            self.config.get_prefix(),
            &self.layout,
            &names,
        ))
    }

    /// Runs [`install_sql`](DatabaseHolder::install_sql) on the database
    /// `config` names, in one transaction.
    ///
    /// # Errors
    ///
    /// As [`install_sql`](DatabaseHolder::install_sql), and
    /// [`LeaseError::Store`] when the database refuses it (the shard is
    /// leased, the layout differs, the role may not create the objects).
    pub fn install(&self) -> LeaseResult<()> {
        let script = self.install_sql()?;
        self.run("install the database's holder in", &script)
    }

    /// Runs [`uninstall_sql`](DatabaseHolder::uninstall_sql) on the
    /// database `config` names, in one transaction.
    ///
    /// # Errors
    ///
    /// As [`install`](DatabaseHolder::install); a column whose default
    /// calls the function makes PostgreSQL refuse it.
    pub fn uninstall(&self) -> LeaseResult<()> {
        let script = self.uninstall_sql()?;
        self.run("remove the database's holder from", &script)
    }

    /// The token the shard's row holds while the function is installed
    /// (`database function SCHEMA.NAME_next_id()`), as `idutil lease
    /// inspect` and `idutil state` show it.
    ///
    /// # Errors
    ///
    /// As [`install_sql`](DatabaseHolder::install_sql).
    pub fn holder_token(&self) -> LeaseResult<String> {
        Ok(self.names()?.1.holder)
    }

    fn names(&self) -> LeaseResult<(Target, Names)> {
        let postgres =
            scheme(self.config.get_url()).is_some_and(|s| s == "postgres" || s == "postgresql");
        if !postgres {
            return Err(LeaseError::invalid_config(format!(
                "the database holder is PostgreSQL's: {} is not a postgres:// URL",
                self.config.url_redacted()
            )));
        }
        let target = Target::parse(&self.config)?;
        let name = &self.name;
        let plain = name.len() <= 40
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !plain {
            return Err(LeaseError::invalid_config(format!(
                "the database holder's name {name:?} is not a plain SQL name: lower-case \
                 letters, digits and _, starting with a letter, at most 40"
            )));
        }
        if self.shard > self.layout.max_shard() {
            return Err(LeaseError::invalid_config(format!(
                "shard {} is outside the layout's shards 0..={}",
                self.shard,
                self.layout.max_shard()
            )));
        }
        let names = Names::new(&target, name);
        Ok((target, names))
    }

    fn run(&self, action: &'static str, script: &str) -> LeaseResult<()> {
        let target = Target::parse(&self.config)?;
        let timeout = self.config.get_open_timeout();
        off_runtime(|| {
            let mut conn = Conn::open(&self.config)?;
            conn.script(&target, timeout, script)
                .map_err(|f| f.into_error(action, &self.config))
        })
    }
}

/// Whether a row's holder is the database (a token [`DatabaseHolder`]
/// wrote): such a lease never expires and is given back by uninstalling.
pub(super) fn is_database(holder: Option<&str>) -> bool {
    holder.is_some_and(|h| h.starts_with(super::sql::HOLDER_PREFIX))
}
