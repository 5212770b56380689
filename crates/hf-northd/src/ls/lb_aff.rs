//! `ls_in_lb_aff_check` and `ls_in_lb_aff_learn`: load-balancer affinity. holdfast does not
//! compile `options:affinity_timeout` (a diagnostic per load balancer says so, see
//! [`super::index`]); the stages pass packets on.

use super::Sw;
use super::act::next;
use crate::build::always;
use crate::diag::Diags;
use crate::flow::Flows;
use crate::stage::Stage;

/// Writes both stages for `sw`.
pub fn build(sw: &Sw<'_, '_>, out: &mut Flows, _diags: &mut Diags) {
    for stage in [Stage::LsInLbAffCheck, Stage::LsInLbAffLearn] {
        sw.dflt(out, stage, 0, "default", always(), vec![next()]);
    }
}
