//! `lr_in_dnat`: DNAT of `dnat`/`dnat_and_snat` external addresses to their logical IP
//! (gateway routers: `ct_dnat` with `flags.loopback`; distributed routers: `ct_dnat_in_czone`
//! on the gateway chassis or the logical port's chassis), and router load balancers
//! (`ct_lb_mark` for new connections; established and related ones carry on with the
//! `skip_snat`/`force_snat` marks they were committed with). A VIP with a health check lists
//! only the backends [`crate::svc`] finds not offline.

use hf_expr::actions::NatKind;

use crate::build::{always, and, eq, f, inport, not, num, pred};
use crate::diag::Diags;
use crate::flow::Flows;
use crate::lr::act::{ct_commit_nat, ct_nat, eqn, ip_dst, ipf, loopback, next, set};
use crate::lr::ctx::Rtr;
use crate::lr::nat;
use crate::stage::Stage;
use crate::topo::Topo;

/// Builds the stage.
pub fn build(topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrInDnat;
    let o = r.owner();
    out.add(
        r.dp,
        st,
        0,
        always(),
        vec![next()],
        o.clone(),
        "default",
        None,
    );
    for n in r.nats.iter().filter(|n| n.kind.dnat()) {
        let prio = nat::priority(r, n, true);
        let (m, a) = if r.gw_router {
            let mut m = vec![pred("ip"), ip_dst(n.external)];
            m.extend(nat::extra(n, true));
            let mut a = Vec::new();
            if !r.dnat_force_snat.is_empty() {
                a.push(set("flags.force_snat_for_dnat", num(1)));
            }
            a.push(loopback());
            if n.stateless() {
                a.extend(nat::rewrite(
                    if n.v6() { "ip6.dst" } else { "ip4.dst" },
                    n.logical.addr(),
                ));
            } else {
                a.push(ct_nat(NatKind::Dnat, Some(n.logical.addr()), n.port_range));
            }
            (and(m), a)
        } else if let Some(d) = n.dgp {
            let p = &r.ports[d];
            let mut m = vec![pred("ip"), ip_dst(n.external), inport(&p.name)];
            if n.distributed.is_none() {
                m.extend(p.resident());
            }
            m.extend(nat::extra(n, true));
            let a = if n.stateless() {
                nat::rewrite(if n.v6() { "ip6.dst" } else { "ip4.dst" }, n.logical.addr())
            } else {
                vec![ct_nat(
                    NatKind::DnatInCzone,
                    Some(n.logical.addr()),
                    n.port_range,
                )]
            };
            (and(m), a)
        } else {
            continue;
        };
        if let Some(x) = nat::exempt(n, true, &m) {
            out.add(
                r.dp,
                st,
                prio + 2,
                x,
                vec![next()],
                n.owner.clone(),
                "dnat-exempt",
                Some(n.uuid),
            );
        }
        out.add(r.dp, st, prio, m, a, n.owner.clone(), "dnat", Some(n.uuid));
    }
    if !r.has_lb_vip() {
        return;
    }
    crate::lr::lb_aff::dnat_flows(topo, r, out);
    let est = || {
        and([
            pred("ct.est"),
            not(pred("ct.rel")),
            not(pred("ct.new")),
            pred("ct_mark.natted"),
        ])
    };
    let rel = || and([pred("ct.rel"), not(pred("ct.est")), not(pred("ct.new"))]);
    out.add(r.dp, st, 50, est(), vec![next()], o.clone(), "lb-est", None);
    out.add(
        r.dp,
        st,
        50,
        rel(),
        vec![ct_commit_nat()],
        o.clone(),
        "lb-rel",
        None,
    );
    for (flag, fl) in [
        ("force_snat", "flags.force_snat_for_lb"),
        ("skip_snat", "flags.skip_snat_for_lb"),
    ] {
        let mark = eq(f(&format!("ct_mark.{flag}")), num(1));
        out.add(
            r.dp,
            st,
            70,
            and([est(), mark.clone()]),
            vec![set(fl, num(1)), next()],
            o.clone(),
            format!("lb-est-{flag}"),
            None,
        );
        out.add(
            r.dp,
            st,
            70,
            and([rel(), mark]),
            vec![set(fl, num(1)), ct_commit_nat()],
            o.clone(),
            format!("lb-rel-{flag}"),
            None,
        );
    }
    for e in &r.lb_events {
        let (m, a) = crate::lb_event::flow(e.lb, e.ip, e.port, e.proto);
        out.add(
            r.dp,
            st,
            130,
            m,
            a,
            e.owner.clone(),
            format!("event-{}", e.key),
            Some(e.lb),
        );
    }
    let dgp_res = r.dgp.and_then(|d| r.ports[d].resident());
    templates(topo, r, out, dgp_res.as_ref());
    for v in &r.vips {
        let fam = ipf(v.ip.is_ipv6());
        let mut m = vec![pred("ct.new"), not(pred("ct.rel")), pred(fam), ip_dst(v.ip)];
        let prio = if let Some(port) = v.port {
            m.push(pred(v.proto));
            m.push(eqn(&format!("{}.dst", v.proto), u128::from(port)));
            120
        } else {
            110
        };
        // A VIP with a health check lists the backends whose monitors are not offline; with
        // none, it rejects (`options:reject=true`) or drops, as 23.03's
        // `build_lb_vip_actions`.
        let active = topo.svc.active(v.lb, &v.key);
        let none_active = active.is_some_and(<[_]>::is_empty);
        let reject = v.reject
            || (none_active
                && topo
                    .nb
                    .load_balancer()
                    .get(&v.lb)
                    .and_then(|lb| lb.options.get("reject"))
                    .is_some_and(|x| x == "true"));
        let drop = none_active && !reject;
        let backends = active.unwrap_or(&v.backends);
        if !r.gw_router && !reject {
            m.extend(dgp_res.clone());
        }
        let mut a = Vec::new();
        let flag = lb_snat_flag(v.skip_snat, r, &mut a);
        let flag = flag.filter(|_| topo.features.contains("ct-lb-flags"));
        if reject {
            a = lb_reject().to_vec();
        } else if drop {
            a.push(hf_expr::Action::drop());
        } else {
            a.push(crate::lr::act::ct_lb_mark_hashed(
                backends,
                v.hash_fields.as_deref(),
                flag,
            ));
        }
        out.add(
            r.dp,
            st,
            prio,
            and(m),
            a,
            v.owner.clone(),
            format!("vip-{}", v.key),
            Some(v.lb),
        );
    }
}

