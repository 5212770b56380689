//! Dynamic addresses (IPAM): what `Logical_Switch_Port.dynamic_addresses` should hold for
//! every port whose `addresses` asks for one (`"dynamic"`, `"MAC dynamic"`, `"dynamic IP4"`,
//! `"dynamic IP6"`, `"dynamic IP4 IP6"`), with the semantics of ovn-northd 23.03
//! (`build_ipam`, northd/ipam.c). Pure: [`plan`] reads NB and a MAC prefix and returns the
//! column writes; the daemon sends them and the compile reads the column back
//! (`topo::lsp_port` appends it to the port's addresses).
//!
//! What it does, per run:
//! - Each switch's pool: IPv4 from `other_config:subnet` (network + 1 is taken, the broadcast
//!   address is never given) minus `exclude_ips` (`A`, `A..B`, clamped to the subnet), IPv6
//!   from `ipv6_prefix` (a /64; the address is the prefix plus the MAC's EUI-64), or
//!   `mac_only=true` (honoured only when neither `subnet` nor `ipv6_prefix` is set, even to
//!   a bad value, as ovn-northd does). A switch with none of these clears the column of all
//!   its ports.
//! - Taken first: every static address of every switch port (its MAC when it has the
//!   prefix, its IPv4s in its switch's pool), every router port's MAC, and a router port's
//!   IPv4s in the pool of the switch whose `router` port faces it (when that switch sets
//!   `subnet`).
//! - Then, switch by switch (by name) and port by port (by row UUID, NB's set order), an
//!   existing `dynamic_addresses` is kept part by part when still valid: a MAC with the
//!   prefix (or the static MAC asked for), an IPv4 inside the pool and not taken (excluded,
//!   static, or kept by an earlier port), an IPv6 asked for or, for a dynamic MAC, unchanged
//!   (a `"MAC dynamic"` port's IPv6 is recomputed, to the same EUI-64). Kept parts are taken.
//! - Then the ports that need something new, in the same order: the lowest free IPv4 of the
//!   pool; a MAC `prefix:xx:xx:xx` whose low 24 bits are the IPv4's low 24 bits plus one (or
//!   1 without IPv4), the next free one when taken (the MAC space is global to NB); the IPv6
//!   by EUI-64 from the MAC. Written as `"MAC [IP4] [IP6]"`.
//! - A port with no dynamic entry (any more) has its column cleared; only the first dynamic
//!   entry of a port counts.
//!
//! What it does not do: ports facing a router (`type=router` naming an existing router
//! port) and ports whose name another port row shares (ovn-northd keeps whichever its hash
//! finds; we leave them alone) get nothing and keep their column; ovn-northd's visiting
//! order of switches is its hash order, ours is by name, so allocations for several new
//! ports in one run may differ (one port per run, as `ovn-nbctl --wait` gives, is equal).
//! `exclude_ips` words that are not dotted IPv4 addresses end the list (ovn-northd's lexer
//! would read a bare integer as an address). Diagnostics about unusable options come from
//! [`diagnose`], which the compile calls; [`plan`] skips what it cannot use.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::{Ipv4Addr, Ipv6Addr};

use hf_model::NbSnapshot;
use hf_model::nb;
use uuid::Uuid;

use crate::addr::{LportAddresses, Mac};
use crate::diag::Diags;

/// The MAC space below the prefix (24 bits).
const MAC_SPACE: u64 = 0xff_ffff;

/// What a dynamic `addresses` entry asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// `"MAC dynamic"`: this MAC.
    pub mac: Option<Mac>,
    /// `"dynamic IP4 ..."`: this IPv4.
    pub ip4: Option<Ipv4Addr>,
    /// `"dynamic [IP4] IP6"`: this IPv6.
    pub ip6: Option<Ipv6Addr>,
}

