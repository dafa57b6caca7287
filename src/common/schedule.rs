//! Recurring periods: a cron expression that says when a period starts, a duration that says how
//! long it lasts, in a time zone (a DisruptionBudget's `schedules`, as Karpenter's NodePool budgets
//! write them, with the time zone they lack).
//!
//! Cron is the five fields of Vixie cron (minute, hour, day of month, month, day of week), with
//! lists, ranges, steps, month and day names, `7` for Sunday, and the macros `@yearly`,
//! `@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight` and `@hourly`. As in Vixie cron, when
//! both the day of month and the day of week are restricted (neither starts with `*`), a day
//! matches if either does. A start is a local time in the zone; one that falls into a DST gap
//! starts at the first instant after the gap, one in a fold at its first instant.
//!
//! Not a crate's parser: `cron` follows Quartz's syntax (its day-of-week numbers are not Vixie's);
//! `croner` keeps Vixie's rule but computes in chrono, where slipway's times, zones and DST rules
//! are jiff's, so every start would cross between two time libraries.

use std::time::Duration;

use jiff::civil::{Date, DateTime, Time};
use jiff::tz::TimeZone;
use jiff::{Span, Timestamp};

/// Why a cron expression cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    #[error("needs 5 fields (minute hour day-of-month month day-of-week) or a macro, got {0}")]
    FieldCount(usize),
    #[error("unknown macro {0:?}")]
    Macro(String),
    #[error("{field}: {value:?} is not a number or name in {min}-{max}")]
    Value {
        field: &'static str,
        value: String,
        min: u8,
        max: u8,
    },
    #[error("{field}: step {value:?} is not a positive number")]
    Step { field: &'static str, value: String },
    #[error("{field}: range {value:?} runs backwards")]
    Backwards { field: &'static str, value: String },
}

/// One field's allowed values, as a bit set (bit n: value n).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Field(u64);

impl Field {
    fn has(self, v: u8) -> bool {
        self.0 & (1 << v) != 0
    }
}

struct FieldSpec {
    name: &'static str,
    min: u8,
    max: u8,
    names: &'static [&'static str],
}

