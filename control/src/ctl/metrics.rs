//! The Prometheus text exposition of every counter.

use sprayswitch::counters::{Kind, Row, Scope};
use sprayswitch::engine::DropReason;
use sprayswitch::tables::Role;

use super::Control;

impl Control {
    /// Prometheus text exposition of every counter.
    pub fn metrics(&self) -> String {
        let t = self.switch.tables();
        let s = self.switch.stats();
        let mut m = Metrics::default();
        for row in s.rows().iter().filter(|r| r.scope != Scope::Worker) {
            m.row(row, &[]);
        }
        for r in DropReason::ALL {
            m.counter(
                "sprayswitch_drop_packets_total",
                "Packets dropped, by reason (see each reason in `show counters`'s drops).",
                &[("reason", r.name())],
                s.dropped(r),
            );
        }
        for (i, p) in t.ports.iter().enumerate() {
            let c = s.ports.get(i).cloned().unwrap_or_default();
            let role = if p.role == Role::Uplink {
                "uplink"
            } else {
                "downlink"
            };
            let l = [("port", p.name.as_str()), ("role", role)];
            for row in c.rows() {
                match row.scope {
                    Scope::Downlink if p.role == Role::Downlink => m.row(&row, &l[..1]),
                    Scope::Uplink if p.role == Role::Uplink => m.row(&row, &l[..1]),
                    Scope::Downlink | Scope::Uplink => {}
                    _ => m.row(&row, &l),
                }
            }
            m.gauge(
                "sprayswitch_port_up",
                "1 when the port's carrier is up.",
                &l,
                u64::from(self.switch.port_up(i as u16)),
            );
            m.gauge(
                "sprayswitch_port_admin_up",
                "1 when the port is administratively up.",
                &l,
                u64::from(p.admin_up),
            );
            m.gauge(
                "sprayswitch_port_tx_backlog_packets",
                "Packets queued towards a port.",
                &l,
                self.switch.port_backlog(i as u16) as u64,
            );
            if let Some(h) = self.switch.queue_depth_histogram(i as u16) {
                m.histogram_bytes(
                    "sprayswitch_port_queue_depth_bytes",
                    "Bytes queued (with what the reorder stage holds towards a host) that packets found entering a port's egress queue.",
                    &l,
                    &h,
                );
            }
        }
        for (w, ws) in self.switch.worker_stats().iter().enumerate() {
            let id = w.to_string();
            let l = [("worker", id.as_str())];
            for row in ws.rows() {
                match row.scope {
                    Scope::Worker => m.row(&row, &l),
                    // The summed series has no label; its per-worker series is named for the
                    // worker.
                    Scope::SwitchAndWorker => {
                        let name = row
                            .metric
                            .replacen("sprayswitch_", "sprayswitch_worker_", 1);
                        m.named_row(&name, &row, &l)
                    }
                    _ => {}
                }
            }
        }
        for row in s.reorder.rows() {
            m.row(&row, &[]);
        }
        if let Some(h) = self.switch.hold_histogram() {
            m.histogram_ns(
                "sprayswitch_reorder_hold_seconds",
                "Time packets were held.",
                &h,
            );
        }
        if let Some(h) = self.switch.detection_histogram() {
            m.histogram_ns(
                "sprayswitch_reorder_loss_detection_seconds",
                "Time from a gap opening to its loss declared by path order.",
                &h,
            );
        }
        m.text
    }
}

#[derive(Default)]
struct Metrics {
    text: String,
    declared: std::collections::HashSet<String>,
}

impl Metrics {
    fn head(&mut self, name: &str, help: &str, kind: &str) {
        if self.declared.insert(name.to_string()) {
            self.text += &format!("# HELP {name} {help}\n# TYPE {name} {kind}\n");
        }
    }

    fn labels(l: &[(&str, &str)]) -> String {
        if l.is_empty() {
            return String::new();
        }
        let parts: Vec<String> = l
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
            .collect();
        format!("{{{}}}", parts.join(","))
    }

    fn counter(&mut self, name: &str, help: &str, l: &[(&str, &str)], v: u64) {
        self.head(name, help, "counter");
        self.text += &format!("{name}{} {v}\n", Self::labels(l));
    }

    fn gauge(&mut self, name: &str, help: &str, l: &[(&str, &str)], v: u64) {
        self.head(name, help, "gauge");
        self.text += &format!("{name}{} {v}\n", Self::labels(l));
    }

    fn row(&mut self, r: &Row, l: &[(&str, &str)]) {
        self.named_row(r.metric, r, l);
    }

    /// Row `r` exported under `name`.
    fn named_row(&mut self, name: &str, r: &Row, l: &[(&str, &str)]) {
        match r.kind {
            Kind::Counter => self.counter(name, r.help, l, r.value),
            Kind::Gauge | Kind::Max => self.gauge(name, r.help, l, r.value),
        }
    }

    fn histogram_bytes(
        &mut self,
        name: &str,
        help: &str,
        l: &[(&str, &str)],
        h: &hdrhistogram::Histogram<u64>,
    ) {
        self.head(name, help, "histogram");
        let mut sum = 0f64;
        for v in h.iter_recorded() {
            sum += v.value_iterated_to() as f64 * v.count_at_value() as f64;
        }
        let labels = |le: &str| {
            let mut all: Vec<(&str, &str)> = l.to_vec();
            all.push(("le", le));
            Self::labels(&all)
        };
        for le in [
            1_000u64, 10_000, 50_000, 100_000, 200_000, 400_000, 800_000, 1_600_000, 4_000_000,
            16_000_000,
        ] {
            let n: u64 = h
                .iter_recorded()
                .filter(|v| v.value_iterated_to() <= le)
                .map(|v| v.count_at_value())
                .sum();
            self.text += &format!("{name}_bucket{} {n}\n", labels(&le.to_string()));
        }
        self.text += &format!("{name}_bucket{} {}\n", labels("+Inf"), h.len());
        self.text += &format!("{name}_sum{} {sum}\n", Self::labels(l));
        self.text += &format!("{name}_count{} {}\n", Self::labels(l), h.len());
    }

    fn histogram_ns(&mut self, name: &str, help: &str, h: &hdrhistogram::Histogram<u64>) {
        self.head(name, help, "histogram");
        let mut sum = 0f64;
        for v in h.iter_recorded() {
            sum += v.value_iterated_to() as f64 * v.count_at_value() as f64;
        }
        for le_us in [1u64, 5, 10, 50, 100, 500, 1000, 5000, 10000, 50000] {
            let n: u64 = h
                .iter_recorded()
                .filter(|v| v.value_iterated_to() <= le_us * 1000)
                .map(|v| v.count_at_value())
                .sum();
            self.text += &format!("{name}_bucket{{le=\"{}\"}} {n}\n", le_us as f64 / 1e6);
        }
        self.text += &format!("{name}_bucket{{le=\"+Inf\"}} {}\n", h.len());
        self.text += &format!("{name}_sum {}\n", sum / 1e9);
        self.text += &format!("{name}_count {}\n", h.len());
    }
}
