//! What a crowd of PostgreSQL lease holders costs the server: 50, 200, 500
//! and 1,000 real holders in this process (each its own state directory,
//! on a shard of its own of a 10-bit-shard layout) at the default TTL,
//! through PgBouncer in transaction mode with a pool of 10; and 200 and 500
//! holders with a server connection each. For each crowd, in the same run
//! and through the same path, the minimal write: as many clients of their
//! own, each sending `BEGIN; UPDATE one row; COMMIT` in one round trip at
//! the holders' cadence (one every `LeaseConfig::renew_every()`), on a row
//! of its own.
//!
//! Counted by the server: renewals (and writes) are the calls of the
//! renewal's (the write's) statement in `pg_stat_statements` over the
//! window, counted as each statement ends (`pg_stat_user_tables` counts
//! reach the shared counters up to 10 s late from an idle backend, and
//! also count the holders' raises).
//! Server CPU is the user and system time of the postmaster and every
//! process it started, in nanoseconds (`/proc/<pid>/schedstat`, where
//! `utime` and `stime` count whole ticks, too coarse for a few hundred
//! renewals; children that end during the window count through the
//! postmaster's `cutime`/`cstime`); PgBouncer's apart. The idle server's
//! share is printed first: it is in every figure. The server runs with
//! `fsync` and `synchronous_commit` on; the rest are the lease tests'
//! settings.
//!
//! `cargo bench -p idutil-benches --features postgres-lease --bench
//! renewals`, about 8 minutes on 2 cores. `IDUTIL_RENEWALS_BENCH_SECONDS`
//! sets each window (default 30 s). BENCHMARKS.md quotes the output.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use idutil::lease::LeaseConfig;
use idutil::{Generator, Layout};
use idutil_harness::pgbouncer::{PgBouncer, Pool};
use idutil_harness::postgres::{Options, Postgres};

/// Room for 1,024 holders, each on a shard of its own.
const WIDE: &str = "seconds:32 clock:0 sequence:11 shard:10 epoch:946684800";
/// Holders opened at once (the rest wait their turn).
const OPENERS: usize = 50;
const POOLED: [usize; 4] = [50, 200, 500, 1000];
const DIRECT: [usize; 2] = [200, 500];