const MINUTE: FieldSpec = FieldSpec {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: FieldSpec = FieldSpec {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DAY_OF_MONTH: FieldSpec = FieldSpec {
    name: "day of month",
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: FieldSpec = FieldSpec {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
/// 0 and 7 are Sunday.
const DAY_OF_WEEK: FieldSpec = FieldSpec {
    name: "day of week",
    min: 0,
    max: 7,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

impl FieldSpec {
    fn value(&self, s: &str) -> Result<u8, CronError> {
        let err = || CronError::Value {
            field: self.name,
            value: s.to_string(),
            min: self.min,
            max: self.max,
        };
        let lower = s.to_ascii_lowercase();
        if let Some(i) = self.names.iter().position(|n| *n == lower) {
            // Names count from the field's first value (jan = 1, sun = 0).
            return u8::try_from(i).map(|i| i + self.min).map_err(|_| err());
        }
        let v: u8 = s.parse().map_err(|_| err())?;
        (self.min..=self.max)
            .contains(&v)
            .then_some(v)
            .ok_or_else(err)
    }

    fn parse(&self, text: &str) -> Result<Field, CronError> {
        let mut bits = 0u64;
        for part in text.split(',') {
            let (range, step) = match part.split_once('/') {
                Some((r, s)) => {
                    let step: u8 = s.parse().ok().filter(|s| *s > 0).ok_or(CronError::Step {
                        field: self.name,
                        value: s.to_string(),
                    })?;
                    (r, step)
                }
                None => (part, 1),
            };
            let (from, to) = match range.split_once('-') {
                _ if range == "*" => (self.min, self.max),
                Some((a, b)) => (self.value(a)?, self.value(b)?),
                // `n/step` runs from n to the end, as in Vixie cron.
                None if step > 1 => (self.value(range)?, self.max),
                None => {
                    let v = self.value(range)?;
                    (v, v)
                }
            };
            if from > to {
                return Err(CronError::Backwards {
                    field: self.name,
                    value: range.to_string(),
                });
            }
            for v in (from..=to).step_by(usize::from(step)) {
                bits |= 1 << v;
            }
        }
        Ok(Field(bits))
    }
}

/// A parsed cron expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    minutes: Field,
    hours: Field,
    days: Field,
    months: Field,
    weekdays: Field,
    /// Both day fields restricted: a day matches if either does.
    either_day: bool,
}

impl std::str::FromStr for Cron {
    type Err = CronError;

    fn from_str(text: &str) -> Result<Cron, CronError> {
        let text = text.trim();
        let expanded = match text {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            m if m.starts_with('@') => return Err(CronError::Macro(m.to_string())),
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = fields[..] else {
            return Err(CronError::FieldCount(fields.len()));
        };
        let mut weekdays = DAY_OF_WEEK.parse(weekday)?;
        if weekdays.has(7) {
            weekdays.0 |= 1;
        }
        Ok(Cron {
            minutes: MINUTE.parse(minute)?,
            hours: HOUR.parse(hour)?,
            days: DAY_OF_MONTH.parse(day)?,
            months: MONTH.parse(month)?,
            weekdays,
            either_day: !day.starts_with('*') && !weekday.starts_with('*'),
        })
    }
}

/// How far to look for a start: every cron expression that can fire fires within this many days
/// (29 February on a given weekday recurs within 28 years, but nobody needs that).
const HORIZON_DAYS: i64 = 366 * 5;

impl Cron {
    fn day_matches(&self, date: Date) -> bool {
        let month = u8::try_from(date.month()).unwrap_or(0);
        let day = u8::try_from(date.day()).unwrap_or(0);
        let weekday = u8::try_from(date.weekday().to_sunday_zero_offset()).unwrap_or(0);
        if !self.months.has(month) {
            return false;
        }
        let (by_day, by_weekday) = (self.days.has(day), self.weekdays.has(weekday));
        if self.either_day {
            by_day || by_weekday
        } else {
            by_day && by_weekday
        }
    }

    /// The local starts of `date`, in order.
    fn times(&self) -> impl Iterator<Item = Time> + '_ {
        (0..24u8).filter(|h| self.hours.has(*h)).flat_map(move |h| {
            (0..60u8)
                .filter(|m| self.minutes.has(*m))
                .filter_map(move |m| Time::new(h as i8, m as i8, 0, 0).ok())
        })
    }

    fn instant(tz: &TimeZone, date: Date, time: Time) -> Option<Timestamp> {
        tz.to_ambiguous_timestamp(DateTime::from_parts(date, time))
            .compatible()
            .ok()
    }

    /// The latest start at or before `t`, looking back at most `within`.
    pub fn last_start(&self, tz: &TimeZone, t: Timestamp, within: Duration) -> Option<Timestamp> {
        let earliest = t.checked_sub(Span::try_from(within).ok()?).ok()?;
        let mut date = tz.to_datetime(t).date();
        // A start in a DST gap lands after its local time: look one day past `t` too.
        if let Ok(next) = date.checked_add(Span::new().days(1)) {
            date = next;
        }
        let first = tz
            .to_datetime(earliest)
            .date()
            .checked_sub(Span::new().days(1))
            .ok()?;
        while date >= first {
            if self.day_matches(date) {
                let best = self
                    .times()
                    .filter_map(|time| Self::instant(tz, date, time))
                    .filter(|s| *s <= t && *s >= earliest)
                    .max();
                if best.is_some() {
                    return best;
                }
            }
            date = date.checked_sub(Span::new().days(1)).ok()?;
        }
        None
    }

    /// The first start after `t`.
    pub fn next_start(&self, tz: &TimeZone, t: Timestamp) -> Option<Timestamp> {
        let mut date = tz
            .to_datetime(t)
            .date()
            .checked_sub(Span::new().days(1))
            .ok()?;
        for _ in 0..HORIZON_DAYS {
            if self.day_matches(date) {
                let first = self
                    .times()
                    .filter_map(|time| Self::instant(tz, date, time))
                    .find(|s| *s > t);
                if first.is_some() {
                    return first;
                }
            }
            date = date.checked_add(Span::new().days(1)).ok()?;
        }
        None
    }
}

/// A period that recurs: it starts at every start of `cron` and lasts `duration`.
#[derive(Debug, Clone, PartialEq)]
pub struct Recurring {
    pub cron: Cron,
    pub duration: Duration,
    pub tz: TimeZone,
}

/// One occurrence of a recurring period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Period {
    pub start: Timestamp,
    pub end: Timestamp,
}

impl Recurring {
    /// The occurrence `t` is in, if any (the one that started last, when they overlap).
    pub fn current(&self, t: Timestamp) -> Option<Period> {
        if self.duration.is_zero() {
            return None;
        }
        // A period that started exactly `duration` ago has just ended.
        let within = self.duration.checked_sub(Duration::from_nanos(1))?;
        let start = self.cron.last_start(&self.tz, t, within)?;
        let end = start
            .checked_add(Span::try_from(self.duration).ok()?)
            .ok()?;
        Some(Period { start, end })
    }

    /// The next occurrence that starts after `t`.
    pub fn next(&self, t: Timestamp) -> Option<Period> {
        let start = self.cron.next_start(&self.tz, t)?;
        let end = start
            .checked_add(Span::try_from(self.duration).ok()?)
            .ok()?;
        Some(Period { start, end })
    }
}

#[cfg(test)]
mod tests;
