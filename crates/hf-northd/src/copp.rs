//! Control-plane protection (CoPP): which flows get a `Logical_Flow.controller_meter`.
//!
//! A switch or router with a `copp` row names, per control protocol (`arp`, `arp-resolve`,
//! `dhcpv4-opts`, `dhcpv6-opts`, `dns`, `event-elb`, `icmp4-error`, `icmp6-error`, `igmp`,
//! `nd-na`, `nd-ns`, `nd-ns-resolve`, `nd-ra-opts`, `tcp-reset`, `reject`, `bfd`: OVN 23.03's
//! list), a `Meter` by name. Every flow whose action punts that protocol to the controller gets
//! the meter in `controller_meter`, as ovn-northd 23.03 writes it; a chassis then limits how
//! many of those packets its controller logic handles per second.
//!
//! Which protocol a flow punts is read from the flow itself ([`proto_of`]): its datapath kind,
//! its stage and the controller action it runs, which is how ovn-northd 23.03 chooses (its
//! metered flows are exactly these; `tests/northd_parity.rs`, `copp_meters_match_real_northd`,
//! compares every flow's `controller_meter` with real ovn-northd's).
//!
//! What it does not do: meter flows of datapaths without a `copp` row, or protocols OVN 23.03
//! does not meter (the service monitor's replies, ARP replies northd answers in flows). A
//! protocol name 23.03 does not know, or a meter that does not exist, is a diagnostic (OVN
//! ignores both without a word); the punts stay unmetered.

use std::collections::BTreeSet;

use hf_expr::actions::{Action, NestedKind, ResultFn};

use crate::diag::Diags;
use crate::flow::{DpIdx, Flow};
use crate::stage::Stage;
use crate::topo::Topo;

/// OVN 23.03's control protocols, as `Copp.meters` keys spell them.
pub const PROTOS: &[&str] = &[
    "arp",
    "arp-resolve",
    "dhcpv4-opts",
    "dhcpv6-opts",
    "dns",
    "event-elb",
    "icmp4-error",
    "icmp6-error",
    "igmp",
    "nd-na",
    "nd-ns",
    "nd-ns-resolve",
    "nd-ra-opts",
    "tcp-reset",
    "reject",
    "bfd",
];

/// Sets `controller_meter` on `flows` (all of datapath `dp`) from the datapath's `copp` row.
pub fn apply(topo: &Topo<'_>, dp: DpIdx, flows: &mut [Flow], diags: &mut Diags) {
    let d = &topo.datapaths[dp];
    let (copp, router, table, uuid, name) = if let Some(ls) = topo.nb.logical_switch().get(&d.nb) {
        (ls.copp, false, "Logical_Switch", ls.uuid, ls.name.as_str())
    } else if let Some(lr) = topo.nb.logical_router().get(&d.nb) {
        (lr.copp, true, "Logical_Router", lr.uuid, lr.name.as_str())
    } else {
        return;
    };
    let Some(copp) = copp.and_then(|c| topo.nb.copp().get(&c.uuid())) else {
        return;
    };
    let meters: BTreeSet<&str> = topo.nb.meter().values().map(|m| m.name.as_str()).collect();
    for (proto, meter) in copp.meters.iter() {
        if !PROTOS.contains(&proto.as_str()) {
            diags.push(
                table,
                uuid,
                name,
                format!(
                    "copp {:?} names control protocol {proto:?}, which OVN 23.03 does not know (one of {}); it meters nothing",
                    copp.name,
                    PROTOS.join(", ")
                ),
            );
        } else if !meters.contains(meter.as_str()) {
            diags.push(
                table,
                uuid,
                name,
                format!(
                    "copp {:?} meters {proto} with meter {meter:?}, which is not in the Meter table; {proto} punts are unmetered",
                    copp.name
                ),
            );
        }
    }
    for f in flows.iter_mut() {
        let Some(proto) = proto_of(router, f) else {
            continue;
        };
        if let Some(m) = copp.meters.get(proto)
            && meters.contains(m.as_str())
        {
            f.meter = Some(m.clone());
        }
    }
}

/// The control protocol flow `f` punts to the controller, as ovn-northd 23.03 classifies it
/// (`router`: the flow belongs to a router).
pub fn proto_of(router: bool, f: &Flow) -> Option<&'static str> {
    f.actions.iter().find_map(|a| action_proto(router, f, a))
}

fn action_proto(router: bool, f: &Flow, a: &Action) -> Option<&'static str> {
    match a {
        Action::Nested { kind, body, .. } => match kind {
            NestedKind::Reject => Some("reject"),
            NestedKind::Clone => body.iter().find_map(|b| action_proto(router, f, b)),
            // The service monitor's own ND answer (priority 110) is not metered.
            NestedKind::NdNa | NestedKind::NdNaRouter
                if !router && f.stage == Stage::LsInArpRsp && f.priority != 110 =>
            {
                Some("nd-na")
            }
            NestedKind::NdNa | NestedKind::NdNaRouter
                if router && f.stage == Stage::LrInIpInput =>
            {
                Some("nd-na")
            }
            NestedKind::Icmp4 | NestedKind::Icmp4Error if router => Some("icmp4-error"),
            NestedKind::Icmp6 | NestedKind::Icmp6Error if router => Some("icmp6-error"),
            NestedKind::TcpReset | NestedKind::SctpAbort if router => Some("tcp-reset"),
            NestedKind::Arp if router && f.stage == Stage::LrInArpRequest => Some("arp-resolve"),
            NestedKind::NdNs if router && f.stage == Stage::LrInArpRequest => Some("nd-ns-resolve"),
            _ => None,
        },
        Action::Igmp { .. } if !router => Some("igmp"),
        Action::TriggerEvent { .. } => Some("event-elb"),
        Action::HandleBfdMsg { .. } if router => Some("bfd"),
        Action::PutArp { .. } if router => Some("arp"),
        Action::PutNd { ip, .. } if router => Some(if ip.name == "ip6.src" {
            "nd-ns"
        } else {
            "nd-na"
        }),
        Action::Result { func, .. } => match func {
            ResultFn::PutDhcpOpts { v6: false, .. } if !router => Some("dhcpv4-opts"),
            ResultFn::PutDhcpOpts { v6: true, .. } if !router => Some("dhcpv6-opts"),
            ResultFn::PutNdRaOpts { .. } if router => Some("nd-ra-opts"),
            ResultFn::DnsLookup if !router => Some("dns"),
            _ => None,
        },
        _ => None,
    }
}
