use super::*;
use crate::common::crd::{DAY_NAMES, TIME_OF_DAY_PATTERN};

fn spec(days: &[&str], start: &str, end: &str, tz: &str) -> TimeWindowSpec {
    TimeWindowSpec {
        days: Some(days.iter().map(|d| d.to_string()).collect()),
        start_time: Some(start.into()),
        end_time: Some(end.into()),
        time_zone: Some(tz.into()),
        ..Default::default()
    }
}

fn window(days: &[&str], start: &str, end: &str, tz: &str) -> TimeWindow {
    TimeWindow::new(&spec(days, start, end, tz)).expect("valid window")
}

fn err(days: &[&str], start: &str, end: &str, tz: &str) -> String {
    TimeWindow::new(&spec(days, start, end, tz))
        .expect_err("invalid window")
        .to_string()
}

/// An instant written as an RFC 3339 time with offset, optionally with a `[zone]` suffix.
fn at(s: &str) -> Timestamp {
    if s.contains('[') {
        s.parse::<jiff::Zoned>().expect(s).timestamp()
    } else {
        s.parse::<Timestamp>().expect(s)
    }
}

fn clock(h: i8, m: i8, s: i8, ns: i32) -> Clock {
    Clock {
        hour: h,
        minute: m,
        second: s,
        nanosecond: ns,
    }
}

