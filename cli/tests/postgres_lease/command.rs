//! The `idutil` command with a PostgreSQL lease, TLS, and async callers.

use idutil_harness as harness;

use std::process::Command;

use idutil::lease::LeaseConfig;
use idutil_harness::postgres::{Options, Postgres};
use idutil_harness::state_dir;

use crate::{leased, server, WIDE};

/// `idutil --lease URL next` leases, resumes after itself, and `state`
/// shows the leases; `--layout` (and `IDUTIL_LAYOUT`) give fleets beyond 32
/// shards; a bad layout or URL is a usage error.
#[test]
fn command_leases_from_postgres_with_a_chosen_layout() {
    let Some(pg) = server() else { return };
    let url = pg.tcp_url();
    let dir = state_dir();
    let run = |args: &[&str], envs: &[(&str, &str)]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_idutil"));
        cmd.args(args)
            .env("IDUTIL_STATE_DIR", dir.path())
            .env("IDUTIL_ID_SPACE", harness::space_for(dir.path()))
            .env_remove("IDUTIL_SHARD")
            .env_remove("IDUTIL_LEASE_URL")
            .env_remove("IDUTIL_LAYOUT");
        for (k, v) in envs {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };
    let ids = harness::printed_ids;
    let first = ids(&run(
        &["--lease", &url, "--layout", WIDE, "next", "-n", "3"],
        &[],
    ));
    let second = ids(&run(
        &["next", "-n", "3"],
        &[("IDUTIL_LEASE_URL", &url), ("IDUTIL_LAYOUT", WIDE)],
    ));
    assert!(
        second[0] > first[2],
        "the second run resumes after the first"
    );
    let decoded = run(&["--layout", WIDE, "decode", &first[0].to_string()], &[]);
    let text = String::from_utf8_lossy(&decoded.stdout);
    assert!(text.contains("shard=0"), "{text}");

    let out = run(
        &["--lease", &url, "--layout", WIDE, "--shard", "700", "next"],
        &[],
    );
    let id = ids(&out)[0];
    assert_eq!(id & 1023, 700, "a shard beyond 31 under a wide layout");
    let out = run(&["--lease", &url, "--layout", WIDE, "state", "--json"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["leases"].as_array().unwrap().len(), 1024);
    assert!(doc["leases"][700]["high_water"].as_u64().is_some());

    // The default layout on the same ID space: refused, the layout named.
    let out = run(&["--lease", &url, "next"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("was used with layout"), "{err}");
    // Its advice never leads to a repeat: a new ID space is safe only for
    // tables that never held this one's IDs, and it says so.
    assert!(
        err.contains("keep layout") && err.contains("never held this ID space's IDs"),
        "{err}"
    );
    for (args, says) in [
        (vec!["--layout", "seconds:40", "next"], "invalid layout"),
        (vec!["--lease", " ", "next"], "empty or blank"),
        (
            vec!["--lease", "mysql://h/db", "next"],
            "names no lease engine",
        ),
        (vec!["--shard", "70000", "next"], "not a shard"),
    ] {
        let out = run(&args, &[]);
        assert_eq!(
            out.status.code(),
            Some(if says == "names no lease engine" {
                1
            } else {
                2
            }),
            "{args:?}"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// TLS: a server with a certificate for `localhost` signed by a test CA.
/// `sslmode=require` encrypts without checking; `verify-full` with the CA
/// (`sslrootcert`) checks the chain and the host name, and refuses a host
/// name the certificate does not name, or a CA it was not signed by.
#[test]
fn tls_require_and_verify_full() {
    let Some(certs) = TestCerts::make() else {
        return;
    };
    let Some(pg) = Postgres::start_tcp(&Options {
        max_connections: Some(50),
        settings: vec![
            "ssl=on".into(),
            format!("ssl_cert_file={}", certs.server_cert),
            format!("ssl_key_file={}", certs.server_key),
        ],
    }) else {
        return;
    };
    let port = pg.port();
    let host = state_dir();
    let open = |url: String| leased(&host, LeaseConfig::new(url).shards(0..=0)).open();
    let g = open(format!(
        "postgres://postgres@localhost:{port}/postgres?sslmode=require"
    ))
    .unwrap();
    g.next_id().unwrap();
    drop(g);
    let g = open(format!(
        "postgres://postgres@localhost:{port}/postgres?sslmode=verify-full&sslrootcert={}",
        certs.ca
    ))
    .unwrap();
    g.next_id().unwrap();
    let ssl = pg.psql("SELECT count(*) FROM pg_stat_ssl WHERE ssl");
    assert!(
        ssl.parse::<u32>().unwrap() >= 1,
        "the lease's connections use TLS"
    );
    drop(g);
    let err = open(format!(
        "postgres://postgres@127.0.0.1:{port}/postgres?sslmode=verify-full&sslrootcert={}",
        certs.ca
    ))
    .unwrap_err();
    assert!(err.to_string().contains("PostgreSQL"), "{err}");
    let err = open(format!(
        "postgres://postgres@localhost:{port}/postgres?sslmode=verify-full"
    ))
    .unwrap_err();
    assert!(
        err.to_string().contains("cannot connect to PostgreSQL"),
        "{err}"
    );
}

/// A CA and a server certificate for `localhost`, made with `openssl`.
struct TestCerts {
    _dir: tempfile::TempDir,
    ca: String,
    server_cert: String,
    server_key: String,
}
impl TestCerts {
    fn make() -> Option<TestCerts> {
        let dir = tempfile::tempdir().unwrap();
        let p = |name: &str| dir.path().join(name).display().to_string();
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl").args(args).output();
            match out {
                Ok(out) if out.status.success() => true,
                Ok(out) => panic!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr)),
                Err(e) => {
                    harness::skipped(format_args!(
                        "\n*** SKIPPED: openssl not found ({e}), so the lease's TLS was NOT \
                         tested ***\n"
                    ));
                    false
                }
            }
        };
        let ok = openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=idutil test CA",
            "-keyout",
            &p("ca.key"),
            "-out",
            &p("ca.pem"),
        ]) && openssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            &p("server.key"),
            "-out",
            &p("server.csr"),
        ]);
        if !ok {
            return None;
        }
        std::fs::write(dir.path().join("ext"), "subjectAltName=DNS:localhost\n").unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            &p("server.csr"),
            "-CA",
            &p("ca.pem"),
            "-CAkey",
            &p("ca.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &p("ext"),
            "-out",
            &p("server.pem"),
        ]);
        // The server runs as another user and wants its key private.
        for f in ["server.pem", "server.key"] {
            let path = dir.path().join(f);
            let _ = Command::new("chown").arg("nobody").arg(&path).status();
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap();
        }
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        Some(TestCerts {
            ca: p("ca.pem"),
            server_cert: p("server.pem"),
            server_key: p("server.key"),
            _dir: dir,
        })
    }
}

/// A generator opened from async code (a Tokio `main`) with a PostgreSQL
/// lease works, and so does dropping it there.
#[test]
fn opening_and_closing_from_async_code_works() {
    let Some(pg) = server() else { return };
    let url = pg.tcp_url();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let host = state_dir();
        let g = leased(&host, LeaseConfig::new(url).shards(9..=9))
            .open()
            .unwrap();
        let a = g.next_id().unwrap();
        assert!(g.next_id().unwrap() > a);
        g.close().unwrap();
        drop(g);
    });
}
