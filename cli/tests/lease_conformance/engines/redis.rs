//! The Redis engine under test: the harness's server, records edited with
//! plain commands, copies of its append-only files put back by a restart.

use std::sync::{Mutex, Weak};

use idutil_harness::redis_server::{seed_records_in, RedisServer, Snapshot};

use super::{Engine, Promise, Record};
use crate::Slot;

/// A `redis-server` set up as the Redis engine asks (`appendonly yes`,
/// `appendfsync always`).
pub struct Redis(RedisServer);

impl Engine for Redis {
    const NAME: &'static str = "Redis";

    const EXCEPTIONS: &'static [(Promise, &'static str)] = &[(
        Promise::MarkLoweredBetweenHolders,
        "a record rewritten in the running server while nobody holds the shard is \
         not told apart: the server's run ID is the one the record was stamped \
         under, and nothing else in Redis says who wrote it",
    )];

    type Dump = Snapshot;

    fn start() -> Option<Self> {
        RedisServer::start().map(Redis)
    }

    fn slot() -> &'static Slot<Self> {
        static SLOT: Slot<Redis> = Mutex::new(Weak::new());
        &SLOT
    }

    fn port(&self) -> u16 {
        self.0.port
    }

    fn url_at(&self, port: u16) -> String {
        format!("redis://127.0.0.1:{port}/")
    }

    fn prepare(&self, prefix: &str, shards: std::ops::RangeInclusive<u32>) {
        seed_records_in(&self.0, prefix, shards);
    }

    fn kill(&mut self) {
        self.0.kill();
    }

    fn start_again(&mut self) {
        // Kills nothing: the server is down.
        self.0.restart();
    }

    fn kill_connections(&self) -> usize {
        ::redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .query(&mut self.0.conn())
            .unwrap()
    }

    fn drop_record(&self, prefix: &str, shard: u32) {
        let deleted: usize = ::redis::cmd("DEL")
            .arg(format!("{prefix}:mark:{shard}"))
            .query(&mut self.0.conn())
            .unwrap();
        assert_eq!(deleted, 1);
    }

    fn lower_mark(&self, prefix: &str, shard: u32, second: u64) {
        let key = format!("{prefix}:mark:{shard}");
        let mut conn = self.0.conn();
        ::redis::cmd("HSET")
            .arg(&key)
            .arg("high_water")
            .arg(second)
            .exec(&mut conn)
            .unwrap();
        ::redis::cmd("HDEL")
            .arg(&key)
            .arg("last")
            .exec(&mut conn)
            .unwrap();
    }

    fn dump(&self) -> Snapshot {
        self.0.snapshot()
    }

    fn restore(&mut self, dump: &Snapshot) {
        self.0.restore(dump);
    }

    fn record(&self, prefix: &str, shard: u32) -> Record {
        let mut conn = self.0.conn();
        let mark: Option<u64> = ::redis::cmd("HGET")
            .arg(format!("{prefix}:mark:{shard}"))
            .arg("high_water")
            .query(&mut conn)
            .unwrap();
        let holder: Option<String> = ::redis::cmd("GET")
            .arg(format!("{prefix}:lease:{shard}"))
            .query(&mut conn)
            .unwrap();
        Record { mark, holder }
    }
}
