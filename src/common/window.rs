//! `spec.window`: when a Plan may start a rollout, with the semantics of kured v1.13.1's
//! `timewindow` package (which system-upgrade-controller uses), on jiff.
//!
//! Parsing follows Go exactly: day names through `strconv.Atoi` and `strings.ToLower`, clock times
//! through `time.Parse` with kured's layouts, time zones through `time.LoadLocation`. `contains`
//! builds the window's start and end on the local date of the instant asked about, the way Go's
//! `time.Date` does, including what it does in DST gaps and folds (see [`TimeWindow::contains`]).

use std::time::Duration;

use jiff::civil::{Date, DateTime, Weekday};
use jiff::tz::{Offset, TimeZone};
use jiff::{SignedDuration, Timestamp};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Extra;

/// When a rollout may start (kured's time window).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimeWindowSpec {
    /// Days of the week: `su`/`sun`/`sunday`/`0` … `sa`/`sat`/`saturday`/`6`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<String>,
    /// IANA time zone; empty means UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,

    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Why a window spec is invalid. Display is SUC's validation message: `spec.window is invalid, <kured error>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    #[error("spec.window is invalid, Invalid weekday: {0}")]
    InvalidWeekday(String),
    #[error("spec.window is invalid, Invalid weekday, number out of range: {0}")]
    WeekdayOutOfRange(String),
    #[error("spec.window is invalid, Invalid time format: {0}")]
    InvalidTime(String),
    #[error("spec.window is invalid, unknown time zone {0}")]
    UnknownTimeZone(String),
    /// Go rejects names with `..` or a leading slash before looking them up.
    #[error("spec.window is invalid, time: invalid location name")]
    InvalidLocationName(String),
}

/// A time of day as Go's `time.Parse` leaves it; ordered like the instants kured compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Clock {
    pub hour: i8,
    pub minute: i8,
    pub second: i8,
    /// Only reachable through Go's undocumented fractional seconds after `05` (`10:00:00.5`); it
    /// takes part in the overnight comparison but, as in kured, not in the window's bounds.
    pub nanosecond: i32,
}

/// A parsed `spec.window`.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeWindow {
    /// Bit `n` set for weekday `n`, Sunday = 0 (kured's bit set).
    days: u8,
    tz: TimeZone,
    start: Clock,
    end: Clock,
}

/// How often SUC re-checks a Plan that waits for its window.
const MAX_CHECK: Duration = Duration::from_secs(60);
const MIN_CHECK: Duration = Duration::from_secs(1);
const DAY: SignedDuration = SignedDuration::from_hours(24);

impl TimeWindow {
    /// kured's `timewindow.New`: days, then time zone, then start, then end; the first error wins.
    pub fn new(spec: &TimeWindowSpec) -> Result<TimeWindow, WindowError> {
        let days = parse_weekdays(spec.days.as_deref().unwrap_or_default())?;
        let tz = load_location(spec.time_zone.as_deref().unwrap_or_default())?;
        let start = parse_clock(spec.start_time.as_deref().unwrap_or_default())?;
        let end = parse_clock(spec.end_time.as_deref().unwrap_or_default())?;
        Ok(TimeWindow {
            days,
            tz,
            start,
            end,
        })
    }

    pub fn start(&self) -> Clock {
        self.start
    }

    pub fn end(&self) -> Clock {
        self.end
    }

    pub fn time_zone(&self) -> &TimeZone {
        &self.tz
    }

    /// Whether `weekday` is one of the window's days.
    pub fn has_day(&self, weekday: Weekday) -> bool {
        self.days & (1 << weekday.to_sunday_zero_offset()) != 0
    }

    /// kured's `Contains`.
    ///
    /// The weekday is that of `t`'s *local* date, and start and end are built on that date; an
    /// overnight window (start after end) then reaches back to yesterday's start before `end`, or
    /// forward to tomorrow's end after it. Quirk kept from kured: only today's weekday is checked,
    /// so 22:00–02:00 on `mo` alone is open Monday 22:00–24:00 and Monday 00:00–02:00 (the tail
    /// of Sunday night), but not early Tuesday. The shifts are 24 real hours, as Go's `Add`.
    ///
    /// DST: start and end are placed as Go's `time.Date` places them (see `go_date`). East of
    /// Greenwich a time in a gap moves forward by the gap and a time in a fold is the later one
    /// (Europe/Berlin: 02:30 on the spring day is 03:30 CEST, on the autumn day 02:30 CET); west of
    /// it a time in a gap moves back and a fold gives the earlier one (America/New_York: 02:30 on
    /// the spring day is 01:30 EST, 01:30 on the autumn day is 01:30 EDT). The window is then
    /// simply shorter or longer that day; nothing fails.
    pub fn contains(&self, t: Timestamp) -> bool {
        let local = self.tz.to_datetime(t);
        if !self.has_day(local.weekday()) {
            return false;
        }
        let date = local.date();
        let (Some(mut start), Some(mut end)) = (
            self.instant(date, self.start, 0),
            self.instant(date, self.end, 999_999_999),
        ) else {
            return false;
        };
        if self.start > self.end {
            // kured compares the parsed clock times, not the instants built above.
            if t < end {
                match start.checked_sub(DAY) {
                    Ok(s) => start = s,
                    Err(_) => return false,
                }
            } else {
                match end.checked_add(DAY) {
                    Ok(e) => end = e,
                    Err(_) => return false,
                }
            }
        }
        start <= t && t <= end
    }

