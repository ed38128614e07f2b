//! How RoCE packets are spread over an uplink group: the policy the operator picks
//! (`[switch] spray_policy`), which the sprayer ([`crate::engine::spray`]) carries out.

/// How RoCE packets are spread over an uplink group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SprayPolicy {
    /// Per-flow 5-tuple hash: every packet of a QP on one uplink (today's datacenter baseline).
    Ecmp,
    /// Packet by packet, in turn.
    RoundRobin,
    /// Packet by packet, uniformly at random.
    Random,
    /// Packet by packet, in proportion to the uplinks' weights (smooth weighted round robin:
    /// exact over every cycle of the weights' sum).
    Weighted,
    /// Packet by packet to the uplink with the shortest transmit backlog.
    LeastLoaded,
    /// Per flow, moving to a random uplink only after an idle gap (LetFlow).
    Flowlet,
}

impl SprayPolicy {
    /// Every policy.
    pub const ALL: [SprayPolicy; 6] = [
        SprayPolicy::Ecmp,
        SprayPolicy::RoundRobin,
        SprayPolicy::Random,
        SprayPolicy::Weighted,
        SprayPolicy::LeastLoaded,
        SprayPolicy::Flowlet,
    ];

    /// The configuration name.
    pub fn name(self) -> &'static str {
        match self {
            SprayPolicy::Ecmp => "ecmp",
            SprayPolicy::RoundRobin => "round_robin",
            SprayPolicy::Random => "random",
            SprayPolicy::Weighted => "weighted",
            SprayPolicy::LeastLoaded => "least_loaded",
            SprayPolicy::Flowlet => "flowlet",
        }
    }

    /// True for policies that may send packets of one flow over different uplinks.
    pub fn sprays(self) -> bool {
        !matches!(self, SprayPolicy::Ecmp)
    }

    /// True for the policies that read the flow hash (`ecmp`, `flowlet`).
    pub fn uses_flow_hash(self) -> bool {
        matches!(self, SprayPolicy::Ecmp | SprayPolicy::Flowlet)
    }
}

impl core::str::FromStr for SprayPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        SprayPolicy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = SprayPolicy::ALL.iter().map(|p| p.name()).collect();
                format!("unknown spray policy '{s}' (one of: {})", names.join(", "))
            })
    }
}