/// Parses a dynamic `addresses` entry (`"dynamic"`, `"MAC dynamic"`, `"dynamic IP4"`,
/// `"dynamic IP6"`, `"dynamic IP4 IP6"`); `None` for anything else.
pub fn request(entry: &str) -> Option<Request> {
    if !entry.contains("dynamic") {
        return None;
    }
    let w: Vec<&str> = entry.split_whitespace().collect();
    let ip4 = |s: &str| s.parse::<Ipv4Addr>().ok();
    let ip6 = |s: &str| s.parse::<Ipv6Addr>().ok();
    let mut r = Request::default();
    match w.as_slice() {
        ["dynamic"] => {}
        [m, "dynamic"] => r.mac = Some(Mac::parse(m)?),
        ["dynamic", a] => match (ip4(a), ip6(a)) {
            (Some(a), _) => r.ip4 = Some(a),
            (None, Some(b)) => r.ip6 = Some(b),
            _ => return None,
        },
        ["dynamic", a, b] => {
            r.ip4 = Some(ip4(a)?);
            r.ip6 = Some(ip6(b)?);
        }
        _ => return None,
    }
    Some(r)
}

/// Whether `entry` is a dynamic `addresses` entry (see [`request`]).
pub fn is_dynamic(entry: &str) -> bool {
    request(entry).is_some()
}

/// A switch's IPv4 pool: `start` (network + 1) and `total` addresses after the network
/// (the last is the broadcast address, never given), with the taken ones.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Pool4 {
    start: u32,
    total: u32,
    /// Taken offsets from `start`, as disjoint half-open ranges `begin → end`.
    taken: BTreeMap<u32, u32>,
}

impl Pool4 {
    fn new(start: u32, total: u32) -> Pool4 {
        let mut p = Pool4 {
            start,
            total,
            taken: BTreeMap::new(),
        };
        p.take_range(0, 1);
        p
    }

    fn is_taken(&self, i: u32) -> bool {
        self.taken
            .range(..=i)
            .next_back()
            .is_some_and(|(_, e)| i < *e)
    }

    /// Takes offsets `[b, e)` (merged with their neighbours).
    fn take_range(&mut self, mut b: u32, mut e: u32) {
        if e <= b {
            return;
        }
        if let Some((&pb, &pe)) = self.taken.range(..=b).next_back()
            && pe >= b
        {
            b = pb;
            e = e.max(pe);
        }
        let inside: Vec<(u32, u32)> = self.taken.range(b..=e).map(|(k, v)| (*k, *v)).collect();
        for (k, v) in inside {
            self.taken.remove(&k);
            e = e.max(v);
        }
        self.taken.insert(b, e);
    }

    /// Takes `ip` when it is in the pool (ovn-northd's `ipam_insert_ip`).
    fn take(&mut self, ip: u32) {
        if ip >= self.start && u64::from(ip) < u64::from(self.start) + u64::from(self.total) {
            let i = ip - self.start;
            self.take_range(i, i + 1);
        }
    }

    /// The lowest free address before the broadcast one.
    fn first_free(&self) -> Option<u32> {
        let limit = self.total.checked_sub(1)?;
        let mut i = 0u32;
        for (b, e) in &self.taken {
            if *b > i {
                break;
            }
            i = i.max(*e);
        }
        (i < limit).then(|| self.start + i)
    }
}

/// `subnet` and `exclude_ips`, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Subnet4 {
    /// Network + 1.
    start: u32,
    /// Addresses after the network (the last is the broadcast address).
    total: u32,
    /// `exclude_ips` ranges (inclusive, clamped to the subnet).
    excluded: Vec<(u32, u32)>,
}

/// A switch's IPAM configuration, parsed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SwitchConfig {
    /// `subnet` and `exclude_ips`.
    ipv4: Option<Subnet4>,
    /// `ipv6_prefix`, first 64 bits.
    ipv6_prefix: Option<Ipv6Addr>,
    /// `mac_only`, when neither of the others is set.
    mac_only: bool,
    /// `subnet` is set (to anything): router ports facing the switch take their IPv4s.
    subnet_set: bool,
}

