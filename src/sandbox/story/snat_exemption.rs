//! The `snat-exemption` story: incident A, on OVN-Kubernetes' shared-gateway design
//! (`hf_sim::world::incident_a`, the world `tests/incidents.rs` runs). It builds its own
//! simulated cluster (not the sandbox's topology): node `hv1` with gateway router `GR_node1`
//! (10.6.158.12 on the provider network), the pod `pod1` (10.129.0.9) with the incident's
//! per-pod `snat` row, etcd on another control-plane node's host network (10.6.158.13), which
//! accepts the pod's own address only (mutual TLS), a NodePort client and a service outside
//! the cluster's host networks.
//!
//! 1. The cluster with the incident's row.
//! 2. `holdfast check` on its NB and SB (the core `hf_check` the command runs): the row is an
//!    error (`snat-internal`), printed as the command prints it.
//! 3. The row as it was: the pod's connection to etcd arrives from the node's address and is
//!    refused, as in the incident.
//! 4. The same cluster with the row scoped each of the three ways (`exempted_ext_ips`,
//!    `allowed_ext_ips`, the NAT `match`): etcd sees the pod's address and takes every byte,
//!    the outside service still sees the node's address, and the NodePort's replies, which
//!    cross the same router, still arrive.
//! 5. `holdfast check` on each fixed NB and SB: no `snat-internal` finding.
//!
//! The story fails when any of that does not happen (also when the unscoped row does not
//! break: the control must be able to fail).

use hf_sim::world::World;
use hf_sim::world::incident_a::{
    self, CLIENT, CLIENT_IP, ETCD, ETCD_IP, HOST_NETWORKS, NODE_IP, OUTSIDE, OUTSIDE_IP, POD,
    POD_IP, Scoping,
};

use super::{Verdict, check_findings};

/// `holdfast check`'s `snat-internal` findings on the world's NB and SB.
fn snat_findings(w: &World) -> Result<Vec<hf_check::Finding>, String> {
    check_findings(w, hf_check::Code::SnatInternal)
}
use crate::sandbox::Printer;

/// Bytes of each connection.
const BYTES: u64 = 256 * 1024;

/// What one run showed.
struct Run {
    /// etcd: (address it saw, outcome, bytes verified).
    etcd: Vec<(String, String, u64)>,
    /// The pod's own record of its etcd connection.
    pod_etcd: String,
    /// outside: (address it saw, bytes verified).
    outside: Vec<(String, u64)>,
    /// The NodePort client's download: outcome, bytes verified.
    nodeport: (String, u64),
}

fn run(seed: u64, s: Scoping) -> (World, Run) {
    let mut w = incident_a::world(seed, s);
    let c = incident_a::run(&mut w, BYTES);
    let etcd = incident_a::served(&w, ETCD)
        .iter()
        .map(|r| {
            (
                r.remote_ip().to_string(),
                r.outcome.clone(),
                r.bytes_verified,
            )
        })
        .collect();
    let outside = incident_a::served(&w, OUTSIDE)
        .iter()
        .map(|r| (r.remote_ip().to_string(), r.bytes_verified))
        .collect();
    let pod_etcd = w
        .tcp_record(POD, &c.etcd)
        .map_or_else(|| "no record".into(), |r| r.outcome);
    let nodeport = w.tcp_record(CLIENT, &c.nodeport).map_or_else(
        || ("no record".into(), 0),
        |r| (r.outcome, r.bytes_verified),
    );
    (
        w,
        Run {
            etcd,
            pod_etcd,
            outside,
            nodeport,
        },
    )
}

