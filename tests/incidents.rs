//! The incidents of `../shared/incidents/`, replayed end to end: one module per incident
//! (DESIGN "Workspace"). Each replays what broke in the field on holdfast, shows holdfast
//! keeps the connections, and shows the naive design breaking in the same world.

#[path = "incidents/incident_a.rs"]
mod incident_a;
#[path = "incidents/incident_b.rs"]
mod incident_b;
#[path = "incidents/incident_c.rs"]
mod incident_c;
#[path = "incidents/incident_d.rs"]
mod incident_d;
