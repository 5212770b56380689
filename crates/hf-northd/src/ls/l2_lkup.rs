//! `ls_in_l2_lkup`: destination lookup. Unicast to the port owning `eth.dst` (VIF addresses,
//! the router port MAC for `router` ports, on the gateway chassis only when the router port is
//! a distributed gateway port seen through a localnet switch or when several gateway routers
//! share the MAC on the switch, and distributed NAT MACs where
//! their logical port is resident); multicast and broadcast flood (`_MC_flood`); ARP requests
//! and neighbour solicitations for router-owned addresses (its networks, NAT external IPs,
//! reachable LB VIPs) go only to that router port (and to the L2 domain, `_MC_flood_l2`);
//! the router's own ARP/ND requests flood the L2 domain. Unknown MACs are looked up in the FDB.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use ipnet::Ipv4Net;

use hf_expr::Action;
use hf_expr::actions::ResultFn;
use hf_expr::ast::Expr;

use super::act::{clone, next, result, to_port};
use super::pre_acl::svc_monitor;
use super::{MC_FLOOD, MC_FLOOD_L2, MC_STATIC, Sw};
use crate::build::{always, and, eq, eq_num, f, ip4, ip6, mac, or, pred};
use crate::diag::Diags;
use crate::flow::Flows;
use crate::stage::Stage;
use crate::topo::{PortIdx, PortKind};

fn resident(port: &str) -> Expr {
    Expr::ChassisResident {
        port: port.to_string(),
        span: hf_expr::Span::default(),
    }
}

/// `flags[1] == 0` (FLAGBIT_NOT_VXLAN): not already through a router on a VXLAN chassis.
fn not_vxlan() -> Expr {
    eq_num(hf_expr::FieldRef::bits("flags", 1, 1), 0)
}

/// ARP requests and solicitations for the addresses router port `lrp` owns, from switch port `p`.
fn rport_arp_req(sw: &Sw<'_, '_>, out: &mut Flows, p: PortIdx, lrp: PortIdx) {
    let topo = sw.topo;
    let r = topo.ports[lrp].clone();
    if !r.enabled {
        return;
    }
    let sw_port = sw.port(p).name.clone();
    let has_other = sw.router_ports.len() != sw.ports.len();
    let actions = || {
        if has_other {
            let mut a = vec![clone(to_port(&sw_port))];
            a.extend(to_port(MC_FLOOD_L2));
            a
        } else {
            to_port(&sw_port)
        }
    };
    let mut ips: BTreeSet<IpAddr> = BTreeSet::new();
    let ra = topo.ls.router.get(&r.dp);
    if let Some(ra) = ra {
        let reach = |ip: IpAddr| r.networks.iter().any(|n| n.contains(&ip));
        for a in &ra.lb_v4 {
            if reach(IpAddr::V4(*a)) {
                ips.insert(IpAddr::V4(*a));
            }
        }
        for a in &ra.lb_v6 {
            if reach(IpAddr::V6(*a)) {
                ips.insert(IpAddr::V6(*a));
            }
        }
        ips.extend(ra.nat_ips.iter().copied());
    }
    for n in &r.networks {
        ips.insert(n.addr());
    }
    if let Some(m) = r.mac {
        ips.insert(IpAddr::V6(m.ipv6_lla()));
    }
    for ip in ips {
        let m = match ip {
            IpAddr::V4(a) => and([
                not_vxlan(),
                eq_num(f("arp.op"), 1),
                eq(f("arp.tpa"), ip4(a)),
            ]),
            IpAddr::V6(a) => and([not_vxlan(), pred("nd_ns"), eq(f("nd.target"), ip6(a))]),
        };
        sw.for_port(
            out,
            Stage::LsInL2Lkup,
            80,
            p,
            format!("arp-req {ip}"),
            m,
            actions(),
        );
    }
    if has_other && let Some(m) = r.mac {
        let mut macs = BTreeSet::new();
        macs.insert(m);
        if let Some(ra) = ra {
            macs.extend(ra.nat_macs.iter().copied());
        }
        let mm = and([
            super::act::set_of("eth.src", macs.into_iter().map(mac)),
            or([
                eq_num(f("arp.op"), 1),
                eq_num(f("rarp.op"), 3),
                pred("nd_ns"),
            ]),
        ]);
        sw.for_port(
            out,
            Stage::LsInL2Lkup,
            75,
            p,
            "self-orig",
            mm,
            to_port(MC_FLOOD_L2),
        );
    }
}

