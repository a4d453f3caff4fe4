//! Parsing of quantities with units in topology files and on the command
//! line: rates (`25Gbps`, `100Mbit/s`), durations (`1us`, `1.5ms`), sizes
//! (`9MB`, `64KiB`). A number without a unit is an error: "1000" could mean
//! anything.

use crate::time::{BitRate, Nanos};

/// Why a quantity does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    /// No unit given.
    #[error("`{0}` has no unit (write e.g. {1})")]
    MissingUnit(String, &'static str),
    /// Unknown unit.
    #[error("`{0}`: unknown unit `{1}` (use {2})")]
    UnknownUnit(String, String, &'static str),
    /// Not a number.
    #[error("`{0}` is not a number with a unit")]
    NotANumber(String),
    /// Negative or out of range.
    #[error("`{0}` is out of range")]
    Range(String),
}

fn split(s: &str) -> Result<(f64, &str), UnitError> {
    let t = s.trim();
    let idx = t.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_' || c == '-' || c == '+')).unwrap_or(t.len());
    let (num, unit) = t.split_at(idx);
    let num: f64 = num.replace('_', "").parse().map_err(|_| UnitError::NotANumber(s.to_string()))?;
    if !num.is_finite() || num < 0.0 {
        return Err(UnitError::Range(s.to_string()));
    }
    Ok((num, unit.trim()))
}

const RATE_UNITS: &str = "bps, Kbps, Mbps, Gbps, Tbps";
const TIME_UNITS: &str = "ns, us, ms, s";
const SIZE_UNITS: &str = "B, KB, MB, GB, KiB, MiB, GiB";

/// Parses a bit rate.
pub fn parse_rate(s: &str) -> Result<BitRate, UnitError> {
    let (n, u) = split(s)?;
    let mult = match u.to_ascii_lowercase().replace("bit/s", "bps").as_str() {
        "" => return Err(UnitError::MissingUnit(s.into(), "25Gbps")),
        "bps" => 1.0,
        "kbps" => 1e3,
        "mbps" => 1e6,
        "gbps" => 1e9,
        "tbps" => 1e12,
        _ => return Err(UnitError::UnknownUnit(s.into(), u.into(), RATE_UNITS)),
    };
    let v = n * mult;
    if !(1.0..=1e15).contains(&v) {
        return Err(UnitError::Range(s.into()));
    }
    Ok(BitRate(v.round() as u64))
}

/// Parses a probability, `1%` or `0.01`, into parts per million (a link's
/// loss, `weft_core::link_loss`).
pub fn parse_probability(s: &str) -> Result<u32, UnitError> {
    let (n, u) = split(s)?;
    let p = match u {
        "%" => n / 100.0,
        "" => n,
        _ => return Err(UnitError::UnknownUnit(s.into(), u.into(), "% or none (a fraction)")),
    };
    if !(0.0..=1.0).contains(&p) {
        return Err(UnitError::Range(s.into()));
    }
    Ok((p * 1e6).round() as u32)
}

/// Parses a duration into ns.
pub fn parse_duration(s: &str) -> Result<Nanos, UnitError> {
    let (n, u) = split(s)?;
    let mult = match u {
        "" => return Err(UnitError::MissingUnit(s.into(), "1us")),
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return Err(UnitError::UnknownUnit(s.into(), u.into(), TIME_UNITS)),
    };
    let v = n * mult;
    if v > 1e18 {
        return Err(UnitError::Range(s.into()));
    }
    Ok(v.round() as Nanos)
}

/// Parses a size into bytes (KB = 1000 B, KiB = 1024 B).
pub fn parse_size(s: &str) -> Result<u64, UnitError> {
    let (n, u) = split(s)?;
    let mult = match u {
        "" => return Err(UnitError::MissingUnit(s.into(), "9MB")),
        "B" => 1.0,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "KiB" => 1024.0,
        "MiB" => 1048576.0,
        "GiB" => 1073741824.0,
        _ => return Err(UnitError::UnknownUnit(s.into(), u.into(), SIZE_UNITS)),
    };
    let v = n * mult;
    if v > 1e15 {
        return Err(UnitError::Range(s.into()));
    }
    Ok(v.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_rate("25Gbps").unwrap(), BitRate::gbps(25));
        assert_eq!(parse_rate("100 Mbit/s").unwrap(), BitRate::mbps(100));
        assert_eq!(parse_rate("2.5Gbps").unwrap(), BitRate(2_500_000_000));
        assert_eq!(parse_duration("1us").unwrap(), 1000);
        assert_eq!(parse_duration("1.5ms").unwrap(), 1_500_000);
        assert_eq!(parse_size("9MB").unwrap(), 9_000_000);
        assert_eq!(parse_size("64KiB").unwrap(), 65536);
        assert!(matches!(parse_rate("1000"), Err(UnitError::MissingUnit(..))));
        assert!(matches!(parse_rate("10Gb"), Err(UnitError::UnknownUnit(..))));
        assert!(matches!(parse_duration("fast"), Err(UnitError::NotANumber(..))));
        assert!(parse_size("-1MB").is_err());
    }
}
