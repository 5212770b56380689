//! A packet oracle that is the real datapath (issue 21): holdfast's chassis against real
//! `ovn-controller` 23.03 programming a real `ovs-vswitchd` userspace datapath, byte for byte.
//!
//! # What it compares
//!
//! For each seeded topology of `trace_parity/topo.rs` (switches, VIFs with port security, a
//! distributed router with a gateway port or a gateway router, an external switch with a
//! localnet port, SNAT/DNAT/`dnat_and_snat`, load balancers, stateful ACLs with allow-related,
//! drop and reject, routes, policies), real `ovn-northd` fills the SB; ONE real chassis `gw1`
//! (`datapath_oracle/real.rs`: every VIF a `netdev-dummy` interface on `br-int`, claimed by
//! real `ovn-controller`; the gateway router's `options:chassis` and the gateway port's
//! highest-priority gateway chassis name it; the localnet port reaches the dummy interface
//! `phys0` on `br-phys` through `ovn-bridge-mappings`) runs the flows, with OVS's own
//! userspace conntrack. Every dummy interface writes what it transmits to a pcap
//! (`options:tx_pcap`). The same SB goes through holdfast's chassis in process
//! (`datapath_oracle/ours.rs`: `translate` for `gw1`, `program_msg`, `Datapath::install`, the
//! same ports). Packets enter with `netdev-dummy/receive` on the real side and
//! `handle_port_frame` on ours; the frames each interface transmits, in order, must be equal
//! byte for byte, after the allowed differences ([`ALLOWED_DIFFERENCES`]).
//!
//! Flows (`datapath_oracle/flows.rs`) are multi-packet conversations with real conntrack: TCP
//! (SYN, SYN-ACK, ACK, data both ways, FIN from the client or RST from the server), UDP
//! request/reply/request, ICMP echo/reply/echo, over L2 on a switch, L3 through the router,
//! stateful ACLs (allow-related, drop, reject: ICMP unreachable for UDP, TCP RST), SNAT out
//! and the replies back in, DNAT and floating IPs in, load-balancer VIPs with one backend,
//! traffic from outside straight to a VIF (and a to-lport TCP reject there, the RST crossing
//! the router and its SNAT), TTL 1, pings of router addresses and ARP for them; in topologies
//! with IPv6 the same over IPv6 (`*-v6` classes): L2 and L3 flows, out through the default
//! route `::/0` and back, the IPv6 floating IP in, outside straight to a VIF, the to-lport
//! drop of `pg_web`, hop limit 1 (the router's ICMPv6 time exceeded) and ICMPv6 echo to the
//! router's addresses. A server
//! answers from the interface where the client's packet came out, with a packet built from
//! that packet (so after SNAT it replies to the translated address and port). A flow stops at
//! its first difference, or when its packet does not come out at exactly one other interface.
//!
//! MAC resolution: no pre-seeded MAC_Binding. Every next hop the flows use is a logical port
//! with its address in NB (VIFs, the external gateway and host on the external switch), so
//! both sides resolve it from `lr_in_arp_resolve`'s static flows.
//!
//! # What it does not compare
//!
//! Neighbour discovery (next hops are resolved statically, as for ARP), ECMP routes and load balancers with
//! two backends (the choice is a hash in each: not comparable byte for byte), several
//! chassis and tunnels, DHCP/DNS/RA, timing (conntrack expiry), and gratuitous ARPs, which
//! ovn-controller sends by itself for ports on switches with a localnet port (left out on
//! both sides, `wire::is_garp`).
//!
//! # Differences
//!
//! - Allowed field differences ([`ALLOWED_DIFFERENCES`]): none. The packets the pipelines
//!   generate (TCP resets, ICMP errors and echo replies, ARP replies) come out byte for byte
//!   equal, IP ID and checksums included.
//! - Known differences ([`KNOWN_DIFFERENCES`]), counted by name and matched exactly (any other
//!   difference in the same step fails): `reject-rst-snat`, a reject's TCP reset crossing a
//!   distributed router's SNAT (OVS's userspace conntrack starts a connection from a lone
//!   RST|ACK and SNATs it; Linux's conntrack, which holdfast follows, does not).
//! - Oracle limits ([`KNOWN_ORACLE_LIMITS`]): OVS 3.1.0's userspace datapath aborts on a later
//!   packet once pinctrl's TCP reset for a reject went through it, so both sides start again
//!   after every reject flow; a flow during which ovs-vswitchd still aborts with that
//!   signature is listed, not compared, and any other abort fails.
//!
//! What the oracle found and holdfast fixed: reject's TCP reset leaves with TTL 63 as pinctrl
//! builds it (`hf_wire::reply::tcp_reset_reject`); a gateway router's east-west SNAT made the
//! destination port's conntrack commit collide with the SNAT zone's claim, so every reply was
//! invalid and dropped (`hf-conntrack`, test `r21_a_snated_connection_commits_again_in_another_zone`).
//!
//! Environment: `HF_ORACLE_TOPOLOGIES` (default 6), `HF_ORACLE_FLOWS` (per topology, default
//! 200), `HF_ORACLE_SEED` (first seed, default 21000); debugging: `HF_ORACLE_VERBOSE` (every
//! packet), `HF_ORACLE_TRACE=TEXT` (holdfast's trace of each packet of the flows whose
//! description contains TEXT), `HF_ORACLE_KEEP=SECS` (keep the first failure's daemons up). A
//! failure prints the seed, the flow, the packet, both sides' outputs decoded, holdfast's zones,
//! conntrack and trace, and the real datapath's `ofproto/trace` of the packet.
// Integration tests are I/O shells: they read the clock and spawn processes.
#![allow(clippy::disallowed_methods, clippy::unwrap_used)]

