//! Load balancer templates (`Load_Balancer options:template=true`: VIPs and backends written
//! as `^variable`s that each chassis expands from its `Chassis_Template_Var`), which holdfast
//! northd does not build: such a load balancer gets [`NOT_BUILT`] as a diagnostic and no flows (ovn-northd 23.03 writes flows naming the variables,
//! and ovn-controller expands them; neither half is built here).

use hf_model::nb;

/// The diagnostic a template load balancer gets.
pub const NOT_BUILT: &str = "options:template=true: load balancer templates (^variable VIPs and backends expanded per chassis from Chassis_Template_Var) are not built by holdfast northd; the load balancer is left out";

/// Whether `lb` is a template load balancer.
pub fn is_template(lb: &nb::LoadBalancer) -> bool {
    lb.options.get("template").is_some_and(|v| v == "true")
}
