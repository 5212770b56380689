//! Trace records: per table visited, the flow that matched and what its actions did. Produced by
//! [`crate::Pipeline::trace`], which runs the same walk and the same op execution as the datapath
//! (with conntrack in "what if" mode), so what it prints is what the datapath does.

use std::fmt;

/// The flow that matched in a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceFlow {
    /// Its priority.
    pub priority: u16,
    /// Its match, as text.
    pub matches: String,
    /// Its actions, as text.
    pub actions: String,
    /// Its stable identity.
    pub id: crate::FlowId,
    /// Its stage name (`external_ids:stage-name`; empty when unknown).
    pub stage: String,
    /// Its SB `Logical_Flow` UUID.
    pub sb_uuid: Option<String>,
    /// Its NB origin (`external_ids:stage-hint`).
    pub stage_hint: Option<String>,
}

/// One table visit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRecord {
    /// The datapath's name.
    pub datapath: String,
    /// `ingress` or `egress`.
    pub pipeline: &'static str,
    /// The table number.
    pub table: u8,
    /// The flow that matched (`None`: nothing matched and the packet was dropped).
    pub flow: Option<TraceFlow>,
    /// What the actions did, in order (ops, conntrack results, drops and their reasons).
    pub effects: Vec<String>,
}

/// A packet's way through the program.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    /// Table visits in order.
    pub records: Vec<TraceRecord>,
}

impl fmt::Display for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for r in &self.records {
            match &r.flow {
                Some(fl) => writeln!(
                    f,
                    "{} {} table {} priority {}: {} => {}",
                    r.datapath, r.pipeline, r.table, fl.priority, fl.matches, fl.actions
                )?,
                None => writeln!(
                    f,
                    "{} {} table {}: no match",
                    r.datapath, r.pipeline, r.table
                )?,
            }
            for e in &r.effects {
                writeln!(f, "    {e}")?;
            }
        }
        Ok(())
    }
}
