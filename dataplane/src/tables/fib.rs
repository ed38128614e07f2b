//! Longest-prefix match for IPv4 and IPv6.
//!
//! One hash map per prefix length in use, searched from the longest length down: a ToR holds a
//! handful of prefix lengths, so a lookup costs a few hash probes whatever the table size. The
//! table is built by the control side and is immutable while workers read it.

use crate::ids::IntMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An IP prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Prefix {
    /// Network address (host bits are cleared by [`Prefix::new`]).
    pub addr: IpAddr,
    /// Prefix length.
    pub len: u8,
}

impl Prefix {
    /// Makes a prefix, clearing host bits.
    ///
    /// # Errors
    /// The maximum length when `len` is longer than the address.
    pub fn new(addr: IpAddr, len: u8) -> Result<Prefix, u8> {
        match addr {
            IpAddr::V4(a) if len <= 32 => Ok(Prefix {
                addr: IpAddr::V4(Ipv4Addr::from(mask4(u32::from(a), len))),
                len,
            }),
            IpAddr::V6(a) if len <= 128 => Ok(Prefix {
                addr: IpAddr::V6(Ipv6Addr::from(mask6(u128::from(a), len))),
                len,
            }),
            IpAddr::V4(_) => Err(32),
            IpAddr::V6(_) => Err(128),
        }
    }

    /// True when `ip` falls inside the prefix.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => mask4(u32::from(a), self.len) == u32::from(n),
            (IpAddr::V6(n), IpAddr::V6(a)) => mask6(u128::from(a), self.len) == u128::from(n),
            _ => false,
        }
    }

    /// True when the two prefixes share any address.
    pub fn overlaps(&self, other: &Prefix) -> bool {
        let shorter = if self.len <= other.len { self } else { other };
        let longer = if self.len <= other.len { other } else { self };
        shorter.contains(longer.addr)
    }
}

impl core::fmt::Display for Prefix {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl core::str::FromStr for Prefix {
    type Err = String;
    fn from_str(s: &str) -> Result<Prefix, String> {
        let (a, l) = s
            .split_once('/')
            .ok_or_else(|| format!("'{s}' is not a prefix: expected ADDRESS/LENGTH"))?;
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("'{a}' is not an IP address"))?;
        let len: u8 = l
            .parse()
            .map_err(|_| format!("'{l}' is not a prefix length"))?;
        Prefix::new(addr, len).map_err(|max| format!("prefix length {len} is longer than {max}"))
    }
}

#[inline]
fn mask4(a: u32, len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        a & (u32::MAX << (32 - u32::from(len)))
    }
}

#[inline]
fn mask6(a: u128, len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        a & (u128::MAX << (128 - u32::from(len)))
    }
}

/// A longest-prefix-match table from IP prefixes (v4 and v6) to `T`.
#[derive(Debug, Clone)]
pub struct Fib<T> {
    v4: Vec<(u8, IntMap<u32, T>)>,
    v6: Vec<(u8, IntMap<u128, T>)>,
    len: usize,
}

