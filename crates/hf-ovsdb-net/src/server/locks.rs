//! OVSDB locks (RFC 7047 section 4.1.8-4.1.11): one owner per name, waiters in request order.

use std::collections::VecDeque;

use hashbrown::HashMap;

use super::SessionId;

#[derive(Debug, Default)]
struct LockState {
    owner: Option<SessionId>,
    waiters: VecDeque<SessionId>,
}

/// The lock table of one server.
#[derive(Debug, Default)]
pub struct Locks {
    map: HashMap<String, LockState>,
}

impl Locks {
    /// `lock`: returns whether `sid` holds the lock now (otherwise it waits in line).
    pub fn lock(&mut self, sid: SessionId, name: &str) -> bool {
        let st = self.map.entry(name.to_string()).or_default();
        match st.owner {
            None => {
                st.owner = Some(sid);
                true
            }
            Some(o) if o == sid => true,
            Some(_) => {
                if !st.waiters.contains(&sid) {
                    st.waiters.push_back(sid);
                }
                false
            }
        }
    }

    /// `steal`: `sid` takes the lock; returns the previous owner (who gets "stolen" and keeps
    /// waiting in line, so it gets the lock back with "locked" when the thief lets go).
    pub fn steal(&mut self, sid: SessionId, name: &str) -> Option<SessionId> {
        let st = self.map.entry(name.to_string()).or_default();
        st.waiters.retain(|w| *w != sid);
        let prev = st.owner.replace(sid).filter(|p| *p != sid);
        if let Some(p) = prev {
            st.waiters.push_front(p);
        }
        prev
    }

    /// `unlock` (or disconnect): returns the session that now holds the lock, if it changed hands.
    pub fn unlock(&mut self, sid: SessionId, name: &str) -> Option<SessionId> {
        let st = self.map.get_mut(name)?;
        st.waiters.retain(|w| *w != sid);
        let mut new_owner = None;
        if st.owner == Some(sid) {
            st.owner = st.waiters.pop_front();
            new_owner = st.owner;
        }
        if st.owner.is_none() && st.waiters.is_empty() {
            self.map.remove(name);
        }
        new_owner
    }

    /// Whether `sid` holds `name`.
    pub fn owns(&self, sid: SessionId, name: &str) -> bool {
        self.map.get(name).is_some_and(|s| s.owner == Some(sid))
    }

    /// Release everything `sid` holds or waits for; returns (lock, new owner) hand-overs.
    pub fn release_all(&mut self, sid: SessionId) -> Vec<(String, SessionId)> {
        let names: Vec<String> = self
            .map
            .iter()
            .filter(|(_, s)| s.owner == Some(sid) || s.waiters.contains(&sid))
            .map(|(n, _)| n.clone())
            .collect();
        let mut out = Vec::new();
        for n in names {
            if let Some(o) = self.unlock(sid, &n) {
                out.push((n, o));
            }
        }
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_owner_and_hand_over_in_order() {
        let mut l = Locks::default();
        assert!(l.lock(1, "a"));
        assert!(!l.lock(2, "a"));
        assert!(!l.lock(3, "a"));
        assert_eq!(l.unlock(1, "a"), Some(2));
        assert!(l.owns(2, "a") && !l.owns(1, "a"));
        assert_eq!(l.release_all(2), vec![("a".to_string(), 3)]);
        assert_eq!(l.steal(4, "a"), Some(3));
        assert!(l.owns(4, "a"));
        assert_eq!(
            l.unlock(4, "a"),
            Some(3),
            "the victim of a steal gets the lock back"
        );
    }
}
