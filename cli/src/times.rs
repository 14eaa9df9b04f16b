//! Times on the command line and in output: Unix seconds and RFC 3339.

/// Unix seconds, an RFC 3339 time with any offset (`2030-01-01T00:00:00Z`,
/// `2030-01-01T02:00:00+02:00`), or `now`: the current time.
pub(crate) fn parse_time(s: &str) -> Result<u64, String> {
    if s == "now" {
        return u64::try_from(jiff::Timestamp::now().as_second())
            .map_err(|_| "the clock reads before 1970".to_string());
    }
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse::<u64>()
            .map_err(|_| "too many digits for Unix seconds".to_string());
    }
    let t: jiff::Timestamp = s
        .parse()
        .map_err(|e| format!("not Unix seconds, an RFC 3339 time or 'now': {e}"))?;
    u64::try_from(t.as_second()).map_err(|_| "before 1970".to_string())
}

/// An RFC 3339 time for Unix seconds; past year 9999, which RFC 3339 cannot
/// write, the seconds themselves. Never panics, whatever a file or a clock
/// holds.
pub(crate) fn rfc3339(unix_seconds: u64) -> String {
    i64::try_from(unix_seconds)
        .ok()
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .map_or_else(
            || format!("unix second {unix_seconds} (after year 9999)"),
            |t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        )
}
