//! Validation against the embedded default with one change at a time.

use super::*;
use sprayswitch::tables::RouteTarget;
use sprayswitch::wire::Pmtu;

fn check(extra: &str) -> ConfigError {
    let text = format!("{DEFAULT_CONFIG}\n{extra}");
    Config::parse(&text, "t.toml")
        .and_then(|c| c.validate())
        .unwrap_err()
}

fn with_port(fields: &str) -> ConfigError {
    check(&format!(
        "[[port]]\nname = \"x\"\nrole = \"downlink\"\nmac = \"02:00:00:00:00:09\"\n{fields}"
    ))
}

#[test]
fn real_backends_are_described() {
    let text = format!(
        "{}\n[[port]]\nname = \"x\"\nbackend = \"af_xdp\"\ninterface = \"veth7\"\nqueues = 2\nxdp_mode = \"skb\"\nrole = \"downlink\"\nmac = \"02:00:00:00:00:09\"\n\
         [[port]]\nname = \"y\"\nbackend = \"auto\"\nrole = \"downlink\"\nmac = \"02:00:00:00:00:0a\"\n",
        DEFAULT_CONFIG
    );
    let v = Config::parse(&text, "t").unwrap().validate().unwrap();
    assert_eq!(
        v.backends[6],
        Backend::Real {
            kind: RealKind::AfXdp,
            interface: "veth7".into(),
            queues: 2,
            xdp_mode: XdpModeChoice::Skb,
            rings: (1024, 2048),
            busy_poll_us: None,
            rx_buffers: 4096,
        }
    );
    assert_eq!(
        v.backends[7],
        Backend::Real {
            kind: RealKind::Auto,
            interface: "y".into(),
            queues: 1,
            xdp_mode: XdpModeChoice::Auto,
            rings: (1024, 2048),
            busy_poll_us: None,
            rx_buffers: 4096,
        }
    );
    let dup = text.replace(
        "name = \"y\"\nbackend = \"auto\"",
        "name = \"y\"\nbackend = \"auto\"\ninterface = \"veth7\"",
    );
    let e = Config::parse(&dup, "t").unwrap().validate().unwrap_err();
    assert_eq!(e.field, "port[7].interface");
    assert!(e.reason.contains("already used by port 'x'"), "{e}");

    // AF_XDP rings and busy polling: set, checked, and refused where they do not apply.
    let rings = text.replace(
        "xdp_mode = \"skb\"\n",
        "xdp_mode = \"skb\"\nring_size = 512\nfill_ring_size = 4096\nbusy_poll_us = 20\nrx_buffers = 256\n",
    );
    let v = Config::parse(&rings, "t").unwrap().validate().unwrap();
    assert!(
        matches!(
            v.backends[6],
            Backend::Real {
                rings: (512, 4096),
                busy_poll_us: Some(20),
                rx_buffers: 256,
                ..
            }
        ),
        "{:?}",
        v.backends[6]
    );
    for (from, to, field, reason) in [
        (
            "ring_size = 512",
            "ring_size = 500",
            "port[6].ring_size",
            "a power of two",
        ),
        (
            "fill_ring_size = 4096",
            "fill_ring_size = 256",
            "port[6].fill_ring_size",
            "smaller than the receive ring",
        ),
        (
            "busy_poll_us = 20",
            "busy_poll_us = 0",
            "port[6].busy_poll_us",
            "1 to 1000",
        ),
        (
            "rx_buffers = 256",
            "rx_buffers = 16",
            "port[6].rx_buffers",
            "64 to 1048576",
        ),
        (
            "backend = \"af_xdp\"",
            "backend = \"af_packet\"",
            "port[6].backend",
            "apply to AF_XDP",
        ),
    ] {
        let t = rings.replacen(from, to, 1);
        let e = Config::parse(&t, "t").unwrap().validate().unwrap_err();
        assert_eq!(e.field, field, "{e}");
        assert!(e.reason.contains(reason), "{e}");
    }
}

