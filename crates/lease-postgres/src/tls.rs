//! The URL's TLS options, libpq's way: what `sslmode` and `sslrootcert`
//! ask, and the connectors that check it.

use std::sync::Mutex;

use native_tls::{Certificate, TlsConnector};
use postgres_native_tls::MakeTlsConnector;
use tokio_postgres::config::SslMode;

/// What `sslmode=mode` and `sslrootcert=root` ask of `tokio-postgres`, and
/// the connector that checks it (`None`: plain text). `Err`: why they
/// cannot be used.
pub(super) fn tls_for(
    mode: &str,
    root: Option<&str>,
) -> Result<(SslMode, Option<MakeTlsConnector>), String> {
    let (ssl, verify) = match mode {
        "disable" => (SslMode::Disable, Verify::Off),
        "allow" | "prefer" => (SslMode::Prefer, Verify::Encrypt),
        "require" => (SslMode::Require, Verify::Encrypt),
        "verify-ca" => (SslMode::Require, Verify::Ca),
        "verify-full" => (SslMode::Require, Verify::Full),
        other => {
            return Err(format!(
                "sslmode={other} is not one of disable, allow, prefer, require, verify-ca, \
                 verify-full"
            ))
        }
    };
    // As libpq: a root certificate given makes `require` check the chain.
    let verify = match (verify, root) {
        (Verify::Encrypt, Some(_)) if mode == "require" => Verify::Ca,
        (v, _) => v,
    };
    let tls = match verify {
        Verify::Off => None,
        _ => Some(connector(verify, root)?),
    };
    Ok((ssl, tls))
}

/// TLS connectors already built, by what they check: building one reads
/// the system's root certificates, tens of milliseconds that every open
/// would pay again.
static CONNECTORS: Mutex<Vec<(ConnectorKey, MakeTlsConnector)>> = Mutex::new(Vec::new());

/// What a TLS connector checks, and the root certificate file it adds.
type ConnectorKey = (Verify, Option<String>);

/// A TLS connector that checks what `verify` says, trusting `root` (a PEM
/// file) beside the system's roots.
fn connector(verify: Verify, root: Option<&str>) -> Result<MakeTlsConnector, String> {
    let key = (verify, root.map(str::to_string));
    let mut built = crate::sync::lock(&CONNECTORS);
    if let Some((_, c)) = built.iter().find(|(k, _)| *k == key) {
        return Ok(c.clone());
    }
    let mut tls = TlsConnector::builder();
    if let Some(path) = root {
        let pem =
            std::fs::read(path).map_err(|e| format!("cannot read sslrootcert {path}: {e}"))?;
        let cert = Certificate::from_pem(&pem)
            .map_err(|e| format!("sslrootcert {path} is not a PEM certificate: {e}"))?;
        tls.add_root_certificate(cert);
    }
    match verify {
        Verify::Off | Verify::Encrypt => {
            tls.danger_accept_invalid_certs(true)
                .danger_accept_invalid_hostnames(true);
        }
        Verify::Ca => {
            tls.danger_accept_invalid_hostnames(true);
        }
        Verify::Full => {}
    }
    let tls = tls.build().map_err(|e| format!("cannot set up TLS: {e}"))?;
    let tls = MakeTlsConnector::new(tls);
    built.push((key, tls.clone()));
    Ok(tls)
}

/// What the URL asks of TLS, libpq's way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verify {
    /// `disable`: plain text.
    Off,
    /// `prefer`, `require`: encrypted, the certificate not checked (unless
    /// `sslrootcert` names a CA: then as `verify-ca`).
    Encrypt,
    /// `verify-ca`: the certificate chain checked, not the host name.
    Ca,
    /// `verify-full`: the chain and the host name checked.
    Full,
}