impl SwitchConfig {
    /// Parses `other_config`; each unusable option is a problem (what, and what is done).
    pub fn parse(oc: &hf_model::SmallMap<String, String>) -> (SwitchConfig, Vec<String>) {
        let mut problems = Vec::new();
        let mut c = SwitchConfig {
            subnet_set: oc.get("subnet").is_some(),
            ..Default::default()
        };
        if let Some(s) = oc.get("subnet") {
            match parse_subnet(s) {
                Ok((net, len)) => {
                    let host = u32::MAX.checked_shr(len).unwrap_or(0);
                    let start = (net & !host).wrapping_add(1);
                    let mut ex = Vec::new();
                    if let Some(x) = oc.get("exclude_ips") {
                        let (ranges, err) = parse_excludes(x, start, host);
                        ex = ranges;
                        if let Some(e) = err {
                            problems.push(format!(
                                "other_config:exclude_ips {x:?}: {e}; the addresses before it are excluded, the rest are not"
                            ));
                        }
                    }
                    c.ipv4 = Some(Subnet4 {
                        start,
                        total: host,
                        excluded: ex,
                    });
                }
                Err(e) => problems.push(format!(
                    "other_config:subnet {s:?}: {e}; no IPv4 addresses are assigned on this switch"
                )),
            }
        }
        if let Some(p) = oc.get("ipv6_prefix") {
            match parse_ipv6_prefix(p) {
                Ok(a) => c.ipv6_prefix = Some(a),
                Err(e) => problems.push(format!(
                    "other_config:ipv6_prefix {p:?}: {e}; no IPv6 addresses are assigned on this switch"
                )),
            }
        }
        let mac_only = oc
            .get("mac_only")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        if oc.get("subnet").is_none() && oc.get("ipv6_prefix").is_none() {
            c.mac_only = mac_only;
        } else if mac_only && !c.enabled() {
            problems.push(
                "other_config:mac_only=true is ignored because subnet or ipv6_prefix is set (to a value that cannot be used): no MAC is assigned either".into(),
            );
        }
        (c, problems)
    }

    /// Whether the switch assigns anything.
    pub fn enabled(&self) -> bool {
        self.ipv4.is_some() || self.ipv6_prefix.is_some() || self.mac_only
    }

    fn pool(&self) -> Option<Pool4> {
        let s = self.ipv4.as_ref()?;
        let mut p = Pool4::new(s.start, s.total);
        for (a, b) in &s.excluded {
            p.take_range(a - s.start, b - s.start + 1);
        }
        Some(p)
    }
}

/// `A.B.C.D/LEN` or `A.B.C.D/MASK` (a CIDR mask, not /32): (address, prefix length).
fn parse_subnet(s: &str) -> Result<(u32, u32), String> {
    let (a, m) = s
        .trim()
        .split_once('/')
        .ok_or("not IPv4/PLEN (a subnet needs a prefix length below 32)")?;
    let ip: Ipv4Addr = a
        .parse()
        .map_err(|_| format!("{a:?} is not an IPv4 address"))?;
    let len = match m.parse::<u32>() {
        Ok(l) if l <= 32 => l,
        Ok(_) => return Err(format!("prefix length {m} is above 32")),
        Err(_) => {
            let mask: Ipv4Addr = m
                .parse()
                .map_err(|_| format!("{m:?} is neither a prefix length nor a mask"))?;
            let mask = u32::from(mask);
            if mask.leading_ones() + mask.trailing_zeros() != 32 {
                return Err(format!("{m:?} is not a CIDR mask"));
            }
            mask.leading_ones()
        }
    };
    if len == 32 {
        return Err("a /32 holds no address to assign".into());
    }
    Ok((u32::from(ip), len))
}