/// Days, start, end, zone, and instants with whether the window contains them.
type Case<'a> = (&'a str, &'a str, &'a str, &'a str, &'a [(&'a str, bool)]);

// kured's own TestTimeWindows table (pkg/timewindow/timewindow_test.go at 1.13.1).
#[test]
fn kured_table() {
    let la = "America/Los_Angeles";
    let cases: &[Case] = &[
        (
            "mon,tue,wed,thu,fri",
            "9am",
            "5pm",
            la,
            &[
                ("2019-03-31T10:00-07:00", false),
                ("2019-04-04T00:49-07:00", false),
                ("2019-04-04T12:00-07:00", true),
                ("2019-04-04T11:59Z", false),
                ("2019-04-05T08:59-07:00", false),
                ("2019-04-05T09:01-07:00", true),
            ],
        ),
        (
            "mon,we,fri",
            "10:01",
            "11:30am",
            la,
            &[
                ("2019-04-05T10:30-07:00", true),
                ("2019-04-06T10:30-07:00", false),
                ("2019-04-07T10:30-07:00", false),
                ("2019-04-08T10:30-07:00", true),
                ("2019-04-09T10:30-07:00", false),
                ("2019-04-10T10:30-07:00", true),
                ("2019-04-11T10:30-07:00", false),
            ],
        ),
        (
            "mo,tu,we,th,fr",
            "00:00",
            "23:59:59",
            "UTC",
            &[("2019-04-18T00:00Z", true), ("2019-04-18T23:59Z", true)],
        ),
        (
            "mon,tue,wed,thu,fri",
            "9pm",
            "5am",
            la,
            &[
                ("2019-03-30T04:00-07:00", false),
                ("2019-03-31T10:00-07:00", false),
                ("2019-03-31T22:00-07:00", false),
                ("2019-04-04T00:49-07:00", true),
                ("2019-04-04T12:00-07:00", false),
                ("2019-04-04T22:49-07:00", true),
                ("2019-04-05T00:49-07:00", true),
                ("2019-04-05T08:59-07:00", false),
                ("2019-04-05T09:01-07:00", false),
            ],
        ),
        (
            "mon,tue,wed,thu,fri",
            "11:59pm",
            "00:01am",
            la,
            &[
                ("2019-04-04T23:58-07:00", false),
                ("2019-04-04T23:59-07:00", true),
                ("2019-04-05T00:00-07:00", true),
                ("2019-04-05T00:01-07:00", true),
                ("2019-04-05T00:02-07:00", false),
            ],
        ),
        (
            "mon,tue,wed,fri",
            "11:59pm",
            "00:01am",
            la,
            &[
                ("2019-04-04T23:58-07:00", false),
                ("2019-04-04T23:59-07:00", false),
                ("2019-04-05T00:00-07:00", true),
                ("2019-04-05T00:02-07:00", false),
            ],
        ),
        (
            "mon,tue,wed,thu",
            "11:59pm",
            "00:01am",
            la,
            &[
                ("2019-04-04T23:58-07:00", false),
                ("2019-04-04T23:59-07:00", true),
                ("2019-04-05T00:00-07:00", false),
                ("2019-04-05T00:02-07:00", false),
            ],
        ),
        (
            "mon,tue,wed,thu,fri",
            "11:59pm",
            "00:01am",
            "UTC",
            &[
                ("2019-04-04T23:58Z", false),
                ("2019-04-04T23:59Z", true),
                ("2019-04-05T00:00Z", true),
                ("2019-04-05T00:01Z", true),
                ("2019-04-05T00:02Z", false),
            ],
        ),
    ];
    for (days, start, end, tz, checks) in cases {
        let days: Vec<&str> = days.split(',').collect();
        let w = window(&days, start, end, tz);
        for (t, want) in *checks {
            assert_eq!(
                w.contains(at(t)),
                *want,
                "{days:?} {start}-{end} {tz} at {t}"
            );
        }
    }
}

#[test]
fn every_crd_day_name_parses_to_its_weekday() {
    for (i, name) in DAY_NAMES.iter().enumerate() {
        let w = window(&[name], "00:00", "23:59:59", "");
        // 2024-06-02 is a Sunday; DAY_NAMES lists four names per day from Sunday.
        let day = 2 + (i / 4) as i8;
        let noon = jiff::civil::date(2024, 6, day).at(12, 0, 0, 0);
        let t = noon.to_zoned(TimeZone::UTC).unwrap().timestamp();
        assert!(w.contains(t), "{name}");
        let next_day = t.checked_add(DAY).unwrap();
        assert!(!w.contains(next_day), "{name} on the next day");
    }
}

#[test]
fn day_names_follow_kured() {
    // Any case, as kured lower-cases; Go's simple case mapping turns U+0130 into a plain `i`.
    for name in ["THURSDAY", "WeDnEsDaY", "Su", "FRİDAY"] {
        assert!(
            TimeWindow::new(&spec(&[name], "1", "2", "")).is_ok(),
            "{name}"
        );
    }
    // Numbers go through Atoi: signs and leading zeros are fine.
    let w = window(&["+3", "04"], "00:00", "23:59:59", "");
    assert!(w.has_day(Weekday::Wednesday) && w.has_day(Weekday::Thursday));
    assert!(!w.has_day(Weekday::Friday));
    // Empty names are skipped.
    let w = window(&["", "mo", ""], "00:00", "23:59:59", "");
    assert!(w.has_day(Weekday::Monday));
    assert_eq!(
        err(&["7"], "1", "2", ""),
        "spec.window is invalid, Invalid weekday, number out of range: 7"
    );
    assert_eq!(
        err(&["-1"], "1", "2", ""),
        "spec.window is invalid, Invalid weekday, number out of range: -1"
    );
    assert_eq!(
        err(&["mo", "funday"], "1", "2", ""),
        "spec.window is invalid, Invalid weekday: funday"
    );
    assert_eq!(
        err(&["Mon "], "1", "2", ""),
        "spec.window is invalid, Invalid weekday: Mon "
    );
    // Too big for Atoi, so it is looked up as a name.
    assert_eq!(
        err(&["99999999999999999999"], "1", "2", ""),
        "spec.window is invalid, Invalid weekday: 99999999999999999999"
    );
}

#[test]
fn no_days_is_valid_but_never_open() {
    for days in [None, Some(vec![]), Some(vec![String::new()])] {
        let mut s = spec(&[], "00:00", "23:59:59", "");
        s.days = days;
        let w = TimeWindow::new(&s).unwrap();
        let t = at("2024-06-03T12:00Z");
        assert!(!w.contains(t));
        assert_eq!(w.next_opening(t), None);
        assert_eq!(w.next_check(t), Duration::from_secs(60));
    }
}

#[test]
fn clock_formats_follow_go_time_parse() {
    let ok = [
        ("0", clock(0, 0, 0, 0)),
        ("7", clock(7, 0, 0, 0)),
        ("07", clock(7, 0, 0, 0)),
        ("23", clock(23, 0, 0, 0)),
        ("9:30", clock(9, 30, 0, 0)),
        ("09:30", clock(9, 30, 0, 0)),
        ("23:59:59", clock(23, 59, 59, 0)),
        ("7:05:09", clock(7, 5, 9, 0)),
        // Go reads a fraction after `05` although the layout has none; it keeps nine digits.
        ("10:00:00.5", clock(10, 0, 0, 500_000_000)),
        ("10:00:00,25", clock(10, 0, 0, 250_000_000)),
        ("10:00:00.1234567891", clock(10, 0, 0, 123_456_789)),
        ("09:30pm", clock(21, 30, 0, 0)),
        ("12:15am", clock(0, 15, 0, 0)),
        ("00:15pm", clock(12, 15, 0, 0)),
        ("9am", clock(9, 0, 0, 0)),
        ("09am", clock(9, 0, 0, 0)),
        ("12am", clock(0, 0, 0, 0)),
        ("12pm", clock(12, 0, 0, 0)),
        ("00am", clock(0, 0, 0, 0)),
        ("0pm", clock(12, 0, 0, 0)),
        ("11pm", clock(23, 0, 0, 0)),
    ];
    for (s, want) in ok {
        assert_eq!(parse_clock(s), Ok(want), "{s}");
    }
    let bad = [
        "",
        " 9",
        "9 ",
        "24",
        "24:00",
        "25:00",
        "123",
        "0900",
        "9:5",
        "9:60",
        "9:30:60",
        "9:30:5",
        "10:00:00.",
        "10:00:00.x",
        "9:30pm",
        "13pm",
        "9PM",
        "9Am",
        "9 am",
        "9a",
        "12:00:00pm",
        "9:30.5",
        "-1",
        "+9",
        "９",
    ];
    for s in bad {
        assert_eq!(
            parse_clock(s),
            Err(WindowError::InvalidTime(s.into())),
            "{s}"
        );
    }
}

#[test]
fn invalid_windows_report_the_first_error_like_suc() {
    assert_eq!(
        err(&["mo"], "25:00", "10:00", ""),
        "spec.window is invalid, Invalid time format: 25:00"
    );
    assert_eq!(
        err(&["mo"], "10:00", "", ""),
        "spec.window is invalid, Invalid time format: "
    );
    assert_eq!(
        err(&["mo"], "1", "2", "Mars/Base"),
        "spec.window is invalid, unknown time zone Mars/Base"
    );
    // Days are checked before the zone, the zone before the times.
    assert_eq!(
        err(&["funday"], "x", "y", "Mars/Base"),
        "spec.window is invalid, Invalid weekday: funday"
    );
    assert_eq!(
        err(&["mo"], "x", "y", "Mars/Base"),
        "spec.window is invalid, unknown time zone Mars/Base"
    );
    assert_eq!(
        err(&["mo"], "x", "y", ""),
        "spec.window is invalid, Invalid time format: x"
    );
    // A missing start or end is an empty string, which no layout accepts.
    let mut s = spec(&["mo"], "1", "2", "");
    s.start_time = None;
    assert_eq!(
        TimeWindow::new(&s).unwrap_err(),
        WindowError::InvalidTime(String::new())
    );
}

#[test]
fn time_zones_load_like_go() {
    for name in [
        "",
        "UTC",
        "Local",
        "Etc/UTC",
        "Europe/Berlin",
        "Asia/Tokyo",
        "US/Pacific",
        "EST5EDT",
    ] {
        assert!(
            TimeWindow::new(&spec(&["mo"], "1", "2", name)).is_ok(),
            "{name}"
        );
    }
    // Go's lookup is a case-sensitive file name; jiff's alone would accept these.
    for name in ["utc", "europe/berlin", "Etc/Unknown", "Mars/Base", " UTC"] {
        assert_eq!(
            TimeWindow::new(&spec(&["mo"], "1", "2", name)).unwrap_err(),
            WindowError::UnknownTimeZone(name.into()),
            "{name}"
        );
    }
    for name in ["../etc/passwd", "/etc/localtime", "\\x", "Europe/../UTC"] {
        assert_eq!(
            err(&["mo"], "1", "2", name),
            "spec.window is invalid, time: invalid location name"
        );
    }
}

#[test]
fn end_is_inclusive_to_the_last_nanosecond() {
    let w = window(&["mo"], "09:00", "17:00", "UTC");
    // 2024-06-03 is a Monday.
    assert!(!w.contains(at("2024-06-03T08:59:59.999999999Z")));
    assert!(w.contains(at("2024-06-03T09:00:00Z")));
    assert!(w.contains(at("2024-06-03T17:00:00Z")));
    assert!(w.contains(at("2024-06-03T17:00:00.999999999Z")));
    assert!(!w.contains(at("2024-06-03T17:00:01Z")));
    assert!(!w.contains(at("2024-06-04T12:00:00Z")));
    // Seconds count; start is at .0, end at .999999999.
    let w = window(&["mo"], "09:00:30", "09:00:45", "UTC");
    assert!(!w.contains(at("2024-06-03T09:00:29.999Z")));
    assert!(w.contains(at("2024-06-03T09:00:45.5Z")));
}

#[test]
fn overnight_windows_keep_the_weekday_quirk() {
    // 2024-06-03 is a Monday.
    let mon_only = window(&["mo"], "22:00", "02:00", "UTC");
    let mon_tue = window(&["mo", "tu"], "22:00", "02:00", "UTC");
    for w in [&mon_only, &mon_tue] {
        assert!(!w.contains(at("2024-06-03T21:59:59Z")));
        assert!(w.contains(at("2024-06-03T22:00:00Z")));
        assert!(w.contains(at("2024-06-03T23:00:00Z")));
        // Monday 01:00 is the tail of Sunday night, but it is Monday.
        assert!(w.contains(at("2024-06-03T01:00:00Z")));
        assert!(!w.contains(at("2024-06-03T03:00:00Z")));
    }
    // The tail of Monday night is Tuesday, which must be listed too.
    assert!(!mon_only.contains(at("2024-06-04T01:00:00Z")));
    assert!(mon_tue.contains(at("2024-06-04T01:00:00Z")));
    assert!(mon_tue.contains(at("2024-06-04T02:00:00.5Z")));
    assert!(!mon_tue.contains(at("2024-06-04T02:00:01Z")));
    // kured quirk: at exactly the end instant (02:00:00.999999999) the "not before end" branch
    // applies, whose range starts at today's 22:00, so that one nanosecond is outside.
    let end = at("2024-06-04T02:00:00.999999999Z");
    assert!(!mon_tue.contains(end));
    assert!(mon_tue.contains(end.checked_sub(SignedDuration::from_nanos(1)).unwrap()));
}

#[test]
fn the_local_date_decides_the_weekday() {
    // 2024-06-02 is a Sunday in UTC; 23:30 UTC is Monday 08:30 in Tokyo.
    let tokyo = window(&["mo"], "08:00", "09:00", "Asia/Tokyo");
    let utc = window(&["mo"], "08:00", "09:00", "UTC");
    let t = at("2024-06-02T23:30:00Z");
    assert!(tokyo.contains(t));
    assert!(!utc.contains(t));
    assert!(!tokyo.contains(at("2024-06-03T08:30:00Z")));
    assert!(utc.contains(at("2024-06-03T08:30:00Z")));
    assert!(tokyo.contains(at("2024-06-03T08:30:00+09:00[Asia/Tokyo]")));
}

#[test]
fn fractional_start_after_end_makes_a_window_overnight() {
    // kured compares the parsed times, fractions included, but builds the bounds without them.
    let w = window(&["mo", "tu"], "10:00:00.5", "10:00:00", "UTC");
    assert!(w.start() > w.end());
    assert!(w.contains(at("2024-06-03T10:00:00.7Z")));
    assert!(w.contains(at("2024-06-03T23:00:00Z")));
}

#[test]
fn go_date_places_gap_and_fold_times_like_go() {
    let cases = [
        // Berlin, spring: 02:00 CET jumps to 03:00 CEST; a gap time moves forward.
        (
            "Europe/Berlin",
            "2024-03-31T02:30",
            "2024-03-31T03:30+02:00",
        ),
        (
            "Europe/Berlin",
            "2024-03-31T02:00",
            "2024-03-31T03:00+02:00",
        ),
        // Berlin, autumn: 02:30 happens twice; Go takes the later (CET).
        (
            "Europe/Berlin",
            "2024-10-27T02:30",
            "2024-10-27T02:30+01:00",
        ),
        // New York, spring: 02:30 does not exist; Go lands on 01:30 EST.
        (
            "America/New_York",
            "2024-03-10T02:30",
            "2024-03-10T01:30-05:00",
        ),
        // New York, autumn: 01:30 happens twice; Go takes the earlier (EDT).
        (
            "America/New_York",
            "2024-11-03T01:30",
            "2024-11-03T01:30-04:00",
        ),
        // London sits at offset zero in winter; Go skips its adjustment then.
        (
            "Europe/London",
            "2024-03-31T01:30",
            "2024-03-31T02:30+01:00",
        ),
        (
            "Europe/London",
            "2024-10-27T01:30",
            "2024-10-27T01:30+00:00",
        ),
        ("Asia/Tokyo", "2024-06-03T09:00", "2024-06-03T09:00+09:00"),
    ];
    for (zone, wall, want) in cases {
        let tz = TimeZone::get(zone).unwrap();
        let dt: DateTime = wall.parse().unwrap();
        assert_eq!(go_date(&tz, dt), Some(at(want)), "{zone} {wall}");
    }
}

#[test]
fn dst_days_in_berlin() {
    let tz = "Europe/Berlin";
    // Spring: 02:30–04:00 starts at 03:30 CEST, as 02:30 does not exist.
    let w = window(&["su"], "02:30", "04:00", tz);
    assert!(!w.contains(at("2024-03-31T03:15+02:00")));
    assert!(w.contains(at("2024-03-31T03:30+02:00")));
    assert!(w.contains(at("2024-03-31T04:00+02:00")));
    assert!(!w.contains(at("2024-03-31T04:01+02:00")));
    // A window inside the gap shrinks to 03:00:00–03:00:00.999999999 CEST.
    let w = window(&["su"], "02:00", "03:00", tz);
    assert!(w.contains(at("2024-03-31T03:00:00.5+02:00")));
    assert!(!w.contains(at("2024-03-31T03:00:01+02:00")));
    assert!(!w.contains(at("2024-03-31T01:59+01:00")));
    // Autumn: 02:00 and 03:00 are both read as CET, so only the second 02:00–03:00 hour counts.
    let w = window(&["su"], "02:00", "03:00", tz);
    assert!(!w.contains(at("2024-10-27T02:30+02:00")));
    assert!(w.contains(at("2024-10-27T02:30+01:00")));
    assert!(w.contains(at("2024-10-27T03:00+01:00")));
    // The night into the spring day: Sunday's end is 06:00 CEST and its start reaches back 24 real
    // hours from Sunday 22:00 CEST, to Saturday 21:00 CET.
    let w = window(&["sa", "su"], "22:00", "06:00", tz);
    assert!(w.contains(at("2024-03-30T22:00+01:00")));
    assert!(w.contains(at("2024-03-31T01:30+01:00")));
    assert!(w.contains(at("2024-03-31T05:59+02:00")));
    assert!(!w.contains(at("2024-03-31T06:01+02:00")));
}

#[test]
fn dst_days_in_new_york() {
    let tz = "America/New_York";
    // Spring: the gap start 02:30 is placed at 01:30 EST, so the window opens an hour early.
    let w = window(&["su"], "02:30", "04:00", tz);
    assert!(!w.contains(at("2024-03-10T01:29-05:00")));
    assert!(w.contains(at("2024-03-10T01:30-05:00")));
    assert!(w.contains(at("2024-03-10T04:00-04:00")));
    // Autumn: 01:15–01:45 is the first (EDT) occurrence only.
    let w = window(&["su"], "01:15", "01:45", tz);
    assert!(w.contains(at("2024-11-03T01:30-04:00")));
    assert!(!w.contains(at("2024-11-03T01:30-05:00")));
}

/// `next_opening` agrees with `contains`: the window is closed at every sampled instant before the
/// opening it reports, and open at the opening.
fn check_next_opening(w: &TimeWindow, from: Timestamp, to: Timestamp, step: SignedDuration) {
    let mut t = from;
    while t < to {
        match w.next_opening(t) {
            Some(open) => {
                assert!(open >= t);
                assert!(w.contains(open), "{t}: opening {open} is closed");
                // Probing two hours ahead of every `t` covers the whole range, as `t` steps less.
                let horizon = open.min(t.checked_add(SignedDuration::from_hours(2)).unwrap());
                let mut probe = t;
                while probe < horizon {
                    assert!(!w.contains(probe), "{t}: open at {probe} before {open}");
                    probe = probe.checked_add(SignedDuration::from_secs(97)).unwrap();
                }
                let secs = open.duration_since(t).as_secs_f64();
                let check = w.next_check(t).as_secs_f64();
                assert_eq!(check, secs.clamp(1.0, 60.0), "{t}");
            }
            None => panic!("{t}: no opening"),
        }
        t = t.checked_add(step).unwrap();
    }
}

#[test]
fn next_opening_is_consistent_across_dst_changes() {
    let step = SignedDuration::from_secs(61 * 37);
    for tz in ["Europe/Berlin", "America/New_York", "UTC", "Asia/Tokyo"] {
        for (days, start, end) in [
            (&["su"][..], "02:30", "04:00"),
            (&["sa", "su"][..], "22:00", "02:30"),
            (&["mo"][..], "22:00", "02:00"),
            (&["0", "3", "6"][..], "9am", "5pm"),
            (&["fr"][..], "23:59:59", "00:00"),
        ] {
            let w = window(days, start, end, tz);
            check_next_opening(&w, at("2024-03-27T00:00Z"), at("2024-04-04T00:00Z"), step);
            check_next_opening(&w, at("2024-10-23T00:00Z"), at("2024-11-06T00:00Z"), step);
        }
    }
}

#[test]
fn next_check_waits_until_the_opening_at_most_a_minute() {
    let w = window(&["mo"], "09:00", "17:00", "UTC");
    let secs = Duration::from_secs;
    assert_eq!(w.next_check(at("2024-06-03T08:59:30Z")), secs(30));
    assert_eq!(w.next_check(at("2024-06-03T08:59:59.7Z")), secs(1));
    assert_eq!(w.next_check(at("2024-06-03T06:00:00Z")), secs(60));
    assert_eq!(w.next_check(at("2024-06-03T12:00:00Z")), secs(1));
    assert_eq!(
        w.next_opening(at("2024-06-03T17:30:00Z")),
        Some(at("2024-06-10T09:00:00Z"))
    );
    // Opening at a midnight: the tail of an overnight window on a newly listed day.
    let w = window(&["tu"], "22:00", "02:00", "UTC");
    assert_eq!(
        w.next_opening(at("2024-06-03T23:00:00Z")),
        Some(at("2024-06-04T00:00:00Z"))
    );
    assert_eq!(w.next_check(at("2024-06-03T23:59:15Z")), secs(45));
}

/// A tiny matcher for the RE2 subset `TIME_OF_DAY_PATTERN` uses (groups, `|`, `?`, `+`, `*`,
/// classes with ranges, `^`, `$`), by tracking the set of positions reachable in the input.
mod re {
    #[derive(Debug)]
    enum Node {
        Alt(Vec<Vec<(Node, Rep)>>),
        Byte(u8),
        Class(Vec<(u8, u8)>),
        Start,
        End,
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Rep {
        One,
        Opt,
        Plus,
        Star,
    }

    struct Parser<'a> {
        p: &'a [u8],
        i: usize,
    }

    impl Parser<'_> {
        fn peek(&self) -> Option<u8> {
            self.p.get(self.i).copied()
        }

        fn next(&mut self) -> u8 {
            let c = self.p[self.i];
            self.i += 1;
            c
        }

        fn alt(&mut self) -> Node {
            let mut alts = vec![self.seq()];
            while self.peek() == Some(b'|') {
                self.i += 1;
                alts.push(self.seq());
            }
            Node::Alt(alts)
        }

        fn seq(&mut self) -> Vec<(Node, Rep)> {
            let mut seq = Vec::new();
            while let Some(c) = self.peek() {
                let atom = match c {
                    b'|' | b')' => break,
                    b'(' => {
                        self.i += 1;
                        let n = self.alt();
                        assert_eq!(self.next(), b')');
                        n
                    }
                    b'[' => {
                        self.i += 1;
                        assert_ne!(self.peek(), Some(b'^'), "negated classes are not supported");
                        let mut ranges = Vec::new();
                        while self.peek() != Some(b']') {
                            let lo = self.next();
                            if self.peek() == Some(b'-') && self.p.get(self.i + 1) != Some(&b']') {
                                self.i += 1;
                                ranges.push((lo, self.next()));
                            } else {
                                ranges.push((lo, lo));
                            }
                        }
                        self.i += 1;
                        Node::Class(ranges)
                    }
                    b'^' => {
                        self.i += 1;
                        Node::Start
                    }
                    b'$' => {
                        self.i += 1;
                        Node::End
                    }
                    b'\\' => {
                        self.i += 1;
                        Node::Byte(self.next())
                    }
                    b'.' | b'{' => panic!("unsupported regex syntax at {}", self.i),
                    _ => {
                        self.i += 1;
                        Node::Byte(c)
                    }
                };
                let rep = match self.peek() {
                    Some(b'?') => Rep::Opt,
                    Some(b'+') => Rep::Plus,
                    Some(b'*') => Rep::Star,
                    _ => Rep::One,
                };
                if rep != Rep::One {
                    self.i += 1;
                }
                seq.push((atom, rep));
            }
            seq
        }
    }

    /// Bit `i` set: position `i` of the input is reachable. Inputs are shorter than 64 bytes.
    type Set = u64;

    fn each(mut set: Set) -> impl Iterator<Item = usize> {
        std::iter::from_fn(move || {
            (set != 0).then(|| {
                let i = set.trailing_zeros() as usize;
                set &= set - 1;
                i
            })
        })
    }

    fn step(node: &Node, s: &[u8], from: Set) -> Set {
        let advance = |ok: &dyn Fn(u8) -> bool| {
            each(from)
                .filter(|&i| s.get(i).is_some_and(|&c| ok(c)))
                .fold(0, |acc, i| acc | 1 << (i + 1))
        };
        match node {
            Node::Byte(b) => advance(&|c| c == *b),
            Node::Class(r) => advance(&|c| r.iter().any(|(lo, hi)| (*lo..=*hi).contains(&c))),
            Node::Start => from & 1,
            Node::End => from & (1 << s.len()),
            Node::Alt(alts) => alts.iter().fold(0, |acc, seq| {
                acc | seq
                    .iter()
                    .fold(from, |cur, (node, rep)| repeat(node, *rep, s, cur))
            }),
        }
    }

    fn repeat(node: &Node, rep: Rep, s: &[u8], from: Set) -> Set {
        match rep {
            Rep::One => step(node, s, from),
            Rep::Opt => from | step(node, s, from),
            Rep::Plus | Rep::Star => {
                let mut reached = if rep == Rep::Star { from } else { 0 };
                let mut frontier = step(node, s, from);
                while frontier & !reached != 0 {
                    reached |= frontier;
                    frontier = step(node, s, frontier);
                }
                reached
            }
        }
    }

    pub struct Regex(Node);

    impl Regex {
        pub fn new(pattern: &str) -> Regex {
            let mut parser = Parser {
                p: pattern.as_bytes(),
                i: 0,
            };
            let node = parser.alt();
            assert_eq!(parser.i, pattern.len(), "unparsed regex tail");
            Regex(node)
        }

        /// RE2's (and CEL `matches`') unanchored search.
        pub fn is_match(&self, s: &str) -> bool {
            assert!(s.len() < 63);
            let starts = (1u64 << (s.len() + 1)) - 1;
            step(&self.0, s.as_bytes(), starts) != 0
        }
    }

    fn is_match(pattern: &str, s: &str) -> bool {
        Regex::new(pattern).is_match(s)
    }

    #[test]
    fn the_matcher_itself() {
        assert!(is_match("^a(b|cd)+e?$", "abcdb"));
        assert!(!is_match("^a(b|cd)+e?$", "a"));
        assert!(is_match("b", "abc"));
        assert!(!is_match("^b", "abc"));
        assert!(is_match("^[0-9a-f]*$", ""));
        assert!(is_match("^x[.,]y$", "x,y"));
        assert!(!is_match("^x[.,]y$", "x-y"));
        assert!(is_match("^(0?[0-9]|1[0-2])(am|pm)$", "09pm"));
    }
}

#[test]
fn parser_agrees_with_the_crd_pattern() {
    let mut hours: Vec<String> = vec![String::new(), "a".into(), " 9".into()];
    hours.extend((0..10).map(|h| h.to_string()));
    hours.extend((0..=30).chain([59, 60, 99]).map(|h| format!("{h:02}")));
    hours.extend(["000", "009", "012", "123", "240"].map(String::from));
    let numbers = ["", "0", "7", "00", "05", "59", "60", "99", "000", "5a"];
    let fractions = [".", ".5", ",5", ".1234567891", ".x", ".5.5", ","];
    let suffixes = [
        "", "am", "pm", "AM", "PM", "Am", "a", "p", "m", "pmx", " pm", "am ",
    ];
    let mut tails: Vec<String> = vec![String::new()];
    for m in numbers {
        tails.push(format!(":{m}"));
        for s in numbers {
            tails.push(format!(":{m}:{s}"));
        }
        for s in ["7", "00", "59", "60"] {
            for f in fractions {
                tails.push(format!(":{m}:{s}{f}"));
            }
        }
    }
    let pattern = re::Regex::new(TIME_OF_DAY_PATTERN);
    let (mut total, mut accepted) = (0, 0);
    for h in &hours {
        for tail in &tails {
            for suffix in suffixes {
                let s = format!("{h}{tail}{suffix}");
                let by_pattern = pattern.is_match(&s);
                let by_parser = parse_clock(&s).is_ok();
                assert_eq!(
                    by_parser, by_pattern,
                    "{s:?}: parser {by_parser}, pattern {by_pattern}"
                );
                total += 1;
                accepted += usize::from(by_parser);
            }
        }
    }
    assert!(
        total > 100_000 && accepted > 1_000,
        "{total} strings, {accepted} accepted"
    );
}