    /// The first instant at or after `t` at which [`Self::contains`] holds, looking up to a week
    /// ahead; `t` itself when the window is open. `None` if it does not open in that time (no
    /// days, or bounds that DST makes empty).
    pub fn next_opening(&self, t: Timestamp) -> Option<Timestamp> {
        if self.days == 0 {
            return None;
        }
        if self.contains(t) {
            return Some(t);
        }
        // `contains` is a union of closed ranges per local day, each starting at that day's start,
        // yesterday's start + 24h back, its end (where an overnight window switches branches), or
        // the local midnight (where the weekday changes). The first of those where the window is
        // open is the opening.
        let today = self.tz.to_datetime(t).date();
        let mut candidates: Vec<Timestamp> = (-1..=8)
            .filter_map(|n| today.checked_add(jiff::Span::new().days(n)).ok())
            .flat_map(|date| {
                let start = self.instant(date, self.start, 0);
                [
                    start,
                    start.and_then(|s| s.checked_sub(DAY).ok()),
                    self.instant(date, self.end, 999_999_999),
                    self.midnight(date),
                ]
            })
            .flatten()
            .filter(|c| *c > t)
            .collect();
        candidates.sort_unstable();
        candidates.dedup();
        candidates.into_iter().find(|c| self.contains(*c))
    }

    /// When to look again while outside the window: when it next opens, but at most a minute away
    /// (SUC re-checks every minute) and at least a second.
    pub fn next_check(&self, t: Timestamp) -> Duration {
        self.next_opening(t)
            .and_then(|open| Duration::try_from(open.duration_since(t)).ok())
            .map_or(MAX_CHECK, |d| d.clamp(MIN_CHECK, MAX_CHECK))
    }

    /// Go's `time.Date(y, m, d, hh, mm, ss, ns, loc)`.
    fn instant(&self, date: Date, clock: Clock, nanosecond: i32) -> Option<Timestamp> {
        let dt = date.at(clock.hour, clock.minute, clock.second, nanosecond);
        go_date(&self.tz, dt)
    }

    /// The first instant of `date` in the window's zone (after the gap, if midnight is skipped).
    fn midnight(&self, date: Date) -> Option<Timestamp> {
        date.to_zoned(self.tz.clone())
            .and_then(|z| z.start_of_day())
            .ok()
            .map(|z| z.timestamp())
    }
}

/// Go's `time.Date` for a wall-clock time: take the offset in force at the wall time read as UTC,
/// and if the instant that gives lies outside that offset's period, use the offset at that instant
/// instead. Which side of a gap or fold this lands on depends on the sign of the offset.
fn go_date(tz: &TimeZone, dt: DateTime) -> Option<Timestamp> {
    let naive = Offset::UTC.to_timestamp(dt).ok()?;
    let shift = |ts: Timestamp, off: Offset| {
        ts.checked_sub(SignedDuration::from_secs(i64::from(off.seconds())))
            .ok()
    };
    let guess = shift(naive, tz.to_offset(naive))?;
    shift(naive, tz.to_offset(guess))
}

/// kured's `parseWeekdays`: empty names are skipped; the result is a bit set.
fn parse_weekdays(days: &[String]) -> Result<u8, WindowError> {
    let mut set = 0u8;
    for day in days.iter().filter(|d| !d.is_empty()) {
        set |= 1 << parse_weekday(day)?;
    }
    Ok(set)
}

/// kured's `parseWeekday`: a number 0–6 (Go's `Atoi`, so `+3` and `03` count), else a name of
/// any case.
fn parse_weekday(day: &str) -> Result<u8, WindowError> {
    // Rust's integer syntax is Atoi's: an optional sign, then ASCII digits, 64-bit range.
    if let Ok(n) = day.parse::<i64>() {
        return u8::try_from(n)
            .ok()
            .filter(|n| *n < 7)
            .ok_or_else(|| WindowError::WeekdayOutOfRange(day.to_string()));
    }
    // Go's `strings.ToLower` uses simple case mapping, which differs from Rust's only for U+0130.
    let lower: String = day
        .chars()
        .map(|c| if c == '\u{130}' { 'i' } else { c })
        .flat_map(char::to_lowercase)
        .collect();
    let n = match lower.as_str() {
        "su" | "sun" | "sunday" => 0,
        "mo" | "mon" | "monday" => 1,
        "tu" | "tue" | "tuesday" => 2,
        "we" | "wed" | "wednesday" => 3,
        "th" | "thu" | "thursday" => 4,
        "fr" | "fri" | "friday" => 5,
        "sa" | "sat" | "saturday" => 6,
        _ => return Err(WindowError::InvalidWeekday(day.to_string())),
    };
    Ok(n)
}

