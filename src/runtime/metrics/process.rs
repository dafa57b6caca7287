//! The standard Prometheus process metrics (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, ...), read from `/proc` at each scrape. The parsing is pure;
//! [`ProcessCollector`] reads the files. Where a file cannot be read (not Linux), its metrics are
//! left out.
//!
//! Not a crate's: `prometheus-client`, slipway's metrics library, has no process collector, and
//! the `prometheus` crate's belongs to that other library and its registry: a second metrics
//! library for six gauges.

use std::fmt::Error as FmtError;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

/// Clock ticks per second of `/proc/<pid>/stat`'s times: USER_HZ, which Linux fixes at 100 for
/// userspace on every architecture it runs Kubernetes on (Prometheus's Go client assumes the same).
const TICKS_PER_SECOND: f64 = 100.0;

/// What `/proc/self/stat` says about the process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stat {
    /// User and system CPU time, in seconds.
    pub cpu_seconds: f64,
    /// When the process started, in seconds after the boot.
    pub start_after_boot_seconds: f64,
    pub virtual_memory_bytes: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (2nd field) may hold spaces and parentheses: the
/// fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let after_name = &text[text.rfind(')')? + 1..];
    // Fields from the 3rd (state) on; field n (1-based, proc(5)) is at index n - 3.
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    let ticks = |n: usize| field(n).map(|t| t as f64 / TICKS_PER_SECOND);
    Some(Stat {
        cpu_seconds: ticks(14)? + ticks(15)?,
        start_after_boot_seconds: ticks(22)?,
        virtual_memory_bytes: field(23)?,
    })
}

/// The boot time (`btime`, Unix seconds) from `/proc/stat`.
pub fn parse_boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The resident set size in bytes, from `/proc/<pid>/status` (`VmRSS: <n> kB`).
pub fn parse_resident_bytes(text: &str) -> Option<u64> {
    let line = text.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let mut words = line.split_whitespace();
    let kib: u64 = words.next()?.parse().ok()?;
    (words.next() == Some("kB")).then_some(kib * 1024)
}

/// The soft limit on open files from `/proc/<pid>/limits`; `None` when unlimited.
pub fn parse_max_fds(text: &str) -> Option<u64> {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?;
    line.split_whitespace().next()?.parse().ok()
}

/// One scrape's view of the process; a metric is `None` when its source could not be read.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sample {
    pub cpu_seconds: Option<f64>,
    pub resident_memory_bytes: Option<u64>,
    pub virtual_memory_bytes: Option<u64>,
    pub start_time_seconds: Option<f64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
}

/// The files a [`Sample`] is made of, as read (`None`: not readable).
#[derive(Debug, Clone, Default)]
pub struct Sources {
    pub stat: Option<String>,
    pub status: Option<String>,
    pub limits: Option<String>,
    pub system_stat: Option<String>,
    pub open_fds: Option<u64>,
}

impl Sample {
    pub fn from_sources(s: &Sources) -> Sample {
        let stat = s.stat.as_deref().and_then(parse_stat);
        let boot = s.system_stat.as_deref().and_then(parse_boot_time);
        Sample {
            cpu_seconds: stat.map(|st| st.cpu_seconds),
            resident_memory_bytes: s.status.as_deref().and_then(parse_resident_bytes),
            virtual_memory_bytes: stat.map(|st| st.virtual_memory_bytes),
            start_time_seconds: stat
                .zip(boot)
                .map(|(st, boot)| boot as f64 + st.start_after_boot_seconds),
            open_fds: s.open_fds,
            max_fds: s.limits.as_deref().and_then(parse_max_fds),
        }
    }

    /// Encodes the metrics this sample has.
    pub fn encode(&self, encoder: &mut DescriptorEncoder) -> Result<(), FmtError> {
        if let Some(v) = self.cpu_seconds {
            let c = ConstCounter::new(v);
            let help = "Total user and system CPU time spent in seconds.";
            let m = encoder.encode_descriptor(
                "process_cpu",
                help,
                Some(&Unit::Seconds),
                c.metric_type(),
            )?;
            c.encode(m)?;
        }
        let gauges = [
            (
                "process_resident_memory",
                "Resident memory size in bytes.",
                Some(Unit::Bytes),
                self.resident_memory_bytes.map(|v| v as f64),
            ),
            (
                "process_virtual_memory",
                "Virtual memory size in bytes.",
                Some(Unit::Bytes),
                self.virtual_memory_bytes.map(|v| v as f64),
            ),
            (
                "process_start_time",
                "Start time of the process since unix epoch in seconds.",
                Some(Unit::Seconds),
                self.start_time_seconds,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                None,
                self.open_fds.map(|v| v as f64),
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                None,
                self.max_fds.map(|v| v as f64),
            ),
        ];
        for (name, help, unit, value) in gauges {
            let Some(v) = value else { continue };
            let g = ConstGauge::new(v);
            let m = encoder.encode_descriptor(name, help, unit.as_ref(), g.metric_type())?;
            g.encode(m)?;
        }
        Ok(())
    }
}

