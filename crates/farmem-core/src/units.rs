//! Sizes and ratios, parsed one way everywhere.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A CPU cache line: the unit of dirty tracking and of DaeMon's sub-block moves.
pub const CACHE_LINE: u64 = 64;
/// UniMem's Filter-Cache block.
pub const SUB_BLOCK: u64 = 512;
/// A base page: the unit the MMU (and so userfaultfd) maps.
pub const PAGE_SIZE: u64 = 4096;

/// Why a size or ratio could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("empty value")]
    Empty,
    #[error("`{0}` is not a number")]
    NotANumber(String),
    #[error("unknown unit `{unit}` in `{input}` (use B, KiB, MiB, GiB, TiB, K, M, G, T)")]
    UnknownUnit { input: String, unit: String },
    #[error("unknown unit `{unit}` in `{input}` (use ns, us, ms, s, m, h)")]
    UnknownTimeUnit { input: String, unit: String },
    #[error("`{0}` overflows 64 bits")]
    Overflow(String),
    #[error("`{0}` is not a ratio (use 25%, 0.25 or 1/4, between 0 and 1)")]
    BadRatio(String),
}

/// A number of bytes. Parses `4096`, `4KiB`, `4K`, `1.5GiB`, `512MiB`; binary
/// units only, because every size in a memory system is a power of two apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub const fn bytes(self) -> u64 {
        self.0
    }
    pub const fn kib(n: u64) -> Self {
        Self(n << 10)
    }
    pub const fn mib(n: u64) -> Self {
        Self(n << 20)
    }
    pub const fn gib(n: u64) -> Self {
        Self(n << 30)
    }
}

impl FromStr for ByteSize {
    type Err = ParseError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let s = input.trim();
        if s.is_empty() {
            return Err(ParseError::Empty);
        }
        let split = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
            .unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let num: String = num.chars().filter(|&c| c != '_').collect();
        let unit = unit.trim();
        let shift = match unit.to_ascii_lowercase().as_str() {
            "" | "b" => 0,
            "k" | "kb" | "kib" => 10,
            "m" | "mb" | "mib" => 20,
            "g" | "gb" | "gib" => 30,
            "t" | "tb" | "tib" => 40,
            _ => {
                return Err(ParseError::UnknownUnit {
                    input: input.to_string(),
                    unit: unit.to_string(),
                });
            }
        };
        if let Ok(whole) = num.parse::<u64>() {
            return whole
                .checked_mul(1u64 << shift)
                .map(ByteSize)
                .ok_or_else(|| ParseError::Overflow(input.to_string()));
        }
        let value: f64 = num
            .parse()
            .map_err(|_| ParseError::NotANumber(input.to_string()))?;
        let bytes = value * (1u64 << shift) as f64;
        if !bytes.is_finite() || bytes < 0.0 || bytes >= u64::MAX as f64 {
            return Err(ParseError::Overflow(input.to_string()));
        }
        Ok(ByteSize(bytes.round() as u64))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u32); 4] = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)];
        for (name, shift) in UNITS {
            let unit = 1u64 << shift;
            if self.0 >= unit {
                return if self.0.is_multiple_of(unit) {
                    write!(f, "{}{}", self.0 / unit, name)
                } else {
                    write!(f, "{:.2}{}", self.0 as f64 / unit as f64, name)
                };
            }
        }
        write!(f, "{}B", self.0)
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(ByteSize(n)),
            Raw::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// A fraction in [0, 1]. Parses `25%`, `0.25` and `1/4`.
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd)]
pub struct Ratio(f64);

impl Ratio {
    pub fn new(value: f64) -> Result<Self, ParseError> {
        if (0.0..=1.0).contains(&value) {
            Ok(Self(value))
        } else {
            Err(ParseError::BadRatio(value.to_string()))
        }
    }
    pub fn get(self) -> f64 {
        self.0
    }
    /// `self` of `total`, rounded down.
    pub fn of(self, total: u64) -> u64 {
        (total as f64 * self.0) as u64
    }
}

impl FromStr for Ratio {
    type Err = ParseError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let s = input.trim();
        if s.is_empty() {
            return Err(ParseError::Empty);
        }
        let bad = || ParseError::BadRatio(input.to_string());
        let value = if let Some(pct) = s.strip_suffix('%') {
            pct.trim().parse::<f64>().map_err(|_| bad())? / 100.0
        } else if let Some((n, d)) = s.split_once('/') {
            let n: f64 = n.trim().parse().map_err(|_| bad())?;
            let d: f64 = d.trim().parse().map_err(|_| bad())?;
            if d == 0.0 {
                return Err(bad());
            }
            n / d
        } else {
            s.parse::<f64>().map_err(|_| bad())?
        };
        Ratio::new(value).map_err(|_| bad())
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}%", self.0 * 100.0)
    }
}

