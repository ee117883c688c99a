//! Compile slots: how many modules compile at once, and who goes first. Starts and reloads (a
//! plugin or an operator waits for them) go before a background tier-up.

use std::sync::{Condvar, Mutex};

use super::compiler::Urgency;
use crate::sync::{lock, wait};

/// The compiles running, at most `max` at once. Starts and reloads (a plugin or an operator
/// waits for them) go first: a background tier-up starts only while none of them waits, and
/// leaves one slot free for them (with `max` of 2 or more).
pub(super) struct CompileSlots {
    state: Mutex<Slots>,
    freed: Condvar,
    max: usize,
}

/// What [`CompileSlots`] holds and who waits.
#[derive(Debug, Default)]
struct Slots {
    running: usize,
    /// Of `running`, the background compiles.
    background: usize,
    /// Starts and reloads waiting for a slot.
    foreground_waiting: usize,
}

impl Slots {
    /// Whether a compile of `urgency` may take a slot now, out of `max`.
    fn may_take(&self, urgency: Urgency, max: usize) -> bool {
        match urgency {
            Urgency::Foreground => self.running < max,
            Urgency::Background => {
                self.running < max
                    && self.foreground_waiting == 0
                    && (max == 1 || self.background + 1 < max)
            }
        }
    }
}

/// One compile's place among [`CompileSlots`], given back when dropped.
pub(super) struct CompileSlot<'a>(&'a CompileSlots, Urgency);

impl CompileSlots {
    /// At most `max` compiles at once (at least one).
    pub(super) fn new(max: usize) -> Self {
        Self {
            state: Mutex::default(),
            freed: Condvar::new(),
            max: max.max(1),
        }
    }

    /// Waits for a place (as long as the compiles that hold them take: each at most its
    /// bound).
    pub(super) fn take(&self, urgency: Urgency) -> CompileSlot<'_> {
        let mut st = lock(&self.state);
        let foreground = urgency == Urgency::Foreground;
        st.foreground_waiting += usize::from(foreground);
        while !st.may_take(urgency, self.max) {
            st = wait(&self.freed, st);
        }
        st.foreground_waiting -= usize::from(foreground);
        st.running += 1;
        st.background += usize::from(!foreground);
        CompileSlot(self, urgency)
    }
}

impl Drop for CompileSlot<'_> {
    fn drop(&mut self) {
        let mut st = lock(&self.0.state);
        st.running -= 1;
        st.background -= usize::from(self.1 == Urgency::Background);
        drop(st);
        // Waiters wait on different conditions: each checks its own.
        self.0.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_tier_up_never_takes_the_last_slot_nor_one_a_start_waits_for() {
        let fg = Urgency::Foreground;
        let bg = Urgency::Background;
        let at = |running, background, foreground_waiting| Slots {
            running,
            background,
            foreground_waiting,
        };
        // Two slots: one tier-up runs, a second waits though a slot is free (the last one,
        // kept for a start or a reload), which a start takes.
        assert!(at(0, 0, 0).may_take(bg, 2));
        assert!(!at(1, 1, 0).may_take(bg, 2));
        assert!(at(1, 1, 0).may_take(fg, 2));
        // A start waits: no tier-up starts, even on a free slot.
        assert!(!at(0, 0, 1).may_take(bg, 4));
        assert!(at(2, 0, 0).may_take(bg, 4) && !at(3, 3, 0).may_take(bg, 4));
        // Starts take every slot; one slot: a tier-up takes it only while no start waits.
        assert!(at(3, 2, 0).may_take(fg, 4) && !at(4, 2, 0).may_take(fg, 4));
        assert!(at(0, 0, 0).may_take(bg, 1) && !at(0, 0, 1).may_take(bg, 1));
    }

    #[test]
    fn a_start_goes_before_a_tier_up_when_a_slot_frees() {
        let slots = Arc::new(CompileSlots::new(1));
        let first = slots.take(Urgency::Foreground);
        let order = Arc::new(Mutex::new(Vec::new()));
        let spawn = |urgency, name: &'static str| {
            let (slots, order) = (slots.clone(), order.clone());
            std::thread::spawn(move || {
                let _slot = slots.take(urgency);
                order.lock().unwrap().push(name);
            })
        };
        let waiting = |n: usize| {
            let (slots, want) = (slots.clone(), n);
            move || {
                let st = slots.state.lock().unwrap();
                st.foreground_waiting == want
            }
        };
        let tier_up = spawn(Urgency::Background, "tier-up");
        let start = spawn(Urgency::Foreground, "start");
        let started_waiting = waiting(1);
        while !started_waiting() {
            std::thread::yield_now();
        }
        drop(first);
        start.join().unwrap();
        tier_up.join().unwrap();
        assert_eq!(*order.lock().unwrap(), ["start", "tier-up"]);
    }
}
