//! `Chassis_Template_Var`, as ovn-northd 23.03's `sync_template_vars` writes it: one SB row per
//! NB row, by `chassis`, with the same `variables` (controllers substitute them in the flows
//! of their chassis). Two NB rows for one chassis: the first by UUID is written, the other is a
//! diagnostic (23.03 keeps one of them, whichever its hash table held last).

use crate::diag::Diags;
use crate::output::SbDesired;
use crate::topo::Topo;

/// Fills `sb.template_vars`.
pub fn build(topo: &Topo<'_>, sb: &mut SbDesired, diags: &mut Diags) {
    for v in topo.nb.chassis_template_var().values() {
        if sb.template_vars.contains_key(&v.chassis) {
            diags.push(
                "Chassis_Template_Var",
                v.uuid,
                &v.chassis,
                "another Chassis_Template_Var row names the same chassis; this one is not written to SB",
            );
            continue;
        }
        sb.template_vars.insert(
            v.chassis.clone(),
            v.variables
                .iter()
                .map(|(k, x)| (k.clone(), x.clone()))
                .collect(),
        );
    }
}
