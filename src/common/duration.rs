//! Go's `time.Duration` text format, as Plans carry it in `postCompleteDelay`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A signed duration parsed from, and printed in, Go's format (`1h30m`, `90s`, `-5m`, `1.5h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct GoDuration {
    /// Nanoseconds, as Go stores them.
    pub nanos: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {0:?}")]
pub struct ParseDurationError(pub String);

impl GoDuration {
    pub fn is_negative(self) -> bool {
        self.nanos < 0
    }

    /// The duration if it is not negative.
    pub fn to_std(self) -> Option<Duration> {
        u64::try_from(self.nanos).ok().map(Duration::from_nanos)
    }

    pub fn from_std(d: Duration) -> Self {
        GoDuration {
            nanos: i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        }
    }

    pub fn from_secs(secs: i64) -> Self {
        GoDuration {
            nanos: secs.saturating_mul(1_000_000_000),
        }
    }
}

impl FromStr for GoDuration {
    type Err = ParseDurationError;

    /// `time.ParseDuration`: an optional sign, then numbers with optional fractions and units.
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = || ParseDurationError(input.to_string());
        let (negative, mut s) = match input.as_bytes().first() {
            Some(b'-') => (true, &input[1..]),
            Some(b'+') => (false, &input[1..]),
            _ => (false, input),
        };
        if s == "0" {
            return Ok(GoDuration { nanos: 0 });
        }
        if s.is_empty() {
            return Err(err());
        }
        let mut total: u128 = 0;
        while !s.is_empty() {
            let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
            let (int_part, rest) = s.split_at(int_len);
            let (frac_part, rest) = match rest.strip_prefix('.') {
                Some(r) => {
                    let n = r.bytes().take_while(u8::is_ascii_digit).count();
                    r.split_at(n)
                }
                None => ("", rest),
            };
            if int_part.is_empty() && frac_part.is_empty() {
                return Err(err());
            }
            let unit_len = rest
                .char_indices()
                .find(|(_, c)| c.is_ascii_digit() || *c == '.')
                .map_or(rest.len(), |(i, _)| i);
            let (unit, rest) = rest.split_at(unit_len);
            let scale: u128 = match unit {
                "ns" => 1,
                "us" | "µs" | "μs" => 1_000,
                "ms" => 1_000_000,
                "s" => 1_000_000_000,
                "m" => 60_000_000_000,
                "h" => 3_600_000_000_000,
                _ => return Err(err()),
            };
            let whole: u128 = if int_part.is_empty() {
                0
            } else {
                int_part.parse().map_err(|_| err())?
            };
            let mut value = whole.checked_mul(scale).ok_or_else(err)?;
            if !frac_part.is_empty() {
                // Go reads at most the digits that fit an int64 (18 always do); more cannot
                // change a nanosecond count, and would overflow `frac * scale`.
                let digits = &frac_part[..frac_part.len().min(18)];
                let frac: u128 = digits.parse().map_err(|_| err())?;
                let denom = 10u128.pow(digits.len() as u32);
                // Checked: a whole part just under u128's limit plus its fraction would wrap in a
                // release build into a short duration, which Go refuses as an overflow.
                value = value.checked_add(frac * scale / denom).ok_or_else(err)?;
            }
            total = total.checked_add(value).ok_or_else(err)?;
            s = rest;
        }
        let limit = if negative {
            1u128 << 63
        } else {
            (1u128 << 63) - 1
        };
        if total > limit {
            return Err(err());
        }
        let nanos = if negative {
            (total as i128).wrapping_neg() as i64
        } else {
            total as i64
        };
        Ok(GoDuration { nanos })
    }
}