impl<T> Default for Fib<T> {
    fn default() -> Self {
        Fib {
            v4: Vec::new(),
            v6: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Fib<T> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces the entry for `p`; returns the replaced value.
    pub fn insert(&mut self, p: Prefix, value: T) -> Option<T> {
        let old = match p.addr {
            IpAddr::V4(a) => {
                let i = match self.v4.iter().position(|(l, _)| *l == p.len) {
                    Some(i) => i,
                    None => {
                        self.v4.push((p.len, IntMap::default()));
                        self.v4.sort_by_key(|b| std::cmp::Reverse(b.0));
                        self.v4.iter().position(|(l, _)| *l == p.len).unwrap_or(0)
                    }
                };
                self.v4[i].1.insert(u32::from(a), value)
            }
            IpAddr::V6(a) => {
                let i = match self.v6.iter().position(|(l, _)| *l == p.len) {
                    Some(i) => i,
                    None => {
                        self.v6.push((p.len, IntMap::default()));
                        self.v6.sort_by_key(|b| std::cmp::Reverse(b.0));
                        self.v6.iter().position(|(l, _)| *l == p.len).unwrap_or(0)
                    }
                };
                self.v6[i].1.insert(u128::from(a), value)
            }
        };
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// The value of the longest prefix containing `ip`, with that prefix's length.
    #[inline]
    pub fn lookup(&self, ip: IpAddr) -> Option<(u8, &T)> {
        match ip {
            IpAddr::V4(a) => {
                let a = u32::from(a);
                self.v4
                    .iter()
                    .find_map(|(l, m)| m.get(&mask4(a, *l)).map(|v| (*l, v)))
            }
            IpAddr::V6(a) => {
                let a = u128::from(a);
                self.v6
                    .iter()
                    .find_map(|(l, m)| m.get(&mask6(a, *l)).map(|v| (*l, v)))
            }
        }
    }

    /// Number of prefixes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every (prefix, value), longest prefixes first.
    pub fn iter(&self) -> impl Iterator<Item = (Prefix, &T)> {
        let v4 = self.v4.iter().flat_map(|(l, m)| {
            m.iter().map(move |(a, v)| {
                (
                    Prefix {
                        addr: IpAddr::V4(Ipv4Addr::from(*a)),
                        len: *l,
                    },
                    v,
                )
            })
        });
        let v6 = self.v6.iter().flat_map(|(l, m)| {
            m.iter().map(move |(a, v)| {
                (
                    Prefix {
                        addr: IpAddr::V6(Ipv6Addr::from(*a)),
                        len: *l,
                    },
                    v,
                )
            })
        });
        v4.chain(v6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &str) -> Prefix {
        s.parse().unwrap()
    }

    #[test]
    fn longest_match_wins() {
        let mut f = Fib::new();
        f.insert(p("0.0.0.0/0"), "default");
        f.insert(p("10.0.0.0/8"), "ten");
        f.insert(p("10.0.2.0/24"), "rack2");
        f.insert(p("10.0.2.7/32"), "host");
        f.insert(p("::/0"), "v6default");
        f.insert(p("fd00:2::/64"), "v6rack2");
        let l = |s: &str| f.lookup(s.parse().unwrap()).map(|(_, v)| *v);
        assert_eq!(l("10.0.2.7"), Some("host"));
        assert_eq!(l("10.0.2.8"), Some("rack2"));
        assert_eq!(l("10.9.9.9"), Some("ten"));
        assert_eq!(l("192.168.1.1"), Some("default"));
        assert_eq!(l("fd00:2::9"), Some("v6rack2"));
        assert_eq!(l("fd00:3::9"), Some("v6default"));
        assert_eq!(f.len(), 6);
        assert_eq!(f.iter().count(), 6);
    }

    #[test]
    fn prefixes_parse_and_normalise() {
        assert_eq!(p("10.0.2.9/24").to_string(), "10.0.2.0/24");
        assert!("10.0.0.0/33"
            .parse::<Prefix>()
            .unwrap_err()
            .contains("longer than 32"));
        assert!("10.0.0/8".parse::<Prefix>().is_err());
        assert!("10.0.0.0".parse::<Prefix>().is_err());
        assert!(p("10.0.0.0/8").overlaps(&p("10.1.0.0/16")));
        assert!(!p("10.0.0.0/16").overlaps(&p("10.1.0.0/16")));
        assert!(!p("10.0.0.0/8").overlaps(&p("fd00::/8")));
    }

    proptest! {
        #[test]
        fn agrees_with_a_linear_scan(routes in proptest::collection::vec((any::<u32>(), 0u8..=32), 1..40),
                                     probes in proptest::collection::vec(any::<u32>(), 50)) {
            let mut f = Fib::new();
            let mut list = Vec::new();
            for (i, (a, l)) in routes.iter().enumerate() {
                let pre = Prefix::new(IpAddr::V4(Ipv4Addr::from(*a)), *l).unwrap();
                f.insert(pre, i);
                list.retain(|(q, _): &(Prefix, usize)| *q != pre);
                list.push((pre, i));
            }
            for a in probes {
                let ip = IpAddr::V4(Ipv4Addr::from(a));
                let best = list.iter().filter(|(q, _)| q.contains(ip)).max_by_key(|(q, _)| q.len).map(|(_, v)| *v);
                prop_assert_eq!(f.lookup(ip).map(|(_, v)| *v), best);
            }
        }
    }
}
