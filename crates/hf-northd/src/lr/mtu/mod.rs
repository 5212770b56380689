//! Gateway MTU (`Logical_Router_Port options:gateway_mtu`): `lr_in_chk_pkt_len` checks the
//! length of packets leaving by such a port (`REGBIT_PKT_LARGER = check_pkt_larger(MTU +
//! L2 header)`), admission checks packets entering by it, and `lr_in_larger_pkts` /
//! `lr_in_ip_input` answer a too-large IPv4 packet with ICMP "fragmentation needed" and an
//! IPv6 one with "packet too big", sourced from the port the packet came in on.
//! `options:gateway_mtu_bypass` (a match) exempts traffic from the check.

use hf_expr::Action;
use hf_expr::actions::{NestedKind, Pipeline};
use hf_expr::ast::Expr;

use crate::build::{always, and, bit, eq, f, inport, ip4, ip6, num, outport, pred};
use crate::diag::Diags;
use crate::flow::{Flows, Owner};
use crate::lr::act::{macv, mv, nested, next, set, set_reg};
use crate::lr::ctx::{Rp, Rtr};
use crate::regs::Reg;
use crate::stage::Stage;
use crate::topo::{PortKind, Topo};

mod chk_pkt_len;
mod larger_pkts;
pub use chk_pkt_len::chk_pkt_len;
pub use larger_pkts::larger_pkts;

/// The port's gateway MTU, when set and positive.
pub fn gateway_mtu(topo: &Topo<'_>, p: &Rp) -> Option<u32> {
    topo.ports[p.idx]
        .options
        .get("gateway_mtu")
        .and_then(|v| v.trim().parse::<i64>().ok())
        .filter(|m| *m > 0)
        .and_then(|m| u32::try_from(m).ok())
}

/// The `gateway_mtu_bypass` match, parsed.
fn bypass(topo: &Topo<'_>, p: &Rp, diags: &mut Diags) -> Option<Expr> {
    let text = topo.ports[p.idx].options.get("gateway_mtu_bypass")?;
    match hf_expr::parse_match(hf_expr::symbols::SymbolTable::shared(), text) {
        Ok(e) => Some(e),
        Err(e) => {
            diags.push("Logical_Router_Port", p.nb, &p.name, format!("options:gateway_mtu_bypass {text:?} does not parse: {e}; nothing bypasses the MTU check"));
            None
        }
    }
}

/// Ethernet header length of frames on the port's switch: 18 when its localnet port is
/// VLAN-tagged, 14 otherwise.
fn l2_hdr(topo: &Topo<'_>, p: &Rp) -> u32 {
    let Some(s) = p.peer_switch else { return 14 };
    let tagged = topo.datapaths[s].ports.iter().any(|q| {
        topo.ports[*q].kind == PortKind::Localnet
            && topo
                .nb
                .logical_switch_port()
                .get(&topo.ports[*q].nb)
                .is_some_and(|l| l.tag_request.is_some())
    });
    if tagged { 18 } else { 14 }
}

/// Adds a flow of `stage` at priority 50 with `REGBIT_PKT_LARGER = check_pkt_larger(..)`
/// before `actions` when the port has a gateway MTU, and its bypass at 55.
#[allow(clippy::too_many_arguments)]
pub fn gateway_mtu_flow(
    topo: &Topo<'_>,
    r: &Rtr,
    p: &Rp,
    stage: Stage,
    m: Expr,
    actions: Vec<Action>,
    owner: Owner,
    disc: &str,
    hint: Option<uuid::Uuid>,
    out: &mut Flows,
    diags: &mut Diags,
) {
    let mut a = Vec::new();
    let mtu = gateway_mtu(topo, p);
    if let Some(mtu) = mtu {
        a.push(crate::lr::act::result(
            Reg::PktLarger.field(),
            hf_expr::actions::ResultFn::CheckPktLarger {
                len: mtu.saturating_add(l2_hdr(topo, p)),
            },
        ));
    }
    a.extend(actions.iter().cloned());
    out.add(r.dp, stage, 50, m.clone(), a, owner.clone(), disc, hint);
    if mtu.is_some()
        && let Some(b) = bypass(topo, p, diags)
    {
        out.add(
            r.dp,
            stage,
            55,
            and([m, b]),
            actions,
            owner,
            format!("{disc}-mtu-bypass"),
            hint,
        );
    }
}

