//! Executions that ended with a retryable failure, so that a cancel arriving after one of them
//! can be told it came too late for it ([`CancelOutcome::AlreadyFinished`]) instead of being
//! remembered for the retry its caller is about to send (docs/host-runtime.md §7.2; found by a
//! hostile review: the remembered cancel answered the retry `cancelled` before its handler ran,
//! and that was stored under the key for its whole TTL).
//!
//! A note is taken when the execution's result is known to be a retryable failure, right after
//! its handler stopped, and is forgotten when a later execution of the same action by the same
//! owner reaches its handler (a retry that fails before that, on a store or credential error,
//! leaves the note in place). Notes lapse after [`PENDING_CANCEL_TTL_MS`], as a remembered
//! cancel does, and are dropped as they lapse. At most [`MAX_PENDING_CANCELS`] are held, and at
//! most [`MAX_PENDING_CANCELS_PER_CALLER`] of one owner, so no caller can fill the table and
//! leave everyone else's late cancels remembered.
//!
//! [`CancelOutcome::AlreadyFinished`]: super::CancelOutcome::AlreadyFinished

use std::collections::{HashMap, VecDeque};

use aip_connector_core::ids::ActionId;

use super::{
    ActionOwner, MAX_PENDING_CANCELS, MAX_PENDING_CANCELS_PER_CALLER, Millis, PENDING_CANCEL_TTL_MS,
};

/// The live notes, by action id, and in the order they were taken.
#[derive(Default)]
pub(super) struct RetriedNotes {
    /// Action id → each owner whose execution of it failed retryably, and when the note lapses
    /// (almost always one owner: ids are unique per caller).
    by_id: HashMap<ActionId, Vec<(ActionOwner, Millis)>>,
    /// Notes as taken: lapse times only grow along it (one TTL for all, and a clock that does
    /// not go back), so lapsed notes are at the front. An entry whose note was forgotten or
    /// renewed since stays until it lapses and is skipped then.
    order: VecDeque<(Millis, ActionId, ActionOwner)>,
    /// How many live notes each owner has.
    per_owner: HashMap<ActionOwner, usize>,
    /// Live notes.
    len: usize,
}

impl RetriedNotes {
    /// How many notes are live.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Notes that `owner`'s execution of `id` ended at `now` with a retryable failure; renews a
    /// note it has. Not taken when the table or the owner's share is full.
    pub(super) fn note(&mut self, id: &ActionId, owner: ActionOwner, now: Millis) {
        self.drop_lapsed(now);
        let lapses_at = now.saturating_add(PENDING_CANCEL_TTL_MS);
        let owners = self.by_id.entry(id.clone()).or_default();
        if let Some((_, lapse)) = owners.iter_mut().find(|(o, _)| *o == owner) {
            *lapse = lapses_at;
        } else {
            let held = self.per_owner.get(&owner).copied().unwrap_or(0);
            if self.len >= MAX_PENDING_CANCELS || held >= MAX_PENDING_CANCELS_PER_CALLER {
                if owners.is_empty() {
                    self.by_id.remove(id);
                }
                return;
            }
            owners.push((owner.clone(), lapses_at));
            *self.per_owner.entry(owner.clone()).or_default() += 1;
            self.len += 1;
        }
        self.order.push_back((lapses_at, id.clone(), owner));
        // Renewals add entries without notes; past twice the table's size, keep only the live.
        if self.order.len() > 2 * MAX_PENDING_CANCELS {
            let by_id = &self.by_id;
            self.order.retain(|(lapse, id, owner)| {
                by_id
                    .get(id)
                    .is_some_and(|owners| owners.iter().any(|(o, l)| o == owner && l == lapse))
            });
        }
    }

    /// Forgets `owner`'s note of `id`, whose execution starts again.
    pub(super) fn forget(&mut self, id: &ActionId, owner: &ActionOwner) {
        self.remove(id, |o, _| o == owner);
    }

    /// Whether a cancel of `id` at `now`, by `owner` (`None`: an operator's, for any owner),
    /// comes after an execution of it ended with a retryable failure.
    pub(super) fn is_late(&self, id: &ActionId, owner: Option<&ActionOwner>, now: Millis) -> bool {
        self.by_id.get(id).is_some_and(|owners| {
            owners
                .iter()
                .any(|(o, lapse)| *lapse > now && owner.is_none_or(|owner| owner == o))
        })
    }