/// `exclude_ips`: whitespace-separated `A` or `A..B`, clamped to the pool (`start`, `total`
/// addresses). Returns the ranges (inclusive) up to the first word that does not parse, and
/// the first error (a word that does not parse stops the list; a range outside the subnet
/// is only reported).
fn parse_excludes(s: &str, start: u32, total: u32) -> (Vec<(u32, u32)>, Option<String>) {
    let mut out = Vec::new();
    let mut err = None;
    let end_of_pool = u64::from(start) + u64::from(total);
    for w in s.split_whitespace() {
        let (a, b) = match w.split_once("..") {
            Some((a, b)) => (a, Some(b)),
            None => (w, None),
        };
        let Ok(a) = a.parse::<Ipv4Addr>() else {
            err.get_or_insert(format!("{a:?} is not an IPv4 address"));
            break;
        };
        let b = match b {
            None => a,
            Some(b) => match b.parse::<Ipv4Addr>() {
                Ok(b) => b,
                Err(_) => {
                    err.get_or_insert(format!("range end {b:?} is not an IPv4 address"));
                    break;
                }
            },
        };
        let lo = u64::from(u32::from(a)).max(u64::from(start));
        let hi = (u64::from(u32::from(b)) + 1).min(end_of_pool);
        if hi > lo {
            // Both fit u32: lo >= start, hi <= start + total <= 2^32.
            out.push((lo as u32, (hi - 1) as u32));
        } else {
            err.get_or_insert(format!("{w} is not in the subnet"));
        }
    }
    (out, err)
}

/// `ipv6_prefix`: an address, or one with `/64` (or a 64-bit mask); the first 64 bits.
fn parse_ipv6_prefix(s: &str) -> Result<Ipv6Addr, String> {
    let s = s.trim();
    let (a, m) = match s.split_once('/') {
        Some((a, m)) => (a, Some(m)),
        None => (s, None),
    };
    let ip: Ipv6Addr = a
        .parse()
        .map_err(|_| format!("{a:?} is not an IPv6 address"))?;
    if let Some(m) = m {
        let len = match m.parse::<u32>() {
            Ok(l) => l,
            Err(_) => match m.parse::<Ipv6Addr>() {
                Ok(mask) => {
                    let v = u128::from(mask);
                    if v.leading_ones() + v.trailing_zeros() != 128 {
                        return Err(format!("{m:?} is not a CIDR mask"));
                    }
                    v.leading_ones()
                }
                Err(_) => return Err(format!("{m:?} is neither a prefix length nor a mask")),
            },
        };
        if len != 64 {
            return Err("must be /64".into());
        }
    }
    Ok(Ipv6Addr::from(u128::from(ip) & !(u64::MAX as u128)))
}

/// The IPv6 address of `mac` in `prefix` (EUI-64).
pub fn eui64(prefix: Ipv6Addr, mac: Mac) -> Ipv6Addr {
    let o = mac.octets();
    let low = u64::from_be_bytes([o[0] ^ 2, o[1], o[2], 0xff, 0xfe, o[3], o[4], o[5]]);
    Ipv6Addr::from((u128::from(prefix) & !(u64::MAX as u128)) | u128::from(low))
}

/// The `dynamic_addresses` text: `"MAC [IP4] [IP6]"`.
pub fn format(mac: Mac, ip4: Option<Ipv4Addr>, ip6: Option<Ipv6Addr>) -> String {
    let mut s = mac.to_string();
    if let Some(a) = ip4 {
        s.push_str(&format!(" {a}"));
    }
    if let Some(a) = ip6 {
        s.push_str(&format!(" {a}"));
    }
    s
}

/// The MACs assigned so far (those with the prefix only, as ovn-northd's MAC table).
struct Macs {
    prefix: u64,
    used: HashSet<u64>,
}

impl Macs {
    fn ours(&self, m: Mac) -> bool {
        (m.0 ^ self.prefix) >> 24 == 0
    }

    fn take(&mut self, m: Mac) {
        if self.ours(m) {
            self.used.insert(m.0);
        }
    }

    /// The first free MAC from the IPv4's low 24 bits plus one (1 without one).
    fn next(&self, ip4: Option<Ipv4Addr>) -> Mac {
        let base = ip4.map_or(0, |a| u64::from(u32::from(a))) & MAC_SPACE;
        let mut m = 0;
        for i in 0..MAC_SPACE - 1 {
            m = self.prefix | (((base + i) % (MAC_SPACE - 1)) + 1);
            if !self.used.contains(&m) {
                break;
            }
        }
        Mac(m)
    }
}

