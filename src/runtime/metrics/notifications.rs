//! Per notification target (`src/runtime/notify.rs`): what became of its notifications, the
//! length of its queue, and whether it is failing.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct TargetLabels {
    pub target: String,
}

/// What became of a notification sent to a target (the index of its counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    Delivered = 0,
    /// Refused for good (a 4xx): not sent again.
    Failed,
    /// An attempt that will be made again.
    Retried,
    /// Dropped from a full queue, unsent.
    Dropped,
}

#[derive(Default)]
pub struct NotificationMetrics {
    counters: [Family<TargetLabels, Counter>; 4],
    queue: Family<TargetLabels, Gauge>,
    failing: Family<TargetLabels, Gauge>,
}

fn key(target: &str) -> TargetLabels {
    TargetLabels {
        target: target.to_string(),
    }
}

impl NotificationMetrics {
    /// A target's series, at zero until something happens.
    pub fn target(&self, target: &str) {
        for family in &self.counters {
            family.get_or_create(&key(target)).inc_by(0);
        }
        self.queue.get_or_create(&key(target)).set(0);
        self.failing.get_or_create(&key(target)).set(0);
    }

    pub fn count(&self, target: &str, what: Delivery) {
        self.counters[what as usize]
            .get_or_create(&key(target))
            .inc();
    }

    /// A counter's value (for tests and logs).
    pub fn counted(&self, target: &str, what: Delivery) -> u64 {
        self.counters[what as usize]
            .get_or_create(&key(target))
            .get()
    }

    pub fn queue(&self, target: &str, length: usize) {
        let length = i64::try_from(length).unwrap_or(i64::MAX);
        self.queue.get_or_create(&key(target)).set(length);
    }

    pub fn failing(&self, target: &str, failing: bool) {
        self.failing
            .get_or_create(&key(target))
            .set(i64::from(failing));
    }

    pub(super) fn register(&self, registry: &mut Registry) {
        let [delivered, failed, retried, dropped] = self.counters.clone();
        registry.register(
            "notifications_delivered",
            "Notifications a target answered with 2xx",
            delivered,
        );
        registry.register(
            "notifications_failed",
            "Notifications a target refused for good (4xx other than 408 and 429): not sent again",
            failed,
        );
        registry.register(
            "notifications_retried",
            "Failed delivery attempts that are made again (no connection, timeout, 408, 429, 5xx)",
            retried,
        );
        registry.register(
            "notifications_dropped",
            "Notifications dropped unsent, the oldest first, from a target's full queue",
            dropped,
        );
        registry.register(
            "notification_queue_length",
            "Notifications waiting for a target, the one being sent included",
            self.queue.clone(),
        );
        registry.register(
            "notification_target_failing",
            "1 while a target's oldest waiting notification has waited longer than \
             --notify-failing-after",
            self.failing.clone(),
        );
    }
}
