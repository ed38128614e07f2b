//! DCQCN (Zhu et al., SIGCOMM 2015), the congestion control of RoCE NICs, as NVIDIA/Mellanox
//! firmware runs it and the HPCC/ConWeave ns-3 code models it: a notification point at the
//! receiver that answers CE-marked packets with CNPs, and a reaction point at the sender that
//! cuts its rate on CNPs and recovers on a timer and a byte counter.
//!
//! Reaction point, per QP (rates in bit/s, times in ns of the caller's clock):
//!
//! - Nothing runs before the first CNP: the QP sends at line rate with alpha = 1.
//! - **Alpha** is updated every `alpha_interval`: `alpha = (1 - g) alpha + g` if a CNP came since
//!   the last update, else `alpha = (1 - g) alpha`.
//! - **Decrease**: every `decrease_interval`, if a CNP came since the last check, the target
//!   rate takes the current rate (always with `clamp_target`, else only if the rate had been
//!   raised by the timer since the last cut), the current rate is cut to `rate (1 - alpha/2)`
//!   (at least `min_rate`), and both increase stages start again.
//! - **Increase**: the timer (every `increase_timer` after a cut) and the byte counter (every
//!   `byte_counter` bytes sent) each raise an event and then count a stage (the stages since
//!   the last cut). With `F = fast_recovery_stages`, an event is fast recovery while both
//!   stages are below F (`rate = (rate + target) / 2`), hyper increase once both exceed F
//!   (`target += hai_rate`), else additive increase (`target += ai_rate`), each followed by
//!   `rate = (rate + target) / 2`; the target never exceeds the line rate.
//!
//! Notification point, per QP: a CNP for a CE-marked packet at most once per `cnp_interval`.
//!
//! Three profiles, the timers and the CNP interval go together (alpha only rises to match
//! persistent marking when most alpha updates see a CNP):
//!
//! - [`DcqcnConfig::conweave`]: the ConWeave/HPCC ns-3 values (`run.py`, `rdma-hw.cc`): 1 us
//!   alpha updates, 4 us decrease checks, g = 1/256, 300 us timer, F = 1, no byte counter, AI
//!   40 Mbit/s and HAI 100 Mbit/s at 100 Gbit/s (scaled with the line rate), minimum 100
//!   Mbit/s. There the receiver flags every ACK of a CE-marked packet and the sender folds the
//!   flags into its 1 us alpha update; a CNP per marked packet at most once per 1 us does the
//!   same with separate CNPs.
//! - [`DcqcnConfig::connectx`]: ConnectX firmware defaults (`rpg_*`, `dce_tcp_*`): g = 5/1024,
//!   1 us alpha updates, 4 us decrease period, 300 us timer, byte counter 32767 x 64 bytes,
//!   AI 5 and HAI 50 Mbit/s, minimum 1 Mbit/s, CNPs at most every 4 us
//!   (`min_time_between_cnps`).
//! - [`DcqcnConfig::paper`]: the notification point of the DCQCN paper, a CNP at most every
//!   50 us, with the timers HPCC's `dcqcn_paper` setting pairs with it (alpha and decrease every
//!   50 us, increase timer 55 us); the other values as `conweave`.

/// DCQCN parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DcqcnConfig {
    /// The NIC's line rate: where a QP starts and what the target never exceeds.
    pub line_rate_bps: u64,
    /// EWMA gain of alpha.
    pub g: f64,
    /// Period of alpha updates (ns).
    pub alpha_interval_ns: u64,
    /// Period of the decrease check (ns): at most one cut per period.
    pub decrease_interval_ns: u64,
    /// Rate-increase timer (ns).
    pub increase_timer_ns: u64,
    /// Bytes per byte-counter stage (`None`: the timer alone).
    pub byte_counter: Option<u64>,
    /// Stages of fast recovery before additive increase (F).
    pub fast_recovery_stages: u32,
    /// Additive increase step.
    pub ai_rate_bps: u64,
    /// Hyper increase step.
    pub hai_rate_bps: u64,
    /// Lowest rate a cut goes to.
    pub min_rate_bps: u64,
    /// Every cut sets the target to the current rate (else only after a timer increase).
    pub clamp_target: bool,
    /// Notification point: shortest time between two CNPs of one QP (ns).
    pub cnp_interval_ns: u64,
}