#[test]
fn dpdk_ports_name_their_device_and_eal_its_arguments() {
    let text = format!(
        "{DEFAULT_CONFIG}\n[[port]]\nname = \"x\"\nbackend = \"dpdk\"\ndevice = \"0000:3b:00.0\"\nqueues = 4\nrole = \"downlink\"\nmac = \"02:00:00:00:00:09\"\n\
         [[port]]\nname = \"y\"\nbackend = \"dpdk\"\ndevice = \"net_af_packet0,iface=eth0\"\nrole = \"downlink\"\nmac = \"02:00:00:00:00:0a\"\n\
         [dpdk]\neal_args = [\"--no-huge\", \"-m\", \"512\"]\n"
    );
    let v = Config::parse(&text, "t").unwrap().validate().unwrap();
    assert_eq!(
        v.backends[6],
        Backend::Dpdk {
            device: "0000:3b:00.0".into(),
            queues: 4,
            ring: 1024
        }
    );
    assert_eq!(
        v.backends[7],
        Backend::Dpdk {
            device: "net_af_packet0,iface=eth0".into(),
            queues: 1,
            ring: 1024
        }
    );
    assert_eq!(
        v.dpdk,
        Some(DpdkRun {
            eal_args: vec!["--no-huge".into(), "-m".into(), "512".into()],
            mbufs: 16384
        })
    );
    assert_eq!(Config::default_config().validate().unwrap().dpdk, None);
    let small = text.replacen("queues = 4", "queues = 4\nring_size = 256", 1);
    let v = Config::parse(&small, "t").unwrap().validate().unwrap();
    assert!(
        matches!(v.backends[6], Backend::Dpdk { ring: 256, .. }),
        "{:?}",
        v.backends[6]
    );
    let bad = |from: &str, to: &str| {
        let t = text.replacen(from, to, 1);
        assert_ne!(t, text, "{from}");
        Config::parse(&t, "t").unwrap().validate().unwrap_err()
    };
    let cases = [
        (
            bad("device = \"0000:3b:00.0\"\n", ""),
            "port[6].device",
            "needs device",
        ),
        (
            bad("net_af_packet0,iface=eth0", "0000:3b:00.0,x=1"),
            "port[7].device",
            "0000:3b:00.0 is already used by port 'x'",
        ),
        (
            bad("queues = 4", "queues = 65"),
            "port[6].queues",
            "use 1 to 64",
        ),
        (
            bad("queues = 4", "interface = \"eth3\""),
            "port[6].interface",
            "not an interface",
        ),
        (
            bad("\neal_args", "\nmbufs = 100\neal_args"),
            "dpdk.mbufs",
            "use 1024 to",
        ),
        (
            bad("queues = 4", "queues = 4\nring_size = 100"),
            "port[6].ring_size",
            "a power of two",
        ),
        (
            bad("queues = 4", "queues = 4\nfill_ring_size = 2048"),
            "port[6].fill_ring_size",
            "not an interface, an XDP mode, a fill ring",
        ),
        (
            bad("queues = 4", "queues = 4\nrx_buffers = 512"),
            "port[6].rx_buffers",
            "[dpdk] mbufs",
        ),
        (
            bad("backend = \"dpdk\"", "backend = \"af_xdp\""),
            "port[6].device",
            "needs backend = \"dpdk\"",
        ),
    ];
    for (e, field, reason) in cases {
        assert_eq!(e.field, field, "{e}");
        assert!(e.reason.contains(reason), "{e}");
    }
    let e = bad("\"512\"]", "\"512\", \"--help\"]");
    assert_eq!(e.field, "dpdk.eal_args");
    assert!(e.reason.contains("not for a switch"), "{e}");
    // A [dpdk] section with no DPDK port is a forgotten backend.
    let e = check("[dpdk]\neal_args = [\"--no-huge\"]\n");
    assert_eq!(e.field, "dpdk");
}

#[test]
fn the_default_is_valid() {
    let v = Config::default_config().validate().unwrap();
    assert_eq!(v.name, "tor-a");
    assert_eq!(v.tables.ports.len(), 6);
    assert_eq!(v.tables.groups[0].ports.len(), 4);
    assert_eq!(v.tables.policy, SprayPolicy::RoundRobin);
    assert!(v.backends.iter().all(|b| *b == Backend::Mem));
    let (_, target) = v.tables.fib.lookup("10.2.3.4".parse().unwrap()).unwrap();
    assert_eq!(*target, RouteTarget::Group(0));
    let (_, target) = v.tables.fib.lookup("10.1.2.7".parse().unwrap()).unwrap();
    assert_eq!(*target, RouteTarget::Connected(1));
    assert_eq!(v.tables.ports[0].pmtu, Pmtu::new(1024).unwrap());
}