/// Writes the stage for `sw`.
pub fn build(sw: &Sw<'_, '_>, out: &mut Flows, diags: &mut Diags) {
    let topo = sw.topo;
    sw.dflt(
        out,
        Stage::LsInL2Lkup,
        0,
        "fdb",
        always(),
        if topo.features.contains("fdb") {
            vec![
                result(f("outport"), ResultFn::GetFdb { mac: f("eth.dst") }),
                next(),
            ]
        } else {
            // Chassis before OVN 21.03 learn no FDB: nothing is ever found.
            vec![super::act::set_outport("none"), next()]
        },
    );
    sw.dflt(
        out,
        Stage::LsInL2Lkup,
        110,
        "svc-monitor",
        and([
            svc_monitor(true),
            or([pred("tcp"), pred("icmp"), pred("icmp6")]),
        ]),
        vec![Action::HandleSvcCheck {
            port: f("inport"),
            span: hf_expr::Span::default(),
        }],
    );
    multicast(sw, out, diags);
    sw.dflt(
        out,
        Stage::LsInL2Lkup,
        70,
        "mcast",
        pred("eth.mcast"),
        to_port(MC_FLOOD),
    );
    forwarding_groups(sw, out, diags);
    // Router MACs that several gateway routers share on this switch (OVN-Kubernetes' layer-2
    // design: every node's gateway router answers for the same gateway address): each copy is
    // looked up only where its router runs, so a VM reaches the gateway router of its own
    // node. ovn-northd 23.03 writes the same-match flows unconditionally (one of them wins at
    // random); holdfast makes the choice local.
    let mut seen_gw: BTreeSet<_> = BTreeSet::new();
    let mut shared_gw: BTreeSet<_> = BTreeSet::new();
    for p in sw.ports {
        if let PortKind::SwitchRouter { lrp: Some(l) } = sw.port(*p).kind {
            let r = &topo.ports[l];
            if topo.datapaths[r.dp].gateway_chassis.is_some()
                && let Some(m) = r.mac
                && !seen_gw.insert(m)
            {
                shared_gw.insert(m);
            }
        }
    }
    for p in sw.ports {
        let port = sw.port(*p);
        if matches!(&port.kind, PortKind::OtherLsp(t) if t == "external") {
            continue;
        }
        let deliver = || {
            if port.enabled {
                to_port(&port.name)
            } else {
                vec![Action::drop()]
            }
        };
        let lrp = match port.kind {
            PortKind::SwitchRouter { lrp } => lrp,
            _ => None,
        };
        if let Some(l) = lrp {
            rport_arp_req(sw, out, *p, l);
        }
        let mut macs = BTreeSet::new();
        for a in &port.addresses {
            if let Some(m) = a.mac
                && macs.insert(m)
            {
                sw.for_port(
                    out,
                    Stage::LsInL2Lkup,
                    50,
                    *p,
                    format!("mac {m}"),
                    eq(f("eth.dst"), mac(m)),
                    deliver(),
                );
            }
        }
        let (true, Some(l)) = (port.router_addresses, lrp) else {
            continue;
        };
        let r = &topo.ports[l];
        let Some(rmac) = r.mac else { continue };
        let router = &topo.datapaths[r.dp];
        let mut m = vec![eq(f("eth.dst"), mac(rmac))];
        if !router.dgps.is_empty() && !sw.localnet.is_empty() {
            let cr = if r.is_dgp() && router.dgps.contains(&l) {
                Some(format!("cr-{}", r.name))
            } else if r
                .options
                .get("reside-on-redirect-chassis")
                .is_some_and(|v| v == "true")
                && router.dgps.len() == 1
            {
                Some(format!("cr-{}", topo.ports[router.dgps[0]].name))
            } else {
                None
            };
            if let Some(cr) = cr {
                m.push(resident(&cr));
            }
        }
        if router.gateway_chassis.is_some() && shared_gw.contains(&rmac) {
            m.push(resident(&port.name));
        }
        if macs.insert(rmac) {
            sw.for_port(
                out,
                Stage::LsInL2Lkup,
                50,
                *p,
                format!("mac {rmac}"),
                and(m),
                deliver(),
            );
        }
        if router.dgps.contains(&l)
            && let Some(ra) = topo.ls.router.get(&r.dp)
        {
            for (nm, lp) in &ra.distributed {
                sw.for_port(
                    out,
                    Stage::LsInL2Lkup,
                    50,
                    *p,
                    format!("nat-mac {nm} {lp}"),
                    and([eq(f("eth.dst"), mac(*nm)), resident(lp)]),
                    deliver(),
                );
            }
        }
    }
}