impl DcqcnConfig {
    /// The ConWeave/HPCC ns-3 profile at `line_rate_bps` (see the module docs).
    pub fn conweave(line_rate_bps: u64) -> DcqcnConfig {
        DcqcnConfig {
            line_rate_bps,
            g: 1.0 / 256.0,
            alpha_interval_ns: 1_000,
            decrease_interval_ns: 4_000,
            increase_timer_ns: 300_000,
            byte_counter: None,
            fast_recovery_stages: 1,
            ai_rate_bps: line_rate_bps / 2500,
            hai_rate_bps: line_rate_bps / 1000,
            min_rate_bps: 100_000_000.min(line_rate_bps),
            clamp_target: false,
            cnp_interval_ns: 1_000,
        }
    }

    /// The DCQCN paper's 50 us notification point with the timers that go with it (see the
    /// module docs).
    pub fn paper(line_rate_bps: u64) -> DcqcnConfig {
        DcqcnConfig {
            alpha_interval_ns: 50_000,
            decrease_interval_ns: 50_000,
            increase_timer_ns: 55_000,
            cnp_interval_ns: 50_000,
            ..DcqcnConfig::conweave(line_rate_bps)
        }
    }

    /// ConnectX firmware defaults at `line_rate_bps` (see the module docs).
    pub fn connectx(line_rate_bps: u64) -> DcqcnConfig {
        DcqcnConfig {
            line_rate_bps,
            g: 5.0 / 1024.0,
            alpha_interval_ns: 1_000,
            decrease_interval_ns: 4_000,
            increase_timer_ns: 300_000,
            byte_counter: Some(32_767 * 64),
            fast_recovery_stages: 1,
            ai_rate_bps: 5_000_000,
            hai_rate_bps: 50_000_000,
            min_rate_bps: 1_000_000.min(line_rate_bps),
            clamp_target: false,
            cnp_interval_ns: 4_000,
        }
    }

    /// A profile by name: `conweave`, `connectx` or `paper`.
    ///
    /// # Errors
    /// An unknown name.
    pub fn named(name: &str, line_rate_bps: u64) -> Result<DcqcnConfig, String> {
        match name {
            "conweave" => Ok(DcqcnConfig::conweave(line_rate_bps)),
            "connectx" => Ok(DcqcnConfig::connectx(line_rate_bps)),
            "paper" => Ok(DcqcnConfig::paper(line_rate_bps)),
            other => Err(format!(
                "DCQCN profile '{other}': use conweave, connectx or paper"
            )),
        }
    }
}

/// What a reaction point counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RpStats {
    /// CNPs received.
    pub cnps: u64,
    /// Rate cuts.
    pub cuts: u64,
    /// Increase events (timer and byte counter).
    pub increases: u64,
}

/// The sender side of one QP.
#[derive(Debug, Clone)]
pub struct ReactionPoint {
    cfg: DcqcnConfig,
    rate: f64,
    target: f64,
    alpha: f64,
    /// A CNP came since the last alpha update / decrease check.
    cnp_for_alpha: bool,
    cnp_for_cut: bool,
    /// The first CNP came: the timers run.
    active: bool,
    next_alpha: u64,
    next_check: u64,
    next_increase: u64,
    timer_stage: u32,
    byte_stage: u32,
    bytes: u64,
    /// Counters.
    pub stats: RpStats,
}

impl ReactionPoint {
    /// A QP at line rate.
    pub fn new(cfg: DcqcnConfig) -> ReactionPoint {
        let line = cfg.line_rate_bps as f64;
        ReactionPoint {
            cfg,
            rate: line,
            target: line,
            alpha: 1.0,
            cnp_for_alpha: false,
            cnp_for_cut: false,
            active: false,
            next_alpha: 0,
            next_check: 0,
            next_increase: u64::MAX,
            timer_stage: 0,
            byte_stage: 0,
            bytes: 0,
            stats: RpStats::default(),
        }
    }

    /// The rate the QP may send at now.
    pub fn rate_bps(&self) -> u64 {
        self.rate as u64
    }

    /// Alpha now.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// A CNP for this QP arrived at `now`.
    pub fn on_cnp(&mut self, now: u64) {
        self.stats.cnps += 1;
        self.cnp_for_cut = true;
        if !self.active {
            // The first CNP starts the timers, alpha at its initial 1; the cut comes at the
            // first decrease check.
            self.active = true;
            self.alpha = 1.0;
            self.next_alpha = now + self.cfg.alpha_interval_ns;
            self.next_check = now + self.cfg.decrease_interval_ns;
        } else {
            self.cnp_for_alpha = true;
        }
    }

