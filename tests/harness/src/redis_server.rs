//! A real `redis-server` on a free loopback port, a proxy that cuts clients off, and records.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use idutil::Layout;

pub use crate::proxy::{free_port, Proxy};
use crate::space::wall_now;

/// A `redis-server` child on a loopback port, killed when dropped, set up
/// as the Redis lease asks: its data in an append-only file synced at every
/// write (`appendonly yes`, `appendfsync always`), no snapshots.
pub struct RedisServer {
    child: Option<Child>,
    /// The loopback port it listens on.
    pub port: u16,
    dir: tempfile::TempDir,
    /// More command-line settings (`--maxmemory 5mb`, `--replicaof ...`).
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts a server, or returns `None` (after saying so loudly) when
    /// `redis-server` is not installed. Under `CI=true` its absence panics.
    pub fn start() -> Option<RedisServer> {
        RedisServer::start_with(&[])
    }

    /// [`RedisServer::start`] with more settings, e.g. `["--replicaof",
    /// "127.0.0.1", "6379"]`; they come last, so `["--appendonly", "no"]`
    /// overrides the append-only file.
    pub fn start_with(extra: &[&str]) -> Option<RedisServer> {
        let found = Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            crate::skip::skipped(format_args!(
                "\n******** SKIPPED: redis-server not found on PATH; the Redis lease is NOT \
                 tested. Install it (e.g. apt-get install redis-server) ********\n"
            ));
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("idutil-redis-")
            .tempdir()
            .expect("temporary directory for redis");
        let mut server = RedisServer {
            child: None,
            port: 0,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        // A port found free may be taken before the server binds it: retry.
        for _ in 0..5 {
            server.port = free_port();
            if server.spawn() {
                return Some(server);
            }
        }
        panic!("redis-server did not start; see {}", server.log().display());
    }

    /// The server's log file.
    pub fn log(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// Starts `redis-server` on `self.port` and waits for PING.
    fn spawn(&mut self) -> bool {
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", ""])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.log())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
        // A replica's first sync starts at once, not after 5 s.
        cmd.args(["--repl-diskless-sync-delay", "0"]);
        cmd.args(&self.extra);
        let mut child = cmd.spawn().expect("spawn redis-server");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return false;
            }
            if self.ping() {
                self.child = Some(child);
                return true;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }

    fn ping(&self) -> bool {
        let Ok(client) = redis::Client::open(self.url()) else {
            return false;
        };
        let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_millis(200)) else {
            return false;
        };
        redis::cmd("PING")
            .query::<String>(&mut conn)
            .is_ok_and(|p| p == "PONG")
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A new connection to the server.
    pub fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(2))
            .expect("connect to the test redis-server")
    }

    /// SIGKILL: no shutdown, no final save.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server and starts it again on the same port and files.
    pub fn restart(&mut self) {
        self.kill();
        self.start_again();
    }

    fn start_again(&mut self) {
        assert!(
            self.spawn(),
            "redis-server did not restart on port {}; see {}",
            self.port,
            self.log().display()
        );
    }

    /// The server's run ID (`INFO server`): new at every start.
    pub fn run_id(&self) -> String {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut self.conn())
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("run_id:"))
            .expect("INFO server has a run_id")
            .trim()
            .to_string()
    }

    /// A copy of the server's data as it stands (its append-only files,
    /// as a backup would take them), for [`RedisServer::restore`].
    pub fn snapshot(&self) -> Snapshot {
        let copy = tempfile::Builder::new()
            .prefix("idutil-redis-copy-")
            .tempdir()
            .expect("temporary directory for a copy");
        copy_dir(&self.dir.path().join(AOF_DIR), copy.path());
        Snapshot(copy)
    }

    /// Kills the server (SIGKILL) and starts it again from `copy` of its
    /// data: restarted from an older backup.
    pub fn restore(&mut self, copy: &Snapshot) {
        self.kill();
        let aof = self.dir.path().join(AOF_DIR);
        std::fs::remove_dir_all(&aof).expect("remove the append-only files");
        std::fs::create_dir(&aof).unwrap();
        copy_dir(copy.0.path(), &aof);
        self.start_again();
    }

    /// Kills the server (SIGKILL) and starts it again with no data at all,
    /// as a server whose files were lost (or one without persistence).
    pub fn restart_empty(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(self.dir.path().join(AOF_DIR));
        let _ = std::fs::remove_file(self.dir.path().join("dump.rdb"));
        self.start_again();
    }
}

/// Where Redis keeps its append-only files, under its directory.
const AOF_DIR: &str = "appendonlydir";

/// A copy of a server's data ([`RedisServer::snapshot`]).
pub struct Snapshot(tempfile::TempDir);

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    for entry in std::fs::read_dir(from).expect("read the append-only files") {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy a data file");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Writes the record a previous holder would have left on each of `shards`
/// (under the default prefix), confirmed under the server's current run ID,
/// so that opening them does not wait one TTL and start past the lead cap,
/// as a shard whose history is unknown does.
pub fn seed_records(redis: &RedisServer, shards: RangeInclusive<u32>) {
    seed_records_in(redis, "idutil", shards);
}

/// [`seed_records`] in the ID space `prefix`.
pub fn seed_records_in(redis: &RedisServer, prefix: &str, shards: RangeInclusive<u32>) {
    let mut conn = redis.conn();
    let now = wall_now();
    let run = redis.run_id();
    for shard in shards {
        redis::cmd("DEL")
            .arg(format!("{prefix}:mark:{shard}"))
            .exec(&mut conn)
            .unwrap();
        redis::cmd("HSET")
            .arg(format!("{prefix}:mark:{shard}"))
            .arg("high_water")
            .arg(now)
            .arg("seen")
            .arg(now)
            .arg("layout")
            .arg(Layout::DEFAULT.fingerprint())
            .arg("run")
            .arg(&run)
            .exec(&mut conn)
            .unwrap();
    }
}

/// The fields of the record under `key`.
pub fn record_of(conn: &mut redis::Connection, key: &str) -> HashMap<String, String> {
    redis::cmd("HGETALL").arg(key).query(conn).unwrap()
}

/// Whether `key` exists.
pub fn exists(conn: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(conn).unwrap() == 1
}
