//! A live process holding the shard, as the command sees it.

use idutil_harness as harness;

use std::io::BufReader;
use std::path::Path;
use std::process::Child;

use idutil_harness::{idutil, on_disk, parts, run, unix_second, Ledger};

use crate::child_env;

/// A child process holding `shard` after issuing `n` IDs.
struct Holder {
    child: Child,
    ids: Vec<u64>,
    // Kept open until the child has exited, so it never writes to a closed
    // pipe.
    _out: BufReader<std::process::ChildStdout>,
}
impl Holder {
    fn start(shard: u32, dir: &Path, n: u64) -> Holder {
        let mut env = child_env(shard, dir);
        env.push(("IDUTIL_CHILD_N", n.to_string()));
        let mut child = harness::spawn_child("child_hold_shard", &env);
        let (ids, out) = harness::read_until_ready(child.stdout.take().unwrap());
        assert_eq!(ids.len() as u64, n);
        Holder {
            child,
            ids,
            _out: out,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Closes its stdin: it closes its generator and exits.
    fn release(mut self) {
        drop(self.child.stdin.take());
        let status = self.child.wait().expect("wait for the holder");
        assert!(status.success(), "the holder exited with {status}");
    }
}

#[test]
fn a_live_process_holding_the_shard_shares_it_with_the_command_but_not_with_a_recovery() {
    let dir = harness::state_dir();
    let mut ledger = Ledger::new();
    let holder = Holder::start(12, dir.path(), 100);
    ledger.record(&holder.ids);

    // The command joins the live process on the shard: its IDs are new.
    for _ in 0..2 {
        let ids = harness::next(12, dir.path(), 5);
        assert_eq!(ids.len(), 5);
        ledger.record(&ids);
    }
    // Recovery is refused too: it would replace a live generator's state.
    let r = run(idutil(12, dir.path()).args(["state", "recover"]))
        .expect_code(1, "idutil state recover on a held shard");
    assert!(
        r.stderr.contains(&format!("pid {}", holder.pid())),
        "{}",
        r.stderr
    );
    // Other shards in the same directory are free.
    let other = harness::next(13, dir.path(), 5);

    holder.release();
    let ids = harness::next(12, dir.path(), 100);
    ledger.record_after_all(&ids);
    ledger.record(&other);
    ledger.assert_unique();
}

#[test]
fn the_state_command_shows_path_shard_clock_id_high_water_last_issued_and_holder() {
    let dir = harness::state_dir();
    let shard = 14;
    let path = harness::state_file(dir.path(), shard);
    let path_text = path.display().to_string();
    let state = |json: bool| {
        let mut cmd = idutil(shard, dir.path());
        cmd.arg("state");
        if json {
            cmd.arg("--json");
        }
        run(&mut cmd).expect_code(0, "idutil state").stdout
    };

    let text = state(false);
    assert!(text.contains(&path_text), "{text}");
    assert!(text.contains("lock holder:  none"), "{text}");
    assert!(text.contains("none yet"), "{text}");

    let ids = harness::next(shard, dir.path(), 5);
    let last = *ids.last().unwrap();
    let disk = on_disk(dir.path(), shard);
    let mark = disk.high_water[&0];
    let text = state(false);
    for want in [
        format!("path:         {path_text}"),
        format!("shard:        {shard}"),
        "lock holder:  none".to_string(),
        "clock id:     0".to_string(),
        format!("({mark}) clock value 0"),
        format!("ID {last} (clean close)"),
    ] {
        assert!(text.contains(&want), "{want:?} not in:\n{text}");
    }
    let json = harness::state_json(shard, dir.path());
    assert_eq!(json["path"], path_text);
    assert_eq!(json["shard"], shard);
    assert_eq!(json["locked"], false);
    assert!(json["holder_pid"].is_null());
    assert_eq!(json["state"]["clock_id"], 0);
    assert_eq!(json["state"]["high_water"][0]["second"], mark);
    assert_eq!(json["state"]["last_issued"]["id"], last);
    assert_eq!(
        json["state"]["last_issued"]["sequence"],
        parts(last).sequence
    );

    // A live holder: its pid, and no clean-close record while it runs.
    let holder = Holder::start(shard, dir.path(), 3);
    assert!(holder.ids[0] > last);
    let pid = holder.pid();
    let text = state(false);
    assert!(text.contains(&format!("lock holder:  pid {pid}")), "{text}");
    assert!(text.contains("last issued:  unknown"), "{text}");
    let json = harness::state_json(shard, dir.path());
    assert_eq!(json["locked"], true);
    assert_eq!(json["holder_pid"], pid);
    assert!(json["state"]["last_issued"].is_null());
    let held_mark = json["state"]["high_water"][0]["second"].as_u64().unwrap();
    assert!(held_mark >= unix_second(*holder.ids.last().unwrap()));
    let held = holder.ids.clone();
    holder.release();

    let json = harness::state_json(shard, dir.path());
    assert!(json["holder_pid"].is_null());
    assert_eq!(json["state"]["last_issued"]["id"], *held.last().unwrap());
    harness::assert_unique_set(&[ids, held].concat());
}
