//! Runs the web example (`examples/web/`) as a real process on a loopback
//! port and talks HTTP/1.1 to it, for the tests that check its API end to
//! end.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::Duration;

const START_TIMEOUT: Duration = Duration::from_secs(60);
const IO_TIMEOUT: Duration = Duration::from_secs(20);

/// The example's binary, built by `cargo build -p idutil-example-web` with
/// this test's profile and target directory, and the lease engines of this
/// test's features, so it is never stale.
///
/// The example is not a default member of the workspace, so `cargo test`
/// does not build it, and an older binary may be lying around; asking cargo
/// costs well under a second when it is up to date.
pub fn binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        // .../target/<profile>/deps/<test> -> .../target/<profile>
        let exe = std::env::current_exe().expect("the test's own path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("tests run from <target>/<profile>/deps");
        let target_dir = profile_dir.parent().expect("a target directory");
        let mut cargo = Command::new(env!("CARGO"));
        cargo
            .args(["build", "--quiet", "--bin", "web", "--manifest-path"])
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/web/Cargo.toml"))
            .arg("--target-dir")
            .arg(target_dir);
        // The example's own features: the engines `--lease URL` may name.
        let features: Vec<&str> = [
            (cfg!(feature = "redis"), "redis"),
            (cfg!(feature = "postgres-lease"), "postgres-lease"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        if !features.is_empty() {
            cargo.arg("--features").arg(features.join(","));
        }
        match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => {}
            Some("release") => {
                cargo.arg("--release");
            }
            Some(other) => {
                cargo.args(["--profile", other]);
            }
            None => {}
        }
        let status = cargo.status().expect("run cargo");
        assert!(
            status.success(),
            "cargo build -p idutil-example-web: {status}"
        );
        let binary = profile_dir.join("web");
        assert!(binary.exists(), "{} is missing", binary.display());
        binary
    })
}

/// A running web example, killed when dropped.
pub struct WebApp {
    child: Option<Child>,
    pid: u32,
    dir: PathBuf,
    /// Where it listens, from its first line.
    pub addr: SocketAddr,
    stderr: Option<JoinHandle<String>>,
    stdout_rest: Option<JoinHandle<Vec<String>>>,
}

/// An HTTP response, with the body as the raw text the server sent.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: String,
    /// Every header, names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    /// The first value of a header (`name` in lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

impl WebApp {
    /// Starts the example in `dir` with `IDUTIL_STATE_DIR=dir/state` (so
    /// its database is `dir/state-web.sqlite3`), `IDUTIL_SHARD=shard` and
    /// `PORT=0`, and waits for its address line.
    pub fn start(dir: &Path, shard: u32) -> WebApp {
        WebApp::start_with(dir, shard, &[])
    }

