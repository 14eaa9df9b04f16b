//! Lease URLs with their passwords hidden, for messages and `Debug`.

/// Hides the password of a `scheme://user:password@host` URL, of a
/// `password=` or `pass=` option in its query, and of a `password=` pair
/// of a PostgreSQL key-value string, read as loosely as the clients read
/// them: a password written with an unescaped `?`, `/`, `#` or `@` in it,
/// or a quoted one with spaces, is hidden whole.
pub fn redact(url: &str) -> String {
    let url_scheme = url.split_once("://").filter(|(scheme, _)| {
        !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    });
    let Some((scheme, rest)) = url_scheme else {
        return redact_pairs(url);
    };
    // `tokio-postgres` takes the credentials up to the first `@` anywhere,
    // the `url` crate up to the last one before the path: hiding up to the
    // last `@` covers both (a URL with an `@` in its query shows less).
    let (auth, tail) = match rest.rfind('@') {
        Some(at) => match rest[..at].split_once(':') {
            Some((user, _)) => (format!("{user}:***@"), &rest[at + 1..]),
            None => ("***@".to_string(), &rest[at + 1..]),
        },
        None => (String::new(), rest),
    };
    // Options: `?pass=...` (`unix://` Redis URLs), `&password=...`.
    let mut shown = String::with_capacity(tail.len());
    for piece in tail.split_inclusive(['?', '&']) {
        let (part, sep) = match piece.strip_suffix(['?', '&']) {
            Some(part) => (part, &piece[part.len()..]),
            None => (piece, ""),
        };
        match part.split_once('=') {
            Some((key, _))
                if key.eq_ignore_ascii_case("pass") || key.eq_ignore_ascii_case("password") =>
            {
                shown.push_str(key);
                shown.push_str("=***");
            }
            _ => shown.push_str(part),
        }
        shown.push_str(sep);
    }
    format!("{scheme}://{auth}{shown}")
}

/// A PostgreSQL key-value string (`host=a password='b c'`) with the
/// password's value hidden, read as `tokio-postgres` reads it: spaces
/// around `=`, quoted values with `\` escapes. What cannot be read after a
/// `password` key is hidden too.
fn redact_pairs(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let trimmed = rest.trim_start();
        shown.push_str(&rest[..rest.len() - trimmed.len()]);
        rest = trimmed;
        if rest.is_empty() {
            return shown;
        }
        let key_len = rest
            .find(|c: char| c.is_whitespace() || c == '=')
            .unwrap_or(rest.len());
        let key = &rest[..key_len];
        let after_key = &rest[key_len..];
        let after_eq = after_key.trim_start().strip_prefix('=');
        let Some(after_eq) = after_eq else {
            // Not a pair: shown as it is, unless it may be a password.
            if key.eq_ignore_ascii_case("password") {
                shown.push_str(key);
                shown.push_str("=***");
                return shown;
            }
            shown.push_str(key);
            rest = after_key;
            continue;
        };
        let value = after_eq.trim_start();
        let end = value_len(value);
        let pair = &rest[..rest.len() - value.len() + end];
        if key.eq_ignore_ascii_case("password") {
            shown.push_str(key);
            shown.push_str("=***");
        } else {
            shown.push_str(pair);
        }
        rest = &value[end..];
    }
}

/// The length of a key-value string's value at the start of `text`: up to
/// the closing quote of a quoted one, else up to white space; `\` escapes
/// the next character.
fn value_len(text: &str) -> usize {
    let quoted = text.starts_with('\'');
    let mut chars = text.char_indices().skip(usize::from(quoted));
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '\'' if quoted => return i + 1,
            c if c.is_whitespace() && !quoted => return i,
            _ => {}
        }
    }
    text.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(redact("redis://:s3cret@h:6379/0"), "redis://:***@h:6379/0");
        assert_eq!(redact("redis://u:s3cret@h/"), "redis://u:***@h/");
        assert_eq!(redact("redis://h:6379/"), "redis://h:6379/");
        assert_eq!(
            redact("unix:///run/redis.sock?db=2&pass=s3cret"),
            "unix:///run/redis.sock?db=2&pass=***"
        );
        assert_eq!(
            redact("redis+unix:///r.sock?password=s3cret"),
            "redis+unix:///r.sock?password=***"
        );
    }

    #[test]
    fn passwords_are_hidden_however_they_are_written() {
        // Each is read by tokio-postgres (or libpq) with the password
        // `s3cret` in it; none of it may be shown.
        for url in [
            "host=h password = s3cret dbname=app",
            "host=h password='it is s3cret' dbname=app",
            "host=h password='a\\'s3cret' dbname=app",
            "host=h PASSWORD=s3cret",
            "host=h password=a://s3cret@h",
            "host=h password",
            "postgres://u:pa?s3cret@h/app",
            "postgres://u:pa/s3cret@h/app",
            "postgres://u:pa#s3cret@h/app",
            "postgres://u:pa@s3cret@h/app",
            "postgres://u:p?x=s3cret@h/app?password=s3cret",
            "postgres://h/app?sslmode=disable&password=s3cret",
            "postgres://h/app?password=s3cret&sslmode=disable",
        ] {
            let shown = redact(url);
            assert!(!shown.contains("s3cret"), "{url} shown as {shown}");
        }
        assert_eq!(
            redact("host=h password='x y' dbname=app"),
            "host=h password=*** dbname=app"
        );
        assert_eq!(
            redact("postgres://u:pw@h1:5432,h2:5432/app?target_session_attrs=read-write"),
            "postgres://u:***@h1:5432,h2:5432/app?target_session_attrs=read-write"
        );
    }
}