    /// `len` bytes went out at `now` (the byte counter).
    pub fn on_sent(&mut self, len: usize, now: u64) {
        let Some(b) = self.cfg.byte_counter.map(|b| b.max(1)) else {
            return;
        };
        if !self.active {
            return;
        }
        self.bytes += len as u64;
        while self.bytes >= b {
            self.bytes -= b;
            self.increase(now);
            self.byte_stage += 1;
        }
    }

    /// Runs the timers due by `now`, in time order.
    pub fn poll(&mut self, now: u64) {
        if !self.active {
            return;
        }
        loop {
            let next = self.next_alpha.min(self.next_check).min(self.next_increase);
            if next > now {
                break;
            }
            // Due at the same time: alpha first, then the increase, then the decrease check,
            // as ns-3 runs them (the check is scheduled after the alpha update, and the
            // increase timer, scheduled at the cut, before the check of the same instant).
            if next == self.next_alpha {
                self.alpha = if self.cnp_for_alpha {
                    (1.0 - self.cfg.g) * self.alpha + self.cfg.g
                } else {
                    (1.0 - self.cfg.g) * self.alpha
                };
                self.cnp_for_alpha = false;
                self.next_alpha += self.cfg.alpha_interval_ns.max(1);
            } else if next == self.next_increase {
                self.next_increase = next + self.cfg.increase_timer_ns.max(1);
                self.increase(next);
                self.timer_stage += 1;
            } else {
                self.next_check += self.cfg.decrease_interval_ns.max(1);
                if self.cnp_for_cut {
                    self.cut(next);
                }
            }
        }
    }

    fn cut(&mut self, at: u64) {
        self.cnp_for_cut = false;
        self.stats.cuts += 1;
        if self.cfg.clamp_target || self.timer_stage > 0 || self.byte_stage > 0 {
            self.target = self.rate;
        }
        self.rate = (self.rate * (1.0 - self.alpha / 2.0)).max(self.cfg.min_rate_bps as f64);
        self.timer_stage = 0;
        self.byte_stage = 0;
        self.bytes = 0;
        self.next_increase = at + self.cfg.increase_timer_ns.max(1);
    }

    fn increase(&mut self, _at: u64) {
        self.stats.increases += 1;
        let f = self.cfg.fast_recovery_stages;
        let line = self.cfg.line_rate_bps as f64;
        let (t, b) = (self.timer_stage, self.byte_stage);
        let counted = if self.cfg.byte_counter.is_some() {
            (t.max(b), t.min(b))
        } else {
            (t, t)
        };
        match counted {
            (hi, _) if hi < f => {}
            (_, lo) if lo > f => self.target += self.cfg.hai_rate_bps as f64,
            _ => self.target += self.cfg.ai_rate_bps as f64,
        }
        self.target = self.target.min(line);
        self.rate = ((self.rate + self.target) / 2.0).min(line);
    }
}

/// The receiver side of one QP: whether a CE-marked packet gets a CNP.
#[derive(Debug, Clone, Default)]
pub struct NotificationPoint {
    interval_ns: u64,
    last: Option<u64>,
    /// CE-marked packets seen.
    pub ce_seen: u64,
    /// CNPs sent.
    pub cnps_sent: u64,
}

impl NotificationPoint {
    /// At most one CNP per `interval_ns`.
    pub fn new(interval_ns: u64) -> NotificationPoint {
        NotificationPoint {
            interval_ns,
            ..NotificationPoint::default()
        }
    }