/// Reads `/proc` at each scrape.
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl ProcessCollector {
    fn read() -> Sources {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        Sources {
            stat: read("/proc/self/stat"),
            status: read("/proc/self/status"),
            limits: read("/proc/self/limits"),
            system_stat: read("/proc/stat"),
            open_fds: std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|entries| entries.count() as u64),
        }
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), FmtError> {
        Sample::from_sources(&ProcessCollector::read()).encode(&mut encoder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A command name with a space and a parenthesis, as a process may set it.
    const STAT: &str = "4242 (slip way) x) S 1 4242 4242 0 -1 4194560 1530 0 0 0 250 125 0 0 20 0 9 0 \
                        123456 73400320 2345 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";

    #[test]
    fn stat_gives_cpu_start_and_virtual_memory() {
        assert_eq!(
            parse_stat(STAT),
            Some(Stat {
                cpu_seconds: 3.75,
                start_after_boot_seconds: 1234.56,
                virtual_memory_bytes: 73_400_320,
            })
        );
        assert_eq!(parse_stat("4242 (short) S 1 2"), None);
        assert_eq!(parse_stat("no name"), None);
    }

    #[test]
    fn status_limits_and_boot_time_parse() {
        let status = "Name:\tslipway\nVmSize:\t  71680 kB\nVmRSS:\t   9380 kB\nThreads:\t9\n";
        assert_eq!(parse_resident_bytes(status), Some(9380 * 1024));
        assert_eq!(parse_resident_bytes("Name:\tx\n"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             127368               127368               processes \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(parse_max_fds(limits), Some(1024));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(parse_max_fds(unlimited), None);
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n"),
            Some(1_700_000_000)
        );
        assert_eq!(parse_boot_time("cpu 1\n"), None);
    }

    #[test]
    fn a_sample_encodes_the_standard_names_and_leaves_out_what_it_lacks() {
        let sources = Sources {
            stat: Some(STAT.into()),
            status: Some("VmRSS:\t   9380 kB\n".into()),
            limits: Some("Max open files            1024     4096     files\n".into()),
            system_stat: Some("btime 1700000000\n".into()),
            open_fds: Some(12),
        };
        let sample = Sample::from_sources(&sources);
        assert_eq!(sample.start_time_seconds, Some(1_700_001_234.56));
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(Fixed(sample)));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "# TYPE process_cpu_seconds counter",
            "process_cpu_seconds_total 3.75",
            "process_resident_memory_bytes 9605120.0",
            "process_virtual_memory_bytes 73400320.0",
            "process_start_time_seconds 1700001234.56",
            "process_open_fds 12.0",
            "process_max_fds 1024.0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }

        let partial = Sample::from_sources(&Sources {
            status: Some("VmRSS:\t 1 kB\n".into()),
            ..Sources::default()
        });
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(Fixed(partial)));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("process_resident_memory_bytes 1024.0"),
            "{text}"
        );
        assert!(!text.contains("process_cpu"), "{text}");
        assert!(!text.contains("process_start_time"), "{text}");
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn this_process_is_read_from_proc() {
        let sample = Sample::from_sources(&ProcessCollector::read());
        assert!(sample.cpu_seconds.is_some(), "{sample:?}");
        assert!(sample.resident_memory_bytes.is_some_and(|b| b > 0));
        assert!(sample.virtual_memory_bytes.is_some_and(|b| b > 0));
        assert!(sample.open_fds.is_some_and(|n| n > 0));
        assert!(sample.start_time_seconds.is_some_and(|t| t > 1e9));
    }

    #[derive(Debug)]
    struct Fixed(Sample);

    impl Collector for Fixed {
        fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), FmtError> {
            self.0.encode(&mut encoder)
        }
    }
}
