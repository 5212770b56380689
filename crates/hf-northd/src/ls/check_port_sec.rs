//! `ls_in_check_port_sec` and `ls_out_check_port_sec`: admission and port security.
//!
//! OVN 23.03 checks port security (MAC and IP, from SB `Port_Binding.port_security`) in the
//! controller through `check_in_port_sec()` / `check_out_port_sec()`; northd writes the calls
//! and the per-port exceptions: a disabled port's packets are marked to drop, logical VLANs
//! and multicast source MACs are dropped. External ports have no flows here.

use hf_expr::actions::ResultFn;

use super::Sw;
use super::act::{next, result, set};
use crate::build::{always, bit, inport, pred};
use crate::diag::Diags;
use crate::flow::Flows;
use crate::regs::Reg;
use crate::stage::Stage;
use crate::topo::PortKind;

/// Writes both stages for `sw`.
pub fn build(sw: &Sw<'_, '_>, out: &mut Flows, diags: &mut Diags) {
    let ls = sw
        .topo
        .nb
        .logical_switch()
        .get(&sw.topo.datapaths[sw.dp].nb);
    let vlan_passthru = ls.is_some_and(|l| {
        l.other_config
            .get("vlan-passthru")
            .is_some_and(|v| v == "true")
    });
    if !vlan_passthru {
        sw.dflt(
            out,
            Stage::LsInCheckPortSec,
            100,
            "vlan",
            pred("vlan.present"),
            vec![hf_expr::Action::drop()],
        );
    }
    sw.dflt(
        out,
        Stage::LsInCheckPortSec,
        100,
        "mcast-src",
        bit(hf_expr::FieldRef::bits("eth.src", 40, 40)),
        vec![hf_expr::Action::drop()],
    );
    sw.dflt(
        out,
        Stage::LsInCheckPortSec,
        50,
        "check",
        always(),
        vec![
            result(Reg::PortSecDrop.field(), ResultFn::CheckInPortSec),
            next(),
        ],
    );
    for p in sw.ports {
        let port = sw.port(*p);
        if matches!(&port.kind, PortKind::OtherLsp(t) if t == "external") {
            continue;
        }
        if !port.enabled {
            sw.for_port(
                out,
                Stage::LsInCheckPortSec,
                100,
                *p,
                "disabled",
                inport(&port.name),
                vec![set(Reg::PortSecDrop, 1), next()],
            );
            continue;
        }
        if matches!(&port.kind, PortKind::OtherLsp(t) if t == "vtep") {
            diags.push(
                "Logical_Switch_Port",
                port.nb,
                &port.name,
                "type vtep is not compiled by holdfast northd; the port is treated as a VIF",
            );
        }
        if let Some(q) = port.options.get("qdisc_queue_id") {
            diags.push(
                "Logical_Switch_Port",
                port.nb,
                &port.name,
                format!("options:qdisc_queue_id={q} (QoS queues) is not compiled; the port is not shaped"),
            );
        }
    }
    // Egress: multicast is not checked; everything else is.
    sw.dflt(
        out,
        Stage::LsOutCheckPortSec,
        100,
        "mcast",
        pred("eth.mcast"),
        vec![set(Reg::PortSecDrop, 0), next()],
    );
    sw.dflt(
        out,
        Stage::LsOutCheckPortSec,
        0,
        "check",
        always(),
        vec![
            result(Reg::PortSecDrop.field(), ResultFn::CheckOutPortSec),
            next(),
        ],
    );
}