fn main() {
    let window = Duration::from_secs(
        std::env::var("IDUTIL_RENEWALS_BENCH_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(30),
    );
    let Some(pg) = Postgres::start_tcp(&Options {
        max_connections: Some(600),
        settings: vec![
            "fsync=on".into(),
            "synchronous_commit=on".into(),
            "shared_preload_libraries=pg_stat_statements".into(),
        ],
    }) else {
        eprintln!("PostgreSQL is not installed: nothing to measure");
        return;
    };
    let Some(bouncer) = PgBouncer::start(
        &pg,
        &Pool {
            mode: "transaction",
            size: 10,
            users: vec!["postgres".to_string()],
        },
    ) else {
        eprintln!("PgBouncer is not installed: nothing to measure");
        return;
    };
    let server = Server::of(&pg);
    let bouncer_pid = pgbouncer_pid(bouncer.port());
    pg.psql("CREATE EXTENSION pg_stat_statements");
    pg.psql(
        "CREATE TABLE bench_write (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0); \
         INSERT INTO bench_write (id) SELECT g FROM generate_series(0, 1023) g",
    );
    let defaults = LeaseConfig::new(pg.tcp_url());
    let every = defaults.renew_every();
    println!(
        "default TTL {:?}: each holder renews every {every:?}; windows of {window:?}; \
         load before: {}",
        defaults.get_ttl(),
        loadavg()
    );
    let idle = measure(&pg, &server, None, WRITE, window / 3);
    println!(
        "idle server: {:.3} % of one core",
        idle.server_cpu.as_secs_f64() / idle.wall.as_secs_f64() * 100.0
    );
    let mut rows = Vec::new();
    let runs = POOLED
        .iter()
        .map(|&n| ("PgBouncer (pool 10)", n, bouncer.url("postgres")))
        .chain(DIRECT.iter().map(|&n| ("direct", n, pg.tcp_url())));
    for (path, n, url) in runs {
        let config = LeaseConfig::new(url.clone()).prefix(format!("bench{n}"));
        let pooled = url != pg.tcp_url();
        let pid = pooled.then_some(bouncer_pid).flatten();
        let crowd = open(&config, n);
        // The opens' raises are behind; the renewals spread over the
        // cadence by the opens' own spread.
        thread::sleep(Duration::from_secs(5));
        let renewals = measure(&pg, &server, pid, RENEWAL, window);
        close(crowd);
        let writes = minimal_writes(&pg, &server, pid, &url, n, every, window);
        for (what, m) in [("renewal", renewals), ("minimal write", writes)] {
            let row = Row {
                path,
                clients: n,
                what,
                m,
            };
            println!("{}", row.line());
            rows.push(row);
        }
    }
    println!("\nload after: {}", loadavg());
    println!(
        "\n| path | clients | what | per second | server CPU per op | share of one core | \
         PgBouncer share |\n|---|---:|---|---:|---:|---:|---:|"
    );
    for row in &rows {
        println!("{}", row.markdown());
    }
}

/// What one window came to.
struct Measured {
    ops: u64,
    wall: Duration,
    server_cpu: Duration,
    bouncer_cpu: Option<Duration>,
}

struct Row {
    path: &'static str,
    clients: usize,
    what: &'static str,
    m: Measured,
}

impl Row {
    fn rate(&self) -> f64 {
        self.m.ops as f64 / self.m.wall.as_secs_f64()
    }

    fn per_op_ms(&self) -> f64 {
        self.m.server_cpu.as_secs_f64() * 1000.0 / (self.m.ops.max(1) as f64)
    }

    fn share(&self, cpu: Duration) -> f64 {
        cpu.as_secs_f64() / self.m.wall.as_secs_f64() * 100.0
    }

    fn line(&self) -> String {
        format!(
            "{} {:>5} {:<14} {:>8.1}/s  server {:.3} ms CPU each, {:.2} % of a core; \
             PgBouncer {}",
            self.path,
            self.clients,
            self.what,
            self.rate(),
            self.per_op_ms(),
            self.share(self.m.server_cpu),
            self.m
                .bouncer_cpu
                .map_or("-".to_string(), |c| format!("{:.2} %", self.share(c)))
        )
    }

    fn markdown(&self) -> String {
        format!(
            "| {} | {} | {} | {:.1} | {:.3} ms | {:.2} % | {} |",
            self.path,
            self.clients,
            self.what,
            self.rate(),
            self.per_op_ms(),
            self.share(self.m.server_cpu),
            self.m
                .bouncer_cpu
                .map_or("-".to_string(), |c| format!("{:.2} %", self.share(c)))
        )
    }
}

/// The renewal's statement, as `pg_stat_statements` shows it.
const RENEWAL: &str = "UPDATE % SET expires_at = clock_timestamp() + %";
/// The minimal write's.
const WRITE: &str = "UPDATE bench_write SET %";

/// Calls of the statements like `statement` and the CPU spent over
/// `window`. The counts are read just outside the CPU's window (each read
/// is a new backend's).
fn measure(
    pg: &Postgres,
    server: &Server,
    bouncer: Option<u32>,
    statement: &str,
    window: Duration,
) -> Measured {
    let calls = || -> u64 {
        pg.psql(&format!(
            "SELECT COALESCE(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE '{statement}'"
        ))
        .parse()
        .unwrap()
    };
    let before = calls();
    let (cpu0, pgb0, t0) = (server.cpu(), bouncer.map(pid_cpu), Instant::now());
    thread::sleep(window);
    let (cpu1, pgb1, wall) = (server.cpu(), bouncer.map(pid_cpu), t0.elapsed());
    let after = calls();
    Measured {
        ops: after - before,
        wall,
        server_cpu: cpu1.saturating_sub(cpu0),
        bouncer_cpu: pgb0.zip(pgb1).map(|(a, b)| b.saturating_sub(a)),
    }
}

/// `n` holders at `config`, opened `OPENERS` at a time.
fn open(config: &LeaseConfig, n: usize) -> Vec<(Generator, tempfile::TempDir)> {
    let layout: Layout = WIDE.parse().unwrap();
    let next = AtomicUsize::new(0);
    let opened = Mutex::new(Vec::with_capacity(n));
    let began = Instant::now();
    thread::scope(|s| {
        for _ in 0..OPENERS.min(n) {
            s.spawn(|| {
                while next.fetch_add(1, Ordering::Relaxed) < n {
                    let dir = idutil_harness::state_dir();
                    let g = Generator::builder()
                        .id_space(idutil_harness::space_for(dir.path()))
                        .state_dir(dir.path())
                        .layout(layout)
                        .lease(config.clone())
                        .open()
                        .expect("a holder opens");
                    g.next_id().unwrap();
                    opened.lock().unwrap().push((g, dir));
                }
            });
        }
    });
    eprintln!("{n} holders opened in {:?}", began.elapsed());
    opened.into_inner().unwrap()
}

fn close(crowd: Vec<(Generator, tempfile::TempDir)>) {
    let crowd = Mutex::new(crowd);
    thread::scope(|s| {
        for _ in 0..OPENERS {
            s.spawn(|| loop {
                let Some((g, dir)) = crowd.lock().unwrap().pop() else {
                    return;
                };
                g.close().unwrap();
                drop((g, dir));
            });
        }
    });
}

/// `n` clients, each on a connection of its own through `url`, each
/// writing its own row once every `every`, spread over it; measured over
/// `window` once all are connected.
fn minimal_writes(
    pg: &Postgres,
    server: &Server,
    bouncer: Option<u32>,
    url: &str,
    n: usize,
    every: Duration,
    window: Duration,
) -> Measured {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    let connected = std::sync::Arc::new(AtomicUsize::new(0));
    for i in 0..n {
        let (url, stop, connected) = (url.to_string(), stop.clone(), connected.clone());
        let phase = every.mul_f64(i as f64 / n as f64);
        clients.push(rt.spawn(async move {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .expect("a client connects");
            tokio::spawn(conn);
            connected.fetch_add(1, Ordering::Relaxed);
            let sql = format!("BEGIN; UPDATE bench_write SET n = n + 1 WHERE id = {i}; COMMIT");
            let mut next = tokio::time::Instant::now() + phase;
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep_until(next).await;
                client.simple_query(&sql).await.expect("a write");
                next += every;
            }
        }));
    }
    while connected.load(Ordering::Relaxed) < n {
        thread::sleep(Duration::from_millis(50));
    }
    thread::sleep(Duration::from_secs(2));
    let m = measure(pg, server, bouncer, WRITE, window);
    stop.store(true, Ordering::Relaxed);
    rt.block_on(async {
        for c in clients {
            let _ = c.await;
        }
    });
    m
}

