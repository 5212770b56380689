//! `lr_in_nd_ra_options` and `lr_in_nd_ra_response`: a router solicitation on a port whose
//! `ipv6_ra_configs:address_mode` is `slaac`, `dhcpv6_stateful` or `dhcpv6_stateless` is
//! answered with a router advertisement (`put_nd_ra_opts` with the port's MAC, its global
//! prefixes and the configured MTU, preference, RDNSS, DNSSL and route info), sent from the
//! port's link-local address. Periodic RAs are the controller's (Port_Binding options).

use hf_expr::actions::{OptValue, ResultFn};
use hf_expr::ast::Value;
use hf_expr::constant::{Constant, Mask};

use crate::build::{always, and, bit, eq, f, inport, ip6, pred};
use crate::diag::Diags;
use crate::flow::{Flows, Owner};
use crate::lr::act::{loopback, macv, mv, next, output, result, set};
use crate::lr::ctx::Rtr;
use crate::regs::Reg;
use crate::stage::Stage;
use crate::topo::Topo;

fn const_of(v: Value) -> OptValue {
    match v {
        Value::Const(c) => OptValue::Const(c),
        Value::Str(s) => OptValue::Str(s),
        _ => OptValue::Str(String::new()),
    }
}

/// Both stages.
pub fn build(topo: &Topo<'_>, r: &Rtr, out: &mut Flows, diags: &mut Diags) {
    out.add(
        r.dp,
        Stage::LrInNdRaOptions,
        0,
        always(),
        vec![next()],
        r.owner(),
        "default",
        None,
    );
    out.add(
        r.dp,
        Stage::LrInNdRaResponse,
        0,
        always(),
        vec![next()],
        r.owner(),
        "default",
        None,
    );
    for p in &r.ports {
        if p.peer_lrp.is_some() || p.peer_switch.is_none() {
            continue;
        }
        let Some(lrp) = topo.nb.logical_router_port().get(&p.nb) else {
            continue;
        };
        let cfg = &lrp.ipv6_ra_configs;
        let Some(mode) = cfg.get("address_mode") else {
            continue;
        };
        if !matches!(
            mode.as_str(),
            "slaac" | "dhcpv6_stateful" | "dhcpv6_stateless"
        ) {
            diags.push("Logical_Router_Port", p.nb, &p.name, format!("ipv6_ra_configs:address_mode {mode:?} is not slaac, dhcpv6_stateful or dhcpv6_stateless; no router advertisements"));
            continue;
        }
        let prefixes: Vec<_> = p.v6_global().map(|n| n.trunc()).collect();
        if prefixes.is_empty() {
            continue;
        }
        let mut opts = vec![
            ("addr_mode".to_string(), OptValue::Str(mode.clone())),
            ("slla".to_string(), const_of(macv(p.mac))),
        ];
        if let Some(mtu) = cfg
            .get("mtu")
            .and_then(|m| m.trim().parse::<u32>().ok())
            .filter(|m| *m >= 1280)
        {
            opts.push((
                "mtu".into(),
                OptValue::Const(Constant::dec(u128::from(mtu))),
            ));
        }
        if let Some(prf) = cfg
            .get("router_preference")
            .filter(|p| p.as_str() != "MEDIUM")
        {
            opts.push(("router_preference".into(), OptValue::Str(prf.clone())));
        }
        if let Some(rdnss) = cfg.get("rdnss") {
            match rdnss.trim().parse::<std::net::Ipv6Addr>() {
                Ok(a) => opts.push(("rdnss".into(), const_of(ip6(a)))),
                Err(_) => diags.push("Logical_Router_Port", p.nb, &p.name, format!("ipv6_ra_configs:rdnss {rdnss:?} is not an IPv6 address; it is left out of the advertisements")),
            }
        }
        for key in ["dnssl", "route_info"] {
            if let Some(v) = cfg.get(key) {
                opts.push((key.into(), OptValue::Str(v.clone())));
            }
        }
        for n in &prefixes {
            let mut c = Constant::ipv6(n.network());
            c.mask = Some(Mask::Prefix(n.prefix_len()));
            opts.push(("prefix".into(), OptValue::Const(c)));
        }
        let own = Owner::Port(p.name.clone());
        let rs = and([
            inport(&p.name),
            eq(f("ip6.dst"), ip6("ff02::2".parse().expect("constant"))),
            pred("nd_rs"),
        ]);
        out.add(
            r.dp,
            Stage::LrInNdRaOptions,
            50,
            rs,
            vec![
                result(Reg::NdRaOptsResult.field(), ResultFn::PutNdRaOpts { opts }),
                next(),
            ],
            own.clone(),
            "ra-options",
            Some(p.nb),
        );
        let ra = and([
            inport(&p.name),
            eq(f("ip6.dst"), ip6("ff02::2".parse().expect("constant"))),
            pred("nd_ra"),
            bit(Reg::NdRaOptsResult.field()),
        ]);
        let lla = p.mac.ipv6_lla();
        out.add(
            r.dp,
            Stage::LrInNdRaResponse,
            50,
            ra,
            vec![
                mv(f("eth.dst"), f("eth.src")),
                set("eth.src", macv(p.mac)),
                mv(f("ip6.dst"), f("ip6.src")),
                set("ip6.src", ip6(lla)),
                mv(f("outport"), f("inport")),
                loopback(),
                output(),
            ],
            own,
            "ra-response",
            Some(p.nb),
        );
    }
}