/// What one part of a port's dynamic addresses does this run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part<T> {
    /// Kept as the column has it (or nothing).
    Keep,
    /// Dropped (the switch no longer assigns it).
    Remove,
    /// Set to what the entry asks for.
    Static(T),
    /// Assigned anew.
    Dynamic,
}

/// One port with a dynamic entry.
struct Update<'a> {
    lsp: &'a nb::LogicalSwitchPort,
    sw: usize,
    cur: LportAddresses,
    mac: Part<Mac>,
    ip4: Part<Ipv4Addr>,
    ip6: Part<Ipv6Addr>,
}

/// The column writes one run decides: LSP row → new `dynamic_addresses` (`None` clears).
/// Only rows whose column changes are listed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Row → value.
    pub writes: BTreeMap<Uuid, Option<String>>,
}

/// What ovn-northd 23.03's `build_ipam` would write for `nb` with MAC prefix `prefix` (the
/// three high bytes). See the module documentation.
pub fn plan(nb: &NbSnapshot, prefix: [u8; 3]) -> Plan {
    let mut out = Plan::default();
    let mut switches: Vec<&nb::LogicalSwitch> = nb.logical_switch().values().collect();
    // Nothing to do without a dynamic entry or a column to clear: the common case is cheap.
    let any = nb
        .logical_switch_port()
        .values()
        .any(|p| p.dynamic_addresses.is_some() || p.addresses.iter().any(|a| is_dynamic(a)));
    if !any {
        return out;
    }
    switches.sort_by(|a, b| a.name.cmp(&b.name).then(a.uuid.cmp(&b.uuid)));
    let configs: Vec<SwitchConfig> = switches
        .iter()
        .map(|s| SwitchConfig::parse(&s.other_config).0)
        .collect();
    let mut pools: Vec<Option<Pool4>> = configs.iter().map(SwitchConfig::pool).collect();
    let mut macs = Macs {
        prefix: u64::from_be_bytes([0, 0, prefix[0], prefix[1], prefix[2], 0, 0, 0]),
        used: HashSet::new(),
    };
    // Names more than one port row has: left alone.
    let mut names: HashMap<&str, usize> = HashMap::new();
    for p in nb.logical_switch_port().values() {
        *names.entry(p.name.as_str()).or_default() += 1;
    }
    for p in nb.logical_router_port().values() {
        *names.entry(p.name.as_str()).or_default() += 1;
    }
    let lrp_names: BTreeSet<&str> = nb
        .logical_router_port()
        .values()
        .map(|p| p.name.as_str())
        .collect();
    // Static addresses: MACs everywhere, IPv4s in their switch's pool.
    let mut facing: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, s) in switches.iter().enumerate() {
        for lsp in s.ports.iter().filter_map(|r| nb.get(*r)) {
            for a in &lsp.addresses {
                if a == "unknown" || a == "router" || is_dynamic(a) {
                    continue;
                }
                if let Ok(x) = LportAddresses::parse(a) {
                    if let Some(m) = x.mac {
                        macs.take(m);
                    }
                    if let Some(pool) = &mut pools[i] {
                        for n in &x.ipv4 {
                            pool.take(u32::from(n.addr()));
                        }
                    }
                }
            }
            if lsp.type_ == "router"
                && let Some(rp) = lsp.options.get("router-port")
            {
                facing.entry(rp.as_str()).or_default().push(i);
            }
        }
    }
    for lrp in nb.logical_router_port().values() {
        let Some(m) = Mac::parse(&lrp.mac) else {
            continue;
        };
        macs.take(m);
        for &i in facing.get(lrp.name.as_str()).into_iter().flatten() {
            if !configs[i].subnet_set {
                continue;
            }
            if let Some(pool) = &mut pools[i] {
                for n in &lrp.networks {
                    if let Some(ipnet::IpNet::V4(v)) = crate::addr::parse_net(n) {
                        pool.take(u32::from(v.addr()));
                    }
                }
            }
        }
    }
    // Existing assignments kept, part by part; the rest queued.
    let mut queue: Vec<Update<'_>> = Vec::new();
    let set = |out: &mut Plan, lsp: &nb::LogicalSwitchPort, v: Option<String>| {
        if lsp.dynamic_addresses != v {
            out.writes.insert(lsp.uuid, v);
        }
    };
    for (i, s) in switches.iter().enumerate() {
        let mut lsps: Vec<&nb::LogicalSwitchPort> =
            s.ports.iter().filter_map(|r| nb.get(*r)).collect();
        lsps.sort_by_key(|p| p.uuid);
        if !configs[i].enabled() {
            for lsp in lsps {
                set(&mut out, lsp, None);
            }
            continue;
        }
        for lsp in lsps {
            let faces_router = lsp.type_ == "router"
                && lsp
                    .options
                    .get("router-port")
                    .is_some_and(|r| lrp_names.contains(r.as_str()));
            if faces_router || names.get(lsp.name.as_str()).copied().unwrap_or(0) > 1 {
                continue;
            }
            let Some(req) = lsp.addresses.iter().find_map(|a| request(a)) else {
                set(&mut out, lsp, None);
                continue;
            };
            let mut u = Update {
                lsp,
                sw: i,
                cur: LportAddresses::default(),
                mac: Part::Dynamic,
                ip4: Part::Keep,
                ip6: Part::Keep,
            };
            match lsp.dynamic_addresses.as_deref() {
                Some(cur) => {
                    u.cur = LportAddresses::parse(cur).unwrap_or_default();
                    check(&mut u, &req, &configs[i], pools[i].as_ref(), &macs);
                    if u.mac == Part::Keep
                        && let Some(m) = u.cur.mac
                    {
                        macs.take(m);
                    }
                    if u.ip4 == Part::Keep
                        && let (Some(p), Some(a)) = (&mut pools[i], u.cur.ipv4.first())
                    {
                        p.take(u32::from(a.addr()));
                    }
                    if u.mac != Part::Keep || u.ip4 != Part::Keep || u.ip6 != Part::Keep {
                        queue.push(u);
                    }
                }
                None => {
                    fresh(&mut u, &req, &configs[i]);
                    queue.push(u);
                }
            }
        }
    }
    for u in queue {
        let pool = &mut pools[u.sw];
        let ip4 = match u.ip4 {
            Part::Keep => u.cur.ipv4.first().map(|n| n.addr()),
            Part::Remove => None,
            Part::Static(a) => Some(a),
            Part::Dynamic => pool
                .as_ref()
                .and_then(Pool4::first_free)
                .map(Ipv4Addr::from),
        };
        let mac = match u.mac {
            Part::Keep => u.cur.mac.unwrap_or(Mac(0)),
            Part::Static(m) => m,
            Part::Remove | Part::Dynamic => macs.next(ip4),
        };
        let ip6 = match (u.ip6, configs[u.sw].ipv6_prefix) {
            (Part::Keep, _) => u.cur.ipv6.first().map(|n| n.addr()),
            (Part::Remove, _) => None,
            (Part::Static(a), _) => Some(a),
            (Part::Dynamic, Some(p)) => Some(eui64(p, mac)),
            (Part::Dynamic, None) => None,
        };
        macs.take(mac);
        if let (Some(p), Some(a)) = (pool, ip4) {
            p.take(u32::from(a));
        }
        let ip4 = ip4.filter(|a| u32::from(*a) != 0);
        let ip6 = ip6.filter(|a| !a.is_unspecified());
        set(&mut out, u.lsp, Some(format(mac, ip4, ip6)));
    }
    out
}

