//! `ls_in_pre_hairpin`, `ls_in_nat_hairpin` and `ls_in_hairpin`: a backend reaching itself
//! through a VIP of the switch is SNATed to the VIP (`ct_snat_to_vip`) and looped back.

use hf_expr::actions::ResultFn;

use super::Sw;
use super::act::{ct_snat, exchange, is, loopback, next, output, result};
use crate::build::{always, and, f, or, pred};
use crate::diag::Diags;
use crate::flow::{Flows, Owner};
use crate::regs::Reg;
use crate::stage::Stage;

/// Writes the three stages for `sw`.
pub fn build(sw: &Sw<'_, '_>, out: &mut Flows, _diags: &mut Diags) {
    for stage in [
        Stage::LsInPreHairpin,
        Stage::LsInNatHairpin,
        Stage::LsInHairpin,
    ] {
        sw.dflt(out, stage, 0, "default", always(), vec![next()]);
    }
    vtep(sw, out);
    if !sw.has_lb_vip {
        return;
    }
    let hint = Some(sw.topo.datapaths[sw.dp].nb);
    let owner = || Owner::Datapath(sw.name().to_string());
    let mut add = |stage, prio, disc: &str, m, a| {
        sw.owned(out, stage, prio, owner(), disc, hint, m, a, None);
    };
    add(
        Stage::LsInPreHairpin,
        100,
        "check",
        and([pred("ip"), pred("ct.trk")]),
        vec![
            result(Reg::Hairpin.field(), ResultFn::ChkLbHairpin),
            result(Reg::HairpinReply.field(), ResultFn::ChkLbHairpinReply),
            next(),
        ],
    );
    add(
        Stage::LsInNatHairpin,
        100,
        "new",
        and([
            pred("ip"),
            pred("ct.new"),
            pred("ct.trk"),
            is(Reg::Hairpin, 1),
        ]),
        vec![
            hf_expr::Action::CtSnatToVip {
                span: hf_expr::Span::default(),
            },
            next(),
        ],
    );
    add(
        Stage::LsInNatHairpin,
        100,
        "est",
        and([
            pred("ip"),
            pred("ct.est"),
            pred("ct.trk"),
            is(Reg::Hairpin, 1),
        ]),
        vec![ct_snat()],
    );
    add(
        Stage::LsInNatHairpin,
        90,
        "reply",
        and([pred("ip"), is(Reg::HairpinReply, 1)]),
        vec![ct_snat()],
    );
    sw.dflt(
        out,
        Stage::LsInHairpin,
        1,
        "loop",
        or([is(Reg::Hairpin, 1), is(Reg::HairpinReply, 1)]),
        vec![
            exchange("eth.dst", "eth.src"),
            hf_expr::Action::move_field(f("outport"), f("inport")),
            loopback(),
            output(),
        ],
    );
}

/// Traffic from VTEP ports goes straight to L2 lookup, except where a distributed gateway port
/// of a router on the switch is resident (it goes on for ARP/ND hairpin processing).
fn vtep(sw: &Sw<'_, '_>, out: &mut Flows) {
    let has_vtep = sw
        .ports
        .iter()
        .any(|p| matches!(&sw.port(*p).kind, crate::topo::PortKind::OtherLsp(t) if t == "vtep"));
    if !has_vtep {
        return;
    }
    sw.dflt(
        out,
        Stage::LsInHairpin,
        1000,
        "vtep",
        is(Reg::FromRamp, 1),
        vec![hf_expr::Action::next_table(
            Some(hf_expr::actions::Pipeline::Ingress),
            u32::from(Stage::LsInL2Lkup.table()),
        )],
    );
    for rp in &sw.router_ports {
        let crate::topo::PortKind::SwitchRouter { lrp: Some(l) } = sw.port(*rp).kind else {
            continue;
        };
        let lrp = sw.port(l);
        if !sw.topo.datapaths[lrp.dp].dgps.contains(&l) {
            continue;
        }
        sw.for_port(
            out,
            Stage::LsInHairpin,
            2000,
            *rp,
            "vtep-dgp",
            and([
                is(Reg::FromRamp, 1),
                hf_expr::ast::Expr::ChassisResident {
                    port: format!("cr-{}", lrp.name),
                    span: hf_expr::Span::default(),
                },
            ]),
            vec![next()],
        );
    }
}
