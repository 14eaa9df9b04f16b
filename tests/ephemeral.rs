//! The way an application's tests and doctests use `IdUtil`: many
//! processes at once (as rustdoc runs doctests and nextest runs tests),
//! each with the process-wide generator on the same shard and no setup,
//! all alive together. From the environment they share the shard and never
//! repeat each other's IDs; ephemeral generators, for tests that must not
//! touch the state directory, each keep a shard of their own.

use idutil_harness as harness;

use std::io::Read;
use std::process::Child;

use idutil::{Error, Generator, IdUtil};

/// How many test processes hold a generator at once.
const PROCESSES: usize = 6;

/// Starts `PROCESSES` children of `entry` and waits until each is ready
/// (it then holds its generator until its stdin closes); returns the
/// children with what each printed before its ready mark.
type Held = (
    Child,
    Vec<u64>,
    String,
    std::io::BufReader<std::process::ChildStdout>,
);

fn all_at_once(entry: &str, envs: &[(&str, String)]) -> Vec<Held> {
    let mut children: Vec<Child> = (0..PROCESSES)
        .map(|_| harness::spawn_child(entry, envs))
        .collect();
    children
        .iter_mut()
        .map(|child| {
            let out = child.stdout.take().unwrap();
            let mut reader = std::io::BufReader::new(out);
            let mut text = String::new();
            // Up to the ready mark, or to the end if the child stopped.
            let mut line = String::new();
            while std::io::BufRead::read_line(&mut reader, &mut line).unwrap() > 0 {
                text.push_str(&line);
                if line.contains(harness::READY_MARK) {
                    break;
                }
                line.clear();
            }
            (harness::child_ids(&text).0, text, reader)
        })
        .collect::<Vec<_>>()
        .into_iter()
        .zip(children)
        .map(|((ids, text, reader), child)| (child, ids, text, reader))
        .collect()
}

/// Closes each child's stdin, reads the rest of its output (libtest's
/// summary) and waits for it.
fn release(children: Vec<Held>) -> Vec<std::process::ExitStatus> {
    children
        .into_iter()
        .map(|(mut child, _, _, reader)| {
            drop(child.stdin.take());
            harness::read_rest(reader);
            child.wait().unwrap()
        })
        .collect()
}

fn release_all_ok(children: Vec<Held>) {
    for status in release(children) {
        assert!(status.success(), "a child failed: {status}");
    }
}

#[test]
fn test_processes_with_ephemeral_generators_run_at_once_on_one_shard() {
    let children = all_at_once("child_ephemeral", &[]);
    for (_, ids, text, _) in &children {
        assert!(text.contains(harness::READY_MARK), "a child failed: {text}");
        assert_eq!(ids.len(), 100, "{text}");
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        assert!(ids.iter().all(|&id| harness::parts(id).shard == 0));
    }
    release_all_ok(children);
}

#[test]
fn the_same_processes_without_it_share_the_shard_and_never_repeat_an_id() {
    let dir = harness::state_dir();
    let space = harness::space_for(dir.path());
    let envs = [
        ("IDUTIL_CHILD_DIR", dir.path().display().to_string()),
        ("IDUTIL_SHARD", "9".to_string()),
        ("IDUTIL_ID_SPACE", space.clone()),
    ];
    let children = all_at_once("child_plain", &envs);
    let mut all = Vec::new();
    for (_, ids, text, _) in &children {
        assert!(text.contains(harness::READY_MARK), "a child failed: {text}");
        assert_eq!(ids.len(), 100, "{text}");
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "increasing: {text}");
        assert!(ids.iter().all(|&id| harness::parts(id).shard == 9));
        all.extend(ids);
    }
    // Six processes alive at once on one shard: a shared test database
    // sees no collision.
    harness::assert_unique_set(&all);
    release_all_ok(children);
    // They ended without closing anything themselves: the process-wide
    // generator closed at exit, the last one recorded the last ID, and
    // nothing is left in the per-host lock directory.
    let report = idutil::state::inspect(dir.path(), 9).unwrap();
    let last = report.state.unwrap().last.expect("a clean close at exit");
    let max = *all.iter().max().unwrap();
    assert_eq!(
        last,
        (harness::unix_second(max), harness::parts(max).sequence)
    );
    for lock_dir in ["/run/lock", "/dev/shm", "/tmp"] {
        let left = std::path::Path::new(lock_dir).join(format!("idutil.{space}.shard-9.lock"));
        assert!(!left.exists(), "{} left behind", left.display());
    }
}

#[test]
fn ephemeral_generators_of_one_process_never_repeat_an_id() {
    let g = Generator::builder_ephemeral().shard(4).open().unwrap();
    assert!(g.is_ephemeral());
    let dir = g.state_dir().to_path_buf();
    assert!(dir.is_dir() && dir.starts_with(std::env::temp_dir()));
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(&format!("idutil-ephemeral-{}-", std::process::id())),
        "{name}"
    );
    let a = g.next_id().unwrap();
    assert_eq!(a.shard(), 4);
    // Within the process, the shard is one ephemeral generator's at a
    // time ...
    let second = Generator::builder_ephemeral().shard(4).open();
    assert!(
        matches!(second, Err(Error::Locked { shard: 4, .. })),
        "{second:?}"
    );
    // ... and the next one continues after it, in the same second too.
    drop(g);
    let mut last = a;
    for _ in 0..20 {
        let again = Generator::builder_ephemeral().shard(4).open().unwrap();
        assert_eq!(again.state_dir(), dir);
        let b = again.next_id().unwrap();
        assert!(b > last, "{b} after {last}");
        last = b;
    }
}

/// Entry point: the process-wide generator made ephemeral, as an
/// application's test or doctest does, with the environment pointing
/// elsewhere (ignored); 100 IDs; then held until stdin closes.
#[test]
#[ignore = "a child process of the test above"]
fn child_ephemeral() {
    if !harness::is_child() {
        return;
    }
    std::env::set_var("IDUTIL_SHARD", "31");
    std::env::set_var("IDUTIL_STATE_DIR", "relative/is/never/read");
    IdUtil::init_ephemeral().unwrap();
    IdUtil::init_ephemeral().expect("calling it again is harmless");
    let g = IdUtil::generator().unwrap();
    assert!(g.is_ephemeral() && g.shard() == 0);
    for _ in 0..50 {
        println!("{}{}", harness::ID_MARK, IdUtil::next_id());
        println!("{}{}", harness::ID_MARK, IdUtil::next());
    }
    println!("{}", harness::READY_MARK);
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    IdUtil::shutdown().unwrap();
    assert!(matches!(IdUtil::init_ephemeral(), Err(Error::Closed)));
}

/// Entry point: the process-wide generator from the environment, as an
/// application's test without `init_ephemeral` gets it.
#[test]
#[ignore = "a child process of the test above"]
fn child_plain() {
    if !harness::is_child() {
        return;
    }
    std::env::set_var("IDUTIL_STATE_DIR", harness::child_var("IDUTIL_CHILD_DIR"));
    match IdUtil::init() {
        Ok(_) => {
            for _ in 0..100 {
                println!("{}{}", harness::ID_MARK, IdUtil::next_id());
            }
            // Once a real generator runs, an ephemeral one is refused.
            assert!(matches!(
                IdUtil::init_ephemeral(),
                Err(Error::AlreadyInitialized)
            ));
            println!("{}", harness::READY_MARK);
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
        }
        Err(e) => println!("@refused {e}"),
    }
}