mod common;

#[path = "datapath_oracle/flows.rs"]
mod flows;
#[path = "datapath_oracle/ours.rs"]
mod ours;
#[path = "datapath_oracle/real.rs"]
mod real;
#[allow(dead_code)]
#[path = "trace_parity/topo.rs"]
mod topo;
// `load_sb`: the SB replica (the rest of the module is trace_parity's).
#[allow(dead_code)]
#[path = "trace_parity/flows.rs"]
mod tp_flows;
#[path = "datapath_oracle/wire.rs"]
mod wire;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hf_testkit::ovn::{CENTRAL_TOOLS, CHASSIS_TOOLS};

use flows::Role;
use ours::OurSide;
use real::RealSide;
use topo::Topology;
use wire::Frame;

/// Fields allowed to differ between the real datapath's output and holdfast's, each with
/// the reason, masked by [`normalize`]. None so far: everything (output interfaces, order,
/// drops, addresses, ports, TTLs, IP IDs, checksums, payloads) must be equal.
pub const ALLOWED_DIFFERENCES: &[(&str, &str)] = &[];

/// Where the real datapath cannot be an oracle: (a signature in ovs-vswitchd's log when it
/// aborts, why). A flow during which ovs-vswitchd aborts with one of these is counted and
/// listed, not compared (both sides start again); an abort with any other signature fails.
pub const KNOWN_ORACLE_LIMITS: &[(&str, &str)] = &[(
    "assertion conn->conn_type == CT_CONN_TYPE_DEFAULT failed in conn_update_state()",
    "OVS 3.1.0's userspace datapath aborts (lib/conntrack.c:1063) on a packet sent after \
     pinctrl's TCP reset for a reject ACL went through it: so both sides start again after \
     every reject flow (Flow::restart_after), and a flow it aborts during is listed, not compared",
)];

/// Differences explained and named, each with why (the test counts them by name; any other
/// difference fails):
///
/// - `reject-rst-snat`: a reject's TCP reset (RST|ACK, no connection of its own) crossing a
///   distributed router's gateway port whose SNAT covers the rejecting port's subnet. Real OVS
///   3.1's userspace conntrack creates a connection from a lone RST|ACK (`tcp_valid_new`
///   accepts it) and SNATs it; holdfast's conntrack follows Linux's, where a RST cannot start
///   a connection (`sNO -> sIV`), so `ct_snat` finds it invalid and leaves it as it is, which
///   is what the kernel datapath most OVN deployments run does. ovn-trace, assuming `ct.new`,
///   SNATs it. On a gateway router neither side SNATs it (the inbound SYN is tracked in the
///   router's zones, so the reset is a reply). Only the source address (and checksums) may
///   differ; the port, addresses, flags and TTL must be equal.
pub const KNOWN_DIFFERENCES: &[(&str, &str)] = &[(
    "reject-rst-snat",
    "a lone TCP RST|ACK creates a connection (and is SNATed) in OVS's userspace conntrack, not \
     in Linux's, which hf-conntrack follows",
)];