    /// [`WebApp::start`] with more arguments (`--lease URL`).
    pub fn start_with(dir: &Path, shard: u32, args: &[&str]) -> WebApp {
        let mut child = Command::new(binary())
            .args(args)
            .env("IDUTIL_STATE_DIR", WebApp::state_dir_in(dir))
            .env(
                "IDUTIL_ID_SPACE",
                crate::space::space_for(WebApp::state_dir_in(dir)),
            )
            .env("IDUTIL_SHARD", shard.to_string())
            .env("PORT", "0")
            .env("HOST", "127.0.0.1")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the web example");
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = BufReader::new(stderr).read_to_string(&mut text);
            text
        });
        let (tx, rx) = mpsc::channel();
        let stdout_rest = std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = tx.send(lines.next());
            lines.map_while(Result::ok).collect()
        });
        let mut app = WebApp {
            pid: child.id(),
            dir: dir.to_path_buf(),
            child: Some(child),
            addr: "127.0.0.1:0".parse().unwrap(),
            stderr: Some(stderr),
            stdout_rest: Some(stdout_rest),
        };
        let line = match rx.recv_timeout(START_TIMEOUT) {
            Ok(Some(Ok(line))) => line,
            other => {
                let mut child = app.child.take().unwrap();
                let _ = child.kill();
                let _ = child.wait();
                let stderr = app.stderr.take().unwrap().join().unwrap_or_default();
                panic!("no address line from the web example ({other:?}); stderr: {stderr}");
            }
        };
        let addr = line
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        app.addr = addr.parse().expect("a socket address");
        assert!(app.addr.ip().is_loopback(), "{line}");
        app
    }

    /// The state directory the example uses when started in `dir`.
    pub fn state_dir_in(dir: &Path) -> PathBuf {
        dir.join("state")
    }

    /// Its state directory.
    pub fn state_dir(&self) -> PathBuf {
        WebApp::state_dir_in(&self.dir)
    }

    /// Its SQLite file, next to the state directory.
    pub fn database(&self) -> PathBuf {
        WebApp::database_in(&self.dir)
    }

    /// The SQLite file of the example when started in `dir`.
    pub fn database_in(dir: &Path) -> PathBuf {
        dir.join("state-web.sqlite3")
    }

    pub fn get(&self, path: &str) -> Response {
        self.request("GET", path, None)
    }

    pub fn post_json(&self, path: &str, body: &str) -> Response {
        self.request("POST", path, Some(body))
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// One request on a fresh connection (`Connection: close`), with
    /// `Content-Type: application/json` when there is a body.
    pub fn request(&self, method: &str, path: &str, body: Option<&str>) -> Response {
        let content_type = body.map(|_| "application/json");
        self.request_typed(method, path, content_type, body)
    }

    /// One request with the given `Content-Type` (or none).
    pub fn request_typed(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Option<&str>,
    ) -> Response {
        let mut stream = TcpStream::connect_timeout(&self.addr, IO_TIMEOUT).expect("connect");
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            self.addr
        );
        if let Some(content_type) = content_type {
            request.push_str(&format!("Content-Type: {content_type}\r\n"));
        }
        if let Some(body) = body {
            request.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        request.push_str("\r\n");
        request.push_str(body.unwrap_or_default());
        stream.write_all(request.as_bytes()).expect("send request");
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).expect("read response");
        parse_response(&raw)
    }

    /// Sends SIGTERM (the graceful stop that Ctrl-C also triggers) and
    /// waits for the exit. Returns the exit status and everything the app
    /// wrote on stderr; asserts that stdout held only the address line.
    pub fn stop(mut self) -> (ExitStatus, String) {
        let mut child = self.child.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let status = child.wait();
            let _ = tx.send(());
            status
        });
        let sent = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM failed");
        if rx.recv_timeout(IO_TIMEOUT).is_err() {
            let _ = Command::new("kill")
                .args(["-KILL", &self.pid.to_string()])
                .status();
            panic!("the web example did not stop within {IO_TIMEOUT:?} of SIGTERM");
        }
        let status = waiter.join().unwrap().expect("wait for the web example");
        let stderr = self.stderr.take().unwrap().join().unwrap_or_default();
        let rest = self.stdout_rest.take().unwrap().join().unwrap_or_default();
        assert!(rest.is_empty(), "more than one line on stdout: {rest:?}");
        (status, stderr)
    }
}

impl Drop for WebApp {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn parse_response(raw: &[u8]) -> Response {
    let text = String::from_utf8(raw.to_vec()).expect("a UTF-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("headers end");
    let mut lines = head.lines();
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let mut content_type = String::new();
    let mut chunked = false;
    let mut headers = Vec::new();
    for line in lines {
        let (name, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.trim();
        headers.push((name.to_ascii_lowercase(), value.to_string()));
        if name.eq_ignore_ascii_case("content-type") {
            content_type = value.to_string();
        }
        if name.eq_ignore_ascii_case("transfer-encoding") && value.contains("chunked") {
            chunked = true;
        }
    }
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Response {
        status,
        content_type,
        headers,
        body,
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").expect("chunk size line");
        let size = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16)
            .expect("hex chunk size");
        if size == 0 {
            return out;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].strip_prefix("\r\n").expect("chunk end");
    }
}