impl Serialize for Ratio {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0)
    }
}

impl<'de> Deserialize<'de> for Ratio {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Num(f64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Num(n) => Ratio::new(n).map_err(serde::de::Error::custom),
            Raw::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// Parses a duration written with a unit: `400ns`, `2us` (or `2µs`), `1.5ms`,
/// `3s`; a bare number is nanoseconds. Returns nanoseconds.
pub fn parse_duration_ns(input: &str) -> Result<u64, ParseError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(ParseError::Empty);
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let scale = match unit.trim() {
        "" | "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        other => {
            return Err(ParseError::UnknownTimeUnit {
                input: input.to_string(),
                unit: other.to_string(),
            });
        }
    };
    let value: f64 = num
        .parse()
        .map_err(|_| ParseError::NotANumber(input.to_string()))?;
    let ns = value * scale;
    if !ns.is_finite() || ns < 0.0 || ns >= u64::MAX as f64 {
        return Err(ParseError::Overflow(input.to_string()));
    }
    Ok(ns.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!("4096".parse::<ByteSize>().unwrap().0, 4096);
        assert_eq!("4KiB".parse::<ByteSize>().unwrap().0, 4096);
        assert_eq!("512MiB".parse::<ByteSize>().unwrap().0, 512 << 20);
        assert_eq!("4GiB".parse::<ByteSize>().unwrap().0, 4 << 30);
        assert_eq!("1.5G".parse::<ByteSize>().unwrap().0, 3 << 29);
        assert_eq!("64 b".parse::<ByteSize>().unwrap().0, 64);
    }

    #[test]
    fn bad_sizes_name_the_problem() {
        assert!(matches!("".parse::<ByteSize>(), Err(ParseError::Empty)));
        assert!(matches!(
            "4XB".parse::<ByteSize>(),
            Err(ParseError::UnknownUnit { .. })
        ));
        assert!(matches!(
            "99999999999TiB".parse::<ByteSize>(),
            Err(ParseError::Overflow(_))
        ));
        assert!(matches!(
            "abc".parse::<ByteSize>(),
            Err(ParseError::NotANumber(_)) | Err(ParseError::UnknownUnit { .. })
        ));
    }

    #[test]
    fn times_take_decimals_and_every_unit() {
        assert_eq!(parse_duration_ns("30s"), Ok(30_000_000_000));
        assert_eq!(parse_duration_ns("1.5ms"), Ok(1_500_000));
        assert_eq!(parse_duration_ns("400ns"), Ok(400));
        assert_eq!(parse_duration_ns("2m"), Ok(120_000_000_000));
        assert_eq!(parse_duration_ns("1h"), Ok(3_600_000_000_000));
    }

    #[test]
    fn a_bad_time_unit_lists_the_time_units() {
        let e = parse_duration_ns("5parsecs").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown unit `parsecs` in `5parsecs` (use ns, us, ms, s, m, h)"
        );
    }

    #[test]
    fn ratios_parse_three_ways() {
        assert_eq!("25%".parse::<Ratio>().unwrap().get(), 0.25);
        assert_eq!("0.25".parse::<Ratio>().unwrap().get(), 0.25);
        assert_eq!("1/4".parse::<Ratio>().unwrap().get(), 0.25);
        assert!("150%".parse::<Ratio>().is_err());
        assert!("1/0".parse::<Ratio>().is_err());
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration_ns("400ns").unwrap(), 400);
        assert_eq!(parse_duration_ns("2us").unwrap(), 2000);
        assert_eq!(parse_duration_ns("1.5ms").unwrap(), 1_500_000);
        assert_eq!(parse_duration_ns("3s").unwrap(), 3_000_000_000);
        assert_eq!(parse_duration_ns("17").unwrap(), 17);
        assert!(parse_duration_ns("5 fortnights").is_err());
        assert!(parse_duration_ns("").is_err());
    }

    #[test]
    fn display_round_trips() {
        for s in ["4KiB", "512MiB", "3GiB", "17B"] {
            assert_eq!(s.parse::<ByteSize>().unwrap().to_string(), s);
        }
    }

    proptest! {
        #[test]
        fn parsing_never_panics(s in "\\PC{0,16}") {
            let _ = s.parse::<ByteSize>();
            let _ = s.parse::<Ratio>();
        }
    }
}
