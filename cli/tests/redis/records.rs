//! Shard records garbled, vanished, missing or flushed under holders.

use idutil_harness as harness;
use idutil_harness::Tally;

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use idutil::lease::{LeaseConfig, LeaseError};
use idutil::{Error, Generator, Layout, ManualClock};
use idutil_harness::redis_server::{exists, record_of, seed_records, RedisServer};
use idutil_harness::{state_dir, wall_now};

use crate::{lease_child, leased};

/// A garbled field of the shard's record (a `high_water` too big for any
/// layout, or written as a float, a `last` past `high_water`, a `seen` that
/// is not a number) refuses the shard when it is asked for by number,
/// naming the key and the field; among other shards it is skipped, so one
/// bad record does not stop the fleet. Either way the lease is given back
/// and the record is left exactly as it was; `inspect` and `idutil state`
/// show the field as invalid.
#[test]
fn garbled_record_is_skipped_or_refused_and_stays_as_it_is() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let mut conn = redis.conn();
    let key = "idutil:mark:3";
    let later = (wall_now() + 10).to_string();
    let garbles = [
        ("high_water", "99999999999999999999".to_string()),
        ("high_water", "1795999999.0".to_string()),
        ("last", format!("{later} 0")),
        ("seen", "soon".to_string()),
    ];
    for (field, value) in &garbles {
        seed_records(&redis, 3..=4);
        redis::cmd("HSET")
            .arg(key)
            .arg(field)
            .arg(value)
            .exec(&mut conn)
            .unwrap();
        let before = record_of(&mut conn, key);
        let host = state_dir();
        let open = |config: LeaseConfig, only: Option<u32>| {
            let mut b = Generator::builder()
                .id_space(harness::space_for(host.path()))
                .state_dir(host.path())
                .lease(config.ttl(Duration::from_secs(1)));
            if let Some(shard) = only {
                b = b.shard(shard);
            }
            b.open()
        };
        // Asked for by number: refused, naming the key and the field.
        let err = open(LeaseConfig::new(redis.url()).shards(3..=4), Some(3))
            .map(|g| g.shard())
            .expect_err("a garbled record must refuse the shard");
        match &err {
            Error::Lease(LeaseError::InvalidRecord {
                shard: 3,
                key: k,
                field: f,
                ..
            }) => {
                assert_eq!((k.as_str(), f), (key, field), "{err}");
            }
            other => panic!("{field} = {value}: {other}"),
        }
        let text = err.to_string();
        assert!(
            text.contains(key) && text.contains(field) && text.contains(value.as_str()),
            "{text}"
        );
        assert!(
            !exists(&mut conn, "idutil:lease:3"),
            "the lease is given back"
        );
        assert!(
            !exists(&mut conn, "idutil:lease:4"),
            "no silent move to another shard when one was asked for"
        );
        // Among others: skipped, and the next shard leased; the fleet goes on.
        let g = open(LeaseConfig::new(redis.url()).shards(3..=4), None)
            .expect("the unusable shard is skipped");
        assert_eq!(g.shard(), 4);
        assert!(!exists(&mut conn, "idutil:lease:3"));
        drop(g);
        // The only shard of the range: no free shard, and the message says
        // which was skipped and why.
        let err = open(LeaseConfig::new(redis.url()).shards(3..=3), None)
            .map(|g| g.shard())
            .expect_err("no usable shard");
        assert!(
            matches!(&err, Error::Lease(LeaseError::NoFreeShard { skipped, .. }) if skipped.len() == 1),
            "{err}"
        );
        let text = err.to_string();
        assert!(text.contains("shard 3") && text.contains(key), "{text}");
        assert_eq!(record_of(&mut conn, key), before, "the record is untouched");

        let rows =
            idutil::lease::inspect(&LeaseConfig::new(redis.url()), &Layout::DEFAULT).unwrap();
        assert_eq!(rows[3].invalid.len(), 1, "{:?}", rows[3]);
        assert!(rows[3].invalid[0].starts_with(field), "{:?}", rows[3]);
        assert!(rows[4].invalid.is_empty(), "{:?}", rows[4]);
        if *field == "high_water" {
            assert_eq!(rows[3].high_water, None);
        }

        {
            let bin = env!("CARGO_BIN_EXE_idutil");
            let run = |args: &[&str]| {
                Command::new(bin)
                    .args(["--lease", &redis.url()])
                    .args(args)
                    .env("IDUTIL_STATE_DIR", host.path())
                    .env("IDUTIL_ID_SPACE", harness::space_for(host.path()))
                    .env_remove("IDUTIL_SHARD")
                    .env_remove("IDUTIL_LEASE_URL")
                    .output()
                    .unwrap()
            };
            let out = run(&["--shard", "3", "next"]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{err}");
            assert!(err.contains(key) && err.contains(field), "{err}");
            assert_eq!(err.lines().count(), 1, "{err}");
            let out = run(&["state"]);
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success());
            let row = text.lines().find(|l| l.starts_with("shard  3:")).unwrap();
            assert!(
                row.contains("record INVALID") && row.contains(field),
                "{row}"
            );
            assert_eq!(record_of(&mut conn, key), before, "the record is untouched");
        }
    }
}