/// A port without assignment: what to assign (ovn-northd's `set_dynamic_updates`).
fn fresh(u: &mut Update<'_>, req: &Request, c: &SwitchConfig) {
    u.mac = req.mac.map_or(Part::Dynamic, Part::Static);
    u.ip4 = match req.ip4 {
        Some(a) => Part::Static(a),
        None if c.ipv4.is_some() => Part::Dynamic,
        None => Part::Keep,
    };
    u.ip6 = match req.ip6 {
        Some(a) => Part::Static(a),
        None if c.ipv6_prefix.is_some() => Part::Dynamic,
        None => Part::Keep,
    };
}

/// A port with an assignment: which parts change (ovn-northd's
/// `dynamic_addresses_check_for_updates`).
fn check(u: &mut Update<'_>, req: &Request, c: &SwitchConfig, pool: Option<&Pool4>, macs: &Macs) {
    let cur = &u.cur;
    u.mac = match (req.mac, cur.mac) {
        (Some(m), Some(c)) if m == c => Part::Keep,
        (Some(m), _) => Part::Static(m),
        (None, Some(c)) if macs.ours(c) => Part::Keep,
        (None, _) => Part::Dynamic,
    };
    u.ip4 = match (pool, cur.ipv4.first()) {
        (None, Some(_)) => Part::Remove,
        (None, None) => Part::Keep,
        (Some(_), None) => Part::Dynamic,
        (Some(p), Some(n)) => {
            let ip = u32::from(n.addr());
            let bad = ip < p.start || {
                let i = ip - p.start;
                i >= p.total.saturating_sub(1) || p.is_taken(i)
            };
            if bad {
                Part::Dynamic
            } else {
                match req.ip4 {
                    Some(want) => {
                        let w = u32::from(want);
                        let i = w.wrapping_sub(p.start);
                        if w < p.start || i > p.total || p.is_taken(i) {
                            Part::Dynamic
                        } else if want != n.addr() {
                            Part::Static(want)
                        } else {
                            Part::Keep
                        }
                    }
                    None => Part::Keep,
                }
            }
        }
    };
    u.ip6 = match c.ipv6_prefix {
        None if cur.ipv6.is_empty() => Part::Keep,
        None => Part::Remove,
        Some(_) if cur.ipv6.is_empty() || req.mac.is_some() => Part::Dynamic,
        Some(prefix) => match req.ip6 {
            Some(want) => {
                let p = u128::from(prefix);
                if u128::from(want) & p != p {
                    Part::Dynamic
                } else if cur.ipv6.first().map(|n| n.addr()) != Some(want) {
                    Part::Static(want)
                } else {
                    Part::Keep
                }
            }
            None if u.mac != Part::Keep => Part::Dynamic,
            None => Part::Keep,
        },
    };
}

