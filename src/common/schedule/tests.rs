use super::*;

fn at(s: &str) -> Timestamp {
    s.parse().expect("a timestamp")
}

fn cron(s: &str) -> Cron {
    s.parse().expect("a cron expression")
}

fn utc() -> TimeZone {
    TimeZone::UTC
}

fn tz(name: &str) -> TimeZone {
    TimeZone::get(name).expect("a time zone")
}

fn every(c: &str, hours: u64, zone: TimeZone) -> Recurring {
    Recurring {
        cron: cron(c),
        duration: Duration::from_secs(hours * 3600),
        tz: zone,
    }
}

#[test]
fn fields_read_lists_ranges_steps_names_and_macros() {
    let c = cron("*/15 9-17 * jan,JUL mon-fri");
    assert!(c.minutes.has(0) && c.minutes.has(45) && !c.minutes.has(5));
    assert!(c.hours.has(9) && c.hours.has(17) && !c.hours.has(18));
    assert!(c.months.has(1) && c.months.has(7) && !c.months.has(2));
    assert!(c.weekdays.has(1) && c.weekdays.has(5) && !c.weekdays.has(0));
    assert!(!c.either_day);
    assert_eq!(cron("@daily"), cron("0 0 * * *"));
    assert_eq!(cron("@annually"), cron("@yearly"));
    assert!(cron("0 0 * * 7").weekdays.has(0), "7 is Sunday");
    let stepped = cron("5/20 * * * *");
    assert_eq!(
        (0..60)
            .filter(|m| stepped.minutes.has(*m))
            .collect::<Vec<_>>(),
        [5, 25, 45]
    );
}

#[test]
fn bad_expressions_say_which_field_and_why() {
    let err = |s: &str| s.parse::<Cron>().expect_err(s).to_string();
    assert_eq!(
        err("0 0 * *"),
        "needs 5 fields (minute hour day-of-month month day-of-week) or a macro, got 4"
    );
    assert_eq!(err("@fortnightly"), "unknown macro \"@fortnightly\"");
    assert_eq!(
        err("60 * * * *"),
        "minute: \"60\" is not a number or name in 0-59"
    );
    assert_eq!(
        err("0 0 0 * *"),
        "day of month: \"0\" is not a number or name in 1-31"
    );
    assert_eq!(
        err("*/0 * * * *"),
        "minute: step \"0\" is not a positive number"
    );
    assert_eq!(err("0 17-9 * * *"), "hour: range \"17-9\" runs backwards");
    assert_eq!(
        err("0 0 * foo *"),
        "month: \"foo\" is not a number or name in 1-12"
    );
}

#[test]
fn a_period_is_current_from_its_start_until_just_before_its_end() {
    // Every night 22:00 for 8 hours, UTC.
    let nights = every("0 22 * * *", 8, utc());
    let period = Period {
        start: at("2026-11-24T22:00:00Z"),
        end: at("2026-11-25T06:00:00Z"),
    };
    assert_eq!(nights.current(at("2026-11-24T22:00:00Z")), Some(period));
    assert_eq!(nights.current(at("2026-11-25T03:00:00Z")), Some(period));
    assert_eq!(nights.current(at("2026-11-25T05:59:59Z")), Some(period));
    assert_eq!(nights.current(at("2026-11-25T06:00:00Z")), None);
    assert_eq!(nights.current(at("2026-11-24T21:59:59Z")), None);
    assert_eq!(
        nights.next(at("2026-11-25T03:00:00Z")).map(|p| p.start),
        Some(at("2026-11-25T22:00:00Z"))
    );
}

#[test]
fn both_day_fields_restricted_match_either_as_vixie_cron_does() {
    // The 1st of the month or any Monday, at noon.
    let c = cron("0 12 1 * mon");
    let next = |t: &str| c.next_start(&utc(), at(t));
    // 2026-11-25 is a Wednesday: the next match is Monday the 30th, then 1 December (Tuesday).
    assert_eq!(
        next("2026-11-25T00:00:00Z"),
        Some(at("2026-11-30T12:00:00Z"))
    );
    assert_eq!(
        next("2026-11-30T12:00:00Z"),
        Some(at("2026-12-01T12:00:00Z"))
    );
    // Only the day of week restricted: Mondays only.
    let mondays = cron("0 12 * * mon");
    assert_eq!(
        mondays.next_start(&utc(), at("2026-11-30T12:00:00Z")),
        Some(at("2026-12-07T12:00:00Z"))
    );
}

#[test]
fn schedules_follow_their_time_zone_across_dst() {
    // Berlin, 01:00 local for 2 hours. On 2026-03-29 clocks go 02:00 -> 03:00 (CET -> CEST).
    let berlin = every("0 1 * * *", 2, tz("Europe/Berlin"));
    // 01:00 CET = 00:00 UTC the day before the change; 01:00 CEST = 23:00 UTC after it.
    assert_eq!(
        berlin.current(at("2026-03-28T01:30:00Z")).map(|p| p.start),
        Some(at("2026-03-28T00:00:00Z"))
    );
    assert_eq!(
        berlin.current(at("2026-03-29T23:30:00Z")).map(|p| p.start),
        Some(at("2026-03-29T23:00:00Z"))
    );
    // A start inside the gap (02:30, which does not exist that day) starts after the gap.
    let gap = every("30 2 * * *", 1, tz("Europe/Berlin"));
    assert_eq!(
        gap.next(at("2026-03-28T12:00:00Z")).map(|p| p.start),
        Some(at("2026-03-29T01:30:00Z")),
        "02:30 in the gap is 03:30 CEST"
    );
}

#[test]
fn overlapping_periods_end_with_the_last_start() {
    // Every hour for 3 hours: always on, each moment in the period that started last.
    let p = every("0 * * * *", 3, utc());
    assert_eq!(
        p.current(at("2026-11-25T10:30:00Z")),
        Some(Period {
            start: at("2026-11-25T10:00:00Z"),
            end: at("2026-11-25T13:00:00Z"),
        })
    );
}

#[test]
fn a_zero_duration_is_never_current_and_rare_dates_are_found() {
    assert_eq!(
        every("0 0 * * *", 0, utc()).current(at("2026-11-25T00:00:00Z")),
        None
    );
    // 29 February on a Monday with only the day of month: the next 29 February.
    let leap = cron("0 0 29 2 *");
    assert_eq!(
        leap.next_start(&utc(), at("2026-11-25T00:00:00Z")),
        Some(at("2028-02-29T00:00:00Z"))
    );
    // Never: 31 February.
    assert_eq!(
        cron("0 0 31 2 *").next_start(&utc(), at("2026-01-01T00:00:00Z")),
        None
    );
}