/// A clean close records the exact last ID but leaves `high_water` where
/// the reservation put it: a mark is never lowered. The next holder still
/// continues right after the last ID.
#[test]
fn clean_close_never_lowers_the_high_water_mark() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    seed_records(&redis, 2..=2);
    let mut conn = redis.conn();
    let key = "idutil:mark:2";
    let config = LeaseConfig::new(redis.url()).shards(2..=2);
    let (host_a, host_b) = (state_dir(), state_dir());
    let t = wall_now();
    let a = leased(&host_a, config.clone())
        .clock(ManualClock::new(t))
        .open()
        .unwrap();
    let ids: Vec<u64> = a.next_ids(100).unwrap().map(|i| i.as_u64()).collect();
    let reserved: u64 = redis::cmd("HGET")
        .arg(key)
        .arg("high_water")
        .query::<String>(&mut conn)
        .unwrap()
        .parse()
        .unwrap();
    let last = *ids.last().unwrap();
    let last_second = Layout::DEFAULT.epoch() + (last >> 21);
    assert!(
        reserved > last_second,
        "the reservation runs ahead of the last ID"
    );
    a.close().unwrap();
    let after = record_of(&mut conn, key);
    assert_eq!(
        after["high_water"],
        reserved.to_string(),
        "high_water after a clean close: {after:?}"
    );
    let (sec, seq) = after["last"].split_once(' ').unwrap();
    assert_eq!(sec.parse::<u64>().unwrap(), last_second);
    assert_eq!(seq.parse::<u64>().unwrap(), (last >> 5) & 0xffff);

    let b = leased(&host_b, config)
        .clock(ManualClock::new(t - 3600))
        .open()
        .unwrap();
    assert_eq!(b.next_id().unwrap().as_u64(), last + 32);
    b.close().unwrap();
    let high_water: u64 = record_of(&mut conn, key)["high_water"].parse().unwrap();
    assert!(
        high_water >= reserved,
        "never lowered: {high_water} < {reserved}"
    );
}

/// The first generator on a shard without a record holds the lease for one
/// TTL (renewing it, the record still absent), then creates the record past
/// what a holder whose record Redis lost can have issued: Redis's clock
/// plus the lead cap, the skew limit and a second. Its first ID comes right
/// after that second, once its lead is back under the cap.
#[test]
fn shard_without_record_is_held_one_ttl_then_starts_past_the_lead_cap() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let ttl = Duration::from_secs(2);
    let (lead, skew) = (3, 1);
    let start = wall_now();
    let host = state_dir();
    let url = redis.url();
    let started = Instant::now();
    let opener = thread::spawn(move || {
        let config = LeaseConfig::new(url)
            .shards(12..=12)
            .ttl(ttl)
            .max_lead(Duration::from_secs(lead))
            .max_skew(Duration::from_secs(skew));
        let g = leased(&host, config).open().unwrap();
        (g, Instant::now(), host)
    });
    let mut conn = redis.conn();
    // Watched until the opener returns: whenever the lease is seen held,
    // the record is still absent until one TTL has passed since the start
    // (before which no lease was taken), and the wait itself is seen.
    let mut saw_waiting = false;
    while !opener.is_finished() {
        let holder: Option<String> = redis::cmd("GET")
            .arg("idutil:lease:12")
            .query(&mut conn)
            .unwrap();
        let record = exists(&mut conn, "idutil:mark:12");
        if started.elapsed() < ttl {
            assert!(!record, "the record is created only after one TTL");
        }
        saw_waiting |= holder.is_some() && !record;
        thread::sleep(Duration::from_millis(10));
    }
    let (g, opened_at, _host) = opener.join().unwrap();
    assert!(
        saw_waiting,
        "the lease was never seen held while the record was absent"
    );
    assert!(
        opened_at - started >= ttl,
        "opened after {:?}",
        opened_at - started
    );
    // Created at least one TTL after the start, past Redis's clock by the
    // lead cap, the skew limit and a second; since raised by the first
    // reservation, which starts after it.
    let record = record_of(&mut conn, "idutil:mark:12");
    let floor = start + ttl.as_secs() + lead + skew + 1;
    let high_water: u64 = record["high_water"].parse().unwrap();
    assert!(high_water >= floor, "{record:?}, floor {floor}");
    assert!(record["seen"].parse::<u64>().unwrap() >= start);
    assert_eq!(record["layout"], Layout::DEFAULT.fingerprint());
    assert_eq!(record["run"], redis.run_id(), "confirmed under this server");
    let id = g.next_id().unwrap();
    assert!(id.unix_seconds() > floor, "{id:?}");
    // Closed while its state directory is still there.
    drop(g);
}