#[test]
fn errors_name_the_field_and_reason() {
    let cases: Vec<(ConfigError, &str, &str)> = vec![
        (
            Config::parse(
                &DEFAULT_CONFIG.replace("window = 256", "window = 100"),
                "t.toml",
            )
            .and_then(|c| c.validate())
            .unwrap_err(),
            "reorder.window",
            "power of two",
        ),
        (
            with_port("hold_timeout_us = 0"),
            "port[6].hold_timeout_us",
            "at least 1",
        ),
        (
            check("[[route]]\nprefix = \"10.9.0.0/16\"\nport = \"u9\""),
            "route[2].port",
            "unknown port 'u9'",
        ),
        (
            check("[[route]]\nprefix = \"10.9.0.0/33\"\nport = \"h1\""),
            "route[2].prefix",
            "longer than 32",
        ),
        (
            check("[[route]]\nprefix = \"10.2.0.0/16\"\nport = \"h1\""),
            "route[2].prefix",
            "already routed by route[0]",
        ),
        (
            check("[[route]]\nprefix = \"10.9.0.0/16\"\ngroup = \"spine\""),
            "route[2].group",
            "unknown uplink group 'spine'",
        ),
        (
            check("[[route]]\nprefix = \"10.9.0.0/16\"\nport = \"h1\"\nvia = \"10.5.0.1\""),
            "route[2].via",
            "not inside an address of port 'h1'",
        ),
        (
            check("[[route]]\nprefix = \"10.9.0.0/16\"\nport = \"h1\"\ngroup = \"fabric\""),
            "route[2].group",
            "not both",
        ),
        (
            with_port("addresses = [\"10.1.1.9/24\"]"),
            "port[6].addresses[0]",
            "overlaps port[0].addresses[0]",
        ),
        (
            with_port("addresses = [\"10.1.1.1/32\"]"),
            "port[6].addresses[0]",
            "already used by port[0].addresses[0]",
        ),
        (
            with_port("addresses = [\"10.7.0.0/16\"]"),
            "port[6].addresses[0]",
            "network address",
        ),
        (
            check("[[port]]\nname = \"h1\"\nrole = \"downlink\"\nmac = \"02:00:00:00:00:09\""),
            "port[6].name",
            "duplicate name 'h1' (also port[0])",
        ),
        (with_port("mtu = 20000"), "port[6].mtu", "use 68 to 9000"),
        (with_port("pmtu = 1000"), "port[6].pmtu", "1000: use 256"),
        (
            with_port("backend = \"pcap\""),
            "port[6].backend",
            "needs pcap_in",
        ),
        (with_port("backend = \"netmap\""), "port[6].backend", "'netmap'"),
        (
            with_port("backend = \"af_xdp\"\nqueues = 0"),
            "port[6].queues",
            "use 1 to 64",
        ),
        (
            with_port("backend = \"auto\"\nxdp_mode = \"turbo\""),
            "port[6].xdp_mode",
            "'turbo'",
        ),
        (
            with_port("backend = \"af_packet\"\nxdp_mode = \"skb\""),
            "port[6].backend",
            "apply to AF_XDP",
        ),
        (
            with_port("backend = \"af_xdp\"\ninterface = \"a-very-long-interface\""),
            "port[6].interface",
            "not an interface name",
        ),
        (
            with_port("interface = \"eth0\""),
            "port[6].interface",
            "need a real backend",
        ),
        (
            check("[[port]]\nname = \"y\"\nrole = \"spine\"\nmac = \"02:00:00:00:00:09\""),
            "port[6].role",
            "'spine'",
        ),
        (
            check("[[port]]\nname = \"y\"\nrole = \"uplink\"\nmac = \"01:00:00:00:00:09\""),
            "port[6].mac",
            "not a unicast",
        ),
        (
            check("[[port]]\nname = \"y\"\nrole = \"uplink\"\nmac = \"02:00:00:00:09\""),
            "port[6].mac",
            "not a MAC address",
        ),
        (
            check("[[uplink_group]]\nname = \"g2\"\nports = [\"h1\"]"),
            "uplink_group[1].ports[0]",
            "is a downlink",
        ),
        (
            check("[[uplink_group]]\nname = \"g2\"\nports = [\"u0\", \"u0\"]"),
            "uplink_group[1].ports[1]",
            "listed twice",
        ),
        (
            check("[[uplink_group]]\nname = \"g2\"\nports = [\"u0\"]\nweights = [1, 2]"),
            "uplink_group[1].weights",
            "2 weights for 1 ports",
        ),
        (
            check("[[uplink_group]]\nname = \"g2\"\nports = [\"u0\"]\nloss_detection = \"psn\""),
            "uplink_group[1].loss_detection",
            "use 'path_order' or 'timeout'",
        ),
        (
            check("[[uplink_group]]\nname = \"g2\"\nports = [\"u0\"]\nloss_detection = \"timeout\"\npath_stamps = true"),
            "uplink_group[1].path_stamps",
            "need loss_detection = \"path_order\"",
        ),
        (
            check("[[port]]\nname = \"y\"\nbackend = \"af_xdp\"\ninterface = \"veth7\"\nqueues = 2\nxdp_mode = \"skb\"\nrole = \"uplink\"\nmac = \"02:00:00:00:00:09\"\npeer_mac = \"02:00:00:00:00:0a\"\n[[uplink_group]]\nname = \"g2\"\nports = [\"y\"]\npath_stamps = true"),
            "uplink_group[1].path_stamps",
            "port 'y' has 2 receive queues",
        ),
        (
            check("[[port]]\nname = \"y\"\nrole = \"uplink\"\nmac = \"02:00:00:00:00:09\"\nloss_recovery = \"nak_first\""),
            "port[6].loss_recovery",
            "only downlinks reorder",
        ),
        (
            with_port("mode = \"nak_filter\""),
            "port[6].mode",
            "nak_filter needs selective-repeat RNICs",
        ),
        (
            with_port("mode = \"nak_filter\"\nrnic = \"go_back_n\""),
            "port[6].mode",
            "declared go_back_n",
        ),
        (
            with_port("mode = \"nak_filter\"\nrnic = \"selective_repeat\"\nhold_timeout_us = 0"),
            "port[6].hold_timeout_us",
            "must be",
        ),
        (
            Config::parse(
                &DEFAULT_CONFIG
                    .replace("enabled = true", "enabled = false")
                    .replace("mode = \"reorder\"", "mode = \"nak_filter\"")
                    .replace("rnic = \"go_back_n\"", "rnic = \"selective_repeat\""),
                "t.toml",
            )
            .and_then(|c| c.validate())
            .unwrap_err(),
            "reorder.mode",
            "needs the reorder stage",
        ),
        (
            check("[[port]]\nname = \"y\"\nrole = \"uplink\"\nmac = \"02:00:00:00:00:09\"\nmode = \"pass\""),
            "port[6].mode",
            "only downlinks reorder",
        ),
        (
            with_port(
                "mode = \"nak_filter\"\nrnic = \"selective_repeat\"\nloss_recovery = \"nak_first\"",
            ),
            "port[6].loss_recovery",
            "a nak_filter downlink releases nothing",
        ),
        (
            with_port("rnic = \"infiniband\""),
            "port[6].rnic",
            "use 'go_back_n' or 'selective_repeat'",
        ),
        (
            check("[[neighbor]]\nip = \"10.1.1.7\"\nmac = \"02:00:00:00:00:07\"\nport = \"h7\""),
            "neighbor[0].port",
            "unknown port 'h7'",
        ),
    ];
    for (e, field, reason) in cases {
        assert_eq!(e.field, field, "{e}");
        assert!(e.reason.contains(reason), "{e} should say '{reason}'");
    }
}