/// The story; its verdict.
pub fn story(seed: u64, p: Printer) -> Verdict {
    p.progress(
        1,
        &format!(
            "incident A on OVN-Kubernetes' shared gateway: {POD} ({POD_IP}) on hv1 behind GR_node1 \
             ({NODE_IP}), with the per-pod snat row {POD_IP} -> {NODE_IP}"
        ),
    );
    p.info(&format!(
        "  etcd ({ETCD_IP}, a control-plane node's host network in {HOST_NETWORKS}) accepts only \
         {POD_IP}, as its mutual TLS does;\n  a NodePort client ({CLIENT_IP}) downloads through \
         {NODE_IP}:{}; a service outside the host networks ({OUTSIDE_IP}) takes an upload",
        incident_a::NODE_PORT
    ));
    let mut failures: Vec<String> = Vec::new();
    // The incident's row, first through the preflight.
    let (w, r) = run(seed, Scoping::None);
    p.progress(2, "holdfast check on the incident's NB and SB");
    match snat_findings(&w) {
        Ok(found) if !found.is_empty() => {
            for l in hf_check::render_text(&found).lines() {
                if !l.is_empty() {
                    p.result(&format!("  {l}"));
                }
            }
        }
        Ok(_) => failures.push("holdfast check did not find the incident's row".into()),
        Err(e) => failures.push(format!("holdfast check could not read the databases: {e}")),
    }
    p.progress(3, "the row as the incident had it (no scoping)");
    let refused = !r.etcd.is_empty()
        && r.etcd
            .iter()
            .all(|(ip, outcome, _)| ip == NODE_IP && outcome.starts_with("refused"));
    for (ip, outcome, _) in &r.etcd {
        p.result(&format!("  etcd saw {ip}: {outcome}"));
    }
    p.result(&format!(
        "  {POD} -> etcd: {} ({})",
        r.pod_etcd,
        if refused {
            "broken, as in the incident"
        } else {
            "NOT broken: the control case did not reproduce the incident"
        }
    ));
    if !refused {
        failures.push("the unscoped row did not break the etcd connection".into());
    }
    // The fixes.
    p.progress(
        4,
        "the same cluster with the row scoped each of the three ways (then holdfast check)",
    );
    let mut clean = Vec::new();
    for s in Scoping::SCOPED {
        let (w, r) = run(seed, s);
        match snat_findings(&w) {
            Ok(found) if found.is_empty() => clean.push(s.name()),
            Ok(found) => failures.push(format!(
                "{}: holdfast check still reports the row: {}",
                s.name(),
                found[0].message
            )),
            Err(e) => failures.push(format!("holdfast check could not read the databases: {e}")),
        }
        let etcd_ok = r.etcd.len() == 1
            && r.etcd[0].0 == POD_IP
            && r.etcd[0].1 == "complete"
            && r.etcd[0].2 == BYTES;
        let outside_ok =
            r.outside.len() == 1 && r.outside[0].0 == NODE_IP && r.outside[0].1 == BYTES;
        let np_ok = r.nodeport.0 == "complete" && r.nodeport.1 == BYTES;
        p.result(&format!("  {}:", s.name()));
        for (ip, outcome, verified) in &r.etcd {
            p.result(&format!(
                "    etcd saw {ip}: {outcome}, {verified} of {BYTES} bytes verified{}",
                if etcd_ok { "" } else { "  <-- wrong" }
            ));
        }
        for (ip, verified) in &r.outside {
            p.result(&format!(
                "    outside saw {ip}: {verified} of {BYTES} bytes verified (still SNATed){}",
                if outside_ok { "" } else { "  <-- wrong" }
            ));
        }
        p.result(&format!(
            "    NodePort {NODE_IP}:{} -> {POD}: {}, {} of {BYTES} bytes verified at the client{}",
            incident_a::NODE_PORT,
            r.nodeport.0,
            r.nodeport.1,
            if np_ok { "" } else { "  <-- wrong" }
        ));
        for (ok, what) in [
            (etcd_ok, "etcd did not serve the pod's own address"),
            (
                outside_ok,
                "the outside service did not see the node's address",
            ),
            (np_ok, "the NodePort replies did not arrive"),
        ] {
            if !ok {
                failures.push(format!("{}: {what}", s.name()));
            }
        }
    }
    p.progress(5, "holdfast check on the scoped rows");
    p.result(&format!(
        "  no snat-internal finding with {} ({} of {})",
        clean.join(", "),
        clean.len(),
        Scoping::SCOPED.len()
    ));
    if failures.is_empty() {
        Verdict::Ok
    } else {
        for f in &failures {
            p.result(&format!("  failed: {f}"));
        }
        Verdict::Failed(Some(failures.join("; ")))
    }
}