    /// A CE-marked packet arrived at `now`: true when a CNP goes back for it.
    pub fn on_ce(&mut self, now: u64) -> bool {
        self.ce_seen += 1;
        if self
            .last
            .is_some_and(|t| now.saturating_sub(t) < self.interval_ns)
        {
            return false;
        }
        self.last = Some(now);
        self.cnps_sent += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G100: u64 = 100_000_000_000;

    #[test]
    fn nothing_changes_before_the_first_cnp() {
        // connectx: it has a byte counter, which must not count before a CNP either.
        let mut rp = ReactionPoint::new(DcqcnConfig::connectx(G100));
        rp.poll(10_000_000);
        rp.on_sent(10_000_000, 10_000_000);
        assert_eq!(rp.rate_bps(), G100);
        assert_eq!(rp.stats, RpStats::default());
    }

    #[test]
    fn a_cnp_cuts_by_alpha_over_two_at_the_next_check_and_alpha_decays_without_cnps() {
        let cfg = DcqcnConfig::conweave(G100);
        let mut rp = ReactionPoint::new(cfg);
        rp.on_cnp(0);
        rp.poll(3_999);
        assert_eq!(rp.rate_bps(), G100, "the cut waits for the decrease check");
        rp.poll(4_000);
        // Alpha decayed for four updates (no CNP after the first), then halved the rate.
        let alpha = (1.0 - cfg.g).powi(4);
        let want = G100 as f64 * (1.0 - alpha / 2.0);
        assert!(
            (rp.rate_bps() as f64 - want).abs() < 1e3,
            "{}",
            rp.rate_bps()
        );
        assert_eq!(rp.stats.cuts, 1);
        // No further CNP: no further cut, and alpha keeps falling.
        rp.poll(100_000);
        assert_eq!(rp.stats.cuts, 1);
        assert!(rp.alpha() < alpha * 0.8);
    }

    #[test]
    fn repeated_cnps_raise_alpha_and_cut_at_most_once_per_check() {
        let cfg = DcqcnConfig::conweave(G100);
        let mut rp = ReactionPoint::new(cfg);
        for t in 0..100u64 {
            rp.on_cnp(t * 1_000);
            rp.poll(t * 1_000 + 500);
        }
        assert_eq!(rp.stats.cuts, 100 / 4 - 1);
        assert!(rp.alpha() > 0.9, "{}", rp.alpha());
        assert!(rp.rate_bps() <= G100 / 1000);
        assert!(rp.rate_bps() >= cfg.min_rate_bps);
    }

    #[test]
    fn recovery_goes_fast_recovery_then_additive_then_hyper() {
        let cfg = DcqcnConfig::conweave(G100);
        let mut rp = ReactionPoint::new(cfg);
        let near = |a: f64, b: f64| (a - b).abs() < 1e3;
        rp.on_cnp(0);
        rp.poll(4_000);
        let cut = rp.rate_bps() as f64;
        // 300 us after the cut, fast recovery halves the distance to the target (line rate:
        // no timer increase came before the cut, so it was not clamped).
        rp.poll(304_000);
        let fr = (cut + G100 as f64) / 2.0;
        assert!(near(rp.rate_bps() as f64, fr));
        // A second CNP: a timer increase happened since the cut, so the target becomes the
        // rate now.
        rp.on_cnp(310_000);
        rp.poll(312_000);
        let cut2 = rp.rate_bps() as f64;
        assert!(cut2 < fr);
        rp.poll(612_000);
        let fr2 = (cut2 + fr) / 2.0;
        assert!(
            near(rp.rate_bps() as f64, fr2),
            "fast recovery towards {fr}"
        );
        // Stage 1 = F: additive; then hyper.
        rp.poll(912_000);
        let ai_target = fr + cfg.ai_rate_bps as f64;
        let ai = (fr2 + ai_target) / 2.0;
        assert!(near(rp.rate_bps() as f64, ai));
        rp.poll(1_212_000);
        let hai_target = ai_target + cfg.hai_rate_bps as f64;
        assert!(near(rp.rate_bps() as f64, (ai + hai_target) / 2.0));
        assert_eq!(rp.stats.increases, 4);
    }

    #[test]
    fn the_byte_counter_counts_stages_too() {
        let cfg = DcqcnConfig::connectx(G100);
        let mut rp = ReactionPoint::new(cfg);
        rp.on_cnp(0);
        rp.poll(4_000);
        let cut = rp.rate_bps();
        rp.on_sent(cfg.byte_counter.unwrap() as usize, 5_000);
        assert_eq!(rp.stats.increases, 1);
        assert!(rp.rate_bps() > cut, "fast recovery on bytes alone");
    }

    #[test]
    fn the_notification_point_sends_at_most_one_cnp_per_interval() {
        let mut np = NotificationPoint::new(50_000);
        let sent: Vec<bool> = [0u64, 10_000, 49_999, 50_000, 60_000, 100_000]
            .iter()
            .map(|&t| np.on_ce(t))
            .collect();
        assert_eq!(sent, vec![true, false, false, true, false, true]);
        assert_eq!((np.ce_seen, np.cnps_sent), (6, 3));
    }

    #[test]
    fn profiles_are_named() {
        assert_eq!(
            DcqcnConfig::named("conweave", G100).unwrap().ai_rate_bps,
            40_000_000
        );
        assert_eq!(
            DcqcnConfig::named("connectx", G100).unwrap().hai_rate_bps,
            50_000_000
        );
        assert_eq!(
            DcqcnConfig::named("paper", G100).unwrap().cnp_interval_ns,
            50_000
        );
        assert!(DcqcnConfig::named("timely", G100).is_err());
    }
}
