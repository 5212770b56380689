//! `lr_in_arp_request` (one stage of [`super`]).

use super::*;

/// `lr_in_arp_request`.
pub fn arp_request(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrInArpRequest;
    let o = r.owner();
    let zero = || eq(f("eth.dst"), macv(Mac(0)));
    out.add(
        r.dp,
        st,
        0,
        always(),
        vec![output()],
        o.clone(),
        "default",
        None,
    );
    out.add(
        r.dp,
        st,
        100,
        and([zero(), pred("ip4")]),
        vec![nested(
            NestedKind::Arp,
            vec![
                set("eth.dst", macv(Mac(0xffff_ffff_ffff))),
                Action::move_field(f("arp.spa"), Reg::SrcIpv4.field()),
                Action::move_field(f("arp.tpa"), Reg::NextHopIpv4.field()),
                set("arp.op", num(1)),
                output(),
            ],
        )],
        o.clone(),
        "arp",
        None,
    );
    out.add(
        r.dp,
        st,
        100,
        and([zero(), pred("ip6")]),
        vec![nested(
            NestedKind::NdNs,
            vec![Action::move_field(f("nd.target"), nh_reg(true)), output()],
        )],
        o,
        "nd-ns",
        None,
    );
    let mut seen = BTreeSet::new();
    let hops = r.routes.iter().flat_map(|g| {
        g.hops.iter().filter_map(|h| match h.nexthop {
            Some(IpAddr::V6(a)) => Some((a, &h.owner, h.uuid)),
            _ => None,
        })
    });
    let down = r.bfd_down_hops.iter().map(|(a, o, u)| (*a, o, *u));
    for (a, owner, uuid) in hops.chain(down) {
        {
            if !seen.insert(a) {
                continue;
            }
            out.add(
                r.dp,
                st,
                200,
                and([zero(), pred("ip6"), eq(nh_reg(true), ip6(a))]),
                vec![nested(
                    NestedKind::NdNs,
                    vec![
                        set("eth.dst", macv(solicited_mac(a))),
                        set("ip6.dst", ip6(solicited(a))),
                        set("nd.target", ip6(a)),
                        output(),
                    ],
                )],
                owner.clone(),
                format!("nd-ns-{a}"),
                Some(uuid),
            );
        }
    }
}
