//! `ls_in_external_port`: ARP/ND requests for router addresses from an `external` port arriving
//! through a localnet port are dropped on chassis that do not bind the external port, so only
//! its chassis runs the router pipeline for it.

use hf_expr::Action;

use super::Sw;
use super::act::next;
use super::arp_rsp::{arp_for, lsp_addrs, ns_for};
use crate::build::{always, and, eq, f, inport, mac, not};
use crate::diag::Diags;
use crate::flow::Flows;
use crate::stage::Stage;
use crate::topo::PortKind;

/// Writes the stage for `sw`.
pub fn build(sw: &Sw<'_, '_>, out: &mut Flows, _diags: &mut Diags) {
    sw.dflt(
        out,
        Stage::LsInExternalPort,
        0,
        "default",
        always(),
        vec![next()],
    );
    for p in sw.ports {
        let port = sw.port(*p);
        if !matches!(&port.kind, PortKind::OtherLsp(t) if t == "external") {
            continue;
        }
        let resident = || {
            not(hf_expr::ast::Expr::ChassisResident {
                port: port.name.clone(),
                span: hf_expr::Span::default(),
            })
        };
        for own in lsp_addrs(sw, *p) {
            for ln in &sw.localnet {
                let ln_name = &sw.port(*ln).name;
                for rp in &sw.router_ports {
                    for ra in lsp_addrs(sw, *rp) {
                        let base =
                            || vec![inport(ln_name), eq(f("eth.src"), mac(own.mac)), resident()];
                        for ip in &ra.v4 {
                            let mut m = base();
                            m.push(arp_for(*ip));
                            sw.for_port(
                                out,
                                Stage::LsInExternalPort,
                                100,
                                *p,
                                format!("{ln_name} {} arp {ip}", own.mac),
                                and(m),
                                vec![Action::drop()],
                            );
                        }
                        for ip in &ra.v6 {
                            let mut m = base();
                            m.push(ns_for(*ip));
                            sw.for_port(
                                out,
                                Stage::LsInExternalPort,
                                100,
                                *p,
                                format!("{ln_name} {} nd {ip}", own.mac),
                                and(m),
                                vec![Action::drop()],
                            );
                        }
                        let mut m = base();
                        m.insert(2, eq(f("eth.dst"), mac(ra.mac)));
                        sw.for_port(
                            out,
                            Stage::LsInExternalPort,
                            100,
                            *p,
                            format!("{ln_name} {} mac {}", own.mac, ra.mac),
                            and(m),
                            vec![Action::drop()],
                        );
                    }
                }
            }
        }
    }
}
