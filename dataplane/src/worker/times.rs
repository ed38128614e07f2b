//! The reorder stage's hold times and path-order detection times: the stage hands them over
//! as plain values, the worker records them into its histograms and publishes copies for the
//! control side every 100 ms (never blocking: a publication is skipped while a reader holds
//! the lock).

use std::sync::{Arc, Mutex};

use hdrhistogram::Histogram;

use crate::reorder::DownlinkStage;

/// A published histogram.
pub(super) type Published = Arc<Mutex<Histogram<u64>>>;

/// How often the histograms are published.
const PUBLISH_NS: u64 = 100_000_000;

/// One worker's reorder histograms.
pub(super) struct StageTimes {
    hold: Histogram<u64>,
    detect: Histogram<u64>,
    hold_published: Published,
    detect_published: Published,
    scratch: (Vec<u64>, Vec<u64>),
    last_publish: u64,
}

impl StageTimes {
    pub(super) fn new() -> StageTimes {
        // 1 ns to 60 s, two significant digits.
        let h = Histogram::new_with_bounds(1, 60_000_000_000, 2).expect("valid histogram bounds");
        StageTimes {
            hold_published: Arc::new(Mutex::new(h.clone())),
            detect_published: Arc::new(Mutex::new(h.clone())),
            detect: h.clone(),
            hold: h,
            scratch: (Vec::with_capacity(1024), Vec::with_capacity(64)),
            last_publish: 0,
        }
    }

    /// Where the hold times are published.
    pub(super) fn hold(&self) -> Published {
        self.hold_published.clone()
    }

    /// Where the detection times are published.
    pub(super) fn detect(&self) -> Published {
        self.detect_published.clone()
    }

    /// Records what `stage` has to hand over, and publishes when it is time (`now`).
    pub(super) fn collect(&mut self, stage: &mut dyn DownlinkStage, now: u64) {
        let (hold, detect) = &mut self.scratch;
        stage.take_times(hold, detect);
        for t in hold.drain(..) {
            let _ = self.hold.record(t.max(1));
        }
        for t in detect.drain(..) {
            let _ = self.detect.record(t.max(1));
        }
        if now.saturating_sub(self.last_publish) >= PUBLISH_NS {
            self.last_publish = now;
            if let Ok(mut h) = self.hold_published.try_lock() {
                h.clone_from(&self.hold);
            }
            if let Ok(mut h) = self.detect_published.try_lock() {
                h.clone_from(&self.detect);
            }
        }
    }
}