/// The ICMP "too big" replies for packets that came in on `q` (to `towards`, or into `q`
/// itself when `None`), at priority 150 of `stage`.
pub fn too_big(r: &Rtr, q: &Rp, towards: Option<&Rp>, mtu: u32, stage: Stage, out: &mut Flows) {
    let own = Owner::Port(q.name.clone());
    let disc = towards.map_or("too-big".to_string(), |t| format!("too-big-to-{}", t.name));
    let head = |fam: &str| {
        let mut m = vec![inport(&q.name)];
        if let Some(t) = towards {
            m.push(outport(&t.name));
        }
        m.extend([
            pred(fam),
            bit(Reg::PktLarger.field()),
            eq(Reg::EgressLoopback.field(), num(0)),
        ]);
        and(m)
    };
    let common = || {
        vec![
            set_reg(Reg::EgressLoopback, num(1)),
            set_reg(Reg::PktLarger, num(0)),
            set("eth.dst", macv(q.mac)),
        ]
    };
    if let Some(n) = q.v4.first() {
        let mut b = common();
        b.extend([
            mv(f("ip4.dst"), f("ip4.src")),
            set("ip4.src", ip4(n.addr())),
            set("ip.ttl", num(255)),
            set("icmp4.type", num(3)),
            set("icmp4.code", num(4)),
            set("icmp4.frag_mtu", num(u128::from(mtu))),
            Action::next_table(
                Some(Pipeline::Ingress),
                u32::from(Stage::LrInAdmission.table()),
            ),
        ]);
        out.add(
            r.dp,
            stage,
            150,
            head("ip4"),
            vec![nested(NestedKind::Icmp4Error, b)],
            own.clone(),
            format!("{disc}-ip4"),
            Some(q.nb),
        );
    }
    if let Some(n) = q.v6.first() {
        let mut b = common();
        b.extend([
            mv(f("ip6.dst"), f("ip6.src")),
            set("ip6.src", ip6(n.addr())),
            set("ip.ttl", num(255)),
            set("icmp6.type", num(2)),
            set("icmp6.code", num(0)),
            set("icmp6.frag_mtu", num(u128::from(mtu))),
            Action::next_table(
                Some(Pipeline::Ingress),
                u32::from(Stage::LrInAdmission.table()),
            ),
        ]);
        out.add(
            r.dp,
            stage,
            150,
            head("ip6"),
            vec![nested(NestedKind::Icmp6Error, b)],
            own,
            format!("{disc}-ip6"),
            Some(q.nb),
        );
    }
}

/// Distributed NAT behind a DGP with a gateway MTU: a too-large packet to the external
/// address is answered from the logical port's chassis, from the external MAC and address
/// (`lr_in_ip_input`, priority 160).
pub fn distributed_nat_too_big(topo: &Topo<'_>, r: &Rtr, out: &mut Flows) {
    for n in &r.nats {
        let (Some((_, emac)), Some(d)) = (&n.distributed, n.dgp) else {
            continue;
        };
        let p = &r.ports[d];
        let Some(mtu) = gateway_mtu(topo, p) else {
            continue;
        };
        let v6 = n.v6();
        let fam = if v6 { "ip6" } else { "ip4" };
        let m = and([
            inport(&p.name),
            bit(Reg::PktLarger.field()),
            eq(Reg::EgressLoopback.field(), num(0)),
            pred(fam),
            eq(f(&format!("{fam}.dst")), crate::lr::act::ipv(n.external)),
        ]);
        let mut b = vec![
            set_reg(Reg::EgressLoopback, num(1)),
            set_reg(Reg::PktLarger, num(0)),
            mv(f("eth.dst"), f("eth.src")),
            set("eth.src", macv(*emac)),
            mv(f(&format!("{fam}.dst")), f(&format!("{fam}.src"))),
            set(&format!("{fam}.src"), crate::lr::act::ipv(n.external)),
            set("ip.ttl", num(254)),
        ];
        let kind = if v6 {
            b.extend([
                set("icmp6.type", num(2)),
                set("icmp6.code", num(0)),
                set("icmp6.frag_mtu", num(u128::from(mtu))),
            ]);
            NestedKind::Icmp6Error
        } else {
            b.extend([
                set("icmp4.type", num(3)),
                set("icmp4.code", num(4)),
                set("icmp4.frag_mtu", num(u128::from(mtu))),
            ]);
            NestedKind::Icmp4Error
        };
        b.extend([
            crate::lr::act::set_outport(&p.name),
            crate::lr::act::loopback(),
            crate::lr::act::output(),
        ]);
        out.add(
            r.dp,
            Stage::LrInIpInput,
            160,
            m,
            vec![nested(kind, b)],
            n.owner.clone(),
            "too-big",
            Some(n.uuid),
        );
    }
}
