//! A rack pair in one process, its hosts on real interfaces: two sprayswitch ToRs (each with
//! its own tables, reorder engine, counters and control socket) whose host ports are real
//! interfaces (the taps of qemu guests, veths) and whose uplinks are the fabric emulator's
//! paths (fault-injected in-memory links, [`FabricLinks`]), all driven by one thread.
//!
//! ```text
//!  guest ── tap a-h1 ┐ tor-a u0..uN-1 ═══ fabric paths (in memory) ═══ u0..uN-1 tor-b ┌ tap b-h1 ── guest
//! ```
//!
//! Why one thread: the namespace rack of `scripts/netns-rack.sh` runs ToR A, the fabric and
//! ToR B as three processes joined by veth pairs, so a packet wakes a process four times (ToR
//! A, the fabric on arrival and again on release, ToR B) and crosses the kernel six times more
//! than it enters and leaves the rack. On a machine whose cores its hosts need (two TCG guests
//! on two cores) every one of those wake-ups is taken from a guest. Here a packet from a host
//! wakes one thread, which moves it through ToR A, holds it on its path for the path's delay
//! and serialization (a timed wait until the next release, not a fixed tick), and delivers it
//! through ToR B to the other host. Spraying, reordering and the control plane are the same
//! code as in a separate `sprayswitch` process; only the links between the ToRs are in memory.

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::{bail, Context};
use sprayswitch::port::fault::FaultStats;
use sprayswitch::port::Port;
use sprayswitch::switch::Stopped;
use sprayswitch::time::now_ns;
use sprayswitch::worker::{IdleWaiter, Worker, WorkerExit};
use sprayswitch_control::ctl::Control;
use sprayswitch_control::ports::open_ports_with_mem;
use sprayswitch_control::Config;

use crate::rack::topo::{tor_config_text, FabricLinks, RackPairSpec, TorText};

/// What to build.
#[derive(Debug, Clone, PartialEq)]
pub struct OneRackSpec {
    /// Hosts per rack, paths and their impairments, spray policy, seed, link capacity.
    pub pair: RackPairSpec,
    /// The ToRs' settings. `host_interface_prefix` is ignored: see `host_prefixes`.
    pub tor: TorText,
    /// Host port `hN` of ToR A opens interface `<host_prefixes[0]>N`, of ToR B
    /// `<host_prefixes[1]>N`.
    pub host_prefixes: [String; 2],
}

/// A running one-process rack pair.
pub struct OneRack {
    /// The control sides of ToR A and ToR B (serve them with a `ControlServer` each).
    pub controls: Vec<Control>,
    /// Per path: impairment counters A->B and B->A.
    pub path_stats: Vec<(Arc<FaultStats>, Arc<FaultStats>)>,
    /// How each ToR's ports were opened (one line per port, ToR A first).
    pub report: Vec<String>,
    driver: Option<JoinHandle<Vec<(usize, WorkerExit)>>>,
}

impl OneRack {
    /// Opens the hosts' interfaces, builds the fabric and both ToRs, and starts the thread that
    /// drives them.
    ///
    /// # Errors
    /// A configuration the switch refuses, an interface that cannot be opened.
    pub fn start(spec: &OneRackSpec) -> anyhow::Result<OneRack> {
        if !["af_xdp", "af_packet", "auto"].contains(&spec.tor.host_backend.as_str()) {
            bail!(
                "host ports on backend '{}': the hosts are real interfaces, use af_xdp, \
                 af_packet or auto",
                spec.tor.host_backend
            );
        }
        let mut fabric = FabricLinks::new(&spec.pair);
        let mut controls = Vec::new();
        let mut workers = Vec::new();
        let mut report = Vec::new();
        for rack in 1..=2u8 {
            let r = usize::from(rack - 1);
            let t = TorText {
                uplink_backend: "mem".into(),
                host_interface_prefix: Some(spec.host_prefixes[r].clone()),
                ..spec.tor.clone()
            };
            let text = tor_config_text(&spec.pair, rack, &t)?;
            let cfg = Config::parse(&text, &format!("tor-{}", ['a', 'b'][r]))?;
            let v = cfg.validate()?;
            // The uplinks, in path order, are the fabric's ends for this ToR.
            let mut uplinks = std::mem::take(&mut fabric.ends[r]).into_iter();
            let opened = open_ports_with_mem(&v, |i| {
                uplinks.next().with_context(|| {
                    format!(
                        "port {}: no fabric path left for it",
                        v.tables.ports[i].name
                    )
                })
            })?;
            for (info, what) in v.tables.ports.iter().zip(&opened.report) {
                report.push(format!("tor-{} port {}: {what}", ['a', 'b'][r], info.name));
            }
            let backends = opened.report.clone();
            let (switch, ws) = v.clone().start_driven(opened.ports)?;
            workers.extend(ws.into_iter().map(|w| (r, w)));
            let mut c = Control::new(switch, cfg, v, None::<PathBuf>);
            c.set_backends(backends);
            controls.push(c);
        }
        let driver = std::thread::Builder::new()
            .name("ss-rack".into())
            .spawn(move || drive(workers))
            .context("starting the rack thread")?;
        Ok(OneRack {
            controls,
            path_stats: fabric.stats,
            report,
            driver: Some(driver),
        })
    }