/// The diagnostics about dynamic addresses: each switch's unusable IPAM options, and ports
/// whose dynamic entry gets nothing (a switch that assigns nothing, a second dynamic entry).
/// Called by [`crate::topo::Topo::build`].
pub fn diagnose(ls: &nb::LogicalSwitch, diags: &mut Diags) {
    let (_, problems) = SwitchConfig::parse(&ls.other_config);
    for p in problems {
        diags.push("Logical_Switch", ls.uuid, &ls.name, p);
    }
}

/// The diagnostics about one port's dynamic entries on a switch configured as `ls`.
pub fn diagnose_port(
    lsp: &nb::LogicalSwitchPort,
    ls: Option<&nb::LogicalSwitch>,
    diags: &mut Diags,
) {
    let n = lsp.addresses.iter().filter(|a| is_dynamic(a)).count();
    if n == 0 {
        return;
    }
    if n > 1 {
        diags.push(
            "Logical_Switch_Port",
            lsp.uuid,
            &lsp.name,
            "more than one dynamic entry in addresses; only the first (in NB's order) is assigned",
        );
    }
    if let Some(ls) = ls
        && !SwitchConfig::parse(&ls.other_config).0.enabled()
    {
        diags.push(
            "Logical_Switch_Port",
            lsp.uuid,
            &lsp.name,
            format!(
                "addresses asks for dynamic addresses but switch {:?} sets none of other_config:subnet, ipv6_prefix, mac_only: nothing is assigned",
                ls.name
            ),
        );
    }
}

#[cfg(test)]
mod tests;