/// The name of the known difference (see [`KNOWN_DIFFERENCES`]) that explains why `real` and
/// `ours` differ, if one does.
fn known_difference(real: &Outputs, ours: &Outputs) -> Option<&'static str> {
    if !real.keys().eq(ours.keys()) {
        return None;
    }
    let mut explained = false;
    for (port, rf) in real {
        let of = &ours[port];
        if rf.len() != of.len() {
            return None;
        }
        for (r, o) in rf.iter().zip(of) {
            if r == o {
                continue;
            }
            let (Some(rp), Some(op)) = (Frame::parse(r), Frame::parse(o)) else {
                return None;
            };
            let (Some(ri), Some(oi)) = (rp.ip4(), op.ip4()) else {
                return None;
            };
            let wire::L4::Tcp { flags, .. } = oi.l4 else {
                return None;
            };
            if flags & wire::TCP_RST == 0 || wire::with_ip4_src(o, ri.src).as_ref() != Some(r) {
                return None;
            }
            explained = true;
        }
    }
    explained.then_some(KNOWN_DIFFERENCES[0].0)
}

type Outputs = BTreeMap<String, Vec<Vec<u8>>>;

/// The outputs as compared: the allowed differences masked.
fn normalize(o: &Outputs) -> Outputs {
    o.clone()
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The NB the oracle builds: the generator's, with one chassis (the second gateway chassis
/// left out) and a to-lport TCP reject on the port group, so a reset crosses the router.
fn oracle_nb(t: &Topology) -> Vec<Vec<String>> {
    let mut nb: Vec<Vec<String>> =
        t.nb.iter()
            .filter(|c| !c.iter().any(|a| a == "gw2"))
            .cloned()
            .collect();
    if !t.pg_web.is_empty() {
        nb.push(
            [
                "--type=port-group",
                "acl-add",
                "pg_web",
                "to-lport",
                "1003",
                "outport == @pg_web && tcp.dst == 25",
                "reject",
            ]
            .map(String::from)
            .to_vec(),
        );
    }
    nb
}

/// The logical port behind a real interface.
fn lp_of(iface: &str) -> &str {
    if iface == real::PHYS_IFACE {
        "ln-ext"
    } else {
        iface
    }
}

fn describe_outputs(o: &Outputs) -> String {
    if o.is_empty() {
        return "    (nothing: dropped)".into();
    }
    let mut s = String::new();
    for (port, frames) in o {
        for f in frames {
            s.push_str(&format!("    {port}: {}\n", wire::describe(f)));
        }
    }
    s
}

struct Figures {
    topologies: u64,
    flows: usize,
    multi: usize,
    packets: usize,
    delivered: usize,
    dropped: usize,
    per_class: BTreeMap<&'static str, (usize, usize)>,
    /// Flows stopped at a known difference, by name ([`KNOWN_DIFFERENCES`]).
    known: BTreeMap<&'static str, usize>,
    /// Flows during which real ovs-vswitchd aborted with a [`KNOWN_ORACLE_LIMITS`] signature.
    aborts: Vec<String>,
}

#[test]
fn real_datapath_differential() {
    if !common::require("datapath_oracle", &[CENTRAL_TOOLS, CHASSIS_TOOLS].concat()) {
        return;
    }
    let topologies = env_num("HF_ORACLE_TOPOLOGIES", 6);
    let per = env_num("HF_ORACLE_FLOWS", 200) as usize;
    let first = env_num("HF_ORACLE_SEED", 21000);
    let start = Instant::now();
    let mut fig = Figures {
        topologies,
        flows: 0,
        multi: 0,
        packets: 0,
        delivered: 0,
        dropped: 0,
        per_class: BTreeMap::new(),
        aborts: Vec::new(),
        known: BTreeMap::new(),
    };
    let mut failures: Vec<String> = Vec::new();
    for seed in first..first + topologies {
        run_topology(seed, per, &mut fig, &mut failures);
    }
    eprintln!(
        "datapath oracle: {} topologies, {} flows ({} multi-packet), {} packets ({} delivered, {} dropped by both), {} differences, {:.1}s",
        fig.topologies,
        fig.flows,
        fig.multi,
        fig.packets,
        fig.delivered,
        fig.dropped,
        failures.len(),
        start.elapsed().as_secs_f64()
    );
    for (c, (n, p)) in &fig.per_class {
        eprintln!("  {c:14} {n:4} flows {p:5} packets");
    }
    for (name, n) in &fig.known {
        eprintln!("  {n} flows stopped at the known difference {name} (KNOWN_DIFFERENCES)");
    }
    eprintln!(
        "  {} flows stopped because real ovs-vswitchd aborted (KNOWN_ORACLE_LIMITS); both sides were restarted after each:",
        fig.aborts.len()
    );
    for a in &fig.aborts {
        eprintln!("  {a}");
    }
    for f in &failures {
        eprintln!("  differs: {}", f.lines().next().unwrap_or_default());
    }
    assert!(
        failures.is_empty(),
        "{} flows differ:\n{}",
        failures.len(),
        failures
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Issue 21's acceptance: at least 6 topologies and 500 multi-packet flows by default.
    if topologies >= 6 && per >= 200 {
        assert!(fig.multi >= 500, "only {} multi-packet flows", fig.multi);
    }
}

fn run_topology(seed: u64, per: usize, fig: &mut Figures, failures: &mut Vec<String>) {
    let t = Topology::generate(seed, 0);
    let nb = oracle_nb(&t);
    let hosts = flows::hosts(&t);
    let vifs: Vec<String> = hosts.iter().map(|h| h.port.clone()).collect();
    // The gateway port's chassisredirect port is claimed too before anything is sent.
    let mut bound = vifs.clone();
    if !t.gateway_router {
        bound.push("cr-lr0-ext".into());
    }
    let mut ports: Vec<(String, String)> = vifs.iter().map(|v| (v.clone(), v.clone())).collect();
    ports.push(("ln-ext".into(), real::PHYS_IFACE.into()));
    let start = || {
        let (real, sb) = RealSide::start(&nb, &vifs, &bound);
        let ours = OurSide::start(&sb, &ports);
        (real, ours)
    };
    let (mut real, mut ours) = start();
    let flows = flows::make_flows(&t, seed, per);
    let mut ip_id: u16 = 1;
    let verbose = std::env::var_os("HF_ORACLE_VERBOSE").is_some();
    if verbose {
        eprintln!(
            "seed {seed}: gateway router {}, NAT {:?}, LBs {:?}, pg_web {:?}",
            t.gateway_router, t.nats, t.lbs, t.pg_web
        );
    }
    let mut restart = false;
    for flow in &flows {
        if std::mem::replace(&mut restart, flow.restart_after()) {
            drop(real);
            (real, ours) = start();
        }
        fig.flows += 1;
        let script = flow.script();
        // Packets of this flow compared (a flow is multi-packet when 2 or more were).
        let mut sent = 0;
        let e = fig.per_class.entry(flow.class).or_default();
        e.0 += 1;
        // The server: where the client's last packet came out, and that packet.
        let mut server: Option<(String, Frame)> = None;
        for (k, role) in script.iter().enumerate() {
            ip_id = ip_id.wrapping_add(1);
            let (port, frame) = match role {
                Role::Client => (flow.client.port.clone(), flow.client_frame(k, ip_id)),
                Role::Server => {
                    let Some((p, arrived)) = &server else { break };
                    let Some(f) = flow.server_frame(k, arrived, ip_id) else {
                        break;
                    };
                    (p.clone(), f)
                }
            };
            let bytes = frame.build();
            // Debugging aid: HF_ORACLE_TRACE=TEXT prints holdfast's trace of every packet of the
            // flows whose description contains TEXT, before it is sent.
            if let Ok(w) = std::env::var("HF_ORACLE_TRACE")
                && flow.describe().contains(&w)
            {
                eprintln!("trace of step {k}:\n{}", ours.trace(lp_of(&port), &bytes));
            }
            if verbose {
                eprintln!(
                    "seed {seed} {} step {k} into {port}: {}",
                    flow.describe(),
                    wire::describe(&bytes)
                );
            }
            let late = real.take_outputs();
            let lp = if port == real::PHYS_IFACE {
                "ln-ext"
            } else {
                port.as_str()
            };
            let ours_out = ours.send(lp, &bytes);
            let expect: usize = ours_out.values().map(Vec::len).sum();
            let real_out = real.send(&port, &bytes, expect);
            if let Some(why) = real.aborted() {
                let report = format!(
                    "seed {seed} flow {}\n  step {k} ({role:?}) into {port}: {}\n  the real datapath aborted: {why}",
                    flow.describe(),
                    wire::describe(&bytes)
                );
                if KNOWN_ORACLE_LIMITS.iter().any(|(sig, _)| why.contains(sig)) {
                    fig.aborts.push(report);
                } else {
                    failures.push(format!("--- {report}"));
                }
                // Both sides start again (fresh conntrack on each) for the next flow.
                drop(real);
                (real, ours) = start();
                break;
            }
            fig.packets += 1;
            sent += 1;
            if sent == 2 {
                fig.multi += 1;
            }
            fig.per_class.get_mut(flow.class).unwrap().1 += 1;
            let (real_n, ours_n) = (normalize(&real_out), normalize(&ours_out));
            if late.is_empty()
                && real_n != ours_n
                && let Some(name) = known_difference(&real_n, &ours_n)
            {
                *fig.known.entry(name).or_default() += 1;
                break;
            }
            if !late.is_empty() || real_n != ours_n {
                let trace = real
                    .chassis
                    .daemon("ovs-vswitchd")
                    .map(|d| {
                        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                        let out = std::process::Command::new("ovs-appctl")
                            .arg(format!("--target={}", d.ctl().display()))
                            .args(["ofproto/trace", "br-int", &format!("in_port={port}"), &hex])
                            .output();
                        match out {
                            Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
                            Err(e) => e.to_string(),
                        }
                    })
                    .unwrap_or_default();
                let trace = if failures.len() < 3 {
                    trace
                } else {
                    String::from("(ofproto/trace printed for the first 3 failures only)")
                };
                // Debugging aid: HF_ORACLE_KEEP=SECS keeps the daemons of the first failure up.
                if failures.is_empty()
                    && let Some(secs) = std::env::var("HF_ORACLE_KEEP")
                        .ok()
                        .and_then(|v| v.parse().ok())
                {
                    eprintln!(
                        "seed {seed}: keeping the SB at {} for {secs} s",
                        real.central.sb
                    );
                    std::thread::sleep(Duration::from_secs(secs));
                }
                let ours_trace = if failures.len() < 3 {
                    ours.trace(lp, &bytes)
                } else {
                    String::new()
                };
                let ours_state = format!(
                    "{}\n  holdfast's trace of the packet (what if, on the state after it):\n{ours_trace}",
                    ours.conntrack()
                );
                failures.push(format!(
                    "--- seed {seed} flow {}\n  step {k} ({role:?}) into {port}: {}\n  real datapath:\n{}\n  holdfast:\n{}\n{}  holdfast conntrack:\n{}\n  real: ovs-appctl --target={}/ovs-vswitchd.ctl ofproto/trace br-int in_port={port} <hex above>\n{}",
                    flow.describe(),
                    wire::describe(&bytes),
                    describe_outputs(&real_out),
                    describe_outputs(&ours_out),
                    if late.is_empty() {
                        String::new()
                    } else {
                        format!("  real datapath, late frames of the previous step:\n{}\n", describe_outputs(&late))
                    },
                    ours_state,
                    real.chassis.dir().display(),
                    trace
                ));
                break;
            }
            if real_out.is_empty() {
                fig.dropped += 1;
            } else {
                fig.delivered += 1;
            }
            // Where the client's packet came out: exactly one other interface, one frame.
            if *role == Role::Client {
                let others: Vec<(&String, &Vec<Vec<u8>>)> = real_out
                    .iter()
                    .filter(|(p, _)| **p != flow.client.port)
                    .collect();
                server = match others.as_slice() {
                    [(p, fs)] if fs.len() == 1 => Frame::parse(&fs[0]).map(|f| ((*p).clone(), f)),
                    _ => None,
                };
            }
        }
    }
}