    /// Stops both ToRs after they flush what they hold; their final state, ToR A first.
    pub fn stop(mut self) -> Vec<Stopped> {
        let exits = self.halt();
        let mut per_tor: Vec<Vec<WorkerExit>> = self.controls.iter().map(|_| Vec::new()).collect();
        for (r, e) in exits {
            per_tor[r].push(e);
        }
        std::mem::take(&mut self.controls)
            .into_iter()
            .zip(per_tor)
            .map(|(c, e)| c.into_switch().stop_driven(e))
            .collect()
    }

    /// Asks both ToRs to stop and waits for the rack thread to flush them.
    fn halt(&mut self) -> Vec<(usize, WorkerExit)> {
        for c in &self.controls {
            c.switch().request_stop();
        }
        match self.driver.take().map(JoinHandle::join) {
            Some(Ok(e)) => e,
            Some(Err(_)) => {
                log::error!("the rack thread panicked");
                Vec::new()
            }
            None => Vec::new(),
        }
    }
}

impl Drop for OneRack {
    /// A rack dropped without [`OneRack::stop`] (an error on the way) still stops its thread.
    fn drop(&mut self) {
        self.halt();
    }
}

/// The rack's one thread: both ToRs' workers, iterated in turn until neither finds work, then
/// one wait on every host port and both wake-ups, at most until the fabric's next release or a
/// reorder hold's short wait. Packets on the in-memory paths need no descriptor: only this
/// thread puts them there, and it iterates again whenever an iteration moved anything.
fn drive(mut workers: Vec<(usize, Worker)>) -> Vec<(usize, WorkerExit)> {
    sprayswitch::time::tighten_timer_slack();
    // Both ToRs are configured alike (one `TorText`): ToR A's policy is the rack's.
    let idle = workers
        .first()
        .map(|(_, w)| w.idle_policy())
        .unwrap_or_default();
    let mut waiter = {
        let heard = workers
            .iter()
            .flat_map(|(_, w)| w.wait_ports())
            .filter(|p| has_fd(*p));
        IdleWaiter::for_ports(heard, workers.iter().map(|(_, w)| w.wake()))
    };
    let mut idle_iters = 0u64;
    loop {
        let now = now_ns();
        let mut work = false;
        for (_, w) in &mut workers {
            work |= w.iterate(now);
        }
        if work {
            idle_iters = 0;
            continue;
        }
        idle_iters += 1;
        for (_, w) in &workers {
            w.note_idle();
        }
        if workers.iter().all(|(_, w)| w.stop_requested()) {
            break;
        }
        if !idle.waits(idle_iters) {
            idle.back_off(idle_iters, &mut waiter, None);
            continue;
        }
        let mut wait = true;
        let mut timed: Option<std::time::Duration> = None;
        for (_, w) in &workers {
            match w.prepare_wait() {
                None => wait = false,
                Some(Some(d)) => timed = Some(timed.map_or(d, |t| t.min(d))),
                Some(None) => {}
            }
        }
        if wait {
            idle.back_off(idle_iters, &mut waiter, timed);
        }
        for (_, w) in &workers {
            w.end_wait();
        }
    }
    workers.into_iter().map(|(r, w)| (r, w.finish())).collect()
}

/// True when the port has a descriptor to wait on (every real port; not the in-memory paths).
fn has_fd(p: &dyn Port) -> bool {
    let mut fds = Vec::new();
    p.wait_fds(&mut fds);
    !fds.is_empty()
}
