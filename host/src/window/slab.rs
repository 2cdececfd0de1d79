//! [`Slab`]: an engine's live windows by id, in a vector of slots that closed windows leave
//! free for the next ones. An id names a slot and the slot's generation, so an id kept after
//! its window closed (in the list of windows with pending events, or the change log) finds
//! nothing, even once the slot holds another window. (The generation wraps after 2^32 windows
//! in one slot; stale ids live for a batch or a checkpoint interval, far shorter.)
//!
//! Depends on nothing else of the crate.

use std::ops::Index;

/// A live window's id.
pub type WindowId = u64;

/// Values by id, found by indexing instead of hashing.
#[derive(Debug)]
pub struct Slab<T> {
    slots: Vec<Slot<T>>,
    /// Slots without a value.
    free: Vec<u32>,
    len: usize,
}

#[derive(Debug)]
struct Slot<T> {
    /// Bumped whenever the slot's value is removed.
    generation: u32,
    value: Option<T>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
}

fn split(id: WindowId) -> (usize, u32) {
    ((id & u64::from(u32::MAX)) as usize, (id >> 32) as u32)
}

impl<T> Slab<T> {
    /// Stores the value `make` builds from its new id.
    pub fn insert_with(&mut self, make: impl FnOnce(WindowId) -> T) -> WindowId {
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                let index = u32::try_from(self.slots.len()).expect("fewer than 2^32 windows");
                self.slots.push(Slot {
                    generation: 0,
                    value: None,
                });
                index
            }
        };
        let slot = &mut self.slots[index as usize];
        let id = u64::from(slot.generation) << 32 | u64::from(index);
        slot.value = Some(make(id));
        self.len += 1;
        id
    }

    /// The value of `id`, unless it was removed.
    pub fn get(&self, id: WindowId) -> Option<&T> {
        let (index, generation) = split(id);
        let slot = self.slots.get(index)?;
        slot.value
            .as_ref()
            .filter(|_| slot.generation == generation)
    }

    /// The value of `id`, unless it was removed.
    pub fn get_mut(&mut self, id: WindowId) -> Option<&mut T> {
        let (index, generation) = split(id);
        let slot = self.slots.get_mut(index)?;
        slot.value
            .as_mut()
            .filter(|_| slot.generation == generation)
    }

    /// Removes the value of `id`; its id finds nothing from now on.
    pub fn remove(&mut self, id: WindowId) -> Option<T> {
        let (index, generation) = split(id);
        let slot = self.slots.get_mut(index)?;
        if slot.generation != generation {
            return None;
        }
        let value = slot.value.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(index as u32);
        self.len -= 1;
        Some(value)
    }

    /// Values stored.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Every value with its id.
    pub fn iter(&self) -> impl Iterator<Item = (WindowId, &T)> {
        (self.slots.iter().enumerate()).filter_map(|(index, slot)| {
            let id = u64::from(slot.generation) << 32 | index as u64;
            slot.value.as_ref().map(|value| (id, value))
        })
    }

    /// Every value.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().filter_map(|slot| slot.value.as_mut())
    }
}

impl<T> Index<WindowId> for Slab<T> {
    type Output = T;

    fn index(&self, id: WindowId) -> &T {
        self.get(id).expect("a live window")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_finds_nothing_once_its_value_is_removed_even_when_its_slot_is_reused() {
        let mut slab = Slab::default();
        let a = slab.insert_with(|id| (id, "a"));
        let b = slab.insert_with(|id| (id, "b"));
        assert_eq!(slab[a], (a, "a"));
        assert_eq!(slab.remove(a), Some((a, "a")));
        assert_eq!(slab.remove(a), None);
        let c = slab.insert_with(|id| (id, "c"));
        assert_ne!(a, c, "the slot is reused under a new id");
        assert_eq!(slab.get(a), None);
        assert_eq!(slab.get(c), Some(&(c, "c")));
        assert_eq!(slab.len(), 2);
        let ids: Vec<WindowId> = slab.iter().map(|(id, _)| id).collect();
        assert_eq!(ids, vec![c, b]);
    }
}