#[test]
fn switch_section_and_syntax_errors() {
    let bad = |s: &str| {
        let text = DEFAULT_CONFIG.replace("workers = 1", s);
        Config::parse(&text, "t.toml")
            .and_then(|c| c.validate())
            .unwrap_err()
    };
    assert_eq!(bad("workers = 0").field, "switch.workers");
    // Each worker's stamps need a lane (the embedded group stamps).
    let e = bad("workers = 2");
    assert_eq!(e.field, "uplink_group[0].path_stamps", "{e}");
    assert!(e.reason.contains("set switch.path_stamp_lanes"), "{e}");
    let e = bad("workers = 9\npath_stamp_lanes = 8");
    assert!(e.reason.contains("at most 8 workers"), "{e}");
    let e = bad("workers = 3\npath_stamp_lanes = 2");
    assert_eq!(e.field, "uplink_group[0].path_stamps", "{e}");
    let e = bad("workers = 2\npath_stamp_lanes = 3");
    assert_eq!(e.field, "switch.path_stamp_lanes", "{e}");
    let ok = DEFAULT_CONFIG.replace("workers = 1", "workers = 3\npath_stamp_lanes = 4");
    let v = Config::parse(&ok, "t.toml").unwrap().validate().unwrap();
    assert_eq!(v.tables.stamp_lane_bits, 2);
    let text = DEFAULT_CONFIG.replace("prefix = [16, 32]", "prefix = [33, 64]");
    let e = Config::parse(&text, "t.toml")
        .and_then(|c| c.validate())
        .unwrap_err();
    assert_eq!(e.field, "reorder.stamp_source_prefix", "{e}");
    let e = bad("workers = 1\nspray_policy2 = \"x\"");
    assert_eq!(e.field, "t.toml");
    assert!(e.reason.contains("unknown field `spray_policy2`"), "{e}");
    let e = Config::parse(&DEFAULT_CONFIG.replace("round_robin", "spray"), "t.toml")
        .unwrap()
        .validate()
        .unwrap_err();
    assert_eq!(e.field, "switch.spray_policy");
    assert!(e.reason.contains("one of: ecmp, round_robin"));
    let e = Config::parse("[switch]\nworkers = \"two\"", "t.toml").unwrap_err();
    assert!(e.reason.contains("line 2"), "{e}");
    assert_eq!(
        Config::parse("", "t")
            .unwrap()
            .validate()
            .unwrap_err()
            .field,
        "port"
    );
}

