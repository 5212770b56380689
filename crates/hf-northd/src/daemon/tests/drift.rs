//! Drift repair: a row another SB writer changed, in the race where northd takes that change
//! for the echo of its own transaction (so nothing triggers a diff), stays wrong through
//! scoped syncs and is restored by `inc-engine/recompute` and by the periodic full diff,
//! which runs on the core's clock (the simulation's virtual one).

use super::*;
use crate::daemon::core::FULL_DIFF_INTERVAL_MS;

/// Sets one flow's actions to `drop;` behind northd's back; returns (flow, its actions).
fn drift(sim: &mut Sim) -> (uuid::Uuid, String) {
    let sb = sim.db_sb();
    let (fu, f) = sb
        .logical_flow()
        .iter()
        .find(|(_, f)| &*f.actions != "drop;")
        .map(|(u, f)| (*u, f.actions.to_string()))
        .expect("a flow");
    sim.nodes[0].nd.expect_echo_for_test(&[fu]);
    sim.sb(json!([{"op": "update", "table": "Logical_Flow",
        "where": [["_uuid", "==", ["uuid", fu.to_string()]]], "row": {"actions": "drop;"}}]));
    sim.run();
    (fu, f)
}

fn actions(sim: &Sim, u: uuid::Uuid) -> String {
    sim.db_sb().logical_flow()[&u].actions.to_string()
}

#[test]
fn unseen_drift_is_repaired_by_recompute_and_by_the_periodic_full_diff() {
    let mut sim = Sim::new(1);
    sim.nb_with_cfg(vec![
        json!({"op": "insert", "table": "Logical_Switch", "row": {"name": "sw0"}}),
        json!({"op": "insert", "table": "Logical_Switch", "row": {"name": "sw1"}}),
    ]);
    sim.nb_with_cfg(lsp_ops("sw0", "p1", 1));
    sim.run();
    let (fu, want) = drift(&mut sim);
    assert_eq!(actions(&sim, fu), "drop;", "the drift was repaired at once");
    // A scoped sync (a port elsewhere) compares only what the NB change touched.
    let full = sim.nodes[0].nd.stats().full_diffs;
    sim.nb_with_cfg(lsp_ops("sw1", "p2", 2));
    sim.run();
    assert_eq!(sim.nodes[0].nd.stats().full_diffs, full);
    assert!(sim.nodes[0].nd.stats().scoped_diffs > 0);
    assert_eq!(actions(&sim, fu), "drop;");
    // `inc-engine/recompute`: a full compile and a full diff.
    sim.nodes[0].nd.recompute();
    sim.run();
    assert_eq!(
        actions(&sim, fu),
        want,
        "inc-engine/recompute left the drift"
    );
    assert_eq!(sim.nodes[0].nd.stats().full_diffs, full + 1);
    // The periodic full diff, on the core's clock: not before the period, at it.
    let (fu, want) = drift(&mut sim);
    sim.advance(FULL_DIFF_INTERVAL_MS - 1);
    assert_eq!(
        actions(&sim, fu),
        "drop;",
        "a full diff ran before its period"
    );
    sim.advance(1);
    assert_eq!(
        actions(&sim, fu),
        want,
        "the periodic full diff left the drift"
    );
    assert_complete(&sim);
}