/// The VIPs of template load balancers ([`crate::lb_template`]): 23.03's
/// `build_lrouter_nat_flows_for_lb` with the variables written in (and its event flows).
/// A VIP with no backend and `options:reject=true`: `reg0 = 0; reject { outport <-> inport;
/// next(pipeline=egress, table=lr_out_snat); }`.
fn lb_reject() -> [hf_expr::Action; 2] {
    [
        hf_expr::Action::assign(crate::build::f("reg0"), num(0)),
        crate::lr::act::nested(
            hf_expr::actions::NestedKind::Reject,
            vec![
                crate::lr::act::swap("outport", "inport"),
                hf_expr::Action::next_table(
                    Some(hf_expr::actions::Pipeline::Egress),
                    u32::from(Stage::LrOutSnat.table()),
                ),
            ],
        ),
    ]
}

/// The LB's SNAT flag set before `ct_lb_mark` (`skip_snat` for a VIP that skips it,
/// `force_snat` on a router that forces it), pushed onto `a`; its name for the `ct_lb_mark`
/// argument.
fn lb_snat_flag(skip_snat: bool, r: &Rtr, a: &mut Vec<hf_expr::Action>) -> Option<&'static str> {
    if skip_snat {
        a.push(set("flags.skip_snat_for_lb", num(1)));
        Some("skip_snat")
    } else if r.force_snat_router_ip || !r.lb_force_snat.is_empty() {
        a.push(set("flags.force_snat_for_lb", num(1)));
        Some("force_snat")
    } else {
        None
    }
}

fn templates(topo: &Topo<'_>, r: &Rtr, out: &mut Flows, dgp_res: Option<&hf_expr::ast::Expr>) {
    let st = Stage::LrInDnat;
    for v in &r.templates {
        if v.event && v.backends.is_empty() && !v.reject {
            let (m, a) = v.event_flow();
            out.add(
                r.dp,
                st,
                130,
                m,
                a,
                crate::flow::Owner::LoadBalancer(v.name.clone()),
                format!("event-{}", v.key),
                Some(v.lb),
            );
        }
        let mut m = vec![
            pred("ct.new"),
            not(pred("ct.rel")),
            pred(v.family()),
            v.dst(),
        ];
        let prio = if v.port.is_some() {
            m.push(pred(v.proto));
            m.extend(v.port_dst());
            120
        } else {
            110
        };
        let reject = v.backends.is_empty() && v.reject;
        let drop = v.backends.is_empty() && !v.reject;
        if !r.gw_router && !reject {
            m.extend(dgp_res.cloned());
        }
        let mut a = Vec::new();
        let flag = lb_snat_flag(v.skip_snat, r, &mut a);
        if reject {
            a.extend(lb_reject());
        } else if drop {
            a.push(hf_expr::Action::drop());
        } else {
            a.push(v.ct_lb_mark(flag.filter(|_| topo.features.contains("ct-lb-flags"))));
        }
        out.add(
            r.dp,
            st,
            prio,
            and(m),
            a,
            crate::flow::Owner::LoadBalancer(v.name.clone()),
            format!("vip-{}", v.key),
            Some(v.lb),
        );
    }
}
