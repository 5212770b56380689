//! Crashes, as opposed to handoffs: a process of a chassis dies and a new one starts with only
//! what the real one keeps on local storage.
//!
//! What it does not do: restart controllers (a controller keeps nothing of its own:
//! [`World::restart_controller`] is already a crash) or northd ([`World::restart_northd`]).

use super::World;

impl World {
    /// Crashes chassis `name`'s datapath: a new datapath starts with only the zone map its
    /// predecessor mirrored to local storage (no conntrack entry, no program, no flow cache,
    /// nothing queued), the same local ports attached, and the running controller reconnects
    /// to it and installs its program again. Compare [`World::restart_datapath`], a handoff of
    /// the whole state.
    pub fn crash_datapath(&mut self, name: &str) -> Result<(), String> {
        let c = self.chassis_index(name)?;
        self.chassis[c].crash_datapath(self.now);
        self.event(format!(
            "datapath {name} crashed; a new one started with the zone map only"
        ));
        self.settle();
        Ok(())
    }
}