#[test]
fn ecn_comes_from_the_port_else_the_switch_and_bad_settings_name_their_field() {
    let text = DEFAULT_CONFIG.replace(
        "[switch]\n",
        "[switch]\necn = { kmin_kb = 100, kmax_kb = 400, pmax = 0.2 }\n",
    ) + "[[port]]\nname = \"x\"\nrole = \"downlink\"\nmac = \"02:00:00:00:00:09\"\nrate_gbps = 25\necn = \"for_rate\"\n\
         [[port]]\nname = \"y\"\nrole = \"downlink\"\nmac = \"02:00:00:00:00:0a\"\necn = \"off\"\n";
    let v = Config::parse(&text, "t").unwrap().validate().unwrap();
    let ecn = |i: usize| v.tables.ports[i].ecn;
    let conweave = sprayswitch::egress::EcnProfile {
        kmin_bytes: 100_000,
        kmax_bytes: 400_000,
        pmax: 0.2,
    };
    assert_eq!(ecn(0), Some(conweave), "the switch's");
    assert_eq!(
        ecn(6).map(|e| (e.kmin_bytes, e.kmax_bytes)),
        Some((25_000, 100_000))
    );
    assert_eq!(ecn(7), None);
    assert_eq!(
        Config::default_config().validate().unwrap().tables.ports[0].ecn,
        None
    );

    let e = with_port("ecn = \"for_rate\"");
    assert_eq!(e.field, "port[6].ecn");
    assert!(e.reason.contains("rate_gbps"), "{e}");
    let e = with_port("ecn = \"sometimes\"");
    assert!(e.reason.contains("'off', 'for_rate'"), "{e}");
    let e = with_port("ecn = { kmin_kb = 400, kmax_kb = 100, pmax = 0.2 }");
    assert!(e.reason.contains("kmax"), "{e}");
    let e = with_port("ecn = { kmin_kb = 1, kmax_kb = 10, pmax = 2 }");
    assert!(e.reason.contains("pmax"), "{e}");
    let e = with_port("ecn = { kmin_kb = -1, kmax_kb = 10, pmax = 0.5 }");
    assert_eq!(e.field, "port[6].ecn.kmin_kb");
}

#[test]
fn downlink_modes_and_rnics_decide_each_downlinks_settings() {
    use sprayswitch::reorder::{DownlinkMode, LossRecovery};
    let text = format!(
        "{DEFAULT_CONFIG}\n[[port]]\nname = \"x\"\nrole = \"downlink\"\nmac = \"02:00:00:00:00:09\"\n\
         mode = \"nak_filter\"\nrnic = \"selective_repeat\"\n\
         [[port]]\nname = \"z\"\nrole = \"downlink\"\nmac = \"02:00:00:00:00:0a\"\n\
         rnic = \"selective_repeat\"\nmode = \"pass\""
    );
    let v = Config::parse(&text, "t.toml")
        .and_then(|c| c.validate())
        .expect("valid");
    let n = v.port_reorder.len();
    let (x, z) = (v.port_reorder[n - 2], v.port_reorder[n - 1]);
    assert_eq!(x.mode, DownlinkMode::NakFilter);
    // Unset, loss recovery follows the RNIC: selective repeat keeps the run.
    assert_eq!(x.recovery, LossRecovery::ReleaseRun);
    assert_eq!(z.mode, DownlinkMode::Pass);
    // The embedded default's downlinks: reorder, Go-Back-N, one packet out of sequence.
    assert_eq!(v.port_reorder[0].mode, DownlinkMode::Reorder);
    assert_eq!(v.port_reorder[0].recovery, LossRecovery::NakFirst);
}
