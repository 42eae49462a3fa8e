//! The units the command line writes budgets and timeouts in: `90s`, `1500ms`, `5m`; `512M`,
//! `2GiB`. Parsed exactly as written (the value goes into the record, and a flag that reads
//! differently from how it is recorded would be wrong).

use std::time::Duration;

/// A value that is not a duration or size as the flags write them.
#[derive(Debug, thiserror::Error)]
#[error("invalid {what} `{value}`: {reason}")]
pub struct UnitError {
    what: &'static str,
    value: String,
    reason: String,
}

/// Parses a duration: `90`, `90s`, `1500ms`, `5m`, `2h`.
pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    let error = |reason: &str| UnitError {
        what: "duration",
        value: text.to_owned(),
        reason: reason.to_owned(),
    };
    let (number, unit) = split_unit(text);
    if unit.starts_with(['.', ',']) {
        return Err(error("whole numbers only: write `1500ms` for 1.5 s"));
    }
    let value: u64 = number
        .parse()
        .map_err(|_| error("expected a whole number with s, ms, m or h"))?;
    let duration = match unit {
        "" | "s" => Duration::from_secs(value),
        "ms" => Duration::from_millis(value),
        "m" => Duration::from_secs(value.saturating_mul(60)),
        "h" => Duration::from_secs(value.saturating_mul(3600)),
        _ => return Err(error("unknown unit; use s, ms, m or h")),
    };
    if duration.is_zero() {
        return Err(error("must be more than zero"));
    }
    Ok(duration)
}

/// Parses a size in bytes: `1048576`, `512K`, `256M`, `2G` (binary units; `MiB` etc. also).
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    let error = |reason: &str| UnitError {
        what: "size",
        value: text.to_owned(),
        reason: reason.to_owned(),
    };
    let (number, unit) = split_unit(text);
    let value: u64 = number
        .parse()
        .map_err(|_| error("expected a whole number with K, M or G"))?;
    let multiplier: u64 = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        _ => return Err(error("unknown unit; use K, M or G")),
    };
    let bytes = value
        .checked_mul(multiplier)
        .ok_or_else(|| error("too large"))?;
    if bytes == 0 {
        return Err(error("must be more than zero"));
    }
    Ok(bytes)
}

/// The digits and the unit, as written: no surrounding space or line break is tolerated (the
/// value goes into the record; a flag that reads differently from how it is recorded is wrong).
fn split_unit(text: &str) -> (&str, &str) {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    text.split_at(split)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn durations_and_sizes() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(
            parse_duration("1500ms").unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("-5").is_err());
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert!(parse_size("1T").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
    }
}
