//! The PostgreSQL engine under test: the harness's server, the lease table
//! edited with `psql`, dumps by `pg_dump` and `pg_restore --clean`.

use std::sync::{Mutex, Weak};

use idutil_harness::postgres::{Options, Postgres as Server};

use super::{Engine, Promise, Record};
use crate::Slot;

/// A PostgreSQL server listening on loopback TCP, with room for every
/// holder of the cases that share it.
pub struct Postgres(Server);

/// A dump of both lease tables (`pg_dump -Fc`).
pub struct Dump(tempfile::TempDir);

impl Dump {
    fn file(&self) -> String {
        self.0.path().join("lease.dump").display().to_string()
    }
}

impl Postgres {
    /// The row of `shard` in the ID space `prefix`.
    fn row(prefix: &str, shard: u32) -> String {
        format!("space = '{prefix}' AND shard = {shard}")
    }
}

impl Engine for Postgres {
    const NAME: &'static str = "PostgreSQL";

    const EXCEPTIONS: &'static [(Promise, &'static str)] = &[];

    type Dump = Dump;

    fn start() -> Option<Self> {
        Server::start_tcp(&Options {
            max_connections: Some(300),
            ..Options::default()
        })
        .map(Postgres)
    }

    fn slot() -> &'static Slot<Self> {
        static SLOT: Slot<Postgres> = Mutex::new(Weak::new());
        &SLOT
    }

    fn port(&self) -> u16 {
        self.0.port()
    }

    fn url_at(&self, port: u16) -> String {
        format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable")
    }

    fn prepare(&self, _: &str, _: std::ops::RangeInclusive<u32>) {}

    fn kill(&mut self) {
        self.0.kill_immediate();
    }

    fn start_again(&mut self) {
        self.0.restart();
    }

    fn kill_connections(&self) -> usize {
        self.0
            .psql(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE application_name = 'idutil-lease'",
            )
            .parse()
            .unwrap()
    }

    fn drop_record(&self, prefix: &str, shard: u32) {
        let row = Postgres::row(prefix, shard);
        let deleted = self.0.psql(&format!(
            "WITH gone AS (DELETE FROM idutil_lease WHERE {row} RETURNING 1) \
             SELECT count(*) FROM gone"
        ));
        assert_eq!(deleted, "1");
    }

    fn lower_mark(&self, prefix: &str, shard: u32, second: u64) {
        let row = Postgres::row(prefix, shard);
        self.0.psql(&format!(
            "UPDATE idutil_lease SET high_water = {second}, last_second = NULL, \
             last_sequence = NULL WHERE {row}"
        ));
    }

    fn dump(&self) -> Dump {
        let dump = Dump(tempfile::tempdir().unwrap());
        let file = dump.file();
        let args = ["-Fc", "-t", "idutil_lease", "-t", "idutil_lease_history"];
        self.0
            .client("pg_dump", &[&args[..], &["-f", &file]].concat());
        dump
    }

    fn restore(&mut self, dump: &Dump) {
        self.0
            .client("pg_restore", &["--clean", "--if-exists", &dump.file()]);
    }

    fn record(&self, prefix: &str, shard: u32) -> Record {
        let row = Postgres::row(prefix, shard);
        let out = self.0.psql(&format!(
            "SELECT coalesce(high_water::text, ''), \
                    coalesce(CASE WHEN expires_at > now() THEN holder END, '') \
             FROM idutil_lease WHERE {row}"
        ));
        let mut cells = out.split('|');
        let mut cell = || cells.next().filter(|c| !c.is_empty()).map(str::to_string);
        Record {
            mark: cell().map(|m| m.parse().unwrap()),
            holder: cell(),
        }
    }
}