/// `FLUSHALL` while one holder (a child process) issues IDs continuously,
/// and a second holder (another process, another host's state directory)
/// asks for the shard right after: the second gets the lease at once but
/// waits one TTL before its first ID; the first stops for good at its next
/// renewal with the error that says the record vanished, after writing its
/// mark back, which the second then starts past (by the lead cap). No ID is
/// issued twice.
#[test]
fn flushall_under_a_live_holder_issues_nothing_twice() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    seed_records(&redis, 5..=5);
    let mut conn = redis.conn();
    let ttl = Duration::from_secs(3);
    let ttl_ms = ttl.as_millis() as u64;
    let (host_a, host_b) = (state_dir(), state_dir());
    let mut a = lease_child(&redis.url(), ttl_ms, (5, 5), "paced", host_a.path());
    assert_eq!(a.next().as_deref(), Some("leased 5"));
    let a_pid = a.child.id().to_string();
    a.go();
    let a_lines = a.follow();
    let mut a_ids = Vec::new();
    while a_ids.len() < 2000 {
        let (line, _) = a_lines.recv_timeout(ttl).expect("A issues");
        a_ids.push(line.strip_prefix("id ").unwrap().parse::<u64>().unwrap());
    }

    redis::cmd("FLUSHALL").exec(&mut conn).unwrap();
    let flushed_at = Instant::now();
    let b_spawned = Instant::now();
    let mut b = lease_child(&redis.url(), ttl_ms, (5, 5), "paced", host_b.path());

    // A stops at its next renewal, a third of the TTL after the last.
    let (a_error, a_error_at) = loop {
        let (line, at) = a_lines.recv_timeout(ttl).expect("A reports");
        match line.strip_prefix("id ") {
            Some(id) => a_ids.push(id.parse().unwrap()),
            None => break (line, at),
        }
    };
    assert!(
        a_error.starts_with("error the lease's store lost the record of shard 5"),
        "{a_error}"
    );
    // Its renewal comes every third of the TTL; within the TTL is what
    // keeps it clear of B, whose lease started after the flush.
    assert!(
        a_error_at - flushed_at < ttl,
        "{:?}",
        a_error_at - flushed_at
    );
    // Just before B may create the record (one TTL after it got the lease,
    // which was after the flush): A has written its mark back.
    thread::sleep(
        (flushed_at + ttl - Duration::from_millis(200)).saturating_duration_since(Instant::now()),
    );
    let high_water: u64 = record_of(&mut conn, "idutil:mark:5")["high_water"]
        .parse()
        .unwrap();
    let a_last = idutil::Id::from_u64(*a_ids.last().unwrap()).unwrap();
    assert!(
        high_water >= a_last.unix_seconds(),
        "A's mark written back, {high_water}, is below its last ID's second"
    );
    let lease: Option<String> = redis::cmd("GET")
        .arg("idutil:lease:5")
        .query(&mut conn)
        .unwrap();
    assert!(
        !lease.unwrap_or_default().contains(&format!(":{a_pid}:")),
        "A took the lease back"
    );

    assert_eq!(b.next().as_deref(), Some("leased 5"));
    b.go();
    let b_lines = b.follow();
    let mut b_ids = Vec::new();
    let mut b_first_at = None;
    while b_ids.len() < 2000 {
        // B's first ID waits for its lead to fall under the cap: it starts
        // past the lead cap and the skew limit (7 s by default).
        let (line, at) = b_lines
            .recv_timeout(ttl * 2 + Duration::from_secs(10))
            .expect("B issues");
        let id = line
            .strip_prefix("id ")
            .unwrap_or_else(|| panic!("B: {line}"));
        b_ids.push(id.parse::<u64>().unwrap());
        b_first_at.get_or_insert(at);
    }
    let waited = b_first_at.unwrap() - b_spawned;
    assert!(
        waited >= ttl,
        "B's first ID came {waited:?} after it started"
    );

    // A stays stopped, with the same error, while B issues.
    while let Ok((line, _)) = a_lines.try_recv() {
        assert!(
            line.starts_with("error the lease's store lost the record of shard 5"),
            "A after its error: {line}"
        );
    }
    drop(a);
    drop(b);
    let mut seen = Tally::new();
    seen.add(a_ids, "A");
    seen.add(b_ids, "B");
}