/// The server's processes: the postmaster, from its data directory's
/// `postmaster.pid`.
struct Server {
    postmaster: u32,
}

impl Server {
    fn of(pg: &Postgres) -> Server {
        let pid_file: PathBuf = pg
            .socket_dir()
            .parent()
            .unwrap()
            .join("data/postmaster.pid");
        let text = std::fs::read_to_string(pid_file).unwrap();
        Server {
            postmaster: text.lines().next().unwrap().trim().parse().unwrap(),
        }
    }

    /// CPU time of the postmaster, its ended children and its live ones.
    fn cpu(&self) -> Duration {
        let mut cpu =
            pid_cpu(self.postmaster) + from_ticks(stat(self.postmaster).map_or(0, |s| s.children));
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            if stat(pid).is_some_and(|s| s.ppid == self.postmaster) {
                cpu += pid_cpu(pid);
            }
        }
        cpu
    }
}

struct Stat {
    ppid: u32,
    /// cutime + cstime.
    children: u64,
}

fn stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command's name in parentheses: state, ppid, ... (proc(5)).
    let fields: Vec<&str> = text[text.rfind(')')? + 2..].split(' ').collect();
    let n = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    Some(Stat {
        ppid: u32::try_from(n(1)?).ok()?,
        children: n(13)? + n(14)?,
    })
}

/// A single-threaded process's CPU time: the first field of its
/// `schedstat`, in nanoseconds.
fn pid_cpu(pid: u32) -> Duration {
    std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()
        .and_then(|text| text.split(' ').next()?.parse().ok())
        .map_or(Duration::ZERO, Duration::from_nanos)
}

fn from_ticks(ticks: u64) -> Duration {
    // SAFETY: sysconf only reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_secs_f64(ticks as f64 / hz as f64)
}

/// The PgBouncer listening on `port`: its configuration file (the one
/// argument) names the port.
fn pgbouncer_pid(port: u16) -> Option<u32> {
    let wanted = format!("listen_port = {port}\n");
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim() != "pgbouncer" {
                return false;
            }
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            cmdline
                .split(|&b| b == 0)
                .filter_map(|a| std::str::from_utf8(a).ok())
                .filter(|a| a.ends_with(".ini"))
                .any(|ini| std::fs::read_to_string(ini).is_ok_and(|text| text.contains(&wanted)))
        })
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}
