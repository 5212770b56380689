//! Incident A (`000`): during a CNI migration a per-pod `snat` row on the node's gateway router
//! (`logical_ip` the pod, `external_ip` the node) also rewrote the pod's traffic to etcd on
//! the host network of another node; etcd's mutual TLS refused the node's address and the
//! cluster fell over. Here, in the deterministic simulator, on OVN-Kubernetes' shared-gateway
//! design (crates/hf-sim/src/world/incident_a.rs): etcd accepts the pod's address only.
//!
//! - Scoped three ways (`exempted_ext_ips`, `allowed_ext_ips`, the 24.09 NAT `match`): etcd
//!   sees the pod's own address and serves it; a service outside the host networks still sees
//!   the node's address (the SNAT still works where it should); a NodePort-like load balancer
//!   on the same router still answers (its replies cross the scoped SNAT).
//! - The incident's row as it was: etcd sees the node's address and refuses the connection,
//!   and `holdfast check` (its core, `hf_check`) names the row as an error; on each scoped row
//!   it finds nothing.

use hf_sim::net::TcpRecord;
use hf_sim::world::World;
use hf_sim::world::incident_a::{
    self, CLIENT, Conns, ETCD, NODE_IP, OUTSIDE, POD, POD_IP, Scoping, served,
};

const BYTES: u64 = 64 * 1024;

/// `holdfast check`'s `snat-internal` findings on the world's NB and SB, and its error count.
fn snat_findings(w: &World) -> (Vec<hf_check::Finding>, usize) {
    let nb = w.nb_snapshot().expect("NB");
    let sb = w.sb_snapshot().expect("SB");
    let all = hf_check::check(&nb, &sb, &[], &hf_check::Options::default());
    let (errors, _) = hf_check::counts(&all);
    (
        all.into_iter()
            .filter(|f| f.code == hf_check::Code::SnatInternal)
            .collect(),
        errors,
    )
}

fn summary(w: &World, c: &Conns) -> String {
    let mut out = String::new();
    for (h, n) in [(POD, &c.etcd), (POD, &c.outside), (CLIENT, &c.nodeport)] {
        out.push_str(&format!("{h} {n}: {:?}\n", w.tcp_record(h, n)));
    }
    for h in [ETCD, OUTSIDE, POD] {
        for r in served(w, h) {
            out.push_str(&format!("{h} served {r:?}\n"));
        }
    }
    out
}

fn complete(r: Option<TcpRecord>, what: &str, s: &str) -> TcpRecord {
    let r = r.unwrap_or_else(|| panic!("{what}: no record\n{s}"));
    assert_eq!(r.outcome, "complete", "{what}\n{s}");
    assert_eq!(r.resets_received, 0, "{what}\n{s}");
    r
}

#[test]
fn every_scoping_form_keeps_the_pods_address_to_etcd_and_the_nodes_address_outside() {
    for s in Scoping::SCOPED {
        let mut w = incident_a::world(17, s);
        let c = incident_a::run(&mut w, BYTES);
        let sum = format!("scoping {}:\n{}", s.name(), summary(&w, &c));
        // The preflight agrees: nothing to report.
        let (found, errors) = snat_findings(&w);
        assert!(found.is_empty() && errors == 0, "{}: {found:#?}", s.name());
        // etcd saw the pod and served it: every byte verified at etcd.
        complete(w.tcp_record(POD, &c.etcd), "pod -> etcd", &sum);
        let at_etcd = served(&w, ETCD);
        assert_eq!(at_etcd.len(), 1, "{sum}");
        assert_eq!(at_etcd[0].remote_ip(), POD_IP, "{sum}");
        assert_eq!(at_etcd[0].bytes_verified, BYTES, "{sum}");
        // Outside the cluster the row still applies.
        complete(w.tcp_record(POD, &c.outside), "pod -> outside", &sum);
        let at_outside = served(&w, OUTSIDE);
        assert_eq!(at_outside.len(), 1, "{sum}");
        assert_eq!(at_outside[0].remote_ip(), NODE_IP, "{sum}");
        assert_eq!(at_outside[0].bytes_verified, BYTES, "{sum}");
        // NodePort: the client's download came back through the router, every byte.
        let np = complete(
            w.tcp_record(CLIENT, &c.nodeport),
            "client -> nodeport",
            &sum,
        );
        assert_eq!(np.bytes_verified, BYTES, "{sum}");
        let at_pod = served(&w, POD);
        assert_eq!(at_pod.len(), 1, "{sum}");
        assert_eq!(
            at_pod[0].remote_ip(),
            incident_a::CLIENT_IP.to_string(),
            "{sum}"
        );
    }
}

#[test]
fn control_the_incidents_row_rewrites_the_pod_to_the_node_and_etcd_refuses_it() {
    let mut w = incident_a::world(17, Scoping::None);
    let c = incident_a::run(&mut w, BYTES);
    let sum = summary(&w, &c);
    // etcd saw the node's address, refused it (mutual TLS), and the pod's connection died.
    let at_etcd = served(&w, ETCD);
    assert!(!at_etcd.is_empty(), "{sum}");
    for r in &at_etcd {
        assert_eq!(r.remote_ip(), NODE_IP, "{sum}");
        assert!(r.outcome.starts_with("refused"), "{sum}");
        // It read the first bytes (a TLS server reads the ClientHello), never the rest.
        assert!(r.bytes_verified < BYTES, "{sum}");
    }
    let pod = w.tcp_record(POD, &c.etcd).expect("record");
    assert_eq!(pod.outcome, "reset", "{sum}");
    // `holdfast check` would have caught it: one error, naming the row and the fix.
    let (found, errors) = snat_findings(&w);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(errors >= 1);
    let f = &found[0];
    assert_eq!(f.severity, hf_check::Severity::Error);
    assert_eq!(f.table, "NAT");
    let row = w
        .nb_snapshot()
        .expect("NB")
        .nat()
        .values()
        .find(|n| n.logical_ip == POD_IP)
        .map(|n| n.uuid.to_string())
        .expect("the row");
    assert_eq!(f.row, row);
    assert!(
        f.message.contains(POD_IP) && f.message.contains("GR_node1"),
        "{f:?}"
    );
    assert!(f.fix.contains("exempted_ext_ips"), "{f:?}");
    // The rest works as with the scoped rows: only the internal destination broke.
    complete(w.tcp_record(POD, &c.outside), "pod -> outside", &sum);
    complete(
        w.tcp_record(CLIENT, &c.nodeport),
        "client -> nodeport",
        &sum,
    );
}
