//! A loopback TCP proxy that cuts clients off, and free loopback ports.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

/// A loopback port that was free a moment ago, for a server to listen on.
///
/// It is taken from below the kernel's range for outgoing connections
/// (`net.ipv4.ip_local_port_range`), so that none of the many client
/// connections the tests open can take it before the server binds it, or
/// while a killed server is down. Each test process walks the range from its
/// own starting point, so that two test binaries running at once rarely try
/// the same ports.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let (low, high) = (10_000, outgoing_range_start().max(10_001));
    let span = u32::from(high - low);
    let start = std::process::id().wrapping_mul(7919) % span;
    for _ in 0..span {
        let port = low + ((start + NEXT.fetch_add(1, Ordering::Relaxed)) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {low}..{high}")
}

/// The first port of the kernel's range for outgoing connections, or 32768
/// (Linux's default) where it cannot be read.
fn outgoing_range_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A loopback TCP proxy that can cut clients off from a server (Redis,
/// PostgreSQL): existing connections are closed and new ones are accepted
/// but never answered.
pub struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    active: Arc<Mutex<Vec<TcpStream>>>,
    held: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    /// Starts forwarding a new loopback port to `upstream`.
    pub fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let active: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let held: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (c, a, h) = (cut.clone(), active.clone(), held.clone());
        thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if c.load(Ordering::SeqCst) {
                    h.lock().unwrap().push(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let mut list = a.lock().unwrap();
                list.push(client.try_clone().unwrap());
                list.push(server.try_clone().unwrap());
                drop(list);
                pump(client.try_clone().unwrap(), server.try_clone().unwrap());
                pump(server, client);
            }
        });
        Proxy {
            port,
            cut,
            active,
            held,
        }
    }

    /// `redis://127.0.0.1:PORT/` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The proxy's loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Cuts every client off: open connections close, new ones hang.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for s in self.active.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// How many connections the proxy accepted and holds unanswered since
    /// the cut: a client that tried the server while cut off.
    pub fn held(&self) -> usize {
        self.held.lock().unwrap().len()
    }

    /// Lets clients through again.
    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
        for s in self.held.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream) {
    thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}

/// A loopback proxy to Redis (or PostgreSQL) that, once, lets a request containing
/// `marker` reach the server, then closes the client's connection instead of
/// passing the reply on: the call ran on the server, its caller saw the
/// connection closed.
pub fn reply_dropping_proxy(upstream: u16, marker: Vec<u8>) -> u16 {
    reply_dropping_proxy_armed(upstream, marker).0
}

/// [`reply_dropping_proxy`], with the flag that says whether it is still
/// armed (`false` once it has dropped a reply).
pub fn reply_dropping_proxy_armed(upstream: u16, marker: Vec<u8>) -> (u16, Arc<AtomicBool>) {
    reply_dropping_proxy_after(upstream, marker, None)
}

/// [`reply_dropping_proxy_armed`] that passes the reply on until it
/// contains `last` (PostgreSQL's `COMMIT` tag, sent once the commit is
/// done), and closes the client's connection there: the transaction
/// committed, its caller saw the connection closed.
pub fn reply_dropping_proxy_after(
    upstream: u16,
    marker: Vec<u8>,
    last: Option<Vec<u8>>,
) -> (u16, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let armed = Arc::new(AtomicBool::new(true));
    let flag = armed.clone();
    thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                continue;
            };
            let dropping = Arc::new(AtomicBool::new(false));
            let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let (armed, marker, flag) = (armed.clone(), marker.clone(), dropping.clone());
            thread::spawn(move || {
                let mut buf = [0u8; 16 * 1024];
                while let Ok(n @ 1..) = c_in.read(&mut buf) {
                    let hit = buf[..n].windows(marker.len()).any(|w| w == marker);
                    if hit && armed.swap(false, Ordering::SeqCst) {
                        flag.store(true, Ordering::SeqCst);
                    }
                    if s_out.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = s_out.shutdown(Shutdown::Both);
            });
            let (mut s_in, mut c_out) = (server, client);
            let last = last.clone();
            thread::spawn(move || {
                let mut buf = [0u8; 16 * 1024];
                while let Ok(n @ 1..) = s_in.read(&mut buf) {
                    let at_last = last
                        .as_ref()
                        .is_none_or(|l| buf[..n].windows(l.len()).any(|w| w == l));
                    if dropping.load(Ordering::SeqCst) && at_last {
                        break;
                    }
                    if c_out.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = c_out.shutdown(Shutdown::Both);
                let _ = s_in.shutdown(Shutdown::Both);
            });
        }
    });
    (port, flag)
}

/// A loopback port where a TCP connection never completes, as on a host
/// cut off by a firewall that drops packets: a listener that never accepts,
/// its queue filled, so the kernel drops every new SYN.
pub struct Blackhole {
    port: u16,
    _listener: TcpListener,
    _queued: Vec<TcpStream>,
}

impl Blackhole {
    /// Starts one.
    pub fn start() -> Blackhole {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().unwrap();
        let mut queued = Vec::new();
        loop {
            match TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(200)) {
                Ok(s) => queued.push(s),
                Err(_) => break,
            }
            assert!(queued.len() < 10_000, "the listen queue never filled");
        }
        Blackhole {
            port: addr.port(),
            _listener: listener,
            _queued: queued,
        }
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }
}