/// Go's `time.LoadLocation`: empty and `UTC` are UTC, `Local` is the process's zone, anything else
/// is an IANA name, matched case-sensitively as Go's file lookup does.
fn load_location(name: &str) -> Result<TimeZone, WindowError> {
    match name {
        "" | "UTC" => return Ok(TimeZone::UTC),
        "Local" => return Ok(TimeZone::system()),
        _ => {}
    }
    if name.contains("..") || name.starts_with('/') || name.starts_with('\\') {
        return Err(WindowError::InvalidLocationName(name.to_string()));
    }
    match TimeZone::get(name) {
        // jiff matches names case-insensitively; Go (a file name on Linux, a zip entry) does not.
        Ok(tz) if tz.iana_name() == Some(name) => Ok(tz),
        _ => Err(WindowError::UnknownTimeZone(name.to_string())),
    }
}

/// One element of a Go time layout, as far as kured's layouts use them.
#[derive(Clone, Copy)]
enum Elem {
    /// `15`: one or two digits, 0–23.
    Hour,
    /// `3`: one or two digits, 0–12.
    Hour12,
    /// `03`: two digits, 0–12.
    ZeroHour12,
    /// `04`: two digits, 0–59.
    ZeroMinute,
    /// `05`: two digits, 0–59, then optionally `.` or `,` and digits (Go accepts a fraction the
    /// layout does not mention).
    ZeroSecond,
    /// `pm`: `am` or `pm`, lower case only.
    LowerPm,
    Colon,
}

/// kured's layouts in its order: `15:04`, `15:04:05`, `03:04pm`, `15`, `03pm`, `3pm`.
const LAYOUTS: [&[Elem]; 6] = {
    use Elem::*;
    [
        &[Hour, Colon, ZeroMinute],
        &[Hour, Colon, ZeroMinute, Colon, ZeroSecond],
        &[ZeroHour12, Colon, ZeroMinute, LowerPm],
        &[Hour],
        &[ZeroHour12, LowerPm],
        &[Hour12, LowerPm],
    ]
};

/// kured's `parseTime`: the first layout that parses wins.
pub fn parse_clock(s: &str) -> Result<Clock, WindowError> {
    LAYOUTS
        .iter()
        .find_map(|layout| go_parse(layout, s.as_bytes()))
        .ok_or_else(|| WindowError::InvalidTime(s.to_string()))
}

/// Go's `time.Parse` restricted to the elements above: every element must match, ranges are
/// checked, and nothing may be left over.
fn go_parse(layout: &[Elem], mut value: &[u8]) -> Option<Clock> {
    let (mut hour, mut minute, mut second, mut nanosecond) = (0i32, 0i32, 0i32, 0i32);
    let (mut am, mut pm) = (false, false);
    for elem in layout {
        match elem {
            Elem::Colon => value = value.strip_prefix(b":")?,
            Elem::Hour | Elem::Hour12 | Elem::ZeroHour12 => {
                let (n, rest) = getnum(value, matches!(elem, Elem::ZeroHour12))?;
                let max = if matches!(elem, Elem::Hour) { 23 } else { 12 };
                (hour, value) = ((n <= max).then_some(n)?, rest);
            }
            Elem::ZeroMinute => {
                let (n, rest) = getnum(value, true)?;
                (minute, value) = ((n < 60).then_some(n)?, rest);
            }
            Elem::ZeroSecond => {
                let (n, rest) = getnum(value, true)?;
                (second, value) = ((n < 60).then_some(n)?, rest);
                if let [b'.' | b',', d, ..] = value
                    && d.is_ascii_digit()
                {
                    let digits = value[1..].iter().take_while(|b| b.is_ascii_digit()).count();
                    // Go keeps the first nine digits and skips the rest.
                    let kept = &value[1..1 + digits.min(9)];
                    let mut ns = kept.iter().fold(0i32, |a, b| a * 10 + i32::from(b - b'0'));
                    for _ in kept.len()..9 {
                        ns *= 10;
                    }
                    nanosecond = ns;
                    value = &value[1 + digits..];
                }
            }
            Elem::LowerPm => {
                match value.get(..2)? {
                    b"am" => am = true,
                    b"pm" => pm = true,
                    _ => return None,
                }
                value = &value[2..];
            }
        }
    }
    if !value.is_empty() {
        return None;
    }
    if pm && hour < 12 {
        hour += 12;
    } else if am && hour == 12 {
        hour = 0;
    }
    Some(Clock {
        hour: i8::try_from(hour).ok()?,
        minute: i8::try_from(minute).ok()?,
        second: i8::try_from(second).ok()?,
        nanosecond,
    })
}

/// Go's `getnum`: one or two leading digits; `fixed` requires two.
fn getnum(s: &[u8], fixed: bool) -> Option<(i32, &[u8])> {
    match s {
        [a, b, rest @ ..] if a.is_ascii_digit() && b.is_ascii_digit() => {
            Some((i32::from(a - b'0') * 10 + i32::from(b - b'0'), rest))
        }
        [a, rest @ ..] if a.is_ascii_digit() && !fixed => Some((i32::from(a - b'0'), rest)),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
