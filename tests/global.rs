//! The process-wide generator behind `IdUtil`. One test, in its own test
//! binary, because it sets the environment and the generator lives for the
//! whole process.

use idutil_harness as harness;

use std::thread;

use idutil::{Error, Generator, IdUtil};
use idutil_harness::Tally;

#[test]
fn the_one_line_api_from_first_use_to_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    std::env::set_var("IDUTIL_STATE_DIR", dir.path());
    std::env::set_var("IDUTIL_SHARD", "17");
    // An ID space of its own, so other test processes on shard 17 are not
    // in the way.
    let space = format!("test-global-{}", std::process::id());
    std::env::set_var("IDUTIL_ID_SPACE", &space);

    // Created lazily, from the environment, by whichever thread comes first.
    let handles: Vec<_> = (0..4)
        .map(|_| thread::spawn(|| (0..50_000).map(|_| IdUtil::next_id()).collect::<Vec<i64>>()))
        .collect();
    let mut seen = Tally::new();
    let mut highest = 0;
    for (i, h) in handles.into_iter().enumerate() {
        let ids: Vec<u64> = h.join().unwrap().into_iter().map(|id| id as u64).collect();
        harness::assert_increasing(&ids);
        highest = highest.max(*ids.last().unwrap());
        seen.add(ids, &format!("thread {i}"));
    }
    let g = IdUtil::generator().unwrap();
    assert_eq!(g.shard(), 17);
    assert!(!g.is_ephemeral());
    // The typed call: the same sequence, as an `Id`.
    let typed: idutil::Id = IdUtil::next();
    assert!(typed.as_u64() > highest);
    assert!(IdUtil::try_next().unwrap() > typed);
    assert_eq!(g.state_dir(), dir.path());

    // `init` returns the existing generator; `init_with` refuses a second.
    assert!(std::ptr::eq(IdUtil::init().unwrap(), g));
    assert!(matches!(
        IdUtil::init_with(Generator::builder().shard(1)),
        Err(Error::AlreadyInitialized)
    ));
    // Another state directory for the shard is refused on this host; in
    // the same directory, another generator (here in another ID space)
    // shares the shard and never repeats the process-wide one's IDs.
    let other_dir = tempfile::tempdir().unwrap();
    let second = Generator::builder()
        .shard(17)
        .state_dir(other_dir.path())
        .open();
    let pid = std::process::id();
    assert!(
        matches!(second, Err(Error::HostLocked { shard: 17, pid: Some(p), .. }) if p == pid),
        "{second:?}"
    );
    let third = Generator::builder()
        .id_space(format!("{space}-other"))
        .shard(17)
        .state_dir(dir.path())
        .open()
        .expect("the shard is shared in its state directory");
    for _ in 0..1000 {
        let (a, b) = (third.next_id().unwrap(), IdUtil::next());
        seen.add([a.as_u64()], "the second generator");
        seen.add([b.as_u64()], "the process-wide one");
    }
    third.close().unwrap();

    let batch: Vec<_> = IdUtil::next_ids(1000).unwrap().collect();
    let last = IdUtil::try_next_id().unwrap();
    assert!(last > i64::from(*batch.last().unwrap()));

    // A clean shutdown records the exact last ID.
    IdUtil::shutdown().unwrap();
    assert!(matches!(IdUtil::try_next_id(), Err(Error::Closed)));
    // It does not come back: `init` says it is closed rather than hand
    // out the closed generator as if it worked.
    assert!(matches!(IdUtil::init(), Err(Error::Closed)));
    assert!(matches!(IdUtil::init_ephemeral(), Err(Error::Closed)));
    assert!(matches!(IdUtil::try_next(), Err(Error::Closed)));
    // The last of the processes sharing the shard to close records the
    // last ID any of them issued: here the highest of both generators'.
    let report = idutil::state::inspect(dir.path(), 17).unwrap();
    let (second, sequence) = report.state.unwrap().last.expect("clean close");
    let highest = seen.max().unwrap().max(last as u64);
    let highest = idutil::Id::from_u64(highest).unwrap();
    assert_eq!(
        (second, sequence),
        (highest.unix_seconds(), highest.sequence())
    );

    // After shutdown the one-line call panics with the reason.
    let panic = std::panic::catch_unwind(IdUtil::next_id).unwrap_err();
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("closed"), "{message}");
}
