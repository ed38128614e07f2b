//! The idle wait across workers: a worker with nothing to do sleeps in `ppoll` on its ports'
//! descriptors and its wake-up eventfd for up to `QUIET_WAIT` (20 ms). A packet another worker
//! hands it must end that wait at once, not when the timer runs out.
//!
//! Two workers and two ports backed by Unix datagram sockets (each has a descriptor, so both
//! workers take the long quiet wait): port 0 on worker 0 is cross-connected to port 1 on worker
//! 1, so every frame is a hand-off. Frames go in one at a time, each only after the previous came
//! out. If the hand-off did not wake worker 1, each frame would wait out a random part of its
//! 20 ms timer (median about 10 ms); the test asks for a median under 3 ms. No privileges needed.

use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use sprayswitch::idle::{IdlePolicy, QUIET_WAIT};
use sprayswitch::pkt::Pkt;
use sprayswitch::port::{LinkState, Port};
use sprayswitch::switch::{RunConfig, Switch};
use sprayswitch::tables::SprayPolicy;
use sprayswitch::testkit::tor_tables;
use sprayswitch::worker::WorkerConfig;

/// A port whose frames are datagrams: received from `rx`, sent to `tx`.
struct DgramPort {
    name: String,
    rx: UnixDatagram,
    tx: UnixDatagram,
}

impl Port for DgramPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, now: u64, out: &mut Vec<Pkt>, max: usize) -> usize {
        let mut n = 0;
        let mut buf = [0u8; 2048];
        while n < max {
            let Ok(len) = self.rx.recv(&mut buf) else {
                break;
            };
            let mut p = Pkt::from_slice(&buf[..len]);
            p.rx_ns = now;
            out.push(p);
            n += 1;
        }
        n
    }

    fn tx_burst(&mut self, _now: u64, pkts: &mut Vec<Pkt>) -> usize {
        let n = pkts.len();
        for p in pkts.drain(..) {
            self.tx
                .send(p.data())
                .expect("the test's receiving end is open");
        }
        n
    }

    fn link_state(&self) -> LinkState {
        LinkState::Up
    }

    fn tx_backlog(&self) -> usize {
        0
    }

    fn wait_fds(&self, out: &mut Vec<RawFd>) {
        out.push(self.rx.as_raw_fd());
    }
}

/// A port and the test's two ends: where to send what the port receives, where to read what
/// it transmits.
fn dgram_port(name: &str) -> (DgramPort, UnixDatagram, UnixDatagram) {
    let (rx, feed) = UnixDatagram::pair().unwrap();
    let (tx, sink) = UnixDatagram::pair().unwrap();
    rx.set_nonblocking(true).unwrap();
    sink.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    (
        DgramPort {
            name: name.into(),
            rx,
            tx,
        },
        feed,
        sink,
    )
}

#[test]
fn a_hand_off_wakes_a_worker_waiting_for_packets() {
    let mut tables = tor_tables(2, 0, SprayPolicy::Ecmp);
    tables.patch = vec![Some(1), Some(0)];
    let (p0, feed0, _sink0) = dgram_port("d0");
    let (p1, _feed1, sink1) = dgram_port("d1");
    let run = RunConfig {
        workers: 2,
        assignment: Some(vec![0, 1]),
        cores: None,
        worker: WorkerConfig {
            idle: IdlePolicy::wait(50),
            ..WorkerConfig::default()
        },
        seed: 1,
    };
    let switch = Switch::start(tables, vec![Box::new(p0), Box::new(p1)], run).unwrap();
    // Let both workers settle into their quiet waits.
    std::thread::sleep(QUIET_WAIT * 3);

    let mut took = Vec::new();
    let mut buf = [0u8; 2048];
    for i in 0..40u8 {
        let frame = [i; 64];
        let t = Instant::now();
        feed0.send(&frame).unwrap();
        let n = sink1.recv(&mut buf).expect("the frame came out of port 1");
        took.push(t.elapsed());
        assert_eq!(&buf[..n], &frame[..], "frames come out whole and in order");
        // Idle long enough that worker 1 is back in a quiet wait when the next frame comes.
        std::thread::sleep(QUIET_WAIT + Duration::from_millis(5));
    }
    let stopped = switch.stop();
    assert_eq!(stopped.stats.handoff_out, 40, "every frame was a hand-off");
    took.sort();
    let median = took[took.len() / 2];
    eprintln!(
        "hand-off latency: median {median:?}, max {:?}",
        took[took.len() - 1]
    );
    assert!(
        median < Duration::from_millis(3),
        "median {median:?}: the hand-off waited for worker 1's timer"
    );
}