impl fmt::Display for GoDuration {
    /// `time.Duration.String`: `1h30m0s`, `1.5s`, `300ms`, `0s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.nanos < 0 { "-" } else { "" };
        let u = self.nanos.unsigned_abs();
        if u < 1_000_000_000 {
            let (unit, scale) = match u {
                0 => return f.write_str("0s"),
                1..=999 => ("ns", 1),
                1_000..=999_999 => ("µs", 1_000),
                _ => ("ms", 1_000_000),
            };
            return write!(f, "{sign}{}{unit}", fraction(u, scale));
        }
        let secs = u / 1_000_000_000;
        let sub = u % 1_000_000_000;
        let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
        let sec_text = fraction(s * 1_000_000_000 + sub, 1_000_000_000);
        if h > 0 {
            write!(f, "{sign}{h}h{m}m{sec_text}s")
        } else if m > 0 {
            write!(f, "{sign}{m}m{sec_text}s")
        } else {
            write!(f, "{sign}{sec_text}s")
        }
    }
}

/// `v / scale` with the fraction's trailing zeros removed.
fn fraction(v: u64, scale: u64) -> String {
    let whole = v / scale;
    let rem = v % scale;
    if rem == 0 {
        return whole.to_string();
    }
    let width = scale.ilog10() as usize;
    let digits = format!("{rem:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> i64 {
        s.parse::<GoDuration>().expect(s).nanos
    }

    #[test]
    fn parses_go_durations() {
        assert_eq!(d("0"), 0);
        assert_eq!(d("5m"), 300_000_000_000);
        assert_eq!(d("1h30m"), 5_400_000_000_000);
        assert_eq!(d("-30s"), -30_000_000_000);
        assert_eq!(d("+1s"), 1_000_000_000);
        assert_eq!(d("1.5h"), 5_400_000_000_000);
        assert_eq!(d(".5s"), 500_000_000);
        assert_eq!(d("1.s"), 1_000_000_000);
        assert_eq!(d("300ms"), 300_000_000);
        assert_eq!(d("1µs1us1μs1ns"), 3_001);
    }

    #[test]
    fn long_fractions_do_not_overflow() {
        // Found by `just fuzz` (target duration): 30 fraction digits times an hour overflowed.
        assert_eq!(d("267.39166933939166933991366999933339s"), 267_391_669_339);
        let fuzzed = ".3s3s267.39166933939166933991366999933339s267.3w267.3s26";
        assert!(fuzzed.parse::<GoDuration>().is_err(), "w is no unit");
    }

    #[test]
    fn a_whole_part_and_its_fraction_that_overflow_together_are_refused() {
        // Its whole part times an hour fits u128; with the fraction it does not, and a release
        // build (no overflow checks) wrapped it into a short duration that passed validation.
        let text = "94522879700260684295381835.999999999999999999h";
        assert!(text.parse::<GoDuration>().is_err(), "{text} overflows");
        assert!("9223372036.854775808s".parse::<GoDuration>().is_err());
        assert_eq!(d("9223372036.854775807s"), i64::MAX);
        assert_eq!(d("-9223372036.854775808s"), i64::MIN);
    }

    #[test]
    fn rejects_what_go_rejects() {
        for bad in ["", "5", "h", "1x", "-", ".s", "1h-1m", "1 h", "9999999999h"] {
            assert!(bad.parse::<GoDuration>().is_err(), "{bad:?} should fail");
        }
    }

    #[test]
    fn prints_like_go() {
        let cases = [
            (0, "0s"),
            (1, "1ns"),
            (1_100, "1.1µs"),
            (2_200_000, "2.2ms"),
            (1_000_000_000, "1s"),
            (1_500_000_000, "1.5s"),
            (90_000_000_000, "1m30s"),
            (300_000_000_000, "5m0s"),
            (5_400_000_000_000, "1h30m0s"),
            (-30_000_000_000, "-30s"),
        ];
        for (nanos, text) in cases {
            assert_eq!(GoDuration { nanos }.to_string(), text);
        }
        assert_eq!(
            GoDuration { nanos: i64::MIN }.to_string(),
            "-2562047h47m16.854775808s"
        );
    }

    #[test]
    fn negative_durations_have_no_std_duration() {
        assert_eq!(GoDuration { nanos: -1 }.to_std(), None);
        assert_eq!(
            GoDuration::from_secs(2).to_std(),
            Some(Duration::from_secs(2))
        );
    }
}