/// NB `Forwarding_Group`s of the switch: the group's VIP is answered with its VMAC
/// (`ls_in_arp_rsp`) and the VMAC goes to `fwd_group(...)` over the child ports.
fn forwarding_groups(sw: &Sw<'_, '_>, out: &mut Flows, diags: &mut Diags) {
    let nb = sw.topo.nb;
    let Some(ls) = nb.logical_switch().get(&sw.topo.datapaths[sw.dp].nb) else {
        return;
    };
    let mut groups: Vec<&hf_model::nb::ForwardingGroup> = ls
        .forwarding_groups
        .iter()
        .filter_map(|r| nb.get(*r))
        .collect();
    groups.sort_by(|a, b| a.name.cmp(&b.name));
    for g in groups {
        if g.child_port.is_empty() {
            continue;
        }
        let (Some(vmac), Ok(vip)) = (crate::addr::Mac::parse(&g.vmac), g.vip.parse()) else {
            diags.push(
                "Forwarding_Group",
                g.uuid,
                &g.name,
                format!(
                    "vmac {:?} / vip {:?} are not a MAC and an IPv4 address; the group is left out",
                    g.vmac, g.vip
                ),
            );
            continue;
        };
        let owner = || crate::flow::Owner::Datapath(sw.name().to_string());
        sw.owned(
            out,
            Stage::LsInArpRsp,
            50,
            owner(),
            format!("fwd-group {} vip", g.name),
            Some(g.uuid),
            super::arp_rsp::arp_for(vip),
            super::arp_rsp::arp_reply(vmac, vip),
            None,
        );
        sw.owned(
            out,
            Stage::LsInL2Lkup,
            50,
            owner(),
            format!("fwd-group {} vmac", g.name),
            Some(g.uuid),
            eq(f("eth.dst"), mac(vmac)),
            vec![Action::FwdGroup {
                liveness: g.liveness.then_some(true),
                ports: g.child_port.iter().cloned().collect(),
                span: hf_expr::Span::default(),
            }],
            None,
        );
    }
}

/// IGMP/MLD snooping (`other_config:mcast_snoop=true`): reports go to the controller, link-local
/// multicast floods, unregistered IP multicast goes to multicast routers (routers with
/// `options:mcast_relay`) and to `options:mcast_flood` ports, or is dropped, unless
/// `other_config:mcast_flood_unregistered=true`. Groups the controllers learned (SB
/// `IGMP_Group`, see [`crate::tables::igmp`]) go to their `Multicast_Group` at priority 90
/// (also to the multicast routers and static flood ports), whether or not snooping is on, as
/// 23.03 writes them.
fn multicast(sw: &Sw<'_, '_>, out: &mut Flows, _diags: &mut Diags) {
    let topo = sw.topo;
    let Some(ls) = topo.nb.logical_switch().get(&topo.datapaths[sw.dp].nb) else {
        return;
    };
    let on = |k: &str| ls.other_config.get(k).is_some_and(|v| v == "true");
    let relay = sw.router_ports.iter().any(|p| {
        let PortKind::SwitchRouter { lrp: Some(l) } = sw.port(*p).kind else {
            return false;
        };
        topo.nb
            .logical_router()
            .get(&topo.datapaths[topo.ports[l].dp].nb)
            .is_some_and(|lr| lr.options.get("mcast_relay").is_some_and(|v| v == "true"))
    });
    let flood_static = sw.ports.iter().any(|p| {
        sw.port(*p)
            .options
            .get("mcast_flood")
            .is_some_and(|v| v == "true")
    });
    for g in crate::tables::igmp::flow_groups(topo, &topo.igmp, sw.dp) {
        let m = match g.addr {
            IpAddr::V4(a) => and([pred("eth.mcast"), pred("ip4"), eq(f("ip4.dst"), ip4(a))]),
            IpAddr::V6(a) => and([pred("eth.mcast"), pred("ip6"), eq(f("ip6.dst"), ip6(a))]),
        };
        let mut a = Vec::new();
        if relay {
            a.push(clone(to_port(super::MC_MROUTER_FLOOD)));
        }
        if flood_static {
            a.push(clone(to_port(MC_STATIC)));
        }
        a.extend(to_port(&g.name));
        sw.dflt(
            out,
            Stage::LsInL2Lkup,
            90,
            &format!("mcast-group {}", g.name),
            m,
            a,
        );
    }
    if !on("mcast_snoop") {
        return;
    }
    let igmp = || {
        vec![Action::Igmp {
            span: hf_expr::Span::default(),
        }]
    };
    sw.dflt(out, Stage::LsInL2Lkup, 100, "igmp", pred("igmp"), igmp());
    sw.dflt(
        out,
        Stage::LsInL2Lkup,
        100,
        "mld",
        or([pred("mldv1"), pred("mldv2")]),
        igmp(),
    );
    sw.dflt(
        out,
        Stage::LsInL2Lkup,
        85,
        "mcast-local4",
        and([
            pred("ip4.mcast"),
            eq(
                f("ip4.dst"),
                crate::build::net4(
                    Ipv4Net::new(Ipv4Addr::new(224, 0, 0, 0), 24).unwrap_or_default(),
                ),
            ),
        ]),
        to_port(MC_FLOOD_L2),
    );
    sw.dflt(
        out,
        Stage::LsInL2Lkup,
        85,
        "mcast-flood6",
        pred("ip6.mcast_flood"),
        to_port(MC_FLOOD),
    );
    if on("mcast_flood_unregistered") {
        return;
    }
    let mut a = Vec::new();
    if relay {
        a.push(clone(to_port(super::MC_MROUTER_FLOOD)));
    }
    if flood_static {
        a.extend(to_port(MC_STATIC));
    }
    if a.is_empty() {
        a.push(Action::drop());
    }
    sw.dflt(
        out,
        Stage::LsInL2Lkup,
        80,
        "mcast-unregistered",
        or([pred("ip4.mcast"), pred("ip6.mcast")]),
        a,
    );
}
