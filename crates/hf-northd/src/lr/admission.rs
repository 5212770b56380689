//! `lr_in_admission`: drop VLAN-tagged and multicast-source frames; per enabled port, accept
//! frames to its MAC (on the gateway chassis only, for a distributed gateway port) and to
//! multicast, storing the port's MAC in `REG_INPORT_ETH_ADDR`; distributed NAT's external MACs
//! are accepted on the chassis of their logical port. Everything else is dropped. Ports
//! with a gateway MTU check the packet length here ([`crate::lr::mtu`]).

use crate::build::{and, bit, eq, f, inport, or, pred};
use crate::diag::Diags;
use crate::flow::{Flows, Owner};
use crate::lr::act::{drop, macv, next, set_reg};
use crate::lr::ctx::{Rtr, resident};
use crate::lr::mtu::gateway_mtu_flow;
use crate::regs::Reg;
use crate::stage::Stage;
use crate::topo::Topo;

/// Builds the stage.
pub fn build(topo: &Topo<'_>, r: &Rtr, out: &mut Flows, diags: &mut Diags) {
    let st = Stage::LrInAdmission;
    let o = r.owner();
    out.add(
        r.dp,
        st,
        0,
        crate::build::always(),
        drop(),
        o.clone(),
        "default",
        None,
    );
    out.add(
        r.dp,
        st,
        100,
        or([
            pred("vlan.present"),
            bit(hf_expr::ast::FieldRef::bits("eth.src", 40, 40)),
        ]),
        drop(),
        o,
        "vlan-or-mcast-src",
        None,
    );
    for p in &r.ports {
        let own = Owner::Port(p.name.clone());
        let store = vec![set_reg(Reg::InportEthAddr, macv(p.mac)), next()];
        let mut m = vec![eq(f("eth.dst"), macv(p.mac)), inport(&p.name)];
        m.extend(p.resident());
        gateway_mtu_flow(
            topo,
            r,
            p,
            st,
            and(m),
            store.clone(),
            own.clone(),
            "ucast",
            Some(p.nb),
            out,
            diags,
        );
        gateway_mtu_flow(
            topo,
            r,
            p,
            st,
            and([pred("eth.mcast"), inport(&p.name)]),
            store.clone(),
            own.clone(),
            "mcast",
            Some(p.nb),
            out,
            diags,
        );
        for n in r
            .nats
            .iter()
            .filter(|n| n.dgp.is_some_and(|d| r.ports[d].idx == p.idx))
        {
            if let Some((lp, m)) = &n.distributed {
                gateway_mtu_flow(
                    topo,
                    r,
                    p,
                    st,
                    and([eq(f("eth.dst"), macv(*m)), inport(&p.name), resident(lp)]),
                    store.clone(),
                    n.owner.clone(),
                    "external-mac",
                    Some(n.uuid),
                    out,
                    diags,
                );
            }
        }
    }
}