    /// Drops the notes that lapsed by `now`.
    pub(super) fn drop_lapsed(&mut self, now: Millis) {
        while let Some((lapse, _, _)) = self.order.front()
            && *lapse <= now
        {
            let (lapse, id, owner) = self.order.pop_front().expect("looked at above");
            self.remove(&id, |o, l| *o == owner && l == lapse);
        }
    }

    /// Removes the notes of `id` that `matches` (owner, lapse time).
    fn remove(&mut self, id: &ActionId, matches: impl Fn(&ActionOwner, Millis) -> bool) {
        let Some(owners) = self.by_id.get_mut(id) else {
            return;
        };
        let mut removed = Vec::new();
        owners.retain(|(owner, lapse)| {
            let gone = matches(owner, *lapse);
            if gone {
                removed.push(owner.clone());
            }
            !gone
        });
        if owners.is_empty() {
            self.by_id.remove(id);
        }
        for owner in removed {
            self.len -= 1;
            if let Some(held) = self.per_owner.get_mut(&owner) {
                *held -= 1;
                if *held == 0 {
                    self.per_owner.remove(&owner);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(principal: &str) -> ActionOwner {
        ActionOwner {
            principal: principal.into(),
            tenant: Some("t1".into()),
        }
    }

    fn id(n: usize) -> ActionId {
        ActionId::trusted(format!("act_{n}"))
    }

    #[test]
    fn a_note_is_late_for_its_owner_and_an_operator_until_it_lapses() {
        let mut notes = RetriedNotes::default();
        notes.note(&id(1), owner("ada"), 1_000);
        assert!(notes.is_late(&id(1), Some(&owner("ada")), 1_000));
        assert!(notes.is_late(&id(1), None, 1_000));
        assert!(!notes.is_late(&id(1), Some(&owner("eve")), 1_000));
        assert!(!notes.is_late(&id(2), None, 1_000));
        let lapse = 1_000 + PENDING_CANCEL_TTL_MS;
        assert!(!notes.is_late(&id(1), None, lapse));
        notes.drop_lapsed(lapse);
        assert_eq!(notes.len(), 0);
        assert!(notes.by_id.is_empty() && notes.order.is_empty() && notes.per_owner.is_empty());
    }

    #[test]
    fn two_owners_of_one_id_keep_a_note_each_and_forget_their_own() {
        let mut notes = RetriedNotes::default();
        notes.note(&id(1), owner("ada"), 0);
        notes.note(&id(1), owner("eve"), 0);
        assert_eq!(notes.len(), 2);
        notes.forget(&id(1), &owner("eve"));
        assert!(notes.is_late(&id(1), Some(&owner("ada")), 1));
        assert!(!notes.is_late(&id(1), Some(&owner("eve")), 1));
        assert_eq!(notes.len(), 1);
    }

    #[test]
    fn a_renewed_note_lapses_from_its_renewal() {
        let mut notes = RetriedNotes::default();
        notes.note(&id(1), owner("ada"), 0);
        notes.note(&id(1), owner("ada"), 10_000);
        notes.drop_lapsed(PENDING_CANCEL_TTL_MS);
        assert!(notes.is_late(&id(1), None, PENDING_CANCEL_TTL_MS));
        assert_eq!(notes.len(), 1);
        notes.drop_lapsed(10_000 + PENDING_CANCEL_TTL_MS);
        assert_eq!(notes.len(), 0);
    }

    #[test]
    fn one_owner_cannot_take_more_than_its_share() {
        let mut notes = RetriedNotes::default();
        for n in 0..MAX_PENDING_CANCELS_PER_CALLER + 5 {
            notes.note(&id(n), owner("flood"), 0);
        }
        assert_eq!(notes.len(), MAX_PENDING_CANCELS_PER_CALLER);
        assert!(!notes.is_late(&id(MAX_PENDING_CANCELS_PER_CALLER), None, 1));
        // Everyone else still gets theirs.
        notes.note(&id(999_999), owner("ada"), 0);
        assert!(notes.is_late(&id(999_999), Some(&owner("ada")), 1));
        // Renewing a held note takes no share, and the entries of renewals stay bounded.
        for now in 0..3 * MAX_PENDING_CANCELS as Millis {
            notes.note(&id(0), owner("flood"), now);
        }
        assert!(notes.order.len() <= 2 * MAX_PENDING_CANCELS + 1);
        assert_eq!(notes.len(), MAX_PENDING_CANCELS_PER_CALLER + 1);
    }
}
